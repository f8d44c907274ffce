#!/usr/bin/env bash
# What `ls -l` of a huge directory costs the daemon's memory under `evictable_inode_limit`
# (issue #24): a read-only PSEUDO backend of FILES files in one directory, with a manifest the
# mount generates and ingests first; then `ls -l | wc -l`, timed, and the daemon's peak RSS
# (VmHWM), the inodes it holds after (`msfs_fuse_inodes`) and the entries it asked the kernel
# to drop (`msfs_fuse_inodes_evicted_total`).
#
#   bench/inode-limit.sh LIMIT [FILES [LISTER]]   FILES defaults to 1000000, LISTER to ls
#   MSFS_ARGS=--no-fd-holder bench/inode-limit.sh 65536    without the kernel-state journal
#
# LISTER `find` lists with `find DIR -mindepth 1 -ls` instead of `ls -l`: the same lstat per entry,
# printed as it is read. GNU `ls -l` (even with -U) holds every entry before printing, about
# 250 bytes each, so it cannot list 100M entries in 24 GiB (it was OOM-killed at 97M).
# Every 10 s the daemon's RSS, its anonymous and shared (mapped tmpfs) parts and the inodes
# it holds are printed, to see what grows with the listing's length.
#
# Needs root (FUSE), curl and a built msfs (release if there is one). Runs in a temp dir, removed
# at the end (a 10M-entry manifest takes about 1 GB there); stops only the processes it started.
set -euo pipefail
cd "$(dirname "$0")/.."
LIMIT=${1:?usage: bench/inode-limit.sh LIMIT [FILES [ls|find]]}
FILES=${2:-1000000}
LISTER=${3:-ls}
case $LISTER in
    ls) list() { ls -l "$1"; } ;;
    find) list() { find "$1" -mindepth 1 -ls; } ;;
    *) echo "LISTER is ls or find, not $LISTER" >&2; exit 2 ;;
esac
# shellcheck source=bench/scratch.sh
. bench/scratch.sh inode-limit

PORT=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
mkdir -p "$M" "$WORK/manifest"
cat > "$WORK/config.yaml" <<EOF
msfs_version: 1
endpoint: http://127.0.0.1:$PORT
evictable_inode_limit: $LIMIT
backends:
  - dir_name: flat
    backend_type: PSEUDO
    readonly: true
    manifest_path: $WORK/manifest
    PSEUDO:
      files_at_depth_0: $FILES
      file_size: 100
EOF

# shellcheck disable=SC2086 # MSFS_ARGS is a list of flags
"$MSFS" mount ${MSFS_ARGS:-} "$WORK/config.yaml" "$M" > "$WORK/log" 2>&1 &
DAEMON=$!
for _ in $(seq 1200); do
    grep -q 'manifest index ready' "$WORK/log" && break
    kill -0 "$DAEMON" 2>/dev/null || { cat "$WORK/log"; exit 1; }
    sleep 0.5
done
grep -q 'manifest index ready' "$WORK/log" || { echo "no index after 10 minutes" >&2; exit 1; }

metric() { curl -s "127.0.0.1:$PORT/metrics" | awk -v name="$1" '$1 == name { print $2 }'; }
peak_kib() { awk '/^VmHWM/ { print $2 }' "/proc/$DAEMON/status"; }

echo "inode-limit: limit $LIMIT, $FILES files, ${MSFS_ARGS:-journal on}; idle mount: $(peak_kib) KiB peak"
sample() {
    while sleep 10; do
        awk -v inodes="$(metric msfs_fuse_inodes)" '
            /^Rss:/ { rss = $2 } /^Anonymous:/ { anon = $2 } /^Rss_Shmem:/ { shmem = $2 }
            END { printf "inode-limit: sample: rss %d MiB, anonymous %d MiB, shmem %d KiB, inodes %s\n",
                  rss / 1024, anon / 1024, shmem, inodes }' "/proc/$DAEMON/smaps_rollup" || break
    done
}
sample &
SAMPLER=$!
START=$(date +%s.%N)
LINES=$(list "$M/flat" | wc -l)
END=$(date +%s.%N)
kill "$SAMPLER"
echo "inode-limit: $LISTER: $LINES lines in $(echo "$END - $START" | bc) s"
# The kernel forgets what it was asked to drop a moment later.
for _ in $(seq 100); do
    [ "$(metric msfs_fuse_inodes)" -le "$LIMIT" ] && break
    sleep 0.1
done
echo "inode-limit: peak RSS $(( $(peak_kib) / 1024 )) MiB;" \
    "inodes held $(metric msfs_fuse_inodes);" \
    "entries dropped $(metric msfs_fuse_inodes_evicted_total)"
