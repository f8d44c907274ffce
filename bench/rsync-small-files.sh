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

export MSFS_S3_PORT=${MSFS_S3_PORT:-39300}
stop_server() { bash scripts/local-s3.sh stop "$WORK/s3" >/dev/null 2>&1 || true; cleanup; }
trap stop_server EXIT
bash scripts/local-s3.sh start "$WORK/s3" rsync >/dev/null
# shellcheck disable=SC1091
source "$WORK/s3/env"
ADMIN="http://127.0.0.1:$((MSFS_S3_PORT + 2))/metrics"
requests() { curl -s "$ADMIN" | awk -v api="$1" -F' ' '$1 == "api_s3_request_counter{api_endpoint=\""api"\"}" {print $2}'; }
mkdir -p "$M" "$WORK/cache" "$WORK/src"
for i in $(seq "$FILES"); do echo "file $i" > "$WORK/src/f$i"; done
cat > "$WORK/msfs.yaml" <<YAML
msfs_version: 1
cache_dir_path: $WORK/cache
backends:
  - dir_name: b
    backend_type: S3
    bucket_container_name: rsync
    readonly: false
    flush_on_close: $FLUSH_ON_CLOSE
    S3:
      endpoint: $AWS_ENDPOINT
      region: us-east-1
      access_key_id: \${AWS_ACCESS_KEY_ID}
      secret_access_key: \${AWS_SECRET_ACCESS_KEY}
YAML

for run in $(seq "$RUNS"); do
    for build in "${BUILDS[@]}"; do
        name=${build%%=*} bin=${build#*=}
        "$bin" mount "$WORK/msfs.yaml" "$M" > "$WORK/daemon-$name-$run.log" 2>&1 &
        DAEMON=$!
        for _ in $(seq 100); do grep -qs " $M " /proc/self/mounts && break; sleep 0.1; done
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
