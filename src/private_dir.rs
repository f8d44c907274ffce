//! `PrivateDir`: a directory of this process's own (the line cache's files, the write engine's
//! spill files) under a configured parent, removed with everything in it on drop.
//!
//! A process killed with SIGKILL (an OOM kill, a node agent's restart) never drops its
//! directory, and a cache directory holds up to the whole cache size. So each process keeps its
//! directory `flock`ed, and creating a directory of the same kind first removes those that
//! nobody locks and whose PID is gone. The kernel releases a lock when its process dies; the
//! lock protects a live process of another PID namespace (a container sharing the parent), the
//! PID a directory being created right now, before its lock.

use std::ffi::OsStr;
use std::fs::File;
use std::hash::{BuildHasher, RandomState};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};

#[derive(Debug)]
pub struct PrivateDir {
    path: PathBuf,
    /// The directory itself, held `flock`ed for its life; see the module docs.
    _lock: File,
}

impl PrivateDir {
    /// Creates `<kind>-<pid>-<random>` under `parent`, readable only by this user, after
    /// removing the directories of the same kind that dead processes left there. The name never
    /// collides with another process's directory: on the off chance it exists, another random
    /// name is tried. Fails with the path it could not create.
    pub fn create(parent: &Path, kind: &str) -> Result<PrivateDir, (PathBuf, io::Error)> {
        reclaim_abandoned(parent, kind);
        let mut last = None;
        for attempt in 0..8u64 {
            let random = RandomState::new().hash_one((std::process::id(), attempt));
            let path = parent.join(format!("{kind}-{}-{random:016x}", std::process::id()));
            match std::fs::DirBuilder::new().mode(0o700).create(&path) {
                Ok(()) => {
                    return match lock(&path) {
                        Ok(Some(lock)) => Ok(PrivateDir { path, _lock: lock }),
                        Ok(None) => Err((path, io::Error::other("lock taken by another process"))),
                        Err(source) => {
                            let _ = std::fs::remove_dir_all(&path);
                            Err((path, source))
                        }
                    };
                }
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => last = Some((path, e)),
                Err(source) => return Err((path, source)),
            }
        }
        Err(last.unwrap_or_else(|| {
            (
                parent.to_path_buf(),
                io::Error::other("no free directory name"),
            )
        }))
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for PrivateDir {
    fn drop(&mut self) {
        match std::fs::remove_dir_all(&self.path) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => tracing::warn!(
                path = %self.path.display(),
                error = %e,
                "cannot remove a private directory; delete it by hand"
            ),
        }
    }
}

/// `flock`s directory `dir` exclusively without waiting: `Some(handle)` holding the lock,
/// `None` when another process holds it.
fn lock(dir: &Path) -> io::Result<Option<File>> {
    let file = File::open(dir)?;
    // SAFETY: flock on a descriptor this function owns; no memory is involved.
    if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
        return Ok(Some(file));
    }
    let error = io::Error::last_os_error();
    if error.raw_os_error() == Some(libc::EWOULDBLOCK) {
        Ok(None)
    } else {
        Err(error)
    }
}

/// The PID in a `<kind>-<pid>-<16 hex>` directory name of this kind.
fn owner_pid(name: &OsStr, kind: &str) -> Option<u32> {
    let rest = name.to_str()?.strip_prefix(kind)?.strip_prefix('-')?;
    let (pid, random) = rest.split_once('-')?;
    if random.len() != 16 || !random.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    pid.parse().ok()
}

/// Whether the directory's process is gone: nobody locks it and its PID does not exist.
fn abandoned(dir: &Path, pid: u32) -> bool {
    if !matches!(lock(dir), Ok(Some(_))) {
        return false;
    }
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return false;
    };
    // SAFETY: signal 0 only checks that the process exists.
    let exists = unsafe { libc::kill(pid, 0) } == 0
        || io::Error::last_os_error().raw_os_error() != Some(libc::ESRCH);
    !exists
}

/// Removes the `kind` directories under `parent` that killed processes left behind.
fn reclaim_abandoned(parent: &Path, kind: &str) {
    let Ok(entries) = std::fs::read_dir(parent) else {
        return;
    };
    for entry in entries.flatten() {
        let Some(pid) = owner_pid(&entry.file_name(), kind) else {
            continue;
        };
        let path = entry.path();
        let is_dir = entry.file_type().is_ok_and(|t| t.is_dir());
        if !is_dir || !abandoned(&path, pid) {
            continue;
        }
        match std::fs::remove_dir_all(&path) {
            Ok(()) => tracing::info!(path = %path.display(),
                "removed a directory left by a killed msfs process"),
            Err(e) => tracing::warn!(path = %path.display(), error = %e,
                "cannot remove a directory left by a killed msfs process"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn directories_of_dead_processes_are_reclaimed_and_live_ones_kept() {
        let parent = tempfile::tempdir().expect("temp dir");
        let live = PrivateDir::create(parent.path(), "msfs-test").expect("create");
        std::fs::write(live.path().join("data"), b"in use").expect("write");
        // A directory whose process was killed: nobody locks it and no process has its PID
        // (above the kernel's largest, 2^22).
        let killed = parent.path().join("msfs-test-4194400-00000000deadbeef");
        std::fs::create_dir(&killed).expect("mkdir");
        std::fs::write(killed.join("line-0"), vec![7u8; 4096]).expect("data");
        // Lookalikes of another kind, or not of our naming, are left alone.
        let other_kind = parent.path().join("msfs-writes-4194400-00000000deadbeef");
        let not_ours = parent.path().join("msfs-test-notes");
        std::fs::create_dir(&other_kind).expect("mkdir");
        std::fs::create_dir(&not_ours).expect("mkdir");

        let second = PrivateDir::create(parent.path(), "msfs-test").expect("create again");
        assert!(!killed.exists(), "the killed process's directory stays");
        assert!(
            live.path().join("data").exists(),
            "a live directory was removed"
        );
        assert!(other_kind.exists() && not_ours.exists());
        let (first_path, second_path) = (live.path().to_path_buf(), second.path().to_path_buf());
        drop(live);
        drop(second);
        assert!(!first_path.exists() && !second_path.exists());
    }

    #[test]
    fn names_carry_the_owner_pid() {
        let name = OsStr::new("msfs-cache-1234-0123456789abcdef");
        assert_eq!(owner_pid(name, "msfs-cache"), Some(1234));
        assert_eq!(owner_pid(name, "msfs-writes"), None);
        assert_eq!(
            owner_pid(OsStr::new("msfs-cache-12-xyz"), "msfs-cache"),
            None
        );
    }
}
