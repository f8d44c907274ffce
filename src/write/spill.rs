//! Putting written bytes into a file's spill file: `write` (within the dirty bound, bytes before
//! their log record, on the blocking pool), `write_now` (the same on the caller's thread when
//! nothing must wait) and `truncate`, and the spill file's creation on
//! first use. Apart from the engine's table of files because this is the one path that does
//! local file I/O for every FUSE write, and its ordering rules (see `file`, `durable`) are its
//! own.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::SystemTime;

use bytes::Bytes;

use super::file::{DirtyFile, State};
use super::{Inner, WriteEngine, WriteError, commit, durable};

impl WriteEngine {
    /// Writes `data` at `offset`. Waits (never fails) while dirty data is over its bound; fails
    /// with `TooLarge` (EFBIG) past the largest object the store can hold.
    pub async fn write(
        &self,
        file: &Arc<DirtyFile>,
        offset: u64,
        data: &[u8],
    ) -> Result<(), WriteError> {
        let end = checked_end(file, offset, data)?;
        if data.is_empty() {
            return Ok(());
        }
        let len = data.len() as u64;
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
        self.account(file, data.len(), reserved, recorded)?;
        commit::stream_finished_parts(&self.inner, file, offset, end).await;
        Ok(())
    }

    /// [`WriteEngine::write`] on the caller's thread, if it needs no waiting: `None`, having
    /// done nothing, when the dirty bound has no room for `data` at once. Otherwise the bytes
    /// and their record are in the spill when it returns, and `Ok(true)` says the write
    /// finished a part of a file streamed as it is written: call
    /// [`WriteEngine::stream_parts_after`] before answering (that upload's backpressure).
    ///
    /// For a FUSE worker thread (`fuse::FuseAdapter::write_inline`): the two thread hops of
    /// `write` cost a 4 KiB write as much as everything else it does together.
    pub fn write_now(
        &self,
        file: &Arc<DirtyFile>,
        offset: u64,
        data: &[u8],
    ) -> Option<Result<bool, WriteError>> {
        let end = match checked_end(file, offset, data) {
            Ok(end) => end,
            Err(e) => return Some(Err(e)),
        };
        if data.is_empty() {
            return Some(Ok(false));
        }
        let len = data.len() as u64;
        let reserved = if file.state().counts_against_budget() {
            if !self.inner.budget.try_reserve(len) {
                return None;
            }
            len
        } else {
            0
        };
        let recorded = self.inner.spill_write(file, offset, data, reserved);
        if let Err(e) = self.account(file, data.len(), reserved, recorded) {
            return Some(Err(e));
        }
        Some(Ok(
            commit::streamed_grid(&self.inner, file, offset, end).is_some()
        ))
    }

    /// What a write that [`WriteEngine::write_now`] answered `Ok(true)` leaves to do: start
    /// streaming the parts it finished, waiting for an upload slot.
    pub async fn stream_parts_after(&self, file: &Arc<DirtyFile>, offset: u64, len: u64) {
        commit::stream_finished_parts(&self.inner, file, offset, offset + len).await;
    }

    /// Counts what `spill_write` recorded (`recorded`: how many of the `reserved` bytes are
    /// now dirty) and gives the rest of the reservation back.
    fn account(
        &self,
        file: &DirtyFile,
        len: usize,
        reserved: u64,
        recorded: Result<u64, WriteError>,
    ) -> Result<(), WriteError> {
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
            .record_bytes_written(&file.target.backend, len);
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
}

impl Inner {
    /// Puts `data` at `offset` into the file's spill file and records it: bytes first, then
    /// the log record (`durable`), then the state, the last two under the state lock so the
    /// log's order is the state's. Returns how many of the `reserved` bytes now count as dirty.
    /// File I/O: run off the async runtime (the blocking pool, or the FUSE worker of `write_now`).
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

    /// The file's spill file, created on first use (in a directory made ahead of need, when one
    /// is ready): with its log, headed by the state as it is now (`durable`); for a deleted
    /// file, which is never committed, unnamed at once, so it lives exactly as long as the file
    /// needs it, crash or not.
    fn ensure_spill(&self, file: &DirtyFile, state: &mut State) -> Result<Arc<File>, WriteError> {
        if let Some(spill) = &state.spill {
            return Ok(Arc::clone(spill));
        }
        let spill = if state.deleted {
            let number = self.new_spill_number();
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
            let (spill, log) = durable::create(
                self.spill_dir.path(),
                &self.spares,
                &self.open_logs,
                || self.new_spill_number(),
                header,
            )
            .map_err(|source| WriteError::Spill { source })?;
            state.log = Some(log);
            if !state.metadata.is_empty() {
                durable::log_metadata(state);
            }
            spill
        };
        let spill = Arc::new(spill);
        state.spill = Some(Arc::clone(&spill));
        Ok(spill)
    }

    pub(super) fn new_spill_number(&self) -> u64 {
        self.next_spill.fetch_add(1, Ordering::Relaxed)
    }
}

/// Where a write of `data` at `offset` ends, or `TooLarge` (EFBIG) past the largest object the
/// file's store can hold.
fn checked_end(file: &DirtyFile, offset: u64, data: &[u8]) -> Result<u64, WriteError> {
    let (len, max) = (data.len() as u64, file.target.store.max_object_size());
    offset
        .checked_add(len)
        .filter(|end| *end <= max)
        .ok_or(WriteError::TooLarge {
            size: offset.saturating_add(len),
            max,
        })
}
