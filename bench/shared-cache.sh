#!/usr/bin/env bash
# The shared cache tier (docs/shared-cache.md) on one machine: N msfs daemons as N nodes over
# one garage holding the origin bucket and the shared-cache bucket. For N = 1, 2 and 4, the
# nodes read one dataset one after another (each waiting for the previous node's fills to
# settle), with and without a shared cache; it prints the origin's GETs and bytes over all
# nodes (from each node's own counters: msfs_backend_operations_total counts origin requests
# only), and the seconds of node 1's cold read (from the origin), node 2's cold read (through
# the shared cache, or the origin without one) and node 2's second read (its own cache).
#
#   bench/shared-cache.sh [FILES] [MIB_PER_FILE]      defaults: 8, 32
#
# The origin here is on loopback, as near as the shared cache: what a far origin costs is not
# in these times, only the request and byte counts carry over. Needs root (FUSE) and garage
# (scripts/install-test-deps.sh). Runs in a temp dir, removed at the end; stops only the
# processes it started.
set -euo pipefail
cd "$(dirname "$0")/.."
FILES=${1:-8}
SIZE_MIB=${2:-32}
# shellcheck source=bench/scratch.sh
. bench/scratch.sh shared-cache
NODE_PIDS=()
stop_nodes() {
    local m p
    for m in "$WORK"/n*/mnt; do [ -d "$m" ] && stop_mount "$m"; done
    for p in "${NODE_PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
    NODE_PIDS=()
}
trap 'stop_nodes; stop_garage; cleanup' EXIT
export MSFS_S3_PORT=${MSFS_S3_PORT:-39300}
bash scripts/local-s3.sh start "$WORK/s3" origin shared > /dev/null
# shellcheck disable=SC1091
source "$WORK/s3/env"
GARAGE=$(cat "$WORK/s3/garage.pid")

# The dataset, written through a writable mount of the origin.
mkdir -p "$WORK/cache" "$M"
write_msfs_config "$WORK/seed.yaml" "$WORK/cache" origin "flush_on_close: true"
start_msfs "$MSFS" "$WORK/seed.yaml" "$M" "$WORK/seed.log"
for i in $(seq "$FILES"); do
    head -c $((SIZE_MIB << 20)) /dev/urandom > "$M/b/f$i"
done
stop_mount "$M" "$DAEMON"
DAEMON=""

# A metrics port per node, free when the run starts.
read -r -a PORTS <<< "$(python3 -c 'import socket
socks = [socket.socket() for _ in range(4)]
for s in socks: s.bind(("127.0.0.1", 0))
print(" ".join(str(s.getsockname()[1]) for s in socks))')"
port_of() { echo "${PORTS[$(($1 - 1))]}"; }

# Writes node $1's config; $2 is the shared cache's prefix, or empty for none.
node_config() {
    local dir=$WORK/n$1 port
    port=$(port_of "$1")
    mkdir -p "$dir/mnt" "$dir/cache"
    {
        printf 'msfs_version: 1\nendpoint: http://127.0.0.1:%s\n' "$port"
        printf 'cache_dir_path: %s\ncache_line_size: 8388608\ncache_lines: %s\n' "$dir/cache" \
            $(((FILES * SIZE_MIB / 8) + 16))
        if [ -n "$2" ]; then
            printf 'shared_cache:\n  bucket_container_name: shared\n  prefix: %s\n' "$2"
            printf '  read_timeout_ms: 2000\n  S3:\n    endpoint: %s\n    region: us-east-1\n' \
                "$AWS_ENDPOINT"
            # shellcheck disable=SC2016
            printf '    access_key_id: ${AWS_ACCESS_KEY_ID}\n    secret_access_key: ${AWS_SECRET_ACCESS_KEY}\n'
        fi
        printf 'backends:\n  - dir_name: b\n    backend_type: S3\n    bucket_container_name: origin\n'
        printf '    S3:\n      endpoint: %s\n      region: us-east-1\n' "$AWS_ENDPOINT"
        # shellcheck disable=SC2016
        printf '      access_key_id: ${AWS_ACCESS_KEY_ID}\n      secret_access_key: ${AWS_SECRET_ACCESS_KEY}\n'
    } > "$dir/config.yaml"
}

# The sum of node $1's samples of series $2 (a name, or a name with labels).
metric() {
    curl -s "http://127.0.0.1:$(port_of "$1")/metrics" \
        | awk -v s="$2" 'index($0, s) == 1 { v += $NF } END { printf "%d", v }'
}

# Seconds to read the whole dataset on node $1 with O_DIRECT (every byte through msfs).
read_all() {
    local start end i
    start=$(date +%s.%N)
    for i in $(seq "$FILES"); do
        dd if="$WORK/n$1/mnt/b/f$i" of=/dev/null bs=1M iflag=direct status=none
    done
    end=$(date +%s.%N)
    echo "$end - $start" | bc -l | xargs printf '%.2f'
}

# Waits until node $1's fills have not moved for a second (at most a minute).
fills_settle() {
    local last=-1 now quiet=0
    for _ in $(seq 240); do
        now=$(( $(metric "$1" msfs_shared_cache_fills_total) + $(metric "$1" msfs_shared_cache_fill_drops_total) ))
        if [ "$now" = "$last" ]; then quiet=$((quiet + 1)); [ "$quiet" -ge 4 ] && return; else quiet=0; fi
        last=$now
        sleep 0.25
    done
}

echo "dataset: $FILES files of $SIZE_MIB MiB; msfs: $MSFS"
printf '%-7s %-3s %12s %12s %10s %10s %10s %10s %10s\n' mode N origin_GETs origin_MiB \
    shared_hits fills "n1_cold_s" "n2_cold_s" "n2_hit_s"
run=0
for mode in origin shared; do
    for n in 1 2 4; do
        run=$((run + 1))
        prefix=""
        [ "$mode" = shared ] && prefix="run$run/"
        for k in $(seq "$n"); do
            node_config "$k" "$prefix"
            # A state directory each: each node is a machine of its own.
            "$MSFS" mount --state-dir "$WORK/n$k/state" "$WORK/n$k/config.yaml" "$WORK/n$k/mnt" \
                > "$WORK/n$k-$run.log" 2>&1 &
            NODE_PIDS+=("$!")
        done
        for k in $(seq "$n"); do
            for _ in $(seq 100); do grep -qs " $WORK/n$k/mnt " /proc/self/mounts && break; sleep 0.1; done
            grep -qs " $WORK/n$k/mnt " /proc/self/mounts || { tail -5 "$WORK/n$k-$run.log" >&2; exit 1; }
        done
        n1="" n2="-" hit="-"
        for k in $(seq "$n"); do
            took=$(read_all "$k")
            [ "$k" = 1 ] && n1=$took
            [ "$k" = 2 ] && n2=$took && hit=$(read_all 2)
            [ "$mode" = shared ] && fills_settle "$k"
        done
        gets=0 bytes=0 hits=0 fills=0
        for k in $(seq "$n"); do
            gets=$((gets + $(metric "$k" 'msfs_backend_operations_total{backend="b",operation="get",status="ok"}')))
            hits=$((hits + $(metric "$k" msfs_shared_cache_hits_total)))
            fills=$((fills + $(metric "$k" msfs_shared_cache_fills_total)))
            from_cache=$(metric "$k" msfs_cache_bytes_from_backend_total)
            shared=$(metric "$k" 'msfs_shared_cache_bytes_total{direction="read"}')
            bytes=$((bytes + from_cache - shared))
        done
        printf '%-7s %-3s %12s %12s %10s %10s %10s %10s %10s\n' "$mode" "$n" "$gets" \
            $((bytes >> 20)) "$hits" "$fills" "$n1" "$n2" "$hit"
        stop_nodes
    done
done
