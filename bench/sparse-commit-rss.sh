#!/usr/bin/env bash
# Peak RSS of msfs while it commits huge sparse files (issue #18: no allocation may grow with a
# part or file size). Each file is truncated to SIZE, 1 MiB is written in its middle, and all are
# fsynced at once, so their multipart commits (SIZE / part size parts, nearly all zeros built on
# the fly) run concurrently. Prints msfs's resident size before and its peak (VmHWM) after.
#
#   bench/sparse-commit-rss.sh [FILES] [SIZE]      defaults: 1 file, 10G (truncate(1) sizes)
#
# Needs root, garage (scripts/install-test-deps.sh) and a built msfs (release if there is one).
# Everything runs on 127.0.0.1 in a temp dir, removed at the end.
set -euo pipefail
cd "$(dirname "$0")/.."
FILES=${1:-1}
SIZE=${2:-10G}
MSFS=target/release/msfs
[ -x "$MSFS" ] || MSFS=target/debug/msfs
WORK=$(mktemp -d /tmp/msfs-sparse-rss.XXXXXX)
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
MSFS_PID=""

cleanup() {
    if grep -qs " $WORK/mnt " /proc/self/mounts; then umount "$WORK/mnt" || umount -l "$WORK/mnt"; fi
    if [ -n "$MSFS_PID" ]; then wait "$MSFS_PID" 2>/dev/null || true; fi
    MSFS_S3_PORT=$PORT bash scripts/local-s3.sh stop "$WORK/s3" >/dev/null 2>&1 || true
    rm -rf "$WORK"
}
trap cleanup EXIT

MSFS_S3_PORT=$PORT bash scripts/local-s3.sh start "$WORK/s3" sparse >/dev/null
# shellcheck disable=SC1091
source "$WORK/s3/env"
mkdir -p "$WORK/mnt" "$WORK/cache"
cat > "$WORK/msfs.yaml" <<YAML
msfs_version: 1
cache_dir_path: $WORK/cache
backends:
  - dir_name: data
    backend_type: S3
    bucket_container_name: sparse
    readonly: false
    S3:
      endpoint: $AWS_ENDPOINT
      region: us-east-1
      access_key_id: \${AWS_ACCESS_KEY_ID}
      secret_access_key: \${AWS_SECRET_ACCESS_KEY}
YAML
"$MSFS" mount "$WORK/msfs.yaml" "$WORK/mnt" > "$WORK/msfs.log" 2>&1 &
MSFS_PID=$!
for _ in $(seq 100); do
    grep -qs " $WORK/mnt " /proc/self/mounts && break
    sleep 0.1
done
status() { grep "^$1:" "/proc/$MSFS_PID/status" | awk '{print $2 / 1024 " MiB"}'; }
echo "msfs $MSFS, $FILES file(s) of $SIZE, 1 MiB written in each"
echo "RSS before: $(status VmRSS)"
started=$(date +%s)
python3 - "$WORK/mnt/data" "$FILES" "$SIZE" <<'PY'
import os, sys, threading
root, files, size = sys.argv[1], int(sys.argv[2]), sys.argv[3]
units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
size = int(size[:-1]) * units[size[-1]] if size[-1] in units else int(size)
def one(i):
    fd = os.open(f"{root}/sparse-{i}", os.O_CREAT | os.O_RDWR, 0o644)
    os.ftruncate(fd, size)
    os.pwrite(fd, os.urandom(1 << 20), size // 2)
    os.fsync(fd)  # the commit: every part of the file, concurrently with the other files'
    os.close(fd)
threads = [threading.Thread(target=one, args=(i,)) for i in range(files)]
for t in threads: t.start()
for t in threads: t.join()
PY
echo "committed in $(( $(date +%s) - started )) s"
echo "RSS after: $(status VmRSS); peak (VmHWM): $(status VmHWM)"
ls -l "$WORK/mnt/data" | head -5
