#!/usr/bin/env bash
# Runs every check and test: formatting, clippy, the benchmark harness's self-check, unit tests and
# the integration tests (which start a real garage S3 server on 127.0.0.1 and mount msfs through
# real FUSE; run as root), the soak, and the POSIX conformance run (scripts/conformance.sh).
# Install the prerequisites once with scripts/install-test-deps.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="${CARGO_HOME:-$HOME/.cargo}/bin:$PATH"

cargo fmt --check
cargo clippy --all-targets --locked -- -D warnings
# The benchmark harness, end to end on tiny data (never a benchmark: no time is asserted).
bench/run --self-check
cargo nextest run --locked --no-fail-fast
# The soak (tests/it/soak/, ignored in the runs above), bounded to a minute of load per test here;
# docs/testing.md gives the full 10-minute run. Then, alone (so that its stalls are its own), the soak
# that SIGKILLs the CSI plugin every 20 s, at its full 3 minutes (about 4 minutes in all).
KILL_SOAK=soak::csi_volumes_survive_a_kill_every_20_seconds
MSFS_SOAK_SECS=60 cargo nextest run --locked --run-ignored ignored-only --test it \
    -E "test(/^soak::/) and not test(=$KILL_SOAK)"
MSFS_KILL_SOAK_SECS=180 cargo nextest run --locked --run-ignored ignored-only --test it \
    -E "test(=$KILL_SOAK)"
# POSIX conformance (pjdfstest against an expected-results file) and fsx on a writable S3 mount.
# Bounded like the tests (.config/nextest.toml): a hang fails here, with its output, instead of
# running into CI's time limit.
timeout --kill-after=30 1800 bash scripts/conformance.sh
