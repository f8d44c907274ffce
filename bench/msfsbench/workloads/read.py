"""Read workloads (issues 3 and 9): sequential, random, small files, many warm files.

Physical limit, per family — the cheapest way a tight client moves the same bytes from the server
at the same concurrency:
  * sequential 1 GiB: the whole object in 8 MiB ranged GETs, 4 in flight (a streaming reader
    with read-ahead can use the server's parallel-stream rate, so that is its ceiling);
  * random: the same number of threads issuing ranged GETs of the same block size for the same
    time (no client can fetch fewer bytes for a random block);
  * small and many files: whole-object GETs, one per file, `threads` in flight, for the same time
    (small files) or over the same files (many files).
"""

from __future__ import annotations

from ..measure import FioJob, Sample, evict_page_cache, read_files, run_fio, split
from ..scale import KiB, MiB, Scale, human_bytes
from .registry import Context, State, Unit, Workload, family

SEQ_BLOCK = 1 * MiB
RAW_STREAM_REQUEST = 8 * MiB
RAW_STREAMS = 4
# Assumed rates for the duration estimate only (conservative: the slowest peer sets the pace).
EST_SEQ_MIB_S = 120.0


def _fio_seconds_estimate(scale: Scale) -> float:
    return scale.fio_seconds + 1.5  # fio start-up and file set-up


@family("sequential", "Sequential read of one large object, 1 MiB blocks", Unit.MIB_S)
def sequential(scale: Scale) -> list[Workload]:
    size = human_bytes(scale.large_size)

    def on_fs(ctx: Context) -> Sample:
        path = ctx.mount / ctx.data.large.first_key
        return run_fio(FioJob("read", SEQ_BLOCK, direct=False, files=((path,),)), ctx.workdir)

    def on_raw(ctx: Context) -> Sample:
        out = ctx.raw.read(ctx.data.large.first_key, RAW_STREAM_REQUEST, RAW_STREAMS)
        return Sample.throughput(out["bytes"], out["seconds"], tool="raw_read read", requests=out["requests"])

    raw_note = f"{human_bytes(RAW_STREAM_REQUEST)} ranged GETs, {RAW_STREAMS} in flight"
    est = scale.large_size / MiB / EST_SEQ_MIB_S + 2
    return [
        Workload(
            name="seq-cold", family="sequential", title=f"cold {size}",
            description=f"First read of a {size} object after mounting with an empty cache and "
            "dropping the page cache: 1 MiB buffered reads, one thread (kernel read-ahead on).",
            unit=Unit.MIB_S, state=State.COLD, dataset="large", io="buffered",
            on_fs=on_fs, on_raw=on_raw, raw_note=raw_note, est_seconds=est + 3, smoke=True,
        ),
        Workload(
            name="seq-warm", family="sequential", title=f"cache-resident {size}",
            description=f"Second pass over the same {size} object, served from the filesystem's "
            "cache (the mount's page cache is evicted first, so the kernel does not answer).",
            unit=Unit.MIB_S, state=State.WARM, dataset="large", io="buffered",
            on_fs=on_fs, on_raw=on_raw, raw_note=raw_note, est_seconds=est,
        ),
        Workload(
            name="restart-warm", family="sequential", title=f"after a restart, {size}",
            description=f"The same {size} object read once, the peer's process restarted over "
            "the same cache directory (as after a crash or an upgrade), its page cache evicted, "
            "then read again: a peer that keeps its cache answers from disk, the others fetch.",
            unit=Unit.MIB_S, state=State.RESTARTED, dataset="large", io="buffered",
            on_fs=on_fs, on_raw=on_raw, raw_note=raw_note, est_seconds=3 * est,
        ),
    ]


TIERED_PASSES = 3


@family("tiers", "Passes over a working set bigger than a RAM tier (issue #22)", Unit.MIB_S)
def tiers(scale: Scale) -> list[Workload]:
    size = human_bytes(scale.large_size)

    def on_fs(ctx: Context) -> Sample:
        # Each pass from the peer's own cache, not the kernel's copy: the page cache is evicted
        # between passes (the cold first pass starts after the runner's drop_caches).
        path = ctx.mount / ctx.data.large.first_key
        passes = []
        for n in range(TIERED_PASSES):
            if n:
                evict_page_cache([path])
            passes.append(run_fio(FioJob("read", SEQ_BLOCK, direct=False, files=((path,),)), ctx.workdir))
        last = passes[-1]
        return Sample(last.value, last.bytes, last.seconds,
                      {**last.detail, "passes_mib_s": [round(p.value, 1) for p in passes]})

    def on_raw(ctx: Context) -> Sample:
        out = ctx.raw.read(ctx.data.large.first_key, RAW_STREAM_REQUEST, RAW_STREAMS)
        return Sample.throughput(out["bytes"], out["seconds"], tool="raw_read read", requests=out["requests"])

    est = TIERED_PASSES * (scale.large_size / MiB / EST_SEQ_MIB_S + 2)
    return [Workload(
        name="tiered", family="tiers", title=f"third pass over {size}",
        description=f"A {size} object read {TIERED_PASSES} times from a fresh mount with an empty "
        "cache (1 MiB buffered reads, one thread, the mount's page cache evicted between passes); "
        "the last pass is reported, every pass's rate in the JSON. Run it with `msfs-tiered` (a RAM "
        "tier of half the object over a disk tier) beside `msfs-small-ram` (the same RAM, no disk "
        "tier) and `msfs` (the whole budget in RAM).",
        unit=Unit.MIB_S, state=State.COLD, dataset="large", io="buffered",
        on_fs=on_fs, on_raw=on_raw, raw_note=f"{human_bytes(RAW_STREAM_REQUEST)} ranged GETs, {RAW_STREAMS} in flight",
        est_seconds=est + 3,
    )]


@family("random", "Cache-resident random reads of one large object (fio, O_DIRECT)", Unit.MIB_S)
def random(scale: Scale) -> list[Workload]:
    out = []
    for bs in (4 * KiB, 64 * KiB):
        for threads in scale.threads:

            def on_fs(ctx: Context, bs: int = bs, threads: int = threads) -> Sample:
                path = ctx.mount / ctx.data.large.first_key
                job = FioJob("randread", bs, direct=True, files=((path,),) * threads, seconds=ctx.scale.fio_seconds)
                return run_fio(job, ctx.workdir)

            def on_raw(ctx: Context, bs: int = bs, threads: int = threads) -> Sample:
                r = ctx.raw.random(ctx.data.large.first_key, bs, threads, ctx.scale.fio_seconds)
                return Sample.throughput(r["bytes"], r["seconds"], tool="raw_read random", requests=r["requests"])

            kib = bs // KiB
            out.append(Workload(
                name=f"rand-{kib}k-t{threads}", family="random", title=f"{kib} KiB x{threads}",
                description=f"{kib} KiB random reads of the {human_bytes(scale.large_size)} object by "
                f"{threads} thread(s) for {scale.fio_seconds:g} s, O_DIRECT, after a warm-up pass.",
                unit=Unit.MIB_S, state=State.WARM, dataset="large", io="O_DIRECT",
                on_fs=on_fs, on_raw=on_raw,
                raw_note=f"{kib} KiB ranged GETs at random offsets, {threads} in flight",
                est_seconds=_fio_seconds_estimate(scale),
                smoke=(bs == 4 * KiB and threads == scale.threads[0]),
            ))
    return out


@family("small-files", "Cache-resident sequential reads of small files (fio, O_DIRECT)", Unit.MIB_S)
def small_files(scale: Scale) -> list[Workload]:
    out = []
    count, size = scale.small_count, human_bytes(scale.small_size)
    for bs in (4 * KiB, 64 * KiB):
        for threads in scale.threads:

            def on_fs(ctx: Context, bs: int = bs, threads: int = threads) -> Sample:
                shares = split(ctx.data.small.paths(ctx.mount), threads)
                return run_fio(FioJob("read", bs, direct=True, files=shares, seconds=ctx.scale.fio_seconds), ctx.workdir)

            def on_raw(ctx: Context, threads: int = threads) -> Sample:
                r = ctx.raw.objects(ctx.data.small.prefix, threads, seconds=ctx.scale.fio_seconds)
                return Sample.throughput(r["bytes"], r["seconds"], tool="raw_read objects", requests=r["requests"])

            kib = bs // KiB
            out.append(Workload(
                name=f"small-{kib}k-t{threads}", family="small-files", title=f"{kib} KiB x{threads}",
                description=f"{count} x {size} files read start to end in {kib} KiB requests, the files "
                f"shared among {threads} thread(s), for {scale.fio_seconds:g} s, O_DIRECT, after a warm-up pass.",
                unit=Unit.MIB_S, state=State.WARM, dataset="small", io="O_DIRECT",
                on_fs=on_fs, on_raw=on_raw,
                raw_note=f"one whole-object GET per file, {threads} in flight",
                est_seconds=_fio_seconds_estimate(scale),
                smoke=(bs == 64 * KiB and threads == scale.threads[0]),
            ))
    return out


@family("many-files", "Cache-resident whole-file reads of many 64 KiB files", Unit.MIB_S)
def many_files(scale: Scale) -> list[Workload]:
    out = []
    count, size = scale.many_count, human_bytes(scale.many_size)
    # The fewest and the most threads of the scale: one reader, and a parallel loader.
    for threads in sorted({min(scale.threads), max(scale.threads)}):

        def on_fs(ctx: Context, threads: int = threads) -> Sample:
            return read_files(ctx.data.many.paths(ctx.mount), threads)

        def on_raw(ctx: Context, threads: int = threads) -> Sample:
            r = ctx.raw.objects(ctx.data.many.prefix, threads)
            return Sample.throughput(r["bytes"], r["seconds"], tool="raw_read objects", requests=r["requests"])

        out.append(Workload(
            name=f"files64k-t{threads}", family="many-files", title=f"{count} files x{threads}",
            description=f"open, read to the end and close each of {count} x {size} files, "
            f"{threads} thread(s), buffered, after a warm-up pass.",
            unit=Unit.MIB_S, state=State.WARM, dataset="many", io="buffered",
            on_fs=on_fs, on_raw=on_raw, raw_note=f"one whole-object GET per file, {threads} in flight",
            est_seconds=count * scale.many_size / MiB / 20 + 1,
            smoke=(threads == min(scale.threads)),
        ))
    return out
