"""The FUSE filesystems under test and how each is mounted with equivalent settings.

Equivalence, as far as each peer allows it (bench/README.md explains the gaps):
  * same server, bucket, credentials, path-style requests, region us-east-1, read-only — and
    writable, with close() made durable where the peer can (`writable`), for the write cells;
  * same cache budget (`Scale.cache_bytes`) where the peer has a bounded cache;
  * metadata trusted for 10 s (msfs `entry_attr_ttl`, mount-s3 `--metadata-ttl`, s3fs
    `stat_cache_expire`, rclone `--attr-timeout`/`--dir-cache-time`), mtimes from the server's
    LastModified;
  * the same FUSE connection tuning (fusectl.py), applied after every mount;
  * a cold mount starts with an empty cache directory.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any

from .fusectl import FuseControl
from .install import Binaries
from .scale import MiB, Scale
from .server import S3Server
from .shell import log, pid_alive, run, wait_pid_gone

ATTR_TTL_SECONDS = 10  # msfs's default entry_attr_ttl (10,000 ms), given to every peer
# 1 MiB lines (msfs's README advice for small files and random reads): every file takes at least one
# line, so with the default 10 MiB lines the 1,024 + 1,000 small files would need 20 GiB of cache;
# with 1 MiB lines the same byte budget as the other peers holds every data set.
MSFS_LINE_SIZE = 1 * MiB
# 32 lines of read-ahead = 32 MiB ahead of a sequential reader, fetched in runs of 8 MiB: the same
# bytes in flight as the raw client's 4 x 8 MiB GETs (the default window is 4 x 10 MiB = 40 MiB;
# with 16 lines, runs of 4 MiB, a cold 1 GiB read was 5-10% slower here).
MSFS_PREFETCH_LINES = 32
# 1 MiB FUSE requests (the README's advice for throughput; the CSI plugin's setting): the kernel
# sizes read requests by max_write too, and 128 KiB ones cost msfs about 8% more CPU per byte.
MSFS_MAX_WRITE = 1 * MiB


def is_mounted(path: Path) -> bool:
    target = str(path)
    for line in Path("/proc/self/mounts").read_text().splitlines():
        fields = line.split()
        if len(fields) > 1 and fields[1] == target:
            return True
    return False


class Filesystem(ABC):
    """One peer: mounts the bucket at `mountpoint`; its objects appear under `root`."""

    name = ""
    commands: list[str] = []  # what must be on PATH (installed from Debian by install.py)
    mount_timeout = 60.0  # seconds a mount may take before it counts as failed
    # Whether close() returns only once written data is in the store (else write cells wait for
    # the store on the clock).
    durable_on_close = True
    # Workloads (name patterns) doing what the peer cannot do, and why. Their cells still run and
    # fail with the peer's own error (no result is made up); the table then says why, and the
    # self-check expects those failures.
    unsupported: dict[str, str] = {}

    def __init__(self, work: Path, server: S3Server, scale: Scale, fusectl: FuseControl, binaries: Binaries):
        self.work = work
        self.server = server
        self.scale = scale
        self.fusectl = fusectl
        self.binaries = binaries
        self.mountpoint = work / "mnt" / self.name
        self.cache_dir = work / "cache" / self.name
        self.log_dir = work / "logs" / self.name
        self.pid: int | None = None
        self.tuning: dict[str, int] = {}
        self.writable = False  # the mode of the next mount (read-only unless a workload writes)
        for d in (self.mountpoint, self.log_dir):
            d.mkdir(parents=True, exist_ok=True)

    @property
    def root(self) -> Path:
        return self.mountpoint

    @abstractmethod
    def _start(self) -> int:
        """Starts the daemon; returns its PID (the mount may not be live yet)."""

    @abstractmethod
    def settings(self, writable: bool | None = None) -> dict[str, Any]:
        """The mount settings, as recorded in the results (default: of the current mode)."""

    def _writable(self, writable: bool | None) -> bool:
        return self.writable if writable is None else writable

    def log_tail(self, lines: int = 15) -> str:
        texts = [p.read_text(errors="replace") for p in sorted(self.log_dir.glob("*.log"))]
        return "\n".join("\n".join(texts).splitlines()[-lines:])

    def mount(self, keep_cache: bool = False) -> None:
        """Mounts with an empty cache (or, with `keep_cache`, over what the cache directory
        holds), waits for the mount, applies the FUSE tuning."""
        if not keep_cache:
            shutil.rmtree(self.cache_dir, ignore_errors=True)
        self.cache_dir.mkdir(parents=True, exist_ok=True)
        self.pid = self._start()
        deadline = time.monotonic() + self.mount_timeout
        while not is_mounted(self.mountpoint):
            if not pid_alive(self.pid) or time.monotonic() > deadline:
                raise RuntimeError(f"{self.name} did not mount {self.mountpoint}:\n{self.log_tail()}")
            time.sleep(0.05)
        self.tuning = self.fusectl.tune(self.mountpoint)

    def unmount(self) -> None:
        """Unmounts and waits for the daemon (ours, by PID) to exit."""
        for attempt in range(20):
            if not is_mounted(self.mountpoint):
                break
            lazy = ["-l"] if attempt == 19 else []  # a reader we could not stop keeps it busy
            run(["umount", *lazy, str(self.mountpoint)], check=False)
            time.sleep(0.1 if is_mounted(self.mountpoint) else 0)
        if self.pid is not None:
            if not wait_pid_gone(self.pid, 20):
                log(f"{self.name} (pid {self.pid}) still running after unmount; terminating it")
                os.kill(self.pid, signal.SIGTERM)
                if not wait_pid_gone(self.pid, 5):
                    os.kill(self.pid, signal.SIGKILL)
                    wait_pid_gone(self.pid, 5)
            self._reap()
            self.pid = None

    def _reap(self) -> None:
        """Collects the exit status of daemons that are our children (foreground peers)."""

    def remount(self) -> None:
        self.unmount()
        self.mount()

    def restart(self) -> None:
        """A new process over the same cache directory, as after a crash or an upgrade."""
        self.unmount()
        self.mount(keep_cache=True)


class ForegroundFilesystem(Filesystem):
    """A peer whose daemon runs in the foreground as our child, so we own its PID and exit."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path: Path | None = None  # the running daemon's output

    def _spawn(self, cmd: list[str], env: dict[str, str]) -> int:
        self.log_path = self.log_dir / f"{self.name}-{int(time.time() * 1000)}.log"
        logfile = open(self.log_path, "wb")
        self.proc = subprocess.Popen(
            cmd, env=env, stdin=subprocess.DEVNULL, stdout=logfile, stderr=subprocess.STDOUT,
            start_new_session=True,  # Ctrl-C reaches the harness, which then unmounts in order
        )
        logfile.close()
        return self.proc.pid

    def _reap(self) -> None:
        if self.proc is not None:
            self.proc.wait(timeout=5)
            self.proc = None


class Msfs(Filesystem):
    """msfs through `mount.msfs` (the production path: daemonized, pid file, returns when live)."""

    name = "msfs"
    BACKEND = "bench"  # msfs shows each backend as a directory under the mountpoint
    EXTRA_ENV: dict[str, str] = {}  # for the daemon, beside the harness's own

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.config = self.work / f"{self.name}.yaml"
        self.helper = self.work / "bin" / "mount.msfs"  # mount.msfs is msfs under another name

    @property
    def binary(self) -> Path:
        """The msfs executable this peer mounts with."""
        return self.binaries.msfs

    @property
    def root(self) -> Path:
        return self.mountpoint / self.BACKEND

    def settings(self, writable: bool | None = None) -> dict[str, Any]:
        backend: dict[str, Any] = {"readonly": True}
        if self._writable(writable):
            # close() returns once the object is committed: durable, like s3fs's upload in flush.
            backend = {"readonly": False, "flush_on_close": True}
        return {**msfs_settings(self.cache_dir, self.scale.cache_bytes), "backend": backend}

    def _write_config(self) -> None:
        env = self.server.env
        settings = self.settings()
        backend = settings.pop("backend")
        lines = ["msfs_version: 1"]
        lines += [f"{k}: {_yaml(v)}" for k, v in settings.items()]
        lines += [
            "backends:",
            f"  - dir_name: {self.BACKEND}",
            "    backend_type: S3",
            f"    bucket_container_name: {self.server.bucket}",
            *[f"    {k}: {_yaml(v)}" for k, v in backend.items()],
            "    S3:",
            f"      endpoint: {self.server.endpoint}",
            "      region: us-east-1",
            f"      access_key_id: {env['AWS_ACCESS_KEY_ID']}",
            f"      secret_access_key: {env['AWS_SECRET_ACCESS_KEY']}",
        ]
        self.config.write_text("\n".join(lines) + "\n")

    def _start(self) -> int:
        self._write_config()
        self.helper.parent.mkdir(parents=True, exist_ok=True)
        if not self.helper.is_symlink():
            self.helper.symlink_to(self.binary)
        env = {**os.environ, "MSFS_LOG_DIR": str(self.log_dir), **self.EXTRA_ENV}
        env.pop("MSFS_BINARY", None)
        run([self.helper, self.config, self.mountpoint], env=env, timeout=90)
        return self._daemon_pid()

    def _daemon_pid(self) -> int:
        """mount.msfs records `pid\\nmountpoint` in MSFS_LOG_DIR/msfs_<epoch>_<pid>.pid."""
        for pid_file in sorted(self.log_dir.glob("msfs_*.pid"), key=lambda p: p.stat().st_mtime, reverse=True):
            lines = pid_file.read_text().split("\n")
            if len(lines) > 1 and Path(lines[1].strip()) == self.mountpoint:
                return int(lines[0])
        raise RuntimeError(f"mount.msfs left no pid file for {self.mountpoint} in {self.log_dir}")


class MsfsBase(Msfs):
    """msfs as an earlier commit built it (`MSFS_BASE_BINARY`: that build's `msfs`), with this
    peer's settings: beside `msfs` in one `--interleave` run, the regression check of a change.
    This machine moves 30-40% between runs minutes apart, so only builds taking turns compare."""

    name = "msfs-base"

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        base = os.environ.get("MSFS_BASE_BINARY", "")
        if not base or not os.access(base, os.X_OK):
            raise RuntimeError("msfs-base: set MSFS_BASE_BINARY to an earlier build's msfs executable")
        self.base_binary = Path(base).resolve()
        self.helper = self.work / "bin" / self.name / "mount.msfs"

    @property
    def binary(self) -> Path:
        return self.base_binary


class MsfsWithoutHolder(Msfs):
    """msfs without its fd holder (`MSFS_NO_FD_HOLDER=1`), and so without the kernel-state journal
    a successor would restore: beside `msfs`, what surviving a crash (issue #19) costs."""

    name = "msfs-no-holder"
    EXTRA_ENV = {"MSFS_NO_FD_HOLDER": "1"}


class MsfsWriteback(Msfs):
    """msfs with the kernel's writeback cache (`fuse_writeback_cache: true`, off by default):
    beside `msfs`, what merging writes in the page cache gives (issue #21)."""

    name = "msfs-writeback"

    def settings(self, writable: bool | None = None) -> dict[str, Any]:
        return {**super().settings(writable), "fuse_writeback_cache": True}


class MsfsIoUring(Msfs):
    """msfs served over FUSE over io_uring (`fuse_io_uring: true`, off by default; msfs turns
    on the kernel's `fuse.enable_uring` itself, as root): beside `msfs`, what per-CPU rings and
    a ring thread that polls after answering give (issue #20)."""

    name = "msfs-io-uring"

    def settings(self, writable: bool | None = None) -> dict[str, Any]:
        return {**super().settings(writable), "fuse_io_uring": True}


class MsfsCloseInBackground(Msfs):
    """msfs with its default `flush_on_close: false`: close() returns at once and the commit
    runs in the background (up to `write_commit_workers` at a time), so, like rclone, its write
    cells are timed until the store holds what was written. Beside `msfs` (close returns once
    the object is stored), what the defaults give a writer that waits for durability at the end
    of its work rather than at every close (issue #21)."""

    name = "msfs-close-in-background"
    durable_on_close = False

    def settings(self, writable: bool | None = None) -> dict[str, Any]:
        settings = super().settings(writable)
        if self._writable(writable):
            settings["backend"] = {**settings["backend"], "flush_on_close": False}
        return settings


class MsfsPassthrough(Msfs):
    """msfs with FUSE passthrough (`fuse_passthrough: true` over `per-inode-file` storage, both
    off by default): beside `msfs`, what letting the kernel read wholly cached objects from
    their cache files gives (issue #20). Cold reads go through msfs as usual; warm ones whose
    object is whole in the cache never reach it."""

    name = "msfs-passthrough"

    def settings(self, writable: bool | None = None) -> dict[str, Any]:
        return {**super().settings(writable), "cache_storage": "per-inode-file", "fuse_passthrough": True}


class MsfsPersistent(Msfs):
    """msfs with `cache_persistent: true` (off by default): its cached lines outlive the
    process, so a restart reads them back from its cache directory instead of the server
    (issue #22; the `restart-warm` workload)."""

    name = "msfs-persistent"

    def settings(self, writable: bool | None = None) -> dict[str, Any]:
        return {**super().settings(writable), "cache_persistent": True}


class MsfsPosix(Msfs):
    """msfs with `posix_metadata: true` (off by default): each object's own mode, owner and
    times, read by a HEAD per object that LIST does not describe (issue #23). Beside `msfs`,
    what `ls -l` and `find` pay for them."""

    name = "msfs-posix"

    def settings(self, writable: bool | None = None) -> dict[str, Any]:
        settings = super().settings(writable)
        return {**settings, "backend": {**settings["backend"], "posix_metadata": True}}


def ram_tier_lines(scale: Any) -> int:
    """The RAM tier of `msfs-tiered` and the whole cache of `msfs-small-ram`: half the large
    object, so that reading it needs more than RAM holds (the `tiered` workload)."""
    return max(2 * MSFS_PREFETCH_LINES, scale.large_size // 2 // MSFS_LINE_SIZE)


class MsfsTiered(Msfs):
    """msfs with `cache_storage: tiered` (off by default): a RAM tier of half the large object
    over a disk tier of the rest of the budget (issue #22). Beside `msfs-small-ram` (the same
    RAM, no disk tier), what the disk tier keeps from the server; beside `msfs`, what moving
    lines between the tiers costs."""

    name = "msfs-tiered"

    def settings(self, writable: bool | None = None) -> dict[str, Any]:
        settings = super().settings(writable)
        ram_lines = ram_tier_lines(self.scale)
        disk_lines = max(ram_lines, settings["cache_lines"] - ram_lines)
        return {**settings, "cache_storage": "tiered", "cache_lines": disk_lines, "cache_ram_lines": ram_lines}


class MsfsSmallRam(Msfs):
    """msfs with only `msfs-tiered`'s RAM tier for a cache (RAM, no disk tier): what the same
    memory gives without tiers."""

    name = "msfs-small-ram"

    def settings(self, writable: bool | None = None) -> dict[str, Any]:
        settings = super().settings(writable)
        return {**settings, "cache_storage": "ram", "cache_lines": ram_tier_lines(self.scale)}


def msfs_settings(cache_dir: Path, cache_bytes: int) -> dict[str, Any]:
    """The top-level settings of every msfs the harness mounts."""
    return {
        "mountname": "msfs-bench",
        "allow_other": True,
        "entry_attr_ttl": ATTR_TTL_SECONDS * 1000,
        "max_write": MSFS_MAX_WRITE,
        "cache_storage": "mapped-file",
        "cache_line_size": MSFS_LINE_SIZE,
        "cache_lines": max(2 * MSFS_PREFETCH_LINES, cache_bytes // MSFS_LINE_SIZE),
        "cache_lines_to_prefetch": MSFS_PREFETCH_LINES,
        "cache_dir_path": str(cache_dir),
    }


class PseudoMsfs(ForegroundFilesystem):
    """msfs over a generated `PSEUDO` namespace, for the manifest runs (workloads/manifest.py):
    the msfs peer's binary and settings, one read-only PSEUDO backend with `manifest_path`, the
    same FUSE tuning after mounting. It runs `msfs mount` in the foreground as our child, with
    JSON log lines the harness reads (`manifest index ready`), rather than through mount.msfs,
    which gives up after 60 s — less than a mount that first generates a big manifest takes.
    Its own mountpoint, cache and logs (`<work>/mnt/msfs-<tag>`), so it runs beside the peer's
    S3 mount. `write_config` alone serves `msfs generate-manifest`."""

    BACKEND = "pseudo"
    CACHE_BYTES = 32 * MiB  # reads play no part; a small cache keeps it out of the peak RSS

    def __init__(self, peer: Filesystem, tag: str, pseudo: dict[str, Any], manifest: Path, timeout: float):
        self.name = f"msfs-{tag}"  # names its directories (read by Filesystem.__init__)
        super().__init__(peer.work, peer.server, peer.scale, peer.fusectl, peer.binaries)
        self.pseudo = pseudo
        self.manifest = manifest
        self.mount_timeout = timeout
        self.config = self.work / f"{self.name}.yaml"

    @property
    def root(self) -> Path:
        return self.mountpoint / self.BACKEND

    def settings(self, writable: bool | None = None) -> dict[str, Any]:
        backend = {"readonly": True, "manifest_path": str(self.manifest), "PSEUDO": self.pseudo}
        return {**msfs_settings(self.cache_dir, self.CACHE_BYTES), "backend": backend}

    def write_config(self) -> Path:
        settings = self.settings()
        backend = settings.pop("backend")
        pseudo = backend.pop("PSEUDO")
        lines = ["msfs_version: 1"]
        lines += [f"{k}: {_yaml(v)}" for k, v in settings.items()]
        lines += ["backends:", f"  - dir_name: {self.BACKEND}", "    backend_type: PSEUDO"]
        lines += [f"    {k}: {_yaml(v)}" for k, v in backend.items()]
        lines += ["    PSEUDO:", *[f"      {k}: {_yaml(v)}" for k, v in pseudo.items()]]
        self.config.write_text("\n".join(lines) + "\n")
        return self.config

    def command(self, *args: str | Path) -> list[str]:
        """`msfs --log-format json ARGS...` (the same binary as the msfs peer)."""
        return [str(self.binaries.msfs), "--log-format", "json", *map(str, args)]

    @staticmethod
    def environment() -> dict[str, str]:
        # Info lines are what the harness reads, whatever RUST_LOG the caller has.
        return {**os.environ, "RUST_LOG": "info,fuser::session=error"}

    def _start(self) -> int:
        self.write_config()
        return self._spawn(self.command("mount", self.config, self.mountpoint), self.environment())


class S3fs(ForegroundFilesystem):
    """s3fs-fuse from Debian, with its disk cache (it has no size bound: see the README). Writable,
    it uploads a file in its flush (close), so close() is durable as it is."""

    name = "s3fs"
    commands = ["s3fs"]

    def settings(self, writable: bool | None = None) -> dict[str, Any]:
        out: dict[str, Any] = {
            "url": self.server.endpoint,
            "use_path_request_style": True,
            "endpoint": "us-east-1",
            "use_cache": str(self.cache_dir),
            "stat_cache_expire": ATTR_TTL_SECONDS,
            "allow_other": True,
        }
        if not self._writable(writable):
            out["ro"] = True
        return out

    def _start(self) -> int:
        env = self.server.env
        passwd = self.work / "s3fs.passwd"
        passwd.write_text(f"{env['AWS_ACCESS_KEY_ID']}:{env['AWS_SECRET_ACCESS_KEY']}\n")
        passwd.chmod(0o600)
        opts = [f"passwd_file={passwd}"]
        for key, value in self.settings().items():
            opts.append(key if value is True else f"{key}={value}")
        cmd = ["s3fs", self.server.bucket, str(self.mountpoint), "-f", "-o", ",".join(opts)]
        return self._spawn(cmd, dict(os.environ))


class Rclone(ForegroundFilesystem):
    """rclone mount from Debian with its full VFS cache, bounded to the same size as msfs's.
    Writable, it uses `--vfs-cache-mode writes` and uploads after close() has returned (no flag
    makes close wait), starting at once (`--vfs-write-back 0s`, not 5 s later)."""

    name = "rclone"
    commands = ["rclone"]
    durable_on_close = False

    def settings(self, writable: bool | None = None) -> dict[str, Any]:
        mode = {"--vfs-cache-mode": "writes", "--vfs-write-back": "0s"} if self._writable(writable) else {
            "--read-only": True, "--vfs-cache-mode": "full"}
        return {
            **mode,
            "--allow-other": True,
            "--vfs-cache-max-size": f"{self.scale.cache_bytes // MiB}M",
            "--cache-dir": str(self.cache_dir),
            "--dir-cache-time": f"{ATTR_TTL_SECONDS}s",
            "--attr-timeout": f"{ATTR_TTL_SECONDS}s",
            # msfs and s3fs show LastModified; without this rclone HEADs every object for its
            # own mtime metadata on `ls -l`.
            "--use-server-modtime": True,
            "s3 force_path_style": True,
        }

    def _config(self) -> Path:
        env = self.server.env
        conf = self.work / "rclone.conf"
        conf.write_text(
            "[bench]\ntype = s3\nprovider = Other\nenv_auth = false\n"
            f"access_key_id = {env['AWS_ACCESS_KEY_ID']}\n"
            f"secret_access_key = {env['AWS_SECRET_ACCESS_KEY']}\n"
            f"endpoint = {self.server.endpoint}\nregion = us-east-1\n"
            "force_path_style = true\nno_check_bucket = true\n"
        )
        conf.chmod(0o600)
        return conf

    def _start(self) -> int:
        flags: list[str] = []
        for key, value in self.settings().items():
            if key.startswith("--"):
                flags += [key] if value is True else [key, str(value)]
        cmd = [
            "rclone", "mount", f"bench:{self.server.bucket}", str(self.mountpoint),
            "--config", str(self._config()), *flags, "--log-level", "NOTICE",
        ]
        env = dict(os.environ)
        # rclone 1.60's S3 backend cannot apply a custom CA bundle to its own HTTP transport and
        # fails with LoadCustomCABundleError when this is set (it is, on these machines).
        env.pop("AWS_CA_BUNDLE", None)
        return self._spawn(cmd, env)


class MountS3(ForegroundFilesystem):
    """mount-s3: AWS's Mountpoint for Amazon S3, release 1.24's engine (mountpoint-s3-fs 0.11)
    behind our own small binary (bench/peers/mount-s3, built by install.py), with its local data
    cache (`--cache`) bounded like the others. Otherwise mount-s3's defaults: 8 MiB parts, its
    prefetcher, 16 FUSE threads, a memory target of 95% of RAM. Writable, it may create files
    (uploaded by close(): durable as it is), replace them whole (`--allow-overwrite`, O_TRUNC
    only) and unlink them (`--allow-delete`); it never writes into an existing object or renames
    one, so those cells fail on it with the error the operation gets."""

    name = "mount-s3"
    unsupported = {
        "write-rand-*": "mount-s3 cannot write into an existing object: it opens one for writing "
        "only with O_TRUNC, to replace it whole",
    }

    def settings(self, writable: bool | None = None) -> dict[str, Any]:
        mode = {"--allow-overwrite": True, "--allow-delete": True} if self._writable(writable) else {
            "--read-only": True}
        return {
            **mode,
            "--endpoint-url": self.server.endpoint,
            "--region": "us-east-1",
            "--force-path-style": True,
            "--allow-other": True,
            "--cache": str(self.cache_dir),
            "--max-cache-size": self.scale.cache_bytes // MiB,  # MiB
            # mount-s3 would trust metadata for 60 s once --cache is on; the harness's 10 s instead.
            "--metadata-ttl": ATTR_TTL_SECONDS,
            # mount-s3's defaults, passed so that the record says what ran.
            "--part-size": 8 * MiB,
            "--max-threads": 16,
            # Its defaults with no flag (recorded only): bench/peers/mount-s3/src/main.rs.
            "memory target": "95% of RAM (mount-s3's default; min 512 MiB)",
            "read-ahead": "mount-s3's prefetcher: a first 1.125 MiB GET, then a window doubling up to 2 GiB",
            "cache block": "1 MiB (mount-s3's default)",
            "throughput target": "10 Gbps (mount-s3's default off EC2)",
        }

    def _start(self) -> int:
        if self.binaries.mount_s3 is None:
            raise RuntimeError("the mount-s3 peer is not built (install.build_mount_s3)")
        flags: list[str] = []
        for key, value in self.settings().items():
            if key.startswith("--"):
                flags += [key] if value is True else [key, str(value)]
        cmd = [str(self.binaries.mount_s3), self.server.bucket, str(self.mountpoint), *flags,
               "--log-directory", str(self.log_dir)]
        env = {**os.environ, **{k: self.server.env[k] for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")}}
        env.pop("AWS_SESSION_TOKEN", None)  # the binary would send it along with garage's key
        return self._spawn(cmd, env)


def _yaml(value: object) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, str) and (not value or any(c in value for c in ":#%{}[]&*!|>'\"@`")):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return str(value)


PEERS: dict[str, type[Filesystem]] = {
    "msfs": Msfs,
    "msfs-base": MsfsBase,
    "msfs-no-holder": MsfsWithoutHolder,
    "msfs-writeback": MsfsWriteback,
    "msfs-io-uring": MsfsIoUring,
    "msfs-close-in-background": MsfsCloseInBackground,
    "msfs-passthrough": MsfsPassthrough,
    "msfs-persistent": MsfsPersistent,
    "msfs-posix": MsfsPosix,
    "msfs-tiered": MsfsTiered,
    "msfs-small-ram": MsfsSmallRam,
    "mount-s3": MountS3,
    "s3fs": S3fs,
    "rclone": Rclone,
}
