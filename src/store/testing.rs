//! Test support: an [`ObjectStore`] over a local directory that counts, holds back, cuts short
//! or fails requests on demand, for the engines' unit tests.

use std::collections::{HashMap, HashSet};
use std::ops::Range;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use bytes::Bytes;
use tokio::sync::watch;

use super::{
    BodySource, ChunkSink, CompletedPart, CopySource, FileStore, ListPage, ListRequest, Metadata,
    ObjectMeta, ObjectStore, PendingUpload, PutResult, Result as StoreResult, StoreError,
};

/// A store that forwards to another (a [`FileStore`] unless built with [`TestStore::over`]),
/// counts every call by operation, records every LIST and GET, and on request holds GETs and
/// PUTs of some keys until the gate opens, fails the next GETs or HEADs of a key, cuts their bodies
/// short, or fails every write while `fail_writes` is set.
#[derive(Debug)]
pub(crate) struct TestStore {
    inner: Box<dyn ObjectStore>,
    id: String,
    gets: Mutex<Vec<(String, Range<u64>)>>,
    held: Mutex<HashSet<String>>,
    /// Keys whose streamed GETs deliver the first half of the body, then wait for the gate.
    held_tail: Mutex<HashSet<String>>,
    gate: watch::Sender<bool>,
    /// How many held GETs have reached the gate.
    arrived: watch::Sender<usize>,
    /// (operation, key) → how many more of those calls fail.
    failures: Mutex<HashMap<(&'static str, String), u32>>,
    pub short: Mutex<HashSet<String>>,
    calls: Mutex<HashMap<&'static str, usize>>,
    pub fail_writes: AtomicBool,
    /// Every write is refused as AccessDenied (a failure no retry fixes) while set.
    pub deny_writes: AtomicBool,
    lists: Mutex<Vec<ListRequest>>,
    /// LISTs of prefixes under this one fail.
    pub fail_lists_under: Mutex<Option<String>>,
}

impl TestStore {
    pub fn new(root: &std::path::Path, id: &str) -> Arc<TestStore> {
        Self::over(FileStore::new(root.to_path_buf()).expect("file store"), id)
    }

    /// A test store over an empty RAM store (id "ram"): S3's listing semantics and user
    /// metadata, with room for a million objects.
    pub fn ram() -> Arc<TestStore> {
        Self::over(
            crate::store::RamStore::new(
                "ram",
                crate::config::RamConfig {
                    max_list_page_size: 1000,
                    max_total_objects: 1 << 20,
                    max_total_object_space: 1 << 30,
                },
            ),
            "ram",
        )
    }

    /// A test store forwarding to `inner` (a RAM store, for its listing semantics).
    pub fn over(inner: impl ObjectStore + 'static, id: &str) -> Arc<TestStore> {
        Arc::new(TestStore {
            inner: Box::new(inner),
            id: id.to_string(),
            gets: Mutex::default(),
            held: Mutex::default(),
            held_tail: Mutex::default(),
            gate: watch::channel(false).0,
            arrived: watch::channel(0).0,
            failures: Mutex::default(),
            short: Mutex::default(),
            calls: Mutex::default(),
            fail_writes: AtomicBool::new(false),
            deny_writes: AtomicBool::new(false),
            lists: Mutex::default(),
            fail_lists_under: Mutex::default(),
        })
    }

    /// Every LIST asked for so far, in order.
    pub fn lists(&self) -> Vec<ListRequest> {
        self.lists.lock().expect("lists").clone()
    }

    pub fn gets(&self) -> Vec<(String, Range<u64>)> {
        self.gets.lock().expect("gets").clone()
    }

    pub fn gets_of(&self, key: &str) -> usize {
        self.gets().iter().filter(|(k, _)| k == key).count()
    }

    pub fn hold(&self, key: &str) {
        self.held.lock().expect("held").insert(key.to_string());
    }

    /// Streamed GETs of `key` deliver half their body, then wait for the gate before the rest.
    pub fn hold_tail(&self, key: &str) {
        self.held_tail.lock().expect("held").insert(key.to_string());
    }

    pub fn open_gate(&self) {
        self.gate.send_replace(true);
    }

    pub async fn until_arrived(&self, n: usize) {
        let mut arrived = self.arrived.subscribe();
        arrived.wait_for(|a| *a >= n).await.expect("store alive");
    }

    /// The next `times` GETs of `key` fail (as an unreachable server).
    pub fn fail_next(&self, key: &str, times: u32) {
        self.failures
            .lock()
            .expect("failures")
            .insert(("get", key.to_string()), times);
    }

    /// The next `times` HEADs of `key` fail (as an unreachable server).
    pub fn fail_next_heads(&self, key: &str, times: u32) {
        self.failures
            .lock()
            .expect("failures")
            .insert(("head", key.to_string()), times);
    }

    /// Fails this call of `op` on `key` if `fail_next*` asked for it.
    fn injected_failure(&self, op: &'static str, key: &str) -> StoreResult<()> {
        let mut failures = self.failures.lock().expect("failures");
        match failures.get_mut(&(op, key.to_string())) {
            Some(left) if *left > 0 => *left -= 1,
            _ => return Ok(()),
        }
        Err(StoreError::Unreachable {
            op,
            key: key.to_string(),
            endpoint: "test".into(),
            message: "injected failure".into(),
        })
    }

    /// How many calls of operation `op` ("get", "put", "upload_part", …) were made.
    pub fn calls(&self, op: &str) -> usize {
        self.calls
            .lock()
            .expect("calls")
            .get(op)
            .copied()
            .unwrap_or(0)
    }

    fn count(&self, op: &'static str) {
        *self.calls.lock().expect("calls").entry(op).or_default() += 1;
    }

    /// Counts a write and fails it while `fail_writes` is set.
    fn write_call(&self, op: &'static str, key: &str) -> StoreResult<()> {
        self.count(op);
        if self.deny_writes.load(Ordering::SeqCst) {
            return Err(StoreError::AccessDenied {
                op,
                key: key.to_string(),
                code: "AccessDenied".into(),
            });
        }
        if self.fail_writes.load(Ordering::SeqCst) {
            return Err(StoreError::Unreachable {
                op,
                key: key.to_string(),
                endpoint: "test".into(),
                message: "injected write failure".into(),
            });
        }
        Ok(())
    }
}

#[async_trait]
impl ObjectStore for TestStore {
    fn id(&self) -> &str {
        &self.id
    }

    async fn head(&self, key: &str) -> StoreResult<Option<ObjectMeta>> {
        self.count("head");
        self.injected_failure("head", key)?;
        self.inner.head(key).await
    }

    async fn get_range(
        &self,
        key: &str,
        range: Range<u64>,
        etag: Option<&str>,
    ) -> StoreResult<Bytes> {
        self.count("get");
        self.gets
            .lock()
            .expect("gets")
            .push((key.to_string(), range.clone()));
        if self.held.lock().expect("held").contains(key) {
            self.arrived.send_modify(|a| *a += 1);
            let mut gate = self.gate.subscribe();
            gate.wait_for(|open| *open).await.expect("store alive");
        }
        self.injected_failure("get", key)?;
        let body = self.inner.get_range(key, range, etag).await?;
        if self.short.lock().expect("short").contains(key) && !body.is_empty() {
            return Ok(body.slice(..body.len() - 1));
        }
        Ok(body)
    }

    /// Streams like `S3Store` does after a retry: the first attempt's bytes arrive and break off
    /// half-way, then the range arrives again from offset 0, in small chunks.
    async fn get_range_into(
        &self,
        key: &str,
        range: Range<u64>,
        etag: Option<&str>,
        sink: &mut ChunkSink<'_>,
    ) -> StoreResult<u64> {
        let body = self.get_range(key, range, etag).await?;
        let half = body.len() / 2;
        sink(0, &body[..half]);
        if self.held_tail.lock().expect("held").contains(key) {
            self.arrived.send_modify(|a| *a += 1);
            let mut gate = self.gate.subscribe();
            gate.wait_for(|open| *open).await.expect("store alive");
            sink(half as u64, &body[half..]);
            return Ok(body.len() as u64);
        }
        for (i, chunk) in body.chunks(1000).enumerate() {
            sink(i as u64 * 1000, chunk);
        }
        Ok(body.len() as u64)
    }

    async fn list(&self, request: &ListRequest) -> StoreResult<ListPage> {
        self.count("list");
        self.lists.lock().expect("lists").push(request.clone());
        let fail = self
            .fail_lists_under
            .lock()
            .expect("fail")
            .as_ref()
            .is_some_and(|p| request.prefix.starts_with(p.as_str()));
        if fail {
            return Err(StoreError::Unreachable {
                op: "list",
                key: request.prefix.clone(),
                endpoint: "test".into(),
                message: "injected failure".into(),
            });
        }
        self.inner.list(request).await
    }

    async fn put(&self, key: &str, body: Bytes) -> StoreResult<PutResult> {
        self.write_call("put", key)?;
        if self.held.lock().expect("held").contains(key) {
            self.arrived.send_modify(|a| *a += 1);
            let mut gate = self.gate.subscribe();
            gate.wait_for(|open| *open).await.expect("store alive");
        }
        self.inner.put(key, body).await
    }

    async fn create_multipart(&self, key: &str) -> StoreResult<String> {
        self.write_call("create_multipart", key)?;
        self.inner.create_multipart(key).await
    }

    fn keeps_metadata(&self) -> bool {
        self.inner.keeps_metadata()
    }

    async fn head_with_metadata(&self, key: &str) -> StoreResult<Option<(ObjectMeta, Metadata)>> {
        self.count("head");
        self.inner.head_with_metadata(key).await
    }

    /// Without metadata, the counted and gated `put` path; with it, counted only.
    async fn put_with_metadata(
        &self,
        key: &str,
        body: Arc<dyn BodySource>,
        metadata: &Metadata,
    ) -> StoreResult<PutResult> {
        if metadata.is_empty() {
            return self.put_from(key, body).await;
        }
        self.write_call("put", key)?;
        self.inner.put_with_metadata(key, body, metadata).await
    }

    async fn create_multipart_with_metadata(
        &self,
        key: &str,
        metadata: &Metadata,
    ) -> StoreResult<String> {
        self.write_call("create_multipart", key)?;
        self.inner
            .create_multipart_with_metadata(key, metadata)
            .await
    }

    async fn replace_metadata(
        &self,
        key: &str,
        metadata: &Metadata,
        if_match: Option<&str>,
    ) -> StoreResult<PutResult> {
        self.write_call("copy", key)?;
        self.inner.replace_metadata(key, metadata, if_match).await
    }

    async fn upload_part(
        &self,
        key: &str,
        upload_id: &str,
        part_number: i32,
        body: Bytes,
    ) -> StoreResult<CompletedPart> {
        self.write_call("upload_part", key)?;
        self.inner
            .upload_part(key, upload_id, part_number, body)
            .await
    }

    async fn upload_part_copy(
        &self,
        key: &str,
        upload_id: &str,
        part_number: i32,
        source: CopySource<'_>,
    ) -> StoreResult<CompletedPart> {
        self.write_call("upload_part_copy", key)?;
        self.inner
            .upload_part_copy(key, upload_id, part_number, source)
            .await
    }

    async fn complete_multipart(
        &self,
        key: &str,
        upload_id: &str,
        parts: &[CompletedPart],
    ) -> StoreResult<PutResult> {
        self.write_call("complete_multipart", key)?;
        self.inner.complete_multipart(key, upload_id, parts).await
    }

    async fn abort_multipart(&self, key: &str, upload_id: &str) -> StoreResult<()> {
        self.write_call("abort_multipart", key)?;
        self.inner.abort_multipart(key, upload_id).await
    }

    fn cheap_flat_listing(&self) -> bool {
        self.inner.cheap_flat_listing()
    }

    async fn list_uploads(&self, prefix: &str) -> StoreResult<Vec<PendingUpload>> {
        self.count("list_uploads");
        self.inner.list_uploads(prefix).await
    }

    async fn copy(&self, source_key: &str, dest_key: &str) -> StoreResult<PutResult> {
        self.write_call("copy", dest_key)?;
        self.inner.copy(source_key, dest_key).await
    }

    async fn delete(&self, key: &str) -> StoreResult<()> {
        self.write_call("delete", key)?;
        self.inner.delete(key).await
    }

    async fn delete_many(&self, keys: &[String]) -> StoreResult<()> {
        self.inner.delete_many(keys).await
    }
}
