"""The physical-limit client: thin wrapper over `examples/raw_read.rs`, one method per command."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

from .shell import run


class RawClient:
    def __init__(self, binary: Path, endpoint: str, bucket: str, env: dict[str, str]):
        self.binary = binary
        self.endpoint = endpoint
        self.bucket = bucket
        self.env = env

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

    def ttfb(self, key: str) -> dict[str, Any]:
        return self._call("ttfb", "--key", key)

    def seed(self, keys: list[str], size: int, concurrency: int) -> dict[str, Any]:
        with tempfile.NamedTemporaryFile("w", suffix=".keys") as f:
            f.write("\n".join(keys) + "\n")
            f.flush()
            return self._call(
                "seed", "--size", size, "--concurrency", concurrency, "--keys-file", f.name, timeout=3600
            )
