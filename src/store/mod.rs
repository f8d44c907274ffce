//! The object-store layer: one trait that every engine above talks to, and its implementations.
//!
//! Engines never see aws-sdk types: they speak [`ObjectStore`] in terms of keys, byte ranges,
//! ETags and [`StoreError`]. That keeps the namespace, cache and write engines testable against
//! the local-directory store and lets new protocols plug in without touching them.

mod aistore_auth;
mod body;
mod build;
mod error;
mod file;
mod instrumented;
mod metadata;
mod pseudo;
mod ram;
mod retry;
mod s3;
#[cfg(test)]
pub(crate) mod testing;

use std::fmt::Debug;
use std::ops::Range;
use std::sync::Arc;
use std::time::SystemTime;

use async_trait::async_trait;
use bytes::Bytes;

pub use body::{BODY_CHUNK, BodySource, InMemory, gather};
pub use build::{open_s3_store, open_store};
pub use error::{RetryKind, StoreError};
pub use file::FileStore;
pub use instrumented::InstrumentedStore;
use metadata::refuse_metadata;
pub use metadata::{
    METADATA_CTIME, METADATA_GID, METADATA_MODE, METADATA_MTIME, METADATA_UID, Metadata,
    format_time, parse_time,
};
pub use pseudo::{PseudoStore, pseudo_byte, pseudo_fill};
pub use ram::RamStore;
pub use retry::{RetryBudget, RetryPolicy, backoff};
pub use s3::{S3Store, decode_listed_key};

pub type Result<T> = std::result::Result<T, StoreError>;

/// S3's largest part (5 GiB) and most parts in one upload (10,000).
pub const MAX_PART_SIZE: u64 = 5 << 30;
pub const MAX_PARTS: u64 = 10_000;
/// The largest object msfs writes to a store that keeps S3's multipart rules: 10,000 parts of
/// 5 GiB, 53,687,091,200,000 bytes (48.8 TiB). Sizes past it are refused with `EFBIG` when they are
/// asked for (write, truncate), never discovered at commit.
pub const MAX_OBJECT_SIZE: u64 = MAX_PARTS * MAX_PART_SIZE;
/// S3's longest key, in bytes of UTF-8.
pub const MAX_KEY_LEN: usize = 1024;

/// Receives a ranged read's bytes as they arrive: `(offset from the range's start, chunk)`.
/// (Spelled out as higher-ranked so `async_trait` leaves the chunk's lifetime alone.)
pub type ChunkSink<'s> = dyn for<'b> FnMut(u64, &'b [u8]) + Send + 's;

/// What a store knows about one object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectMeta {
    /// Full key, including any backend prefix.
    pub key: String,
    pub size: u64,
    /// Identifies the object's bytes: a new ETag means new content. Always present so that cached
    /// bytes can be keyed by it.
    pub etag: String,
    pub last_modified: SystemTime,
}

/// What to list: the keys under `prefix`, in key order, one page at a time.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ListRequest {
    pub prefix: String,
    /// Group keys at the next "/" below the prefix into common prefixes ("sub-directories").
    pub delimited: bool,
    /// Only keys (and common prefixes) strictly after this one: lets several listers split one
    /// huge prefix into key ranges.
    pub start_after: Option<String>,
    /// The `next` token of the previous page.
    pub continuation: Option<String>,
    /// Page size; the store's default when `None`.
    pub max_keys: Option<u32>,
}

impl ListRequest {
    /// Every key under `prefix`, without grouping.
    pub fn flat(prefix: impl Into<String>) -> ListRequest {
        ListRequest {
            prefix: prefix.into(),
            ..ListRequest::default()
        }
    }

    /// The direct children of `prefix`: objects, and common prefixes ending in "/".
    pub fn delimited(prefix: impl Into<String>) -> ListRequest {
        ListRequest {
            delimited: true,
            ..ListRequest::flat(prefix)
        }
    }

    pub fn after(mut self, key: impl Into<String>) -> ListRequest {
        self.start_after = Some(key.into());
        self
    }

    pub fn continuing(mut self, token: Option<String>) -> ListRequest {
        self.continuation = token;
        self
    }

    pub fn max_keys(mut self, max_keys: Option<u32>) -> ListRequest {
        self.max_keys = max_keys;
        self
    }
}

/// One page of a (possibly delimited) listing.
#[derive(Debug, Clone, Default)]
pub struct ListPage {
    pub objects: Vec<ObjectMeta>,
    /// With a delimiter: the "sub-directories", each ending with the delimiter.
    pub common_prefixes: Vec<String>,
    /// Opaque token for the next page; `None` when the listing is complete.
    pub next: Option<String>,
}

/// A part that has been uploaded into a multipart upload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompletedPart {
    pub part_number: i32,
    pub etag: String,
}

/// What an [`ObjectStore::upload_part_copy`] copies: a byte range of one object, optionally only
/// while that object still has the ETag the caller planned around.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CopySource<'a> {
    pub key: &'a str,
    pub range: Range<u64>,
    /// Copy only while the source has this ETag (S3's `x-amz-copy-source-if-match`), else fail
    /// with [`StoreError::Changed`]. A commit copies the ranges nobody wrote from the version
    /// they were written over; if another writer replaced that object meanwhile, copying from
    /// what is there now would mix two versions into one file.
    pub if_match: Option<&'a str>,
}

impl<'a> CopySource<'a> {
    /// Bytes `range` of whatever version `key` has when the copy runs.
    pub fn any_version(key: &'a str, range: Range<u64>) -> CopySource<'a> {
        CopySource {
            key,
            range,
            if_match: None,
        }
    }
}

/// A multipart upload started and neither completed nor aborted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PendingUpload {
    pub key: String,
    pub upload_id: String,
    pub initiated: SystemTime,
}

/// Result of a write that created a new version of an object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PutResult {
    pub etag: String,
}

/// The operations msfs needs from an object store.
///
/// All keys are full keys (the backend's prefix already applied). Implementations retry transient
/// failures themselves, so an error returned here is final for this attempt.
#[async_trait]
pub trait ObjectStore: Send + Sync + Debug {
    /// A stable identity for cache keys: two stores with the same id serve the same bytes for the
    /// same (key, ETag).
    fn id(&self) -> &str;

    /// The key of this store's bytes in the process-wide line cache: its id, narrowed by who
    /// signs its requests when different principals may reach one bucket (CSI volumes with
    /// different credentials). A line fetched with one principal's permission must never answer
    /// another principal's read that the store itself might refuse.
    fn cache_scope(&self) -> &str {
        self.id()
    }

    /// Metadata of one object, or `None` when it does not exist.
    async fn head(&self, key: &str) -> Result<Option<ObjectMeta>>;

    /// Bytes `range` of object `key`. When `etag` is given and the object no longer has that ETag,
    /// fails with [`StoreError::Changed`] rather than returning bytes of another version. The
    /// returned buffer is exactly `range.len()` long unless the object is shorter.
    async fn get_range(&self, key: &str, range: Range<u64>, etag: Option<&str>) -> Result<Bytes>;

    /// Like [`ObjectStore::get_range`], but hands the bytes to `sink` as they arrive, each chunk
    /// with its offset from `range.start`, and returns how many bytes the range held. Lets the
    /// line cache write a fetch straight into its storage instead of first gathering it into
    /// one buffer. A retried attempt starts again at offset 0, so `sink` must treat a chunk as
    /// "these bytes are at this offset" rather than appending; what a retry resends is what the
    /// earlier attempt delivered (with `etag`, every attempt reads that one version; a broken
    /// attempt is cut short, never altered). The default gathers the range
    /// with `get_range` and hands it over in one chunk.
    async fn get_range_into(
        &self,
        key: &str,
        range: Range<u64>,
        etag: Option<&str>,
        sink: &mut ChunkSink<'_>,
    ) -> Result<u64> {
        let bytes = self.get_range(key, range, etag).await?;
        sink(0, &bytes);
        Ok(bytes.len() as u64)
    }

    /// One page of the listing `request` describes.
    async fn list(&self, request: &ListRequest) -> Result<ListPage>;

    /// Whether a page of a flat listing (no delimiter) costs about what a delimited page does,
    /// so that a directory's whole subtree may be listed at once (see `fs::subtree`). True for
    /// stores that page any listing out of a sorted key index (S3 and its kind, memory); false
    /// where a flat page means walking the whole tree below the prefix (a local directory).
    fn cheap_flat_listing(&self) -> bool {
        true
    }

    async fn put(&self, key: &str, body: Bytes) -> Result<PutResult>;

    /// Like [`ObjectStore::put`], with a body read on demand (see `upload_part_from`).
    async fn put_from(&self, key: &str, body: Arc<dyn BodySource>) -> Result<PutResult> {
        let bytes = gather(body.as_ref()).await?;
        self.put(key, bytes).await
    }

    /// Starts a multipart upload and returns its upload id.
    async fn create_multipart(&self, key: &str) -> Result<String>;

    async fn upload_part(
        &self,
        key: &str,
        upload_id: &str,
        part_number: i32,
        body: Bytes,
    ) -> Result<CompletedPart>;

    /// Like [`ObjectStore::upload_part`], with a body read on demand from `body` (see [`body`]):
    /// a store that can stream sends it in bounded chunks. The default gathers it, which suits
    /// the stores that keep the bytes in memory or on local disk anyway.
    async fn upload_part_from(
        &self,
        key: &str,
        upload_id: &str,
        part_number: i32,
        body: Arc<dyn BodySource>,
    ) -> Result<CompletedPart> {
        let bytes = gather(body.as_ref()).await?;
        self.upload_part(key, upload_id, part_number, bytes).await
    }

    /// Whether what the store holds outlives this process. A RAM store's does not: the next
    /// process's store of the same name starts empty, so a killed process's unsaved writes to
    /// it are not committed there (`daemon::open_backend_settings`).
    fn outlives_process(&self) -> bool {
        true
    }

    /// The largest object this store can be asked to hold.
    fn max_object_size(&self) -> u64 {
        MAX_OBJECT_SIZE
    }

    /// Fills a part server-side from a range of another object (see [`CopySource`]).
    async fn upload_part_copy(
        &self,
        key: &str,
        upload_id: &str,
        part_number: i32,
        source: CopySource<'_>,
    ) -> Result<CompletedPart>;

    async fn complete_multipart(
        &self,
        key: &str,
        upload_id: &str,
        parts: &[CompletedPart],
    ) -> Result<PutResult>;

    async fn abort_multipart(&self, key: &str, upload_id: &str) -> Result<()>;

    /// Every multipart upload in progress under `prefix` (all pages).
    async fn list_uploads(&self, prefix: &str) -> Result<Vec<PendingUpload>>;

    /// Copies an object with its metadata.
    async fn copy(&self, source_key: &str, dest_key: &str) -> Result<PutResult>;

    /// Whether objects keep the user metadata they are written with (S3 and the RAM store).
    /// A store that does not refuses every non-empty [`Metadata`] it is given.
    fn keeps_metadata(&self) -> bool {
        false
    }

    /// Like [`ObjectStore::head`], with the object's user metadata.
    async fn head_with_metadata(&self, key: &str) -> Result<Option<(ObjectMeta, Metadata)>> {
        Ok(self.head(key).await?.map(|meta| (meta, Metadata::new())))
    }

    /// Like [`ObjectStore::put_from`], the object carrying `metadata`.
    async fn put_with_metadata(
        &self,
        key: &str,
        body: Arc<dyn BodySource>,
        metadata: &Metadata,
    ) -> Result<PutResult> {
        refuse_metadata("put", key, metadata)?;
        self.put_from(key, body).await
    }

    /// Like [`ObjectStore::create_multipart`], the completed object carrying `metadata`.
    async fn create_multipart_with_metadata(
        &self,
        key: &str,
        metadata: &Metadata,
    ) -> Result<String> {
        refuse_metadata("create_multipart", key, metadata)?;
        self.create_multipart(key).await
    }

    /// Replaces the user metadata of an existing object and keeps its bytes: in S3 a CopyObject
    /// of the object onto itself, never a re-upload. With `if_match`, only while the object
    /// still has that ETag (else [`StoreError::Changed`]), so a version another writer put
    /// meanwhile does not get metadata meant for the one it replaced.
    async fn replace_metadata(
        &self,
        key: &str,
        metadata: &Metadata,
        if_match: Option<&str>,
    ) -> Result<PutResult> {
        let _ = if_match;
        refuse_metadata("replace_metadata", key, metadata)?;
        Err(StoreError::Setup(format!(
            "replace_metadata {key}: this store keeps no object metadata"
        )))
    }

    /// Deletes one object; deleting a missing object succeeds, as in S3.
    async fn delete(&self, key: &str) -> Result<()>;

    async fn delete_many(&self, keys: &[String]) -> Result<()>;
}
