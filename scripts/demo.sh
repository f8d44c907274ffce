#!/usr/bin/env bash
# Brings up a demo mount of sample data on this machine (run as root):
#
#   scripts/demo.sh          a local garage S3 server on 127.0.0.1, seeded with sample data, mounted
#                            at /tmp/msfs-demo/mnt (the first run builds garage: 12-30 min on 2 cores)
#   scripts/demo.sh --file   no server: a local directory served through msfs's `file` backend
#   scripts/demo.sh stop     unmount and stop the server
#
# Afterwards: ls -lR /tmp/msfs-demo/mnt; the script checks every file's md5 against the sample.
set -euo pipefail
cd "$(dirname "$0")/.."
DEMO=${MSFS_DEMO_DIR:-/tmp/msfs-demo}
export PATH="${CARGO_HOME:-$HOME/.cargo}/bin:$PATH"

stop() {
    if grep -qs " $DEMO/mnt " /proc/self/mounts; then umount "$DEMO/mnt"; fi
    bash scripts/local-s3.sh stop "$DEMO/s3"
    echo "demo stopped"
}

make_sample() {
    local sample=$DEMO/sample
    rm -rf "$sample"
    mkdir -p "$sample/docs" "$sample/datasets/train" "$sample/datasets/val" "$sample/media"
    echo "Sample data served by msfs." > "$sample/README.txt"
    for i in $(seq -w 1 20); do
        seq "$i" 7 2000 | sed 's/^/row,/' > "$sample/datasets/train/part-$i.csv"
    done
    for i in 1 2 3; do seq 1 "$i"000 > "$sample/datasets/val/shard-$i.txt"; done
    head -c 33554432 /dev/urandom > "$sample/media/random-32MiB.bin"
    : > "$sample/docs/empty-file"
    echo "names may hold spaces and unicode" > "$sample/docs/notes – ünïcode ✓.txt"
    (cd "$sample" && find . -type f -printf '%P\0' | sort -z | xargs -0 md5sum) > "$DEMO/sample.md5"
}

case "${1:-}" in
    stop) stop; exit 0 ;;
    --file|"") mode=${1:-s3} ;;
    *) sed -n '2,9p' "$0" >&2; exit 2 ;;
esac

if [ "$mode" = --file ]; then
    MSFS_SKIP_GARAGE=1 bash scripts/install-test-deps.sh --demo
else
    bash scripts/install-test-deps.sh --demo
fi
cargo build --locked --bin msfs --example upload_dir
stop >/dev/null 2>&1 || true
mkdir -p "$DEMO/mnt"
make_sample

if [ "$mode" = --file ]; then
    cat > "$DEMO/msfs.yaml" <<YAML
msfs_version: 1
backends:
  - dir_name: demo
    backend_type: file
    bucket_container_name: $DEMO/sample
YAML
else
    bash scripts/local-s3.sh start "$DEMO/s3" demo-bucket
    # shellcheck disable=SC1091
    source "$DEMO/s3/env"
    ./target/debug/examples/upload_dir "$AWS_ENDPOINT" demo-bucket "$DEMO/sample" >/dev/null
    cat > "$DEMO/msfs.yaml" <<YAML
msfs_version: 1
backends:
  - dir_name: demo
    backend_type: S3
    bucket_container_name: demo-bucket
    S3:
      endpoint: $AWS_ENDPOINT
      region: us-east-1
      access_key_id: \${AWS_ACCESS_KEY_ID}
      secret_access_key: \${AWS_SECRET_ACCESS_KEY}
YAML
fi

# mount.msfs is the same binary under another name: it starts the daemon in the background.
ln -sf "$PWD/target/debug/msfs" "$PWD/target/debug/mount.msfs"
MSFS_LOG_DIR=$DEMO/logs ./target/debug/mount.msfs "$DEMO/msfs.yaml" "$DEMO/mnt"
ls -lR "$DEMO/mnt"
(cd "$DEMO/mnt/demo" && md5sum --quiet -c "$DEMO/sample.md5") && echo "all files match the sample data (md5)"
echo "mounted at $DEMO/mnt (logs in $DEMO/logs); stop with: scripts/demo.sh stop"
