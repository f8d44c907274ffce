"""Runs every workload on every peer, in the same order, with the same cache discipline.

A `Target` is something a workload can be measured on: the raw client or a mounted filesystem.
Both follow one protocol, so the fairness rules live here once:
  * COLD runs: fresh mount with an empty cache (filesystems), then `echo 3 > drop_caches`;
  * WARM runs: the data set is read once through the target (not measured); before each run,
    buffered workloads get the mount's page cache for their files evicted;
  * filesystems are mounted read-only, and writable (remounted) for the workloads that write;
  * a workload without a raw limit (`on_raw` None) has no raw cell, and one limited to some peers
    (`peers`, e.g. msfs's manifests) no cell for the others;
  * OWN runs: nothing (the workload starts, stops and makes cold what it measures itself);
  * `runs` repeats per cell; a failing cell is recorded and the run goes on.
"""

from __future__ import annotations

import time
import traceback
from abc import ABC, abstractmethod
from pathlib import Path

from .datasets import Datasets
from .filesystems import Filesystem
from .measure import NotMeasurable, Sample, evict_page_cache, read_files
from .rawclient import RawClient
from .results import RAW, Results
from .scale import Scale
from .shell import drop_caches, log
from .workloads import Context, State, Workload

WARMUP_THREADS = 8


class Target(ABC):
    name = ""

    def __init__(self, raw: RawClient, data: Datasets, scale: Scale, workdir: Path):
        self.raw, self.data, self.scale, self.workdir = raw, data, scale, workdir
        self.warm: set[str] = set()  # data sets this target has read since it was last made cold

    def start(self) -> None: ...

    def stop(self) -> None: ...

    def recover(self) -> None:
        """After a failed cell: get back to a known state for the next one."""

    @abstractmethod
    def make_cold(self) -> None: ...

    @abstractmethod
    def warm_up(self, dataset: str) -> None: ...

    def before_warm_run(self, workload: Workload) -> None: ...

    @abstractmethod
    def measure(self, workload: Workload) -> Sample: ...

    def prepare(self, workload: Workload) -> None:
        if workload.state is State.OWN:  # it starts (and makes cold) what it measures itself
            return
        if workload.state is State.COLD:
            self.make_cold()
            self.warm.clear()
        else:
            if workload.dataset not in self.warm:
                started = time.monotonic()
                self.warm_up(workload.dataset)
                self.warm.add(workload.dataset)
                log(f"  {self.name}: warmed up {workload.dataset} in {time.monotonic() - started:.1f} s")
            self.before_warm_run(workload)


class RawTarget(Target):
    name = RAW

    def make_cold(self) -> None:
        drop_caches()  # the server reads from disk again

    def warm_up(self, dataset: str) -> None:
        self.raw.objects(self.data.by_name(dataset).prefix, WARMUP_THREADS)

    def measure(self, workload: Workload) -> Sample:
        if workload.on_raw is None:
            raise RuntimeError(f"{workload.name} has no raw limit")
        return workload.on_raw(Context(None, self.raw, self.data, self.scale, self.workdir, RAW))


class MountTarget(Target):
    def __init__(self, fs: Filesystem, raw: RawClient, data: Datasets, scale: Scale, workdir: Path):
        super().__init__(raw, data, scale, workdir)
        self.fs = fs
        self.name = fs.name

    def start(self) -> None:
        self.fs.mount()
        self.warm.clear()

    def stop(self) -> None:
        self.fs.unmount()

    def recover(self) -> None:
        self.fs.remount()
        self.warm.clear()

    def prepare(self, workload: Workload) -> None:
        if workload.writes != self.fs.writable:
            self.fs.writable = workload.writes
            if workload.state is not State.COLD:  # a cold run remounts anyway
                self.recover()
        super().prepare(workload)

    def make_cold(self) -> None:
        self.fs.remount()  # empty cache, no cached entries or attributes
        drop_caches()

    def warm_up(self, dataset: str) -> None:
        read_files(self.data.by_name(dataset).paths(self.fs.root), WARMUP_THREADS)

    def before_warm_run(self, workload: Workload) -> None:
        if workload.io == "buffered":
            evict_page_cache(self.data.by_name(workload.dataset).paths(self.fs.root))

    def measure(self, workload: Workload) -> Sample:
        ctx = Context(self.fs.root, self.raw, self.data, self.scale, self.workdir, self.fs.name,
                      self.fs.durable_on_close, self.fs)
        return workload.on_fs(ctx)


def run_target(target: Target, workloads: list[Workload], runs: int, results: Results) -> None:
    log(f"== {target.name}")
    target.start()
    try:
        for w in workloads:
            if not w.runs_on(target.name):  # no raw limit, or a feature only some peers have
                continue
            cell = results.cell(w.name, target.name)
            for i in range(runs):
                try:
                    target.prepare(w)
                    sample = target.measure(w)
                except NotMeasurable as e:  # no failure: nothing to recover from
                    cell.error = f"{type(e).__name__}: {e}"
                    log(f"  {w.name} on {target.name}: not measurable ({e})")
                    break
                except Exception as e:  # recorded in the results; the benchmark goes on
                    cell.error = f"{type(e).__name__}: {e}"
                    log(f"  {w.name} on {target.name} failed: {cell.error}")
                    log(traceback.format_exc(limit=3))
                    target.recover()
                    break
                cell.samples.append(sample)
                log(f"  {w.name} [{i + 1}/{runs}] {target.name}: {sample.value:.4g} {w.unit.value}")
    finally:
        target.stop()
