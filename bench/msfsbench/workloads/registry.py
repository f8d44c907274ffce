"""The workload registry: every benchmark cell is a named `Workload`, grouped into families.

A family is a function `Scale -> list[Workload]` registered with `@family(...)`; the harness
runs the families in registration order, and each family becomes one chart. Adding a workload
means adding an entry to a family (or a new family module imported by `workloads/__init__.py`);
nothing else in the harness changes.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from ..datasets import Datasets
from ..measure import Sample
from ..rawclient import RawClient
from ..scale import Scale

if TYPE_CHECKING:
    from ..filesystems import Filesystem


class Unit(Enum):
    MIB_S = "MiB/s"
    IOPS = "IOPS"
    OBJECTS_S = "objects/s"
    SECONDS = "s"
    MS = "ms"
    MIB = "MiB"  # memory (peak RSS)

    @property
    def higher_is_better(self) -> bool:
        return self in (Unit.MIB_S, Unit.IOPS, Unit.OBJECTS_S)


class State(Enum):
    COLD = "cold"  # before every run: fresh mount with an empty cache, then drop_caches
    #                (every write cell is cold: it starts from a fresh writable mount)
    WARM = "warm"  # once per mount: read the data set through the peer; every run: evict the
    #                mount's page cache for it, so the peer's own cache answers
    RESTARTED = "restarted"  # every run: read the data set through the peer, restart the peer's
    #                          process (its cache directory kept), evict the mount's page cache:
    #                          what a peer keeps across a restart answers, the rest is cold
    OWN = "own"  # the workload starts, stops and makes cold everything it measures itself (the
    #              manifest runs: msfs processes of their own on a PSEUDO namespace); the runner
    #              does nothing around it


@dataclass(frozen=True)
class Context:
    """What a workload's measuring function gets. `root` is where the bucket's keys appear on the
    mount (None when measuring the raw client); `peer` names the target ("raw" for the raw
    client); `durable_on_close` is False for a peer whose close() returns before its upload is
    done (a write cell then waits until the store holds what was written, on the clock); `fs` is
    the mounted peer itself (None for the raw client), for a workload that starts processes of
    its own with the peer's binaries and settings."""

    root: Path | None
    raw: RawClient
    data: Datasets
    scale: Scale
    workdir: Path
    peer: str
    durable_on_close: bool = True
    fs: Filesystem | None = None

    @property
    def mount(self) -> Path:
        if self.root is None:
            raise RuntimeError("this measurement needs a mounted filesystem")
        return self.root


Measure = Callable[[Context], Sample]


@dataclass(frozen=True)
class Reference:
    """A published figure the table and chart show beside a workload's own (e.g. the seed's
    manifest figures), with where it comes from and at what scale it was measured."""

    value: float
    source: str  # where and at what scale, e.g. "seed's user guide: 100M objects, c5a.12xlarge"
    published: str = ""  # the figure as published, when it reads differently ("1m 45s")
    comparable: bool = True  # False: measured at another size, so a ratio would mean nothing


@dataclass(frozen=True)
class Workload:
    name: str  # stable id, used by --only and in the results
    family: str
    title: str  # short label for tables and charts
    description: str  # what it measures (README and JSON)
    unit: Unit
    state: State
    dataset: str  # the data set it reads (warmed up for WARM)
    io: str  # "O_DIRECT", "buffered" or "metadata": stated in the table
    on_fs: Measure  # the measurement on a mounted peer
    on_raw: Measure | None  # the same bytes/requests through raw_read: the physical limit
    #                          (None: no raw limit exists, the raw column says n/a and why)
    raw_note: str  # how the raw client does it (or why there is no raw limit)
    est_seconds: float  # expected seconds per run per peer, for the duration estimate
    smoke: bool = False  # part of --self-check (one per family; the write family's fsync cell too)
    writes: bool = False  # needs a writable mount (peers are mounted read-only otherwise)
    peers: tuple[str, ...] | None = None  # the filesystems it runs on (None: every one); a
    #                                       feature only msfs has is ("msfs",)
    reference: Reference | None = None  # a published figure shown beside the result

    def runs_on(self, peer: str) -> bool:
        """Whether this workload has a cell for `peer` ("raw": the physical limit)."""
        if peer == "raw":
            return self.on_raw is not None
        return self.peers is None or peer in self.peers


@dataclass(frozen=True)
class Family:
    name: str
    title: str
    unit: Unit
    build: Callable[[Scale], list[Workload]]
    group: str  # --only selects a whole group by name (the write families share "write")


FAMILIES: list[Family] = []


def family(
    name: str, title: str, unit: Unit, group: str | None = None
) -> Callable[[Callable[[Scale], list[Workload]]], Callable[[Scale], list[Workload]]]:
    """Registers a family; one unit per family (one chart each), so a matrix that reports in
    several units is several families of one `group`."""

    def register(build: Callable[[Scale], list[Workload]]) -> Callable[[Scale], list[Workload]]:
        if any(f.name == name for f in FAMILIES):
            raise ValueError(f"workload family {name!r} registered twice")
        FAMILIES.append(Family(name, title, unit, build, group or name))
        return build

    return register


def all_workloads(scale: Scale) -> list[Workload]:
    out: list[Workload] = []
    for fam in FAMILIES:
        for w in fam.build(scale):
            if w.family != fam.name or w.unit != fam.unit:
                raise ValueError(f"workload {w.name} does not match its family {fam.name}")
            out.append(w)
    names = [w.name for w in out]
    if len(names) != len(set(names)):
        raise ValueError("duplicate workload names")
    return out


def family_of(name: str) -> Family:
    return next(f for f in FAMILIES if f.name == name)


def select(workloads: list[Workload], patterns: list[str] | None, smoke_only: bool) -> list[Workload]:
    """--only takes names, family or group names, or shell patterns (`rand-*`); order stays the
    registry's."""
    chosen = [w for w in workloads if w.smoke] if smoke_only else list(workloads)
    if patterns:
        unknown = [p for p in patterns if not any(_matches(w, p) for w in workloads)]
        if unknown:
            raise SystemExit(f"bench: no workload matches {', '.join(unknown)} (see --list)")
        chosen = [w for w in chosen if any(_matches(w, p) for p in patterns)]
    return chosen


def _matches(w: Workload, pattern: str) -> bool:
    return fnmatch.fnmatchcase(w.name, pattern) or pattern in (w.family, family_of(w.family).group)
