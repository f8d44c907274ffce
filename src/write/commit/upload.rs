//! Sending a commit's bytes: one PutObject for a small file; for a large one a multipart upload
//! (journalled while open) whose parts are reused from streaming, copied from the base object
//! server-side, or uploaded, and completed (a completion whose answer was lost recognised by the
//! object's ETag).

use std::ops::Range;
use std::sync::Arc;

use bytes::Bytes;
use futures::stream::{self, StreamExt, TryStreamExt};

use super::super::file::{DirtyFile, Target, Upload, UploadedPart};
use super::super::journal::UploadJournal;
use super::super::plan::{self, PlannedPart, Source};
use super::super::{Inner, WriteError};
use super::snapshot::{IN_MEMORY_BODY, Snapshot, buffered, snapshot_body};
use super::stream::StopStreaming;
use crate::store::{CompletedPart, CopySource, InMemory, StoreError};

/// Parts of one file's commit sent at once.
const PARTS_IN_PARALLEL: usize = 4;

/// One PutObject of the whole file. Returns the new ETag and, for a body small enough to have
/// been built in memory, the body (for cache promotion); a larger one is streamed.
pub(super) async fn put_whole(
    inner: &Inner,
    target: &Target,
    snapshot: &Arc<Snapshot>,
) -> Result<(String, Option<Bytes>), WriteError> {
    if snapshot.size > IN_MEMORY_BODY {
        let body = snapshot_body(inner, target, snapshot, 0..snapshot.size);
        let put = target
            .store
            .put_with_metadata(&target.key, body, &snapshot.metadata)
            .await
            .map_err(|source| WriteError::store(target, source))?;
        return Ok((put.etag, None));
    }
    let reservation = inner.buffers.hold(snapshot.size).await;
    let body = snapshot
        .bytes(&inner.reader, target, 0..snapshot.size)
        .await?;
    let body = buffered(body, reservation, &inner.metrics);
    let put = if snapshot.metadata.is_empty() {
        target.store.put(&target.key, body.clone()).await
    } else {
        let source = Arc::new(InMemory(body.clone()));
        (target.store)
            .put_with_metadata(&target.key, source, &snapshot.metadata)
            .await
    }
    .map_err(|source| WriteError::store(target, source))?;
    Ok((put.etag, Some(body)))
}

/// A multipart upload of the whole file: parts streamed earlier and still current are reused,
/// unchanged ranges of the base object copied server-side, the rest uploaded.
pub(super) async fn multipart(
    inner: &Arc<Inner>,
    file: &Arc<DirtyFile>,
    snapshot: &Arc<Snapshot>,
) -> Result<(String, u64), WriteError> {
    let target = &file.target;
    let _streaming_stopped = StopStreaming::wait(file).await;
    let (upload_id, part_size, metadata_version) =
        ensure_upload(inner, file, snapshot.size).await?;
    let planned = {
        let state = file.state();
        plan::plan_parts(
            snapshot.size,
            part_size,
            snapshot.base_len,
            &snapshot.dirty,
            |index, range| state.part_current(index, range),
        )
    };
    let sent: Result<Vec<CompletedPart>, WriteError> = stream::iter(planned)
        .map(|part| send_part(inner, file, snapshot, &upload_id, part))
        .buffered(PARTS_IN_PARALLEL)
        .try_collect()
        .await;
    let parts = match sent {
        Ok(parts) => parts,
        Err(e) => {
            if let WriteError::Store { source, .. } = &e
                && matches!(source.root(), StoreError::NotFound { .. })
            {
                forget_upload(file, &upload_id);
            }
            return Err(e);
        }
    };
    let etag = match target
        .store
        .complete_multipart(&target.key, &upload_id, &parts)
        .await
    {
        Ok(done) => done.etag,
        // A retried completion whose first answer was lost finds the upload gone: if the object
        // is the one these parts make, it landed, and that is no error.
        Err(e) if matches!(e.root(), StoreError::NotFound { .. }) => {
            match landed_anyway(target, &parts, snapshot.size).await {
                Some(etag) => etag,
                None => {
                    forget_upload(file, &upload_id);
                    return Err(WriteError::store(target, e));
                }
            }
        }
        Err(e) => return Err(WriteError::store(target, e)),
    };
    inner
        .journal
        .remove(target.store.as_ref(), &target.key, &upload_id)
        .await;
    Ok((etag, metadata_version))
}

pub(super) fn upload_vanished<T>(sent: &Result<T, WriteError>) -> bool {
    matches!(sent, Err(WriteError::Store { source, .. })
        if matches!(source.root(), StoreError::NotFound { .. }))
}

/// After an upload vanished (aborted by someone else, or completed by an attempt whose answer
/// was lost), the next commit starts a new one.
fn forget_upload(file: &DirtyFile, upload_id: &str) {
    let mut state = file.state();
    if state.upload.as_ref().is_some_and(|u| u.id == upload_id) {
        state.upload = None;
        state.part_changed.clear();
    }
}

/// The object's ETag if the store holds, at `target`, exactly the object `parts` complete into:
/// S3 and garage name a multipart object by the MD5 of its parts' MD5s, with the part count.
async fn landed_anyway(target: &Target, parts: &[CompletedPart], size: u64) -> Option<String> {
    let expected = multipart_etag(parts)?;
    let head = target.store.head(&target.key).await.ok()??;
    let landed = head.size == size && head.etag.trim_matches('"') == expected;
    tracing::info!(backend = %target.backend, key = %target.key, landed,
        "a multipart completion was retried and found its upload gone; checked the object");
    landed.then_some(head.etag)
}

/// `hex(md5(md5(part 1) ‖ … ‖ md5(part n)))-n`, or `None` when a part's ETag is not an MD5.
fn multipart_etag(parts: &[CompletedPart]) -> Option<String> {
    use md5::Digest;
    let mut hasher = md5::Md5::new();
    for part in parts {
        let hex = part.etag.trim_matches('"');
        if hex.len() != 32 {
            return None;
        }
        for pair in hex.as_bytes().chunks(2) {
            let pair = std::str::from_utf8(pair).ok()?;
            hasher.update([u8::from_str_radix(pair, 16).ok()?]);
        }
    }
    let digest = hasher.finalize();
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    Some(format!("{hex}-{}", parts.len()))
}

/// Sends (or reuses) one planned part and records it as uploaded, so a retried commit reuses it.
async fn send_part(
    inner: &Inner,
    file: &DirtyFile,
    snapshot: &Arc<Snapshot>,
    upload_id: &str,
    part: PlannedPart,
) -> Result<CompletedPart, WriteError> {
    let target = &file.target;
    let number = part.number();
    let completed = match part.source {
        Source::Reuse => {
            let state = file.state();
            let reused = state
                .upload
                .as_ref()
                .and_then(|u| u.parts.get(&part.index))
                .map(|p| p.part.clone());
            // Planned as reusable under this same commit lock, with streaming stopped.
            return reused.ok_or(WriteError::Internal("a reusable part vanished"));
        }
        Source::Copy => {
            let base = snapshot
                .base
                .as_ref()
                .ok_or(WriteError::Internal("a part copied from no base"))?;
            target
                .store
                .upload_part_copy(
                    &target.key,
                    upload_id,
                    number,
                    CopySource {
                        key: &base.key,
                        range: part.range.clone(),
                        if_match: Some(&base.etag),
                    },
                )
                .await
        }
        Source::Upload => {
            let body = snapshot_body(inner, target, snapshot, part.range.clone());
            target
                .store
                .upload_part_from(&target.key, upload_id, number, body)
                .await
        }
    }
    .map_err(|source| WriteError::store(target, source))?;
    remember_part(
        file,
        upload_id,
        part.index,
        snapshot.generation,
        part.range,
        completed.clone(),
    );
    Ok(completed)
}

pub(super) fn remember_part(
    file: &DirtyFile,
    upload_id: &str,
    index: u64,
    generation: u64,
    range: Range<u64>,
    part: CompletedPart,
) {
    let mut state = file.state();
    if let Some(upload) = state.upload.as_mut().filter(|u| u.id == upload_id) {
        upload.parts.insert(
            index,
            UploadedPart {
                part,
                generation,
                range,
            },
        );
    }
}

/// The file's multipart upload, started if there is none (or if the one streamed into has a
/// part size too small for the file's size now), and journalled. Returns its id, part size and
/// the version of the metadata it was created with.
pub(super) async fn ensure_upload(
    inner: &Inner,
    file: &DirtyFile,
    size: u64,
) -> Result<(String, u64, u64), WriteError> {
    let _one_at_a_time = file.upload_lock.lock().await;
    let (existing, stale) = {
        let mut state = file.state();
        match state.upload.take() {
            Some(u) if plan::part_count(size, u.part_size) <= plan::MAX_PARTS => {
                let found = (u.id.clone(), u.part_size, u.metadata_version);
                state.upload = Some(u);
                (Some(found), None)
            }
            other => (None, other),
        }
    };
    if let Some(stale) = stale {
        abort_in_background(&inner.journal, &file.target, stale.id);
    }
    if let Some(found) = existing {
        return Ok(found);
    }
    let target = &file.target;
    let (metadata, metadata_version) = {
        let state = file.state();
        (state.metadata.clone(), state.metadata_version)
    };
    let id = target
        .store
        .create_multipart_with_metadata(&target.key, &metadata)
        .await
        .map_err(|source| WriteError::store(target, source))?;
    inner
        .journal
        .record(target.store.as_ref(), &target.key, &id)
        .await;
    let part_size = plan::part_size_for(size);
    let mut state = file.state();
    if state.deleted {
        drop(state);
        abort_in_background(&inner.journal, target, id.clone());
        return Err(WriteError::Deleted);
    }
    state.upload = Some(Upload {
        id: id.clone(),
        part_size,
        metadata_version,
        parts: Default::default(),
    });
    state.part_changed.clear();
    Ok((id, part_size, metadata_version))
}

/// Aborts a multipart upload that will not be completed, on its own task (nobody waits). Its
/// journal entry goes once it is aborted; one that cannot be is left for the next process.
pub(in crate::write) fn abort_in_background(
    journal: &Arc<UploadJournal>,
    target: &Target,
    upload_id: String,
) {
    let (journal, target) = (Arc::clone(journal), target.clone());
    tokio::spawn(async move {
        match target.store.abort_multipart(&target.key, &upload_id).await {
            Ok(()) => {
                journal
                    .remove(target.store.as_ref(), &target.key, &upload_id)
                    .await;
            }
            Err(e) => tracing::warn!(backend = %target.backend, key = %target.key, error = %e,
                "cannot abort an abandoned multipart upload; it stays journalled, and the next \
                 msfs process to mount the bucket after this one exits aborts it"),
        }
    });
}
