//! `S3Store`: the [`ObjectStore`] over the S3 API (AWS S3, garage, MinIO, AIStore's and GCS's S3
//! endpoints) on aws-sdk-s3. `call`: how a request is sent and its failure classified; `keys`:
//! keys as S3 carries them.

mod call;
mod keys;

use std::ops::Range;
use std::sync::{Arc, PoisonError};
use std::time::SystemTime;

use async_trait::async_trait;
use aws_sdk_s3::Client;
use aws_sdk_s3::operation::get_object::GetObjectOutput;
use aws_sdk_s3::primitives::{ByteStream, DateTime};
use aws_sdk_s3::types::{
    CompletedMultipartUpload, Delete, EncodingType, MetadataDirective, ObjectIdentifier,
};
use bytes::Bytes;

use super::body::streamed;
use super::{
    BodySource, ChunkSink, CompletedPart, CopySource, ListPage, ListRequest, Metadata, ObjectMeta,
    ObjectStore, PendingUpload, PutResult, Result, RetryPolicy, StoreError,
};
use call::{local_error_first, precondition_failed};
pub use keys::decode_listed_key;
use keys::{cache_scope_of, listed_key, percent_encode_key};

/// S3 caps one DeleteObjects request at this many keys.
const DELETE_BATCH: usize = 1000;

#[derive(Debug)]
pub struct S3Store {
    client: Client,
    bucket: String,
    /// For error messages and the store id; never contains credentials.
    endpoint: String,
    id: String,
    /// `id` narrowed by the signing principal; see `ObjectStore::cache_scope`.
    cache_scope: String,
    retry: RetryPolicy,
}

impl S3Store {
    /// `principal` names who signs the requests (an access key id, a profile, `anonymous`…):
    /// stores of one bucket share cached lines only when it is the same. It is hashed, never
    /// shown.
    pub fn new(
        client: Client,
        bucket: String,
        endpoint: String,
        principal: &str,
        retry: RetryPolicy,
    ) -> S3Store {
        let id = format!("s3:{endpoint}/{bucket}");
        let cache_scope = cache_scope_of(&id, principal);
        S3Store {
            client,
            bucket,
            endpoint,
            id,
            cache_scope,
            retry,
        }
    }

    pub fn bucket(&self) -> &str {
        &self.bucket
    }

    fn copy_source(&self, key: &str) -> String {
        format!("{}/{}", self.bucket, percent_encode_key(key))
    }

    /// Sends one ranged GET (pinned to `etag` when given) and returns the response, whose body is
    /// still to be read, with how many bytes that body must hold.
    async fn start_get(
        &self,
        key: &str,
        range: Range<u64>,
        etag: Option<&str>,
    ) -> Result<(GetObjectOutput, u64)> {
        let mut request = self
            .client
            .get_object()
            .bucket(&self.bucket)
            .key(key)
            .range(format!("bytes={}-{}", range.start, range.end - 1));
        if let Some(etag) = etag {
            request = request.if_match(etag);
        }
        let out = request
            .send()
            .await
            .map_err(|e| precondition_failed(self.classify("get", key, e), "get", key, etag))?;
        if let (Some(want), Some(got)) = (etag, out.e_tag())
            && want != got
        {
            return Err(StoreError::Changed {
                op: "get",
                key: key.to_string(),
                expected: want.to_string(),
            });
        }
        // A short body is only legitimate at the end of the object; the server tells the
        // object's size in Content-Range.
        let object_size = out
            .content_range()
            .and_then(|r| r.rsplit('/').next())
            .and_then(|total| total.parse::<u64>().ok());
        let expected = range.end - range.start;
        let wanted = match object_size {
            Some(total) => expected.min(total.saturating_sub(range.start)),
            None => expected,
        };
        Ok((out, wanted))
    }

    /// A body that broke off mid-transfer: retryable, like any network failure.
    fn body_error(&self, key: &str, error: impl std::fmt::Display) -> StoreError {
        StoreError::Unreachable {
            op: "get",
            key: key.to_string(),
            endpoint: self.endpoint.clone(),
            message: format!("reading body: {error}"),
        }
    }

    fn check_length(&self, key: &str, got: u64, wanted: u64) -> Result<()> {
        if got < wanted {
            return Err(StoreError::Truncated {
                op: "get",
                key: key.to_string(),
                got,
                expected: wanted,
            });
        }
        Ok(())
    }
}

fn to_system_time(t: Option<&DateTime>) -> SystemTime {
    t.and_then(|t| SystemTime::try_from(*t).ok())
        .unwrap_or(SystemTime::UNIX_EPOCH)
}

fn to_size(size: Option<i64>) -> u64 {
    size.and_then(|s| u64::try_from(s).ok()).unwrap_or(0)
}

/// Metadata as the SDK sends it: none rather than an empty map.
fn sent_metadata(metadata: &Metadata) -> Option<std::collections::HashMap<String, String>> {
    (!metadata.is_empty()).then(|| metadata.clone().into_iter().collect())
}

#[async_trait]
impl ObjectStore for S3Store {
    fn id(&self) -> &str {
        &self.id
    }

    fn cache_scope(&self) -> &str {
        &self.cache_scope
    }

    async fn head(&self, key: &str) -> Result<Option<ObjectMeta>> {
        Ok(self.head_with_metadata(key).await?.map(|(meta, _)| meta))
    }

    fn keeps_metadata(&self) -> bool {
        true
    }

    async fn head_with_metadata(&self, key: &str) -> Result<Option<(ObjectMeta, Metadata)>> {
        let out = self
            .call("head", key, || {
                self.client
                    .head_object()
                    .bucket(&self.bucket)
                    .key(key)
                    .send()
            })
            .await;
        match out {
            Ok(out) => Ok(Some((
                ObjectMeta {
                    key: key.to_string(),
                    size: to_size(out.content_length()),
                    etag: out.e_tag().unwrap_or_default().to_string(),
                    last_modified: to_system_time(out.last_modified()),
                },
                out.metadata()
                    .map(|m| {
                        m.iter()
                            .map(|(k, v)| (k.to_lowercase(), v.clone()))
                            .collect()
                    })
                    .unwrap_or_default(),
            ))),
            Err(StoreError::NotFound { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    async fn get_range(&self, key: &str, range: Range<u64>, etag: Option<&str>) -> Result<Bytes> {
        if range.is_empty() {
            return Ok(Bytes::new());
        }
        self.retry
            .run("get", key, || async {
                let (out, wanted) = self.start_get(key, range.clone(), etag).await?;
                let body = out
                    .body
                    .collect()
                    .await
                    .map_err(|e| self.body_error(key, e))?
                    .into_bytes();
                self.check_length(key, body.len() as u64, wanted)?;
                Ok(body)
            })
            .await
    }

    async fn get_range_into(
        &self,
        key: &str,
        range: Range<u64>,
        etag: Option<&str>,
        sink: &mut ChunkSink<'_>,
    ) -> Result<u64> {
        if range.is_empty() {
            return Ok(0);
        }
        // Each attempt's future borrows the sink; a mutex (never contended: attempts run one
        // after another) lets them share it without the closure lending out `&mut`.
        let sink = std::sync::Mutex::new(sink);
        self.retry
            .run("get", key, || async {
                let (mut out, wanted) = self.start_get(key, range.clone(), etag).await?;
                let mut received = 0u64;
                while let Some(chunk) = out
                    .body
                    .try_next()
                    .await
                    .map_err(|e| self.body_error(key, e))?
                {
                    let mut sink = sink.lock().unwrap_or_else(PoisonError::into_inner);
                    (*sink)(received, &chunk);
                    received += chunk.len() as u64;
                }
                self.check_length(key, received, wanted)?;
                Ok(received)
            })
            .await
    }

    async fn list(&self, request: &ListRequest) -> Result<ListPage> {
        let prefix = request.prefix.as_str();
        let out = self
            .call("list", prefix, || {
                self.client
                    .list_objects_v2()
                    .bucket(&self.bucket)
                    .prefix(prefix)
                    .set_delimiter(request.delimited.then(|| "/".to_string()))
                    .set_start_after(request.start_after.clone())
                    // Keys may hold characters XML 1.0 cannot carry (control characters): ask
                    // for them URL-encoded, or one such key would make the whole page unreadable.
                    .encoding_type(EncodingType::Url)
                    .set_continuation_token(request.continuation.clone())
                    .set_max_keys(request.max_keys.map(|m| m.min(i32::MAX as u32) as i32))
                    .send()
            })
            .await?;
        let decode = |text: &str| listed_key(text, out.encoding_type());
        let objects = out
            .contents()
            .iter()
            .filter_map(|o| {
                Some(ObjectMeta {
                    key: decode(o.key()?)?,
                    size: to_size(o.size()),
                    etag: o.e_tag().unwrap_or_default().to_string(),
                    last_modified: to_system_time(o.last_modified()),
                })
            })
            .collect();
        let common_prefixes = out
            .common_prefixes()
            .iter()
            .filter_map(|p| decode(p.prefix()?))
            .collect();
        let next = if out.is_truncated().unwrap_or(false) {
            out.next_continuation_token().map(str::to_string)
        } else {
            None
        };
        Ok(ListPage {
            objects,
            common_prefixes,
            next,
        })
    }

    async fn put(&self, key: &str, body: Bytes) -> Result<PutResult> {
        let out = self
            .call("put", key, || {
                self.client
                    .put_object()
                    .bucket(&self.bucket)
                    .key(key)
                    .body(ByteStream::from(body.clone()))
                    .send()
            })
            .await?;
        Ok(PutResult {
            etag: out.e_tag().unwrap_or_default().to_string(),
        })
    }

    /// Streams the body in chunks, as `upload_part_from` does.
    async fn put_from(&self, key: &str, body: Arc<dyn BodySource>) -> Result<PutResult> {
        self.put_with_metadata(key, body, &Metadata::new()).await
    }

    async fn put_with_metadata(
        &self,
        key: &str,
        body: Arc<dyn BodySource>,
        metadata: &Metadata,
    ) -> Result<PutResult> {
        let len = body.len();
        let out = self
            .retry
            .run("put", key, || async {
                let (chunks, producer_error) = streamed(Arc::clone(&body));
                let sent = self
                    .client
                    .put_object()
                    .bucket(&self.bucket)
                    .key(key)
                    .set_metadata(sent_metadata(metadata))
                    .content_length(i64::try_from(len).unwrap_or(i64::MAX))
                    .body(ByteStream::from_body_1_x(chunks))
                    .send()
                    .await;
                local_error_first(sent, &producer_error, |e| self.classify("put", key, e))
            })
            .await?;
        Ok(PutResult {
            etag: out.e_tag().unwrap_or_default().to_string(),
        })
    }

    async fn create_multipart_with_metadata(
        &self,
        key: &str,
        metadata: &Metadata,
    ) -> Result<String> {
        let out = self
            .call("create_multipart", key, || {
                self.client
                    .create_multipart_upload()
                    .bucket(&self.bucket)
                    .key(key)
                    .set_metadata(sent_metadata(metadata))
                    .send()
            })
            .await?;
        out.upload_id()
            .map(str::to_string)
            .ok_or_else(|| StoreError::Service {
                op: "create_multipart",
                key: key.to_string(),
                status: 200,
                code: "MissingUploadId".into(),
                message: "the server returned no upload id".into(),
            })
    }

    async fn replace_metadata(
        &self,
        key: &str,
        metadata: &Metadata,
        if_match: Option<&str>,
    ) -> Result<PutResult> {
        const OP: &str = "replace_metadata";
        let out = self
            .call_refined(
                OP,
                key,
                || {
                    self.client
                        .copy_object()
                        .bucket(&self.bucket)
                        .key(key)
                        .copy_source(self.copy_source(key))
                        .set_copy_source_if_match(if_match.map(str::to_string))
                        .metadata_directive(MetadataDirective::Replace)
                        .set_metadata(sent_metadata(metadata))
                        .send()
                },
                |e| precondition_failed(e, OP, key, if_match),
            )
            .await?;
        Ok(PutResult {
            etag: out
                .copy_object_result()
                .and_then(|r| r.e_tag())
                .unwrap_or_default()
                .to_string(),
        })
    }

    async fn create_multipart(&self, key: &str) -> Result<String> {
        self.create_multipart_with_metadata(key, &Metadata::new())
            .await
    }

    async fn upload_part(
        &self,
        key: &str,
        upload_id: &str,
        part_number: i32,
        body: Bytes,
    ) -> Result<CompletedPart> {
        let out = self
            .call("upload_part", key, || {
                self.client
                    .upload_part()
                    .bucket(&self.bucket)
                    .key(key)
                    .upload_id(upload_id)
                    .part_number(part_number)
                    .body(ByteStream::from(body.clone()))
                    .send()
            })
            .await?;
        Ok(CompletedPart {
            part_number,
            etag: out.e_tag().unwrap_or_default().to_string(),
        })
    }

    /// Streams the part in chunks (`body::streamed`): memory per part in flight stays at two
    /// chunks whatever the part size. Each attempt reads the body again from its start.
    async fn upload_part_from(
        &self,
        key: &str,
        upload_id: &str,
        part_number: i32,
        body: Arc<dyn BodySource>,
    ) -> Result<CompletedPart> {
        let len = body.len();
        let out = self
            .retry
            .run("upload_part", key, || async {
                let (chunks, producer_error) = streamed(Arc::clone(&body));
                let sent = self
                    .client
                    .upload_part()
                    .bucket(&self.bucket)
                    .key(key)
                    .upload_id(upload_id)
                    .part_number(part_number)
                    .content_length(i64::try_from(len).unwrap_or(i64::MAX))
                    .body(ByteStream::from_body_1_x(chunks))
                    .send()
                    .await;
                local_error_first(sent, &producer_error, |e| {
                    self.classify("upload_part", key, e)
                })
            })
            .await?;
        Ok(CompletedPart {
            part_number,
            etag: out.e_tag().unwrap_or_default().to_string(),
        })
    }

    async fn upload_part_copy(
        &self,
        key: &str,
        upload_id: &str,
        part_number: i32,
        source: CopySource<'_>,
    ) -> Result<CompletedPart> {
        let range = &source.range;
        let out = self
            .call("upload_part_copy", key, || {
                self.client
                    .upload_part_copy()
                    .bucket(&self.bucket)
                    .key(key)
                    .upload_id(upload_id)
                    .part_number(part_number)
                    .copy_source(self.copy_source(source.key))
                    .copy_source_range(format!(
                        "bytes={}-{}",
                        range.start,
                        range.end.saturating_sub(1)
                    ))
                    .set_copy_source_if_match(source.if_match.map(str::to_string))
                    .send()
            })
            .await
            .map_err(|e| precondition_failed(e, "upload_part_copy", source.key, source.if_match))?;
        Ok(CompletedPart {
            part_number,
            etag: out
                .copy_part_result()
                .and_then(|r| r.e_tag())
                .unwrap_or_default()
                .to_string(),
        })
    }

    async fn complete_multipart(
        &self,
        key: &str,
        upload_id: &str,
        parts: &[CompletedPart],
    ) -> Result<PutResult> {
        let upload = CompletedMultipartUpload::builder()
            .set_parts(Some(
                parts
                    .iter()
                    .map(|p| {
                        aws_sdk_s3::types::CompletedPart::builder()
                            .part_number(p.part_number)
                            .e_tag(&p.etag)
                            .build()
                    })
                    .collect(),
            ))
            .build();
        let out = self
            .call("complete_multipart", key, || {
                self.client
                    .complete_multipart_upload()
                    .bucket(&self.bucket)
                    .key(key)
                    .upload_id(upload_id)
                    .multipart_upload(upload.clone())
                    .send()
            })
            .await?;
        Ok(PutResult {
            etag: out.e_tag().unwrap_or_default().to_string(),
        })
    }

    async fn abort_multipart(&self, key: &str, upload_id: &str) -> Result<()> {
        self.call("abort_multipart", key, || {
            self.client
                .abort_multipart_upload()
                .bucket(&self.bucket)
                .key(key)
                .upload_id(upload_id)
                .send()
        })
        .await?;
        Ok(())
    }

    async fn list_uploads(&self, prefix: &str) -> Result<Vec<PendingUpload>> {
        let mut uploads = Vec::new();
        let mut markers: (Option<String>, Option<String>) = (None, None);
        loop {
            let out = self
                .call("list_uploads", prefix, || {
                    self.client
                        .list_multipart_uploads()
                        .bucket(&self.bucket)
                        .prefix(prefix)
                        .set_key_marker(markers.0.clone())
                        .set_upload_id_marker(markers.1.clone())
                        .encoding_type(EncodingType::Url)
                        .send()
                })
                .await?;
            let decode = |text: &str| listed_key(text, out.encoding_type());
            for upload in out.uploads() {
                if let (Some(key), Some(id)) = (upload.key().and_then(decode), upload.upload_id()) {
                    uploads.push(PendingUpload {
                        key,
                        upload_id: id.to_string(),
                        initiated: to_system_time(upload.initiated()),
                    });
                }
            }
            if !out.is_truncated().unwrap_or(false) {
                return Ok(uploads);
            }
            let next = (
                out.next_key_marker().and_then(decode),
                out.next_upload_id_marker().map(str::to_string),
            );
            if next.0.is_none() || next == markers {
                return Ok(uploads); // a server that says "truncated" without a way on
            }
            markers = next;
        }
    }

    async fn copy(&self, source_key: &str, dest_key: &str) -> Result<PutResult> {
        let out = self
            .call("copy", dest_key, || {
                self.client
                    .copy_object()
                    .bucket(&self.bucket)
                    .key(dest_key)
                    .copy_source(self.copy_source(source_key))
                    .send()
            })
            .await?;
        Ok(PutResult {
            etag: out
                .copy_object_result()
                .and_then(|r| r.e_tag())
                .unwrap_or_default()
                .to_string(),
        })
    }

    async fn delete(&self, key: &str) -> Result<()> {
        let out = self
            .call("delete", key, || {
                self.client
                    .delete_object()
                    .bucket(&self.bucket)
                    .key(key)
                    .send()
            })
            .await;
        match out {
            Ok(_) | Err(StoreError::NotFound { .. }) => Ok(()),
            Err(e) => Err(e),
        }
    }

    async fn delete_many(&self, keys: &[String]) -> Result<()> {
        for batch in keys.chunks(DELETE_BATCH) {
            let first = batch.first().map(String::as_str).unwrap_or_default();
            let objects = batch
                .iter()
                .map(|k| ObjectIdentifier::builder().key(k).build())
                .collect::<std::result::Result<Vec<_>, _>>()
                .map_err(|e| StoreError::Setup(format!("delete_many: {e}")))?;
            let delete = Delete::builder()
                .set_objects(Some(objects))
                .quiet(true)
                .build()
                .map_err(|e| StoreError::Setup(format!("delete_many: {e}")))?;
            let out = self
                .call("delete_many", first, || {
                    self.client
                        .delete_objects()
                        .bucket(&self.bucket)
                        .delete(delete.clone())
                        .send()
                })
                .await?;
            if let Some(failed) = out.errors().first() {
                return Err(StoreError::Service {
                    op: "delete_many",
                    key: failed.key().unwrap_or_default().to_string(),
                    status: 200,
                    code: failed.code().unwrap_or_default().to_string(),
                    message: failed.message().unwrap_or_default().to_string(),
                });
            }
        }
        Ok(())
    }
}
