#!/usr/bin/env bash
# Where a cold sequential read's CPU goes with the server on a core of its own (issue #20's
# seq-cold target under `--split-cpus`): garage pinned to CPU 0, this script (and so the raw
# client, msfs and the reader) to CPU 1. Each round reads a 1 GiB object once with the raw client
# (4 x 8 MiB GETs in flight, as `bench/run`'s raw limit) and once with `dd bs=1M` through a fresh
# msfs mount with the bench's settings (1 MiB lines, 32 prefetched, `mapped-file`), the page
# cache dropped before each, and prints MiB/s and how busy each CPU was meanwhile: the party
# whose CPU is near 100% is the bottleneck.
#
#   bench/split-shares.sh [ROUNDS]      default 4
#
# Needs root (FUSE, drop_caches), CPUs 0 and 1, garage (scripts/install-test-deps.sh) and the raw
# client (`cargo build --release --example raw_read`). Runs in a temp dir, removed at the end;
# stops only the processes it started.
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-4}
# The script, and everything it starts from here on, on CPU 1.
taskset -p -c 1 $$ > /dev/null
# shellcheck source=bench/scratch.sh
. bench/scratch.sh split-shares
need_raw_client
trap 'stop_garage; cleanup' EXIT
BUCKET=split-shares
start_garage "$BUCKET"
taskset -a -p -c 0 "$GARAGE" > /dev/null
"$RAW" --endpoint "$AWS_ENDPOINT" --bucket "$BUCKET" put-large --key big --size $((1 << 30)) \
    --part-size $((8 << 20)) --concurrency 4 > /dev/null

# "cpu0 busy total cpu1 busy total" in clock ticks, from /proc/stat.
ticks() { awk '/^cpu[01] / {busy = $2 + $3 + $4 + $7 + $8 + $9; printf "%s %d %d ", $1, busy, busy + $5 + $6}' /proc/stat; }
# WHO SECONDS BEFORE AFTER: MiB/s of 1 GiB read in SECONDS, and each CPU's busy share between
# the two `ticks`.
report() {
    python3 - "$@" <<'PY'
import sys
who, seconds, before, after = sys.argv[1], float(sys.argv[2]), sys.argv[3].split(), sys.argv[4].split()
shares = []
for i in (0, 3):
    busy, total = int(after[i + 1]) - int(before[i + 1]), int(after[i + 2]) - int(before[i + 2])
    shares.append(f"{before[i]} {100 * busy / max(total, 1):.0f}% busy")
print(f"{who:<5} {1024 / seconds:.0f} MiB/s   " + ", ".join(shares))
PY
}
now() { date +%s.%N; }
since() { python3 -c "import sys; print(float(sys.argv[2]) - float(sys.argv[1]))" "$1" "$(now)"; }
drop() { sync; echo 3 > /proc/sys/vm/drop_caches; }

echo "garage on CPU 0; the raw client, msfs and dd on CPU 1; $ROUNDS rounds"
for round in $(seq "$ROUNDS"); do
    drop
    before=$(ticks)
    out=$("$RAW" --endpoint "$AWS_ENDPOINT" --bucket "$BUCKET" read --key big \
        --request-size $((8 << 20)) --concurrency 4 2> /dev/null | tail -1)
    after=$(ticks)
    # The raw client's own clock (its process start is not the read's).
    seconds=$(python3 -c 'import json, sys; print(json.loads(sys.argv[1])["seconds"])' "$out")
    report raw "$seconds" "$before" "$after"

    mkdir -p "$WORK/cache-$round" "$M"
    write_msfs_config "$WORK/config-$round.yaml" "$WORK/cache-$round" "$BUCKET"
    sed -i 's/readonly: false/readonly: true/' "$WORK/config-$round.yaml"
    sed -i '1a cache_storage: mapped-file\ncache_line_size: 1048576\ncache_lines: 2048\ncache_lines_to_prefetch: 32\nmax_write: 1048576' "$WORK/config-$round.yaml"
    start_msfs "$MSFS" "$WORK/config-$round.yaml" "$M" "$WORK/daemon-$round.log"
    drop
    before=$(ticks) start=$(now)
    dd if="$M/b/big" of=/dev/null bs=1M status=none
    seconds=$(since "$start") after=$(ticks)
    report msfs "$seconds" "$before" "$after"
    umount "$M"
    wait "$DAEMON" || true
    DAEMON=""
done
