//! Recovery: taking over the files dead processes left in their spill directories (see the
//! parent module's docs).

use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::SystemTime;

use crate::private_dir::{self, Abandoned};
use crate::write::Inner;
use crate::write::file::{AsRecovered, DirtyFile, Target};

use super::record::{Parsed, Replayed, Snapshot, replay};
use super::{
    DATA, KIND, LOG, Leftover, OpenLogs, SpillLog, at, open_data, remove_dir, remove_file,
};

/// One file a dead process left, found in its spill directory.
#[derive(Debug)]
struct Found {
    /// The file's own directory.
    dir: PathBuf,
    file: Replayed,
    /// When its log was last appended to: of two dead processes' files for one key, the later.
    last_change: SystemTime,
}

/// A file moved into this process's spill directory, ready to be rebuilt.
struct Adopted {
    file: Replayed,
    target: Target,
    data: File,
    log: SpillLog,
}

/// Moves the files of store `store_id` that dead processes left under `inner`'s spill parent
/// into this process's spill directory, for the keys `target_for_key` claims, and rebuilds
/// them as dirty files in `inner`'s map, counted against the dirty bound. Returns them (the
/// caller schedules their commits). See the module docs.
pub(in crate::write) async fn recover(
    inner: &Arc<Inner>,
    store_id: &str,
    target_for_key: impl Fn(&str) -> Option<Target>,
) -> Vec<Arc<DirtyFile>> {
    // One pass at a time: a pass holds the dead directories locked, and a concurrent one (two
    // backends built together) would skip them and leave its files behind.
    let _one_pass = inner.recovering.lock().await;
    let (parent, id) = (inner.spill_parent.clone(), store_id.to_string());
    let (dead, found) = blocking(move || scan(&parent, &id)).await;

    // Whose file each is (which backend, which delta log) is the caller's to say.
    let mut newest: HashMap<String, (Found, Target)> = HashMap::new();
    let mut superseded = Vec::new();
    for found in found {
        let Some(target) = target_for_key(&found.file.now.key) else {
            continue; // another backend's over the same bucket, built later
        };
        if target.key != found.file.now.key {
            tracing::warn!(key = %found.file.now.key, target = %target.key,
                "a recovered file was claimed under another key; left for a later pass");
            continue;
        }
        match newest.entry(found.file.now.key.clone()) {
            Entry::Vacant(e) => {
                e.insert((found, target));
            }
            Entry::Occupied(mut e) if found.last_change > e.get().0.last_change => {
                superseded.push(e.insert((found, target)).0);
            }
            Entry::Occupied(_) => superseded.push(found),
        }
    }
    let chosen: Vec<(Found, Target, u64)> = newest
        .into_values()
        .map(|(found, target)| (found, target, inner.new_spill_number()))
        .collect();
    let ours = inner.spill_dir.path().to_path_buf();
    let open_logs = Arc::clone(&inner.open_logs);
    let adopted = blocking(move || {
        for loser in superseded {
            tracing::error!(key = %loser.file.now.key, path = %loser.dir.display(),
                "two killed msfs processes left unsaved writes to one file; keeping the later \
                 one's and discarding these");
            remove_dir(&loser.dir);
        }
        let adopted = chosen
            .into_iter()
            .filter_map(|(found, target, number)| adopt(found, target, &ours, number, &open_logs))
            .collect::<Vec<_>>();
        // Only once empty: files of other stores wait for theirs.
        for dir in dead {
            if std::fs::remove_dir(dir.path()).is_ok() {
                tracing::info!(path = %dir.path().display(),
                    "removed the spill directory of a killed msfs process");
            }
        }
        adopted
    })
    .await;
    adopted
        .into_iter()
        .filter_map(|adopted| rebuild(inner, adopted))
        .collect()
}

/// Runs file I/O off the async runtime; a panic there counts as nothing done.
async fn blocking<T: Default + Send + 'static>(work: impl FnOnce() -> T + Send + 'static) -> T {
    tokio::task::spawn_blocking(work).await.unwrap_or_default()
}

/// The dead processes' spill directories under `parent` (held locked), and the files in them
/// recorded for store `store_id` that hold changes to commit. What can never be committed (a
/// log torn at its creation, a file left clean) is removed on the way.
fn scan(parent: &Path, store_id: &str) -> (Vec<Abandoned>, Vec<Found>) {
    let dead = private_dir::abandoned(parent, KIND);
    let mut found = Vec::new();
    for dir in &dead {
        let Ok(entries) = std::fs::read_dir(dir.path()) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if !entry.file_type().is_ok_and(|t| t.is_dir()) {
                // A deleted file's spill, killed between its creation and its unlink.
                let _ = remove_file(&path);
                continue;
            }
            let log_path = path.join(LOG);
            let (log, last_change) = match std::fs::read(&log_path) {
                Ok(log) => {
                    let modified = std::fs::metadata(&log_path).and_then(|m| m.modified());
                    (log, modified.unwrap_or(SystemTime::UNIX_EPOCH))
                }
                // Killed between creating `data` and its log, or while removing them.
                Err(e) if e.kind() == io::ErrorKind::NotFound => {
                    remove_dir(&path);
                    continue;
                }
                Err(e) => {
                    tracing::warn!(path = %log_path.display(), error = %e,
                        "cannot read the spill log a killed msfs process left; left in place");
                    continue;
                }
            };
            match replay(&log) {
                // Whatever its store: nothing in it is waiting for a commit.
                Parsed::File(file) if !file.changed => remove_dir(&path),
                Parsed::File(file) if file.now.store != store_id => {}
                Parsed::File(file) if !path.join(DATA).exists() => {
                    tracing::error!(key = %file.now.key, path = %path.display(),
                        "the spill data of unsaved writes a killed msfs process left is gone \
                         (removed by hand?); they are lost");
                    remove_dir(&path);
                }
                Parsed::File(file) => found.push(Found {
                    dir: path,
                    file: *file,
                    last_change,
                }),
                Parsed::Torn => {
                    tracing::debug!(path = %path.display(), "dropping a torn spill");
                    remove_dir(&path);
                }
                Parsed::Foreign => {}
            }
        }
    }
    (dead, found)
}

/// Moves `found` into this process's spill directory as `<ours>/<number>` (one rename: see the
/// module docs) and opens it, its log cut to its whole records so that new ones follow them.
fn adopt(
    found: Found,
    target: Target,
    ours: &Path,
    number: u64,
    open_logs: &Arc<OpenLogs>,
) -> Option<Adopted> {
    let dir = ours.join(number.to_string());
    if let Err(e) = std::fs::rename(&found.dir, &dir) {
        tracing::warn!(from = %found.dir.display(), to = %dir.display(), error = %e,
            "cannot take over the unsaved writes a killed msfs process left; left in place \
             for the next mount of this bucket");
        return None;
    }
    let opened = (|| {
        let data = open_data(&dir)?;
        let path = dir.join(LOG);
        File::options()
            .append(true)
            .open(&path)
            .and_then(|log| log.set_len(found.file.valid_len))
            .map_err(|e| at(&path, e))?;
        Ok::<_, io::Error>(data)
    })();
    match opened {
        Ok(data) => Some(Adopted {
            log: SpillLog::new(dir, found.file.valid_len, open_logs),
            file: found.file,
            target,
            data,
        }),
        Err(e) => {
            // In this process's (kept) directory now: the next process tries again.
            tracing::error!(key = %found.file.now.key, error = %e,
                "cannot open the unsaved writes a killed msfs process left");
            None
        }
    }
}

/// The dirty file `adopted` describes, put in the engine's map and counted against the dirty
/// bound (its bytes exist already, so past the bound too: writers then wait for commits). A key
/// already being written in this process keeps this process's file, the newer.
fn rebuild(inner: &Inner, adopted: Adopted) -> Option<Arc<DirtyFile>> {
    let Adopted {
        file: replayed,
        target,
        data,
        log,
    } = adopted;
    let id = (target.store.id().to_string(), target.key.clone());
    let mut files = inner.files();
    if files.contains_key(&id) {
        drop(files);
        tracing::error!(key = %target.key, path = %log.dir().display(),
            "a file a killed msfs process left unsaved is being written again by this one; \
             keeping this process's and discarding the killed one's");
        Leftover {
            spill: None,
            log: Some(log),
        }
        .dispose(&inner.spares);
        return None;
    }
    let file = Arc::new(DirtyFile::new(target, replayed.now.base));
    let budgeted = replayed.dirty.len();
    {
        let mut state = file.state();
        state.size = replayed.now.size;
        state.base_len = replayed.now.base_len;
        state.low_water = replayed.now.size;
        state.mtime = replayed.now.mtime;
        state.dirty = replayed.dirty;
        state.failure = replayed.failure;
        // The mode, owner and times the killed process would have committed with.
        state.metadata_version = u64::from(!replayed.metadata.is_empty());
        state.metadata = replayed.metadata;
        state.spill = Some(Arc::new(data));
        state.log = Some(log);
        // Dirty, whatever it was based on.
        state.generation = 1;
        state.committed = 0;
        // The killed process's last commit may have landed unrecorded (`landed`).
        state.commit_unrecorded = replayed.in_flight.is_some();
        state.check_base = state.base.is_some().then(|| AsRecovered {
            generation: state.generation,
            whole: Snapshot::of(state.size, state.base_len, &state.dirty),
            in_flight: replayed.in_flight,
        });
        state.budgeted = budgeted;
    }
    inner.budget.add(budgeted);
    inner.metrics.add_dirty_bytes(budgeted as i64);
    files.insert(id, Arc::clone(&file));
    tracing::info!(backend = %file.target.backend, key = %file.target.key,
        size = replayed.now.size, dirty_bytes = budgeted,
        "recovered unsaved writes a killed msfs process left; committing them");
    Some(file)
}
