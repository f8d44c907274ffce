"""Measuring tools that run against a mounted filesystem: fio, a tight file reader, timers.

Each returns a `Sample`: the headline value (MiB/s or seconds) plus what it was computed from.
"""

from __future__ import annotations

import json
import os
import shutil
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from .scale import MiB
from .shell import run, timed


@dataclass
class Sample:
    value: float  # MiB/s for throughput workloads, seconds for latency ones
    bytes: int = 0
    seconds: float = 0.0
    detail: dict[str, Any] = field(default_factory=dict)

    @staticmethod
    def throughput(nbytes: int, seconds: float, **detail: Any) -> "Sample":
        return Sample(nbytes / MiB / max(seconds, 1e-9), nbytes, seconds, detail)

    @staticmethod
    def latency(seconds: float, **detail: Any) -> "Sample":
        return Sample(seconds, 0, seconds, detail)


class NotMeasurable(Exception):
    """Nothing failed, but the moment to measure did not come (e.g. the manifest index was ready
    before a measurement of the path before it ended): the cell says so, with no number."""


# ---------------------------------------------------------------- fio


@dataclass(frozen=True)
class FioJob:
    """One fio cell. `files` has one entry per thread: the files that thread reads, in order."""

    rw: str  # "read" or "randread"
    block_size: int
    direct: bool
    files: tuple[tuple[Path, ...], ...]
    seconds: float | None = None  # time-based when set, else each thread reads its files once

    def write(self, workdir: Path) -> Path:
        """Writes the job file (and the symlink lists it refers to) under `workdir`."""
        lines = [
            "[global]",
            f"rw={self.rw}",
            f"bs={self.block_size}",
            f"direct={int(self.direct)}",
            "ioengine=psync",
            "group_reporting=1",
            # The same offsets, in the same order, on every peer.
            "randrepeat=1",
            # One file open at a time, read start to end, then the next: how a reader walks files.
            "file_service_type=sequential",
            "openfiles=1",
        ]
        if self.seconds is not None:
            lines += ["time_based=1", f"runtime={self.seconds:g}"]
        for i, files in enumerate(self.files):
            lines.append(f"[reader{i}]")
            if len(files) == 1:
                lines.append(f"filename={files[0]}")
            else:
                lines += self._file_list(workdir / "fio-files" / f"reader{i}", files)
        jobfile = workdir / "fio.job"
        jobfile.write_text("\n".join(lines) + "\n")
        return jobfile

    @staticmethod
    def _file_list(linkdir: Path, files: tuple[Path, ...]) -> list[str]:
        """fio caps an option value at 4,096 characters, too short to list 1,024 paths; instead each
        thread gets a directory of symlinks 0..N-1 to its files (resolved on the local disk, opened
        on the mount), which fio walks as `directory` + `nrfiles` + `filename_format`."""
        shutil.rmtree(linkdir, ignore_errors=True)
        linkdir.mkdir(parents=True)
        for n, target in enumerate(files):
            (linkdir / str(n)).symlink_to(target)
        return [f"directory={linkdir}", f"nrfiles={len(files)}", "filename_format=$filenum"]


def run_fio(job: FioJob, workdir: Path) -> Sample:
    jobfile = job.write(workdir)
    timeout = (job.seconds or 0) + 900
    out = run(["fio", "--output-format=json", str(jobfile)], timeout=timeout).stdout
    # fio may print warnings before its JSON document.
    report = json.loads(out[out.index("{"):])
    read = report["jobs"][0]["read"]
    seconds = read["runtime"] / 1000.0  # ms, the longest of the group's threads
    return Sample.throughput(
        read["io_bytes"], seconds,
        tool="fio", iops=read["iops"], clat_mean_us=read["clat_ns"]["mean"] / 1000.0,
        threads=len(job.files), block_size=job.block_size, direct=job.direct,
    )


def split(paths: Sequence[Path], threads: int) -> tuple[tuple[Path, ...], ...]:
    """Round-robin share of the files per thread (thread i gets files i, i+N, i+2N, ...)."""
    return tuple(tuple(paths[i::threads]) for i in range(threads))


# ---------------------------------------------------------------- direct timers


def read_files(paths: Sequence[Path], threads: int, buffer_size: int = 1 * MiB) -> Sample:
    """Opens, reads to the end and closes every file, `threads` at a time, timing it all. The
    per-file work is syscalls with the GIL released, so Python adds microseconds, not a ceiling."""
    shares = split(paths, threads)
    totals = [0] * threads
    errors: list[BaseException] = []

    def worker(index: int) -> None:
        try:
            buf = bytearray(buffer_size)
            view = memoryview(buf)
            for path in shares[index]:
                fd = os.open(path, os.O_RDONLY)
                try:
                    while n := os.readv(fd, [view]):
                        totals[index] += n
                finally:
                    os.close(fd)
        except BaseException as e:  # surfaced below, in the caller's thread
            errors.append(e)

    pool = [threading.Thread(target=worker, args=(i,)) for i in range(threads)]
    start = time.perf_counter()
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    elapsed = time.perf_counter() - start
    if errors:
        raise errors[0]
    return Sample.throughput(sum(totals), elapsed, tool="read_files", threads=threads, files=len(paths))


def time_to_first_byte(path: Path) -> Sample:
    """open() + the first 1-byte read(), as a program that peeks at a file sees it."""
    start = time.perf_counter()
    fd = os.open(path, os.O_RDONLY)
    try:
        got = os.read(fd, 1)
    finally:
        elapsed = time.perf_counter() - start
        os.close(fd)
    if len(got) != 1:
        raise RuntimeError(f"{path}: no first byte")
    return Sample.latency(elapsed, tool="open+read(1)")


def time_command(cmd: Sequence[str | Path]) -> Sample:
    return Sample.latency(timed(cmd), tool=" ".join(str(c) for c in cmd))


def evict_page_cache(paths: Sequence[Path]) -> None:
    """Drops the mount's cached pages of these files only (posix_fadvise DONTNEED), so a warm run
    measures the filesystem's own cache — not the kernel's copy in front of it — while the
    filesystem's cache and the server stay warm."""
    for path in paths:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
