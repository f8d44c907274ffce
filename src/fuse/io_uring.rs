//! `fuse_io_uring`: serving a connection over FUSE over io_uring (Linux 6.14 and later).
//!
//! The transport itself is in our copy of fuser (`vendor/fuser/src/uring.rs`); what is here is
//! the node's side of it. The kernel offers io_uring in INIT only while the `fuse` module's
//! `enable_uring` parameter is on, which it is not by default: a mount that asks for it turns
//! it on when it may (root), which changes nothing for other FUSE servers (each still has to
//! ask), and says so.

use std::path::Path;

/// The `fuse` module's switch for io_uring (`fs/fuse/dev_uring.c`).
const ENABLE_URING: &str = "/sys/module/fuse/parameters/enable_uring";

/// Makes the kernel offer io_uring to new connections, if it can and is not already.
pub fn allow() {
    match std::fs::read_to_string(ENABLE_URING) {
        Ok(on) if on.trim() == "Y" => {}
        Ok(_) => match std::fs::write(ENABLE_URING, "Y") {
            Ok(()) => tracing::info!("fuse_io_uring: turned on the kernel's {ENABLE_URING}"),
            Err(e) => tracing::warn!(error = %e,
                "fuse_io_uring: cannot turn on {ENABLE_URING}; serving over /dev/fuse \
                 (set it as root, or `options fuse enable_uring=1` in modprobe.d)"),
        },
        Err(e) => tracing::warn!(error = %e,
            "fuse_io_uring: this kernel has no FUSE over io_uring ({ENABLE_URING}: Linux 6.14 \
             or later with CONFIG_FUSE_IO_URING); serving over /dev/fuse"),
    }
}

/// Logs which transport a new mount got.
pub fn report(path: &Path, asked: bool, payload: u32) {
    if payload > 0 {
        tracing::info!(path = %path.display(), payload,
            "serving over io_uring (fuse_io_uring)");
    } else if asked {
        tracing::warn!(path = %path.display(),
            "fuse_io_uring: the kernel did not agree to io_uring for this mount; serving over \
             /dev/fuse");
    }
}
