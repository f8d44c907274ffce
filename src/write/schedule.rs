//! When commits run and what a failure leaves: now (`commit`, `fsync`), on a background task
//! retried with backoff (`commit_in_background`), once a file shared by several descriptors
//! is idle (`commit_when_idle`), or for every file at an unmount (`drain`); all on the
//! `write_commit_workers` slots. Apart from `commit`, which is what one commit sends.

use std::sync::Arc;

use super::file::{self, DirtyFile, Target};
use super::{
    IDLE_COMMIT_DELAY, Inner, RETRY_FIRST, RETRY_LAST, WriteEngine, WriteError, commit, durable,
};
use crate::store;

impl WriteEngine {
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
}

impl WriteEngine {
    /// Before this process hands its mounts to a successor: lets the commits and streamed
    /// parts in flight finish, for at most `within`, and starts no more (they wait for slots
    /// never given back). The successor then finds every spill log as this process's last
    /// commit left it, never changed under it. Whether everything in flight finished; what did
    /// not is cut short at exit, and the successor sorts it out as after a kill (`landed`).
    pub async fn stop_commits(&self, within: std::time::Duration) -> bool {
        let inner = &self.inner;
        let all_slots = async {
            // Fair semaphores: once these wait, no new commit or part gets a slot before them.
            let commits = inner
                .commit_slots
                .acquire_many(permits(super::commit_slots(&inner.config)))
                .await;
            let parts = inner
                .streamed_parts
                .acquire_many(permits(super::streamed_part_slots(&inner.config)))
                .await;
            if let (Ok(commits), Ok(parts)) = (commits, parts) {
                commits.forget();
                parts.forget();
            }
        };
        tokio::time::timeout(within, all_slots).await.is_ok()
    }
}

impl Inner {
    /// Commits `file` once, on one of the `write_commit_workers` slots.
    async fn commit_in_slot(self: &Arc<Self>, file: &Arc<DirtyFile>) -> Result<(), WriteError> {
        let _slot = self.commit_slots.acquire().await;
        commit::commit_once(self, file).await
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

/// `slots` as tokio's `acquire_many` counts them (a semaphore holds far fewer than `u32::MAX`).
fn permits(slots: usize) -> u32 {
    u32::try_from(slots).unwrap_or(u32::MAX)
}
