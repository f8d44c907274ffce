"""Manifest scale (issues 5 and 9): msfs's manifest engine on a generated PSEUDO namespace — a
directory tree (full: 10M objects, 100 dirs x 100 sub-dirs x 1,000 files) and one flat directory
(full: 1M objects). msfs only: no peer has manifests, and there is no raw limit (the namespace is
computed, not stored); the seed's published figures stand beside ours instead.

Every workload of a shape reads one *shape run* (manifest.py: generation, ingest, a mount that
generates its own manifest), so each run of a shape costs one generation, one ingest and one
generating mount, however many cells it fills: run i of every workload of a shape is shape run
i. The families share the group `manifest` (`--only manifest`):

  * manifest-rate (objects/s): generation and ingest throughput;
  * manifest-time (s): generation, ingest, and time until a generating mount is browsable;
  * manifest-memory (MiB): peak RSS of `msfs generate-manifest` and of the mount while ingesting;
  * manifest-browse (ms): `ls -l` and mean `stat` latency, from the index and (before it is
    ready) from the TSV files.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from ..manifest import Shape, ShapeRun, ShapeRunner, human_count, tsv_stats
from ..measure import Sample
from ..scale import Scale
from .registry import Context, Reference, State, Unit, Workload, family

GROUP = "manifest"
MSFS_ONLY = ("msfs",)
NO_RAW = "no raw limit and no other peer: the namespace is generated (PSEUDO), and only msfs has manifests"
GiB_IN_MIB = 1024.0

# The seed's published figures (its user guide, "Measured Scale and Performance"): an EC2
# c5a.12xlarge (48 vCPU, 96 GiB) listing a same-region S3 bucket of 100,237,498 objects in
# 101,339 directories, and the same count in one directory. Ours list a PSEUDO store on this
# machine, at 1/10 (tree) and 1/100 (flat) of that count: rates compare, times and memory peaks
# at another size do not (shown, never divided).
SEED_TREE = "seed's user guide: 100M objects in 101,339 dirs, c5a.12xlarge (48 vCPU), same-region S3"
SEED_FLAT = "seed's user guide: 100M objects in 1 dir, c5a.12xlarge (48 vCPU), same-region S3"
SEED: dict[tuple[str, str], Reference] = {
    ("gen-rate", "tree"): Reference(954_680, SEED_TREE),
    ("ingest-rate", "tree"): Reference(100_129, SEED_TREE),
    ("gen-seconds", "tree"): Reference(105, SEED_TREE, "1m 45s", comparable=False),
    ("ingest-seconds", "tree"): Reference(1001, SEED_TREE, "16m 41s", comparable=False),
    ("browsable", "tree"): Reference(105, SEED_TREE, "~105 s", comparable=False),
    ("ingest-rss", "tree"): Reference(7.4 * GiB_IN_MIB, SEED_TREE, "~7.4 GiB", comparable=False),
    ("gen-rate", "flat"): Reference(55_000, SEED_FLAT, "~55K"),
    ("ingest-rate", "flat"): Reference(37_800, SEED_FLAT, "37.8K"),
    ("gen-seconds", "flat"): Reference(1835, SEED_FLAT, "30m 35s", comparable=False),
    ("ingest-seconds", "flat"): Reference(2659, SEED_FLAT, "44m 19s", comparable=False),
    ("ingest-rss", "flat"): Reference(21 * GiB_IN_MIB, SEED_FLAT, "~21 GiB", comparable=False),
}

# Assumed rates on 2 busy cores, for the duration estimate only (measured here at full scale:
# 0.4-0.6M obj/s generating, 0.3-0.36M obj/s ingesting, ~10K entries/s when `ls -l` lists the
# 1M-entry directory through FUSE).
EST_GEN_OBJ_S = 300_000.0
EST_INGEST_OBJ_S = 200_000.0
EST_LIST_OBJ_S = 12_000.0


def shapes(scale: Scale) -> list[Shape]:
    return [Shape.of_tree(*scale.manifest_tree), Shape.of_flat(scale.manifest_flat)]


def shape_run_seconds(shape: Shape, scale: Scale) -> float:
    """Expected seconds of one shape run: two generations, an ingest, listings, four mounts."""
    n = shape.objects
    listed = shape.listed_dir(True)[1] * 2 + scale.manifest_stats * 2
    return 2 * n / EST_GEN_OBJ_S + n / EST_INGEST_OBJ_S + listed / EST_LIST_OBJ_S + 8


class ShapeRuns:
    """The shape runs of this process. Every workload of a shape counts its own runs; run i of
    any of them is shape run i (made by the first workload that asks for it), so the cells of
    one shape come from the same generation, ingest and mount. A failed shape run fails every
    cell that asks for it, with its error, and is not retried."""

    def __init__(self) -> None:
        self.runs: dict[tuple[Path, str], list[ShapeRun | Exception]] = {}

    def get(self, ctx: Context, shape: Shape, index: int) -> ShapeRun:
        runs = self.runs.setdefault((ctx.workdir, shape.name), [])
        while len(runs) <= index:
            if ctx.fs is None:
                raise RuntimeError("the manifest runs need the msfs peer (its binary and settings)")
            try:
                runs.append(ShapeRunner(ctx.fs, shape, ctx.scale, ctx.workdir).measure())
            except Exception as e:  # noqa: BLE001 - recorded for every cell of this run
                runs.append(e)
        run = runs[index]
        if isinstance(run, Exception):
            raise RuntimeError(f"manifest {shape.name} run {index + 1} failed: {type(run).__name__}: {run}")
        return run


RUNS = ShapeRuns()


@dataclass(frozen=True)
class Metric:
    key: str  # ShapeRun metric
    name: str  # workload name, before "-<shape>"
    title: str  # {n}: the shape's object count
    description: str  # {shape}: the shape described
    smoke: tuple[str, ...] = ()  # the shapes whose cell is part of --self-check


def _measure(shape: Shape, metric: str) -> Callable[[Context], Sample]:
    calls = itertools.count()

    def on_fs(ctx: Context) -> Sample:
        return RUNS.get(ctx, shape, next(calls)).sample(metric)

    return on_fs


def _workloads(scale: Scale, fam: str, unit: Unit, metrics: list[Metric]) -> list[Workload]:
    out = []
    for shape in shapes(scale):
        share = shape_run_seconds(shape, scale) / len(_ALL_METRICS)  # the run, spread over its cells
        for m in metrics:
            out.append(Workload(
                name=f"manifest-{m.name}-{shape.name}", family=fam,
                title=m.title.format(n=human_count(shape.objects), shape=shape.name, dir=_listed(shape)),
                description=m.description.format(
                    shape=shape.describe(), dir=_listed(shape), stats=scale.manifest_stats,
                    tsv_stats=tsv_stats(scale.manifest_stats),
                    again=f"another {_listed(shape)}" if shape.tree else f"the {_listed(shape)}"),
                unit=unit, state=State.OWN, dataset=f"PSEUDO {shape.name}", io="metadata",
                on_fs=_measure(shape, m.key), on_raw=None, raw_note=NO_RAW,
                est_seconds=share, smoke=shape.name in m.smoke, peers=MSFS_ONLY,
                reference=SEED.get((m.key, shape.name)),
            ))
    return out


def _listed(shape: Shape) -> str:
    entries = shape.listed_dir(True)[1]
    return f"{entries:,}-entry dir" if shape.tree else f"{human_count(entries)}-entry flat dir"


RATE = [
    Metric("gen-rate", "gen", "generate {n} {shape}",
           "`msfs generate-manifest` of a PSEUDO namespace ({shape}): objects listed per second.",
           smoke=("tree",)),
    Metric("ingest-rate", "ingest", "ingest {n} {shape}",
           "The mount's background ingest of that manifest into its index (`manifest index ready`): "
           "objects per second."),
]
TIME = [
    Metric("gen-seconds", "gen-time", "generate {n} {shape}",
           "`msfs generate-manifest` of a PSEUDO namespace ({shape}): wall-clock seconds."),
    Metric("ingest-seconds", "ingest-time", "ingest {n} {shape}",
           "The mount's background ingest of that manifest into its index: seconds, as the daemon logs them."),
    Metric("browsable", "browsable", "browsable, {n} {shape}",
           "A mount whose manifest_path is empty, so it generates the manifest first ({shape}): seconds "
           "from starting msfs until the mount is live and `ls` of the mountpoint answers.",
           smoke=("tree",)),
]
MEMORY = [
    Metric("gen-rss", "gen-rss", "generate {n} {shape}",
           "Peak RSS of `msfs generate-manifest` ({shape}), MiB."),
    Metric("ingest-rss", "ingest-rss", "ingest {n} {shape}",
           "Peak RSS (VmHWM) of the mount process when its ingest is done, nothing browsed yet ({shape}), MiB.",
           smoke=("tree",)),
]
BROWSE = [
    Metric("ls-tsv", "ls-tsv", "ls -l {dir}, TSV",
           "`ls -l` of the {dir} right after a generating mount, while the index builds (from the TSV "
           "files; not measurable when the index is ready first)."),
    Metric("ls", "ls", "ls -l {dir}, index",
           "`ls -l` of {again} once the index is ready.", smoke=("flat",)),
    Metric("stat-tsv", "stat-tsv", "stat {shape}, TSV",
           "Mean stat() latency of one random file (parent directories looked up first, untimed), right "
           "after a generating mount, while the index builds (from the TSV files; {tsv_stats} files)."),
    Metric("stat", "stat", "stat {shape}, index",
           "Mean stat() latency of one random file (parent directories looked up first, untimed) once "
           "the index is ready ({stats} files)."),
]
_ALL_METRICS = [*RATE, *TIME, *MEMORY, *BROWSE]


@family("manifest-rate", "Manifest generation and ingest throughput (msfs, PSEUDO namespace)",
        Unit.OBJECTS_S, group=GROUP)
def manifest_rate(scale: Scale) -> list[Workload]:
    return _workloads(scale, "manifest-rate", Unit.OBJECTS_S, RATE)


@family("manifest-time", "Manifest generation, ingest, and time until a generating mount is browsable",
        Unit.SECONDS, group=GROUP)
def manifest_time(scale: Scale) -> list[Workload]:
    return _workloads(scale, "manifest-time", Unit.SECONDS, TIME)


@family("manifest-memory", "Peak RSS of manifest generation and ingest", Unit.MIB, group=GROUP)
def manifest_memory(scale: Scale) -> list[Workload]:
    return _workloads(scale, "manifest-memory", Unit.MIB, MEMORY)


@family("manifest-browse", "Browsing a manifest-backed mount: ls -l and stat latency", Unit.MS, group=GROUP)
def manifest_browse(scale: Scale) -> list[Workload]:
    return _workloads(scale, "manifest-browse", Unit.MS, BROWSE)

