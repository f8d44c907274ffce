#!/usr/bin/env bash
# When the store holds what a writer closed, by the store's own clock: how long after its last
# close msfs's default close (`flush_on_close: false`: close returns at once, the commit runs in
# the background) leaves the last file's upload, beside a close that waits (`true`) and the raw
# client's PutObjects. The bench times a peer whose close does not wait until a listing shows
# every file (`raw_read watch`); on two cores that listing competes with the uploads it waits
# for and arrives some ms after the fact, so its figure is an upper bound. This script reads
# each object's LastModified instead: garage stamps it, in ms, when the PutObject arrives, so for
# 8-byte objects it is the upload's end within a fraction of a ms (it would not be for a
# multipart upload, stamped at its start, which is why the bench cannot use it).
#
# Each round creates FILES files of 8 bytes with the bench's create tool (FILES Python threads at
# once, or one after the other with `seq`) through both mounts, taking turns, then the raw
# client's FILES PutObjects (as many in flight as threads, by its own clock: its last response),
# and prints seconds from the tool's start to its last close and to the last LastModified; then
# the medians.
#
#   bench/store-clock.sh [ROUNDS] [FILES] [par|seq]        defaults: 5, 100, par
#
# Needs root (FUSE), garage (scripts/install-test-deps.sh) and the raw client (`cargo build
# --release --example raw_read`). Runs in a temp dir, removed at the end; stops only the
# processes it started.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=bench/scratch.sh
. bench/scratch.sh store-clock
create_args "$@"
need_raw_client
WAIT_M=$WORK/wait-mnt WAIT_DAEMON=""
trap 'stop_mount "$WAIT_M" "$WAIT_DAEMON"; stop_garage; cleanup' EXIT
BUCKET=store-clock
start_garage "$BUCKET"
mkdir -p "$M" "$WAIT_M" "$WORK/cache" "$WORK/wait-cache"
write_msfs_config "$WORK/default.yaml" "$WORK/cache" "$BUCKET" "flush_on_close: false"
write_msfs_config "$WORK/wait.yaml" "$WORK/wait-cache" "$BUCKET" "flush_on_close: true"
start_msfs "$MSFS" "$WORK/wait.yaml" "$WAIT_M" "$WORK/msfs-wait.log"
WAIT_DAEMON=$DAEMON
start_msfs "$MSFS" "$WORK/default.yaml" "$M" "$WORK/msfs-default.log"
DEFAULT_DAEMON=$DAEMON

# PLACE KEY_PREFIX START END: prints "PLACE to_last_close to_last_stored" in seconds from START,
# once every object under KEY_PREFIX is listed (the time on the monotonic clock, as START is).
stored() {
    local place=$1 prefix=$2 start=$3 end=$4 listed
    for _ in $(seq 100); do
        listed=$("$RAW" --endpoint "$AWS_ENDPOINT" --bucket "$BUCKET" list --prefix "$prefix" --keys --modified | tail -1)
        python3 -c 'import json, sys; sys.exit(len(json.loads(sys.argv[1])["objects"]) < int(sys.argv[2]))' \
            "$listed" "$FILES" && break
        sleep 0.1
    done
    python3 - "$place" "$listed" "$start" "$end" "$FILES" <<'PY'
import json, sys, time
place, listed, start, end, files = sys.argv[1], json.loads(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4]), int(sys.argv[5])
objects = listed["objects"]
if len(objects) < files:
    sys.exit(f"{place}: {len(objects)} of {files} objects in the store after 10 s")
realtime_ahead = time.time() - time.monotonic()  # the store's ms since the epoch -> monotonic
last = max(modified for _, _, _, modified in objects) / 1e3 - realtime_ahead
print(place, end - start, last - start)
PY
}

# PLACE MOUNT DAEMON ROUND: one run of the create tool in PLACE-ROUND/ of MOUNT's backend `b`
# (both mounts' `b` is the bucket's root); adds the CPU ms msfs and garage spent from its start
# until the store held every file (one listing's share included).
create() {
    local dir=$2/b/$1-$4 out m0 g0 times
    mkdir "$dir"
    create_paths "$dir"
    m0=$(cpu_ns "$3") g0=$(cpu_ns "$GARAGE")
    out=$(create_tool)
    # shellcheck disable=SC2046  # two numbers
    times=$(stored "$1" "$1-$4/f" $(field start "$out") $(field end "$out"))
    echo "$times $((($(cpu_ns "$3") - m0) / 1000000)) $((($(cpu_ns "$GARAGE") - g0) / 1000000))"
}

# NAME JSON: field NAME of the JSON object.
field() { python3 -c 'import json, sys; print(json.loads(sys.argv[2])[sys.argv[1]])' "$@"; }

# ROUND: the raw client's PutObjects by its own clock (its last response is its end), and the
# CPU ms garage spent on them.
raw() {
    local out g0
    g0=$(cpu_ns "$GARAGE")
    out=$("$RAW" --endpoint "$AWS_ENDPOINT" --bucket "$BUCKET" put-objects --prefix "raw-$1/" \
        --count "$FILES" --size 8 --concurrency "$THREADS" | tail -1)
    echo "raw $(field seconds "$out") $(field seconds "$out") 0 $((($(cpu_ns "$GARAGE") - g0) / 1000000))"
}

echo "$FILES files, $MODE ($THREADS threads), $ROUNDS rounds; seconds from the start to the last close, to the last LastModified; CPU ms of msfs, garage"
for round in $(seq "$ROUNDS"); do
    if [ $((round % 2)) = 1 ]; then
        create close-in-background "$M" "$DEFAULT_DAEMON" "$round"
        create close-waits "$WAIT_M" "$WAIT_DAEMON" "$round"
    else
        create close-waits "$WAIT_M" "$WAIT_DAEMON" "$round"
        create close-in-background "$M" "$DEFAULT_DAEMON" "$round"
    fi
    raw "$round"
done | tee "$WORK/rounds"
python3 - "$WORK/rounds" <<'PY'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    place, *values = line.split()
    rows.setdefault(place, []).append([float(v) for v in values])
raw = statistics.median(r[1] for r in rows["raw"])
print(f"\nmedians{'':14}last close  last stored  x raw  stored - close  msfs ms  garage ms")
for place, runs in rows.items():
    closed, stored, msfs, garage = (statistics.median(column) for column in zip(*runs))
    lag = statistics.median(s - c for c, s, *_ in runs)
    print(f"{place:<21}{closed:10.4f}  {stored:11.4f}  {stored / raw:4.2f}x  {lag * 1e3:11.1f} ms"
          f"  {msfs:7.0f}  {garage:9.0f}")
PY
