"""The write tools: they write through a mount from a child process (`python -m msfsbench.writers
SPEC.json`, run by `run_writer`), so a filesystem that hangs in close() costs a killed child and a
failed cell, not the whole run.

What is written is a function of (file index, offset) only — windows of one pool of pseudo-random
bytes — so the harness can tell what every byte should be when it reads the store back, and the
server can neither compress the data nor deduplicate it (no two files, and no two 1 MiB blocks of
one file, are equal).

Each tool prints one JSON object: `start` and `end` on the system-wide monotonic clock (so the
harness can stop the clock later, once a peer's upload is done), plus what it did.
"""

from __future__ import annotations

import functools
import json
import os
import random
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

from .scale import MiB
from .shell import run_killable, run_paused

PACKAGE_PARENT = Path(__file__).resolve().parents[1]  # the child runs `-m msfsbench.writers` from here

MAX_BLOCK = 1 * MiB  # longest single write()
FILE_STRIDE = 1 * MiB + 4097  # file i starts at pool position i * FILE_STRIDE
RANDOM_STRIDE = 7919  # random write i writes the window at i * RANDOM_STRIDE
CREATE_BYTES = 8  # what `echo $i > file` writes, give or take: "%07d\n"
SEED = 0x6D736673


class Pool:
    """An endless repetition of `period` pseudo-random bytes. The period is odd, so windows at
    different multiples of 1 MiB differ for any data set smaller than period x 1 MiB."""

    def __init__(self, period: int):
        self.period = period
        body = random.Random(SEED).randbytes(period)
        self.view = memoryview(body + body[:MAX_BLOCK])

    def window(self, start: int, length: int) -> memoryview:
        """`length` (at most MAX_BLOCK) bytes at `start`, without a copy."""
        at = start % self.period
        return self.view[at:at + length]

    def bytes_at(self, start: int, length: int) -> bytes:
        out = bytearray()
        while length > 0:
            piece = self.window(start, min(length, MAX_BLOCK))
            out += piece
            start += len(piece)
            length -= len(piece)
        return bytes(out)


@functools.lru_cache(maxsize=2)
def pool(period: int) -> Pool:
    return Pool(period)


def period_for(total_bytes: int) -> int:
    """Up to ~64 MiB of pool (generated in about half a second), less for less data."""
    return min(max(total_bytes, 1 * MiB), 64 * MiB) | 1


def file_bytes(period: int, index: int, offset: int, length: int) -> bytes:
    """What file `index` of a `write_files` run holds at `offset`."""
    return pool(period).bytes_at(index * FILE_STRIDE + offset, length)


def random_writes(size: int, block: int, seed: int = SEED) -> Iterator[tuple[int, int]]:
    """The random-write plan: (offset in the file, pool position of the bytes written there) of
    write 0, 1, 2, ... — the same on every peer and reproducible by the checker."""
    rnd, slots, i = random.Random(seed), max(1, size // block), 0
    while True:
        yield rnd.randrange(slots) * block, i * RANDOM_STRIDE
        i += 1


def final_random_content(size: int, block: int, count: int) -> dict[int, int]:
    """offset -> pool position of the last write there, after the first `count` writes."""
    plan, last = random_writes(size, block), {}
    for _ in range(count):
        offset, start = next(plan)
        last[offset] = start
    return last


def create_bytes(index: int) -> bytes:
    return b"%07d\n" % (index % 10_000_000)


def _writer_command(tool: str, workdir: Path, args: dict[str, Any]) -> list[str | Path]:
    spec = workdir / "writer.json"
    spec.write_text(json.dumps({"tool": tool, **args}))
    return [sys.executable, "-m", "msfsbench.writers", spec]


def run_writer(tool: str, workdir: Path, timeout: float, **args: Any) -> dict[str, Any]:
    """Runs one tool in a child process; kills it (and fails) after `timeout` seconds."""
    out = run_killable(_writer_command(tool, workdir, args), timeout=timeout, cwd=PACKAGE_PARENT)
    return json.loads(out.strip().splitlines()[-1])


def run_paused_writer(
    tool: str, workdir: Path, timeout: float, at_pause: Callable[[dict[str, Any]], None], **args: Any
) -> dict[str, Any]:
    """`run_writer` for a tool that pauses (`write_fsync`): `at_pause` gets what it printed at
    its pause and runs while the tool waits."""
    out = run_paused(_writer_command(tool, workdir, args), timeout=timeout, cwd=PACKAGE_PARENT,
                     at_pause=lambda line: at_pause(json.loads(line)))
    return json.loads(out.strip().splitlines()[-1])


# ---------------------------------------------------------------- the tools (in the child)


def _in_threads(items: Sequence[Any], threads: int, work: Callable[[int, Any], None]) -> None:
    """`work(index, item)` for every item, item i on thread i % threads, all threads at once."""
    errors: list[BaseException] = []

    def worker(first: int) -> None:
        try:
            for i in range(first, len(items), threads):
                work(i, items[i])
        except BaseException as e:  # surfaced below, in the caller's thread
            errors.append(e)

    pool_ = [threading.Thread(target=worker, args=(t,)) for t in range(threads)]
    for t in pool_:
        t.start()
    for t in pool_:
        t.join()
    if errors:
        raise errors[0]


def write_files(paths: list[str], size: int, block: int, threads: int, period: int) -> dict[str, Any]:
    """Creates every file, writes it start to end in `block` writes, closes it."""
    data = pool(period)

    def one(index: int, path: str) -> None:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            _write_file(fd, data, index, size, block)
        finally:
            os.close(fd)

    start = time.monotonic()
    _in_threads(paths, threads, one)
    return {"start": start, "end": time.monotonic(), "bytes": size * len(paths), "files": len(paths)}


def _write_file(fd: int, data: Pool, index: int, size: int, block: int) -> None:
    """File `index`'s `size` bytes, start to end in `block` writes."""
    base = index * FILE_STRIDE
    for offset in range(0, size, block):
        view = data.window(base + offset, min(block, size - offset))
        while view:
            view = view[os.write(fd, view):]


def write_fsync(path: str, size: int, block: int, period: int) -> dict[str, Any]:
    """Creates file 0, writes it start to end in `block` writes and fsyncs it; then, still open,
    prints the moment the fsync returned and waits for a line on stdin (the harness asks the
    store meanwhile whether it holds the file) before it closes."""
    data = pool(period)
    start = time.monotonic()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        _write_file(fd, data, 0, size, block)
        written = time.monotonic()
        os.fsync(fd)
        fsynced = time.monotonic()
        print(json.dumps({"fsynced": fsynced}), flush=True)
        sys.stdin.readline()
    finally:
        closing = time.monotonic()
        os.close(fd)
    end = time.monotonic()
    return {"start": start, "end": end, "fsynced": fsynced, "bytes": size, "write_seconds": written - start,
            "fsync_seconds": fsynced - written, "close_seconds": end - closing}


def write_random(path: str, size: int, block: int, seconds: float, period: int) -> dict[str, Any]:
    """Opens an existing file, writes `block` bytes at random aligned offsets for `seconds`, closes."""
    data, plan = pool(period), random_writes(size, block)
    start = time.monotonic()
    fd = os.open(path, os.O_WRONLY)
    writes = 0
    try:
        while writes % 64 or time.monotonic() - start < seconds:
            offset, at = next(plan)
            if os.pwrite(fd, data.window(at, block), offset) != block:
                raise OSError(f"{path}: short write at {offset}")
            writes += 1
    finally:
        written = time.monotonic()
        os.close(fd)
    end = time.monotonic()
    return {"start": start, "end": end, "writes": writes, "bytes": writes * block,
            "write_seconds": written - start, "close_seconds": end - written}


def create_files(paths: list[str], threads: int) -> dict[str, Any]:
    """`echo $i > file$i` for every file: create, write a few bytes, close."""

    def one(index: int, path: str) -> None:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.write(fd, create_bytes(index))
        finally:
            os.close(fd)

    start, cpu = time.monotonic(), time.process_time()
    _in_threads(paths, threads, one)
    end = time.monotonic()
    return {"start": start, "end": end, "files": len(paths), "cpu_seconds": time.process_time() - cpu}


def unlink_files(paths: list[str], threads: int) -> dict[str, Any]:
    start = time.monotonic()
    _in_threads(paths, threads, lambda _, path: os.unlink(path))
    return {"start": start, "end": time.monotonic(), "files": len(paths)}


TOOLS: dict[str, Callable[..., dict[str, Any]]] = {
    "files": write_files, "fsync": write_fsync, "random": write_random, "create": create_files,
    "unlink": unlink_files,
}


def main(argv: list[str]) -> int:
    spec = json.loads(Path(argv[0]).read_text())
    tool = TOOLS[spec.pop("tool")]
    print(json.dumps(tool(**spec)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
