"""Write workloads (issues 4 and 9): new small files, one large sequential file, and random writes
into an existing large object — each timed until the data is durable in the store, then checked.

Durability, the same bar for every peer: msfs is mounted with `flush_on_close: true` (close()
returns once the object is committed), s3fs uploads in its flush (close), and rclone and
`msfs-close-in-background` (msfs's default `flush_on_close: false`), whose close returns before
the upload, are timed until the store lists what was written (`verify.wait_for` watches it).
After every cell the raw client checks the store: every object at its size, a sample read back
byte for byte; a cell whose check fails is an error.

Physical limit: one PutObject per file with as many in flight as the cell has threads; for the
large file, one multipart upload in 8 MiB parts with 4 in flight (how msfs commits a large file).
Random writes have none: the cheapest way to change blocks of an object in S3 is to rebuild it
(UploadPartCopy for untouched parts plus uploaded dirty ones) — msfs's own strategy, not a limit
a filesystem is measured against — so their raw column is n/a.
"""

from __future__ import annotations

from functools import partial

from .. import verify, writers
from ..measure import Sample
from ..scale import KiB, MiB, Scale, human_bytes
from .registry import Context, State, Unit, Workload, family
from .scratch import Scratch

BLOCKS = (4 * KiB, 64 * KiB)
# The large file is also written in 1 MiB write()s: issue #21's sequential target names both
# 64 KiB and 1 MiB blocks (1 MiB is the writers' longest single write, writers.MAX_BLOCK).
LARGE_BLOCKS = (*BLOCKS, writers.MAX_BLOCK)
RAW_PART = 8 * MiB  # msfs's multipart grid (src/write/plan.rs DEFAULT_PART)
RAW_PARTS_IN_FLIGHT = 4  # msfs's parts in parallel per commit (src/write/commit.rs)
# Assumed rates for the duration estimate only (the slowest peer sets the pace).
EST_WRITE_MIB_S = 40.0


def _small_fs(ctx: Context, name: str, block: int, threads: int) -> Sample:
    count, size = ctx.scale.write_count, ctx.scale.write_size
    period = writers.period_for(count * size)
    s = Scratch.make(ctx, name)
    try:
        keys = s.keys(count)
        out = s.write("files", paths=s.paths(keys), size=size, block=block, threads=threads, period=period)
        seconds = s.stop_clock(out, verify.sizes_are({k: size for k in keys}), f"{count} files")
        sample = Sample.throughput(out["bytes"], seconds, tool="writers files", threads=threads,
                                   block_size=block, files=count, **s.waited(out))
        return s.checked(sample, "MiB/s", lambda: verify.check_files(ctx.raw, s.prefix, keys, size, period))
    finally:
        s.clean()


def _small_raw(ctx: Context, name: str, threads: int) -> Sample:
    count, size = ctx.scale.write_count, ctx.scale.write_size
    s = Scratch.make(ctx, name)
    try:
        r = ctx.raw.put_objects(s.prefix, count, size, threads)
        sample = Sample.throughput(r["bytes"], r["seconds"], tool="raw_read put-objects", requests=r["requests"])
        expected = {k: size for k in s.keys(count)}
        return s.checked(sample, "MiB/s", lambda: verify.check_sizes(ctx.raw, s.prefix, expected))
    finally:
        s.clean()


def _large_fs(ctx: Context, name: str, block: int) -> Sample:
    size = ctx.scale.write_large_size
    period = writers.period_for(size)
    s = Scratch.make(ctx, name)
    try:
        keys = s.keys(1)
        out = s.write("files", paths=s.paths(keys), size=size, block=block, threads=1, period=period)
        seconds = s.stop_clock(out, verify.sizes_are({keys[0]: size}), "the file")
        sample = Sample.throughput(size, seconds, tool="writers files", threads=1, block_size=block,
                                   **s.waited(out))
        return s.checked(sample, "MiB/s", lambda: verify.check_files(ctx.raw, s.prefix, keys, size, period))
    finally:
        s.clean()


def _large_raw(ctx: Context, name: str) -> Sample:
    size = ctx.scale.write_large_size
    s = Scratch.make(ctx, name)
    try:
        key = s.keys(1)[0]
        r = ctx.raw.put_large(key, size, RAW_PART, RAW_PARTS_IN_FLIGHT)
        sample = Sample.throughput(r["bytes"], r["seconds"], tool="raw_read put-large", requests=r["requests"])
        return s.checked(sample, "MiB/s", lambda: verify.check_sizes(ctx.raw, s.prefix, {key: size}))
    finally:
        s.clean()


def _fsync_fs(ctx: Context, name: str) -> Sample:
    size, block = ctx.scale.write_large_size, writers.MAX_BLOCK
    period = writers.period_for(size)
    s = Scratch.make(ctx, name)
    try:
        key = s.keys(1)[0]
        held: dict[str, bool] = {}

        def ask_the_store(_: dict) -> None:
            # The file is still open: only what the fsync made durable can be in the store.
            held["at_fsync"] = ctx.raw.objects_under(s.prefix).get(key, (-1, ""))[0] == size

        out = s.write_paused("fsync", ask_the_store, path=str(ctx.mount / key), size=size, block=block,
                             period=period)
        # Not the figure (that is the fsync's), but the check below must find the file uploaded.
        s.stop_clock(out, verify.sizes_are({key: size}), "the file")
        sample = Sample.throughput(size, out["fsynced"] - out["start"], tool="writers fsync", block_size=block,
                                   store_held_at_fsync=held["at_fsync"], fsync_seconds=out["fsync_seconds"],
                                   close_seconds=out["close_seconds"], **s.waited(out))
        return s.checked(sample, "MiB/s", lambda: verify.check_files(ctx.raw, s.prefix, [key], size, period))
    finally:
        s.clean()


def _random_fs(ctx: Context, name: str, block: int) -> Sample:
    size, seconds = ctx.data.large.size, ctx.scale.fio_seconds
    period = writers.period_for(size)
    s = Scratch.make(ctx, name, mkdir=False)
    try:
        key = s.prefix + "object"
        ctx.raw.copy(ctx.data.large.first_key, key)  # a fresh copy of the seeded object every run
        old_etag = ctx.raw.objects_under(key)[key][1]
        out = s.write("random", extra_seconds=seconds, path=str(ctx.mount / key), size=size, block=block,
                      seconds=seconds, period=period)
        total = s.stop_clock(out, verify.rewritten(key, size, old_etag), "the rewritten object")
        sample = Sample(out["writes"] / total, out["bytes"], total, {
            "tool": "writers random", "block_size": block, "writes": out["writes"],
            "write_phase_iops": out["writes"] / out["write_seconds"], "close_seconds": out["close_seconds"],
            **s.waited(out),
        })
        source = ctx.data.large.first_key
        return s.checked(sample, "IOPS", lambda: verify.check_random(
            ctx.raw, key, source, size, block, out["writes"], period))
    finally:
        s.clean()


@family("write", "Writes until durable in the store: new small files, one large file", Unit.MIB_S, group="write")
def write(scale: Scale) -> list[Workload]:
    out = []
    count, size = scale.write_count, human_bytes(scale.write_size)
    for block in BLOCKS:
        for threads in scale.write_threads:
            kib = block // KiB
            name = f"write-small-{kib}k-t{threads}"
            out.append(Workload(
                name=name, family="write", title=f"{count} files, {kib} KiB x{threads}",
                description=f"create {count} x {size} files, each written start to end in {kib} KiB "
                f"write()s and closed, the files shared among {threads} thread(s); timed until the "
                "store holds them all.",
                unit=Unit.MIB_S, state=State.COLD, dataset="new files", io="buffered",
                on_fs=partial(_small_fs, name=name, block=block, threads=threads),
                on_raw=partial(_small_raw, name=name, threads=threads),
                raw_note=f"one PutObject per file, {threads} in flight",
                est_seconds=scale.write_count * scale.write_size / MiB / EST_WRITE_MIB_S + 3,
                smoke=(block == 64 * KiB and threads == scale.write_threads[0]), writes=True,
            ))
    large = human_bytes(scale.write_large_size)
    for block in LARGE_BLOCKS:
        label = f"{block // MiB}m" if block >= MiB else f"{block // KiB}k"
        name = f"write-seq-{label}"
        out.append(Workload(
            name=name, family="write", title=f"{large} file, {human_bytes(block)}",
            description=f"create one {large} file, write it start to end in {human_bytes(block)} write()s by one "
            "thread, close; timed until the store holds it.",
            unit=Unit.MIB_S, state=State.COLD, dataset="new file", io="buffered",
            on_fs=partial(_large_fs, name=name, block=block), on_raw=partial(_large_raw, name=name),
            raw_note=f"one multipart upload, {human_bytes(RAW_PART)} parts, {RAW_PARTS_IN_FLIGHT} in flight",
            est_seconds=scale.write_large_size / MiB / EST_WRITE_MIB_S + 3, writes=True,
        ))
    # Issue #21: which peers' fsync waits for the store. The figure is the rate until fsync
    # returned; whether the store held the file then (asked before the close) is in the JSON
    # and under the table.
    out.append(Workload(
        name="write-fsync", family="write", title=f"{large} file, 1 MiB, fsync",
        description=f"create one {large} file, write it start to end in 1 MiB write()s by one thread, "
        "fsync; timed until fsync returns. Before the close, the store is asked whether it holds the "
        "file (a peer whose fsync returns first is named under the table).",
        unit=Unit.MIB_S, state=State.COLD, dataset="new file", io="buffered",
        on_fs=partial(_fsync_fs, name="write-fsync"), on_raw=partial(_large_raw, name="write-fsync"),
        raw_note=f"one multipart upload, {human_bytes(RAW_PART)} parts, {RAW_PARTS_IN_FLIGHT} in flight",
        est_seconds=scale.write_large_size / MiB / EST_WRITE_MIB_S + 3, writes=True,
        smoke=True,  # the one tool that pauses (`shell.run_paused`): run by the self-check too
    ))
    return out


@family("write-random", "Random writes into an existing object, until the new version is durable",
        Unit.IOPS, group="write")
def write_random(scale: Scale) -> list[Workload]:
    out = []
    large = human_bytes(scale.large_size)
    for block in BLOCKS:
        kib = block // KiB
        name = f"write-rand-{kib}k"
        out.append(Workload(
            name=name, family="write-random", title=f"{kib} KiB into {large}",
            description=f"open an existing {large} object (a fresh server-side copy of the seeded one), "
            f"{kib} KiB pwrite()s at random aligned offsets by one thread for {scale.fio_seconds:g} s, "
            "close; IOPS = writes / the time from open until the store holds the new version (the "
            "commit is on the clock; the write phase's own rate is in the JSON).",
            unit=Unit.IOPS, state=State.COLD, dataset="large", io="buffered",
            on_fs=partial(_random_fs, name=name, block=block), on_raw=None,
            raw_note="rebuilding an object (UploadPartCopy + uploaded parts) is msfs's own "
            "strategy, not a physical limit",
            est_seconds=scale.fio_seconds + 2 * scale.large_size / MiB / EST_WRITE_MIB_S + 3,
            smoke=(block == 64 * KiB), writes=True,  # s3fs needs ~20 ms per dirty 4 KiB block
        ))
    return out
