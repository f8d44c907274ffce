#!/usr/bin/env bash
# What bounds `meta-create-par` and `meta-create-seq` (issue #21: at most 1.5x the raw PutObjects)
# on this machine. Each round runs, taking turns, the bench's own create tool (`msfsbench.writers
# create`: FILES files of 8 bytes, `open(O_CREAT|O_TRUNC)`, `write`, `close`, on FILES Python
# threads at once, or one after the other with `seq`) in four places:
#
#   tmpfs        a directory under /dev/shm: the writer alone, no FUSE, no store
#   msfs-ram     msfs over a RAM backend: the writer and the FUSE path, no store request
#   msfs-s3      msfs over the local garage: what the bench cell measures
#   raw          the raw client's FILES PutObjects of 8 bytes (as many in flight as threads)
#   raw-8        (par only) the same with 8 in flight, as many as msfs's commit slots
#                (`write_commit_workers`): the server's cost per request depends on how many
#                arrive together, and a filesystem's arrive as the application closes its files
#
# and prints each one's seconds and the CPU milliseconds it cost the writer (or raw client),
# msfs and garage, then the medians. Both mounts have the bench's write settings
# (`flush_on_close: true`: close returns once the object is stored).
#
#   bench/create-floor.sh [ROUNDS] [FILES] [par|seq]        defaults: 5, 100, par
#
# Needs root (FUSE), garage (scripts/install-test-deps.sh) and the raw client (`cargo build
# --release --example raw_read`). Runs in a temp dir, removed at the end; stops only the
# processes it started.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=bench/scratch.sh
. bench/scratch.sh create-floor
create_args "$@"
need_raw_client
SHM=$(mktemp -d /dev/shm/msfs-create-floor.XXXXXX)
RAM_M=$WORK/ram-mnt RAM_DAEMON=""
trap 'stop_mount "$RAM_M" "$RAM_DAEMON"; stop_garage; rm -rf "$SHM"; cleanup' EXIT
BUCKET=create-floor
start_garage "$BUCKET"
mkdir -p "$M" "$RAM_M" "$WORK/cache" "$WORK/ram-cache"
write_msfs_config "$WORK/s3.yaml" "$WORK/cache" "$BUCKET" "flush_on_close: true"
cat > "$WORK/ram.yaml" <<EOF
msfs_version: 1
cache_dir_path: $WORK/ram-cache
backends:
  - dir_name: b
    backend_type: RAM
    readonly: false
    flush_on_close: true
    RAM:
      max_total_objects: 10000000
EOF
start_msfs "$MSFS" "$WORK/s3.yaml" "$M" "$WORK/msfs-s3.log"
S3_DAEMON=$DAEMON
start_msfs "$MSFS" "$WORK/ram.yaml" "$RAM_M" "$WORK/msfs-ram.log"
RAM_DAEMON=$DAEMON DAEMON=$S3_DAEMON

# PLACE DIR [DAEMON]: one run of the create tool in DIR; prints "PLACE seconds writer msfs garage".
create() {
    local place=$1 dir=$2 daemon=${3:-} m0=0 g0 m1=0 out
    mkdir "$dir"
    create_paths "$dir"
    [ -z "$daemon" ] || m0=$(cpu_ns "$daemon")
    g0=$(cpu_ns "$GARAGE")
    out=$(create_tool)
    [ -z "$daemon" ] || m1=$(cpu_ns "$daemon")
    python3 - "$place" "$out" "$((m1 - m0))" "$(($(cpu_ns "$GARAGE") - g0))" <<'PY'
import json, sys
place, out, msfs, garage = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
print(place, out["end"] - out["start"], out["cpu_seconds"] * 1e3, msfs / 1e6, garage / 1e6)
PY
}

# PLACE IN_FLIGHT ROUND: the raw client's PutObjects; prints a line as `create` does.
raw() {
    local g0 out
    g0=$(cpu_ns "$GARAGE")
    out=$("$RAW" --endpoint "$AWS_ENDPOINT" --bucket "$BUCKET" put-objects --prefix "$1-$3/" \
        --count "$FILES" --size 8 --concurrency "$2" | tail -1)
    python3 - "$1" "$out" "$(($(cpu_ns "$GARAGE") - g0))" <<'PY'
import json, sys
place, out, garage = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3])
print(place, out["seconds"], out["cpu_seconds"] * 1e3, 0, garage / 1e6)
PY
}

echo "$FILES files, $MODE ($THREADS threads), $ROUNDS rounds; seconds, then CPU ms of the writer (or raw client), msfs, garage"
for round in $(seq "$ROUNDS"); do
    create tmpfs "$SHM/r$round"
    create msfs-ram "$RAM_M/b/r$round" "$RAM_DAEMON"
    create msfs-s3 "$M/b/r$round" "$DAEMON"
    raw raw "$THREADS" "$round"
    [ "$MODE" = seq ] || raw raw-8 8 "$round"
done | tee "$WORK/rounds"
python3 - "$WORK/rounds" <<'PY'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    place, *values = line.split()
    rows.setdefault(place, []).append([float(v) for v in values])
raw = statistics.median(r[0] for r in rows["raw"])
print(f"\nmedians{'':9}seconds  x raw   writer ms  msfs ms  garage ms")
for place, runs in rows.items():
    s, w, m, g = (statistics.median(column) for column in zip(*runs))
    print(f"{place:<14}{s:9.4f}  {s / raw:5.2f}x  {w:9.1f}  {m:7.1f}  {g:9.1f}")
PY
