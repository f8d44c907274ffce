//! `PseudoStore`: a read-only object store whose namespace and contents are computed, never
//! stored, so that scale tests can browse 10M–100M objects on one small machine.
//!
//! The tree: the root (depth 0) holds `files_at_depth_0` files and `subdirectories_at_depth_0`
//! directories; every directory at depth `d` holds `files_at_depth_d` files and
//! `subdirectories_at_depth_d` sub-directories, named by `dir_name_format` / `file_name_format`
//! (the same names in every directory of one depth). The tree hangs at the store's root, so a
//! backend `prefix` such as `dir_00000000/` shows one subtree. Every file is `file_size` bytes of
//! [`pseudo_fill`]'s pattern, which depends only on (key, offset); its ETag only on (key, size);
//! its mtime is fixed. Directories have no marker objects.
//!
//! **Listing is computed, never materialized.** The children of a directory at depth `d` are
//! the same sorted sequence for every such directory. It is cut into *runs*: numbers whose
//! formatted names have one length. Within a run, names share their literal prefix and suffix
//! and have digit fields of one width (padding `0` and ` ` sort before every digit), so byte
//! order is numeric order and a position is found by binary search over the number. The
//! directory's listing is the merge of its runs (dirs as `name/`, files as `name`): with the
//! default fixed-width formats that is two runs, dirs then files; a format like `f%d` adds one
//! run per digit count (at most ~23 per kind), so it costs a few more string comparisons per
//! entry but is still exact and needs no memory per object. Seeking to a `start_after` or
//! continuation key costs O(runs · log n) per tree level, each further entry O(runs): a page
//! of a 10M-file directory costs O(page), wherever it starts.
//!
//! Listing semantics match the other stores here ([`super::FileStore`], [`super::RamStore`]):
//! an entry — object key or common prefix — is listed when it sorts strictly after
//! `max(start_after, continuation)`, and a continuation token is the last entry of its page.
//!
//! Each operation takes at least its configured `min_latency_*` (a tokio sleep), to imitate a
//! remote store: `head` → `stat_file`, reads → `read_file`, a delimited listing →
//! `list_directory` (`stat_directory` when it asks for a single key, which is how the namespace
//! asks "is this a directory?"), a flat listing → `list_objects`, a delete → `delete_file`
//! (before it is refused). Every write fails with an `Io` error of kind
//! [`std::io::ErrorKind::ReadOnlyFilesystem`], which the filesystem reports as `EROFS`.
//!
//! Where things live: the `ObjectStore` implementation (pacing, refusals) here; the shape of the
//! tree and which keys exist in `tree`; the name formats in `names`; the computed listing in
//! `list`; the bytes of every object in `pattern`.

mod list;
mod names;
mod pattern;
mod tree;

use std::io;
use std::ops::Range;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use bytes::Bytes;

pub use pattern::{pseudo_byte, pseudo_fill};

use super::{
    ChunkSink, CompletedPart, CopySource, ListPage, ListRequest, ObjectMeta, ObjectStore,
    PendingUpload, PutResult, Result, StoreError,
};
use crate::config::{PseudoConfig, PseudoLatencies};
use pattern::fnv1a;
use tree::Tree;

/// Bytes generated per chunk handed to a `get_range_into` sink.
const FILL_CHUNK: usize = 256 * 1024;

fn read_only(op: &'static str, key: &str) -> StoreError {
    StoreError::Io {
        op,
        key: key.to_string(),
        source: io::Error::new(
            io::ErrorKind::ReadOnlyFilesystem,
            "PSEUDO backends are generated and read-only",
        ),
    }
}

/// See the module docs.
#[derive(Debug)]
pub struct PseudoStore {
    id: String,
    tree: Tree,
    page_size: usize,
    latency: PseudoLatencies,
}

impl PseudoStore {
    pub fn new(config: &PseudoConfig) -> Result<PseudoStore> {
        let tree = Tree::new(config).map_err(StoreError::Setup)?;
        Ok(PseudoStore {
            // Differently configured stores never share cache entries.
            id: format!("pseudo:{:016x}", fnv1a(format!("{config:?}").as_bytes())),
            tree,
            page_size: usize::try_from(config.max_list_page_size)
                .unwrap_or(usize::MAX)
                .max(1),
            latency: config.min_latency.clone(),
        })
    }

    async fn pace(started: Instant, latency: Duration) {
        if !latency.is_zero() {
            tokio::time::sleep_until((started + latency).into()).await;
        }
    }

    /// The clamped range of `key`'s bytes to read, after the existence and ETag checks.
    fn readable(&self, key: &str, range: Range<u64>, etag: Option<&str>) -> Result<Range<u64>> {
        if !self.tree.is_file(key) {
            return Err(StoreError::NotFound {
                op: "get",
                key: key.to_string(),
            });
        }
        if let Some(expected) = etag
            && self.tree.meta(key.to_string()).etag != expected
        {
            return Err(StoreError::Changed {
                op: "get",
                key: key.to_string(),
                expected: expected.to_string(),
            });
        }
        let end = range.end.min(self.tree.file_size);
        Ok(range.start.min(end)..end)
    }
}

#[async_trait]
impl ObjectStore for PseudoStore {
    fn id(&self) -> &str {
        &self.id
    }

    async fn head(&self, key: &str) -> Result<Option<ObjectMeta>> {
        let started = Instant::now();
        let found = self
            .tree
            .is_file(key)
            .then(|| self.tree.meta(key.to_string()));
        Self::pace(started, self.latency.stat_file).await;
        Ok(found)
    }

    async fn get_range(&self, key: &str, range: Range<u64>, etag: Option<&str>) -> Result<Bytes> {
        let started = Instant::now();
        let range = self.readable(key, range, etag);
        Self::pace(started, self.latency.read_file).await;
        let range = range?;
        let mut body = vec![0; (range.end - range.start) as usize];
        pseudo_fill(key, range.start, &mut body);
        Ok(Bytes::from(body))
    }

    async fn get_range_into(
        &self,
        key: &str,
        range: Range<u64>,
        etag: Option<&str>,
        sink: &mut ChunkSink<'_>,
    ) -> Result<u64> {
        let started = Instant::now();
        let range = self.readable(key, range, etag);
        Self::pace(started, self.latency.read_file).await;
        let range = range?;
        let len = range.end - range.start;
        let mut chunk = vec![0; FILL_CHUNK.min(len as usize)];
        let mut done = 0;
        while done < len {
            let n = (len - done).min(chunk.len() as u64) as usize;
            pseudo_fill(key, range.start + done, &mut chunk[..n]);
            sink(done, &chunk[..n]);
            done += n as u64;
        }
        Ok(len)
    }

    /// A flat page is computed as cheaply as a delimited one, and costs its configured latency:
    /// the namespace lists subtrees (and probes with a flat page) only where that latency is no
    /// longer than asking whether a directory exists.
    fn cheap_flat_listing(&self) -> bool {
        self.latency.list_objects <= self.latency.stat_directory
    }

    async fn list(&self, request: &ListRequest) -> Result<ListPage> {
        let started = Instant::now();
        let limit = request
            .max_keys
            .map_or(self.page_size, |m| (m as usize).clamp(1, self.page_size));
        let page = self.tree.list(request, limit);
        let latency = match (request.delimited, request.max_keys) {
            (true, Some(1)) => self.latency.stat_directory,
            (true, _) => self.latency.list_directory,
            (false, _) => self.latency.list_objects,
        };
        Self::pace(started, latency).await;
        Ok(page)
    }

    async fn put(&self, key: &str, _body: Bytes) -> Result<PutResult> {
        Err(read_only("put", key))
    }

    async fn create_multipart(&self, key: &str) -> Result<String> {
        Err(read_only("create_multipart", key))
    }

    async fn upload_part(
        &self,
        key: &str,
        _upload_id: &str,
        _part_number: i32,
        _body: Bytes,
    ) -> Result<CompletedPart> {
        Err(read_only("upload_part", key))
    }

    async fn upload_part_copy(
        &self,
        key: &str,
        _upload_id: &str,
        _part_number: i32,
        _source: CopySource<'_>,
    ) -> Result<CompletedPart> {
        Err(read_only("upload_part_copy", key))
    }

    async fn complete_multipart(
        &self,
        key: &str,
        _upload_id: &str,
        _parts: &[CompletedPart],
    ) -> Result<PutResult> {
        Err(read_only("complete_multipart", key))
    }

    async fn abort_multipart(&self, key: &str, _upload_id: &str) -> Result<()> {
        Err(read_only("abort_multipart", key))
    }

    /// Nothing is ever being uploaded here.
    async fn list_uploads(&self, _prefix: &str) -> Result<Vec<PendingUpload>> {
        Ok(Vec::new())
    }

    async fn copy(&self, _source_key: &str, dest_key: &str) -> Result<PutResult> {
        Err(read_only("copy", dest_key))
    }

    async fn delete(&self, key: &str) -> Result<()> {
        Self::pace(Instant::now(), self.latency.delete_file).await;
        Err(read_only("delete", key))
    }

    async fn delete_many(&self, keys: &[String]) -> Result<()> {
        Self::pace(Instant::now(), self.latency.delete_file).await;
        Err(read_only("delete", keys.first().map_or("", String::as_str)))
    }
}

#[cfg(test)]
pub(super) mod tests;
