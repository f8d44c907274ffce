//! `RamStore`: a bounded, writable object store held in process memory, for tests and demos.
//!
//! It behaves like a bucket — bytewise-sorted keys, `/`-delimited listings, directory markers
//! (`dir/`) as ordinary zero-byte objects, multipart uploads with server-side part copies — and
//! forgets everything when the process exits (or when a reload reopens the backend with a changed
//! configuration). It is bounded by `max_total_objects` (objects, markers included) and
//! `max_total_object_space` (bytes of objects *and* of parts uploaded into unfinished multipart
//! uploads); a write that would pass either bound fails with an `Io` error of kind
//! [`std::io::ErrorKind::StorageFull`], which the filesystem reports as `ENOSPC`, and changes
//! nothing. Every write gives the object a new ETag, even with the same bytes.
//!
//! Listing semantics match [`super::FileStore`]: an entry — object key or common prefix — is
//! listed when it sorts strictly after `max(start_after, continuation)`; a continuation token is
//! the last entry of its page. A page costs O(page · log n): a common prefix is skipped in one
//! seek, not key by key.
//!
//! State sits behind one `std::sync::Mutex`, never held across an `.await` (nothing here awaits).

use std::collections::{BTreeMap, HashMap};
use std::io;
use std::ops::{Bound, Range};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::SystemTime;

use async_trait::async_trait;
use bytes::{Bytes, BytesMut};

use super::{
    BodySource, CompletedPart, CopySource, ListPage, ListRequest, Metadata, ObjectMeta,
    ObjectStore, PendingUpload, PutResult, Result, StoreError, gather,
};
use crate::config::RamConfig;

/// Tells the stores of one process apart, so their ids and ETags never collide in the shared cache.
static NEXT_INSTANCE: AtomicU64 = AtomicU64::new(1);

#[derive(Debug, Clone)]
struct Object {
    body: Bytes,
    etag: String,
    last_modified: SystemTime,
    metadata: Metadata,
}

#[derive(Debug)]
struct Upload {
    key: String,
    metadata: Metadata,
    initiated: SystemTime,
    parts: BTreeMap<i32, Part>,
}

#[derive(Debug)]
struct Part {
    body: Bytes,
    etag: String,
}

#[derive(Debug, Default)]
struct State {
    objects: BTreeMap<String, Object>,
    uploads: HashMap<String, Upload>,
    /// Bytes of all objects plus all parts of unfinished uploads.
    used: u64,
    /// Of `used`, the bytes in parts.
    in_parts: u64,
    /// Source of ETags and upload ids.
    serial: u64,
}

/// See the module docs.
#[derive(Debug)]
pub struct RamStore {
    id: String,
    instance: u64,
    limits: RamConfig,
    state: Mutex<State>,
}

impl RamStore {
    /// An empty store; `name` (the backend's directory name) only makes the id readable.
    pub fn new(name: &str, limits: RamConfig) -> RamStore {
        let instance = NEXT_INSTANCE.fetch_add(1, Ordering::Relaxed);
        RamStore {
            id: format!("ram:{name}#{instance}"),
            instance,
            limits,
            state: Mutex::default(),
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock leaves no half-applied change: every mutation is
        // checked first and applied at the end.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn new_etag(&self, state: &mut State, suffix: &str) -> String {
        state.serial += 1;
        format!("\"ram{:x}-{:x}{suffix}\"", self.instance, state.serial)
    }

    /// Fails unless `more_bytes` more bytes (and `more_objects` more objects) fit.
    fn check_room(
        &self,
        state: &State,
        op: &'static str,
        key: &str,
        more_objects: u64,
        more_bytes: u64,
    ) -> Result<()> {
        let objects = state.objects.len() as u64;
        let message = if objects + more_objects > self.limits.max_total_objects {
            format!(
                "RAM store is full: {objects} objects stored, RAM.max_total_objects is {}; \
                 delete objects or raise the limit",
                self.limits.max_total_objects
            )
        } else if state.used.saturating_add(more_bytes) > self.limits.max_total_object_space {
            format!(
                "RAM store is full: {more_bytes} more bytes needed, {} in use ({} of them in \
                 unfinished multipart uploads), RAM.max_total_object_space is {}; delete \
                 objects or raise the limit",
                state.used, state.in_parts, self.limits.max_total_object_space
            )
        } else {
            return Ok(());
        };
        Err(StoreError::Io {
            op,
            key: key.to_string(),
            source: io::Error::new(io::ErrorKind::StorageFull, message),
        })
    }

    /// Stores `body` with its `metadata` under `key`, replacing any object there, within the
    /// bounds. `freed` bytes
    /// (parts of a completed upload) are released in the same step.
    fn store(
        &self,
        state: &mut State,
        op: &'static str,
        key: &str,
        (body, metadata): (Bytes, Metadata),
        freed: u64,
        etag_suffix: &str,
    ) -> Result<PutResult> {
        if key.is_empty() {
            return Err(StoreError::Io {
                op,
                key: String::new(),
                source: io::Error::new(io::ErrorKind::InvalidInput, "an object key is not empty"),
            });
        }
        let old = state.objects.get(key).map(|o| o.body.len() as u64);
        let released = old.unwrap_or(0) + freed;
        let size = body.len() as u64;
        self.check_room(
            state,
            op,
            key,
            u64::from(old.is_none()),
            size.saturating_sub(released),
        )?;
        state.used = state.used + size - released;
        let etag = self.new_etag(state, etag_suffix);
        state.objects.insert(
            key.to_string(),
            Object {
                body,
                etag: etag.clone(),
                last_modified: SystemTime::now(),
                metadata,
            },
        );
        Ok(PutResult { etag })
    }

    fn object(state: &State, op: &'static str, key: &str) -> Result<Object> {
        state
            .objects
            .get(key)
            .cloned()
            .ok_or_else(|| StoreError::NotFound {
                op,
                key: key.to_string(),
            })
    }

    fn no_upload(op: &'static str, key: &str, upload_id: &str) -> StoreError {
        StoreError::Service {
            op,
            key: key.to_string(),
            status: 404,
            code: "NoSuchUpload".into(),
            message: format!("no multipart upload {upload_id} in progress for this key"),
        }
    }

    fn put_part(
        &self,
        op: &'static str,
        key: &str,
        upload_id: &str,
        part_number: i32,
        body: Bytes,
    ) -> Result<CompletedPart> {
        let mut state = self.state();
        let old = match state.uploads.get(upload_id) {
            Some(upload) if upload.key == key => {
                upload.parts.get(&part_number).map(|p| p.body.len() as u64)
            }
            _ => return Err(Self::no_upload(op, key, upload_id)),
        };
        let size = body.len() as u64;
        let released = old.unwrap_or(0);
        self.check_room(&state, op, key, 0, size.saturating_sub(released))?;
        state.used = state.used + size - released;
        state.in_parts = state.in_parts + size - released;
        let etag = self.new_etag(&mut state, "");
        let part = Part {
            body,
            etag: etag.clone(),
        };
        if let Some(upload) = state.uploads.get_mut(upload_id) {
            upload.parts.insert(part_number, part);
        }
        Ok(CompletedPart { part_number, etag })
    }

    fn remove_upload(state: &mut State, upload_id: &str) {
        if let Some(upload) = state.uploads.remove(upload_id) {
            let bytes: u64 = upload.parts.values().map(|p| p.body.len() as u64).sum();
            state.used -= bytes;
            state.in_parts -= bytes;
        }
    }
}

fn meta(key: &str, object: &Object) -> ObjectMeta {
    ObjectMeta {
        key: key.to_string(),
        size: object.body.len() as u64,
        etag: object.etag.clone(),
        last_modified: object.last_modified,
    }
}

/// The first string after every string starting with `common` (which ends in "/").
fn past(common: &str) -> String {
    let mut next = common[..common.len() - 1].to_string();
    next.push('0'); // '/' + 1
    next
}

#[async_trait]
impl ObjectStore for RamStore {
    fn id(&self) -> &str {
        &self.id
    }

    fn outlives_process(&self) -> bool {
        false
    }

    async fn head(&self, key: &str) -> Result<Option<ObjectMeta>> {
        Ok(self.state().objects.get(key).map(|o| meta(key, o)))
    }

    async fn get_range(&self, key: &str, range: Range<u64>, etag: Option<&str>) -> Result<Bytes> {
        let object = Self::object(&self.state(), "get", key)?;
        if let Some(expected) = etag
            && object.etag != expected
        {
            return Err(StoreError::Changed {
                op: "get",
                key: key.to_string(),
                expected: expected.to_string(),
            });
        }
        let len = object.body.len() as u64;
        let end = range.end.min(len);
        let start = range.start.min(end);
        Ok(object.body.slice(start as usize..end as usize))
    }

    async fn list(&self, request: &ListRequest) -> Result<ListPage> {
        let page_size = usize::try_from(self.limits.max_list_page_size).unwrap_or(usize::MAX);
        let limit = request
            .max_keys
            .map_or(page_size, |m| (m as usize).min(page_size))
            .max(1);
        let prefix = request.prefix.as_str();
        let marker = request
            .continuation
            .as_deref()
            .max(request.start_after.as_deref());
        let mut from = match marker {
            Some(m) if m >= prefix => Bound::Excluded(m.to_string()),
            _ => Bound::Included(prefix.to_string()),
        };
        let state = self.state();
        let mut page = ListPage::default();
        let mut taken = 0;
        let mut last: Option<String> = None;
        while let Some((key, object)) = state
            .objects
            .range::<String, _>((from.as_ref(), Bound::Unbounded))
            .next()
        {
            if !key.starts_with(prefix) {
                break;
            }
            let common = request
                .delimited
                .then(|| key[prefix.len()..].find('/'))
                .flatten()
                .map(|i| &key[..prefix.len() + i + 1]);
            if let Some(common) = common {
                from = Bound::Included(past(common));
                if marker.is_some_and(|m| common <= m) {
                    continue; // listed before the marker
                }
            } else {
                from = Bound::Excluded(key.clone());
            }
            if taken == limit {
                page.next = last;
                break;
            }
            taken += 1;
            match common {
                Some(common) => {
                    page.common_prefixes.push(common.to_string());
                    last = Some(common.to_string());
                }
                None => {
                    page.objects.push(meta(key, object));
                    last = Some(key.clone());
                }
            }
        }
        Ok(page)
    }

    async fn put(&self, key: &str, body: Bytes) -> Result<PutResult> {
        let mut state = self.state();
        self.store(&mut state, "put", key, (body, Metadata::new()), 0, "")
    }

    async fn create_multipart(&self, key: &str) -> Result<String> {
        self.create_multipart_with_metadata(key, &Metadata::new())
            .await
    }

    fn keeps_metadata(&self) -> bool {
        true
    }

    async fn head_with_metadata(&self, key: &str) -> Result<Option<(ObjectMeta, Metadata)>> {
        let state = self.state();
        Ok(state
            .objects
            .get(key)
            .map(|o| (meta(key, o), o.metadata.clone())))
    }

    async fn put_with_metadata(
        &self,
        key: &str,
        body: Arc<dyn BodySource>,
        metadata: &Metadata,
    ) -> Result<PutResult> {
        let body = gather(body.as_ref()).await?;
        let mut state = self.state();
        self.store(&mut state, "put", key, (body, metadata.clone()), 0, "")
    }

    /// Keeps the bytes and their ETag (as S3 does for an object not uploaded in parts).
    async fn replace_metadata(
        &self,
        key: &str,
        metadata: &Metadata,
        if_match: Option<&str>,
    ) -> Result<PutResult> {
        const OP: &str = "replace_metadata";
        let mut state = self.state();
        let object = state
            .objects
            .get_mut(key)
            .ok_or_else(|| StoreError::NotFound {
                op: OP,
                key: key.to_string(),
            })?;
        if let Some(expected) = if_match
            && object.etag != expected
        {
            return Err(StoreError::Changed {
                op: OP,
                key: key.to_string(),
                expected: expected.to_string(),
            });
        }
        object.metadata = metadata.clone();
        object.last_modified = SystemTime::now();
        Ok(PutResult {
            etag: object.etag.clone(),
        })
    }

    async fn create_multipart_with_metadata(
        &self,
        key: &str,
        metadata: &Metadata,
    ) -> Result<String> {
        let mut state = self.state();
        state.serial += 1;
        let id = format!("ram{:x}-upload-{:x}", self.instance, state.serial);
        state.uploads.insert(
            id.clone(),
            Upload {
                key: key.to_string(),
                metadata: metadata.clone(),
                initiated: SystemTime::now(),
                parts: BTreeMap::new(),
            },
        );
        Ok(id)
    }

    async fn upload_part(
        &self,
        key: &str,
        upload_id: &str,
        part_number: i32,
        body: Bytes,
    ) -> Result<CompletedPart> {
        self.put_part("upload_part", key, upload_id, part_number, body)
    }

    async fn upload_part_copy(
        &self,
        key: &str,
        upload_id: &str,
        part_number: i32,
        copied: CopySource<'_>,
    ) -> Result<CompletedPart> {
        let (source_key, range) = (copied.key, copied.range);
        let source = Self::object(&self.state(), "upload_part_copy", source_key)?;
        if let Some(expected) = copied.if_match
            && source.etag != expected
        {
            return Err(StoreError::Changed {
                op: "upload_part_copy",
                key: source_key.to_string(),
                expected: expected.to_string(),
            });
        }
        let len = source.body.len() as u64;
        if range.start > range.end || range.end > len {
            return Err(StoreError::Service {
                op: "upload_part_copy",
                key: source_key.to_string(),
                status: 416,
                code: "InvalidRange".into(),
                message: format!("range {range:?} is not within the {len} bytes of the source"),
            });
        }
        let body = source.body.slice(range.start as usize..range.end as usize);
        self.put_part("upload_part_copy", key, upload_id, part_number, body)
    }

    async fn complete_multipart(
        &self,
        key: &str,
        upload_id: &str,
        parts: &[CompletedPart],
    ) -> Result<PutResult> {
        const OP: &str = "complete_multipart";
        let mut state = self.state();
        let Some(upload) = state.uploads.get(upload_id).filter(|u| u.key == key) else {
            return Err(Self::no_upload(OP, key, upload_id));
        };
        let invalid = |message: String| StoreError::Service {
            op: OP,
            key: key.to_string(),
            status: 400,
            code: "InvalidPart".into(),
            message,
        };
        if parts.is_empty() {
            return Err(invalid("no parts given".into()));
        }
        let mut bodies = Vec::with_capacity(parts.len());
        let mut previous = 0;
        for part in parts {
            if part.part_number <= previous {
                return Err(invalid(format!(
                    "part {} out of ascending order",
                    part.part_number
                )));
            }
            previous = part.part_number;
            match upload.parts.get(&part.part_number) {
                Some(stored) if stored.etag == part.etag => bodies.push(stored.body.clone()),
                _ => {
                    return Err(invalid(format!(
                        "part {} with ETag {} was not uploaded",
                        part.part_number, part.etag
                    )));
                }
            }
        }
        let freed: u64 = upload.parts.values().map(|p| p.body.len() as u64).sum();
        let body = if bodies.len() == 1 {
            bodies.swap_remove(0)
        } else {
            let mut joined = BytesMut::with_capacity(bodies.iter().map(Bytes::len).sum());
            for b in &bodies {
                joined.extend_from_slice(b);
            }
            joined.freeze()
        };
        let suffix = format!("-{}", parts.len());
        let metadata = upload.metadata.clone();
        // The parts' bytes become the object's: released in the same step, so a completion only
        // fails when the store is out of objects, never out of space.
        let done = self.store(&mut state, OP, key, (body, metadata), freed, &suffix)?;
        state.uploads.remove(upload_id);
        state.in_parts -= freed;
        Ok(done)
    }

    /// Aborting an upload that is not (or no longer) in progress succeeds, as in S3.
    async fn abort_multipart(&self, _key: &str, upload_id: &str) -> Result<()> {
        Self::remove_upload(&mut self.state(), upload_id);
        Ok(())
    }

    async fn list_uploads(&self, prefix: &str) -> Result<Vec<PendingUpload>> {
        let state = self.state();
        let mut uploads: Vec<PendingUpload> = state
            .uploads
            .iter()
            .filter(|(_, u)| u.key.starts_with(prefix))
            .map(|(id, u)| PendingUpload {
                key: u.key.clone(),
                upload_id: id.clone(),
                initiated: u.initiated,
            })
            .collect();
        uploads.sort_by(|a, b| (&a.key, a.initiated).cmp(&(&b.key, b.initiated)));
        Ok(uploads)
    }

    async fn copy(&self, source_key: &str, dest_key: &str) -> Result<PutResult> {
        let mut state = self.state();
        let source = Self::object(&state, "copy", source_key)?;
        self.store(
            &mut state,
            "copy",
            dest_key,
            (source.body, source.metadata),
            0,
            "",
        )
    }

    async fn delete(&self, key: &str) -> Result<()> {
        let mut state = self.state();
        if let Some(object) = state.objects.remove(key) {
            state.used -= object.body.len() as u64;
        }
        Ok(())
    }

    async fn delete_many(&self, keys: &[String]) -> Result<()> {
        for key in keys {
            self.delete(key).await?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
