"""`bench/run`: the command line, the plan it makes, and the outputs it writes."""

from __future__ import annotations

import argparse
import datetime as dt
import os
import re
import shutil
import signal
import tempfile
from dataclasses import dataclass
from pathlib import Path

from . import charts, datasets, install, report, selfcheck, shell
from .facts import host
from .filesystems import PEERS
from .results import Results
from .scale import FULL, MANIFEST_100M, QUICK, SELF_CHECK, MiB
from .session import Plan, Session, needs_seeding
from .shell import log
from .workloads import State, Workload, all_workloads, select

BENCH_DIR = Path(__file__).resolve().parents[1]
# For the duration estimate only (with each workload's own est_seconds).
MOUNT_SECONDS = 2.0
WARMUP_MIB_S = 100.0
SEED_MIB_S = 150.0


@dataclass(frozen=True)
class Options:
    quick: bool
    self_check: bool
    manifest_100m: bool
    only: list[str] | None
    peers: list[str]
    runs: int | None
    results_dir: Path | None
    list_only: bool
    render: Path | None
    split_cpus: bool
    interleave: bool


def parse(argv: list[str]) -> Options:
    p = argparse.ArgumentParser(
        prog="bench/run",
        description="Measure msfs beside mount-s3, s3fs, rclone and the raw S3 client (the physical limit) "
        "against a local S3 server. Run as root on a Debian machine; see bench/README.md.",
    )
    p.add_argument("--quick", action="store_true", help="smaller and shorter (under 10 minutes on 2 cores)")
    p.add_argument("--scale-100m", dest="manifest_100m", action="store_true",
                   help="the manifest group at 100M objects (a tree of ~100K directories and one flat "
                   "directory): tens of GiB of disk, most of an hour with `ls -l` of the flat directory")
    p.add_argument("--self-check", action="store_true",
                   help="seconds-long smoke run (tiny data, one workload per family (two for writes), msfs + raw), "
                   "into a temp dir; exits non-zero if any output is missing")
    p.add_argument("--only", nargs="+", metavar="NAME", help="workload names, families or patterns (rand-*)")
    p.add_argument("--peers", help="comma-separated filesystems to compare (default msfs,mount-s3,s3fs,rclone; "
                   "the raw client always runs)")
    p.add_argument("--runs", type=int, help="repeats per cell (default 3; 1 with --quick)")
    p.add_argument("--results-dir", type=Path, help="where outputs go (default bench/results)")
    p.add_argument("--list", dest="list_only", action="store_true", help="list the workloads and exit")
    p.add_argument("--render", type=Path, metavar="JSON", help="redo the table and charts of a results file")
    p.add_argument("--split-cpus", action="store_true",
                   help="S3 server on CPU 0, filesystems and clients on the others (the server is the "
                   "bottleneck, as when it runs on another machine); results get a -split suffix")
    p.add_argument("--interleave", action="store_true",
                   help="measure the targets in turn, one sample each per run of a workload (the first "
                   "peer rotating), not one after another: for A/B comparisons of variants, e.g. "
                   "--peers msfs,msfs-no-holder; results get an -interleave suffix")
    p.add_argument("-v", "--verbose", action="store_true", help="print every command")
    a = p.parse_args(argv)
    shell.VERBOSE = a.verbose
    if a.peers is not None:
        peers = [x for x in a.peers.split(",") if x]
    elif a.self_check:  # peers only if already installed (mount-s3: built): CI must not need them
        # msfs-close-in-background: a peer timed until the store lists its uploads, which CI
        # would not run otherwise (rclone is not installed there).
        peers = ["msfs", "msfs-close-in-background"] + (["mount-s3"] if install.mount_s3_ready() else [])
        peers += [x for x in ("s3fs", "rclone") if shutil.which(x)]
    else:
        peers = ["msfs", "mount-s3", "s3fs", "rclone"]
    unknown = [x for x in peers if x not in PEERS]
    if unknown:
        p.error(f"unknown peer(s) {', '.join(unknown)}; choose from {', '.join(PEERS)}")
    if a.runs is not None and a.runs < 1:
        p.error("--runs must be at least 1")
    if a.manifest_100m and (a.quick or a.self_check):
        p.error("--scale-100m goes with neither --quick nor --self-check")
    return Options(a.quick, a.self_check, a.manifest_100m, a.only, peers, a.runs, a.results_dir, a.list_only, a.render, a.split_cpus,
                   a.interleave)


def make_plan(o: Options) -> Plan:
    scale = SELF_CHECK if o.self_check else QUICK if o.quick else MANIFEST_100M if o.manifest_100m else FULL
    workloads = select(all_workloads(scale), o.only or (["manifest"] if o.manifest_100m else None),
                       smoke_only=o.self_check)
    # A peer none of the chosen workloads runs on (s3fs for `--only manifest`) is not installed,
    # mounted or shown.
    peers = [p for p in o.peers if any(w.runs_on(p) for w in workloads)]
    if o.peers and not peers:
        raise SystemExit(f"bench: none of the chosen workloads runs on {', '.join(o.peers)}")
    return Plan(scale, workloads, peers, o.runs or scale.runs, "dev" if o.self_check else "release",
                o.split_cpus, o.interleave)


def estimate_seconds(plan: Plan) -> float:
    data = datasets.for_scale(plan.scale)
    # Every workload runs once per run on each peer it runs on (and on raw when it has a limit).
    targets = [*plan.peers, "raw"]
    per_target = sum(w.est_seconds * sum(w.runs_on(t) for t in targets) for w in plan.workloads) * plan.runs
    cold_runs = sum(plan.runs for w in plan.workloads if w.state is State.COLD)
    warm_sets = {w.dataset for w in plan.workloads if w.state is State.WARM}
    warm_bytes = sum(data.by_name(d).total_bytes for d in warm_sets)
    per_fs = (cold_runs + 2) * MOUNT_SECONDS + warm_bytes / MiB / WARMUP_MIB_S
    seeding = sum(d.total_bytes for d in data.all()) / MiB / SEED_MIB_S + 10 if needs_seeding(plan) else 10
    return seeding + per_target + len(plan.peers) * per_fs


def print_plan(plan: Plan) -> None:
    log(f"scale: {plan.scale.note}")
    log(f"peers: {', '.join(plan.peers)} + the raw S3 client; runs per cell: {plan.runs}"
        + (", interleaved (the targets take turns)" if plan.interleave else ""))
    log(f"workloads ({len(plan.workloads)}): {' '.join(w.name for w in plan.workloads)}")
    log(f"expected duration: about {estimate_seconds(plan) / 60:.0f} min on 2 cores "
        "(plus first-time installs and the msfs build"
        + (", and the mount-s3 build: about 10 min the first time)" if _builds_mount_s3(plan) else ")"))


def _builds_mount_s3(plan: Plan) -> bool:
    return "mount-s3" in plan.peers and not install.mount_s3_ready()


def list_workloads(workloads: list[Workload]) -> None:
    for w in workloads:
        print(f"{w.name:25} {w.family:15} {w.state.value:5} {w.io:9} {w.description}")


def _raise_interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def main(argv: list[str]) -> int:
    o = parse(argv)
    if o.render:
        return render_only(o.render)
    plan = make_plan(o)
    if o.list_only:
        list_workloads(plan.workloads)
        return 0
    if os.geteuid() != 0:
        log("run as root: mounts, drop_caches and package installs need it")
        return 1
    print_plan(plan)
    # Ctrl-C and SIGTERM both unwind through the clean-up (SIGINT explicitly: a shell starting us
    # in the background would otherwise leave it ignored).
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, _raise_interrupt)
    session = Session(plan)
    try:
        results = session.run()
    except KeyboardInterrupt:
        log("interrupted; cleaning up")
        return 130
    finally:
        session.close()
    return write_outputs(o, plan, results)


def output_base(o: Options) -> Path:
    if o.results_dir:
        directory = o.results_dir
    elif o.self_check:
        directory = Path(tempfile.mkdtemp(prefix="msfs-bench-results."))
    else:
        directory = BENCH_DIR / "results"
    directory.mkdir(parents=True, exist_ok=True)
    suffix = "-quick" if o.quick and not o.self_check else ""
    suffix += "-100m" if o.manifest_100m else ""
    suffix += "-split" if o.split_cpus else ""
    suffix += "-interleave" if o.interleave else ""  # an A/B run does not replace the day's tables
    if o.only and not o.self_check:  # a partial run does not replace the day's full one
        suffix += "-" + re.sub(r"[^A-Za-z0-9-]+", "", "-".join(o.only))[:40].strip("-")
    base = directory / f"{dt.date.today().isoformat()}-{host()}{suffix}"
    # Nor does a second run of the same selection on the same day replace the first.
    again = 2
    while base.with_name(base.name + ".json").exists():
        base = directory / f"{dt.date.today().isoformat()}-{host()}{suffix}-{again}"
        again += 1
    return base


def write_outputs(o: Options, plan: Plan, results: Results) -> int:
    base = output_base(o)
    json_path, md_path = base.with_name(base.name + ".json"), base.with_name(base.name + ".md")
    results.save(json_path)
    table = report.markdown(results)
    md_path.write_text(table)
    pngs = charts.render(results, base)
    print(table)
    log(f"results: {json_path}")
    log(f"table:   {md_path}")
    log("charts:  " + " ".join(str(p) for p in pngs))
    if not o.self_check:
        return 0
    found = selfcheck.problems(json_path, md_path, pngs, [w.name for w in plan.workloads], results.peers)
    for problem in found:
        log(f"self-check: {problem}")
    if found:
        log(f"self-check: FAILED ({len(found)} problems); outputs kept in {base.parent}")
        return 1
    log(f"self-check: passed ({len(plan.workloads)} workloads x {len(results.peers)} peers)")
    if o.results_dir is None:  # our temp dir: nothing in it is worth keeping once checked
        shutil.rmtree(base.parent, ignore_errors=True)
    return 0


def render_only(path: Path) -> int:
    results = Results.load(path)
    base = path.with_suffix("")
    table = report.markdown(results)
    base.with_name(base.name + ".md").write_text(table)
    for png in charts.render(results, base):
        log(f"chart: {png}")
    print(table)
    return 0
