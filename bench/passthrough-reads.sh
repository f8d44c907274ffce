#!/usr/bin/env bash
# What `fuse_passthrough` does to cache-resident reads (issue #20): a SIZE_MIB object read whole
# (dd, 1 MiB buffered reads) and FILES files of 64 KiB read one after another (open, read,
# close), every byte already in msfs's cache, on three mounts taking turns:
#   default      cache_storage: mapped-file (msfs's default), no passthrough
#   per-inode    cache_storage: per-inode-file, no passthrough
#   passthrough  cache_storage: per-inode-file, fuse_passthrough: true
# and, as the bound, the passthrough mount's cache files read directly. Before each timed read
# through a mount, the mount's page cache for the files is dropped (fadvise DONTNEED), so a read
# through msfs is served by msfs; what the kernel keeps of a cache file is the cache itself
# (`per-inode-file` storage lives in the page cache), so it is not dropped. Prints MiB/s per run
# and the medians. Over a local `file` backend, so the numbers are msfs's and the kernel's own.
#
#   bench/passthrough-reads.sh [RUNS] [SIZE_MIB] [FILES]      defaults: 5, 1024, 1000
#
# With PERF=<file>, then records `perf record -a -g` of 20 passes over the small files through the
# passthrough mount into <file> and prints each command's share of the samples (idle is
# `swapper`): where a lent small file's time goes. That needs `perf` (Debian's linux-perf).
#
# Needs root (FUSE, and CAP_SYS_ADMIN for passthrough), Linux 6.9 or later, and a built msfs
# (release if there is one; MSFS=<path> to measure another build). Runs in a temp dir, removed at
# the end; stops only what it started.
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${1:-5}
SIZE_MIB=${2:-1024}
FILES=${3:-1000}
MSFS=${MSFS:-$PWD/target/release/msfs}
[ -x "$MSFS" ] || MSFS=$PWD/target/debug/msfs
WORK=$(mktemp -d /tmp/msfs-passthrough.XXXXXX)
MODES=(default per-inode passthrough)
declare -A DAEMON=()

cleanup() {
    for mode in "${MODES[@]}"; do
        local m=$WORK/mnt-$mode
        if grep -qs " $m " /proc/self/mounts; then umount "$m" || umount -l "$m"; fi
        if [ -n "${DAEMON[$mode]:-}" ]; then wait "${DAEMON[$mode]}" 2>/dev/null || true; fi
    done
    rm -rf "$WORK"
}
trap cleanup EXIT

mkdir -p "$WORK/store/small"
head -c "$((SIZE_MIB << 20))" /dev/urandom > "$WORK/store/large"
for i in $(seq "$FILES"); do head -c 65536 /dev/urandom > "$WORK/store/small/f$i"; done
# Twice what the objects take, in 1 MiB lines (a small file takes a line of its own): a lent
# object may hold at most half the lines.
LINES=$(( (SIZE_MIB + FILES + 1) * 2 ))
# The passthrough mount's metrics, to show its opens were lent.
PORT=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')

for mode in "${MODES[@]}"; do
    storage=per-inode-file passthrough=false
    [ "$mode" = default ] && storage=mapped-file
    endpoint=""
    if [ "$mode" = passthrough ]; then passthrough=true endpoint="endpoint: http://127.0.0.1:$PORT"; fi
    mkdir -p "$WORK/mnt-$mode" "$WORK/cache-$mode"
    cat > "$WORK/config-$mode.yaml" <<YAML
msfs_version: 1
fuse_passthrough: $passthrough
max_write: 1048576
cache_storage: $storage
cache_line_size: 1048576
cache_lines: $LINES
cache_lines_to_prefetch: 32
cache_dir_path: $WORK/cache-$mode
$endpoint
backends:
  - dir_name: data
    bucket_container_name: $WORK/store
    backend_type: file
YAML
    "$MSFS" mount "$WORK/config-$mode.yaml" "$WORK/mnt-$mode" --state-dir "$WORK/state-$mode" \
        > "$WORK/daemon-$mode.log" 2>&1 &
    DAEMON[$mode]=$!
    until grep -qs ": mounted" "$WORK/daemon-$mode.log"; do
        kill -0 "${DAEMON[$mode]}" 2>/dev/null || { cat "$WORK/daemon-$mode.log" >&2; exit 1; }
        sleep 0.005
    done
    # Fill the cache: every byte read once through the mount.
    cat "$WORK/mnt-$mode/data/large" "$WORK/mnt-$mode/data/small/"* > /dev/null
done

# One timed read of PATHS... as MiB/s (PASSES of them, a line each): each file opened, read to the
# end in 1 MiB reads and closed; with EVICT=1, after its page cache was dropped.
cat > "$WORK/timed_read.py" <<'PY'
import os, sys, time
paths = sys.argv[1:]
for _ in range(int(os.environ.get("PASSES", "1"))):
    for p in paths if os.environ.get("EVICT", "1") == "1" else []:
        fd = os.open(p, os.O_RDONLY)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        os.close(fd)
    total, start = 0, time.monotonic()
    for p in paths:
        fd = os.open(p, os.O_RDONLY)
        while True:
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                break
            total += len(chunk)
        os.close(fd)
    print(f"{total / (time.monotonic() - start) / (1 << 20):.0f}")
PY
timed_read() { python3 "$WORK/timed_read.py" "$@"; }
median() { sort -n | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }

# The passthrough mount's cache files, largest first: the 1 GiB object, then the small ones.
mapfile -t CACHE_FILES < <(find "$WORK/cache-passthrough" -type f -name 'object-*' -printf '%s %p\n' | sort -rn | cut -d' ' -f2)
LARGE_CACHE_FILE=${CACHE_FILES[0]}
SMALL_CACHE_FILES=("${CACHE_FILES[@]:1}")

echo "msfs: $MSFS; cache-resident reads, $RUNS runs each, mounts taking turns"
for what in large small; do
    declare -A got=()
    for _ in $(seq "$RUNS"); do
        for mode in "${MODES[@]}" cache-file; do
            if [ "$mode" = cache-file ]; then
                if [ "$what" = large ]; then paths=("$LARGE_CACHE_FILE"); else paths=("${SMALL_CACHE_FILES[@]}"); fi
            elif [ "$what" = large ]; then
                paths=("$WORK/mnt-$mode/data/large")
            else
                paths=("$WORK/mnt-$mode/data/small/"*)
            fi
            evict=1
            [ "$mode" = cache-file ] && evict=0
            got[$mode]+="$(EVICT=$evict timed_read "${paths[@]}") "
        done
    done
    for mode in "${MODES[@]}" cache-file; do
        # shellcheck disable=SC2086
        echo "$what $mode: MiB/s ${got[$mode]}(median $(printf '%s\n' ${got[$mode]} | median))"
    done
    unset got
done
echo "passthrough mount: $(curl -s "http://127.0.0.1:$PORT/metrics" | grep '^msfs_fuse_passthrough_opens_total' || echo 'no passthrough opens')"
if [ -n "${PERF:-}" ]; then
    PASSES=20 perf record -q -a -g -F 4000 -o "$PERF" -- \
        python3 "$WORK/timed_read.py" "$WORK/mnt-passthrough/data/small/"* > /dev/null
    echo "perf: samples by command, 20 passes over the small files through the passthrough mount ($PERF):"
    perf report -i "$PERF" --no-children --sort comm --stdio -g none 2> /dev/null | grep -E '^ +[0-9]' | head -6
fi
