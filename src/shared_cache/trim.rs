//! `msfs shared-cache trim --max-bytes N`: deletes the oldest shared lines (by last write)
//! until what is left under the prefix fits in N bytes. Safe while nodes read and fill: a line
//! deleted under a reader is a miss, and a fill after the listing only makes the result a
//! little larger than N.

use std::sync::Arc;

use crate::store::{ListRequest, ObjectMeta, ObjectStore, StoreError};

/// Keys per DeleteObjects request (S3's most).
const DELETE_BATCH: usize = 1000;

/// What a trim found and did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct TrimReport {
    pub objects: u64,
    pub bytes: u64,
    pub deleted_objects: u64,
    pub deleted_bytes: u64,
}

/// Trims the shared lines under `prefix` of `store` to at most `max_bytes`, oldest first.
pub async fn trim(
    store: &Arc<dyn ObjectStore>,
    prefix: &str,
    max_bytes: u64,
) -> Result<TrimReport, StoreError> {
    let mut objects: Vec<ObjectMeta> = Vec::new();
    let mut continuation = None;
    loop {
        let page = store
            .list(&ListRequest::flat(prefix).continuing(continuation))
            .await?;
        objects.extend(page.objects);
        continuation = page.next;
        if continuation.is_none() {
            break;
        }
    }
    let mut report = TrimReport {
        objects: objects.len() as u64,
        bytes: objects.iter().map(|o| o.size).sum(),
        ..TrimReport::default()
    };
    // Oldest first; the key breaks ties so that a trim is the same whatever the listing order.
    objects.sort_by(|a, b| {
        a.last_modified
            .cmp(&b.last_modified)
            .then_with(|| a.key.cmp(&b.key))
    });
    let mut left = report.bytes;
    let doomed: Vec<&ObjectMeta> = objects
        .iter()
        .take_while(|o| {
            let over = left > max_bytes;
            if over {
                left -= o.size;
            }
            over
        })
        .collect();
    for batch in doomed.chunks(DELETE_BATCH) {
        let keys: Vec<String> = batch.iter().map(|o| o.key.clone()).collect();
        store.delete_many(&keys).await?;
        report.deleted_objects += batch.len() as u64;
        report.deleted_bytes += batch.iter().map(|o| o.size).sum::<u64>();
    }
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::RamConfig;
    use crate::store::RamStore;

    #[tokio::test]
    async fn deletes_the_oldest_lines_until_the_rest_fits() {
        let store: Arc<dyn ObjectStore> = Arc::new(RamStore::new(
            "t",
            RamConfig {
                max_list_page_size: 1000,
                max_total_objects: 1000,
                max_total_object_space: 1 << 20,
            },
        ));
        for (i, key) in ["sc/a", "sc/b", "sc/c", "sc/d"].iter().enumerate() {
            store.put(key, vec![0u8; 100].into()).await.unwrap();
            // Distinct write times, in this order.
            if i < 3 {
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            }
        }
        store.put("other/x", vec![0u8; 100].into()).await.unwrap();
        let report = trim(&store, "sc/", 250).await.unwrap();
        assert_eq!(
            report,
            TrimReport {
                objects: 4,
                bytes: 400,
                deleted_objects: 2,
                deleted_bytes: 200,
            }
        );
        let left: Vec<String> = store
            .list(&ListRequest::flat(""))
            .await
            .unwrap()
            .objects
            .into_iter()
            .map(|o| o.key)
            .collect();
        assert_eq!(left, ["other/x", "sc/c", "sc/d"]);
    }
}
