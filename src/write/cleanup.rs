//! Cleaning up after a crash by hand: multipart uploads a killed process started and never
//! completed stay invisible in the bucket (and billed) until aborted. The upload journal (see
//! `journal`) aborts those of killed msfs processes at the next mount; `msfs abort-uploads`
//! finds the rest by age (after a reboot emptied the journal, or uploads of other tools).

use std::time::{Duration, SystemTime};

use crate::store::{ObjectStore, PendingUpload, Result};

/// Aborts the uploads under `prefix` started more than `older_than` ago (all of them with
/// `Duration::ZERO`), or only lists them when `dry_run`. Returns the uploads concerned.
///
/// Uploads of other writers look the same as ours in S3: keep `older_than` above the longest
/// time a live writer may hold a file open, or those writers' commits fail (and are retried
/// from scratch).
pub async fn abort_stale_uploads(
    store: &dyn ObjectStore,
    prefix: &str,
    older_than: Duration,
    dry_run: bool,
) -> Result<Vec<PendingUpload>> {
    let now = SystemTime::now();
    let stale: Vec<PendingUpload> = store
        .list_uploads(prefix)
        .await?
        .into_iter()
        .filter(|u| now.duration_since(u.initiated).unwrap_or_default() >= older_than)
        .collect();
    if !dry_run {
        for upload in &stale {
            store
                .abort_multipart(&upload.key, &upload.upload_id)
                .await?;
        }
    }
    Ok(stale)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::FileStore;

    #[tokio::test]
    async fn stale_uploads_are_listed_then_aborted_and_fresh_ones_kept() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = FileStore::new(dir.path().to_path_buf()).expect("store");
        let old = store.create_multipart("data/a").await.expect("create");
        store.create_multipart("other/b").await.expect("create");
        let listed = abort_stale_uploads(&store, "data/", Duration::ZERO, true)
            .await
            .expect("dry run");
        assert_eq!(listed.len(), 1);
        assert_eq!(listed[0].upload_id, old);
        assert_eq!(store.list_uploads("").await.expect("list").len(), 2);
        let kept = abort_stale_uploads(&store, "", Duration::from_secs(3600), false)
            .await
            .expect("nothing that old");
        assert!(kept.is_empty());
        let aborted = abort_stale_uploads(&store, "", Duration::ZERO, false)
            .await
            .expect("abort");
        assert_eq!(aborted.len(), 2);
        assert!(store.list_uploads("").await.expect("list").is_empty());
    }
}
