# syntax=docker/dockerfile:1
#
# The msfs image: the CSI node plugin by default, or a plain FUSE daemon.
#
#   docker build -t msfs:0.1.0 .
#
#   # As the Kubernetes CSI node plugin (what charts/msfs and deploy/ run; needs KUBE_NODE_NAME):
#   docker run ... msfs:0.1.0
#
#   # As a plain daemon mounting a config's backends (the mount lives inside the container
#   # unless the mountpoint is a shared bind mount):
#   docker run -d --device /dev/fuse --cap-add SYS_ADMIN --security-opt apparmor:unconfined \
#       -v /path/to/config:/config:ro -v /mnt/storage:/mnt/storage:shared \
#       msfs:0.1.0 mount /config/msfs.yaml /mnt/storage
#
# Two stages: a Rust builder with protoc (build.rs compiles proto/csi.proto) builds the release
# binary from the committed Cargo.lock (--locked), and a slim Debian runtime carries only the
# binary, fuse3 (fusermount3) and CA certificates. The builder's Rust version is the crate's
# rust-version and both stages use the same Debian release, so the binary finds the glibc it was
# linked against; tests/it/deploy_chart/mod.rs checks these facts.

ARG RUST_VERSION=1.95
ARG DEBIAN_RELEASE=trixie

FROM rust:${RUST_VERSION}-slim-${DEBIAN_RELEASE} AS builder
# protobuf-compiler: build.rs generates the CSI gRPC code with protoc. pkg-config and
# libfuse3-dev match scripts/install-test-deps.sh (fuser builds without them today, but a
# libfuse feature would need them).
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends protobuf-compiler pkg-config libfuse3-dev \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY Cargo.toml Cargo.lock build.rs ./
COPY proto ./proto
COPY src ./src
# fuser as patched in-tree (vendor/fuser/MSFS-CHANGES.md).
COPY vendor ./vendor
# msfs(1), one page per subcommand, and mount.msfs(8), rendered from the command line
# (tests/it/man_pages.rs keeps them current); laid out here for the runtime stage.
COPY docs/man ./docs/man
RUN install -D -m 0644 -t /out/man/man1 docs/man/*.1 \
    && install -D -m 0644 -t /out/man/man8 docs/man/*.8
# The cache mounts keep the registry and target directory between builds; the binary is
# copied out of the cached target directory in the same step.
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked --bin msfs \
    && install -D -m 0755 target/release/msfs /out/msfs

FROM debian:${DEBIAN_RELEASE}-slim AS runtime
# The crate's version (Cargo.toml; the chart's appVersion). A release build also passes
# --build-arg MSFS_REVISION=$(git rev-parse HEAD) --build-arg MSFS_SOURCE=<repository URL>.
ARG MSFS_VERSION=0.1.0
ARG MSFS_REVISION=unknown
ARG MSFS_SOURCE=unknown
LABEL org.opencontainers.image.title="msfs" \
      org.opencontainers.image.description="Mount S3 and S3-compatible buckets as a filesystem: a FUSE daemon and a Kubernetes CSI node plugin" \
      org.opencontainers.image.version="${MSFS_VERSION}" \
      org.opencontainers.image.revision="${MSFS_REVISION}" \
      org.opencontainers.image.source="${MSFS_SOURCE}" \
      org.opencontainers.image.licenses="Apache-2.0"
# fuse3: fusermount3 for mounts that are not made directly; ca-certificates: the system trust
# store HTTPS endpoints (S3, STS, OTLP) are verified against.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends fuse3 ca-certificates \
    && rm -rf /var/lib/apt/lists/*
COPY --from=builder /out/msfs /usr/bin/msfs
COPY --from=builder /out/man/ /usr/share/man/
# mount(8) runs /sbin/mount.<type>; msfs acts as the helper when invoked under that name.
RUN ln -s /usr/bin/msfs /usr/sbin/mount.msfs \
    && mkdir -p /var/log/msfs /var/lib/msfs-csi /csi
ENTRYPOINT ["/usr/bin/msfs"]
# The CSI node plugin with the socket kubelet's registrar expects; --node-id comes from
# $KUBE_NODE_NAME (the DaemonSet sets it from spec.nodeName).
CMD ["csi", "--endpoint", "unix:///csi/csi.sock"]
