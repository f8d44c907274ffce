"""The physical-limit client: thin wrapper over `examples/raw_read.rs`, one method per command.
Besides the measurements it is the harness's own view of the store: seeding, and the set-up,
listing, read-back and clean-up around write cells."""

from __future__ import annotations

import json
import queue
import subprocess
import tempfile
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator

from .shell import run


def _by_key(objects: list[list[Any]]) -> dict[str, tuple[int, str]]:
    """`raw_read`'s `[key, size, etag]` entries as key -> (size, ETag)."""
    return {key: (size, etag) for key, size, etag in objects}


def _ended(proc: subprocess.Popen[str], what: str, when: str) -> RuntimeError:
    """The error for a `raw_read` process that ended while it was needed, with what it said."""
    proc.wait()
    error = proc.stderr.read() if proc.stderr else ""
    return RuntimeError(f"{what} exited {proc.returncode}{' ' + when if when else ''}: {error.strip()}")


class RawClient:
    def __init__(self, binary: Path, endpoint: str, bucket: str, env: dict[str, str]):
        self.binary = binary
        self.endpoint = endpoint
        self.bucket = bucket
        self.env = env
        self._standby: subprocess.Popen[str] | None = None  # a watcher started ahead (`stand_by`)

    def stand_by(self) -> None:
        """Starts the next `watch`'s process now, idle until it is named its prefix: called
        before a writer runs, so that the clock `watch` stops does not include a process start
        (7-9 ms here, next to uploads that end 15 ms after a close)."""
        if self._standby is None:
            cmd = [str(self.binary), "--endpoint", self.endpoint, "--bucket", self.bucket, "watch"]
            proc = subprocess.Popen(cmd, env=self.env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, text=True)
            assert proc.stdout is not None
            # Its start and connection done before the caller's clock starts, not beside it.
            if not proc.stdout.readline():
                raise _ended(proc, "raw_read watch", "before it was ready")
            self._standby = proc

    def close(self) -> None:
        """Stops a watcher left standing by."""
        if self._standby is not None:
            self._standby.kill()
            self._standby.wait()
            self._standby = None

    def _call(self, *args: str | int | float, timeout: float = 1800) -> dict[str, Any]:
        cmd = [str(self.binary), "--endpoint", self.endpoint, "--bucket", self.bucket, *map(str, args)]
        out = run(cmd, env=self.env, timeout=timeout).stdout
        return json.loads(out.strip().splitlines()[-1])

    def read(self, key: str, request_size: int, concurrency: int) -> dict[str, Any]:
        return self._call("read", "--key", key, "--request-size", request_size, "--concurrency", concurrency)

    def random(self, key: str, request_size: int, concurrency: int, seconds: float) -> dict[str, Any]:
        return self._call(
            "random", "--key", key, "--request-size", request_size,
            "--concurrency", concurrency, "--seconds", seconds,
        )

    def objects(
        self, prefix: str, concurrency: int, request_size: int = 0, seconds: float | None = None
    ) -> dict[str, Any]:
        args: list[str | int | float] = [
            "objects", "--prefix", prefix, "--request-size", request_size, "--concurrency", concurrency,
        ]
        if seconds is not None:
            args += ["--seconds", seconds]
        return self._call(*args)

    def list_prefix(self, prefix: str, delimiter: str | None = None) -> dict[str, Any]:
        args = ["list", "--prefix", prefix] + (["--delimiter", delimiter] if delimiter else [])
        return self._call(*args)

    def objects_under(self, prefix: str) -> dict[str, tuple[int, str]]:
        """key -> (size, ETag) of every object under `prefix`."""
        return _by_key(self._call("list", "--prefix", prefix, "--keys")["objects"])

    @contextmanager
    def watch(self, prefix: str) -> Iterator[Callable[[float], Iterator[tuple[float, dict[str, tuple[int, str]]]]]]:
        """A `raw_read watch` of `prefix` for as long as the block runs: yields `listings`, which
        gives (arrival time on `time.monotonic`, key -> (size, ETag)) of every listing that
        differed from the one before, until the deadline passes. The process is killed after.
        It is the one `stand_by` started, if any."""
        self.stand_by()
        proc, self._standby = self._standby, None
        assert proc is not None and proc.stdin is not None
        try:
            proc.stdin.write(prefix + "\n")
            proc.stdin.flush()
        except BrokenPipeError:
            pass  # it died standing by: the pump below sees its end and reports its error
        lines: queue.Queue[str] = queue.Queue()

        def pump() -> None:  # a thread, so a line already read is never left waiting in a buffer
            assert proc.stdout is not None
            for line in proc.stdout:
                lines.put(line)
            lines.put("")  # the watcher ended

        threading.Thread(target=pump, daemon=True).start()

        def listings(deadline: float) -> Iterator[tuple[float, dict[str, tuple[int, str]]]]:
            while (left := deadline - time.monotonic()) > 0:
                try:
                    line = lines.get(timeout=left)
                except queue.Empty:
                    return
                if not line:
                    raise _ended(proc, f"raw_read watch --prefix {prefix}", "")
                listed = json.loads(line)
                yield listed["at"], _by_key(listed["objects"])

        try:
            yield listings
        finally:
            proc.kill()
            proc.wait()

    def put_objects(self, prefix: str, count: int, size: int, concurrency: int) -> dict[str, Any]:
        """`count` objects `<prefix>f00000`... of `size` bytes, `concurrency` PUTs in flight."""
        return self._call(
            "put-objects", "--prefix", prefix, "--count", count, "--size", size, "--concurrency", concurrency
        )

    def put_large(self, key: str, size: int, part_size: int, concurrency: int) -> dict[str, Any]:
        return self._call(
            "put-large", "--key", key, "--size", size, "--part-size", part_size, "--concurrency", concurrency
        )

    def delete_prefix(self, prefix: str, concurrency: int = 32) -> dict[str, Any]:
        return self._call("delete", "--prefix", prefix, "--concurrency", concurrency)

    def copy(self, source: str, key: str) -> dict[str, Any]:
        return self._call("copy", "--source", source, "--key", key)

    def fetch(self, key: str, ranges: list[tuple[int, int]] | None = None) -> bytes:
        """The object's bytes (with `ranges` of (offset, length): those ranges, concatenated)."""
        with tempfile.NamedTemporaryFile(suffix=".bytes") as f:
            args: list[str | int | float] = ["fetch", "--key", key, "--out", f.name]
            for offset, length in ranges or []:
                args += ["--range", f"{offset}:{length}"]
            self._call(*args)
            return Path(f.name).read_bytes()

    def ttfb(self, key: str) -> dict[str, Any]:
        return self._call("ttfb", "--key", key)

    def seed(self, keys: list[str], size: int, concurrency: int) -> dict[str, Any]:
        with tempfile.NamedTemporaryFile("w", suffix=".keys") as f:
            f.write("\n".join(keys) + "\n")
            f.flush()
            return self._call(
                "seed", "--size", size, "--concurrency", concurrency, "--keys-file", f.name, timeout=3600
            )
