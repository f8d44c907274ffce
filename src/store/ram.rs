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
use std::sync::{Mutex, MutexGuard};
use std::time::SystemTime;

use async_trait::async_trait;
use bytes::{Bytes, BytesMut};

use super::{
    CompletedPart, ListPage, ListRequest, ObjectMeta, ObjectStore, PendingUpload, PutResult,
    Result, StoreError,
};
use crate::config::RamConfig;

/// Tells the stores of one process apart, so their ids and ETags never collide in the shared cache.
static NEXT_INSTANCE: AtomicU64 = AtomicU64::new(1);

#[derive(Debug, Clone)]
struct Object {
    body: Bytes,
    etag: String,
    last_modified: SystemTime,
}

#[derive(Debug)]
struct Upload {
    key: String,
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

    /// Stores `body` under `key`, replacing any object there, within the bounds. `freed` bytes
    /// (parts of a completed upload) are released in the same step.
    fn store(
        &self,
        state: &mut State,
        op: &'static str,
        key: &str,
        body: Bytes,
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
        self.store(&mut state, "put", key, body, 0, "")
    }

    async fn create_multipart(&self, key: &str) -> Result<String> {
        let mut state = self.state();
        state.serial += 1;
        let id = format!("ram{:x}-upload-{:x}", self.instance, state.serial);
        state.uploads.insert(
            id.clone(),
            Upload {
                key: key.to_string(),
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
        source_key: &str,
        range: Range<u64>,
    ) -> Result<CompletedPart> {
        let source = Self::object(&self.state(), "upload_part_copy", source_key)?;
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
        // The parts' bytes become the object's: released in the same step, so a completion only
        // fails when the store is out of objects, never out of space.
        let done = self.store(&mut state, OP, key, body, freed, &suffix)?;
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
        self.store(&mut state, "copy", dest_key, source.body, 0, "")
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
mod tests {
    use std::collections::BTreeSet;

    use super::*;
    use crate::store::pseudo::tests::{entries_of, reference_page};

    const MIB: u64 = 1 << 20;

    fn store(objects: u64, space: u64) -> RamStore {
        RamStore::new(
            "test",
            RamConfig {
                max_list_page_size: 1000,
                max_total_objects: objects,
                max_total_object_space: space,
            },
        )
    }

    fn is_full(result: Result<impl std::fmt::Debug>) -> bool {
        match result {
            Err(StoreError::Io { source, .. }) => source.kind() == io::ErrorKind::StorageFull,
            other => panic!("expected a full store, got {other:?}"),
        }
    }

    async fn body(store: &RamStore, key: &str) -> Bytes {
        store.get_range(key, 0..u64::MAX, None).await.expect("get")
    }

    #[tokio::test]
    async fn listings_match_a_materialized_listing_for_every_page_size_and_marker() {
        let keys: BTreeSet<String> = [
            "a",
            "a/",
            "a/b",
            "a/b/",
            "a/b/c",
            "a/b/d",
            "a/c",
            "a.txt",
            "a0",
            "b/x/y/z",
            "b/x/z",
            "b/y",
            "c",
            "c/",
            "dir/f1",
            "dir/f2",
            "dir/sub/g",
            "ü/é",
        ]
        .into_iter()
        .map(String::from)
        .collect();
        let store = store(1000, MIB);
        for key in &keys {
            store.put(key, Bytes::from(key.clone())).await.expect("put");
        }
        let mut prefixes: BTreeSet<String> = BTreeSet::from(["".to_string(), "nope/".into()]);
        for key in &keys {
            for (i, _) in key.char_indices() {
                prefixes.insert(key[..i].to_string());
            }
            prefixes.insert(key.clone());
        }
        let markers: Vec<String> = prefixes.iter().cloned().chain(["zzz".into()]).collect();
        for prefix in &prefixes {
            for delimited in [false, true] {
                let request = ListRequest {
                    delimited,
                    ..ListRequest::flat(prefix.clone())
                };
                for limit in 1..=keys.len() + 1 {
                    let mut request = request.clone().max_keys(Some(limit as u32));
                    loop {
                        let page = store.list(&request).await.expect("list");
                        let (want, next) = reference_page(&keys, &request, limit);
                        assert_eq!(entries_of(&page), want, "{request:?}");
                        assert_eq!(page.next, next, "{request:?}");
                        if page.next.is_none() {
                            break;
                        }
                        request.continuation = page.next;
                    }
                }
                for marker in &markers {
                    let request = request.clone().after(marker.clone());
                    for limit in [1, 3, 1000] {
                        let page = store
                            .list(&request.clone().max_keys(Some(limit)))
                            .await
                            .expect("list");
                        let (want, next) = reference_page(&keys, &request, limit as usize);
                        assert_eq!(entries_of(&page), want, "{request:?} {limit}");
                        assert_eq!(page.next, next, "{request:?} {limit}");
                    }
                }
            }
        }
        let page = store
            .list(&ListRequest::delimited("a/"))
            .await
            .expect("list");
        assert_eq!(
            page.objects[0].key, "a/",
            "a directory marker lists as an object"
        );
        assert_eq!(page.objects[0].size, 1 + 1);
    }

    #[tokio::test]
    async fn the_configured_page_size_caps_max_keys() {
        let store = RamStore::new(
            "t",
            RamConfig {
                max_list_page_size: 2,
                max_total_objects: 10,
                max_total_object_space: MIB,
            },
        );
        for key in ["a", "b", "c"] {
            store.put(key, Bytes::new()).await.expect("put");
        }
        let page = store
            .list(&ListRequest::flat("").max_keys(Some(10)))
            .await
            .expect("list");
        assert_eq!(page.objects.len(), 2);
        assert_eq!(page.next.as_deref(), Some("b"));
    }

    #[tokio::test]
    async fn every_write_gives_a_new_etag_and_old_etags_read_as_changed() {
        let store = store(10, MIB);
        let first = store
            .put("k", Bytes::from_static(b"same"))
            .await
            .expect("put");
        let second = store
            .put("k", Bytes::from_static(b"same"))
            .await
            .expect("put");
        assert_ne!(first.etag, second.etag);
        assert!(matches!(
            store.get_range("k", 0..4, Some(&first.etag)).await,
            Err(StoreError::Changed { .. })
        ));
        let copied = store.copy("k", "k2").await.expect("copy");
        assert_ne!(copied.etag, second.etag);
        assert_eq!(&body(&store, "k2").await[..], b"same");
        assert_eq!(
            store.head("k").await.expect("head").expect("exists").etag,
            second.etag
        );
        assert_eq!(
            &store
                .get_range("k", 1..3, Some(&second.etag))
                .await
                .expect("get")[..],
            b"am"
        );
        assert!(
            store
                .get_range("k", 10..20, None)
                .await
                .expect("get")
                .is_empty()
        );
        assert!(matches!(
            store.get_range("missing", 0..1, None).await,
            Err(StoreError::NotFound { .. })
        ));
        assert!(matches!(
            store.copy("missing", "x").await,
            Err(StoreError::NotFound { .. })
        ));
        // Another store of the same process never issues the same ETag.
        let other = self::store(10, MIB);
        let put = other
            .put("k", Bytes::from_static(b"same"))
            .await
            .expect("put");
        assert_ne!(put.etag, first.etag);
        assert_ne!(other.id(), store.id());
    }

    #[tokio::test]
    async fn multipart_assembles_uploaded_and_copied_parts_in_order() {
        let store = store(10, 10 * MIB);
        store
            .put("src", Bytes::from_static(b"0123456789"))
            .await
            .expect("put");
        let id = store.create_multipart("out").await.expect("create");
        let p3 = store
            .upload_part("out", &id, 3, Bytes::from_static(b"tail"))
            .await
            .expect("part 3");
        let p2 = store
            .upload_part_copy("out", &id, 2, "src", 2..6)
            .await
            .expect("part 2");
        let p1 = store
            .upload_part("out", &id, 1, Bytes::from_static(b"XY"))
            .await
            .expect("part 1");
        let uploads = store.list_uploads("o").await.expect("uploads");
        assert_eq!(uploads.len(), 1);
        assert_eq!(
            (uploads[0].key.as_str(), uploads[0].upload_id.as_str()),
            ("out", &*id)
        );
        assert!(
            store.head("out").await.expect("head").is_none(),
            "invisible until done"
        );
        let wrong = CompletedPart {
            part_number: 1,
            etag: "\"wrong\"".into(),
        };
        assert!(
            store
                .complete_multipart("out", &id, &[wrong])
                .await
                .is_err()
        );
        assert!(
            store
                .complete_multipart("out", &id, &[p2.clone(), p1.clone()])
                .await
                .is_err(),
            "parts out of order"
        );
        let done = store
            .complete_multipart("out", &id, &[p1, p2, p3])
            .await
            .expect("complete");
        assert!(done.etag.ends_with("-3\""), "{}", done.etag);
        assert_eq!(&body(&store, "out").await[..], b"XY2345tail");
        assert!(store.list_uploads("").await.expect("uploads").is_empty());
        assert!(matches!(
            store.upload_part("out", &id, 4, Bytes::new()).await,
            Err(StoreError::Service { status: 404, .. })
        ));
        assert!(
            store
                .upload_part_copy("x", &id, 1, "src", 5..11)
                .await
                .is_err(),
            "a range past the source's end"
        );
        let state = store.state();
        assert_eq!((state.used, state.in_parts), (20, 0));
    }

    #[tokio::test]
    async fn the_object_count_bound_refuses_new_keys_but_not_overwrites() {
        let store = store(2, MIB);
        store.put("a", Bytes::from_static(b"1")).await.expect("put");
        store.put("d/", Bytes::new()).await.expect("marker");
        assert!(is_full(store.put("b", Bytes::new()).await));
        assert!(is_full(store.copy("a", "c").await));
        store
            .put("a", Bytes::from_static(b"2"))
            .await
            .expect("overwrite");
        let id = store.create_multipart("e").await.expect("create");
        let part = store
            .upload_part("e", &id, 1, Bytes::from_static(b"p"))
            .await
            .expect("part");
        assert!(is_full(store.complete_multipart("e", &id, &[part]).await));
        store.delete("d/").await.expect("delete");
        store.put("b", Bytes::new()).await.expect("room again");
        assert_eq!(&body(&store, "a").await[..], b"2");
    }

    #[tokio::test]
    async fn the_space_bound_counts_unfinished_parts_and_frees_on_delete_and_abort() {
        let store = store(100, 100);
        store.put("a", Bytes::from(vec![1; 60])).await.expect("put");
        assert!(is_full(store.put("b", Bytes::from(vec![2; 41])).await));
        assert!(
            store.head("b").await.expect("head").is_none(),
            "nothing half-written"
        );
        // Replacing an object only needs room for the difference.
        store
            .put("a", Bytes::from(vec![3; 90]))
            .await
            .expect("grow");
        store
            .put("a", Bytes::from(vec![4; 50]))
            .await
            .expect("shrink");
        let id = store.create_multipart("m").await.expect("create");
        store
            .upload_part("m", &id, 1, Bytes::from(vec![5; 30]))
            .await
            .expect("part");
        assert!(is_full(store.put("c", Bytes::from(vec![6; 21])).await));
        assert!(is_full(
            store.upload_part_copy("m", &id, 2, "a", 0..21).await
        ));
        // A part uploaded again replaces the earlier one.
        store
            .upload_part("m", &id, 1, Bytes::from(vec![7; 50]))
            .await
            .expect("part again");
        store.abort_multipart("m", &id).await.expect("abort");
        store.abort_multipart("m", &id).await.expect("abort twice");
        store
            .put("c", Bytes::from(vec![6; 50]))
            .await
            .expect("room after abort");
        store.delete("a").await.expect("delete");
        store.delete("a").await.expect("delete a missing object");
        store
            .put("d", Bytes::from(vec![8; 50]))
            .await
            .expect("room after delete");
        let state = store.state();
        assert_eq!(
            (state.used, state.in_parts, state.objects.len()),
            (100, 0, 2)
        );
    }

    #[tokio::test]
    async fn completing_a_large_upload_needs_no_extra_room() {
        let store = store(10, 3 * MIB);
        let id = store.create_multipart("big").await.expect("create");
        let mut parts = Vec::new();
        for n in 1..=3 {
            parts.push(
                store
                    .upload_part("big", &id, n, Bytes::from(vec![n as u8; MIB as usize]))
                    .await
                    .expect("part"),
            );
        }
        store
            .complete_multipart("big", &id, &parts)
            .await
            .expect("complete at the bound");
        let got = body(&store, "big").await;
        assert_eq!(got.len() as u64, 3 * MIB);
        assert_eq!((got[0], got[MIB as usize], got[got.len() - 1]), (1, 2, 3));
        store.delete_many(&["big".into()]).await.expect("delete");
        assert_eq!(store.state().used, 0);
    }
}
