#!/usr/bin/env bash
# pjdfstest on msfs (`posix_metadata: true`) and on s3fs, side by side on one local garage, one
# group at a time: a fresh mount for every group, and a peer that dies mid-group is remounted and
# resumes after the test it died in (that test is counted as a crash). s3fs 1.90 crashed midway
# through the whole suite in one go (issue #23), which is why its full table needs this.
#
#   bench/pjdfstest-peers.sh [OUT.md]     default: print the table only
#   MSFS_PJD_PEERS="s3fs" bench/pjdfstest-peers.sh   one peer (default: "msfs s3fs")
#   MSFS_BIN=target/debug/msfs bench/pjdfstest-peers.sh   another msfs binary
#
# Same pjdfstest (0.2.2), same toml (scripts/conformance/pjdfstest.toml), both mounts
# `allow_other` so that the suite's other users reach them, both with their defaults otherwise,
# but msfs's `max_key_bytes: 4096`: s3fs sends keys past S3's 1,024 bytes, which garage stores.
# Needs root, pjdfstest, garage and s3fs (scripts/install-test-deps.sh) and a built msfs (release
# if there is one). Stops only what it started; its temp dir is removed unless MSFS_PJD_KEEP=1.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="${CARGO_HOME:-$HOME/.cargo}/bin:$PATH"
export NO_COLOR=1 RUST_BACKTRACE=0

OUT=${1:-}
PEERS=${MSFS_PJD_PEERS:-msfs s3fs}
CONF=$PWD/scripts/conformance
BUCKET=pjdpeers
# A group takes 5 to 90 s on msfs here; a hang is cut off well after that.
GROUP_TIMEOUT=600
# A peer that keeps dying in one group is given up on after this many remounts.
MAX_RESTARTS=20
MSFS=${MSFS_BIN:-$PWD/target/release/msfs}
[[ -x "$MSFS" ]] || MSFS=$PWD/target/debug/msfs

log() { echo "pjdfstest-peers: $*" >&2; }
die() { log "$*"; exit 1; }

[[ "$(id -u)" == 0 ]] || die "run as root (FUSE, and pjdfstest switches users)"
command -v pjdfstest >/dev/null || die "pjdfstest not found: run scripts/install-test-deps.sh"
for peer in $PEERS; do
    case $peer in
        msfs) [[ -x "$MSFS" ]] || die "no msfs binary: cargo build --release --bin msfs" ;;
        s3fs) command -v s3fs >/dev/null || die "s3fs not found: run scripts/install-test-deps.sh" ;;
        *) die "unknown peer $peer (msfs, s3fs)" ;;
    esac
done

# Short path: pjdfstest's socket tests bind(2) below it (107 bytes at most).
WORK=$(mktemp -d /tmp/pjdp.XXXXXX)
chmod 755 "$WORK"
MNT=$WORK/m
mkdir -p "$MNT" "$WORK/secondary" "$WORK/ref" "$WORK/out" "$WORK/cache"
peer_pid=""

unmount() {
    if grep -qs " $MNT " /proc/self/mounts; then
        timeout 30 umount "$MNT" 2>/dev/null || umount -l "$MNT" 2>/dev/null || true
    fi
    if [[ -n "$peer_pid" ]]; then
        local deadline=$((SECONDS + 30))
        while kill -0 "$peer_pid" 2>/dev/null && ((SECONDS < deadline)); do sleep 0.1; done
        kill -KILL "$peer_pid" 2>/dev/null || true
        wait "$peer_pid" 2>/dev/null || true
        peer_pid=""
    fi
}
cleanup() {
    unmount
    bash scripts/local-s3.sh stop "$WORK/s3" >/dev/null 2>&1 || true
    if [[ -n "${MSFS_PJD_KEEP:-}" ]]; then log "kept $WORK"; else rm -rf "$WORK"; fi
}
trap cleanup EXIT

# pjdfstest cannot list its tests; a run on a local directory names them all, in run order.
sed 's/^naptime = .*/naptime = 0.01/' "$CONF/pjdfstest.toml" > "$WORK/local.toml"
timeout 300 pjdfstest -c "$WORK/local.toml" -p "$WORK/ref" > "$WORK/local.out" 2>&1 || true
grep -Eo '^[a-z0-9_]+(::[a-z0-9_]+)+' "$WORK/local.out" > "$WORK/names.txt" || true
[[ -s "$WORK/names.txt" ]] || die "pjdfstest listed no tests: $(tail -3 "$WORK/local.out")"
mapfile -t GROUPS_RUN < <(cut -d: -f1 "$WORK/names.txt" | awk '!seen[$0]++')

# garage with sqlite metadata: LMDB answers 503 to the PATH_MAX tests' long keys.
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
MSFS_S3_DB_ENGINE=sqlite MSFS_S3_PORT=$((20000 + port % 30000)) \
    bash scripts/local-s3.sh start "$WORK/s3" "$BUCKET" > "$WORK/s3-start.out" 2>&1 \
    || { cat "$WORK/s3-start.out" >&2; die "garage did not start"; }
# shellcheck disable=SC1091
source "$WORK/s3/env"
printf '%s:%s\n' "$AWS_ACCESS_KEY_ID" "$AWS_SECRET_ACCESS_KEY" > "$WORK/s3fs.passwd"
chmod 600 "$WORK/s3fs.passwd"
cat > "$WORK/msfs.yaml" <<YAML
msfs_version: 1
allow_other: true
cache_dir_path: $WORK/cache
backends:
  - dir_name: data
    backend_type: S3
    bucket_container_name: $BUCKET
    readonly: false
    posix_metadata: true
    max_key_bytes: 4096
    S3:
      endpoint: $AWS_ENDPOINT
      region: $AWS_REGION
      access_key_id: \${AWS_ACCESS_KEY_ID}
      secret_access_key: \${AWS_SECRET_ACCESS_KEY}
YAML

# mount_peer PEER LOG: mounts PEER at $MNT and sets ROOT to the bucket's root in it.
mount_peer() {
    local peer=$1 log=$2
    case $peer in
        msfs)
            "$MSFS" mount "$WORK/msfs.yaml" "$MNT" --state-dir "$WORK/state" >> "$log" 2>&1 &
            ROOT=$MNT/data ;;
        s3fs)
            s3fs "$BUCKET" "$MNT" -f -o "passwd_file=$WORK/s3fs.passwd,url=$AWS_ENDPOINT,use_path_request_style,endpoint=$AWS_REGION,allow_other" >> "$log" 2>&1 &
            ROOT=$MNT ;;
    esac
    peer_pid=$!
    local deadline=$((SECONDS + 30))
    until awk -v m="$MNT" '$5 == m && / - fuse/ { f = 1 } END { exit !f }' /proc/self/mountinfo; do
        kill -0 "$peer_pid" 2>/dev/null || die "$peer exited before mounting: $(tail -3 "$log")"
        ((SECONDS < deadline)) || die "$peer did not mount within 30 s"
        sleep 0.1
    done
}

for peer in $PEERS; do
    for group in "${GROUPS_RUN[@]}"; do
        grep "^$group::" "$WORK/names.txt" > "$WORK/todo" || true
        out=$WORK/out/$peer-$group.out
        : > "$out"
        restarts=0
        while [[ -s "$WORK/todo" ]]; do
            mount_peer "$peer" "$WORK/$peer.log"
            dir=$ROOT/$peer-$group-$restarts
            mkdir "$dir" || die "cannot create $dir on $peer"
            mapfile -t run < <(sed 's/^/pjdfstest::tests::/' "$WORK/todo")
            timeout "$GROUP_TIMEOUT" pjdfstest -c "$CONF/pjdfstest.toml" -p "$dir" \
                -s "$WORK/secondary" -e "${run[@]}" > "$WORK/part.out" 2>&1 || true
            cat "$WORK/part.out" >> "$out"
            unmount
            # What did not report: the first of it died with the peer (or hung), the rest go on.
            grep -Eo '^[a-z0-9_]+(::[a-z0-9_]+)+' "$WORK/part.out" | sort > "$WORK/done" || true
            grep -vxFf "$WORK/done" "$WORK/todo" > "$WORK/left" || true
            [[ -s "$WORK/left" ]] || break
            echo "$(head -1 "$WORK/left")  CRASHED" >> "$out"
            tail -n +2 "$WORK/left" > "$WORK/todo"
            restarts=$((restarts + 1))
            ((restarts <= MAX_RESTARTS)) || { log "$peer: gave up on $group after $MAX_RESTARTS remounts"; break; }
            log "$peer died or hung in $group ($(head -1 "$WORK/left")); remounting"
        done
        log "$peer $group: $(grep -c ' ok$' "$out" || true) ok"
    done
done

python3 bench/pjdfstest_table.py --names "$WORK/names.txt" --outputs "$WORK/out" --peers $PEERS \
    | tee "${OUT:-/dev/null}"
