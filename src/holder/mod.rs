//! The fd holder: a tiny long-lived process that keeps each mount's `/dev/fuse` fd open across
//! restarts of the process serving the mount.
//!
//! The kernel aborts a FUSE connection (every process using the mount then gets `ENOTCONN`) only
//! when the *last* fd to it is closed. A serving process that dies takes its fds with it; if the
//! holder has a duplicate, the connection survives, requests simply wait, and the next serving
//! process fetches the fd from the holder and resumes. Under Kubernetes the holder runs in its own
//! container, so that restarting (upgrading) the plugin container does not break the mounts.
//!
//! The serving process hands over each fd with `keep` (over a unix socket, `SCM_RIGHTS`) together
//! with an opaque metadata blob of its own (what it needs to serve the mount again). The blob may
//! hold credentials: the holder keeps it in memory only, never logs or writes it, and makes
//! itself non-dumpable so that no core file carries it. The blob must be UTF-8 text (the callers
//! send JSON), because it travels as a JSON string inside the holder's own JSON messages: no
//! base64, and a peer reading the wire with `socat` sees what it is.
//!
//! Only fds of *mounted* connections may be kept: the holder polls each held fd every second and
//! drops those whose connection is gone (a `/dev/fuse` fd reports `POLLERR` once its mount is
//! unmounted or aborted, and also before it was ever mounted).
//!
//! Signals: SIGTERM and SIGINT stop the holder only once it holds nothing, since exiting while
//! holding would abort every mount whose serving process is also gone. SIGKILL cannot be
//! deferred: each mount's connection then lives only as long as its serving process.
//!
//! The protocol ([`wire`]): length-prefixed JSON frames, one request, one answer (`list`: one
//! answer per entry, then `end`). Only the holder's own user (or root) may connect.

mod client;
mod server;
mod wire;

#[cfg(test)]
mod tests;

use std::path::PathBuf;

pub use client::{HeldFd, HolderClient, spawn_detached};
pub use server::{ServeOptions, serve};

#[derive(Debug, thiserror::Error)]
pub enum HolderError {
    #[error("fd holder socket {}: cannot connect: {source}", socket.display())]
    Connect {
        socket: PathBuf,
        source: std::io::Error,
    },
    #[error("fd holder socket {}: another holder already answers there", .0.display())]
    AlreadyRunning(PathBuf),
    #[error("fd holder socket {}: cannot {step}: {source}", socket.display())]
    Bind {
        socket: PathBuf,
        step: &'static str,
        source: std::io::Error,
    },
    #[error("fd holder connection: {0}")]
    Io(std::io::Error),
    #[error("the fd holder did not answer within {} s; is it stopped (SIGSTOP) or overloaded?",
        client::TIMEOUT.as_secs())]
    Timeout,
    #[error(
        "fd holder message of {len} bytes: more than the {} allowed",
        wire::MAX_FRAME
    )]
    FrameTooLarge { len: usize },
    #[error("fd holder protocol: {0}")]
    Protocol(String),
    #[error("the fd holder refused: {0}")]
    Refused(String),
    #[error("fd holder metadata of {name:?} is not UTF-8 text")]
    MetaNotUtf8 { name: String },
    #[error("cannot start the fd holder {}: {source}", exe.display())]
    Spawn {
        exe: PathBuf,
        source: std::io::Error,
    },
    #[error("the fd holder for {} exited ({status}) before answering; run `msfs fd-holder --socket {}` to see why",
        socket.display(), socket.display())]
    SpawnExited {
        socket: PathBuf,
        status: std::process::ExitStatus,
    },
    #[error("the fd holder for {} did not answer within {} s of starting",
        socket.display(), client::SPAWN_WAIT.as_secs())]
    SpawnTimeout { socket: PathBuf },
}
