//! What the controller does in a provisioned volume's bucket: remember the volume, find it
//! again, and empty its prefix.
//!
//! Each volume has a record beside its prefix, `BASE.msfs-volumes/DIR` for the prefix
//! `BASE DIR/`: the request name, capacity and volume context it was created with. A second
//! CreateVolume compares against it (the same: the same volume; different: ALREADY_EXISTS),
//! ValidateVolumeCapabilities tells a live volume from a deleted one by it, and DeleteVolume
//! removes it last. It lies outside the prefix, so the volume's mount never shows it.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::{StreamExt, TryStreamExt};
use serde::{Deserialize, Serialize};

use super::volume_id::VolumeLocation;
use crate::store::{ListRequest, ObjectStore, Result, StoreError};
use crate::write::abort_stale_uploads;

/// The directory of the records, under the base prefix. Volume directories start with a letter
/// or digit (see `parameters::volume_dir`), so none can be this one.
const RECORDS_DIR: &str = ".msfs-volumes/";
/// Keys per DeleteObjects request.
const DELETE_BATCH: usize = 250;
/// DeleteObjects requests in flight per DeleteVolume.
const DELETE_CONCURRENCY: usize = 4;
/// Keys per listing page while deleting.
const LIST_PAGE: u32 = 1000;

/// What CreateVolume made, as kept in the volume's record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VolumeRecord {
    pub name: String,
    pub volume_id: String,
    pub capacity_bytes: i64,
    pub context: BTreeMap<String, String>,
}

/// The key of the record of the volume at `location`.
pub fn record_key(location: &VolumeLocation) -> String {
    let trimmed = location.prefix.trim_end_matches('/');
    let (base, dir) = match trimmed.rsplit_once('/') {
        Some((base, dir)) => (format!("{base}/"), dir),
        None => (String::new(), trimmed),
    };
    format!("{base}{RECORDS_DIR}{dir}")
}

/// The volume's record, if it has one (it exists).
pub async fn read_record(
    store: &dyn ObjectStore,
    location: &VolumeLocation,
) -> Result<Option<VolumeRecord>> {
    let key = record_key(location);
    let Some(meta) = store.head(&key).await? else {
        return Ok(None);
    };
    let body = store.get_range(&key, 0..meta.size, None).await?;
    // A record that does not parse was not written by this controller: the volume is taken as
    // another one, whose name CreateVolume must not reuse.
    Ok(Some(serde_json::from_slice(&body).unwrap_or(
        VolumeRecord {
            name: String::new(),
            volume_id: String::new(),
            capacity_bytes: -1,
            context: BTreeMap::new(),
        },
    )))
}

pub async fn write_record(
    store: &dyn ObjectStore,
    location: &VolumeLocation,
    record: &VolumeRecord,
) -> Result<()> {
    let body = serde_json::to_vec_pretty(record)
        .map_err(|e| StoreError::Setup(format!("volume record: {e}")))?;
    store
        .put(&record_key(location), Bytes::from(body))
        .await
        .map(|_| ())
}

/// What a DeleteVolume removed.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Emptied {
    pub objects: usize,
    pub uploads: usize,
}

/// Removes the volume: its open multipart uploads, then every object under its prefix, then
/// its record. Each step only removes, so a DeleteVolume cut short (a crash, a timeout) and
/// repeated carries on where the first stopped; a volume already gone is emptied again for
/// nothing. With `keep_data` only the record goes.
pub async fn delete_volume(
    store: Arc<dyn ObjectStore>,
    location: &VolumeLocation,
) -> Result<Emptied> {
    let mut emptied = Emptied::default();
    if !location.keep_data {
        // First, so that no upload completes into the prefix once it is emptied.
        emptied.uploads =
            abort_stale_uploads(store.as_ref(), &location.prefix, Duration::ZERO, false)
                .await?
                .len();
        emptied.objects = delete_prefix(store.clone(), &location.prefix).await?;
    }
    store.delete(&record_key(location)).await?;
    Ok(emptied)
}

/// Deletes every object under `prefix`, a listing page at a time, each page in batches of
/// [`DELETE_BATCH`] keys with at most [`DELETE_CONCURRENCY`] batches in flight.
async fn delete_prefix(store: Arc<dyn ObjectStore>, prefix: &str) -> Result<usize> {
    let mut deleted = 0;
    let mut continuation = None;
    loop {
        let page = store
            .list(
                &ListRequest::flat(prefix)
                    .continuing(continuation.take())
                    .max_keys(Some(LIST_PAGE)),
            )
            .await?;
        let keys: Vec<String> = page.objects.into_iter().map(|o| o.key).collect();
        deleted += keys.len();
        // Owned batches: the futures must not borrow the page across the stream.
        let batches: Vec<Vec<String>> = keys.chunks(DELETE_BATCH).map(<[String]>::to_vec).collect();
        futures::stream::iter(batches.into_iter().map(|batch| {
            let store = store.clone();
            async move { store.delete_many(&batch).await }
        }))
        .buffer_unordered(DELETE_CONCURRENCY)
        .try_collect::<Vec<()>>()
        .await?;
        match page.next {
            Some(next) => continuation = Some(next),
            None => return Ok(deleted),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::FileStore;

    fn location(prefix: &str, keep_data: bool) -> VolumeLocation {
        VolumeLocation {
            region: "r".into(),
            endpoint: None,
            bucket: "b".into(),
            prefix: prefix.into(),
            keep_data,
        }
    }

    #[test]
    fn records_sit_beside_the_prefix_outside_it() {
        assert_eq!(
            record_key(&location("pvc-1/", false)),
            ".msfs-volumes/pvc-1"
        );
        assert_eq!(
            record_key(&location("a/b/pvc-1/", false)),
            "a/b/.msfs-volumes/pvc-1"
        );
    }

    #[tokio::test]
    async fn deleting_empties_the_prefix_in_pages_and_spares_its_neighbours() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store: Arc<dyn ObjectStore> =
            Arc::new(FileStore::new(dir.path().to_path_buf()).expect("store"));
        let gone = location("pvc-1/", false);
        for i in 0..(LIST_PAGE as usize + DELETE_BATCH + 3) {
            store
                .put(&format!("pvc-1/d{}/f{i}", i % 7), Bytes::from_static(b"x"))
                .await
                .expect("put");
        }
        for neighbour in ["pvc-10/f", "pvc-1.bak", "other/pvc-1/f"] {
            store
                .put(neighbour, Bytes::from_static(b"kept"))
                .await
                .expect("put");
        }
        store.create_multipart("pvc-1/open").await.expect("upload");
        let record = VolumeRecord {
            name: "pvc-1".into(),
            volume_id: "id".into(),
            capacity_bytes: 1,
            context: BTreeMap::new(),
        };
        write_record(store.as_ref(), &gone, &record)
            .await
            .expect("record");
        assert_eq!(
            read_record(store.as_ref(), &gone).await.expect("read"),
            Some(record)
        );
        let emptied = delete_volume(store.clone(), &gone).await.expect("delete");
        assert_eq!(emptied.uploads, 1);
        assert_eq!(emptied.objects, LIST_PAGE as usize + DELETE_BATCH + 3);
        let left = store
            .list(&ListRequest::flat(""))
            .await
            .expect("list")
            .objects;
        let mut left: Vec<String> = left.into_iter().map(|o| o.key).collect();
        left.sort();
        assert_eq!(left, ["other/pvc-1/f", "pvc-1.bak", "pvc-10/f"]);
        assert_eq!(
            read_record(store.as_ref(), &gone).await.expect("read"),
            None
        );
        // Again: no error, nothing of the neighbours touched.
        delete_volume(store.clone(), &gone).await.expect("again");
        let again = store.list(&ListRequest::flat("")).await.expect("list");
        assert_eq!(again.objects.len(), 3);
    }
}
