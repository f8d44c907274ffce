//! `PrivateDir`: a directory of this process's own (the line cache's files, the write engine's
//! spill files) under a configured parent, removed with everything in it on drop.

use std::hash::{BuildHasher, RandomState};
use std::io;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};

#[derive(Debug)]
pub struct PrivateDir {
    path: PathBuf,
}

impl PrivateDir {
    /// Creates `<kind>-<pid>-<random>` under `parent`, readable only by this user. The name never
    /// collides with another process's directory: on the off chance it exists, another random
    /// name is tried. Fails with the path it could not create.
    pub fn create(parent: &Path, kind: &str) -> Result<PrivateDir, (PathBuf, io::Error)> {
        let mut last = None;
        for attempt in 0..8u64 {
            let random = RandomState::new().hash_one((std::process::id(), attempt));
            let path = parent.join(format!("{kind}-{}-{random:016x}", std::process::id()));
            match std::fs::DirBuilder::new().mode(0o700).create(&path) {
                Ok(()) => return Ok(PrivateDir { path }),
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
