#!/usr/bin/env bash
# Per-unlink latency of two msfs builds taking turns (issue #20's regression check of
# meta-unlink, whose bench cell times 100 unlinks once per run): ROUNDS rounds, in each of which
# every build (the first alternating), on its own mount of one local garage, creates FILES files
# of 8 bytes in a new directory and unlinks them, then unlinks FILES objects the raw client put
# and the mount listed, one after another, and FILES more all at once (a thread each, as the
# `meta-unlink-par` cell does). Prints each round's median microseconds per create and per
# unlink and the milliseconds of the unlinks at once, then the medians over all rounds and
# their ratio b/a (above 1: a is faster).
#
#   MSFS_B=<other msfs> bench/unlink-pairs.sh [ROUNDS] [FILES]     defaults: 20, 100
#
# MSFS (or the release build) is "a", MSFS_B "b". Needs root (FUSE), garage (scripts/
# install-test-deps.sh) and the raw client (`cargo build --release --example raw_read`). Runs in
# a temp dir, removed at the end; stops only the processes it started.
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-20}
FILES=${2:-100}
[ -n "${MSFS_B:-}" ] || { echo "MSFS_B: the other build to compare with" >&2; exit 2; }
# shellcheck source=bench/scratch.sh
. bench/scratch.sh unlink-pairs
need_raw_client
DAEMONS=()
stop_all() {
    for name in a b; do
        if grep -qs " $WORK/mnt-$name " /proc/self/mounts; then umount "$WORK/mnt-$name" || true; fi
    done
    for pid in "${DAEMONS[@]}"; do wait "$pid" 2>/dev/null || true; done
    stop_garage
    cleanup
}
trap stop_all EXIT
start_garage pairs
for name in a b; do
    bin=$MSFS; [ "$name" = b ] && bin=$MSFS_B
    mkdir -p "$WORK/mnt-$name" "$WORK/cache-$name"
    write_msfs_config "$WORK/$name.yaml" "$WORK/cache-$name" pairs "prefix: \"$name/\"" \
        "flush_on_close: true"
    start_msfs "$bin" "$WORK/$name.yaml" "$WORK/mnt-$name" "$WORK/daemon-$name.log"
    DAEMONS+=("$DAEMON")
done

for round in $(seq "$ROUNDS"); do
    # Who goes first alternates: the second of a pair meets the store as the first left it.
    order="a b"
    [ $((round % 2)) -eq 1 ] || order="b a"
    for name in $order; do
        for set in listed at-once; do
            "$RAW" --bucket pairs put-objects --prefix "$name/$set-$round/" --count "$FILES" \
                --size 8 --concurrency 32 > /dev/null
        done
        python3 - "$WORK/mnt-$name/b" "$round" "$FILES" "$name" <<'PY'
import os, statistics, sys, threading, time
root, round_, n, name = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
made = f"{root}/made-{round_}"
os.mkdir(made)
def timed(op, paths):
    spent = []
    for p in paths:
        t = time.perf_counter()
        op(p)
        spent.append(time.perf_counter() - t)
    return statistics.median(spent) * 1e6
def create(p):
    fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    os.write(fd, b"8 bytes\n")
    os.close(fd)
created = timed(create, [f"{made}/f{i}" for i in range(n)])
unlinked = timed(os.unlink, [f"{made}/f{i}" for i in range(n)])
listed_dir = f"{root}/listed-{round_}"
names = sorted(os.listdir(listed_dir))
assert len(names) == n, f"{listed_dir} lists {len(names)} of {n}"
listed = timed(os.unlink, [f"{listed_dir}/{x}" for x in names])
at_once_dir = f"{root}/at-once-{round_}"
paths = [f"{at_once_dir}/{x}" for x in sorted(os.listdir(at_once_dir))]
assert len(paths) == n, f"{at_once_dir} lists {len(paths)} of {n}"
threads = [threading.Thread(target=os.unlink, args=(p,)) for p in paths]
t = time.perf_counter()
for thread in threads:
    thread.start()
for thread in threads:
    thread.join()
at_once = (time.perf_counter() - t) * 1e3
assert not os.listdir(at_once_dir), f"{at_once_dir} still lists files"
print(f"round {round_} {name}: create {created:.0f} us, unlink {unlinked:.0f} us, "
      f"listed unlink {listed:.0f} us, at once {at_once:.1f} ms")
PY
    done
done | tee "$WORK/rounds.txt"
python3 - "$WORK/rounds.txt" <<'PY'
import re, statistics, sys
WHAT = ("create", "unlink", "listed unlink", "listed unlink at once")
seen = {}
for line in open(sys.argv[1]):
    m = re.match(r"round \d+ (\w): create (\d+) us, unlink (\d+) us, listed unlink (\d+) us, "
                 r"at once ([\d.]+) ms", line)
    if m:
        for what, value in zip(WHAT, m.groups()[1:]):
            seen.setdefault((what, m.group(1)), []).append(float(value))
for what, unit in zip(WHAT, ("us", "us", "us", "ms")):
    a, b = statistics.median(seen[(what, "a")]), statistics.median(seen[(what, "b")])
    rounds = len(seen[(what, "a")])
    print(f"{what}: a {a:.1f} {unit}, b {b:.1f} {unit} (medians of {rounds} rounds), "
          f"b/a {b / a:.2f}")
PY
