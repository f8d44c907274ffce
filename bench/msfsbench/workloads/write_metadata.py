"""goofys-style metadata writes (issue 9): create 100 files and unlink 100 files, one at a time and
all at once (goofys's `&` ... `wait`), on a fresh writable mount.

create is `echo $i > file$i`: create, write 8 bytes, close — timed until the store holds every
file (see write.py for how each peer gets there). unlink removes files the mount has just listed
(so their names are known, as after creating them), timed until none is left in the store.

Physical limit: the same requests one by one — one PutObject per file, one DeleteObject per file
— with as many in flight as the cell has threads.
"""

from __future__ import annotations

import os
from functools import partial

from .. import verify, writers
from ..measure import Sample
from ..scale import Scale
from .registry import Context, State, Unit, Workload, family
from .scratch import Scratch


def _threads(parallel: bool, count: int) -> int:
    return count if parallel else 1


def _create_fs(ctx: Context, name: str, parallel: bool) -> Sample:
    count = ctx.scale.meta_count
    s = Scratch.make(ctx, name)
    try:
        keys = s.keys(count)
        out = s.write("create", paths=s.paths(keys), threads=_threads(parallel, count))
        expected = {k: writers.CREATE_BYTES for k in keys}
        seconds = s.stop_clock(out, verify.sizes_are(expected), f"{count} created files")

        def check() -> None:
            verify.check_sizes(ctx.raw, s.prefix, expected)
            for i in verify.spread(count, 4):
                verify.check_bytes(ctx.raw, keys[i], None, writers.create_bytes(i))

        sample = Sample.latency(seconds, tool="writers create", files=count, **s.waited(out))
        return s.checked(sample, "s", check)
    finally:
        s.clean()


def _create_raw(ctx: Context, name: str, parallel: bool) -> Sample:
    count = ctx.scale.meta_count
    s = Scratch.make(ctx, name)
    try:
        r = ctx.raw.put_objects(s.prefix, count, writers.CREATE_BYTES, _threads(parallel, count))
        sample = Sample.latency(r["seconds"], tool="raw_read put-objects", requests=r["requests"])
        expected = {k: writers.CREATE_BYTES for k in s.keys(count)}
        return s.checked(sample, "s", lambda: verify.check_sizes(ctx.raw, s.prefix, expected))
    finally:
        s.clean()


def _unlink_fs(ctx: Context, name: str, parallel: bool) -> Sample:
    count = ctx.scale.meta_count
    s = Scratch.make(ctx, name, mkdir=False)
    try:
        keys = s.keys(count)
        ctx.raw.put_objects(s.prefix, count, writers.CREATE_BYTES, 32)
        listed = set(os.listdir(s.dir))
        if len(listed) < count:
            raise RuntimeError(f"{s.dir} lists {len(listed)} of the {count} files just put")
        out = s.write("unlink", paths=s.paths(keys), threads=_threads(parallel, count))
        seconds = s.stop_clock(out, verify.gone(keys), f"{count} unlinked files")
        sample = Sample.latency(seconds, tool="writers unlink", files=count, **s.waited(out))
        return s.checked(sample, "s", lambda: verify.check_absent(ctx.raw, s.prefix, keys))
    finally:
        s.clean()


def _unlink_raw(ctx: Context, name: str, parallel: bool) -> Sample:
    count = ctx.scale.meta_count
    s = Scratch.make(ctx, name)
    try:
        ctx.raw.put_objects(s.prefix, count, writers.CREATE_BYTES, 32)
        r = ctx.raw.delete_prefix(s.prefix, _threads(parallel, count))
        sample = Sample.latency(r["seconds"], tool="raw_read delete", requests=r["requests"])
        return s.checked(sample, "s", lambda: verify.check_absent(ctx.raw, s.prefix, s.keys(count)))
    finally:
        s.clean()


@family("write-metadata", "Create and unlink files on a fresh mount (goofys-style), until durable",
        Unit.SECONDS, group="write")
def write_metadata(scale: Scale) -> list[Workload]:
    n = scale.meta_count
    out = []
    for op, on_fs, on_raw, what in (
        ("create", _create_fs, _create_raw, f"create {n} files (`echo $i > file$i`: create, write 8 bytes, close)"),
        ("unlink", _unlink_fs, _unlink_raw, f"unlink {n} files the mount has just listed"),
    ):
        for parallel in (False, True):
            name = f"meta-{op}-{'par' if parallel else 'seq'}"
            how = f"all {n} at once, one thread each" if parallel else "one after the other"
            request = "PutObject" if op == "create" else "DeleteObject"
            out.append(Workload(
                name=name, family="write-metadata",
                title=f"{op} {n} files, {'parallel' if parallel else 'sequential'}",
                description=f"{what}, {how}; timed until the store shows it.",
                unit=Unit.SECONDS, state=State.COLD, dataset="new files", io="metadata",
                on_fs=partial(on_fs, name=name, parallel=parallel),
                on_raw=partial(on_raw, name=name, parallel=parallel),
                raw_note=f"one {request} per file, {_threads(parallel, n)} in flight",
                est_seconds=3, smoke=(op == "create" and parallel), writes=True,
            ))
    return out
