# Sourced by the bench shell scripts, from the repository root: `. bench/scratch.sh NAME`.
# Sets MSFS (as given in the environment, to compare two builds; else the release build if there
# is one, else the debug one), WORK (a scratch directory
# /tmp/msfs-NAME.XXXXXX), M (the mountpoint path inside it) and DAEMON (empty: the script puts
# the PID of the msfs it starts there), and at exit unmounts M, waits for DAEMON and removes
# WORK, so that a script stops only what it started (`stop_mount` does the same for another
# mount). Sets RAW too (below).
MSFS=${MSFS:-$PWD/target/release/msfs}
[ -x "$MSFS" ] || MSFS=$PWD/target/debug/msfs
# The raw S3 client (RAW_READ, else the release example); scripts that use it call
# `need_raw_client` first, which stops them with the build command when it is missing.
RAW=${RAW_READ:-$PWD/target/release/examples/raw_read}
need_raw_client() {
    [ -x "$RAW" ] || { echo "no raw client at $RAW: cargo build --release --example raw_read" >&2; exit 2; }
}
WORK=$(mktemp -d "/tmp/msfs-$1.XXXXXX")
M=$WORK/mnt
DAEMON=""

# Unmounts $1 if it is mounted and waits for msfs process $2 (if given) to exit.
stop_mount() {
    if grep -qs " $1 " /proc/self/mounts; then umount "$1" || umount -l "$1"; fi
    if [ -n "${2:-}" ]; then wait "$2" 2>/dev/null || true; fi
}

cleanup() {
    stop_mount "$M" "$DAEMON"
    rm -rf "$WORK"
}
trap cleanup EXIT

# Starts garage in $WORK/s3 on MSFS_S3_PORT (39300 unless set) with bucket $1, sources its
# environment (AWS_ENDPOINT and the keys) and sets GARAGE to its PID. `stop_garage` stops it:
# call it from the script's own exit trap, before `cleanup`.
start_garage() {
    export MSFS_S3_PORT=${MSFS_S3_PORT:-39300}
    bash scripts/local-s3.sh start "$WORK/s3" "$1" >/dev/null
    # shellcheck disable=SC1091
    source "$WORK/s3/env"
    GARAGE=$(cat "$WORK/s3/garage.pid")
}
stop_garage() { bash scripts/local-s3.sh stop "$WORK/s3" >/dev/null 2>&1 || true; }

# Writes to $1 an msfs config with cache directory $2 and one writable backend `b` over bucket
# $3 of that garage; further arguments are more backend keys (`flush_on_close: true`).
write_msfs_config() {
    local file=$1 cache=$2 bucket=$3 key
    shift 3
    {
        printf 'msfs_version: 1\ncache_dir_path: %s\nbackends:\n  - dir_name: b\n' "$cache"
        printf '    backend_type: S3\n    bucket_container_name: %s\n' "$bucket"
        printf '    readonly: false\n'
        for key in "$@"; do printf '    %s\n' "$key"; done
        printf '    S3:\n      endpoint: %s\n      region: us-east-1\n' "$AWS_ENDPOINT"
        # Left for msfs to expand from its environment, not written into the file.
        # shellcheck disable=SC2016
        printf '      access_key_id: ${AWS_ACCESS_KEY_ID}\n'
        # shellcheck disable=SC2016
        printf '      secret_access_key: ${AWS_SECRET_ACCESS_KEY}\n'
    } > "$file"
}

# Mounts msfs build $1 with config $2 at $3 in the background (its output to $4), sets DAEMON
# to its PID and returns once the mount is live (or after 10 s; the next step then fails).
start_msfs() {
    "$1" mount "$2" "$3" > "$4" 2>&1 &
    DAEMON=$!
    for _ in $(seq 100); do grep -qs " $3 " /proc/self/mounts && break; sleep 0.1; done
}

# The arguments of the create benchmarks (create-floor.sh, store-clock.sh), `[ROUNDS] [FILES]
# [par|seq]`: sets ROUNDS (5), FILES (100), MODE (par) and THREADS (FILES at once, or 1).
create_args() {
    ROUNDS=${1:-5} FILES=${2:-100} MODE=${3:-par}
    case $MODE in
        par) THREADS=$FILES ;;
        seq) THREADS=1 ;;
        *) echo "mode must be par or seq, not $MODE" >&2; exit 2 ;;
    esac
}

# DIR: writes $WORK/paths.json, the bench's create tool (`msfsbench.writers create`) making
# FILES files in DIR on THREADS threads; `create_tool` runs it and prints what it printed.
create_paths() {
    python3 - "$1" "$FILES" "$THREADS" > "$WORK/paths.json" <<'PY'
import json, sys
dir, files, threads = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
print(json.dumps({"tool": "create", "threads": threads, "paths": [f"{dir}/f{i:05d}" for i in range(files)]}))
PY
}
create_tool() { (cd bench && python3 -m msfsbench.writers "$WORK/paths.json"); }

# CPU nanoseconds the threads of process $1 have run (schedstat: exact, unlike the tick counts
# of /proc/PID/stat; the threads these daemons start outlive a round).
cpu_ns() { cat /proc/"$1"/task/*/schedstat 2>/dev/null | awk '{n += $1} END {printf "%d", n}'; }
