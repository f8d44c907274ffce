"""--self-check's verdict: are all the outputs there and complete? Never looks at how fast."""

from __future__ import annotations

import json
import math
from pathlib import Path

from .results import unsupported_reason

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
REQUIRED_META = ["command", "started", "finished", "scale", "runs", "interleave", "machine", "versions", "peer_settings",
                 "families"]
REQUIRED_MACHINE = ["host", "cpu", "cores", "memory_gib", "kernel"]
REQUIRED_VERSIONS = ["msfs", "garage", "fio", "mount-s3", "s3fs", "rclone", "git"]


def problems(json_path: Path, md_path: Path, pngs: list[Path], workloads: list[str], peers: list[str]) -> list[str]:
    """Everything missing or malformed in the outputs of a run of `workloads` on `peers`."""
    found: list[str] = []
    if not json_path.is_file():
        return [f"missing {json_path}"]
    try:
        doc = json.loads(json_path.read_text())
    except ValueError as e:
        return [f"{json_path}: not JSON ({e})"]
    found += [f"JSON lacks '{k}'" for k in REQUIRED_META if k not in doc]
    found += [f"JSON machine lacks '{k}'" for k in REQUIRED_MACHINE if not doc.get("machine", {}).get(k)]
    found += [f"JSON versions lack '{k}'" for k in REQUIRED_VERSIONS if not doc.get("versions", {}).get(k)]
    cells = {(c["workload"], c["peer"]): c for c in doc.get("results", [])}
    described = {w["name"]: w for w in doc.get("workloads", [])}
    no_raw = {name for name, w in described.items() if not w.get("has_raw", True)}
    # Workloads only some peers run (msfs's manifests) have no cell for the others.
    elsewhere = {(name, p) for name, w in described.items() if w.get("peers") for p in peers
                 if p != "raw" and p not in w["peers"]}
    for w in workloads:
        for p in peers:
            if (p == "raw" and w in no_raw) or (w, p) in elsewhere:
                continue
            c = cells.get((w, p))
            if c is None:
                found.append(f"no result for {w} on {p}")
            elif c.get("error"):
                if not unsupported_reason(doc, w, p):  # a failure the peer declares is expected
                    found.append(f"{w} on {p} failed: {c['error']}")
            elif not c.get("runs") or not all(_positive(r.get("value")) for r in c["runs"]):
                found.append(f"{w} on {p}: no positive measurement")
    if not md_path.is_file():
        found.append(f"missing {md_path}")
    else:
        table = md_path.read_text()
        found += [f"table has no row for {w}" for w in workloads if f"| {w} (" not in table]
        found += [f"table has no column for {p}" for p in peers if p != "raw" and f" {p} |" not in table]
        if any(not described.get(w, {}).get("peers") for w in workloads) and "msfs/raw" not in table:
            found.append("table has no msfs/raw ratio")
        limited = [w for w in workloads if described.get(w, {}).get("peers")]
        if any(described[w].get("reference") for w in limited) and "/reference |" not in table:
            found.append("table has no reference column for the workloads that have one")
        if "write-fsync" in workloads and "fsync (write-fsync):" not in table:
            found.append("table does not say whose fsync waited for the store")
        if doc.get("interleave") and "interleaved" not in table:  # `--self-check --interleave`
            found.append("table does not say the runs were interleaved")
    families = set(doc.get("families", {}))
    expected_pngs = {f for f in families if any(w["family"] == f and w["name"] in workloads for w in doc.get("workloads", []))}
    for fam in expected_pngs:
        if not any(p.name.endswith(f"-{fam}.png") for p in pngs):
            found.append(f"no chart for family {fam}")
    for png in pngs:
        if not png.is_file() or png.stat().st_size < 1000 or png.read_bytes()[:8] != PNG_MAGIC:
            found.append(f"{png} is not a PNG chart")
    return found


def _positive(v: object) -> bool:
    return isinstance(v, (int, float)) and math.isfinite(v) and v > 0
