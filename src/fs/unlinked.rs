//! Objects unlinked while open. `unlink` of a name some handle of this mount has open keeps the
//! object (the handles read it) and records it here: hidden from lookups and listings. The last
//! release deletes it. A new object at the name must land after that deletion, never before it:
//! a create (or a rename onto the name) of a name still recorded takes the record (the old
//! object is not deleted), and one whose deletion is under way waits for it. Otherwise the
//! DELETE of the old object, sent after the release and answered late, could remove the new
//! one that a `close` had already reported written.

use std::sync::Arc;

use tokio::sync::watch;

use super::{BackendSettings, FileHandle, Fs, lock};
use crate::manifest::delta::Change;

/// An object unlinked while a handle was open on it.
#[derive(Clone)]
pub(super) struct Unlinked {
    pub ino: u64,
    /// The backend's settings when it was unlinked: its store, and its manifest to record the
    /// deletion in once it happens.
    pub settings: Arc<BackendSettings>,
    pub path: String,
    /// Set once its last handle is released and its deletion is under way: a create of the
    /// name waits until it is done (the sender is dropped).
    pub deleting: Option<watch::Receiver<()>>,
}

/// An object unlinked while open whose last handle was released: to be deleted from the store
/// (`Fs::delete_unlinked`). Its record stays, marked as being deleted, until that is done.
pub struct Doomed {
    handle: Arc<FileHandle>,
    unlinked: Unlinked,
    /// Dropped once the deletion is done, which wakes the creates of the name waiting for it.
    _done: watch::Sender<()>,
}

impl Fs {
    /// The record of the object `handle` had open, if `handle` was its last one (the caller
    /// removed it from the open handles) and it was unlinked meanwhile: marked as being deleted,
    /// for [`Fs::delete_unlinked`].
    pub(super) fn doomed_by_release(&self, handle: Arc<FileHandle>) -> Option<Doomed> {
        // Whether this was the last handle, and marking the record, happen under the `unlinked`
        // lock, which `unlink` holds while it checks for open handles and records the name: so
        // exactly one of the two deletes the object, never neither.
        let mut records = lock(&self.unlinked);
        let still_open = lock(&self.files).values().any(|h| h.ino == handle.ino);
        let id = (handle.store.id().to_string(), handle.version.key.clone());
        let record = match records.get_mut(&id) {
            Some(u) if u.ino == handle.ino && u.deleting.is_none() && !still_open => u,
            _ => return None,
        };
        let (done, deleting) = watch::channel(());
        record.deleting = Some(deleting);
        let unlinked = record.clone();
        Some(Doomed {
            handle,
            unlinked,
            _done: done,
        })
    }

    /// Deletes an object unlinked while open, whose last handle `release_now` closed; then the
    /// name is free for a new object.
    pub async fn delete_unlinked(&self, doomed: Doomed) {
        let Doomed {
            handle, unlinked, ..
        } = &doomed;
        let key = &handle.version.key;
        match unlinked.settings.store.delete(key).await {
            Ok(()) => {
                (unlinked.settings)
                    .record(&handle.backend, &unlinked.path, Change::Deleted)
                    .await
            }
            Err(e) => tracing::warn!(backend = %handle.backend, key = %key,
                error = %e, "cannot delete a file unlinked while open"),
        }
        let id = (handle.store.id().to_string(), key.clone());
        let mut records = lock(&self.unlinked);
        if records
            .get(&id)
            .is_some_and(|u| u.ino == unlinked.ino && u.deleting.is_some())
        {
            records.remove(&id);
        }
        // The record is gone before `doomed` (its sender) drops: a woken create finds it so.
    }

    /// Takes key `key` of store `store_id` for a new object: an object unlinked there while
    /// open is no longer deleted at its last release. `Some` while such an object is being
    /// deleted: wait on it (it changes, or closes, when the deletion is done) and ask again.
    pub(super) fn claim_name(&self, store_id: &str, key: &str) -> Option<watch::Receiver<()>> {
        let id = (store_id.to_string(), key.to_string());
        let mut records = lock(&self.unlinked);
        let deleting = records.get(&id).and_then(|u| u.deleting.clone());
        // A closed channel with the record still there: the deletion was given up (its task
        // dropped); the new object replaces the old one anyway.
        if let Some(deleting) = deleting.filter(|d| d.has_changed().is_ok()) {
            return Some(deleting);
        }
        records.remove(&id);
        None
    }

    /// [`Fs::claim_name`], waiting out a deletion under way.
    pub(super) async fn claim_name_waiting(&self, store_id: &str, key: &str) {
        while let Some(mut deleting) = self.claim_name(store_id, key) {
            // Err once the sender is dropped: the deletion is done either way.
            let _ = deleting.changed().await;
        }
    }
}
