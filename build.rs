//! Generates the CSI gRPC code (messages, servers, and the clients the tests use) from the
//! official `proto/csi.proto` with `protoc`.

use std::path::Path;
use std::process::Command;

const PROTO: &str = "proto/csi.proto";

fn main() {
    println!("cargo:rerun-if-changed={PROTO}");
    println!("cargo:rerun-if-env-changed=PROTOC");
    check_protoc();
    let result = tonic_prost_build::configure()
        .build_server(true)
        .build_client(true)
        // Clients are for tests, which bring their own (unix socket) channel.
        .build_transport(false)
        // Controller RPCs other than capabilities answer UNIMPLEMENTED.
        .generate_default_stubs(true)
        .compile_protos(&[PROTO], &["proto"]);
    if let Err(e) = result {
        panic!("cannot generate the CSI gRPC code from {PROTO}: {e}");
    }
}

/// Fails the build with instructions when `protoc` is missing, instead of prost-build's terse
/// "Could not find `protoc`".
fn check_protoc() {
    let protoc = std::env::var_os("PROTOC").unwrap_or_else(|| "protoc".into());
    let found = Command::new(&protoc)
        .arg("--version")
        .output()
        .is_ok_and(|out| out.status.success());
    if !found {
        panic!(
            "msfs needs the protobuf compiler to build its CSI gRPC code, and `{}` did not run. \
             Install it (Debian/Ubuntu: `apt-get install protobuf-compiler`; \
             scripts/install-test-deps.sh does this) or point PROTOC at a protoc binary.",
            Path::new(&protoc).display()
        );
    }
}
