"""How big a run is: data sizes, thread counts, run lengths. Three presets, nothing else varies.

Every workload reads its sizes from a `Scale`, so `--quick` and `--self-check` shrink the run
without any workload knowing about them; the output records the scale so a reader can tell.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace

KiB = 1024
MiB = 1024 * KiB
GiB = 1024 * MiB


@dataclass(frozen=True)
class Scale:
    name: str
    large_size: int  # the "1 GiB object" of the sequential, random and time-to-first-byte runs
    small_count: int  # the "1,024 x 1 MiB" small-file set
    small_size: int
    many_count: int  # the "1,000 x 64 KiB" file set (also the directory `ls` lists)
    many_size: int
    tree_fanout: int  # the "9x9x9" tree walked by `find`
    threads: tuple[int, ...]  # application threads of the fio cells
    fio_seconds: float  # length of each time-based fio cell (and of its raw twin; and of random writes)
    runs: int  # default repeats per cell (--runs overrides)
    cache_bytes: int  # cache budget given to every peer that has a cache
    write_count: int  # the "1,024 x 1 MiB" files written by the write cells
    write_size: int
    write_threads: tuple[int, ...]  # application threads of the small-file write cells
    write_large_size: int  # the "1 GiB" sequential write
    meta_count: int  # the "100 files" created and unlinked
    write_cap_seconds: float  # a write cell not durable by then is killed and fails (s3fs can be slow)
    manifest_tree: tuple[int, int, int]  # PSEUDO tree of the manifest runs: directories at the
    #                                      root x sub-directories in each x files in each of those
    manifest_flat: int  # PSEUDO files in one flat directory (the manifest runs' second shape)
    manifest_stats: int  # files stat()ed, at random, per manifest latency measurement
    manifest_cap_seconds: float  # each manifest phase (generation, ingest, mount) not done by then fails
    note: str  # printed and recorded: how this scale differs from the full one

    def describe(self) -> dict[str, object]:
        return asdict(self)


FULL = Scale(
    name="full",
    large_size=1 * GiB,
    small_count=1024,
    small_size=1 * MiB,
    many_count=1000,
    many_size=64 * KiB,
    tree_fanout=9,
    threads=(1, 2, 4, 8),
    fio_seconds=10.0,
    runs=3,
    cache_bytes=4 * GiB,
    write_count=1024,
    write_size=1 * MiB,
    write_threads=(1, 4, 8),
    write_large_size=1 * GiB,
    meta_count=100,
    write_cap_seconds=900.0,
    manifest_tree=(100, 100, 1000),
    manifest_flat=1_000_000,
    manifest_stats=1000,
    manifest_cap_seconds=3600.0,
    note="full scale",
)

QUICK = Scale(
    name="quick",
    large_size=512 * MiB,
    small_count=1024,
    small_size=1 * MiB,
    many_count=1000,
    many_size=64 * KiB,
    tree_fanout=9,
    threads=(1, 4),
    fio_seconds=2.0,
    runs=1,
    cache_bytes=4 * GiB,
    write_count=128,
    write_size=1 * MiB,
    write_threads=(1, 4),
    write_large_size=128 * MiB,
    meta_count=100,
    write_cap_seconds=300.0,
    manifest_tree=(100, 10, 1000),
    manifest_flat=200_000,
    manifest_stats=1000,
    manifest_cap_seconds=1800.0,
    note="quick: a 512 MiB large object (not 1 GiB); threads 1 and 4 only (not 1/2/4/8; writes not "
    "1/4/8), 2 s fio and random-write cells (not 10 s), 1 run (not 3); writes 128 x 1 MiB files (not "
    "1,024) and a 128 MiB sequential file (not 1 GiB); manifests of 1M objects in a tree (not 10M) "
    "and 200K in one directory (not 1M)",
)

# The manifest group at the seed's own scale (issue #24): a 100M-object tree of ~100K directories
# (the seed's shape) and a 100M-entry flat directory. Only the manifest workloads use it.
MANIFEST_100M = replace(
    FULL,
    name="100m",
    runs=1,
    manifest_tree=(100, 1000, 1000),
    manifest_flat=100_000_000,
    manifest_cap_seconds=4 * 3600.0,
    note="100m: manifests of 100M objects in a tree (100 x 1,000 directories of 1,000 files) and "
    "100M in one directory (not 10M and 1M); 1 run",
)

# Seconds-long smoke run for CI: proves every stage produces output; its numbers mean nothing.
SELF_CHECK = Scale(
    name="self-check",
    large_size=16 * MiB,
    small_count=8,
    small_size=256 * KiB,
    many_count=20,
    many_size=64 * KiB,
    tree_fanout=2,
    threads=(2,),
    fio_seconds=1.0,
    runs=1,
    cache_bytes=256 * MiB,
    write_count=8,
    write_size=256 * KiB,
    write_threads=(2,),
    write_large_size=16 * MiB,
    meta_count=10,
    write_cap_seconds=120.0,
    manifest_tree=(2, 3, 50),
    manifest_flat=6000,  # > 5 pages of 1,000: the flat-directory split runs
    manifest_stats=20,
    manifest_cap_seconds=120.0,
    note="self-check: tiny data, one workload per family (two for writes), numbers are meaningless",
)


def human_bytes(n: int) -> str:
    for unit, size in (("GiB", GiB), ("MiB", MiB), ("KiB", KiB)):
        if n >= size and n % size == 0:
            return f"{n // size} {unit}"
    return f"{n} B"
