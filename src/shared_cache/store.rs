//! The origin store as the line cache sees it with a shared cache configured: every method is
//! the origin's, except reads of one version (a GET with an ETag), which ask the shared cache
//! first and fill it after an origin read.

use std::ops::Range;
use std::sync::Arc;

use async_trait::async_trait;
use bytes::{Bytes, BytesMut};

use super::SharedCache;
use super::object::LineId;
use crate::store::{
    BodySource, ChunkSink, CompletedPart, CopySource, ListPage, ListRequest, Metadata, ObjectMeta,
    ObjectStore, PendingUpload, PutResult, Result,
};

#[derive(Debug)]
pub(super) struct SharedCachedStore {
    pub(super) origin: Arc<dyn ObjectStore>,
    pub(super) shared: Arc<SharedCache>,
}

impl SharedCachedStore {
    /// Bytes `range` of `key` at `etag`, to `sink`: from the shared cache when it holds every
    /// line of the range, else from the origin (then the lines it lacked are filled).
    async fn read_through(
        &self,
        key: &str,
        range: Range<u64>,
        etag: &str,
        sink: &mut ChunkSink<'_>,
    ) -> Result<u64> {
        let size = self.shared.line_size;
        // The line cache asks for whole lines; anything else is not worth a shared lookup.
        if range.is_empty() || !range.start.is_multiple_of(size) {
            return self
                .origin
                .get_range_into(key, range, Some(etag), sink)
                .await;
        }
        let first = range.start / size;
        let ids: Vec<LineId> = (first..range.end.div_ceil(size))
            .map(|line| LineId {
                scope: self.origin.cache_scope().to_string(),
                key: key.to_string(),
                etag: etag.to_string(),
                line_size: size,
                line,
            })
            .collect();
        let found = self.shared.look_up(&ids).await;
        if let Some(lines) = &found
            && let Some(served) = serve(lines, &range, size, sink)
        {
            self.shared.metrics.hits(ids.len() as u64, served);
            return Ok(served);
        }
        // Lines to fill: those the shared cache answered it lacks (not when it failed: a
        // failing store would only fail the PUTs too).
        let missing: Vec<usize> = match &found {
            Some(lines) => (0..ids.len()).filter(|&i| lines[i].is_none()).collect(),
            None => Vec::new(),
        };
        if found.is_some() {
            self.shared.metrics.misses(ids.len() as u64);
        }
        self.read_origin(key, range, etag, &ids, &missing, sink)
            .await
    }

    /// Reads `range` from the origin to `sink`, keeping a copy of lines `missing` (indexes into
    /// `ids`) for the shared cache when the fill buffer has room for them.
    async fn read_origin(
        &self,
        key: &str,
        range: Range<u64>,
        etag: &str,
        ids: &[LineId],
        missing: &[usize],
        sink: &mut ChunkSink<'_>,
    ) -> Result<u64> {
        let size = self.shared.line_size;
        let wanted = range.end - range.start;
        // Whole lines, so that the last one can be filled: the origin clamps the range to the
        // object's size, and a body shorter than asked says the object ends there.
        let whole = range.start..range.start + ids.len() as u64 * size;
        let whole_len = whole.end - whole.start;
        let room = match missing.is_empty() {
            true => None,
            false => {
                let room = self.shared.filler.reserve(whole_len);
                if room.is_none() {
                    self.shared
                        .metrics
                        .fill_dropped(missing.len() as u64, "memory");
                }
                room
            }
        };
        let Some(room) = room else {
            return self
                .origin
                .get_range_into(key, range, Some(etag), sink)
                .await;
        };
        let mut copy = vec![0u8; whole_len as usize];
        let received = self
            .origin
            .get_range_into(key, whole, Some(etag), &mut |offset, chunk| {
                let at = offset as usize;
                if let Some(into) = copy.get_mut(at..at + chunk.len()) {
                    into.copy_from_slice(chunk);
                }
                if offset < wanted {
                    let n = chunk.len().min((wanted - offset) as usize);
                    sink(offset, &chunk[..n]);
                }
            })
            .await?;
        let ended = received < whole_len;
        let copy = Bytes::from(copy).slice(..received as usize);
        let mut lines = Vec::with_capacity(missing.len());
        for &i in missing {
            let start = i as u64 * size;
            if start >= received {
                continue;
            }
            let len = size.min(received - start);
            // A line shorter than the line size is whole only at the object's end.
            if len == size || ended {
                lines.push((
                    ids[i].clone(),
                    copy.slice(start as usize..(start + len) as usize),
                ));
            }
        }
        self.shared.fill(lines, room);
        Ok(received.min(wanted))
    }
}

/// Hands `range` to `sink` from `lines` (each the payload of one line from `range.start`'s),
/// when every line is there and long enough. Returns the bytes served.
fn serve(
    lines: &[Option<Bytes>],
    range: &Range<u64>,
    size: u64,
    sink: &mut ChunkSink<'_>,
) -> Option<u64> {
    let last = lines.len() - 1;
    for (i, line) in lines.iter().enumerate() {
        let len = line.as_ref()?.len() as u64;
        let end = range.start + i as u64 * size + len;
        // Every line but the last is whole; the last reaches the end of the range (a shorter
        // one would mean the caller asked past the object's end: the origin answers that).
        if (i < last && len != size) || (i == last && end < range.end) {
            return None;
        }
    }
    let wanted = range.end - range.start;
    for (i, line) in lines.iter().enumerate() {
        let line = line.as_ref()?;
        let offset = i as u64 * size;
        let n = (line.len() as u64).min(wanted - offset) as usize;
        sink(offset, &line[..n]);
    }
    Some(wanted)
}

#[async_trait]
impl ObjectStore for SharedCachedStore {
    fn id(&self) -> &str {
        self.origin.id()
    }

    fn cache_scope(&self) -> &str {
        self.origin.cache_scope()
    }

    async fn head(&self, key: &str) -> Result<Option<ObjectMeta>> {
        self.origin.head(key).await
    }

    async fn get_range(&self, key: &str, range: Range<u64>, etag: Option<&str>) -> Result<Bytes> {
        let Some(etag) = etag else {
            return self.origin.get_range(key, range, None).await;
        };
        let mut out = BytesMut::new();
        let got = self
            .read_through(key, range, etag, &mut |offset, chunk| {
                let at = offset as usize;
                if out.len() < at + chunk.len() {
                    out.resize(at + chunk.len(), 0);
                }
                out[at..at + chunk.len()].copy_from_slice(chunk);
            })
            .await?;
        out.truncate(got as usize);
        Ok(out.freeze())
    }

    async fn get_range_into(
        &self,
        key: &str,
        range: Range<u64>,
        etag: Option<&str>,
        sink: &mut ChunkSink<'_>,
    ) -> Result<u64> {
        match etag {
            Some(etag) => self.read_through(key, range, etag, sink).await,
            None => self.origin.get_range_into(key, range, None, sink).await,
        }
    }

    async fn list(&self, request: &ListRequest) -> Result<ListPage> {
        self.origin.list(request).await
    }

    fn cheap_flat_listing(&self) -> bool {
        self.origin.cheap_flat_listing()
    }

    async fn put(&self, key: &str, body: Bytes) -> Result<PutResult> {
        self.origin.put(key, body).await
    }

    async fn put_from(&self, key: &str, body: Arc<dyn BodySource>) -> Result<PutResult> {
        self.origin.put_from(key, body).await
    }

    async fn create_multipart(&self, key: &str) -> Result<String> {
        self.origin.create_multipart(key).await
    }

    async fn upload_part(
        &self,
        key: &str,
        upload_id: &str,
        part_number: i32,
        body: Bytes,
    ) -> Result<CompletedPart> {
        self.origin
            .upload_part(key, upload_id, part_number, body)
            .await
    }

    async fn upload_part_from(
        &self,
        key: &str,
        upload_id: &str,
        part_number: i32,
        body: Arc<dyn BodySource>,
    ) -> Result<CompletedPart> {
        self.origin
            .upload_part_from(key, upload_id, part_number, body)
            .await
    }

    fn outlives_process(&self) -> bool {
        self.origin.outlives_process()
    }

    fn max_object_size(&self) -> u64 {
        self.origin.max_object_size()
    }

    async fn upload_part_copy(
        &self,
        key: &str,
        upload_id: &str,
        part_number: i32,
        source: CopySource<'_>,
    ) -> Result<CompletedPart> {
        self.origin
            .upload_part_copy(key, upload_id, part_number, source)
            .await
    }

    async fn complete_multipart(
        &self,
        key: &str,
        upload_id: &str,
        parts: &[CompletedPart],
    ) -> Result<PutResult> {
        self.origin.complete_multipart(key, upload_id, parts).await
    }

    async fn abort_multipart(&self, key: &str, upload_id: &str) -> Result<()> {
        self.origin.abort_multipart(key, upload_id).await
    }

    async fn list_uploads(&self, prefix: &str) -> Result<Vec<PendingUpload>> {
        self.origin.list_uploads(prefix).await
    }

    async fn copy(&self, source_key: &str, dest_key: &str) -> Result<PutResult> {
        self.origin.copy(source_key, dest_key).await
    }

    fn keeps_metadata(&self) -> bool {
        self.origin.keeps_metadata()
    }

    async fn head_with_metadata(&self, key: &str) -> Result<Option<(ObjectMeta, Metadata)>> {
        self.origin.head_with_metadata(key).await
    }

    async fn put_with_metadata(
        &self,
        key: &str,
        body: Arc<dyn BodySource>,
        metadata: &Metadata,
    ) -> Result<PutResult> {
        self.origin.put_with_metadata(key, body, metadata).await
    }

    async fn create_multipart_with_metadata(
        &self,
        key: &str,
        metadata: &Metadata,
    ) -> Result<String> {
        self.origin
            .create_multipart_with_metadata(key, metadata)
            .await
    }

    async fn replace_metadata(
        &self,
        key: &str,
        metadata: &Metadata,
        if_match: Option<&str>,
    ) -> Result<PutResult> {
        self.origin.replace_metadata(key, metadata, if_match).await
    }

    async fn delete(&self, key: &str) -> Result<()> {
        self.origin.delete(key).await
    }

    async fn delete_many(&self, keys: &[String]) -> Result<()> {
        self.origin.delete_many(keys).await
    }
}
