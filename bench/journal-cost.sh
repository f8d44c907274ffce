#!/usr/bin/env bash
# What the kernel-state journal (issue #19) costs a metadata workload: `ls -l` of a directory of
# FILES files on a fresh mount, RUNS times with the journal (the default, an fd holder) and
# RUNS times without (`--no-fd-holder`), alternating; prints the sorted times and the medians.
# Over a local `file` backend, so the numbers are msfs's own.
#
#   bench/journal-cost.sh [RUNS] [FILES]      defaults: 10, 1000
#   MSFS_SETTLE_SECS=1 bench/journal-cost.sh  waits a second after each mount before timing
#
# Needs root (FUSE) and a built msfs (release if there is one). Runs in a temp dir, removed at
# the end; stops only the processes it started.
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${1:-10}
FILES=${2:-1000}
# shellcheck source=bench/scratch.sh
. bench/scratch.sh journal-cost

mkdir -p "$WORK/store/many" "$M"
for i in $(seq "$FILES"); do echo x > "$WORK/store/many/f$i"; done
cat > "$WORK/config.yaml" <<YAML
msfs_version: 1
backends:
  - dir_name: data
    bucket_container_name: $WORK/store
    backend_type: file
    readonly: true
YAML

one() {
    "$MSFS" mount "$WORK/config.yaml" "$M" --state-dir "$WORK/state" "$@" > "$WORK/daemon.log" 2>&1 &
    DAEMON=$!
    until grep -qs ": mounted" "$WORK/daemon.log"; do sleep 0.005; done
    # MSFS_SETTLE_SECS: let the freshly started processes (the daemon, its fd holder) settle
    # before the timed listing, so that only the listing is measured.
    sleep "${MSFS_SETTLE_SECS:-0}"
    local t0 t1
    t0=$(date +%s.%N)
    ls -l "$M/data/many" > /dev/null
    t1=$(date +%s.%N)
    umount "$M"
    wait "$DAEMON" || true
    DAEMON=""
    echo "$t1 - $t0" | bc
}
median() { sort -n | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }

with=() without=()
for _ in $(seq "$RUNS"); do
    with+=("$(one)")
    without+=("$(one --no-fd-holder)")
done
echo "msfs: $MSFS; ls -l of $FILES files, $RUNS runs each"
echo "journal:        $(printf '%s\n' "${with[@]}" | sort -n | tr '\n' ' ')median $(printf '%s\n' "${with[@]}" | median)"
echo "--no-fd-holder: $(printf '%s\n' "${without[@]}" | sort -n | tr '\n' ' ')median $(printf '%s\n' "${without[@]}" | median)"
