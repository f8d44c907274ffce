#!/usr/bin/env bash
# POSIX conformance and data integrity of a writable msfs S3 mount (issue #18), run as root:
#
#   scripts/conformance.sh            run everything below; exit 1 on any failed check
#   scripts/conformance.sh --update   same, but rewrite scripts/conformance/pjdfstest-expected.txt
#                                     from this run (reasons of entries that stay are kept; new
#                                     entries get reason TODO, to be filled in by hand)
#
# 1. pjdfstest 0.2.2 (the POSIX syscall suite) inside a directory of the mount, configured by
#    scripts/conformance/pjdfstest.toml. Every test's result is compared with
#    scripts/conformance/pjdfstest-expected.txt, which lists each test allowed to fail and why:
#    an unexpected failure or an unexpected pass fails the run. Tests listed in
#    scripts/conformance/pjdfstest-crashes.txt (they crash msfs today) are not run.
# 2. fsx 0.3.2, 100,000 operations per seed on three seeds (no mmap, no fallocate family; one
#    with close/reopen and fsync, one on a file crossing the multipart threshold), on the same
#    msfs process: it must still be alive and answering after all of it.
# 3. Unmount, mount again with a new process, and compare every fsx file byte for byte with the
#    same fsx sequence replayed on a local file, both through the new mount and as the bucket's
#    object fetched straight from S3.
# 4. truncate/12.t and ftruncate/12.t of the C pjdfstest (a length past the largest object is
#    EFBIG; the Rust suite dropped them), on the new process, which must survive them.
# 5. pjdfstest again on a third process whose backend has `posix_metadata: true` (and the mount
#    `allow_other`, so that the suite's other users reach it), against its own expected list,
#    scripts/conformance/pjdfstest-posix-expected.txt.
# It ends with a line "N passed, N failed" counting these checks.
#
# Starts its own garage (sqlite metadata) on random free 127.0.0.1 ports in a temporary
# directory and stops it when done. Environment: MSFS_BIN (an msfs binary to use instead of building target/debug/msfs),
# MSFS_FSX_SEEDS (three seeds instead of random ones; the run prints the seeds it used),
# MSFS_CONFORMANCE_KEEP=1 (keep the temporary directory; it is kept anyway when a check fails).
# Install pjdfstest, fsx and garage with scripts/install-test-deps.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="${CARGO_HOME:-$HOME/.cargo}/bin:$PATH"
# pjdfstest colours its output on a terminal; the parser reads plain lines.
export NO_COLOR=1
# Backtraces after each failure (with RUST_BACKTRACE set) would only bury the messages.
export RUST_BACKTRACE=0

PJDFSTEST_VERSION=0.2.2
FSX_VERSION=0.3.2
FSX_OPS=100000
CONF=scripts/conformance
EXPECTED=$CONF/pjdfstest-expected.txt
EXPECTED_POSIX=$CONF/pjdfstest-posix-expected.txt
CRASHES=$CONF/pjdfstest-crashes.txt
BUCKET=conformance
# Bounds, far above what a healthy run takes here, so that a hang fails the run instead of
# stalling it. pjdfstest takes 1 to 2 min; the three fsx seeds 2 to 3.5 min on a quiet 2-core
# machine, but a CI run on a busy one (steal time, a disk still writing back the suites before)
# took 352 s for a seed that takes 118 s here, so their bound is 15 min.
PJDFSTEST_TIMEOUT=480
FSX_TIMEOUT=900
MOUNT_TIMEOUT=30
STOP_TIMEOUT=60

update=""
case "${1:-}" in
    --update) update=1 ;;
    "") ;;
    *) sed -n '2,7p' "$0" >&2; exit 2 ;;
esac

log() { echo "conformance: $*"; }
die() { echo "conformance: $*" >&2; exit 1; }

# --- prerequisites -----------------------------------------------------------------------------
[[ "$(id -u)" == 0 ]] || die "run as root: pjdfstest switches users and msfs mounts through FUSE"
[[ -e /dev/fuse ]] || die "no /dev/fuse"
pjdfstest --version 2>/dev/null | grep -qx "pjdfstest $PJDFSTEST_VERSION" \
    || die "pjdfstest $PJDFSTEST_VERSION not found: run scripts/install-test-deps.sh"
fsx --version 2>/dev/null | grep -qx "fsx $FSX_VERSION" \
    || die "fsx $FSX_VERSION not found: run scripts/install-test-deps.sh"
command -v curl >/dev/null || die "curl not found: run scripts/install-test-deps.sh"
if [[ -n "${MSFS_BIN:-}" ]]; then
    msfs=$(realpath "$MSFS_BIN")
else
    # Cheap after the test runs: nextest has built this binary already.
    cargo build --locked --bin msfs
    msfs=$PWD/target/debug/msfs
fi
[[ -x "$msfs" ]] || die "no msfs binary at $msfs"

started=$SECONDS
# Short paths: a socket's path (bind(2)) may not exceed 107 bytes, and pjdfstest's socket tests
# add their own names below the directory they are given.
work=$(mktemp -d /tmp/msfs-c.XXXXXX)
# mktemp makes it 0700; pjdfstest's tests run calls as other users, who must reach the mount.
chmod 755 "$work"
mnt=$work/m
mkdir -p "$mnt" "$work/cache" "$work/ref" "$work/fsx-artifacts"
msfs_pid=""
checks_passed=0
checks_failed=0

# --- cleanup: only what this script started, by PID ----------------------------------------------
is_mounted() { awk -v m="$1" '$5 == m { found = 1 } END { exit !found }' /proc/self/mountinfo; }

# A FUSE request msfs never answers leaves its caller in uninterruptible sleep, where even
# SIGKILL waits; aborting the connection (fusectl) ends every pending request with ENOTCONN.
abort_fuse() {
    local dev minor
    dev=$(awk -v m="$mnt" '$5 == m { d = $3 } END { print d }' /proc/self/mountinfo)
    [[ -n "$dev" ]] || return 0
    minor=${dev#*:}
    if [[ ! -d /sys/fs/fuse/connections/$minor ]]; then
        mount -t fusectl none /sys/fs/fuse/connections 2>/dev/null || true
    fi
    if [[ -e /sys/fs/fuse/connections/$minor/abort ]]; then
        log "aborting the FUSE connection of $mnt (device $dev)"
        echo 1 > "/sys/fs/fuse/connections/$minor/abort" || true
    fi
}

stop_msfs_hard() {
    if is_mounted "$mnt"; then umount -l "$mnt" 2>/dev/null || true; fi
    if [[ -n "$msfs_pid" ]] && kill -0 "$msfs_pid" 2>/dev/null; then
        kill -KILL "$msfs_pid" 2>/dev/null || true
    fi
    if [[ -n "$msfs_pid" ]]; then wait "$msfs_pid" 2>/dev/null || true; fi
    msfs_pid=""
}

cleanup() {
    local rc=$?
    set +e
    stop_msfs_hard
    bash scripts/local-s3.sh stop "$work/s3" >/dev/null 2>&1
    if is_mounted "$mnt"; then
        log "$mnt is still mounted; leaving $work"
    elif [[ "${MSFS_CONFORMANCE_KEEP:-}" == 1 || $checks_failed -gt 0 || $rc -ne 0 ]]; then
        log "logs and data kept in $work"
    else
        rm -rf "$work"
    fi
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# --- helpers -------------------------------------------------------------------------------------
# Runs "$@" (stdout and stderr to file $2) for at most $1 seconds. On expiry it kills the command
# by its PID and aborts the mount's FUSE connection in case the command is stuck in a request,
# and returns 124.
bounded() {
    local secs=$1 out=$2 pid rc=0
    shift 2
    "$@" > "$out" 2>&1 &
    pid=$!
    local deadline=$((SECONDS + secs))
    while kill -0 "$pid" 2>/dev/null; do
        if ((SECONDS >= deadline)); then
            log "timed out after ${secs}s: $1 (output in $out)"
            kill -KILL "$pid" 2>/dev/null || true
            abort_fuse
            wait "$pid" 2>/dev/null || true
            return 124
        fi
        sleep 0.2
    done
    wait "$pid" || rc=$?
    return "$rc"
}

check() { # check OK|FAIL DESCRIPTION
    if [[ "$1" == OK ]]; then
        checks_passed=$((checks_passed + 1))
        echo "  ok    $2"
    else
        checks_failed=$((checks_failed + 1))
        echo "  FAIL  $2"
    fi
}

free_port_base() { # three consecutive free loopback ports: garage's S3, RPC and admin
    python3 - <<'PY'
import random, socket
for _ in range(200):
    base = random.randrange(20000, 60000)
    socks = []
    try:
        for port in range(base, base + 3):
            s = socket.socket()
            s.bind(("127.0.0.1", port))
            socks.append(s)
    except OSError:
        continue
    finally:
        for s in socks:
            s.close()
    print(base)
    break
else:
    raise SystemExit("no three consecutive free ports found")
PY
}

start_msfs() { # start_msfs LOGNAME: the foreground daemon, as the integration tests run it
    "$msfs" mount "$work/msfs.yaml" "$mnt" > "$work/$1.log" 2>&1 &
    msfs_pid=$!
    local deadline=$((SECONDS + MOUNT_TIMEOUT))
    until awk -v m="$mnt" '$5 == m && $0 ~ / - fuse/ { f = 1 } END { exit !f }' /proc/self/mountinfo; do
        kill -0 "$msfs_pid" 2>/dev/null || { tail -20 "$work/$1.log" >&2; die "msfs exited before mounting"; }
        ((SECONDS < deadline)) || { tail -20 "$work/$1.log" >&2; die "no FUSE mount at $mnt within ${MOUNT_TIMEOUT}s"; }
        sleep 0.1
    done
    log "msfs (pid $msfs_pid) mounted $mnt; log $work/$1.log"
}

# s3_get PATH OUT: a GET straight to garage, SigV4-signed by curl, what any other S3 client
# would read. garage wants x-amz-content-sha256, which curl does not add by itself.
s3_get() {
    bounded 60 "$work/curl.err" curl -sS --fail -H "x-amz-content-sha256: UNSIGNED-PAYLOAD" \
        --aws-sigv4 "aws:amz:$AWS_REGION:s3" --user "$AWS_ACCESS_KEY_ID:$AWS_SECRET_ACCESS_KEY" \
        -o "$2" "$AWS_ENDPOINT/$1"
}

# Whether the daemon still runs and the mount answers a stat (bounded: a hung mount must not
# hang the script).
daemon_healthy() {
    kill -0 "$msfs_pid" 2>/dev/null && bounded 20 "$work/stat.out" stat "$mnt/data"
}

# umount, then wait for the daemon to exit by itself (it commits what is still dirty first).
stop_msfs() {
    local rc=0
    bounded "$STOP_TIMEOUT" "$work/umount.out" umount "$mnt" || { cat "$work/umount.out"; rc=1; }
    local deadline=$((SECONDS + STOP_TIMEOUT))
    while kill -0 "$msfs_pid" 2>/dev/null && ((SECONDS < deadline)); do sleep 0.1; done
    if kill -0 "$msfs_pid" 2>/dev/null; then
        log "msfs (pid $msfs_pid) did not exit within ${STOP_TIMEOUT}s of umount"
        stop_msfs_hard
        return 1
    fi
    wait "$msfs_pid" || rc=$?
    msfs_pid=""
    return "$rc"
}

# --- local references (no msfs) ------------------------------------------------------------------
# pjdfstest has no option to list its tests; a run on a local directory names them all, in the
# order the suite runs them (a few seconds), which the crash list and the report need.
log "pjdfstest on a local directory ($(df --output=fstype "$work/ref" | tail -1)) to list the tests"
# Its naps need not outlast msfs's timestamp granularity: local times have nanoseconds.
mkdir -p "$work/ref/pjdfstest"
sed 's/^naptime = .*/naptime = 0.01/' "$CONF/pjdfstest.toml" > "$work/pjdfstest-local.toml"
bounded 120 "$work/pjdfstest-local.out" pjdfstest -c "$work/pjdfstest-local.toml" -p "$work/ref/pjdfstest" || true
grep -Eo '^[a-z0-9_]+(::[a-z0-9_]+)+' "$work/pjdfstest-local.out" > "$work/pjdfstest-names.txt" || true
[[ -s "$work/pjdfstest-names.txt" ]] || { cat "$work/pjdfstest-local.out"; die "pjdfstest listed no tests"; }
log "local reference: $(grep '^Summary:' "$work/pjdfstest-local.out" || echo 'no summary')"
# The tests to run on msfs: all but the crash list.
grep -vxF -f <(grep -Ev '^\s*(#|$)' "$CRASHES" | awk '{ print $1 }'; echo '#none') \
    "$work/pjdfstest-names.txt" > "$work/pjdfstest-run.txt" || true

# fsx's sequence depends on its seed and config only, so the same run on a local file yields the
# bytes the file on msfs must hold at the end (fsx writes no .fsxgood unless it fails).
read -r -a seeds <<< "${MSFS_FSX_SEEDS:-$RANDOM$RANDOM $RANDOM$RANDOM $RANDOM$RANDOM}"
((${#seeds[@]} == 3)) || die "MSFS_FSX_SEEDS needs three seeds"
fsx_configs=(fsx.toml fsx-reopen.toml fsx-large.toml)
log "fsx seeds: ${seeds[*]} (MSFS_FSX_SEEDS=\"${seeds[*]}\" repeats this run)"
for i in 0 1 2; do
    bounded "$FSX_TIMEOUT" "$work/fsx-ref-$i.out" fsx -N "$FSX_OPS" -S "${seeds[$i]}" \
        -f "$CONF/${fsx_configs[$i]}" -P "$work/fsx-artifacts" "$work/ref/fsx-$i" \
        || { cat "$work/fsx-ref-$i.out"; die "fsx failed on a local file (seed ${seeds[$i]})"; }
done

# --- garage and the mount ----------------------------------------------------------------------
for attempt in 1 2 3; do
    port=$(free_port_base)
    # sqlite, not LMDB: pjdfstest's PATH_MAX tests make keys past LMDB's ~470 bytes, and a 503
    # for them would test garage, not msfs (and cost each such test msfs's retries, ~20 s).
    if MSFS_S3_DB_ENGINE=sqlite MSFS_S3_PORT=$port bash scripts/local-s3.sh start "$work/s3" "$BUCKET" > "$work/s3-start.out" 2>&1; then
        break
    fi
    # Another process may have taken a port since it was picked: start over in a fresh directory.
    bash scripts/local-s3.sh stop "$work/s3" >/dev/null 2>&1 || true
    ((attempt < 3)) || { cat "$work/s3-start.out" "$work/s3/garage.log" >&2; die "garage did not start"; }
    rm -rf "$work/s3"
done
# shellcheck disable=SC1091
source "$work/s3/env"
log "garage on $AWS_ENDPOINT (pid $(cat "$work/s3/garage.pid"))"

# Defaults but for the multipart threshold, lowered to 8 MiB so that the largest fsx file is
# committed by multipart upload and rewritten with UploadPartCopy, not only by PutObject, and
# trace_level 1, which logs every failed store request.
cat > "$work/msfs.yaml" <<YAML
msfs_version: 1
cache_dir_path: $work/cache
multipart_upload_threshold_bytes: 8388608
backends:
  - dir_name: data
    backend_type: S3
    bucket_container_name: $BUCKET
    readonly: false
    trace_level: 1
    S3:
      endpoint: $AWS_ENDPOINT
      region: $AWS_REGION
      access_key_id: \${AWS_ACCESS_KEY_ID}
      secret_access_key: \${AWS_SECRET_ACCESS_KEY}
YAML
# run_pjdfstest NAME EXPECTED LOGNAME: pjdfstest in $mnt/data/NAME of the running msfs (logging
# to $work/LOGNAME.log), every result compared with file EXPECTED. Sets pjd_secs.
run_pjdfstest() {
    local name=$1 expected=$2 logname=$3 pjd_start=$SECONDS pjd_rc=0 pjd_ok
    echo
    echo "== pjdfstest $PJDFSTEST_VERSION on $mnt/data/$name"
    mkdir -p "$work/secondary"
    mkdir "$mnt/data/$name" || die "cannot create $mnt/data/$name on the fresh mount"
    # -e with every name but the crash list (pjdfstest matches -e against the full names, before
    # it strips their "pjdfstest::tests::" prefix); the secondary file system (for EXDEV) is local.
    mapfile -t run_names < <(sed 's/^/pjdfstest::tests::/' "$work/pjdfstest-run.txt")
    bounded "$PJDFSTEST_TIMEOUT" "$work/$name.out" pjdfstest -c "$CONF/pjdfstest.toml" \
        -p "$mnt/data/$name" -s "$work/secondary" -e "${run_names[@]}" || pjd_rc=$?
    pjd_secs=$((SECONDS - pjd_start))
    ((pjd_rc != 124)) || log "pjdfstest hung: see the tests that never reported below"
    compare_args=(--output "$work/$name.out" --names "$work/pjdfstest-names.txt"
        --expected "$expected" --crashes "$CRASHES")
    [[ -z "$update" ]] || compare_args+=(--update)
    if python3 "$CONF/pjdfstest_results.py" "${compare_args[@]}"; then pjd_ok=OK; else pjd_ok=FAIL; fi
    echo "pjdfstest took ${pjd_secs}s"
    check "$pjd_ok" "pjdfstest: every result as in $expected"
    if daemon_healthy; then check OK "msfs alive and answering after pjdfstest"; else
        check FAIL "msfs alive and answering after pjdfstest (pid $msfs_pid; log $work/$logname.log)"
        tail -20 "$work/$logname.log"
    fi
}

start_msfs msfs-1
run_pjdfstest pjdfstest "$EXPECTED" msfs-1
plain_pjd_secs=$pjd_secs

echo
echo "== fsx $FSX_VERSION: $FSX_OPS operations per seed"
fsx_start=$SECONDS
# Only on a mount that answers: once the process is gone, its mountpoint is a plain local
# directory, where fsx must not pass.
if daemon_healthy && is_mounted "$mnt" && mkdir -p "$mnt/data/fsx"; then
    # The three seeds run at once, on three files: each fsx mostly waits for FUSE round trips,
    # so together they take about as long as the slowest alone, and msfs serves concurrent
    # writers.
    fsx_pids=()
    for i in 0 1 2; do
        (
            t0=$SECONDS
            rc=0
            bounded "$FSX_TIMEOUT" "$work/fsx-$i.out" fsx -N "$FSX_OPS" -S "${seeds[$i]}" \
                -f "$CONF/${fsx_configs[$i]}" -P "$work/fsx-artifacts" "$mnt/data/fsx/fsx-$i" || rc=$?
            echo "$rc $((SECONDS - t0))" > "$work/fsx-$i.rc"
        ) &
        fsx_pids+=($!)
    done
    for pid in "${fsx_pids[@]}"; do wait "$pid" || true; done
else
    log "msfs is gone, or $mnt is not mounted or does not answer: fsx not run"
fi
for i in 0 1 2; do
    if [[ ! -f "$work/fsx-$i.rc" ]] || ! read -r rc secs < "$work/fsx-$i.rc"; then
        check FAIL "fsx seed ${seeds[$i]} (${fsx_configs[$i]}): not run"
    elif [[ "$rc" == 0 ]] && grep -q "All operations completed A-OK" "$work/fsx-$i.out"; then
        check OK "fsx seed ${seeds[$i]} (${fsx_configs[$i]}): $FSX_OPS ops in ${secs}s"
    else
        check FAIL "fsx seed ${seeds[$i]} (${fsx_configs[$i]}): exit $rc; see $work/fsx-$i.out and $work/fsx-artifacts"
        tail -30 "$work/fsx-$i.out"
    fi
done
fsx_secs=$((SECONDS - fsx_start))
if daemon_healthy; then check OK "msfs alive and answering after fsx"; else
    check FAIL "msfs alive and answering after fsx (log $work/msfs-1.log)"
    tail -20 "$work/msfs-1.log"
fi
if stop_msfs; then check OK "umount: msfs committed and exited cleanly"; else
    check FAIL "umount: msfs did not exit cleanly (log $work/msfs-1.log)"
    tail -20 "$work/msfs-1.log"
fi
# docs/semantics.md: the upload journal goes at a clean exit unless an upload is still open. Reported, not
# checked: the bucket listing below is what decides.
if grep -q "leaving a directory with work left" "$work/msfs-1.log"; then
    log "note: msfs kept its upload journal at a clean exit ($(find "$work/cache" -path '*msfs-uploads-*' -type f | wc -l) files); see $work/msfs-1.log"
fi
# Before the next process starts (it would abort what the journal of this one lists): a clean
# exit leaves no multipart upload open. "?uploads=": curl signs a bare "?uploads" wrongly.
if s3_get "$BUCKET?uploads=" "$work/uploads.xml" && ! grep -q "<Upload>" "$work/uploads.xml"; then
    check OK "no multipart upload left open in the bucket"
else
    check FAIL "multipart uploads left open (or the listing failed): $(head -c 600 "$work/uploads.xml" "$work/curl.err" 2>/dev/null)"
fi

echo
echo "== after a remount: fsx files against the same sequence replayed on a local file"
start_msfs msfs-2
for i in 0 1 2; do
    ref=$work/ref/fsx-$i
    if bounded 60 "$work/cmp-$i.out" cmp "$ref" "$mnt/data/fsx/fsx-$i"; then
        check OK "fsx-$i through the new mount ($(stat -c %s "$ref") bytes)"
    else
        check FAIL "fsx-$i through the new mount: $(head -c 300 "$work/cmp-$i.out")"
    fi
    if s3_get "$BUCKET/fsx/fsx-$i" "$work/object-$i" && cmp -s "$ref" "$work/object-$i"; then
        check OK "fsx-$i as the bucket's object fsx/fsx-$i"
    else
        check FAIL "fsx-$i as the bucket's object fsx/fsx-$i: $(head -c 300 "$work/curl.err")"
    fi
done

echo
echo "== truncate/12.t and ftruncate/12.t of the C pjdfstest (pjdfstest $PJDFSTEST_VERSION has neither)"
if bounded 60 "$work/truncate-12.out" python3 "$CONF/truncate_12.py" "$mnt/data/truncate-12"; then
    check OK "(f)truncate past the largest object: $(cat "$work/truncate-12.out")"
else
    check FAIL "(f)truncate past the largest object: $(tail -3 "$work/truncate-12.out")"
fi
if daemon_healthy; then check OK "msfs alive and answering after the truncates"; else
    check FAIL "msfs alive and answering after the truncates (log $work/msfs-2.log)"
    tail -20 "$work/msfs-2.log"
fi
if stop_msfs; then check OK "second mount unmounted cleanly"; else check FAIL "second mount unmounted cleanly"; fi

# The same suite where each object keeps its own mode, owner and times; `allow_other` lets the
# suite's other users (nobody, daemon) into the mount, as a shared volume would. Keys of up to
# 4,096 bytes, which this garage stores (sqlite): the PATH_MAX tests then test msfs's paths, not
# S3's key limit (the first pass keeps the default, 1,024, and its refusals).
sed -e 's/^msfs_version: 1$/msfs_version: 1\nallow_other: true/' \
    -e 's/^    readonly: false$/    readonly: false\n    posix_metadata: true\n    max_key_bytes: 4096/' \
    "$work/msfs.yaml" > "$work/msfs-posix.yaml"
grep -q '^    max_key_bytes: 4096$' "$work/msfs-posix.yaml" || die "could not derive msfs-posix.yaml"
cp "$work/msfs-posix.yaml" "$work/msfs.yaml"
start_msfs msfs-3
run_pjdfstest posix "$EXPECTED_POSIX" msfs-3
posix_pjd_secs=$pjd_secs
if stop_msfs; then check OK "third mount (posix_metadata) unmounted cleanly"; else
    check FAIL "third mount (posix_metadata) unmounted cleanly"
fi

echo
echo "pjdfstest: ${plain_pjd_secs}s, with posix_metadata ${posix_pjd_secs}s; fsx: $FSX_OPS ops x 3 seeds (${seeds[*]}) in ${fsx_secs}s; total $((SECONDS - started))s"
echo "$checks_passed passed, $checks_failed failed"
((checks_failed == 0))
