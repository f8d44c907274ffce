"""What the store holds after a write cell: waiting for it (for a peer whose close() returns before
its upload is done) and checking it — every key at its size, and a sample read back byte for byte
through the raw client. A benchmark that counts lost writes as fast ones is worthless, so a cell
whose check fails is an error, whatever it measured.
"""

from __future__ import annotations

import time
from typing import Callable

from . import writers
from .rawclient import RawClient
from .scale import MiB

Listing = dict[str, tuple[int, str]]  # key -> (size, ETag)
SAMPLE_FILES = 8  # small files read back whole
SAMPLE_RANGES = 8  # 1 MiB ranges read back from a large file (first, last and between)
SAMPLE_BLOCKS = 16  # random writes read back (and as many untouched blocks, half)


class LostWrites(RuntimeError):
    """The store does not hold what the filesystem acknowledged."""


def wait_for(raw: RawClient, prefix: str, done: Callable[[Listing], bool], what: str, timeout: float) -> float:
    """Watches the listing of `prefix` until `done` holds; returns when that listing arrived, on
    `time.monotonic`. One `raw_read watch` process lists it, at once (the process was started
    before the writer, `RawClient.stand_by`) and then at pauses from 2 ms growing to 50 ms:
    uploads that end soon after the close are timed within a few ms (a fixed 50 ms poll made
    20 ms 70), and no process is started per listing (whose CPU, on two cores, slowed the
    uploads being timed)."""
    with raw.watch(prefix) as listings:
        for at, listed in listings(time.monotonic() + timeout):
            if done(listed):
                return at
    raise LostWrites(f"{what}: not in the store {timeout:.0f} s after close")


def sizes_are(expected: dict[str, int]) -> Callable[[Listing], bool]:
    return lambda listed: all(k in listed and listed[k][0] == n for k, n in expected.items())


def gone(keys: list[str]) -> Callable[[Listing], bool]:
    return lambda listed: not any(k in listed for k in keys)


def rewritten(key: str, size: int, old_etag: str) -> Callable[[Listing], bool]:
    return lambda listed: key in listed and listed[key][0] == size and listed[key][1] != old_etag


def spread(count: int, k: int) -> list[int]:
    """Up to `k` indices of `range(count)`, evenly spaced, the first and the last included."""
    if count <= k:
        return list(range(count))
    return sorted({round(i * (count - 1) / (k - 1)) for i in range(k)})


def check_sizes(raw: RawClient, prefix: str, expected: dict[str, int]) -> Listing:
    listed = raw.objects_under(prefix)
    missing = [k for k in expected if k not in listed]
    wrong = [f"{k} has {listed[k][0]} bytes, not {n}" for k, n in expected.items()
             if k in listed and listed[k][0] != n]
    if missing or wrong:
        raise LostWrites(f"{len(missing)} of {len(expected)} objects missing ({', '.join(missing[:3])}), "
                         f"{len(wrong)} of the wrong size ({'; '.join(wrong[:3])})")
    return listed


def check_absent(raw: RawClient, prefix: str, keys: list[str]) -> None:
    left = [k for k in keys if k in raw.objects_under(prefix)]
    if left:
        raise LostWrites(f"{len(left)} of {len(keys)} unlinked objects still in the store ({', '.join(left[:3])})")


def check_bytes(raw: RawClient, key: str, ranges: list[tuple[int, int]] | None, expected: bytes) -> None:
    got = raw.fetch(key, ranges)
    if got != expected:
        at = next((i for i, (a, b) in enumerate(zip(got, expected)) if a != b), min(len(got), len(expected)))
        raise LostWrites(f"{key}: the store's bytes differ from those written, at byte {at} of the "
                         f"{len(expected)} checked (ranges {ranges or 'whole object'})")


def check_files(raw: RawClient, prefix: str, keys: list[str], size: int, period: int) -> None:
    """Files written by `writers.write_files`: all there at their size, a sample byte for byte."""
    check_sizes(raw, prefix, {k: size for k in keys})
    for i in spread(len(keys), SAMPLE_FILES):
        if size <= 4 * MiB:
            check_bytes(raw, keys[i], None, writers.file_bytes(period, i, 0, size))
        else:
            ranges = [(o * MiB, min(MiB, size - o * MiB)) for o in spread(size // MiB, SAMPLE_RANGES)]
            expected = b"".join(writers.file_bytes(period, i, off, n) for off, n in ranges)
            check_bytes(raw, keys[i], ranges, expected)


def check_random(raw: RawClient, key: str, source: str, size: int, block: int, writes: int, period: int) -> None:
    """An object rewritten by `writers.write_random`: the last write at each sampled offset is
    there, and sampled untouched blocks still hold the source object's bytes."""
    check_sizes(raw, key, {key: size})
    final = writers.final_random_content(size, block, writes)
    written = sorted(final)
    ranges = [(written[i], block) for i in spread(len(written), SAMPLE_BLOCKS)]
    data = writers.pool(period)
    check_bytes(raw, key, ranges, b"".join(data.bytes_at(final[off], block) for off, _ in ranges))
    untouched = [o * block for o in spread(size // block, SAMPLE_BLOCKS * 4) if o * block not in final]
    kept = [(off, block) for off in untouched[:: max(1, len(untouched) // (SAMPLE_BLOCKS // 2))]]
    if kept:
        check_bytes(raw, key, kept, raw.fetch(source, kept))
