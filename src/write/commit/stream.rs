//! Parts streamed ahead of the commit: a large file written by appending has each part uploaded
//! as soon as the writes pass its end, so that its commit has little left to send; a commit
//! stops the streaming while it sends its own parts.

use std::ops::Range;
use std::sync::Arc;

use super::super::file::DirtyFile;
use super::super::plan;
use super::super::{Inner, WriteError};
use super::snapshot::{Snapshot, snapshot_body};
use super::upload::{ensure_upload, remember_part};

/// Stops parts from being streamed while a commit sends its own, after waiting for those in
/// flight; streaming resumes when it is dropped.
pub(super) struct StopStreaming<'a>(&'a DirtyFile);

impl<'a> StopStreaming<'a> {
    pub async fn wait(file: &'a DirtyFile) -> StopStreaming<'a> {
        file.state().committing = true;
        let stopped = StopStreaming(file);
        loop {
            let finished = file.streamed.notified();
            if file.state().streaming.is_empty() {
                return stopped;
            }
            finished.await;
        }
    }
}

impl Drop for StopStreaming<'_> {
    fn drop(&mut self) {
        self.0.state().committing = false;
    }
}

/// After a write of `start..end`: if the file is large, written by appending, and the write
/// went past the end of a grid part, uploads the parts it finished on their own tasks, so a
/// large file's upload is mostly done when it is closed. (Random writers are left to the
/// commit, which copies what they did not change.) Waits only for a slot to start them
/// (backpressure on writers that outrun the store).
pub(in crate::write) async fn stream_finished_parts(
    inner: &Arc<Inner>,
    file: &Arc<DirtyFile>,
    start: u64,
    end: u64,
) {
    let Some((part_size, started)) = streamed_grid(inner, file, start, end) else {
        return;
    };
    let finished_before = end / part_size; // parts [0, finished_before) lie below `end`
    // The first time, every part written so far; then the ones this write finished.
    let first = if started {
        (start / part_size).saturating_sub(1)
    } else {
        0
    };
    for index in first..finished_before {
        let range = plan::part_range(index, part_size, u64::MAX);
        {
            let mut state = file.state();
            let current = state.part_current(index, &range);
            let in_flight = state.streaming.contains(&index);
            if current || in_flight || state.committing || range.end > state.size {
                continue;
            }
            state.streaming.push(index);
        }
        let permit = match Arc::clone(&inner.streamed_parts).acquire_owned().await {
            Ok(permit) => permit,
            Err(_) => return,
        };
        let (inner, file) = (Arc::clone(inner), Arc::clone(file));
        tokio::spawn(async move {
            let _permit = permit;
            if let Err(e) = stream_part(&inner, &file, index, range, part_size).await {
                // The commit uploads the part itself; nothing is lost.
                tracing::debug!(key = %file.target.key, part = index, error = %e,
                    "streaming a part ahead of the commit failed");
            }
            file.state().streaming.retain(|i| *i != index);
            file.streamed.notify_waiters();
        });
    }
}

/// If a write of `start..end` finished a part of a file streamed as it is written: the grid's
/// part size, and whether its upload has started. `None` for every other write, which is what
/// nearly every write is, and cheap to tell.
pub(in crate::write) fn streamed_grid(
    inner: &Inner,
    file: &DirtyFile,
    start: u64,
    end: u64,
) -> Option<(u64, bool)> {
    let threshold = inner.config.multipart_threshold;
    let (part_size, started) = {
        let state = file.state();
        if state.size < threshold || state.deleted || state.committing || !state.appending {
            return None;
        }
        match &state.upload {
            Some(upload) => (upload.part_size, true),
            // Sized for a file of the threshold's size: the grid must be fixed before the final
            // size is known; `ensure_upload` starts over in the rare file it is too small for.
            None => (plan::part_size_for(threshold), false),
        }
    };
    let within_one_part = end / part_size == start / part_size && !end.is_multiple_of(part_size);
    (!within_one_part).then_some((part_size, started))
}

/// Uploads part `index` of the file as it is now.
async fn stream_part(
    inner: &Inner,
    file: &Arc<DirtyFile>,
    index: u64,
    range: Range<u64>,
    part_size: u64,
) -> Result<(), WriteError> {
    let target = &file.target;
    let (upload_id, actual_size, _) = ensure_upload(inner, file, range.end).await?;
    if actual_size != part_size {
        return Ok(()); // the grid changed under us; the commit will cover this part
    }
    // The generation is noted before the bytes are read (see `file`'s module doc).
    let snapshot = {
        let state = file.state();
        Arc::new(Snapshot::of(&state))
    };
    if range.end > snapshot.size {
        return Ok(()); // truncated meanwhile
    }
    let body = snapshot_body(inner, target, &snapshot, range.clone());
    let number = i32::try_from(index + 1).unwrap_or(i32::MAX);
    let part = target
        .store
        .upload_part_from(&target.key, &upload_id, number, body)
        .await
        .map_err(|source| WriteError::store(target, source))?;
    remember_part(file, &upload_id, index, snapshot.generation, range, part);
    Ok(())
}
