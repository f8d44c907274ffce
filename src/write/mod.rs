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

use std::collections::HashMap;
use std::fs::File;
use std::ops::Range;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, SystemTime};

use bytes::{Bytes, BytesMut};
use tokio::sync::Semaphore;

pub use cleanup::abort_stale_uploads;
pub use error::WriteError;
pub use extents::Extents;
pub use file::{CommitObserver, DirtyFile, DirtyMeta, Target};

use crate::cache::{LineCache, ObjectReader, ObjectVersion};
use crate::private_dir::{self, PrivateDir};
use crate::store::{self, ObjectStore, PutResult, StoreError};
use crate::telemetry::Metrics;
use budget::Budget;
use file::{State, View};
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
    /// This process's spill directory (`durable`), kept at exit while it holds dirty files.
    spill_dir: PrivateDir,
    /// One spill recovery pass at a time (see `durable::recover`).
    recovering: tokio::sync::Mutex<()>,
    journal: Arc<UploadJournal>,
    /// (store id, key) → the file being written there.
    files: Mutex<HashMap<(String, String), Arc<DirtyFile>>>,
    /// Names the spill files: unique in the process, never reused (a directory being removed
    /// in the background is never confused with a new one).
    next_spill: AtomicU64,
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
        let workers = config.commit_workers.max(1);
        Ok(WriteEngine {
            inner: Arc::new(Inner {
                spill_parent: journal_parent,
                spill_dir,
                recovering: tokio::sync::Mutex::new(()),
                journal: Arc::new(journal),
                files: Mutex::new(HashMap::new()),
                next_spill: AtomicU64::new(1),
                commit_slots: Semaphore::new(workers),
                streamed_parts: Arc::new(Semaphore::new(workers * STREAMED_PARTS_PER_WORKER)),
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
        let removed = self
            .inner
            .files()
            .remove(&(store_id.to_string(), key.to_string()));
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
        durable::Leftover { spill: None, log }.dispose();
        self.inner.budget.release(budgeted);
        self.inner.metrics.add_dirty_bytes(-(budgeted as i64));
        // A commit checks `deleted` when it starts; wait out one that started before.
        let _no_commit_running = file.commit_lock.lock().await;
        let upload = file.state().upload.take();
        if let Some(upload) = upload {
            commit::abort_in_background(&self.inner.journal, &file.target, upload.id);
        }
    }

    /// Copies object `source` (of `size` bytes) to `dest` inside `store` (a rename): one
    /// CopyObject up to 5 GiB, else a journalled multipart upload of server-side part copies.
    pub async fn copy_object(
        &self,
        store: &dyn ObjectStore,
        source: &str,
        dest: &str,
        size: u64,
    ) -> Result<PutResult, StoreError> {
        copy::copy_object(store, &self.inner.journal, source, dest, size).await
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

    /// Writes `data` at `offset`. Waits (never fails) while dirty data is over its bound; fails
    /// with `TooLarge` (EFBIG) past the largest object the store can hold.
    pub async fn write(
        &self,
        file: &Arc<DirtyFile>,
        offset: u64,
        data: &[u8],
    ) -> Result<(), WriteError> {
        let len = data.len() as u64;
        let max = file.target.store.max_object_size();
        offset
            .checked_add(len)
            .filter(|end| *end <= max)
            .ok_or(WriteError::TooLarge {
                size: offset.saturating_add(len),
                max,
            })?;
        let end = offset + len;
        if len == 0 {
            return Ok(());
        }
        // Bytes that can never be committed (the file is unlinked, or its commit failed for
        // good) are not counted against the bound: no commit could ever free them, and a writer
        // waiting for that would wait forever and hold up every writer of the process.
        let reserved = if file.state().counts_against_budget() {
            self.reserve(file, len).await;
            len
        } else {
            0
        };
        // Bytes first, record second (see `file`'s module doc); the spill file's create, the
        // pwrite and the log append run on the blocking pool, so a stalled local disk stalls
        // only this write.
        let recorded = {
            let (inner, spilled, bytes) = (
                Arc::clone(&self.inner),
                Arc::clone(file),
                Bytes::copy_from_slice(data),
            );
            tokio::task::spawn_blocking(move || {
                inner.spill_write(&spilled, offset, &bytes, reserved)
            })
            .await
            .unwrap_or(Err(WriteError::Internal("a spill write task panicked")))
        };
        let counted = match recorded {
            Ok(counted) => counted,
            Err(e) => {
                self.inner.budget.release(reserved);
                return Err(e);
            }
        };
        self.inner.budget.release(reserved - counted);
        self.inner.metrics.add_dirty_bytes(counted as i64);
        self.inner
            .metrics
            .record_bytes_written(&file.target.backend, data.len());
        commit::stream_finished_parts(&self.inner, file, offset, end).await;
        Ok(())
    }

    /// Waits for room for `len` more dirty bytes; while waiting, commits this file early so
    /// that a single file larger than the bound still makes progress. The commit is started
    /// again at every recheck, not once: a background commit already running when the wait
    /// began ends with the file still dirty (it took its snapshot before this writer's last
    /// writes) and frees nothing, and then only a new commit can (a 4-writer soak deadlocked
    /// on exactly that).
    async fn reserve(&self, file: &Arc<DirtyFile>, len: u64) {
        if self.inner.budget.try_reserve(len) {
            return;
        }
        tracing::debug!(key = %file.target.key, "dirty data over its bound; waiting for commits");
        self.inner
            .budget
            .reserve(len, || self.commit_in_background(file))
            .await;
    }

    /// Bytes `range` of the file as it is now (clamped to its size).
    pub async fn read(
        &self,
        file: &Arc<DirtyFile>,
        range: Range<u64>,
        sequential: bool,
    ) -> Result<Bytes, WriteError> {
        let mut attempt = 0;
        loop {
            match self.read_once(file, range.clone(), sequential).await {
                // A commit replaced the base object between planning and reading: once it has
                // finished (and made its object the base), the new base holds the same bytes for
                // every range not dirty, so planning again is enough.
                Err(WriteError::Store { source, .. })
                    if matches!(source.root(), StoreError::Changed { .. })
                        && attempt < READ_REPLANS =>
                {
                    attempt += 1;
                    drop(file.commit_lock.lock().await);
                }
                other => return other,
            }
        }
    }

    async fn read_once(
        &self,
        file: &Arc<DirtyFile>,
        range: Range<u64>,
        sequential: bool,
    ) -> Result<Bytes, WriteError> {
        let (pieces, spill) = {
            let state = file.state();
            let end = range.end.min(state.size);
            if range.start >= end {
                return Ok(Bytes::new());
            }
            (
                read_plan(&state.view(), range.start..end),
                state.spill.clone(),
            )
        };
        let target = &file.target;
        let mut parts = Vec::with_capacity(pieces.len());
        for piece in pieces {
            parts.push(match piece {
                Piece::Spill(r) => {
                    let spill = spill.clone().ok_or(WriteError::SpillGone)?;
                    Bytes::from(DirtyFile::read_spill_off_runtime(spill, r).await?)
                }
                Piece::Base(base, r) => self
                    .inner
                    .reader
                    .read(&target.store, &base, r, sequential)
                    .await
                    .map_err(|source| WriteError::store(target, source))?,
                Piece::Zeros(n) => Bytes::from(vec![0; n]),
            });
        }
        if parts.len() == 1 {
            return Ok(parts.swap_remove(0));
        }
        let mut out = BytesMut::with_capacity(parts.iter().map(Bytes::len).sum());
        for part in parts {
            out.extend_from_slice(&part);
        }
        Ok(out.freeze())
    }

    /// Sets the file's size: shrinking drops bytes, growing adds zeros. A size past the largest
    /// object the store can hold fails with `TooLarge` (EFBIG) here, not at the commit.
    ///
    /// A size change is recorded in the spill log first (`durable`), the spill directory being
    /// created if this is the file's first change: a few small file operations on the caller's
    /// thread, as cutting the spill file itself always was.
    pub fn truncate(&self, file: &Arc<DirtyFile>, size: u64) -> Result<(), WriteError> {
        let max = file.target.store.max_object_size();
        if size > max {
            return Err(WriteError::TooLarge { size, max });
        }
        let dropped = {
            let mut state = file.state();
            let (mtime, shrunk) = (SystemTime::now(), size < state.size);
            // The same size changes nothing a commit would need, and a deleted file is never
            // committed: no record.
            if size != state.size && !state.deleted {
                self.inner.ensure_spill(file, &mut state)?;
                durable::log_truncate(&mut state, size, mtime)?;
            }
            let dropped = state.record_truncate(size).min(state.budgeted);
            state.mtime = mtime;
            state.budgeted -= dropped;
            // Only frees space: the bytes cut off are no longer dirty, so never read.
            if let Some(spill) = &state.spill
                && shrunk
                && let Err(e) = spill.set_len(size)
            {
                tracing::warn!(key = %file.target.key, error = %e,
                    "cannot cut a spill file down after a truncate; its space is freed once the                      file is committed");
            }
            dropped
        };
        self.inner.budget.release(dropped);
        self.inner.metrics.add_dirty_bytes(-(dropped as i64));
        Ok(())
    }

    /// Commits the file now and waits for the store to acknowledge it (close with
    /// `flush_on_close`). On failure the data stays dirty and a background retry is scheduled.
    pub async fn commit(&self, file: &Arc<DirtyFile>) -> Result<(), WriteError> {
        let result = self.inner.commit_in_slot(file).await;
        if result.is_err() {
            self.commit_in_background(file);
        }
        result
    }

    /// fsync: everything written so far is in the store when this returns Ok. An earlier
    /// background commit failure not yet reported is reported now, once, as an error.
    pub async fn fsync(&self, file: &Arc<DirtyFile>) -> Result<(), WriteError> {
        // Taken, so it is reported once, whatever this commit's own outcome.
        let earlier = {
            let mut state = file.state();
            let earlier = state.failure.take();
            if earlier.is_some() {
                durable::log_failure(&mut state);
            }
            earlier
        };
        let result = self.commit(file).await;
        match earlier {
            Some(message) => Err(WriteError::EarlierCommitFailed { message }),
            None => result,
        }
    }

    /// Commits the file on a background task (close without `flush_on_close`), retrying with
    /// backoff until it lands or the file is deleted.
    pub fn commit_in_background(&self, file: &Arc<DirtyFile>) {
        {
            let mut state = file.state();
            if state.background || state.deleted || !state.is_dirty() {
                return;
            }
            state.background = true;
        }
        let inner = Arc::clone(&self.inner);
        let file = Arc::clone(file);
        tokio::spawn(async move {
            // Endless: the loop ends when the commit lands or is final, or the file goes.
            let mut delays = store::backoff(RETRY_FIRST, 2.0, RETRY_LAST);
            loop {
                let result = inner.commit_in_slot(&file).await;
                let again = {
                    let mut state = file.state();
                    match &result {
                        Ok(()) => {
                            state.failure = None;
                            // New writes raced the commit and nobody will close the file again.
                            state.is_dirty() && state.handles == 0 && !state.deleted
                        }
                        // A commit that landed meanwhile (an fsync's) left the file clean:
                        // nothing failed, and nothing is left to retry.
                        Err(_) if !state.is_dirty() => false,
                        Err(e) if e.is_terminal() => {
                            record_failure(&mut state, e);
                            false
                        }
                        Err(e) => {
                            record_failure(&mut state, e);
                            !state.deleted
                        }
                    }
                };
                if let Err(e) = &result
                    && e.is_terminal()
                {
                    inner.strand(&file, e);
                }
                let retry_in =
                    (again && result.is_err()).then(|| delays.next().unwrap_or(RETRY_LAST));
                if let (Err(e), Some(delay)) = (&result, retry_in) {
                    tracing::warn!(backend = %file.target.backend, key = %file.target.key,
                        error = %e, retry_in = ?delay, "background commit failed; data kept, retrying");
                    inner.metrics.record_commit_retry(&file.target.backend);
                }
                if !again {
                    break;
                }
                if let Some(delay) = retry_in {
                    tokio::time::sleep(delay).await;
                }
            }
            file.state().background = false;
            inner.let_go_if_done(&file);
        });
    }

    /// A descriptor of the file was closed, and others may stay open (a dup, a fork; close
    /// without `flush_on_close`): the file is committed in the background once it has not
    /// changed for `IDLE_COMMIT_DELAY`. Nothing is sent when the last handle closes first
    /// (`release` then commits at once) or the file is clean or deleted by then. One such
    /// wait per file at a time.
    pub fn commit_when_idle(&self, file: &Arc<DirtyFile>) {
        let mut seen = {
            let mut state = file.state();
            if state.idle_wait || state.deleted || !state.is_dirty() {
                return;
            }
            state.idle_wait = true;
            state.generation
        };
        let engine = self.clone();
        let file = Arc::clone(file);
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(IDLE_COMMIT_DELAY).await;
                let mut state = file.state();
                if state.generation != seen && !state.deleted && state.handles > 0 {
                    seen = state.generation;
                    continue;
                }
                state.idle_wait = false;
                let commit = !state.deleted && state.is_dirty() && state.handles > 0;
                drop(state);
                if commit {
                    engine.commit_in_background(&file);
                }
                return;
            }
        });
    }

    /// Commits every dirty file and waits (an unmount). Returns the files that could not be
    /// committed, with why.
    pub async fn drain(&self) -> Vec<(Target, WriteError)> {
        self.drain_matching(|_| true).await
    }

    /// Commits every dirty file whose target `belongs` (one volume's) and waits. Returns the
    /// files that could not be committed, with why; they stay dirty and are retried in the
    /// background, as after a close.
    pub async fn drain_matching(
        &self,
        belongs: impl Fn(&Target) -> bool,
    ) -> Vec<(Target, WriteError)> {
        let files: Vec<Arc<DirtyFile>> = self
            .inner
            .files()
            .values()
            .filter(|file| belongs(&file.target))
            .cloned()
            .collect();
        let mut failed = Vec::new();
        for file in files {
            if !file.is_dirty() {
                continue;
            }
            let result = self.inner.commit_in_slot(&file).await;
            if let Err(e) = result {
                failed.push((file.target.clone(), e));
                self.commit_in_background(&file);
            }
        }
        failed
    }

    /// Dirty bytes counted against the bound right now.
    pub fn dirty_bytes(&self) -> u64 {
        self.inner.budget.used()
    }

    /// Bytes commits in flight hold in memory right now.
    pub fn buffered_bytes(&self) -> u64 {
        self.inner.buffers.used()
    }
}

impl Inner {
    /// Commits `file` once, on one of the `write_commit_workers` slots.
    async fn commit_in_slot(self: &Arc<Self>, file: &Arc<DirtyFile>) -> Result<(), WriteError> {
        let _slot = self.commit_slots.acquire().await;
        commit::commit_once(self, file).await
    }

    fn files(&self) -> MutexGuard<'_, HashMap<(String, String), Arc<DirtyFile>>> {
        self.files.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Puts `data` at `offset` into the file's spill file and records it: bytes first, then
    /// the log record (`durable`), then the state, the last two under the state lock so the
    /// log's order is the state's. Returns how many of the `reserved` bytes now count as dirty.
    /// File I/O: run on the blocking pool.
    fn spill_write(
        &self,
        file: &DirtyFile,
        offset: u64,
        data: &[u8],
        reserved: u64,
    ) -> Result<u64, WriteError> {
        let spill = self.spill_of(file)?;
        let written = spill.write_all_at(data, offset);
        let mut state = file.state();
        state.writers -= 1;
        written.map_err(|e| durable::spill_error(&state, e))?;
        let (range, mtime) = (offset..offset + data.len() as u64, SystemTime::now());
        durable::log_write(&mut state, range.clone(), mtime)?;
        let fresh = state.record_write(range);
        state.mtime = mtime;
        // Unlinked or stranded meanwhile: whatever `forget`/stranding took was all there was.
        let counted = if reserved > 0 && state.counts_against_budget() {
            fresh
        } else {
            0
        };
        state.budgeted += counted;
        Ok(counted)
    }

    /// The file's spill file for a write about to put bytes in it (counted in `writers` until
    /// it records them, so that a commit landing meanwhile keeps the file).
    fn spill_of(&self, file: &DirtyFile) -> Result<Arc<File>, WriteError> {
        let mut state = file.state();
        let spill = self.ensure_spill(file, &mut state)?;
        state.writers += 1;
        Ok(spill)
    }

    /// The file's spill file, created on first use: with its log, headed by the state as it is
    /// now (`durable`); for a deleted file, which is never committed, unnamed at once, so it
    /// lives exactly as long as the file needs it, crash or not.
    fn ensure_spill(&self, file: &DirtyFile, state: &mut State) -> Result<Arc<File>, WriteError> {
        if let Some(spill) = &state.spill {
            return Ok(Arc::clone(spill));
        }
        let number = self.new_spill_number();
        let spill = if state.deleted {
            let path = self.spill_dir.path().join(format!("unlinked-{number}"));
            let spill = File::options()
                .read(true)
                .write(true)
                .create_new(true)
                .open(&path)
                .map_err(|source| WriteError::Spill { source })?;
            let _ = std::fs::remove_file(&path);
            spill
        } else {
            let header = durable::Header::of(&file.target, state);
            let (spill, log) = durable::create(self.spill_dir.path(), number, header)
                .map_err(|source| WriteError::Spill { source })?;
            state.log = Some(log);
            spill
        };
        let spill = Arc::new(spill);
        state.spill = Some(Arc::clone(&spill));
        Ok(spill)
    }

    fn new_spill_number(&self) -> u64 {
        self.next_spill.fetch_add(1, Ordering::Relaxed)
    }

    /// A commit of `file` failed for good: stop counting its bytes against the bound, so the
    /// rest of the process keeps writing, and say so once, naming the file. The data stays in
    /// the spill file; the failure is reported at the next fsync (or close with
    /// `flush_on_close`), which also tries the commit again.
    fn strand(&self, file: &DirtyFile, error: &WriteError) {
        let released = {
            let mut state = file.state();
            if state.stranded || state.deleted {
                return;
            }
            state.stranded = true;
            std::mem::take(&mut state.budgeted)
        };
        self.budget.release(released);
        self.metrics.add_dirty_bytes(-(released as i64));
        self.metrics.record_commit_abandoned(&file.target.backend);
        tracing::error!(backend = %file.target.backend, key = %file.target.key, error = %error,
            "this file cannot be committed and is no longer retried in the background; its data \
             is kept locally, fsync and close report the failure and try again");
    }

    /// Drops the engine's reference to a file that is clean (or deleted), unused and not being
    /// committed: its content is now simply the object's.
    fn let_go_if_done(&self, file: &Arc<DirtyFile>) {
        let done = {
            let state = file.state();
            state.handles == 0 && !state.background && (!state.is_dirty() || state.deleted)
        };
        if !done {
            return;
        }
        let id = (file.target.store.id().to_string(), file.target.key.clone());
        {
            let mut files = self.files();
            if files.get(&id).is_some_and(|f| Arc::ptr_eq(f, file)) {
                files.remove(&id);
            }
        }
        // A clean file's spill can be left after a commit that landed while a write was still
        // putting bytes in it (and then failed): its content is now the object's.
        let leftover = {
            let mut state = file.state();
            if state.is_dirty() || state.writers > 0 {
                durable::Leftover::default()
            } else {
                durable::Leftover {
                    spill: state.spill.take(),
                    log: state.log.take(),
                }
            }
        };
        leftover.dispose();
    }
}

/// Where one piece of a read comes from.
enum Piece {
    Spill(Range<u64>),
    Base(ObjectVersion, Range<u64>),
    Zeros(usize),
}

/// Cuts `range` (inside the file) into pieces by where their bytes are (see `file`'s doc).
fn read_plan(state: &View<'_>, range: Range<u64>) -> Vec<Piece> {
    let mut pieces = Vec::new();
    for (r, dirty) in state.dirty.pieces(range) {
        if dirty {
            pieces.push(Piece::Spill(r));
            continue;
        }
        let base_end = r.end.min(state.base_len);
        if let Some(base) = state.base
            && r.start < base_end
        {
            pieces.push(Piece::Base(base.clone(), r.start..base_end));
        }
        let zeros_from = r.start.max(base_end);
        if zeros_from < r.end {
            pieces.push(Piece::Zeros((r.end - zeros_from) as usize));
        }
    }
    pieces
}

/// Keeps a background commit's failure for the next fsync to report, in the state and (when it
/// changed) in the spill log, for a successor's fsync to report if this process dies first.
fn record_failure(state: &mut file::State, error: &WriteError) {
    let message = error.to_string();
    if state.failure.as_deref() != Some(message.as_str()) {
        state.failure = Some(message);
        durable::log_failure(state);
    }
}

#[cfg(test)]
mod recovery_tests;
#[cfg(test)]
mod tests;
