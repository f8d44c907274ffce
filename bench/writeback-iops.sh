#!/usr/bin/env bash
# What `fuse_writeback_cache` and `fuse_io_uring` do to random writes (issue #21): 4 KiB
# pwrite()s at random aligned offsets into an existing SIZE_MIB object, by 1, 4 and 8 threads
# for SECONDS each, then close (which commits: `flush_on_close: true`). Each thread count runs
# RUNS times in each of three modes, taking turns: over `/dev/fuse` without the writeback cache
# (the defaults), with the writeback cache, and over FUSE over io_uring without it. Prints per
# run the write phase's IOPS (writes / time until the last write returned) and the close's
# seconds, and the medians of the IOPS.
# Over a local `file` backend, so the numbers are msfs's and the kernel's own, not a server's.
#
#   bench/writeback-iops.sh [RUNS] [SECONDS] [SIZE_MIB]      defaults: 3, 10, 1024
#
# Needs root (FUSE) and a built msfs (release if there is one); the io_uring mode needs Linux
# 6.14 or later (msfs turns on the `fuse` module's `enable_uring` parameter; the script puts
# it back as it found it). Runs in a temp dir, removed at the end; stops only the processes it
# started.
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${1:-3}
SECONDS_EACH=${2:-10}
SIZE_MIB=${3:-1024}
# shellcheck source=bench/scratch.sh
. bench/scratch.sh writeback-iops

mkdir -p "$WORK/store" "$WORK/cache" "$M"
head -c "$((SIZE_MIB << 20))" /dev/urandom > "$WORK/store/object"

# The three modes: the config keys each adds to the defaults.
MODES=(plain writeback io-uring)
mode_keys() {
    case $1 in
        plain) printf 'fuse_writeback_cache: false\n' ;;
        writeback) printf 'fuse_writeback_cache: true\n' ;;
        io-uring) printf 'fuse_io_uring: true\n' ;;
    esac
}
for mode in "${MODES[@]}"; do
    {
        printf 'msfs_version: 1\n'
        mode_keys "$mode"
        cat <<YAML
cache_dir_path: $WORK/cache
backends:
  - dir_name: data
    bucket_container_name: $WORK/store
    backend_type: file
    readonly: false
    flush_on_close: true
YAML
    } > "$WORK/config-$mode.yaml"
done
URING_PARAM=/sys/module/fuse/parameters/enable_uring
URING_WAS=$(cat "$URING_PARAM" 2>/dev/null || true)
restore_uring() {
    if [ -n "$URING_WAS" ]; then echo "$URING_WAS" > "$URING_PARAM" 2>/dev/null || true; fi
    cleanup
}
trap restore_uring EXIT

# One run: prints "IOPS CLOSE_SECONDS".
one() {
    local mode=$1 threads=$2
    "$MSFS" mount "$WORK/config-$mode.yaml" "$M" --state-dir "$WORK/state" > "$WORK/daemon.log" 2>&1 &
    DAEMON=$!
    until grep -qs ": mounted" "$WORK/daemon.log"; do
        kill -0 "$DAEMON" 2>/dev/null || { cat "$WORK/daemon.log" >&2; exit 1; }
        sleep 0.005
    done
    if [ "$mode" = io-uring ] && ! grep -qs "serving over io_uring" "$WORK/daemon.log"; then
        echo "msfs did not serve over io_uring:" >&2; grep fuse_io_uring "$WORK/daemon.log" >&2; exit 1
    fi
    python3 - "$M/data/object" "$threads" "$SECONDS_EACH" <<'PY'
import os, random, sys, threading, time
path, threads, seconds = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
fd = os.open(path, os.O_WRONLY)
slots = os.fstat(fd).st_size // 4096
block = os.urandom(4096)
counts = [0] * threads
def writer(i):
    rnd, deadline, n = random.Random(i), time.monotonic() + seconds, 0
    while time.monotonic() < deadline:
        os.pwrite(fd, block, rnd.randrange(slots) * 4096)
        n += 1
    counts[i] = n
start = time.monotonic()
workers = [threading.Thread(target=writer, args=(i,)) for i in range(threads)]
for w in workers: w.start()
for w in workers: w.join()
written = time.monotonic()
os.close(fd)  # sends the kernel's dirty pages, then commits (the file backend: locally)
closed = time.monotonic()
print(f"{sum(counts) / (written - start):.0f} {closed - written:.2f}")
PY
    umount "$M"
    wait "$DAEMON" || true
    DAEMON=""
}
median() { sort -n | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }

echo "msfs: $MSFS; 4 KiB random pwrite()s into a $SIZE_MIB MiB object, $SECONDS_EACH s, $RUNS runs each"
for threads in 1 4 8; do
    declare -A iops=() close=()
    for _ in $(seq "$RUNS"); do
        for mode in "${MODES[@]}"; do
            one "$mode" "$threads" > "$WORK/run"
            read -r run_iops run_close < "$WORK/run"
            iops[$mode]+="$run_iops " close[$mode]+="$run_close "
        done
    done
    for mode in "${MODES[@]}"; do
        # shellcheck disable=SC2086 # the runs' figures, one word each
        printf 't%s %-10s IOPS %s(median %s); close s %s\n' "$threads" "$mode:" "${iops[$mode]}" \
            "$(printf '%s\n' ${iops[$mode]} | median)" "${close[$mode]}"
    done
    unset iops close
done
