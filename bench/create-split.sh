#!/usr/bin/env bash
# Where a small file's time goes (issue #21, meta-create): FILES files of 8 bytes created one
# after the other by one thread (`open(O_CREAT|O_TRUNC)`, `write`, `close`), each in a new
# directory of a fresh msfs mount with `flush_on_close: true` (close returns once the object is
# stored), over a local garage. Prints the mean milliseconds of the open, the write and the
# close per file for each run, and the raw client's PutObject of the same files one at a time
# (`raw_read put-objects`), the floor.
#
#   bench/create-split.sh [RUNS] [FILES]                         defaults: 3, 300
#   MSFS_B=<other msfs> bench/create-split.sh ...                the two builds, alternating
#
# MSFS (or the release build) is "a", MSFS_B "b". Needs root (FUSE), garage (scripts/
# install-test-deps.sh) and the raw client (`cargo build --release --example raw_read`). Runs in
# a temp dir, removed at the end; stops only the processes it started.
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${1:-3}
FILES=${2:-300}
# shellcheck source=bench/scratch.sh
. bench/scratch.sh create-split
need_raw_client
BUILDS=("a=$MSFS")
[ -z "${MSFS_B:-}" ] || BUILDS+=("b=$MSFS_B")

trap 'stop_garage; cleanup' EXIT
start_garage split
mkdir -p "$M" "$WORK/cache"
write_msfs_config "$WORK/msfs.yaml" "$WORK/cache" split "flush_on_close: true"

create() {
    python3 - "$1" "$FILES" <<'PY'
import os, sys, time
d, n = sys.argv[1], int(sys.argv[2])
os.makedirs(d)
spent = [0.0, 0.0, 0.0]
for i in range(n):
    a = time.perf_counter()
    fd = os.open(f"{d}/f{i}", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    b = time.perf_counter()
    os.write(fd, b"file %02d\n" % (i % 100))
    c = time.perf_counter()
    os.close(fd)
    e = time.perf_counter()
    for k, t in enumerate((b - a, c - b, e - c)):
        spent[k] += t
o, w, c = (t / n * 1e3 for t in spent)
print(f"open {o:.3f}  write {w:.3f}  close {c:.3f}  total {o + w + c:.3f} ms per file")
PY
}

for run in $(seq "$RUNS"); do
    for build in "${BUILDS[@]}"; do
        name=${build%%=*} bin=${build#*=}
        start_msfs "$bin" "$WORK/msfs.yaml" "$M" "$WORK/daemon-$name-$run.log"
        echo -n "run $run msfs $name: "
        create "$M/b/$name-$run"
        umount "$M"
        wait "$DAEMON" || true
        DAEMON=""
    done
    seconds=$("$RAW" --endpoint "$AWS_ENDPOINT" --bucket split put-objects --prefix "raw-$run/" \
        --count "$FILES" --size 8 --concurrency 1 | python3 -c 'import json,sys; print(json.loads(sys.stdin.read().strip().splitlines()[-1])["seconds"])')
    python3 -c "print(f'run $run raw PutObject: {$seconds / $FILES * 1e3:.3f} ms per file')"
done
