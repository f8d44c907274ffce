#!/usr/bin/env bash
# `rsync -a` of FILES small files into a new directory of a fresh msfs mount over a local
# garage, RUNS times (and with MSFS_B, the two builds taking turns): the milliseconds each took,
# and the HeadObject and ListObjects requests the mount sent, counted by garage. rsync writes
# each file under a temporary name, stats, chmods and times it after closing it, then renames
# it: what a mount asks the store of a file it has just written shows here.
#
#   bench/rsync-small-files.sh [RUNS] [FILES] [FLUSH_ON_CLOSE]     defaults: 3, 200, true
#   MSFS_B=<other msfs> bench/rsync-small-files.sh ...             the two builds, alternating
#
# MSFS (or the release build) is "a", MSFS_B "b". Needs root (FUSE), rsync and garage
# (scripts/install-test-deps.sh). Runs in a temp dir, removed at the end; stops only the
# processes it started.
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${1:-3}
FILES=${2:-200}
FLUSH_ON_CLOSE=${3:-true}
# shellcheck source=bench/scratch.sh
. bench/scratch.sh rsync-small
BUILDS=("a=$MSFS")
[ -z "${MSFS_B:-}" ] || BUILDS+=("b=$MSFS_B")

trap 'stop_garage; cleanup' EXIT
start_garage rsync
ADMIN="http://127.0.0.1:$((MSFS_S3_PORT + 2))/metrics"
# The requests of API $1 garage has answered so far.
requests() {
    curl -s "$ADMIN" |
        awk -v series="api_s3_request_counter{api_endpoint=\"$1\"}" '$1 == series {print $2}'
}
mkdir -p "$M" "$WORK/cache" "$WORK/src"
for i in $(seq "$FILES"); do echo "file $i" > "$WORK/src/f$i"; done
write_msfs_config "$WORK/msfs.yaml" "$WORK/cache" rsync "flush_on_close: $FLUSH_ON_CLOSE"

for run in $(seq "$RUNS"); do
    for build in "${BUILDS[@]}"; do
        name=${build%%=*} bin=${build#*=}
        start_msfs "$bin" "$WORK/msfs.yaml" "$M" "$WORK/daemon-$name-$run.log"
        mkdir "$M/b/$name-$run"
        heads=$(requests HeadObject) lists=$(requests ListObjectsV2)
        start=$(date +%s%N)
        rsync -a "$WORK/src/" "$M/b/$name-$run/"
        took=$((($(date +%s%N) - start) / 1000000))
        echo "run $run msfs $name: $took ms, $(($(requests HeadObject) - ${heads:-0})) HEAD," \
            "$(($(requests ListObjectsV2) - ${lists:-0})) LIST"
        umount "$M"
        wait "$DAEMON" || true
        DAEMON=""
    done
done
