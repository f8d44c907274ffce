"""Where a write cell writes, and the steps around its timed part, the same for every peer: a fresh
empty prefix `w/<workload>/<peer>/` (and its directory on the mount) before; after it, the wait
until the store holds the result (on the clock, for a peer whose close() returns before its
upload), the check of what the store holds, and the clean-up."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from ..datasets import numbered
from ..measure import Sample
from ..verify import Listing, LostWrites, wait_for
from ..writers import run_paused_writer, run_writer
from .registry import Context


@dataclass(frozen=True)
class Scratch:
    ctx: Context
    prefix: str

    @staticmethod
    def make(ctx: Context, workload: str, mkdir: bool = True) -> "Scratch":
        """An empty prefix; with `mkdir`, its directory made on the mount (for files created
        there; a cell whose objects the raw client puts leaves it to them, so that no peer caches
        the directory as empty)."""
        s = Scratch(ctx, f"w/{workload}/{ctx.peer}/")
        ctx.raw.delete_prefix(s.prefix)  # what an interrupted earlier run left
        if mkdir and ctx.root is not None:
            (ctx.root / s.prefix).mkdir(parents=True, exist_ok=True)
        return s

    def keys(self, count: int) -> list[str]:
        return list(numbered(self.prefix, count))

    def paths(self, keys: list[str]) -> list[str]:
        return [str(self.ctx.mount / k) for k in keys]

    @property
    def dir(self) -> Path:
        return self.ctx.mount / self.prefix

    def write(self, tool: str, extra_seconds: float = 0.0, **args: Any) -> dict[str, Any]:
        """Runs a writer tool on the mount, killed after the scale's cap."""
        self._ready_to_watch()
        return run_writer(tool, self.ctx.workdir, self.ctx.scale.write_cap_seconds + extra_seconds, **args)

    def write_paused(self, tool: str, at_pause: Callable[[dict[str, Any]], None], **args: Any) -> dict[str, Any]:
        """`write` for a tool that pauses (`writers.write_fsync`), calling `at_pause` meanwhile."""
        self._ready_to_watch()
        return run_paused_writer(tool, self.ctx.workdir, self.ctx.scale.write_cap_seconds, at_pause, **args)

    def _ready_to_watch(self) -> None:
        """For a peer whose close does not wait for its uploads, starts the watcher `stop_clock`
        will use before the clock starts."""
        if not self.ctx.durable_on_close:
            self.ctx.raw.stand_by()

    def stop_clock(self, out: dict[str, Any], done: Callable[[Listing], bool], what: str) -> float:
        """Seconds from the tool's start until what it wrote is durable: its end for a peer whose
        close() waits for the upload, else the moment the store shows `done`."""
        if self.ctx.durable_on_close:
            return out["end"] - out["start"]
        left = self.ctx.scale.write_cap_seconds - (time.monotonic() - out["start"])
        durable = wait_for(self.ctx.raw, self.prefix, done, what, max(left, 1.0))
        out["durable_wait_seconds"] = max(durable - out["end"], 0.0)
        return durable - out["start"]

    @staticmethod
    def waited(out: dict[str, Any]) -> dict[str, float]:
        """The wait for the store after close, as a Sample detail (for the peers that had one)."""
        return {"durable_wait_seconds": out["durable_wait_seconds"]} if "durable_wait_seconds" in out else {}

    def checked(self, sample: Sample, unit: str, check: Callable[[], object]) -> Sample:
        """`sample`, once `check` passes; a failed check fails the cell, with the number it measured."""
        try:
            check()
        except LostWrites as e:
            raise LostWrites(f"{e} (measured {sample.value:.4g} {unit}, not counted)") from None
        return sample

    def clean(self) -> None:
        self.ctx.raw.delete_prefix(self.prefix)
