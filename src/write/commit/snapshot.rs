//! What a commit works from: the file as it was when the commit started, and bytes of it as a
//! request body read chunk by chunk, each chunk held against the commit buffer bound.

use std::fs::File;
use std::ops::Range;
use std::sync::Arc;

use bytes::Bytes;

use super::super::budget::{Budget, Reservation};
use super::super::extents::Extents;
use super::super::file::{State, Target, View};
use super::super::read::{assemble, read_plan};
use super::super::{Inner, WriteError};
use crate::cache::{ObjectReader, ObjectVersion};
use crate::store::{BODY_CHUNK, BodySource, Metadata, StoreError};
use crate::telemetry::Metrics;

/// What a commit works from: the file as it was when the commit started.
pub(super) struct Snapshot {
    pub generation: u64,
    pub size: u64,
    pub base: Option<ObjectVersion>,
    pub base_len: u64,
    pub dirty: Extents,
    spill: Option<Arc<File>>,
    pub metadata: Metadata,
    pub metadata_version: u64,
}

impl Snapshot {
    pub fn of(state: &State) -> Snapshot {
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
    pub async fn bytes(
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
pub(super) fn buffered(bytes: Bytes, reservation: Reservation, metrics: &Arc<Metrics>) -> Bytes {
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
pub(super) const IN_MEMORY_BODY: u64 = 8 * BODY_CHUNK;

pub(super) fn snapshot_body(
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
