"""Getting the machine ready: Debian packages, the S3 server, and the msfs binaries.

Everything is idempotent: a step runs only when what it produces is missing.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from .shell import log, run, run_streaming

REPO = Path(__file__).resolve().parents[2]

# Which Debian package provides each command a peer or workload needs.
PACKAGE_OF = {"fio": "fio", "s3fs": "s3fs", "rclone": "rclone"}


def _dpkg_installed(package: str) -> bool:
    proc = subprocess.run(
        ["dpkg-query", "-W", "-f=${Status}", package], capture_output=True, text=True
    )
    return "install ok installed" in proc.stdout


def ensure_commands(commands: list[str]) -> None:
    """Installs the Debian packages behind `commands` that are not on PATH yet."""
    missing = [PACKAGE_OF[c] for c in commands if shutil.which(c) is None]
    if not missing:
        return
    log(f"installing Debian packages: {' '.join(missing)}")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    if not all(_dpkg_installed(p) for p in missing):
        run(["apt-get", "update"], env=env, timeout=900)
    run(["apt-get", "install", "-y", "--no-install-recommends", *missing], env=env, timeout=1800)


def ensure_test_deps() -> None:
    """fuse3 and garage 2.5.0 (the server local-s3.sh runs), via the repo's own installer."""
    run_streaming(["bash", str(REPO / "scripts" / "install-test-deps.sh")])


def cargo() -> str:
    found = shutil.which("cargo")
    if found:
        return found
    fallback = Path(os.environ.get("CARGO_HOME", Path.home() / ".cargo")) / "bin" / "cargo"
    if fallback.exists():
        return str(fallback)
    raise RuntimeError("cargo not found: install the Rust toolchain first")


@dataclass(frozen=True)
class Binaries:
    msfs: Path
    raw_read: Path
    profile: str


def build(profile: str) -> Binaries:
    """Builds msfs and the raw client. `release` for measurements; `dev` for the self-check, which
    reuses what `cargo test` already compiled (its numbers are not looked at)."""
    args = ["nice", cargo(), "build", "--locked", "--bin", "msfs", "--example", "raw_read"]
    if profile == "release":
        args.insert(3, "--release")
    run_streaming(args, cwd=REPO)
    meta = json.loads(
        run([cargo(), "metadata", "--format-version", "1", "--no-deps"], cwd=REPO).stdout
    )
    out = Path(meta["target_directory"]) / ("release" if profile == "release" else "debug")
    binaries = Binaries(msfs=out / "msfs", raw_read=out / "examples" / "raw_read", profile=profile)
    for path in (binaries.msfs, binaries.raw_read):
        if not path.exists():
            raise RuntimeError(f"build finished but {path} is missing")
    return binaries
