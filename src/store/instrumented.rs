//! `InstrumentedStore`: counts and times every request a backend's store makes, by operation and
//! outcome, and logs it as the backend's `trace_level` asks (0 nothing, 1 failures, 2 successes
//! too, 3 and more with sizes and timings) — without the stores themselves knowing about either.

use std::future::Future;
use std::ops::Range;
use std::sync::Arc;
use std::time::Instant;

use async_trait::async_trait;
use bytes::Bytes;

use super::{
    BodySource, ChunkSink, CompletedPart, CopySource, ListPage, ListRequest, Metadata, ObjectMeta,
    ObjectStore, PendingUpload, PutResult, Result, StoreError,
};
use crate::telemetry::Metrics;

#[derive(Debug)]
pub struct InstrumentedStore {
    inner: Arc<dyn ObjectStore>,
    backend: String,
    metrics: Arc<Metrics>,
    trace_level: u8,
}

impl InstrumentedStore {
    pub fn wrap(
        inner: Arc<dyn ObjectStore>,
        backend: &str,
        metrics: Arc<Metrics>,
        trace_level: u8,
    ) -> Arc<dyn ObjectStore> {
        Arc::new(InstrumentedStore {
            inner,
            backend: backend.to_string(),
            metrics,
            trace_level,
        })
    }

    async fn timed<T>(
        &self,
        operation: &'static str,
        key: &str,
        request: impl Future<Output = Result<T>>,
    ) -> Result<T> {
        let started = Instant::now();
        let result = request.await;
        let elapsed = started.elapsed();
        let class = result.as_ref().err().map(|e| e.root().class());
        self.metrics
            .backend_request(&self.backend, operation, elapsed, class);
        self.log(operation, key, elapsed, result.as_ref().err());
        result
    }

    fn log(
        &self,
        operation: &str,
        key: &str,
        elapsed: std::time::Duration,
        error: Option<&StoreError>,
    ) {
        let backend = self.backend.as_str();
        match (error, self.trace_level) {
            (_, 0) => {}
            (Some(error), _) => {
                tracing::warn!(backend, operation, key, error = %error, "backend request failed")
            }
            (None, 1) => {}
            (None, 2) => tracing::info!(backend, operation, key, "backend request"),
            (None, _) => tracing::info!(backend, operation, key, ?elapsed, "backend request"),
        }
    }
}

#[async_trait]
impl ObjectStore for InstrumentedStore {
    fn id(&self) -> &str {
        self.inner.id()
    }

    fn cache_scope(&self) -> &str {
        self.inner.cache_scope()
    }

    async fn head(&self, key: &str) -> Result<Option<ObjectMeta>> {
        self.timed("head", key, self.inner.head(key)).await
    }

    async fn get_range(&self, key: &str, range: Range<u64>, etag: Option<&str>) -> Result<Bytes> {
        self.timed("get", key, self.inner.get_range(key, range, etag))
            .await
    }

    async fn get_range_into(
        &self,
        key: &str,
        range: Range<u64>,
        etag: Option<&str>,
        sink: &mut ChunkSink<'_>,
    ) -> Result<u64> {
        self.timed(
            "get",
            key,
            self.inner.get_range_into(key, range, etag, sink),
        )
        .await
    }

    async fn list(&self, request: &ListRequest) -> Result<ListPage> {
        self.timed("list", &request.prefix, self.inner.list(request))
            .await
    }

    fn cheap_flat_listing(&self) -> bool {
        self.inner.cheap_flat_listing()
    }

    async fn put(&self, key: &str, body: Bytes) -> Result<PutResult> {
        self.timed("put", key, self.inner.put(key, body)).await
    }

    async fn put_from(&self, key: &str, body: Arc<dyn BodySource>) -> Result<PutResult> {
        self.timed("put", key, self.inner.put_from(key, body)).await
    }

    async fn create_multipart(&self, key: &str) -> Result<String> {
        self.timed("create_multipart", key, self.inner.create_multipart(key))
            .await
    }

    fn keeps_metadata(&self) -> bool {
        self.inner.keeps_metadata()
    }

    async fn head_with_metadata(&self, key: &str) -> Result<Option<(ObjectMeta, Metadata)>> {
        self.timed("head", key, self.inner.head_with_metadata(key))
            .await
    }

    async fn put_with_metadata(
        &self,
        key: &str,
        body: Arc<dyn BodySource>,
        metadata: &Metadata,
    ) -> Result<PutResult> {
        self.timed(
            "put",
            key,
            self.inner.put_with_metadata(key, body, metadata),
        )
        .await
    }

    async fn create_multipart_with_metadata(
        &self,
        key: &str,
        metadata: &Metadata,
    ) -> Result<String> {
        self.timed(
            "create_multipart",
            key,
            self.inner.create_multipart_with_metadata(key, metadata),
        )
        .await
    }

    async fn replace_metadata(
        &self,
        key: &str,
        metadata: &Metadata,
        if_match: Option<&str>,
    ) -> Result<PutResult> {
        self.timed(
            "copy",
            key,
            self.inner.replace_metadata(key, metadata, if_match),
        )
        .await
    }

    async fn upload_part(
        &self,
        key: &str,
        upload_id: &str,
        part_number: i32,
        body: Bytes,
    ) -> Result<CompletedPart> {
        self.timed(
            "upload_part",
            key,
            self.inner.upload_part(key, upload_id, part_number, body),
        )
        .await
    }

    async fn upload_part_from(
        &self,
        key: &str,
        upload_id: &str,
        part_number: i32,
        body: Arc<dyn BodySource>,
    ) -> Result<CompletedPart> {
        self.timed(
            "upload_part",
            key,
            self.inner
                .upload_part_from(key, upload_id, part_number, body),
        )
        .await
    }

    fn max_object_size(&self) -> u64 {
        self.inner.max_object_size()
    }

    fn outlives_process(&self) -> bool {
        self.inner.outlives_process()
    }

    async fn upload_part_copy(
        &self,
        key: &str,
        upload_id: &str,
        part_number: i32,
        source: CopySource<'_>,
    ) -> Result<CompletedPart> {
        self.timed(
            "upload_part_copy",
            key,
            self.inner
                .upload_part_copy(key, upload_id, part_number, source),
        )
        .await
    }

    async fn complete_multipart(
        &self,
        key: &str,
        upload_id: &str,
        parts: &[CompletedPart],
    ) -> Result<PutResult> {
        self.timed(
            "complete",
            key,
            self.inner.complete_multipart(key, upload_id, parts),
        )
        .await
    }

    async fn abort_multipart(&self, key: &str, upload_id: &str) -> Result<()> {
        self.timed(
            "abort_multipart",
            key,
            self.inner.abort_multipart(key, upload_id),
        )
        .await
    }

    async fn list_uploads(&self, prefix: &str) -> Result<Vec<PendingUpload>> {
        self.timed("list_uploads", prefix, self.inner.list_uploads(prefix))
            .await
    }

    async fn copy(&self, source_key: &str, dest_key: &str) -> Result<PutResult> {
        self.timed("copy", dest_key, self.inner.copy(source_key, dest_key))
            .await
    }

    async fn delete(&self, key: &str) -> Result<()> {
        self.timed("delete", key, self.inner.delete(key)).await
    }

    async fn delete_many(&self, keys: &[String]) -> Result<()> {
        self.timed(
            "delete_many",
            keys.first().map_or("", String::as_str),
            self.inner.delete_many(keys),
        )
        .await
    }
}
