#!/usr/bin/env bash
# A single-node garage S3 server on 127.0.0.1 for demos and benchmarks (tests start their own).
#
#   scripts/local-s3.sh start DIR [BUCKET...]   start garage with its state in DIR, create buckets,
#                                               and write DIR/env (source it for endpoint and keys)
#   scripts/local-s3.sh stop DIR                stop the garage started in DIR
#
# Ports: S3 API on $MSFS_S3_PORT (default 39000), RPC on +1, admin on +2.
# Metadata engine: $MSFS_S3_DB_ENGINE, lmdb (default) or sqlite. LMDB holds keys of at most 511
# bytes, so garage answers 503 to an object key of more than about 470 bytes; with sqlite, keys
# of any length S3 allows (1,024 bytes) work.
set -euo pipefail

GARAGE=${GARAGE_BIN:-$(command -v garage || echo "${CARGO_HOME:-$HOME/.cargo}/bin/garage")}
# Fixed demo credentials in the shapes garage generates (GK + 24 hex, 64 hex). Local use only.
ACCESS_KEY=GK6d7366732d64656d6f2d6b31
SECRET_KEY=6d7366732d64656d6f2d7365637265742d6e6f742d666f722d70726f64756374

usage() { sed -n '2,11p' "$0" >&2; exit 2; }

start() {
    local dir=$1; shift
    local port=${MSFS_S3_PORT:-39000}
    mkdir -p "$dir/meta" "$dir/data"
    dir=$(cd "$dir" && pwd)
    if [ -f "$dir/garage.pid" ] && kill -0 "$(cat "$dir/garage.pid")" 2>/dev/null; then
        echo "garage already running (pid $(cat "$dir/garage.pid"))"
        return 0
    fi
    local fresh=""
    [ -f "$dir/garage.toml" ] || fresh=1
    [ -z "$fresh" ] || cat > "$dir/garage.toml" <<TOML
metadata_dir = "$dir/meta"
data_dir = "$dir/data"
db_engine = "${MSFS_S3_DB_ENGINE:-lmdb}"
replication_factor = 1
rpc_bind_addr = "127.0.0.1:$((port + 1))"
rpc_public_addr = "127.0.0.1:$((port + 1))"
rpc_secret = "$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')"

[s3_api]
s3_region = "us-east-1"
api_bind_addr = "127.0.0.1:$port"
root_domain = ".s3.localhost"

[admin]
api_bind_addr = "127.0.0.1:$((port + 2))"
admin_token = "$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')"
TOML
    RUST_LOG=warn setsid "$GARAGE" -c "$dir/garage.toml" server > "$dir/garage.log" 2>&1 &
    echo $! > "$dir/garage.pid"
    local cli=("$GARAGE" -c "$dir/garage.toml")
    # The server answers its CLI once its RPC port is up.
    local up=""
    for _ in $(seq 150); do
        if "${cli[@]}" status >/dev/null 2>&1; then up=1; break; fi
        sleep 0.2
    done
    [ -n "$up" ] || { echo "garage did not start; see $dir/garage.log" >&2; exit 1; }
    if [ -n "$fresh" ]; then
        local node; node=$("${cli[@]}" node id -q | cut -d@ -f1)
        "${cli[@]}" layout assign -z dc1 -c 10G "$node" >/dev/null
        "${cli[@]}" layout apply --version 1 >/dev/null
        "${cli[@]}" key import --yes -n msfs "$ACCESS_KEY" "$SECRET_KEY" >/dev/null
    fi
    for bucket in "$@"; do
        # A restarted server keeps its buckets.
        "${cli[@]}" bucket info "$bucket" >/dev/null 2>&1 || "${cli[@]}" bucket create "$bucket" >/dev/null
        "${cli[@]}" bucket allow --read --write --owner "$bucket" --key msfs >/dev/null
    done
    cat > "$dir/env" <<ENV
export AWS_ENDPOINT=http://127.0.0.1:$port
export AWS_REGION=us-east-1
export AWS_ACCESS_KEY_ID=$ACCESS_KEY
export AWS_SECRET_ACCESS_KEY=$SECRET_KEY
ENV
    echo "garage S3 API on http://127.0.0.1:$port (pid $(cat "$dir/garage.pid")); credentials in $dir/env"
}

stop() {
    local dir=$1
    [ -f "$dir/garage.pid" ] || return 0
    local pid; pid=$(cat "$dir/garage.pid")
    if kill "$pid" 2>/dev/null; then
        for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    fi
    rm -f "$dir/garage.pid"
}

case "${1:-}" in
    start) [ $# -ge 2 ] || usage; shift; start "$@" ;;
    stop) [ $# -eq 2 ] || usage; stop "$2" ;;
    *) usage ;;
esac
