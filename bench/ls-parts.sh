#!/usr/bin/env bash
# What `meta-ls` (cold `ls -l` of 1,000 files) is made of (issue #20's target of 1.5x the raw
# LIST): each round mounts msfs afresh over a garage bucket holding dir/f00000..f00999 and
# times, as the harness does (a `subprocess` from spawn to exit), the cold `ls -l` of the
# directory, the same `ls -l` twice more (listing and attributes now in msfs's and the kernel's
# caches: what is left with nothing to fetch, process start included), an `ls -f` (names only),
# and the raw client's LIST of the same prefix (its own clock). Prints milliseconds.
#
#   bench/ls-parts.sh [ROUNDS] [FILES]      defaults: 5, 1000
#
# Needs root (FUSE), garage (scripts/install-test-deps.sh) and the raw client (`cargo build
# --release --example raw_read`). Runs in a temp dir, removed at the end; stops only the
# processes it started.
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-5}
FILES=${2:-1000}
# shellcheck source=bench/scratch.sh
. bench/scratch.sh ls-parts
need_raw_client
trap 'stop_garage; cleanup' EXIT
BUCKET=ls-parts
start_garage "$BUCKET"
"$RAW" --endpoint "$AWS_ENDPOINT" --bucket "$BUCKET" put-objects --prefix dir/f --count "$FILES" \
    --size 0 --concurrency 32 > /dev/null 2>&1
mkdir -p "$WORK/cache" "$M"
write_msfs_config "$WORK/config.yaml" "$WORK/cache" "$BUCKET"
sed -i 's/readonly: false/readonly: true/' "$WORK/config.yaml"

# Milliseconds from spawning the command to its exit, its output discarded.
timed() {
    python3 - "$@" <<'PY'
import subprocess, sys, time
start = time.monotonic()
subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, check=True)
print(f"{(time.monotonic() - start) * 1000:.1f}")
PY
}
raw_list_ms() {
    "$RAW" --endpoint "$AWS_ENDPOINT" --bucket "$BUCKET" list --prefix dir/ --delimiter / 2> /dev/null \
        | tail -1 | python3 -c 'import json, sys; print(round(json.loads(sys.stdin.read())["seconds"] * 1000, 1))'
}

echo "$FILES files; milliseconds"
for round in $(seq "$ROUNDS"); do
    start_msfs "$MSFS" "$WORK/config.yaml" "$M" "$WORK/daemon-$round.log"
    cold=$(timed ls -l "$M/b/dir")
    warm=$(timed ls -l "$M/b/dir")
    again=$(timed ls -l "$M/b/dir")
    names=$(timed ls -f "$M/b/dir")
    echo "cold ls -l $cold | warm ls -l $warm, $again | warm ls -f $names | raw LIST $(raw_list_ms)"
    umount "$M"
    wait "$DAEMON" || true
    DAEMON=""
done
