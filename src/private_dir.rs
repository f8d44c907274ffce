//! `PrivateDir`: a directory of this process's own (the line cache's files, the write engine's
//! spill files, its upload journal) under a configured parent, removed on drop.
//!
//! A process killed with SIGKILL (an OOM kill, a node agent's restart) never drops its
//! directory, and a cache directory holds up to the whole cache size. So each process keeps its
//! directory `flock`ed, and creating a directory of the same kind first removes those that
//! nobody locks. The kernel releases a lock when its process dies; the lock protects a live
//! process of another PID namespace (a container sharing the parent). A directory is created
//! under a hidden name and gets its real name only once locked, so no live directory is ever
//! seen unlocked. The lock alone says who is alive, never the PID in the name: a process that
//! exited but is not reaped yet (a zombie) still has its PID, a process of another PID
//! namespace may have any, and in a container the plugin is PID 1 at every restart.
//!
//! A process handing its work to a successor (an upgrade's hand-off) unlocks its directories
//! on purpose before it exits ([`PrivateDir::leave`]), so that the successor, which starts when
//! it is gone, finds them as a dead process's at once.
//!
//! Some directories hold what the next process must act on (the upload journal): those are
//! created with [`PrivateDir::create_kept`], and the dead processes' ones are handed over with
//! [`abandoned`] instead of being removed unread.

use std::ffi::OsStr;
use std::fs::File;
use std::hash::{BuildHasher, RandomState};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};

#[derive(Debug)]
pub struct PrivateDir {
    path: PathBuf,
    /// What goes on drop: everything, or the directory only when it is empty.
    remove_contents: bool,
    /// The directory itself, held `flock`ed for its life (see the module docs); `None` once
    /// left to a successor.
    lock: Mutex<Option<File>>,
}

impl PrivateDir {
    /// Creates `<kind>-<pid>-<random>` under `parent`, readable only by this user, after
    /// removing the directories of the same kind that dead processes left there. The name never
    /// collides with another process's directory: on the off chance it exists, another random
    /// name is tried. Fails with the path it could not create.
    pub fn create(parent: &Path, kind: &str) -> Result<PrivateDir, (PathBuf, io::Error)> {
        for dir in abandoned(parent, kind) {
            dir.remove();
        }
        Self::make(parent, kind, true)
    }

    /// Like [`PrivateDir::create`], for a directory whose contents outlive a process that did
    /// not finish with them: the dead processes' directories are left for the caller to read
    /// ([`abandoned`]), and this one is removed on drop only when empty, so that whatever it
    /// still holds at exit is found by the next process as after a kill.
    pub fn create_kept(parent: &Path, kind: &str) -> Result<PrivateDir, (PathBuf, io::Error)> {
        Self::make(parent, kind, false)
    }

    fn make(
        parent: &Path,
        kind: &str,
        remove_contents: bool,
    ) -> Result<PrivateDir, (PathBuf, io::Error)> {
        let mut last = None;
        for attempt in 0..8u64 {
            let random = RandomState::new().hash_one((std::process::id(), attempt));
            let name = format!("{kind}-{}-{random:016x}", std::process::id());
            // Hidden (no `kind` prefix) until locked; see the module docs.
            let hidden = parent.join(format!(".{name}"));
            let path = parent.join(name);
            match std::fs::DirBuilder::new().mode(0o700).create(&hidden) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                    last = Some((hidden, e));
                    continue;
                }
                Err(source) => return Err((hidden, source)),
            }
            let locked = match lock(&hidden) {
                Ok(Some(lock)) if !path.exists() => std::fs::rename(&hidden, &path).map(|()| lock),
                Ok(Some(_)) => Err(io::Error::from(io::ErrorKind::AlreadyExists)),
                Ok(None) => Err(io::Error::other("lock taken by another process")),
                Err(source) => Err(source),
            };
            match locked {
                Ok(lock) => {
                    return Ok(PrivateDir {
                        path,
                        remove_contents,
                        lock: Mutex::new(Some(lock)),
                    });
                }
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                    let _ = std::fs::remove_dir(&hidden);
                    last = Some((path, e));
                }
                Err(source) => {
                    let _ = std::fs::remove_dir(&hidden);
                    return Err((path, source));
                }
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

    /// Unlocks the directory and leaves it, whatever it holds, to the next process of its kind,
    /// which takes it as a dead process's (see the module docs). Nothing may be written in it
    /// afterwards; dropping it then removes nothing.
    pub fn leave(&self) {
        drop(
            self.lock
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .take(),
        );
    }
}

impl Drop for PrivateDir {
    fn drop(&mut self) {
        let lock = self.lock.get_mut().unwrap_or_else(PoisonError::into_inner);
        if lock.is_none() {
            return; // left to a successor, who may be working in it already
        }
        let removed = if self.remove_contents {
            std::fs::remove_dir_all(&self.path)
        } else {
            std::fs::remove_dir(&self.path)
        };
        match removed {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) if !self.remove_contents && e.kind() == io::ErrorKind::DirectoryNotEmpty => {
                tracing::info!(path = %self.path.display(),
                    "leaving a directory with work left for the next msfs process");
            }
            Err(e) => tracing::warn!(
                path = %self.path.display(),
                error = %e,
                "cannot remove a private directory; delete it by hand"
            ),
        }
    }
}

/// A directory a dead process left, locked by this process while it is held, so that two
/// processes never work on one at once.
#[derive(Debug)]
pub struct Abandoned {
    path: PathBuf,
    _lock: File,
}

impl Abandoned {
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Removes the directory with everything in it.
    pub fn remove(self) {
        match std::fs::remove_dir_all(&self.path) {
            Ok(()) => tracing::info!(path = %self.path.display(),
                "removed a directory left by a killed msfs process"),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => tracing::warn!(path = %self.path.display(), error = %e,
                "cannot remove a directory left by a killed msfs process"),
        }
    }
}

/// The `kind` directories under `parent` whose process is gone or left them: nobody locks them
/// (see the module docs).
pub fn abandoned(parent: &Path, kind: &str) -> Vec<Abandoned> {
    let Ok(entries) = std::fs::read_dir(parent) else {
        return Vec::new();
    };
    let mut found = Vec::new();
    for entry in entries.flatten() {
        if owner_pid(&entry.file_name(), kind).is_none() {
            continue;
        }
        if !entry.file_type().is_ok_and(|t| t.is_dir()) {
            continue;
        }
        let path = entry.path();
        if let Ok(Some(lock)) = lock(&path) {
            found.push(Abandoned { path, _lock: lock });
        }
    }
    found
}

/// `flock`s directory `dir` exclusively without waiting: `Some(handle)` holding the lock,
/// `None` when another process (or another handle of this one) holds it.
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn directories_of_dead_processes_are_reclaimed_and_live_ones_kept() {
        let parent = tempfile::tempdir().expect("temp dir");
        let live = PrivateDir::create(parent.path(), "msfs-test").expect("create");
        std::fs::write(live.path().join("data"), b"in use").expect("write");
        // Directories whose process was killed: nobody locks them, whether or not their PID is
        // some live process's now (PID 1 here: a zombie, another PID namespace).
        let killed = parent.path().join("msfs-test-4194400-00000000deadbeef");
        let killed_pid_reused = parent.path().join("msfs-test-1-00000000deadbeef");
        for dir in [&killed, &killed_pid_reused] {
            std::fs::create_dir(dir).expect("mkdir");
            std::fs::write(dir.join("line-0"), vec![7u8; 4096]).expect("data");
        }
        // Lookalikes of another kind, or not of our naming, are left alone.
        let other_kind = parent.path().join("msfs-writes-4194400-00000000deadbeef");
        let not_ours = parent.path().join("msfs-test-notes");
        std::fs::create_dir(&other_kind).expect("mkdir");
        std::fs::create_dir(&not_ours).expect("mkdir");

        let second = PrivateDir::create(parent.path(), "msfs-test").expect("create again");
        assert!(!killed.exists(), "the killed process's directory stays");
        assert!(
            !killed_pid_reused.exists(),
            "a dead directory whose PID is in use stays"
        );
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
    fn a_kept_directory_outlives_its_process_only_when_it_holds_something() {
        let parent = tempfile::tempdir().expect("temp dir");
        let empty = PrivateDir::create_kept(parent.path(), "msfs-test").expect("create");
        let empty_path = empty.path().to_path_buf();
        drop(empty);
        assert!(!empty_path.exists(), "an empty kept directory stays");

        let kept = PrivateDir::create_kept(parent.path(), "msfs-test").expect("create");
        let live = PrivateDir::create_kept(parent.path(), "msfs-test").expect("create");
        std::fs::write(kept.path().join("entry"), b"for the next process").expect("write");
        let kept_path = kept.path().to_path_buf();
        assert!(
            abandoned(parent.path(), "msfs-test").is_empty(),
            "live directories are never handed over"
        );
        drop(kept);
        assert!(
            kept_path.join("entry").exists(),
            "its contents were removed"
        );
        // Nobody locks it: a dead (here: dropped) process's.
        let found = abandoned(parent.path(), "msfs-test");
        assert_eq!(
            found.iter().map(Abandoned::path).collect::<Vec<_>>(),
            [kept_path.as_path()]
        );
        assert!(
            abandoned(parent.path(), "msfs-test").is_empty(),
            "a directory being worked on is locked"
        );
        found.into_iter().for_each(Abandoned::remove);
        assert!(!kept_path.exists());
        assert!(live.path().exists());
    }

    #[test]
    fn a_directory_left_to_a_successor_is_found_as_a_dead_ones_and_never_removed_by_its_owner() {
        let parent = tempfile::tempdir().expect("temp dir");
        let dir = PrivateDir::create_kept(parent.path(), "msfs-test").expect("create");
        std::fs::write(dir.path().join("entry"), b"for the successor").expect("write");
        let path = dir.path().to_path_buf();
        assert!(abandoned(parent.path(), "msfs-test").is_empty());

        dir.leave();
        let found = abandoned(parent.path(), "msfs-test");
        assert_eq!(
            found.iter().map(Abandoned::path).collect::<Vec<_>>(),
            [path.as_path()],
            "its owner is alive, and it is left all the same"
        );
        // The successor has it (locked) while its owner goes away.
        drop(dir);
        assert!(
            path.join("entry").exists(),
            "its owner removed what it left"
        );
        found.into_iter().for_each(Abandoned::remove);
        assert!(!path.exists());

        // A private (not kept) one: its owner's drop leaves it too, contents and all.
        let dir = PrivateDir::create(parent.path(), "msfs-test").expect("create");
        std::fs::write(dir.path().join("line"), b"cached").expect("write");
        let path = dir.path().to_path_buf();
        dir.leave();
        drop(dir);
        assert!(path.join("line").exists());
        let _successor = PrivateDir::create(parent.path(), "msfs-test").expect("create");
        assert!(!path.exists(), "the successor did not reclaim it");
    }

    #[test]
    fn a_directory_is_named_only_once_locked() {
        let parent = tempfile::tempdir().expect("temp dir");
        let dir = PrivateDir::create(parent.path(), "msfs-test").expect("create");
        let names: Vec<_> = std::fs::read_dir(parent.path())
            .expect("list")
            .flatten()
            .map(|e| e.file_name())
            .collect();
        assert_eq!(names, [dir.path().file_name().expect("name")]);
        assert!(matches!(lock(dir.path()), Ok(None)), "created unlocked");
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
