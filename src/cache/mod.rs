//! The read seam between the filesystem and object data.
//!
//! `fs` never fetches object bytes itself: it asks an [`ObjectReader`] for a byte range of one
//! exact object version (key + ETag). [`DirectReader`] does one ranged GET per request and keeps
//! nothing; [`LineCache`], the node-wide line cache, is the reader a process normally shares
//! between all its mounts through `Engines`.

mod error;
mod fetch;
mod line_cache;
#[cfg(test)]
mod object_file_tests;
mod persist;
#[cfg(test)]
mod persist_tests;
#[cfg(test)]
mod pressure_tests;
#[cfg(test)]
mod read_now_tests;
mod stats;
mod storage;
mod table;
#[cfg(test)]
mod tests;
mod tiers;
#[cfg(test)]
mod tiers_tests;

pub use crate::telemetry::CacheStats;
pub use error::CacheError;
pub use line_cache::{LineCache, PinnedObjectFile};

use std::ops::Range;
use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;

use crate::store::{ObjectStore, StoreError};

/// One immutable version of an object: what a reader may cache bytes under.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectVersion {
    pub key: String,
    pub etag: String,
    pub size: u64,
}

#[async_trait]
pub trait ObjectReader: Send + Sync {
    /// Bytes `range` of `object` (clamped to its size). Never returns bytes of another version:
    /// if the object changed, fails with [`StoreError::Changed`].
    ///
    /// `sequential` is the caller's hint that this read continues a stream on the same open
    /// handle; a caching reader reads ahead only then, so random readers cause no useless fetches.
    async fn read(
        &self,
        store: &Arc<dyn ObjectStore>,
        object: &ObjectVersion,
        range: Range<u64>,
        sequential: bool,
    ) -> Result<Bytes, StoreError>;

    /// [`ObjectReader::read`] for a caller that must not wait (a FUSE worker): `Some` when the
    /// bytes are at hand in memory, `None` when they must be fetched or read from a disk, with
    /// nothing started (the caller then calls `read`, with the same `sequential`).
    fn read_now(
        &self,
        _store: &Arc<dyn ObjectStore>,
        _object: &ObjectVersion,
        _range: Range<u64>,
        _sequential: bool,
    ) -> Option<Result<Bytes, StoreError>> {
        None
    }
}

/// Reads straight from the store: one ranged GET per request, nothing kept.
#[derive(Debug, Default)]
pub struct DirectReader;

#[async_trait]
impl ObjectReader for DirectReader {
    async fn read(
        &self,
        store: &Arc<dyn ObjectStore>,
        object: &ObjectVersion,
        range: Range<u64>,
        _sequential: bool,
    ) -> Result<Bytes, StoreError> {
        let end = range.end.min(object.size);
        if range.start >= end {
            return Ok(Bytes::new());
        }
        let etag = (!object.etag.is_empty()).then_some(object.etag.as_str());
        store.get_range(&object.key, range.start..end, etag).await
    }
}
