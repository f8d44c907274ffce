//! Turning a dirty file into a new object version: one PUT for a small file, a multipart upload
//! for a large one, and the parts streamed ahead of the commit while the application writes.
//!
//! - `snapshot`: what a commit works from (the file as it was when the commit started), and its
//!   bytes as a request body read chunk by chunk;
//! - `rebase`: after a commit lands, the file rebased onto the new version (and a recovered
//!   file onto what its killed process's commit landed), its metadata settled, a replaced base
//!   told apart as a conflict;
//! - `upload`: the PUT of a small file, the multipart upload of a large one (parts reused,
//!   copied from the base, or sent), and its journalling;
//! - `stream`: the parts of a file being appended to, sent ahead of its commit.

mod rebase;
mod snapshot;
mod stream;
mod upload;

use std::sync::Arc;
use std::time::Instant;

use super::durable;
use super::file::DirtyFile;
use super::{Inner, WriteError};
use crate::cache::ObjectVersion;
use rebase::{conflict_if_base_replaced, finish, rebase_if_landed, settle_metadata};
use snapshot::Snapshot;
use upload::{multipart, put_whole, upload_vanished};

pub(super) use rebase::settle_base;
pub(super) use stream::{stream_finished_parts, streamed_grid};
pub(super) use upload::abort_in_background;

/// Commits `file` once if it is dirty. Holds the file's commit lock throughout; the caller holds
/// a commit worker slot.
pub(super) async fn commit_once(
    inner: &Arc<Inner>,
    file: &Arc<DirtyFile>,
) -> Result<(), WriteError> {
    let _one_at_a_time = file.commit_lock.lock().await;
    // A recovered file whose killed process's commit landed unrecorded is rebased onto what
    // landed first; when that was all of it, the file is clean and nothing is sent (below).
    rebase_if_landed(inner, file).await?;
    let (snapshot, upload) = {
        let mut state = file.state();
        if state.deleted || !state.is_dirty() {
            return Ok(());
        }
        state.low_water = state.size;
        // Before the first request: should this process die before the commit's record, its
        // successor can still recognise what this commit sends (`durable::check_base`).
        durable::log_commit_starting(&mut state);
        (Arc::new(Snapshot::of(&state)), state.upload.clone())
    };
    let target = &file.target;
    let started = Instant::now();
    let result = if snapshot.size < inner.config.multipart_threshold && upload.is_none() {
        put_whole(inner, target, &snapshot)
            .await
            .map(|(etag, body)| (etag, body, snapshot.metadata_version))
    } else {
        let mut sent = multipart(inner, file, &snapshot).await;
        // `multipart` forgets an upload that vanished under it (someone aborted it; garage
        // drops the open uploads of a key another client has just PUT): one more try starts a
        // new upload, so that the application hears what became of its bytes (landed, or a
        // conflict) rather than that some upload id is gone.
        if upload_vanished(&sent) && file.state().upload.is_none() {
            sent = multipart(inner, file, &snapshot).await;
        }
        sent.map(|(etag, metadata_version)| (etag, None, metadata_version))
    };
    let result = match result {
        Ok((etag, body, sent)) => settle_metadata(file, etag, sent)
            .await
            .map(|(etag, settled)| (etag, body, settled)),
        Err(e) => Err(e),
    };
    inner
        .metrics
        .record_commit(&target.backend, result.is_ok(), started.elapsed());
    let (etag, body, settled) =
        result.map_err(|e| conflict_if_base_replaced(e, &snapshot, target))?;
    let committed = ObjectVersion {
        key: target.key.clone(),
        etag,
        size: snapshot.size,
    };
    tracing::debug!(backend = %target.backend, key = %target.key, size = snapshot.size,
        elapsed = ?started.elapsed(), "committed");
    let generation = snapshot.generation;
    // Let go of the spill file before the rebase does: a clean file's spill directory is taken
    // back as a spare only if nothing else holds its data (`Leftover::dispose`), and a
    // snapshot dropped after it lost that race to the blocking pool under load, making a
    // directory removed and another one made for the next file.
    drop(snapshot);
    finish(inner, file, generation, committed, body).await;
    let mut state = file.state();
    if state.metadata_version != settled && !state.deleted {
        // Changed between the fix-up and the rebase: one more commit carries it.
        state.generation += 1;
    }
    Ok(())
}
