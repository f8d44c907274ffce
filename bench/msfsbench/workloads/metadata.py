"""goofys-style metadata reads (issue 9): `ls -l` of a 1,000-file directory, `find` over a
9x9x9 tree, time to first byte of a 1 GiB file. Each on a fresh mount (cold entry and attribute
caches), as goofys's benchmark simulates cold runs with zero cache TTLs.

Physical limit: the fewest requests that answer the same question — one LIST per 1,000 keys of
the directory (with the `/` delimiter), one recursive LIST of the whole tree, and one GET until its
first body byte.

The create/unlink rows of the goofys table need a writable mount: they are the `write-metadata`
family (write_metadata.py).
"""

from __future__ import annotations

from ..measure import Sample, time_command, time_to_first_byte
from ..scale import Scale, human_bytes
from .registry import State, Unit, Workload, family


def _raw_seconds(out: dict[str, float], tool: str) -> Sample:
    return Sample.latency(out["seconds"], tool=tool, requests=out["requests"])


@family("metadata", "Metadata reads on a fresh mount (goofys-style)", Unit.SECONDS)
def metadata(scale: Scale) -> list[Workload]:
    n, f = scale.many_count, scale.tree_fanout
    dirs = f + f * f + f * f * f
    return [
        Workload(
            name="meta-ls", family="metadata", title=f"ls -l {n} files",
            description=f"`ls -l` of a directory of {n} files (names and attributes of every entry).",
            unit=Unit.SECONDS, state=State.COLD, dataset="many", io="metadata",
            on_fs=lambda ctx: time_command(["ls", "-l", ctx.mount / ctx.data.many.prefix]),
            on_raw=lambda ctx: _raw_seconds(ctx.raw.list_prefix(ctx.data.many.prefix, "/"), "raw_read list /"),
            raw_note="ListObjectsV2 with delimiter, all pages",
            est_seconds=3, smoke=True,
        ),
        Workload(
            name="meta-find", family="metadata", title=f"find {f}x{f}x{f} tree",
            description=f"`find` over a {f}x{f}x{f} directory tree ({dirs} directories, one file in each leaf).",
            unit=Unit.SECONDS, state=State.COLD, dataset="tree", io="metadata",
            on_fs=lambda ctx: time_command(["find", ctx.mount / ctx.data.tree.prefix]),
            on_raw=lambda ctx: _raw_seconds(ctx.raw.list_prefix(ctx.data.tree.prefix), "raw_read list"),
            raw_note="recursive ListObjectsV2 of the tree, all pages",
            est_seconds=4,
        ),
        Workload(
            name="meta-ttfb", family="metadata", title=f"first byte of {human_bytes(scale.large_size)}",
            description=f"open() and a 1-byte read() of the {human_bytes(scale.large_size)} object.",
            unit=Unit.SECONDS, state=State.COLD, dataset="large", io="metadata",
            on_fs=lambda ctx: time_to_first_byte(ctx.mount / ctx.data.large.first_key),
            on_raw=lambda ctx: _raw_seconds(ctx.raw.ttfb(ctx.data.large.first_key), "raw_read ttfb"),
            raw_note="GET of the object until its first body byte",
            est_seconds=2,
        ),
    ]
