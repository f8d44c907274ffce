"""Getting the machine ready: Debian packages, the S3 server, the msfs binaries and the mount-s3
peer's own binary.

Everything is idempotent: a step runs only when what it produces is missing (or, for the
mount-s3 peer, older than its sources).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from .shell import log, run, run_streaming

REPO = Path(__file__).resolve().parents[2]

# Which Debian package provides each command a peer or workload needs.
PACKAGE_OF = {"fio": "fio", "s3fs": "s3fs", "rclone": "rclone"}


# The mount-s3 peer (bench/peers/mount-s3): a binary of our own over AWS's mountpoint-s3 crates,
# built with a target dir of its own, never part of the product's workspace or of the self-check.
MOUNT_S3_DIR = REPO / "bench" / "peers" / "mount-s3"
MOUNT_S3_BINARY = MOUNT_S3_DIR / "target" / "release" / "mount-s3"
# What building it needs: cmake and libclang (bindgen) for the AWS CRT it compiles, pkg-config and
# the libfuse3 headers for its FUSE library.
MOUNT_S3_BUILD_PACKAGES = ["cmake", "libclang-dev", "pkg-config", "libfuse3-dev"]


def _dpkg_installed(package: str) -> bool:
    proc = subprocess.run(
        ["dpkg-query", "-W", "-f=${Status}", package], capture_output=True, text=True
    )
    return "install ok installed" in proc.stdout


def ensure_commands(commands: list[str]) -> None:
    """Installs the Debian packages behind `commands` that are not on PATH yet."""
    _apt_install([PACKAGE_OF[c] for c in commands if shutil.which(c) is None])


def ensure_packages(packages: list[str]) -> None:
    """Installs the Debian packages (libraries, headers: nothing on PATH to look for) not installed yet."""
    _apt_install([p for p in packages if not _dpkg_installed(p)])


def _apt_install(missing: list[str]) -> None:
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
    mount_s3: Path | None = None  # built only when the mount-s3 peer runs


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


def mount_s3_sources() -> list[Path]:
    """What the mount-s3 binary is built from: its manifest, lock file and Rust sources."""
    return [MOUNT_S3_DIR / "Cargo.toml", MOUNT_S3_DIR / "Cargo.lock", *sorted((MOUNT_S3_DIR / "src").rglob("*.rs"))]


def mount_s3_ready() -> bool:
    """The mount-s3 binary exists and is newer than everything it is built from (no build needed)."""
    if not MOUNT_S3_BINARY.exists():
        return False
    built = MOUNT_S3_BINARY.stat().st_mtime
    return all(src.stat().st_mtime <= built for src in mount_s3_sources())


def build_mount_s3() -> Path:
    """Builds the mount-s3 peer when its binary is missing or stale: release, `--locked`, in its own
    target dir (bench/peers/mount-s3/target), under `nice` (the CRT's C build is long on 2 cores:
    see the README). The build's Debian packages are installed first, only then."""
    if mount_s3_ready():
        return MOUNT_S3_BINARY
    ensure_packages(MOUNT_S3_BUILD_PACKAGES)
    log("building the mount-s3 peer (first time: the AWS CRT too)")
    started = time.monotonic()
    # --target-dir: its own, whatever CARGO_TARGET_DIR says (that one is the product's).
    run_streaming(["nice", cargo(), "build", "--release", "--locked", "--target-dir", str(MOUNT_S3_DIR / "target")],
                  cwd=MOUNT_S3_DIR)
    if not MOUNT_S3_BINARY.exists():
        raise RuntimeError(f"build finished but {MOUNT_S3_BINARY} is missing")
    MOUNT_S3_BINARY.touch()  # cargo leaves an up-to-date binary's mtime alone; ready() compares it
    log(f"mount-s3 peer built in {time.monotonic() - started:.0f} s")
    return MOUNT_S3_BINARY
