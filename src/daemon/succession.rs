//! Succession: one process at a time serves a mount (or a node's CSI volumes), and the next
//! one waits for it to hand over.
//!
//! Two lock files per thing served, both `flock`ed, so that the kernel, not a PID, says who is
//! alive (the successor may be in another container's PID namespace):
//! - `<base>.serving.lock`, held by the serving process for its whole life;
//! - `<base>.successor.lock`, held by a process waiting to serve next. The server, at SIGTERM,
//!   finds it locked and hands over ([`successor_waiting`]) instead of unmounting.
//!
//! The server's lock goes only with its last descriptor, at exit: a server that hands over keeps
//! it ([`Serving::keep_until_exit`]), so that the successor starts reading the connection only
//! once no worker of the old process can read it any more. Before that, it lets its commits in
//! flight finish and leaves its spill files, upload journal and cache to the successor
//! (`Engines::stop_for_successor`, `Engines::leave_to_successor`): unlocked on purpose, they are
//! free when the successor starts, whatever order the kernel closes a dying process's files in
//! and whenever its parent reaps it.
//!
//! The files are never removed: removing a lock file someone waits on would let a third process
//! lock a new file of the same name. They are empty and live in the state directory.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

/// How long a server handing over waits for the requests it is answering; what is left then is
/// resent to the successor (and may run twice).
pub const HAND_OFF_WITHIN: std::time::Duration = std::time::Duration::from_secs(10);

/// How long a server that handed over lets the commits it has in flight finish before it exits.
/// The successor serves once it is gone, so the mounts wait this long at most; a commit cut
/// short is made again by the successor from the spill files.
pub const COMMITS_WITHIN: std::time::Duration = std::time::Duration::from_secs(5);

/// How long a server that handed over waits for its blocking work (a spill write, a cache
/// line's) to end before it leaves its directories to the successor.
pub const BLOCKING_WITHIN: std::time::Duration = std::time::Duration::from_secs(1);

/// The right to serve, held until dropped (or, after a hand-off, until the process exits).
#[derive(Debug)]
pub struct Serving {
    _lock: File,
}

/// How the right to serve was obtained.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Became {
    /// Nobody served.
    Free,
    /// Another process served; it handed over or died while this one waited.
    Successor,
}

impl Serving {
    /// Becomes the server of what `base` names (a path without the lock files' suffixes). If
    /// another process serves: with `wait`, announces this one as its successor and blocks until
    /// that process exits (after handing over at its SIGTERM, or dead); without, `None`. `why`
    /// says in the log what is being waited for.
    pub fn take(base: &Path, wait: bool, why: &str) -> io::Result<Option<(Serving, Became)>> {
        if let Some(parent) = base.parent() {
            std::fs::create_dir_all(parent)?;
        }
        let serving = open_lock(&with_suffix(base, "serving"))?;
        if try_lock(&serving)? {
            return Ok(Some((Serving { _lock: serving }, Became::Free)));
        }
        if !wait {
            return Ok(None);
        }
        // Queued behind any other successor: only one waits on the server at a time.
        let successor = open_lock(&with_suffix(base, "successor"))?;
        lock(&successor)?;
        tracing::info!(
            what = why,
            "another msfs serves this; waiting to succeed it (it hands over at its SIGTERM, or \
             this takes over when it dies)"
        );
        lock(&serving)?;
        // Dropping `successor` unlocks it: the next one to wait is this process's successor.
        Ok(Some((Serving { _lock: serving }, Became::Successor)))
    }

    /// Keeps the lock until the process exits (see the module's doc).
    pub fn keep_until_exit(self) {
        std::mem::forget(self);
    }
}

/// Whether a process waits to serve what `base` names after this one.
pub fn successor_waiting(base: &Path) -> bool {
    let Ok(file) = open_lock(&with_suffix(base, "successor")) else {
        return false;
    };
    // Locked here means nobody held it; the lock goes with `file`.
    !try_lock(&file).unwrap_or(true)
}

fn with_suffix(base: &Path, kind: &str) -> PathBuf {
    let mut name = base.as_os_str().to_owned();
    name.push(format!(".{kind}.lock"));
    PathBuf::from(name)
}

fn open_lock(path: &Path) -> io::Result<File> {
    // Only the owner's, like everything else in the state directory.
    std::os::unix::fs::OpenOptionsExt::mode(&mut OpenOptions::new(), 0o600)
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
        .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))
}

/// Takes `file`'s exclusive lock if free; `false` if another descriptor holds it.
fn try_lock(file: &File) -> io::Result<bool> {
    // SAFETY: flock on a descriptor `file` owns; no memory is involved.
    if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
        return Ok(true);
    }
    let error = io::Error::last_os_error();
    if error.raw_os_error() == Some(libc::EWOULDBLOCK) {
        Ok(false)
    } else {
        Err(error)
    }
}

/// Waits for `file`'s exclusive lock.
fn lock(file: &File) -> io::Result<()> {
    loop {
        // SAFETY: as in `try_lock`.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) } == 0 {
            return Ok(());
        }
        let error = io::Error::last_os_error();
        if error.raw_os_error() != Some(libc::EINTR) {
            return Err(error);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;
    use std::time::Duration;

    #[test]
    fn the_first_serves_a_second_waits_as_successor_and_serves_once_the_first_is_gone() {
        let dir = tempfile::tempdir().expect("temp dir");
        let base = dir.path().join("mounts/m");
        let (first, became) = Serving::take(&base, false, "m")
            .expect("take")
            .expect("free");
        assert_eq!(became, Became::Free);
        assert!(Serving::take(&base, false, "m").expect("try").is_none());
        assert!(!successor_waiting(&base));

        let (tx, rx) = mpsc::channel();
        let waiter = {
            let base = base.clone();
            std::thread::spawn(move || {
                let taken = Serving::take(&base, true, "m").expect("wait");
                tx.send(()).expect("send");
                taken
            })
        };
        // The successor announces itself before it blocks on the server's lock.
        while !successor_waiting(&base) {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(rx.try_recv().is_err(), "it waits while the first serves");
        drop(first);
        let (_second, became) = waiter.join().expect("join").expect("served");
        assert_eq!(became, Became::Successor);
        assert!(!successor_waiting(&base), "nobody waits any more");
    }
}
