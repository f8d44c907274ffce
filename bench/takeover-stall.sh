#!/usr/bin/env bash
# How long a daemon kill, and an upgrade, stall the programs using its mount (issue #19).
# Kill, RUNS times: SIGKILL the daemon, issue a read of an 8 MiB file while nobody serves (it
# waits in the kernel), start `msfs mount --takeover` at once, and time (a) the successor's start
# until it serves and (b) the kill until the waiting read is answered. Upgrade, RUNS times: start
# `msfs mount --takeover` beside the serving daemon, wait until it waits, then SIGTERM the old
# one while a reader opens, reads and closes a small file in a loop, and report (c) the longest
# single read of that loop across the hand-over (next to the longest before it). Over a local
# `file` backend, so the numbers are msfs's own (no server in them); with S3 add the backend's
# first LIST to (a).
#
#   bench/takeover-stall.sh [RUNS]      default 5
#
# Needs root (FUSE) and a built msfs (release if there is one). Runs in a temp dir, removed at
# the end; stops only the processes it started.
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${1:-5}
# shellcheck source=bench/scratch.sh
. bench/scratch.sh takeover

mkdir -p "$WORK/store" "$M"
head -c 8M /dev/urandom > "$WORK/store/big"
cat > "$WORK/config.yaml" <<YAML
msfs_version: 1
backends:
  - dir_name: data
    bucket_container_name: $WORK/store
    backend_type: file
    readonly: false
YAML
serve() { "$MSFS" mount "$WORK/config.yaml" "$M" --state-dir "$WORK/state" "$@" > "$WORK/daemon.log" 2>&1 & DAEMON=$!; }
wait_serving() { until grep -qs ": mounted" "$WORK/daemon.log"; do sleep 0.002; done; }
now() { date +%s.%N; }

serve
wait_serving
echo "msfs: $MSFS"
for run in $(seq "$RUNS"); do
    cat "$M/data/big" > /dev/null
    killed=$(now)
    kill -9 "$DAEMON"
    wait "$DAEMON" 2>/dev/null || true
    ( cat "$M/data/big" > /dev/null; now > "$WORK/answered" ) &
    reader=$!
    started=$(now)
    serve --takeover
    wait_serving
    serving=$(now)
    wait "$reader"
    answered=$(cat "$WORK/answered")
    printf 'run %d: successor start -> serving %.3f s; kill -> waiting read answered %.3f s\n' \
        "$run" "$(echo "$serving - $started" | bc)" "$(echo "$answered - $killed" | bc)"
done

# The reader: opens, reads and closes `small` until `stop` exists; prints its longest read
# before `mark` appeared and after, in ms.
READER='
import os, sys, time
path, mark, stop = sys.argv[1:4]
before = after = 0.0
while not os.path.exists(stop):
    t = time.monotonic()
    with open(path, "rb") as f:
        f.read()
    took = (time.monotonic() - t) * 1000
    if os.path.exists(mark):
        after = max(after, took)
    else:
        before = max(before, took)
print(f"{before:.2f} {after:.2f}")
'
echo "small file" > "$WORK/store/small"
for run in $(seq "$RUNS"); do
    rm -f "$WORK/mark" "$WORK/stop"
    old=$DAEMON
    mv "$WORK/daemon.log" "$WORK/old.log"
    python3 -c "$READER" "$M/data/small" "$WORK/mark" "$WORK/stop" > "$WORK/reads" &
    reader=$!
    serve --takeover
    until grep -qs "waiting to succeed" "$WORK/daemon.log"; do sleep 0.002; done
    sleep 0.2
    touch "$WORK/mark"
    kill -TERM "$old"
    wait "$old" 2>/dev/null || true
    wait_serving
    sleep 0.2
    touch "$WORK/stop"
    wait "$reader"
    read -r before after < "$WORK/reads"
    printf 'upgrade %d: longest read %s ms before the SIGTERM, %s ms across the hand-over\n' \
        "$run" "$before" "$after"
done
