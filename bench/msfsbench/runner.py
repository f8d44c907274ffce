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

By default (`run_target`) the targets run one after another: every workload's runs on the raw
client, then on the first peer, and so on. `--interleave` (`run_interleaved`) has them take turns
instead: all are started first, then for each workload and each of its runs every target (raw
first, then the peers, the first of them rotating from one round to the next so that no peer is
always first) is prepared and measured once, and all are stopped at the end. That is for A/B
comparisons of variants of one filesystem (`--peers msfs,msfs-no-holder`), where, run one after
the other, the order dominated: the second peer ran on a server the first had filled. The rules
above hold per target (its own mount, warm-up, writable mode and recovery); what the targets now
share is the page cache. A COLD run's `drop_caches` also drops what the others had warmed, but
the rounds go workload by workload and a workload has one state, so no `drop_caches` lands
between two WARM samples of a workload, and a WARM run evicts the mount's page cache for
buffered workloads anyway (`before_warm_run`): for msfs, whose cache is its own, that is the
state it measures from. After a COLD workload every target forgets what it warmed, so one that
did not run it (no raw limit, a workload of some peers only) warms up again before its next
WARM run. The mounts are up all at once, so their caches share the machine's memory. The
default, one target after another, stays the mode of the published cross-peer tables.
"""

from __future__ import annotations

import itertools
import time
import traceback
from abc import ABC, abstractmethod
from pathlib import Path

from .datasets import Datasets
from .filesystems import Filesystem
from .measure import NotMeasurable, Sample, evict_page_cache, read_files
from .rawclient import RawClient
from .results import RAW, Cell, Results
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

    def restart(self) -> None:
        """Restarts what serves the data, keeping whatever it keeps on disk (nothing for raw)."""

    def before_warm_run(self, workload: Workload) -> None: ...

    @abstractmethod
    def measure(self, workload: Workload) -> Sample: ...

    def prepare(self, workload: Workload) -> None:
        if workload.state is State.OWN:  # it starts (and makes cold) what it measures itself
            return
        if workload.state is State.COLD:
            self.make_cold()
            self.warm.clear()
        elif workload.state is State.RESTARTED:
            started = time.monotonic()
            self.warm_up(workload.dataset)
            self.restart()
            self.warm.clear()
            log(f"  {self.name}: read {workload.dataset} and restarted in {time.monotonic() - started:.1f} s")
            self.before_warm_run(workload)
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

    def restart(self) -> None:
        self.fs.restart()

    def warm_up(self, dataset: str) -> None:
        read_files(self.data.by_name(dataset).paths(self.fs.root), WARMUP_THREADS)

    def before_warm_run(self, workload: Workload) -> None:
        if workload.io == "buffered":
            evict_page_cache(self.data.by_name(workload.dataset).paths(self.fs.root))

    def measure(self, workload: Workload) -> Sample:
        ctx = Context(self.fs.root, self.raw, self.data, self.scale, self.workdir, self.fs.name,
                      self.fs.durable_on_close, self.fs)
        return workload.on_fs(ctx)


def measure_sample(target: Target, w: Workload, i: int, runs: int, cell: Cell) -> bool:
    """Run `i` (of `runs`) of `w` on `target`: prepare it (the cache discipline above), measure,
    record the sample in `cell`. Returns False when the cell is over: not measurable, or failed
    (its error recorded, the target recovered). If recovering fails too, that exception goes up:
    the target is in no known state, and is done."""
    try:
        target.prepare(w)
        sample = target.measure(w)
    except NotMeasurable as e:  # no failure: nothing to recover from
        cell.error = f"{type(e).__name__}: {e}"
        log(f"  {w.name} on {target.name}: not measurable ({e})")
        return False
    except Exception as e:  # recorded in the results; the benchmark goes on
        cell.error = f"{type(e).__name__}: {e}"
        log(f"  {w.name} on {target.name} failed: {cell.error}")
        log(traceback.format_exc(limit=3))
        target.recover()
        return False
    cell.samples.append(sample)
    log(f"  {w.name} [{i + 1}/{runs}] {target.name}: {sample.value:.4g} {w.unit.value}")
    return True


def fail_target(target: Target, workloads: list[Workload], results: Results, e: Exception) -> None:
    """`target` failed outside a cell (it did not start, recover or stop): each of its cells with
    neither a sample nor an error says why it is empty."""
    log(f"{target.name} failed: {e}")
    for w in workloads:
        if not w.runs_on(target.name):
            continue
        cell = results.cell(w.name, target.name)
        if not cell.samples and not cell.error:
            cell.error = f"{type(e).__name__}: {e}"


def run_target(target: Target, workloads: list[Workload], runs: int, results: Results) -> None:
    """Every run of every workload on `target`, then the next target (the default)."""
    log(f"== {target.name}")
    target.start()
    try:
        for w in workloads:
            if not w.runs_on(target.name):  # no raw limit, or a feature only some peers have
                continue
            cell = results.cell(w.name, target.name)
            for i in range(runs):
                if not measure_sample(target, w, i, runs, cell):
                    break
    finally:
        target.stop()


def run_interleaved(targets: list[Target], workloads: list[Workload], runs: int, results: Results) -> None:
    """`--interleave`: every target started, then one sample per target in turn, for each run of
    each workload (module doc). A target that does not start, or cannot recover after a failed
    cell, gets its remaining cells' error and is left out; the others go on."""
    live: list[Target] = []
    try:
        for target in targets:
            log(f"== {target.name} (interleaved)")
            try:
                target.start()
            except Exception as e:  # e.g. a peer that does not mount: its cells say so, others run
                fail_target(target, workloads, results, e)
                _stop(target)  # what it did start (a daemon that never mounted)
                continue
            live.append(target)
        rounds = itertools.count()
        for w in workloads:
            for i in range(runs):
                for target in turns(live, next(rounds)):
                    if not w.runs_on(target.name):  # no raw limit, or a feature only some peers have
                        continue
                    cell = results.cell(w.name, target.name)
                    if cell.error:  # over: an earlier run failed or was not measurable
                        continue
                    try:
                        measure_sample(target, w, i, runs, cell)
                    except Exception as e:  # it did not recover: no known state to measure from
                        fail_target(target, workloads, results, e)
                        live.remove(target)
                        _stop(target)
            if w.state is State.COLD:  # its drop_caches dropped every target's page cache too
                for target in live:
                    target.warm.clear()
    finally:
        for target in live:
            _stop(target)


def turns(targets: list[Target], round_no: int) -> list[Target]:
    """The order of one round of `run_interleaved`: the raw client first, then the peers in their
    order, starting `round_no` places further along each round. The rounds of a workload are
    consecutive, so its runs start with each peer in turn, and with one run per workload the
    first peer still changes from one workload to the next."""
    raw = [t for t in targets if isinstance(t, RawTarget)]
    peers = [t for t in targets if not isinstance(t, RawTarget)]
    k = round_no % len(peers) if peers else 0
    return raw + peers[k:] + peers[:k]


def _stop(target: Target) -> None:
    try:
        target.stop()
    except Exception as e:  # the session's clean-up tries again; the other targets go on
        log(f"{target.name} did not stop: {type(e).__name__}: {e}")
