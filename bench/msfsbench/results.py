"""The results model: one `Cell` per (workload, peer), its repeated samples, and the JSON file."""

from __future__ import annotations

import fnmatch
import json
import statistics
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from .measure import NotMeasurable, Sample
from .workloads import Workload

RAW = "raw"  # the peer name of the physical limit
NOT_MEASURABLE = NotMeasurable.__name__ + ":"  # how the error of a cell that is no failure starts
SCHEMA = 1


@dataclass
class Cell:
    workload: str
    peer: str
    samples: list[Sample] = field(default_factory=list)
    error: str | None = None

    @property
    def not_measurable(self) -> bool:
        """Nothing went wrong, but the moment to measure did not come (e.g. the manifest index
        was ready before a measurement of the TSV path ended)."""
        return bool(self.error) and self.error.startswith(NOT_MEASURABLE)

    @property
    def ok(self) -> bool:
        return self.error is None and bool(self.samples)

    @property
    def values(self) -> list[float]:
        return [s.value for s in self.samples]

    @property
    def median(self) -> float:
        return statistics.median(self.values)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"workload": self.workload, "peer": self.peer, "error": self.error}
        out["runs"] = [asdict(s) for s in self.samples]
        if self.samples:
            out.update(median=self.median, min=min(self.values), max=max(self.values))
        return out

    @staticmethod
    def from_json(d: dict[str, Any]) -> "Cell":
        return Cell(d["workload"], d["peer"], [Sample(**s) for s in d["runs"]], d.get("error"))


def unsupported_reason(meta: dict[str, Any], workload: str, peer: str) -> str | None:
    """Why `peer` cannot do what `workload` does, if it says so (`Filesystem.unsupported`, recorded
    under `peer_settings`): its cell still ran and failed with the peer's own error; this only
    tells a reader, and the self-check, that the failure is the peer's known limit."""
    declared = meta.get("peer_settings", {}).get(peer, {}).get("unsupported", {})
    return next((why for pattern, why in declared.items() if fnmatch.fnmatchcase(workload, pattern)), None)


def describe_workload(w: Workload) -> dict[str, Any]:
    return {
        "name": w.name, "family": w.family, "title": w.title, "description": w.description,
        "unit": w.unit.value, "higher_is_better": w.unit.higher_is_better, "state": w.state.value,
        "io": w.io, "dataset": w.dataset, "raw": w.raw_note, "has_raw": w.on_raw is not None,
        "writes": w.writes, "peers": list(w.peers) if w.peers is not None else None,
        "reference": None if w.reference is None else {
            "value": w.reference.value, "source": w.reference.source, "published": w.reference.published,
            "comparable": w.reference.comparable},
    }


@dataclass
class Results:
    meta: dict[str, Any]  # command, dates, scale, machine, versions, peer settings
    workloads: list[dict[str, Any]]  # describe_workload() of each, in run order
    peers: list[str]  # in column order: msfs, the other filesystems, then raw
    cells: dict[tuple[str, str], Cell] = field(default_factory=dict)

    def cell(self, workload: str, peer: str) -> Cell:
        return self.cells.setdefault((workload, peer), Cell(workload, peer))

    def get(self, workload: str, peer: str) -> Cell | None:
        return self.cells.get((workload, peer))

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA, **self.meta, "peers": self.peers, "workloads": self.workloads,
            "results": [c.to_json() for c in self.cells.values()],
        }

    def save(self, path: Path) -> None:
        path.write_text(json.dumps(self.to_json(), indent=2, sort_keys=False) + "\n")

    @staticmethod
    def load(path: Path) -> "Results":
        d = json.loads(path.read_text())
        meta = {k: v for k, v in d.items() if k not in ("schema", "peers", "workloads", "results")}
        r = Results(meta, d["workloads"], d["peers"])
        for c in d["results"]:
            cell = Cell.from_json(c)
            r.cells[(cell.workload, cell.peer)] = cell
        return r
