//! Turning a dirty file into a new object version: one PUT for a small file, a multipart upload
//! for a large one, and the parts streamed ahead of the commit while the application writes.

use std::fs::File;
use std::ops::Range;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use futures::stream::{self, StreamExt, TryStreamExt};

use super::budget::{Budget, Reservation};
use super::durable;
use super::extents::Extents;
use super::file::{DirtyFile, State, Target, Upload, UploadedPart, View};
use super::journal::UploadJournal;
use super::plan::{self, PlannedPart, Source};
use super::read::{assemble, read_plan};
use super::{Inner, WriteError};
use crate::cache::{ObjectReader, ObjectVersion};
use crate::store::{
    BODY_CHUNK, BodySource, CompletedPart, CopySource, InMemory, Metadata, StoreError,
};
use crate::telemetry::Metrics;

/// Parts of one file's commit sent at once.
const PARTS_IN_PARALLEL: usize = 4;

/// What a commit works from: the file as it was when the commit started.
struct Snapshot {
    generation: u64,
    size: u64,
    base: Option<ObjectVersion>,
    base_len: u64,
    dirty: Extents,
    spill: Option<Arc<File>>,
    metadata: Metadata,
    metadata_version: u64,
}

impl Snapshot {
    fn of(state: &State) -> Snapshot {
        Snapshot {
            generation: state.generation,
            size: state.size,
            base: state.base.clone(),
            base_len: state.base_len,
            dirty: state.dirty.clone(),
            spill: state.spill.clone(),
            metadata: state.metadata_now(),
            metadata_version: state.metadata_version,
        }
    }

    /// Bytes `range` of the snapshot, built from the spill file, the base object and zeros.
    /// Callers keep `range` small (a body chunk, or a file below the multipart threshold).
    async fn bytes(
        &self,
        reader: &Arc<dyn ObjectReader>,
        target: &Target,
        range: Range<u64>,
    ) -> Result<Bytes, WriteError> {
        let view = View {
            dirty: &self.dirty,
            base: self.base.as_ref(),
            base_len: self.base_len,
        };
        let pieces = read_plan(&view, range);
        // Not sequential: a commit reads just the base bytes around its writes, and read-ahead
        // would fetch lines nobody needs.
        assemble(pieces, self.spill.clone(), reader, target, false).await
    }
}

/// Bytes `range` of a snapshot as a request body read chunk by chunk (`store::BodySource`):
/// a part of any size costs two chunks of memory while it is sent.
struct SnapshotBody {
    snapshot: Arc<Snapshot>,
    reader: Arc<dyn ObjectReader>,
    target: Target,
    range: Range<u64>,
    /// Each chunk holds its bytes of `write_buffer_limit_bytes` until the request drops it.
    buffers: Arc<Budget>,
    metrics: Arc<Metrics>,
}

/// Bytes that hold their share of the commit buffer bound (and of `msfs_write_buffered_bytes`)
/// for as long as any clone lives.
struct Buffered {
    bytes: Bytes,
    reservation: Reservation,
    metrics: Arc<Metrics>,
}

impl AsRef<[u8]> for Buffered {
    fn as_ref(&self) -> &[u8] {
        &self.bytes
    }
}

impl Drop for Buffered {
    fn drop(&mut self) {
        self.metrics
            .add_buffered_bytes(-(self.reservation.bytes() as i64));
    }
}

/// `bytes`, counted against `reservation` until the last clone is dropped.
fn buffered(bytes: Bytes, reservation: Reservation, metrics: &Arc<Metrics>) -> Bytes {
    metrics.add_buffered_bytes(reservation.bytes() as i64);
    Bytes::from_owner(Buffered {
        bytes,
        reservation,
        metrics: Arc::clone(metrics),
    })
}

impl std::fmt::Debug for SnapshotBody {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SnapshotBody")
            .field("key", &self.target.key)
            .field("range", &self.range)
            .finish_non_exhaustive()
    }
}

#[async_trait::async_trait]
impl BodySource for SnapshotBody {
    fn len(&self) -> u64 {
        self.range.end - self.range.start
    }

    async fn read(&self, range: Range<u64>) -> Result<Bytes, StoreError> {
        let start = self.range.start + range.start;
        let end = self.range.start + range.end;
        let reservation = self.buffers.hold(end - start).await;
        self.snapshot
            .bytes(&self.reader, &self.target, start..end)
            .await
            .map(|bytes| buffered(bytes, reservation, &self.metrics))
            .map_err(|e| match e {
                WriteError::Store { source, .. } => source,
                other => StoreError::Io {
                    op: "read part body",
                    key: self.target.key.clone(),
                    source: std::io::Error::other(other.to_string()),
                },
            })
    }
}

/// Bodies up to this size are built in memory (and so can be promoted into the read cache in
/// one piece); larger ones are streamed.
const IN_MEMORY_BODY: u64 = 8 * BODY_CHUNK;

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

/// The object landed as `etag` with the metadata of version `sent`; while the file's metadata
/// has changed since (a chmod or utime during the commit), replaces it in the store, which
/// costs one CopyObject of the object onto itself. Returns the final ETag and the version the
/// object carries.
async fn settle_metadata(
    file: &DirtyFile,
    mut etag: String,
    mut sent: u64,
) -> Result<(String, u64), WriteError> {
    let target = &file.target;
    loop {
        let (metadata, version) = {
            let state = file.state();
            (state.metadata_now(), state.metadata_version)
        };
        if version == sent {
            return Ok((etag, sent));
        }
        etag = target
            .store
            .replace_metadata(&target.key, &metadata, Some(&etag))
            .await
            .map_err(|source| WriteError::store(target, source))?
            .etag;
        sent = version;
    }
}

/// A commit holds the file's commit lock, so its base can only change under it by another
/// writer's hand: a read of the base (or a part copied from it, sent with `If-Match`) that
/// found another version is a conflict no retry can resolve, not a transient failure.
fn conflict_if_base_replaced(
    error: WriteError,
    snapshot: &Snapshot,
    target: &Target,
) -> WriteError {
    let Some(base) = &snapshot.base else {
        return error;
    };
    let base_changed = match &error {
        WriteError::Store { source, .. } => {
            matches!(source.root(), StoreError::Changed { expected, .. } if *expected == base.etag)
        }
        _ => false,
    };
    if !base_changed {
        return error;
    }
    WriteError::Conflict {
        key: target.key.clone(),
        base: base.etag.clone(),
    }
}

/// Waits for a commit of `file` in flight, then settles a recovered file's base the way its
/// first commit would (`durable::check_base`). For readers: a killed process's commit that
/// landed unrecorded left the recovered file over a version the store no longer has, and a read
/// of the bytes it takes from that base must not wait for (or fail before) the background
/// commit that would find out.
pub(super) async fn settle_base(inner: &Inner, file: &DirtyFile) -> Result<(), WriteError> {
    let _one_at_a_time = file.commit_lock.lock().await;
    rebase_if_landed(inner, file).await
}

/// A recovered file's base checked once (`durable::check_base`); when the killed process's
/// commit had landed, the file is rebased onto that version (clean if it was the whole file,
/// else with what was written after it still dirty). The caller holds the file's commit lock.
async fn rebase_if_landed(inner: &Inner, file: &DirtyFile) -> Result<(), WriteError> {
    let Some(landed) = durable::check_base(inner, file).await? else {
        return Ok(());
    };
    if let Some(base_len) = landed.base_len {
        // `rebase` takes `min(size, low_water)` of the new version as the base.
        let mut state = file.state();
        state.low_water = state.low_water.min(base_len);
    }
    finish(inner, file, landed.generation, landed.version, None).await;
    Ok(())
}

/// The file's content as of `generation` is in the store as `committed`: rebases the file onto
/// it, promotes `body` into the read cache, and tells the commit observer.
async fn finish(
    inner: &Inner,
    file: &DirtyFile,
    generation: u64,
    committed: ObjectVersion,
    body: Option<Bytes>,
) {
    let (size, etag) = (committed.size, committed.etag.clone());
    if let Some(promotion) = rebase(inner, file, generation, committed, body) {
        promotion.admit().await;
    }
    if let Some(observer) = &file.target.observer {
        observer.committed(&file.target.key, size, &etag).await;
    }
}

/// After a successful commit: the new object becomes the base. If nothing was written during
/// the commit the file is clean and its spill data goes; otherwise the dirty extents stay (a
/// superset of what differs from the new base) for the next commit.
fn rebase(
    inner: &Inner,
    file: &DirtyFile,
    generation: u64,
    committed: ObjectVersion,
    body: Option<Bytes>,
) -> Option<Promotion> {
    let target = &file.target;
    if let Some(cache) = &inner.cache {
        // Lines of the replaced version can never be read again (they are keyed by its ETag).
        cache.invalidate(target.store.cache_scope(), &target.key);
    }
    let (released, clean, leftover) = {
        let mut state = file.state();
        state.committed = generation;
        state.commit_landed = true;
        // A commit that lands clears any unreported failure of an earlier one.
        state.failure = None;
        state.stranded = false;
        state.base_len = committed.size.min(state.low_water);
        state.base = Some(committed.clone());
        state.low_water = state.size;
        state.upload = None;
        state.part_changed.clear();
        let clean = !state.is_dirty();
        if clean {
            state.dirty = Extents::new();
        }
        // A clean file lets go of its spill, unless a write between putting its bytes in the
        // spill file and recording them still needs it; otherwise the new base is recorded in
        // the spill log, so a killed process's successor does not read the replaced version.
        let leftover = durable::log_commit(&mut state, clean);
        let released = if clean {
            std::mem::take(&mut state.budgeted)
        } else {
            0
        };
        (released, clean, leftover)
    };
    leftover.dispose(&inner.spares);
    inner.budget.release(released);
    inner.metrics.add_dirty_bytes(-(released as i64));
    match (clean, inner.config.promote, &inner.cache, body) {
        (true, true, Some(cache), Some(body)) => Some(Promotion {
            cache: Arc::clone(cache),
            cache_scope: target.store.cache_scope().to_string(),
            committed,
            body,
        }),
        _ => None,
    }
}

/// Committed bytes to admit into the read cache (`write_cache_promotion`).
struct Promotion {
    cache: Arc<crate::cache::LineCache>,
    cache_scope: String,
    committed: ObjectVersion,
    body: Bytes,
}

impl Promotion {
    /// Admits the bytes; done before the commit returns, so a read right after a close with
    /// `flush_on_close` (or an fsync) finds them. A failure only costs a later fetch.
    async fn admit(self) {
        // Admission copies into the cache's storage: off the async runtime.
        let admitted = tokio::task::spawn_blocking(move || {
            self.cache
                .admit(&self.cache_scope, &self.committed, 0, &self.body)
        })
        .await;
        if let Err(e) = admitted {
            tracing::debug!(error = %e, "promoting written bytes into the cache failed");
        }
    }
}

/// One PutObject of the whole file. Returns the new ETag and, for a body small enough to have
/// been built in memory, the body (for cache promotion); a larger one is streamed.
async fn put_whole(
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

fn snapshot_body(
    inner: &Inner,
    target: &Target,
    snapshot: &Arc<Snapshot>,
    range: Range<u64>,
) -> Arc<dyn BodySource> {
    Arc::new(SnapshotBody {
        snapshot: Arc::clone(snapshot),
        reader: Arc::clone(&inner.reader),
        target: target.clone(),
        range,
        buffers: Arc::clone(&inner.buffers),
        metrics: Arc::clone(&inner.metrics),
    })
}

/// A multipart upload of the whole file: parts streamed earlier and still current are reused,
/// unchanged ranges of the base object copied server-side, the rest uploaded.
async fn multipart(
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

fn upload_vanished<T>(sent: &Result<T, WriteError>) -> bool {
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
pub(super) fn multipart_etag(parts: &[CompletedPart]) -> Option<String> {
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

/// Stops parts from being streamed while a commit sends its own, after waiting for those in
/// flight; streaming resumes when it is dropped.
struct StopStreaming<'a>(&'a DirtyFile);

impl<'a> StopStreaming<'a> {
    async fn wait(file: &'a DirtyFile) -> StopStreaming<'a> {
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

fn remember_part(
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
async fn ensure_upload(
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
pub(super) fn abort_in_background(
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

/// After a write of `start..end`: if the file is large, written by appending, and the write
/// went past the end of a grid part, uploads the parts it finished on their own tasks, so a
/// large file's upload is mostly done when it is closed. (Random writers are left to the
/// commit, which copies what they did not change.) Waits only for a slot to start them
/// (backpressure on writers that outrun the store).
pub(super) async fn stream_finished_parts(
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
pub(super) fn streamed_grid(
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
