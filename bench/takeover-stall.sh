#!/usr/bin/env bash
# How long a daemon kill stalls the programs using its mount (issue #19). RUNS times: SIGKILL
# the daemon, issue a read of an 8 MiB file while nobody serves (it waits in the kernel), start
# `msfs mount --takeover` at once, and time (a) the successor's start until it serves and
# (b) the kill until the waiting read is answered. Over a local `file` backend, so the numbers
# are msfs's own (no server in them); with S3 add the backend's first LIST to (a).
#
#   bench/takeover-stall.sh [RUNS]      default 5
#
# Needs root (FUSE) and a built msfs (release if there is one). Runs in a temp dir, removed at
# the end; stops only the processes it started.
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${1:-5}
MSFS=$PWD/target/release/msfs
[ -x "$MSFS" ] || MSFS=$PWD/target/debug/msfs
WORK=$(mktemp -d /tmp/msfs-takeover.XXXXXX)
M=$WORK/mnt
DAEMON=""

cleanup() {
    if grep -qs " $M " /proc/self/mounts; then umount "$M" || umount -l "$M"; fi
    if [ -n "$DAEMON" ]; then wait "$DAEMON" 2>/dev/null || true; fi
    rm -rf "$WORK"
}
trap cleanup EXIT

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
