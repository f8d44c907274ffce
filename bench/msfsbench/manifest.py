"""The manifest scale runs (issue 5): msfs's manifest engine on a generated PSEUDO namespace, one
phase after the other, the way an operator meets it. msfs only: no peer has manifests.

One *shape run* measures everything about one namespace shape (a directory tree, or one flat
directory) and is shared by every workload of that shape (workloads/manifest.py):

1. **generation**: `msfs generate-manifest` into an empty directory; wall time, objects/s (the
   objects `manifest_index.json` counts, checked against the shape), the process's peak RSS
   (wait4's ru_maxrss) and CPU time;
2. **ingest**: a mount of a read-only config whose `manifest_path` holds that manifest; the
   daemon ingests it into `_msfs_index.redb` in the background and logs `manifest index ready`
   (entries, seconds, entries/s): the ingest time is the daemon's own, the peak RSS is the
   mount process's VmHWM read at that moment (nothing has browsed the mount yet, so it is the
   ingest's); then, from the index: `ls -l` of a directory (a 1,000-entry one of the tree, the
   whole flat directory) and the mean `stat` latency over random files;
3. **browsable**: a mount whose `manifest_path` is an empty directory, so the mount generates the
   manifest first (msfs mounts once it is written): the time from starting the daemon until the
   mountpoint is a FUSE mount and a listing of it (the backend's directory) answers — the seed's
   "browsable when generation finishes". Its index is then building in the background, and while it
   is (the log has no `manifest index ready` yet) the same `stat` and `ls -l` measurements run
   against the TSV files. A measurement the index overtook before it ended is *not measurable*
   (NotMeasurable: the cell says so, with no number).

`stat` latency: the directories on the way are stat()ed first (not timed), so each timed stat()
is the lookup of one file — a FUSE LOOKUP the kernel has not cached (every file is stat()ed
once, and the two phases use different files and directories). Before the index, a lookup in a
directory reads that directory's TSV (the daemon keeps a few parsed); after, a few B-tree reads.

Page cache: the shape run starts with `drop_caches`; the TSVs are then where generation left
them (in the page cache, as after a real generation). Everything the run writes lives under the
run's work directory and is removed when the shape run ends.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from .filesystems import Filesystem, PseudoMsfs
from .measure import NotMeasurable, Sample
from .scale import MiB, Scale
from .shell import drop_caches, log, run_measured, timed, vm_hwm_bytes

DIR_FORMAT = "dir_%08X"  # the PSEUDO defaults, spelled out: the harness builds paths from them
FILE_FORMAT = "file_%08X"
FILE_SIZE = 64 * 1024  # every file's size (nothing is read; it shows in `ls -l` and stat)
READY = "manifest index ready"
INGESTING = "ingesting manifest"


def _dir(n: int) -> str:
    return f"dir_{n:08X}"


def _file(n: int) -> str:
    return f"file_{n:08X}"


@dataclass(frozen=True)
class Shape:
    """A PSEUDO namespace: `tree` is (directories at the root, sub-directories in each, files in
    each of those) with no other files; `flat` is that many files in the root and nothing else."""

    name: str  # "tree" or "flat"
    tree: tuple[int, int, int] | None = None
    flat: int = 0

    @staticmethod
    def of_tree(dirs: int, subdirs: int, files: int) -> "Shape":
        return Shape("tree", tree=(dirs, subdirs, files))

    @staticmethod
    def of_flat(files: int) -> "Shape":
        return Shape("flat", flat=files)

    @property
    def objects(self) -> int:
        if self.tree:
            a, b, f = self.tree
            return a * b * f
        return self.flat

    @property
    def directories(self) -> int:
        if self.tree:
            a, b, _ = self.tree
            return a + a * b
        return 0

    def describe(self) -> str:
        if self.tree:
            a, b, f = self.tree
            return f"{human_count(self.objects)} objects: {a} dirs x {b} sub-dirs x {f:,} files"
        return f"{human_count(self.objects)} objects in one directory"

    def pseudo_keys(self) -> dict[str, Any]:
        keys: dict[str, Any] = {"dir_name_format": DIR_FORMAT, "file_name_format": FILE_FORMAT,
                                "file_size": FILE_SIZE}
        if self.tree:
            a, b, f = self.tree
            keys.update(subdirectories_at_depth_0=a, subdirectories_at_depth_1=b, files_at_depth_2=f)
        else:
            keys.update(files_at_depth_0=self.flat)
        return keys

    def file(self, index: int) -> str:
        """The path (under the backend's root) of file number `index` of `objects`."""
        if self.tree:
            _, b, f = self.tree
            return f"{_dir(index // (b * f))}/{_dir(index // f % b)}/{_file(index % f)}"
        return _file(index)

    def listed_dir(self, last: bool) -> tuple[str, int]:
        """The directory `ls -l` measures and its entry count: a leaf of the tree (the first
        before the index, the last after it, so the kernel has cached neither), or the flat
        directory itself."""
        if self.tree:
            a, b, f = self.tree
            return (f"{_dir(a - 1)}/{_dir(b - 1)}" if last else f"{_dir(0)}/{_dir(0)}"), f
        return "", self.flat

    def stat_samples(self, count: int, seed: int) -> tuple[list[str], list[str]]:
        """Two disjoint lists of `count` random files (before the index, after it), and in the
        tree from different leaf directories than `listed_dir` lists."""
        rng = random.Random(seed)
        count = min(count, self.objects // 3)
        listed = {self.listed_dir(last)[0] for last in (False, True)} if self.tree else set()
        leaf = self.tree[2] if self.tree else 0
        picked = rng.sample(range(self.objects), min(self.objects, 2 * count + 2 * leaf))
        files = [f for f in map(self.file, picked) if os.path.dirname(f) not in listed][: 2 * count]
        return files[:count], files[count:]


def tsv_stats(stats: int) -> int:
    """Files stat()ed before the index is ready: a fifth of those after it (each costs a TSV
    parse, milliseconds), so that they fit in the window before the index is ready."""
    return max(10, stats // 5)


def human_count(n: int) -> str:
    for unit, size in (("M", 1_000_000), ("K", 1_000)):
        if n >= size and n % (size // 10) == 0:
            return f"{n / size:g}{unit}"
    return f"{n:,}"


@dataclass
class ShapeRun:
    """What one shape run measured: a Sample per metric, or why a metric has none."""

    shape: Shape
    samples: dict[str, Sample] = field(default_factory=dict)
    missing: dict[str, NotMeasurable] = field(default_factory=dict)

    def sample(self, metric: str) -> Sample:
        if metric in self.samples:
            return self.samples[metric]
        if metric in self.missing:
            raise self.missing[metric]
        raise RuntimeError(f"the {self.shape.name} run measured no {metric}")


class DaemonLog:
    """The JSON log lines of one msfs process (`--log-format json`)."""

    def __init__(self, path: Path):
        self.path = path

    def events(self, message: str) -> list[dict[str, Any]]:
        """The fields of every line whose message is, starts or ends with `message`."""
        out = []
        try:
            text = self.path.read_text(errors="replace")
        except FileNotFoundError:
            return []
        for line in text.splitlines():
            if message not in line:
                continue
            try:
                event = json.loads(line)
            except ValueError:
                continue
            fields = event.get("fields", {})
            said = fields.get("message", "")
            if said == message or said.startswith(message) or said.endswith(message):
                out.append(fields)
        return out

    def event(self, message: str) -> dict[str, Any] | None:
        found = self.events(message)
        return found[-1] if found else None

    def wait(self, message: str, pid: int, timeout: float) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while (fields := self.event(message)) is None:
            if not Path(f"/proc/{pid}").exists():
                raise RuntimeError(f"msfs (pid {pid}) exited before logging {message!r}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"msfs logged no {message!r} within {timeout:.0f} s")
            time.sleep(0.05)
        return fields


def _mib(n: int) -> float:
    return n / MiB


def _dir_bytes(path: Path) -> int:
    total = 0
    for dirpath, _, files in os.walk(path):
        for name in files:
            total += os.lstat(os.path.join(dirpath, name)).st_size
    return total


def stat_latency(root: Path, files: list[str]) -> Sample:
    """Mean latency of stat() over `files` (ms), each looked up for the first time; the
    directories on the way are stat()ed first, untimed."""
    for parent in sorted({os.path.dirname(f) for f in files}):
        os.stat(root / parent)
    times = []
    for f in files:
        start = time.perf_counter()
        st = os.stat(root / f)
        times.append(time.perf_counter() - start)
        if st.st_size != FILE_SIZE:
            raise RuntimeError(f"{f}: size {st.st_size}, expected {FILE_SIZE}")
    ms = sorted(t * 1000 for t in times)
    return Sample(statistics.fmean(ms), 0, sum(times), {
        "tool": "os.stat", "files": len(files), "median_ms": ms[len(ms) // 2],
        "p99_ms": ms[min(len(ms) - 1, int(len(ms) * 0.99))], "max_ms": ms[-1], "first_ms": times[0] * 1000,
    })


# Largest directory the shape runs list with `ls -l` (GNU ls holds every entry before printing).
LS_MAX_ENTRIES = 10_000_000


def ls_latency(root: Path, rel: str, entries: int) -> Sample:
    seconds = timed(["ls", "-l", root / rel])
    return Sample(seconds * 1000, 0, seconds, {"tool": "ls -l", "directory": rel or "(root)", "entries": entries})


class ShapeRunner:
    """Runs the three phases of one shape on the msfs peer's binary and settings."""

    def __init__(self, peer: Filesystem, shape: Shape, scale: Scale, workdir: Path):
        self.peer, self.shape, self.scale = peer, shape, scale
        self.base = workdir / "manifest" / shape.name
        self.cap = scale.manifest_cap_seconds
        self.run = ShapeRun(shape)
        before, after = shape.stat_samples(scale.manifest_stats, seed=5)
        self.stat_before, self.stat_after = before[: tsv_stats(len(before))], after

    def fs(self, tag: str, manifest: Path) -> PseudoMsfs:
        return PseudoMsfs(self.peer, f"{tag}-{self.shape.name}", self.shape.pseudo_keys(), manifest, self.cap)

    def measure(self) -> ShapeRun:
        shutil.rmtree(self.base, ignore_errors=True)
        self.base.mkdir(parents=True)
        try:
            drop_caches()
            log(f"  manifest {self.shape.name}: {self.shape.describe()}")
            manifest = self.base / "manifest"
            self.generate(manifest)
            self.ingest(manifest)
            # Kept until the mount that generates its own is measured: on ext4 without a journal
            # (this machine's), a file created within minutes of a mass deletion skips the inodes
            # it freed (`recently_deleted`), and the browsable time was ext4's scan, not msfs's
            # (100M tree: 74.6 s right after deleting the first manifest, 53.7 s generating alone).
            # Written out and dropped, as before the first generation: the ingest left gigabytes
            # of dirty index pages, whose writeback would otherwise share the two cores with it.
            drop_caches()
            self.browsable(self.base / "manifest-at-mount")
            shutil.rmtree(manifest)
        finally:
            shutil.rmtree(self.base, ignore_errors=True)
        return self.run

    def generate(self, manifest: Path) -> None:
        fs = self.fs("generate", manifest)
        config = fs.write_config()
        cmd = fs.command("generate-manifest", "--backend", fs.BACKEND, "--output", manifest, config)
        m = run_measured(cmd, log=self.base / "generate.log", timeout=self.cap, env=fs.environment())
        info = json.loads((manifest / "manifest_index.json").read_text())
        objects, dirs = info["totals"]["objects"], info["totals"]["directories"]
        if objects != self.shape.objects:
            raise RuntimeError(f"the manifest counts {objects} objects, the namespace has {self.shape.objects}")
        generated = DaemonLog(self.base / "generate.log")
        detail = {
            "tool": "msfs generate-manifest", "objects": objects, "directories": dirs,
            "seconds": m.seconds, "peak_rss_mib": _mib(m.max_rss_bytes),
            "cpu_seconds": m.user_seconds + m.system_seconds,
            "lists": (generated.event(" written") or {}).get("lists"),
            "workers": (generated.event("generating the manifest") or {}).get("workers"),
            "manifest_bytes": _dir_bytes(manifest),
        }
        self.run.samples["gen-rate"] = Sample(objects / m.seconds, 0, m.seconds, detail)
        self.run.samples["gen-seconds"] = Sample(m.seconds, 0, m.seconds, detail)
        self.run.samples["gen-rss"] = Sample(_mib(m.max_rss_bytes), 0, m.seconds, detail)
        log(f"  manifest {self.shape.name}: generated {objects:,} objects in {m.seconds:.1f} s, "
            f"peak RSS {_mib(m.max_rss_bytes):.0f} MiB")

    def ingest(self, manifest: Path) -> None:
        fs = self.fs("ingest", manifest)
        started = time.perf_counter()
        fs.mount()
        try:
            assert fs.log_path is not None and fs.pid is not None
            daemon = DaemonLog(fs.log_path)
            ready = daemon.wait(READY, fs.pid, self.cap)
            wall = time.perf_counter() - started
            peak = vm_hwm_bytes(fs.pid)
            entries, per_second = int(ready["entries"]), int(ready["entries_per_second"])
            if entries != self.shape.objects + self.shape.directories:  # an f row per object, a d row per directory
                raise RuntimeError(f"the index holds {entries} entries, expected "
                                   f"{self.shape.objects + self.shape.directories}")
            # `seconds` is logged to 0.1 s; entries / entries_per_second is the same time, finer.
            seconds = entries / per_second if per_second > 0 else float(ready["seconds"])
            objects = self.shape.objects
            detail = {
                "source": "the daemon's `manifest index ready` line", "objects": objects, "entries": entries,
                "directories": ready.get("directories"), "seconds": seconds, "logged_seconds": ready.get("seconds"),
                "entries_per_second": per_second, "mount_to_ready_seconds": wall,
                "peak_rss_mib": _mib(peak), "index_bytes": (manifest / "_msfs_index.redb").stat().st_size,
            }
            self.run.samples["ingest-rate"] = Sample(objects / seconds, 0, seconds, detail)
            self.run.samples["ingest-seconds"] = Sample(seconds, 0, seconds, detail)
            self.run.samples["ingest-rss"] = Sample(_mib(peak), 0, seconds, detail)
            log(f"  manifest {self.shape.name}: ingested {entries:,} entries in {seconds:.1f} s, "
                f"peak RSS {_mib(peak):.0f} MiB")
            self._browse(fs, "", self.stat_after, last=True)
            listed, expected = self.shape.listed_dir(last=True)
            if expected <= 10_000:  # (a million names would cost another long listing)
                got = len(os.listdir(fs.root / listed))
                if got != expected:
                    raise RuntimeError(f"{listed or 'the root'} lists {got} entries, expected {expected}")
            self.run.samples["ingest-rss"].detail["peak_rss_after_browsing_mib"] = _mib(vm_hwm_bytes(fs.pid))
        finally:
            fs.unmount()

    def browsable(self, manifest: Path) -> None:
        manifest.mkdir()  # empty: the mount generates into it
        fs = self.fs("mount", manifest)
        started = time.perf_counter()
        fs.mount()
        try:
            mounted = time.perf_counter() - started
            names = os.listdir(fs.mountpoint)
            seconds = time.perf_counter() - started
            if fs.BACKEND not in names:
                raise RuntimeError(f"{fs.mountpoint} lists {names}, not {fs.BACKEND}")
            assert fs.log_path is not None and fs.pid is not None
            daemon = DaemonLog(fs.log_path)
            written = daemon.event(" written") or {}
            self.run.samples["browsable"] = Sample(seconds, 0, seconds, {
                "tool": "msfs mount (generating the manifest) + ls of the mountpoint", "mounted_seconds": mounted,
                "generation_elapsed": written.get("elapsed"), "objects": written.get("objects"),
                "index_ready_by_then": daemon.event(READY) is not None,
            })
            log(f"  manifest {self.shape.name}: browsable {seconds:.1f} s after starting the mount")
            self._browse(fs, "-tsv", self.stat_before, last=False, daemon=daemon)
            self.run.samples["browsable"].detail["peak_rss_mib"] = _mib(vm_hwm_bytes(fs.pid))
        finally:
            fs.unmount()

    def _browse(self, fs: PseudoMsfs, suffix: str, files: list[str], last: bool,
                daemon: DaemonLog | None = None) -> None:
        """stat and ls measurements; with `daemon`, only while its index is not ready."""
        listed, entries = self.shape.listed_dir(last)
        steps: list[tuple[str, Callable[[], Sample]]] = [
            ("stat", lambda: stat_latency(fs.root, files)),
            ("ls", lambda: ls_latency(fs.root, listed, entries)),
        ]
        for metric, measure in steps:
            key = metric + suffix
            if metric == "ls" and entries > LS_MAX_ENTRIES:
                self.run.missing[key] = NotMeasurable(
                    f"not run: `ls -l` holds every one of the {entries:,} entries to sort them (it was "
                    "OOM-killed at 97M in 24 GiB); `bench/inode-limit.sh 65536 100000000 find` lists "
                    "such a directory as it is read")
                continue
            if daemon is None:
                self.run.samples[key] = measure()
                continue
            if daemon.event(READY) is not None:
                self.run.missing[key] = NotMeasurable("the index was ready before it started")
                continue
            sample = measure()
            if daemon.event(READY) is not None:
                self.run.missing[key] = NotMeasurable(
                    f"the index was ready before it ended (it took {sample.seconds:.2f} s; "
                    f"{sample.value:.4g} ms, partly from the index, not counted)")
                continue
            sample.detail["served_from"] = "TSV files (index not ready)"
            self.run.samples[key] = sample
