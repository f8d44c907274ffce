"""Machine facts and tool versions recorded with every result, so a number can be placed."""

from __future__ import annotations

import os
import platform
import socket
from pathlib import Path
from typing import Any

from .install import MOUNT_S3_BINARY, REPO
from .shell import run, version_of


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _mem_gib() -> float:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            return round(int(line.split()[1]) / 1024 / 1024, 1)
    return 0.0


def _os_name() -> str:
    try:
        for line in Path("/etc/os-release").read_text().splitlines():
            if line.startswith("PRETTY_NAME="):
                return line.split("=", 1)[1].strip('"')
    except OSError:
        pass
    return "unknown"


def load_average() -> list[float]:
    """1/5/15-minute load: other work on a shared 2-core machine shows up in the numbers."""
    return [float(x) for x in Path("/proc/loadavg").read_text().split()[:3]]


def host() -> str:
    return socket.gethostname().split(".")[0] or "host"


def machine() -> dict[str, Any]:
    return {
        "host": host(),
        "cpu": _cpu_model(),
        "cores": os.cpu_count(),
        "memory_gib": _mem_gib(),
        "kernel": platform.release(),
        "os": _os_name(),
    }


def git_revision() -> str:
    head = run(["git", "rev-parse", "--short=12", "HEAD"], cwd=REPO, check=False).stdout.strip()
    dirty = run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=REPO, check=False).stdout.strip()
    return f"{head}{' (uncommitted changes)' if dirty else ''}" if head else "unknown"


def tool_versions() -> dict[str, str]:
    import matplotlib  # the venv's; recorded because it drew the charts

    return {
        "fio": version_of(["fio", "--version"]),
        "s3fs": version_of(["s3fs", "--version"]),
        "rclone": version_of(["rclone", "version"]),
        # The binary says which mount-s3 release's engine (mountpoint-s3-fs) it is built on.
        "mount-s3": version_of([str(MOUNT_S3_BINARY), "--version"]) if MOUNT_S3_BINARY.exists()
        else "not built",
        "python": platform.python_version(),
        "matplotlib": matplotlib.__version__,
    }
