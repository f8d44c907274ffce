//! Where a generated manifest is built and how it moves into place: a fresh build directory
//! beside the output (or under `temp_dir`), synced, completed by its index, then renamed over
//! the output — or, across filesystems or onto a mount point, moved entry by entry with the
//! index last — so a reader never takes a half-written manifest for a complete one.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::SystemTime;

use super::format::{INDEX_FILE, ManifestInfo};
use super::generate::{GenerateError, io_error};

/// Top-level names in the build directory for the generator's own scratch files (a bucket's
/// top-level directory never collides: its TSV name escapes a leading `_`).
pub(super) const PARTS_DIR: &str = "_msfs_gen_parts";
pub(super) const SPILL_DIR: &str = "_msfs_gen_queue";

/// Refuses an output that holds a manifest or anything else, unless `overwrite`.
pub(super) fn check_output(output: &Path, overwrite: bool) -> Result<(), GenerateError> {
    let meta = match fs::metadata(output) {
        Ok(meta) => meta,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(io_error(output, "inspect the output directory")(e)),
    };
    if !meta.is_dir() {
        return Err(GenerateError::OutputNotDirectory {
            path: output.to_path_buf(),
        });
    }
    if overwrite {
        return Ok(());
    }
    match ManifestInfo::read(output) {
        Ok(Some(info)) => {
            return Err(GenerateError::ManifestExists {
                path: output.to_path_buf(),
                created_at: info.created_at,
            });
        }
        Ok(None) => {}
        // Unreadable, but a manifest index all the same: not ours to replace silently.
        Err(_) if output.join(INDEX_FILE).exists() => {
            return Err(GenerateError::ManifestExists {
                path: output.to_path_buf(),
                created_at: "at an unknown time; its index is unreadable".into(),
            });
        }
        Err(e) => return Err(e.into()),
    }
    let mut entries =
        fs::read_dir(output).map_err(io_error(output, "read the output directory"))?;
    if entries.next().is_some() {
        return Err(GenerateError::OutputNotEmpty {
            path: output.to_path_buf(),
        });
    }
    Ok(())
}

/// The directory a manifest is built in; removed on drop unless it was moved into place.
pub(super) struct BuildDir {
    pub path: PathBuf,
    done: bool,
}

impl BuildDir {
    pub fn create(output: &Path, temp_dir: Option<&Path>) -> Result<BuildDir, GenerateError> {
        let parent = match temp_dir {
            Some(dir) => dir.to_path_buf(),
            None => parent_of(output),
        };
        fs::create_dir_all(&parent).map_err(io_error(&parent, "create the build directory"))?;
        let path = sibling_name(&parent, output, "msfs-gen");
        fs::create_dir(&path).map_err(io_error(&path, "create the build directory"))?;
        Ok(BuildDir { path, done: false })
    }

    /// Removes scratch files, syncs, writes the index and moves the manifest into `output`.
    pub fn complete(
        mut self,
        info: &ManifestInfo,
        output: &Path,
        overwrite: bool,
    ) -> Result<(), GenerateError> {
        for scratch in [PARTS_DIR, SPILL_DIR] {
            let path = self.path.join(scratch);
            match fs::remove_dir_all(&path) {
                Err(e) if e.kind() != io::ErrorKind::NotFound => {
                    return Err(io_error(&path, "remove scratch files")(e));
                }
                _ => {}
            }
        }
        sync_filesystem(&self.path)?;
        info.write(&self.path)?;
        // Someone may have written a manifest there while we listed.
        check_output(output, overwrite)?;
        install(&self.path, output)?;
        self.done = true;
        Ok(())
    }
}

impl Drop for BuildDir {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        // Only on failure or cancellation; best effort, off the runtime threads when there is
        // a runtime (a partial manifest can be large).
        let path = std::mem::take(&mut self.path);
        let remove = move || {
            let _ = fs::remove_dir_all(&path);
        };
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => drop(runtime.spawn_blocking(remove)),
            Err(_) => remove(),
        }
    }
}

fn parent_of(path: &Path) -> PathBuf {
    match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

/// A fresh hidden name in `dir` derived from `output`'s name.
fn sibling_name(dir: &Path, output: &Path, what: &str) -> PathBuf {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let name = output
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "manifest".into());
    let nanos = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or_default();
    dir.join(format!(
        ".{name}.{what}-{}-{nanos:x}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ))
}

/// Flushes everything written under `path` to stable storage (one `syncfs` instead of an
/// `fsync` per TSV), so the index written next never outlives the rows it describes.
fn sync_filesystem(path: &Path) -> Result<(), GenerateError> {
    use std::os::fd::AsRawFd;
    let dir = fs::File::open(path).map_err(io_error(path, "open to sync"))?;
    // SAFETY: `dir` is an open descriptor for the duration of the call.
    if unsafe { libc::syncfs(dir.as_raw_fd()) } != 0 {
        return Err(io_error(path, "sync")(io::Error::last_os_error()));
    }
    Ok(())
}

/// Moves the complete manifest at `build` into `output`, replacing what is there (the caller
/// checked it may). One rename when possible; otherwise (another filesystem, or `output` is a
/// mount point) entry by entry, with the index last.
fn install(build: &Path, output: &Path) -> Result<(), GenerateError> {
    let mut old = None;
    match fs::read_dir(output) {
        Ok(mut entries) => {
            if entries.next().is_some() {
                let aside = sibling_name(&parent_of(output), output, "msfs-old");
                if fs::rename(output, &aside).is_ok() {
                    old = Some(aside);
                } else {
                    clear_dir(output)?;
                }
            }
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            let parent = parent_of(output);
            fs::create_dir_all(&parent).map_err(io_error(&parent, "create the output's parent"))?;
        }
        Err(e) => return Err(io_error(output, "read the output directory")(e)),
    }
    // `output` is now missing or an empty directory, which a rename replaces.
    if fs::rename(build, output).is_err() {
        fs::create_dir_all(output).map_err(io_error(output, "create the output directory"))?;
        move_contents(build, output)?;
        fs::remove_dir_all(build).map_err(io_error(build, "remove the build directory"))?;
    }
    if let Ok(parent) = fs::File::open(parent_of(output)) {
        let _ = parent.sync_all();
    }
    if let Some(old) = old {
        fs::remove_dir_all(&old).map_err(io_error(&old, "remove the replaced manifest"))?;
    }
    Ok(())
}

/// Empties `dir`, its manifest index first (so it stops counting as a manifest at once).
fn clear_dir(dir: &Path) -> Result<(), GenerateError> {
    match fs::remove_file(dir.join(INDEX_FILE)) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => {
            return Err(io_error(&dir.join(INDEX_FILE), "remove the old index")(e));
        }
        _ => {}
    }
    for entry in fs::read_dir(dir).map_err(io_error(dir, "read the output directory"))? {
        let path = entry
            .map_err(io_error(dir, "read the output directory"))?
            .path();
        let removed = if path.is_dir() && !path.is_symlink() {
            fs::remove_dir_all(&path)
        } else {
            fs::remove_file(&path)
        };
        removed.map_err(io_error(&path, "remove the old contents"))?;
    }
    Ok(())
}

/// Moves every entry of `from` into `to` (renaming, or copying across filesystems), the
/// manifest index last.
fn move_contents(from: &Path, to: &Path) -> Result<(), GenerateError> {
    let mut names = Vec::new();
    for entry in fs::read_dir(from).map_err(io_error(from, "read the build directory"))? {
        let name = entry
            .map_err(io_error(from, "read the build directory"))?
            .file_name();
        if name != INDEX_FILE {
            names.push(name);
        }
    }
    for name in names {
        let (source, dest) = (from.join(&name), to.join(&name));
        if fs::rename(&source, &dest).is_err() {
            copy_tree(&source, &dest)?;
        }
    }
    // The index last, and whole: copied beside its place first when it cannot be renamed.
    let (source, dest) = (from.join(INDEX_FILE), to.join(INDEX_FILE));
    if fs::rename(&source, &dest).is_err() {
        let staged = to.join(format!(".{INDEX_FILE}.msfs-move"));
        fs::copy(&source, &staged).map_err(io_error(&staged, "copy the manifest index"))?;
        fs::rename(&staged, &dest).map_err(io_error(&dest, "move the manifest index"))?;
    }
    Ok(())
}

fn copy_tree(from: &Path, to: &Path) -> Result<(), GenerateError> {
    if from.is_dir() {
        fs::create_dir_all(to).map_err(io_error(to, "create a manifest directory"))?;
        for entry in fs::read_dir(from).map_err(io_error(from, "read a manifest directory"))? {
            let name = entry
                .map_err(io_error(from, "read a manifest directory"))?
                .file_name();
            copy_tree(&from.join(&name), &to.join(&name))?;
        }
        Ok(())
    } else {
        fs::copy(from, to).map_err(io_error(to, "copy a manifest file"))?;
        Ok(())
    }
}
