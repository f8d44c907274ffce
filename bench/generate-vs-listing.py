#!/usr/bin/env python3
"""`msfs generate-manifest` of a real S3 bucket beside a plain paginated listing of it (issue #24).

One garage on 127.0.0.1 (scripts/local-s3.sh) holds OBJECTS empty objects in DIRS directories
(`dNNNN/fNNNNNNN`, put by `examples/put_empty.rs`). Each run times, taking turns, (a) a boto3 `list_objects_v2` paginator over
the whole bucket, one request after the other, as a script or `aws s3 ls --recursive` lists it,
and (b) `msfs generate-manifest` with its default listers; both counts are checked. Prints every
run and the medians, and the ratio listing / generation.

    bench/generate-vs-listing.py [--objects N] [--dirs D] [--runs R] [--state DIR]

Seeding 1M objects takes minutes; with --state the garage directory is kept and reused by the
next run with the same shape (otherwise a temp dir, removed at the end). Needs boto3, cargo and a
built msfs (release if there is one); stops only the garage it started.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import boto3
from botocore.config import Config

ROOT = Path(__file__).resolve().parent.parent
BUCKET = "listing"


def msfs_binary() -> Path:
    for profile in ("release", "debug"):
        binary = ROOT / "target" / profile / "msfs"
        if binary.exists():
            return binary
    sys.exit("build msfs first (cargo build --release)")


def free_port() -> int:
    # local-s3.sh uses the port and the two after it.
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port < 65000:
            return port


def start_garage(state: Path) -> dict[str, str]:
    env = dict(os.environ, MSFS_S3_PORT=str(free_port()))
    subprocess.run([ROOT / "scripts" / "local-s3.sh", "start", state, BUCKET], check=True, env=env,
                   stdout=subprocess.DEVNULL)
    values = {}
    for line in (state / "env").read_text().splitlines():
        if line.startswith("export "):
            key, _, value = line[len("export "):].partition("=")
            values[key] = value.strip("'\"")
    return values


def client(env: dict[str, str]):
    return boto3.client(
        "s3", endpoint_url=env["AWS_ENDPOINT"], region_name=env["AWS_REGION"],
        aws_access_key_id=env["AWS_ACCESS_KEY_ID"], aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"],
        config=Config(retries={"max_attempts": 10}),
    )


def seed(s3, env: dict[str, str], objects: int, dirs: int) -> None:
    marker = f"_seeded_{objects}_{dirs}"
    try:
        s3.head_object(Bucket=BUCKET, Key=marker)
        print(f"seed: {objects:,} objects already there")
        return
    except s3.exceptions.ClientError:
        pass
    # A Python client puts a few hundred objects a second here; the example as many as garage takes.
    subprocess.run(["cargo", "build", "--release", "--quiet", "--example", "put_empty"], check=True, cwd=ROOT)
    put_empty = ROOT / "target" / "release" / "examples" / "put_empty"
    subprocess.run([put_empty, env["AWS_ENDPOINT"], BUCKET, str(objects), str(dirs)], check=True,
                   env=dict(os.environ, **env))
    s3.put_object(Bucket=BUCKET, Key=marker, Body=b"")


def timed_listing(s3) -> tuple[float, int]:
    started = time.perf_counter()
    count = 0
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=BUCKET):
        count += page.get("KeyCount", 0)
    return time.perf_counter() - started, count


def timed_generation(env: dict[str, str], work: Path) -> tuple[float, int]:
    config = work / "config.yaml"
    config.write_text(
        "msfs_version: 1\n"
        "backends:\n"
        "  - dir_name: data\n"
        f"    bucket_container_name: {BUCKET}\n"
        "    backend_type: S3\n"
        "    readonly: true\n"
        "    S3:\n"
        f"      endpoint: {env['AWS_ENDPOINT']}\n"
        f"      region: {env['AWS_REGION']}\n"
        f"      access_key_id: {env['AWS_ACCESS_KEY_ID']}\n"
        f"      secret_access_key: {env['AWS_SECRET_ACCESS_KEY']}\n"
    )
    output = work / "manifest"
    shutil.rmtree(output, ignore_errors=True)
    started = time.perf_counter()
    subprocess.run([msfs_binary(), "generate-manifest", "--backend", "data", "--output", output, config],
                   check=True, stdout=subprocess.DEVNULL)
    seconds = time.perf_counter() - started
    totals = json.loads((output / "manifest_index.json").read_text())["totals"]
    shutil.rmtree(output)
    return seconds, totals["objects"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--objects", type=int, default=1_000_000)
    parser.add_argument("--dirs", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--state", type=Path, help="garage's directory, kept for the next run")
    args = parser.parse_args()
    state = args.state or Path(tempfile.mkdtemp(prefix="msfs-listing."))
    state.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="msfs-listing-work."))
    env = start_garage(state)
    try:
        s3 = client(env)
        seed(s3, env, args.objects, args.dirs)
        expected = args.objects + 1  # and the seed marker
        listings, generations = [], []
        for run in range(1, args.runs + 1):
            listing, listed = timed_listing(s3)
            generation, generated = timed_generation(env, work)
            if listed != expected or generated != expected:
                sys.exit(f"run {run}: listed {listed:,}, generated {generated:,}, expected {expected:,}")
            listings.append(listing)
            generations.append(generation)
            print(f"run {run}: boto3 listing {listing:.2f} s ({listed / listing:,.0f} obj/s); "
                  f"msfs generate-manifest {generation:.2f} s ({generated / generation:,.0f} obj/s)",
                  flush=True)
        listing, generation = statistics.median(listings), statistics.median(generations)
        print(f"median: boto3 listing {listing:.2f} s, msfs generate-manifest {generation:.2f} s: "
              f"{listing / generation:.1f}x")
    finally:
        subprocess.run([ROOT / "scripts" / "local-s3.sh", "stop", state], check=False,
                       stdout=subprocess.DEVNULL)
        shutil.rmtree(work, ignore_errors=True)
        if args.state is None:
            shutil.rmtree(state, ignore_errors=True)


if __name__ == "__main__":
    main()
