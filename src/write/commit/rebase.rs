//! After a commit lands: the file rebased onto the new version (clean, or with what was written
//! meanwhile still dirty), the committed bytes promoted into the read cache, metadata changed
//! during the commit settled, and a base replaced under the commit told apart as a conflict.

use std::sync::Arc;

use bytes::Bytes;

use super::super::durable;
use super::super::extents::Extents;
use super::super::file::{DirtyFile, Target};
use super::super::{Inner, WriteError};
use super::snapshot::Snapshot;
use crate::cache::ObjectVersion;
use crate::store::StoreError;

/// The object landed as `etag` with the metadata of version `sent`; while the file's metadata
/// has changed since (a chmod or utime during the commit), replaces it in the store, which
/// costs one CopyObject of the object onto itself. Returns the final ETag and the version the
/// object carries.
pub(super) async fn settle_metadata(
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
pub(super) fn conflict_if_base_replaced(
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
pub(in crate::write) async fn settle_base(
    inner: &Inner,
    file: &DirtyFile,
) -> Result<(), WriteError> {
    let _one_at_a_time = file.commit_lock.lock().await;
    rebase_if_landed(inner, file).await
}

/// A recovered file's base checked once (`durable::check_base`); when the killed process's
/// commit had landed, the file is rebased onto that version (clean if it was the whole file,
/// else with what was written after it still dirty). The caller holds the file's commit lock.
pub(super) async fn rebase_if_landed(inner: &Inner, file: &DirtyFile) -> Result<(), WriteError> {
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
pub(super) async fn finish(
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
