"""One benchmark run, start to finish: set the machine up, seed, measure every peer, describe it.

Everything the run starts (the S3 server, mounts, the fusectl mount, the temp dir) is registered
on an ExitStack the moment it exists, so `Session.close()` undoes it in reverse order — on a
normal end, a failure or Ctrl-C alike.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import shlex
import shutil
import signal
import sys
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from . import cpus, datasets, facts, install
from .filesystems import PEERS, Filesystem
from .fusectl import FuseControl
from .rawclient import RawClient
from .results import RAW, Results, describe_workload
from .runner import MountTarget, RawTarget, Target, fail_target, run_interleaved, run_target
from .scale import Scale
from .server import S3Server
from .shell import log, version_of
from .workloads import FAMILIES, State, Workload

BUCKET = "bench"


@dataclass(frozen=True)
class Plan:
    scale: Scale
    workloads: list[Workload]
    peers: list[str]  # filesystems, in run order; the raw client always runs first
    runs: int
    build_profile: str  # "release" to measure; "dev" for the self-check
    split_cpus: bool = False  # the server on a CPU of its own (cpus.py)
    interleave: bool = False  # the targets take turns, one sample each (runner.run_interleaved)


def needs_seeding(plan: Plan) -> bool:
    """False when every workload starts what it measures itself (the manifest runs)."""
    return any(w.state is not State.OWN for w in plan.workloads)


class Session:
    def __init__(self, plan: Plan) -> None:
        self.plan = plan
        self.stack = contextlib.ExitStack()
        self.work = Path(tempfile.mkdtemp(prefix="msfs-bench."))
        self.stack.callback(shutil.rmtree, self.work, True)
        self.fusectl = FuseControl()
        self.stack.callback(self.fusectl.release)

    def close(self) -> None:
        # A second Ctrl-C must not cut the clean-up short and leave mounts or the server behind.
        previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
        try:
            self.stack.close()
        finally:
            signal.signal(signal.SIGINT, previous)

    def run(self) -> Results:
        started = dt.datetime.now().astimezone()
        t0, load_at_start = time.monotonic(), facts.load_average()
        binaries = self._install_and_build()
        # After the build (which wants every CPU), before anything measured is started.
        cpu_split = cpus.split() if self.plan.split_cpus else None
        server, raw, data, seed_seconds = self._start_server_and_seed(binaries)
        filesystems = self._filesystems(server, binaries)
        results = self._measure(raw, data, filesystems)
        results.meta = {
            "command": shlex.join(["bench/run", *sys.argv[1:]]),
            "started": started.isoformat(timespec="seconds"),
            "finished": dt.datetime.now().astimezone().isoformat(timespec="seconds"),
            "duration_seconds": round(time.monotonic() - t0, 1),
            "scale": self.plan.scale.describe(),
            "runs": self.plan.runs,
            "interleave": self.plan.interleave,
            "build_profile": binaries.profile,
            "machine": facts.machine(),
            "load_average": {"start": load_at_start, "end": facts.load_average()},
            "versions": _versions(binaries),
            "peer_settings": {fs.name: self._settings(fs) for fs in filesystems},
            "families": {f.name: f.title for f in FAMILIES},
            "datasets": {d.name: d.describe() for d in data.all()},
            "seed_seconds": seed_seconds,
            "cpu_split": cpu_split,
        }
        return results

    def _settings(self, fs: Filesystem) -> dict[str, Any]:
        out: dict[str, Any] = {"settings": fs.settings(writable=False)}
        if any(w.writes for w in self.plan.workloads):
            out["write_settings"] = fs.settings(writable=True)
        out["fuse_tuning"] = fs.tuning
        if fs.unsupported:
            out["unsupported"] = fs.unsupported
        return out

    def _install_and_build(self) -> install.Binaries:
        install.ensure_test_deps()
        install.ensure_commands(["fio"] + [c for p in self.plan.peers for c in PEERS[p].commands])
        binaries = install.build(self.plan.build_profile)
        if "mount-s3" in self.plan.peers:  # its CRT build needs packages and time no other run needs
            binaries = replace(binaries, mount_s3=install.build_mount_s3())
        return binaries

    def _start_server_and_seed(
        self, binaries: install.Binaries
    ) -> tuple[S3Server, RawClient, datasets.Datasets, dict[str, float]]:
        server = S3Server(self.work / "s3", BUCKET)
        self.stack.callback(server.stop)
        server.start()
        if self.plan.split_cpus and server.pid is not None:
            cpus.pin_process(server.pid, [cpus.SERVER_CPU])
            log(f"S3 server pinned to CPU {cpus.SERVER_CPU}; everything else to the other CPUs")
        raw = RawClient(binaries.raw_read, server.endpoint, BUCKET, {**os.environ, **server.env})
        self.stack.callback(raw.close)
        data = datasets.for_scale(self.plan.scale)
        if not needs_seeding(self.plan):
            log("no selected workload reads the seeded data sets: bucket left empty")
            return server, raw, data, {}
        return server, raw, data, datasets.seed(raw, data)

    def _filesystems(self, server: S3Server, binaries: install.Binaries) -> list[Filesystem]:
        self.fusectl.ensure()
        out = []
        for name in self.plan.peers:
            fs = PEERS[name](self.work, server, self.plan.scale, self.fusectl, binaries)
            self.stack.callback(fs.unmount)  # a no-op once it is unmounted
            out.append(fs)
        return out

    def _measure(self, raw: RawClient, data: datasets.Datasets, filesystems: list[Filesystem]) -> Results:
        plan = self.plan
        results = Results({}, [describe_workload(w) for w in plan.workloads], [*plan.peers, RAW])
        targets: list[Target] = [RawTarget(raw, data, plan.scale, self.work)]
        targets += [MountTarget(fs, raw, data, plan.scale, self.work) for fs in filesystems]
        if plan.interleave:  # for A/B comparisons of variants: the targets take turns
            run_interleaved(targets, plan.workloads, plan.runs, results)
            return results
        for target in targets:
            try:
                run_target(target, plan.workloads, plan.runs, results)
            except Exception as e:  # e.g. a peer that does not mount: its cells say so, others run
                fail_target(target, plan.workloads, results, e)
        return results


def _versions(binaries: install.Binaries) -> dict[str, Any]:
    return {
        "msfs": version_of([str(binaries.msfs), "--version"]),
        "garage": S3Server.version(),
        "git": facts.git_revision(),
        **facts.tool_versions(),
    }
