//! `InstrumentedStore`: counts and times every request a backend's store makes, by operation and
//! outcome, without the stores themselves knowing about metrics.

use std::future::Future;
use std::ops::Range;
use std::sync::Arc;
use std::time::Instant;

use async_trait::async_trait;
use bytes::Bytes;

use super::{CompletedPart, ListPage, ObjectMeta, ObjectStore, PutResult, Result};
use crate::telemetry::Metrics;

#[derive(Debug)]
pub struct InstrumentedStore {
    inner: Arc<dyn ObjectStore>,
    backend: String,
    metrics: Arc<Metrics>,
}

impl InstrumentedStore {
    pub fn wrap(
        inner: Arc<dyn ObjectStore>,
        backend: &str,
        metrics: Arc<Metrics>,
    ) -> Arc<dyn ObjectStore> {
        Arc::new(InstrumentedStore {
            inner,
            backend: backend.to_string(),
            metrics,
        })
    }

    async fn timed<T>(
        &self,
        operation: &'static str,
        request: impl Future<Output = Result<T>>,
    ) -> Result<T> {
        let started = Instant::now();
        let result = request.await;
        let class = result.as_ref().err().map(|e| e.root().class());
        self.metrics
            .backend_request(&self.backend, operation, started.elapsed(), class);
        result
    }
}

#[async_trait]
impl ObjectStore for InstrumentedStore {
    fn id(&self) -> &str {
        self.inner.id()
    }

    async fn head(&self, key: &str) -> Result<Option<ObjectMeta>> {
        self.timed("head", self.inner.head(key)).await
    }

    async fn get_range(&self, key: &str, range: Range<u64>, etag: Option<&str>) -> Result<Bytes> {
        self.timed("get", self.inner.get_range(key, range, etag))
            .await
    }

    async fn list(
        &self,
        prefix: &str,
        delimiter: Option<&str>,
        continuation: Option<String>,
        max_keys: Option<u32>,
    ) -> Result<ListPage> {
        self.timed(
            "list",
            self.inner.list(prefix, delimiter, continuation, max_keys),
        )
        .await
    }

    async fn put(&self, key: &str, body: Bytes) -> Result<PutResult> {
        self.timed("put", self.inner.put(key, body)).await
    }

    async fn create_multipart(&self, key: &str) -> Result<String> {
        self.timed("create_multipart", self.inner.create_multipart(key))
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
            self.inner.upload_part(key, upload_id, part_number, body),
        )
        .await
    }

    async fn upload_part_copy(
        &self,
        key: &str,
        upload_id: &str,
        part_number: i32,
        source_key: &str,
        range: Range<u64>,
    ) -> Result<CompletedPart> {
        self.timed(
            "upload_part_copy",
            self.inner
                .upload_part_copy(key, upload_id, part_number, source_key, range),
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
            self.inner.complete_multipart(key, upload_id, parts),
        )
        .await
    }

    async fn abort_multipart(&self, key: &str, upload_id: &str) -> Result<()> {
        self.timed(
            "abort_multipart",
            self.inner.abort_multipart(key, upload_id),
        )
        .await
    }

    async fn copy(&self, source_key: &str, dest_key: &str) -> Result<PutResult> {
        self.timed("copy", self.inner.copy(source_key, dest_key))
            .await
    }

    async fn delete(&self, key: &str) -> Result<()> {
        self.timed("delete", self.inner.delete(key)).await
    }

    async fn delete_many(&self, keys: &[String]) -> Result<()> {
        self.timed("delete_many", self.inner.delete_many(keys))
            .await
    }
}
