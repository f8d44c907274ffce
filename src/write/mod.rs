//! The write engine: files being written through any mount of the process, their local spill
//! data, and their commits to the store.
//!
//! A file opened for writing becomes a [`DirtyFile`], shared by every handle on that object in
//! every mount. Written bytes go to a spill file and are recorded as dirty extents over the
//! object the file started from. The spill file is named, in a directory of the process's own
//! under `cache_dir_path` (the CSI plugin: `--state-dir`), with a small log of the changes
//! beside it (`durable`): a process killed before its commits landed leaves them, and the next
//! process that builds the same store commits them, so no write that returned is lost to a
//! SIGKILL (to a power loss, it may be: nothing is fsynced). A commit turns the file into
//! a new object version: one PutObject below `multipart_upload_threshold_bytes`, otherwise a
//! multipart upload that copies unchanged ranges server-side and reuses parts streamed while the
//! application was still writing (see [`plan`]). Commits run on at most `write_commit_workers`
//! at once; a failed background commit keeps the data dirty, is retried with backoff, and is
//! reported once to the next fsync. Dirty bytes are bounded: a writer past the bound waits for
//! commits to drain (and starts its own file's) rather than failing. Every multipart upload in
//! flight is recorded in the upload journal (`journal`), so that the next process aborts those
//! a killed one left.
//!
//! Where things live: the engine's handle, its table of files and their lifecycle (open, join,
//! release, forget, recovery) here; writes and truncates into the spill files, within the
//! dirty bound, in `spill`; reads of a file being written in `read`; when commits run (now, in
//! the background with retries, once idle, at a drain) in `schedule`, and what one commit does
//! in `commit`; the dirty file (`file`, `extents`), the dirty bound (`budget`), part planning
//! (`plan`), renames (`copy`) and what outlives the process (`durable`, `journal`, `cleanup`)
//! in their own modules.

mod budget;
mod cleanup;
mod commit;
mod copy;
mod durable;
mod error;
mod extents;
mod file;
mod journal;
pub mod plan;
mod read;
mod recent_commits;
mod schedule;
mod spill;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use tokio::sync::Semaphore;

pub use budget::Budget;
pub use cleanup::abort_stale_uploads;
pub use error::WriteError;
pub use extents::Extents;
pub use file::{CommitObserver, DirtyFile, DirtyMeta, Target};
pub use recent_commits::RecentCommit;

use crate::cache::{LineCache, ObjectReader, ObjectVersion};
use crate::private_dir::{self, PrivateDir};
use crate::store::{ObjectStore, PutResult, StoreError};
use crate::telemetry::Metrics;
use journal::{Recovered, UploadJournal};

/// Parts of streamed uploads in flight across the process, per commit worker.
const STREAMED_PARTS_PER_WORKER: usize = 2;
/// How often a read of a file being written plans again after a commit replaced its base
/// object under it (each time after that commit has finished).
const READ_REPLANS: u32 = 10;
/// How long a file some descriptor was closed on, but another keeps open, stays unchanged
/// before its commit starts (`commit_when_idle`).
const IDLE_COMMIT_DELAY: Duration = Duration::from_secs(1);
/// Background commit retries back off from the first to the last delay, doubling, each delay
/// drawn at random between half its nominal value and it (`store::backoff`).
const RETRY_FIRST: Duration = Duration::from_secs(1);
const RETRY_LAST: Duration = Duration::from_secs(60);
/// The kind of the spill directories of msfs versions before `durable`.
const LEGACY_SPILL_KIND: &str = "msfs-writes";

/// The commit slots: `write_commit_workers`, at least one.
fn commit_slots(config: &WriteConfig) -> usize {
    config.commit_workers.max(1)
}

/// The slots of parts streamed ahead of commits, process-wide.
fn streamed_part_slots(config: &WriteConfig) -> usize {
    commit_slots(config) * STREAMED_PARTS_PER_WORKER
}

/// What the write engine is sized by (from the top-level configuration).
#[derive(Debug, Clone)]
pub struct WriteConfig {
    /// Files at least this big are committed by multipart upload; smaller ones by one PUT.
    pub multipart_threshold: u64,
    pub commit_workers: usize,
    /// Dirty bytes across all files beyond which writers wait.
    pub dirty_limit: u64,
    /// Bytes commits in flight may hold in memory (part chunks, whole small bodies), process-wide.
    pub buffer_limit: u64,
    /// Admit committed bytes into the read cache.
    pub promote: bool,
    /// Where the upload journal and the spill directory are kept unless `journal_parent` says
    /// otherwise (the system temp dir when `None`).
    pub spill_parent: Option<PathBuf>,
    /// Where the upload journal and the spill directory are kept (`spill_parent` when `None`).
    /// Processes that should recover each other's uploads and unsaved writes must share it.
    pub journal_parent: Option<PathBuf>,
}

/// The process's write engine; clone it freely (it is a handle).
#[derive(Clone)]
pub struct WriteEngine {
    inner: Arc<Inner>,
}

struct Inner {
    config: WriteConfig,
    /// Where this process's and dead processes' spill directories are (`journal_parent`).
    spill_parent: PathBuf,
    /// Spill directories made ahead of need. Declared before `spill_dir`, so dropped first:
    /// its spares are gone when the directory is removed (if empty) at exit.
    spares: durable::Spares,
    /// How many spill logs keep their descriptor between records (`durable::OpenLogs`).
    open_logs: Arc<durable::OpenLogs>,
    /// This process's spill directory (`durable`), kept at exit while it holds dirty files.
    spill_dir: PrivateDir,
    /// One spill recovery pass at a time (see `durable::recover`).
    recovering: tokio::sync::Mutex<()>,
    journal: Arc<UploadJournal>,
    /// (store id, key) → the file being written there.
    files: Mutex<HashMap<(String, String), Arc<DirtyFile>>>,
    /// What commits left at names whose files the engine has let go of since.
    recent_commits: Mutex<recent_commits::RecentCommits>,
    /// Names the spill files: unique in the process, never reused (a directory being removed
    /// in the background is never confused with a new one). Shared with `spares`.
    next_spill: Arc<AtomicU64>,
    commit_slots: Semaphore,
    streamed_parts: Arc<Semaphore>,
    budget: Budget,
    /// What commits in flight hold in memory (`write_buffer_limit_bytes`).
    buffers: Arc<Budget>,
    reader: Arc<dyn ObjectReader>,
    cache: Option<Arc<LineCache>>,
    metrics: Arc<Metrics>,
}

impl std::fmt::Debug for WriteEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WriteEngine")
            .field("spill_dir", &self.inner.spill_dir.path())
            .field("config", &self.inner.config)
            .finish_non_exhaustive()
    }
}

impl WriteEngine {
    pub fn new(
        config: WriteConfig,
        reader: Arc<dyn ObjectReader>,
        cache: Option<Arc<LineCache>>,
        metrics: Arc<Metrics>,
    ) -> Result<WriteEngine, WriteError> {
        let parent = config
            .spill_parent
            .clone()
            .unwrap_or_else(std::env::temp_dir);
        // Left by msfs versions whose spill files were unlinked at once: empty, and of no use.
        for dir in private_dir::abandoned(&parent, LEGACY_SPILL_KIND) {
            dir.remove();
        }
        let journal_parent = config.journal_parent.clone().unwrap_or(parent);
        // Kept: a dead process's files are recovered (`recover_spills`), never removed unread.
        let spill_dir = PrivateDir::create_kept(&journal_parent, durable::KIND)
            .map_err(|(path, source)| WriteError::SpillDir { path, source })?;
        let journal = UploadJournal::open(&journal_parent)
            .map_err(|(path, source)| WriteError::JournalDir { path, source })?;
        let next_spill = Arc::new(AtomicU64::new(1));
        Ok(WriteEngine {
            inner: Arc::new(Inner {
                spill_parent: journal_parent,
                spares: durable::Spares::start(spill_dir.path(), Arc::clone(&next_spill)),
                open_logs: durable::OpenLogs::for_this_process(),
                spill_dir,
                recovering: tokio::sync::Mutex::new(()),
                journal: Arc::new(journal),
                files: Mutex::new(HashMap::new()),
                recent_commits: Mutex::default(),
                next_spill,
                commit_slots: Semaphore::new(commit_slots(&config)),
                streamed_parts: Arc::new(Semaphore::new(streamed_part_slots(&config))),
                budget: Budget::new(config.dirty_limit),
                buffers: Arc::new(Budget::new(config.buffer_limit)),
                reader,
                cache,
                metrics,
                config,
            }),
        })
    }

    /// The file being written at `key` of store `store_id`, if any: its content, not the
    /// store's, is what the mount shows.
    pub fn find(&self, store_id: &str, key: &str) -> Option<Arc<DirtyFile>> {
        self.inner
            .files()
            .get(&(store_id.to_string(), key.to_string()))
            .cloned()
    }

    /// What this process's last commit at `key` left in the store, if the engine has let go of
    /// that file since and nothing has deleted, renamed away or replaced it here
    /// (`recent_commits`).
    pub fn recent_commit(&self, store_id: &str, key: &str) -> Option<RecentCommit> {
        self.inner
            .recent_commits()
            .get(&(store_id.to_string(), key.to_string()))
    }

    /// Records `commit` as what this process left at its key of store `store_id` by other means
    /// than a file's commit (a rename's server-side copy), unless a file is being written
    /// there, whose own let-go records what it leaves.
    pub fn remember(&self, store_id: &str, commit: RecentCommit) {
        let name = (store_id.to_string(), commit.version.key.clone());
        // Under the map's lock, as `let_go_if_done` records: a file opened there meanwhile wins.
        let files = self.inner.files();
        if !files.contains_key(&name) {
            self.inner.recent_commits().record(name, commit);
        }
    }

    /// Files being written directly under `dir_prefix` (a key prefix ending in "/", or ""),
    /// by name: what a listing must show even before their objects exist.
    pub fn files_in(&self, store_id: &str, dir_prefix: &str) -> Vec<(String, DirtyMeta)> {
        let files: Vec<Arc<DirtyFile>> = self
            .inner
            .files()
            .iter()
            .filter(|((id, key), _)| {
                id == store_id
                    && key
                        .strip_prefix(dir_prefix)
                        .is_some_and(|name| !name.is_empty() && !name.contains('/'))
            })
            .map(|(_, file)| Arc::clone(file))
            .collect();
        files
            .into_iter()
            .map(|file| {
                let name = file.target.key[dir_prefix.len()..].to_string();
                (name, file.meta())
            })
            .collect()
    }

    /// Opens a handle on the file being written at `key`, if there is one.
    pub fn join(&self, store_id: &str, key: &str) -> Option<Arc<DirtyFile>> {
        let files = self.inner.files();
        let file = files.get(&(store_id.to_string(), key.to_string()))?;
        file.state().handles += 1;
        Some(Arc::clone(file))
    }

    /// Opens `target` for writing as a handle: joins the file already being written there, or
    /// starts one over `base` (the object as it is now; `None` if there is none).
    pub fn open(&self, target: Target, base: Option<ObjectVersion>) -> Arc<DirtyFile> {
        let id = (target.store.id().to_string(), target.key.clone());
        let mut files = self.inner.files();
        let file = files
            .entry(id)
            .or_insert_with(|| Arc::new(DirtyFile::new(target, base)))
            .clone();
        file.state().handles += 1;
        file
    }

    /// Creates `target` as a new, empty file (replacing whatever was being written there).
    pub async fn create(&self, target: Target) -> Arc<DirtyFile> {
        self.forget(target.store.id(), &target.key).await;
        self.open(target, None)
    }

    /// `create` without waiting, when nothing is being written at `target` (a new name, the
    /// usual case): there is no file to forget and no commit of it to wait out. `None` when
    /// there is; `create` replaces it.
    pub fn create_now(&self, target: Target) -> Option<Arc<DirtyFile>> {
        let id = (target.store.id().to_string(), target.key.clone());
        let mut files = self.inner.files();
        let std::collections::hash_map::Entry::Vacant(vacant) = files.entry(id) else {
            return None;
        };
        let file = vacant
            .insert(Arc::new(DirtyFile::new(target, None)))
            .clone();
        file.state().handles += 1;
        Some(file)
    }

    /// A handle on `file` closed. The engine lets go of the file once it is clean and unused.
    pub fn release(&self, file: &Arc<DirtyFile>) {
        {
            let mut state = file.state();
            state.handles = state.handles.saturating_sub(1);
        }
        self.inner.let_go_if_done(file);
    }

    /// The object at `key` was deleted, renamed away or is being replaced: whatever was being
    /// written there is dropped (an upload in progress is aborted) and never committed. Returns
    /// once no commit of it is running, so that a commit already sending bytes cannot land
    /// after the caller's delete or new version and resurrect the old content.
    pub async fn forget(&self, store_id: &str, key: &str) {
        let name = (store_id.to_string(), key.to_string());
        let removed = self.inner.files().remove(&name);
        // After the file's removal: a let-go that records what its commit left does so only
        // while the map still holds the file (`let_go_if_done`).
        self.inner.recent_commits().forget(&name);
        let Some(file) = removed else {
            return;
        };
        let (budgeted, log) = {
            let mut state = file.state();
            state.deleted = true;
            // Never to be committed: nothing for a next process. The spill file itself stays
            // open (unnamed) for the handles still reading it.
            (std::mem::take(&mut state.budgeted), state.log.take())
        };
        durable::Leftover { spill: None, log }.dispose(&self.inner.spares);
        self.inner.budget.release(budgeted);
        self.inner.metrics.add_dirty_bytes(-(budgeted as i64));
        // A commit checks `deleted` when it starts; wait out one that started before.
        let _no_commit_running = file.commit_lock.lock().await;
        let upload = file.state().upload.take();
        if let Some(upload) = upload {
            commit::abort_in_background(&self.inner.journal, &file.target, upload.id);
        }
    }

    /// Copies object `source` to `dest` inside `store` (a rename): one CopyObject up to 5 GiB,
    /// else a journalled multipart upload of server-side part copies of that version only.
    pub async fn copy_object(
        &self,
        store: &dyn ObjectStore,
        source: &ObjectVersion,
        dest: &str,
    ) -> Result<PutResult, StoreError> {
        copy::copy_object(store, &self.inner.journal, source, dest).await
    }

    /// Aborts, on a background task, the multipart uploads that killed msfs processes sharing
    /// this journal started in `store`'s bucket (see `journal`). Called for each store the
    /// process builds; never waited for, because a store that does not answer would hold up a
    /// mount for as long as its retries last, and the uploads only cost storage meanwhile.
    pub fn recover_uploads(&self, store: Arc<dyn ObjectStore>) {
        let journal = Arc::clone(&self.inner.journal);
        tokio::spawn(async move {
            let recovered = journal.recover(store.as_ref()).await;
            if recovered != Recovered::default() {
                tracing::info!(store = %store.id(), aborted = recovered.aborted,
                    kept = recovered.kept, "uploads left by killed msfs processes");
            }
        });
    }

    /// Takes over the files that killed msfs processes sharing `journal_parent` left dirty in
    /// `store` (see `durable`): each becomes a dirty file of this process, as if just written
    /// (an `open` of its key sees its content, and its bytes count against the dirty bound),
    /// and is committed in the background. `target_for_key` says where a key is committed
    /// (backend, delta log); a key it returns `None` for (another backend's over the same
    /// bucket) stays for a later call, as do the files of stores not built yet. Returns how many
    /// files were taken over. A file's first commit checks its base against the store first
    /// (`durable::check_base`): the killed process's commit may have landed unrecorded, or
    /// another writer may have replaced the object meanwhile.
    ///
    /// Called for each writable store the process builds, right after `recover_uploads` for it
    /// and once the backend's manifest (its commit observer) is known, before the mount serves
    /// it; waits only for local file I/O, never for the store.
    pub async fn recover_spills(
        &self,
        store: &dyn ObjectStore,
        target_for_key: impl Fn(&str) -> Option<Target>,
    ) -> usize {
        let files = durable::recover(&self.inner, store.id(), target_for_key).await;
        for file in &files {
            self.commit_in_background(file);
        }
        if !files.is_empty() {
            tracing::info!(store = %store.id(), files = files.len(),
                "committing the unsaved writes killed msfs processes left");
        }
        files.len()
    }

    /// Dirty bytes counted against the bound right now.
    pub fn dirty_bytes(&self) -> u64 {
        self.inner.budget.used()
    }

    /// The budget of commit buffers, for an observer that must not keep the engine alive.
    pub fn buffer_budget(&self) -> Arc<Budget> {
        Arc::clone(&self.inner.buffers)
    }

    /// Bytes commits in flight hold in memory right now.
    pub fn buffered_bytes(&self) -> u64 {
        self.inner.buffers.used()
    }

    /// Unlocks the spill and upload-journal directories for the process succeeding this one,
    /// which commits what they hold as a dead process's (after [`WriteEngine::stop_commits`];
    /// nothing may be written through the engine afterwards).
    pub fn leave_to_successor(&self) {
        self.inner.open_logs.close();
        self.inner.spares.stop();
        self.inner.spill_dir.leave();
        self.inner.journal.leave();
    }
}

impl Inner {
    fn files(&self) -> MutexGuard<'_, HashMap<(String, String), Arc<DirtyFile>>> {
        self.files.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn recent_commits(&self) -> MutexGuard<'_, recent_commits::RecentCommits> {
        self.recent_commits
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Drops the engine's reference to a file that is clean (or deleted), unused and not being
    /// committed: its content is now simply the object's.
    ///
    /// Decided and done under the file map's lock: a FUSE `release` is not waited for by
    /// `close(2)`, so an `open` of the same name can run beside it, and between a decision made
    /// on the file's state alone and its removal it could join the file and then write into one
    /// the map no longer holds (invisible to `stat`, committed over a stale base).
    fn let_go_if_done(&self, file: &Arc<DirtyFile>) {
        let id = (file.target.store.id().to_string(), file.target.key.clone());
        let leftover = {
            // The map's lock before the file's, as `open` and `join` take them.
            let mut files = self.files();
            let mut state = file.state();
            let done =
                state.handles == 0 && !state.background && (!state.is_dirty() || state.deleted);
            if !done {
                return;
            }
            if files.get(&id).is_some_and(|f| Arc::ptr_eq(f, file)) {
                files.remove(&id);
                // Recorded under the map's lock: a `forget` of the name, or a new file there
                // (whose let-go records its own), comes after.
                if state.commit_landed
                    && !state.deleted
                    && !state.is_dirty()
                    && let Some(version) = state.base.clone()
                {
                    let commit = RecentCommit {
                        version,
                        mtime: state.mtime,
                        metadata: state.metadata_now(),
                        at: Instant::now(),
                    };
                    self.recent_commits().record(id.clone(), commit);
                }
            }
            // A clean file's spill can be left after a commit that landed while a write was
            // still putting bytes in it (and then failed): its content is now the object's.
            if state.is_dirty() || state.writers > 0 {
                durable::Leftover::default()
            } else {
                durable::Leftover {
                    spill: state.spill.take(),
                    log: state.log.take(),
                }
            }
        };
        leftover.dispose(&self.spares);
    }
}

#[cfg(test)]
mod recovery_tests;
#[cfg(test)]
mod tests;
