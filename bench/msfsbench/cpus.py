"""`--split-cpus`: the S3 server on one CPU, everything else (the filesystems, the workloads, the
raw client, this harness) on the others.

On a shared 2-core machine every CPU-second a filesystem spends is taken from the server, so a
ratio to the raw client measures CPU efficiency as much as speed. In production the server runs
elsewhere; pinning gives it a core of its own, so the server is the bottleneck again and the ratio
says how close a filesystem gets to it. Affinity is inherited: the harness pins itself before it
starts the server, then moves every thread of the server to its own CPU.
"""

from __future__ import annotations

import os
from pathlib import Path

SERVER_CPU = 0


def split() -> dict[str, list[int]]:
    """Pins this process (and so whatever it starts from now on) to every CPU but the server's;
    returns the split, as recorded with the results."""
    cpus = sorted(os.sched_getaffinity(0))
    if SERVER_CPU not in cpus or len(cpus) < 2:
        raise SystemExit(f"--split-cpus needs CPU {SERVER_CPU} and one more; this process may use {cpus}")
    others = [c for c in cpus if c != SERVER_CPU]
    os.sched_setaffinity(0, others)
    return {"server": [SERVER_CPU], "others": others}


def pin_process(pid: int, cpus: list[int]) -> None:
    """Moves every thread of `pid` to `cpus`; threads it starts later inherit the affinity."""
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            os.sched_setaffinity(int(task.name), cpus)
        except ProcessLookupError:  # a thread that just ended
            pass
