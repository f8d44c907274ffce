//! The process's open manifests: one [`Manifest`] per manifest directory, shared by every
//! mount and volume that uses it (its index file can only be opened once per process, and two
//! mounts of one manifest must see each other's delta records).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Weak};

use super::namespace::{Manifest, ManifestError};

#[derive(Debug, Clone, Default)]
pub struct Manifests {
    open: Arc<tokio::sync::Mutex<HashMap<PathBuf, Weak<Manifest>>>>,
    /// One lock per manifest directory that someone is generating into.
    generating: Arc<std::sync::Mutex<HashMap<PathBuf, Arc<tokio::sync::Mutex<()>>>>>,
}

impl Manifests {
    pub fn new() -> Manifests {
        Manifests::default()
    }

    /// Waits until nobody else in this process generates into `root`, and holds that until the
    /// guard drops: two volumes (or a retried publish) must not list the same bucket into the
    /// same directory at once. Re-check for a manifest after getting it.
    pub async fn generation_lock(&self, root: &Path) -> tokio::sync::OwnedMutexGuard<()> {
        let lock = {
            let mut generating = self.generating.lock().unwrap_or_else(|p| p.into_inner());
            generating.retain(|_, lock| Arc::strong_count(lock) > 1);
            generating.entry(root.to_path_buf()).or_default().clone()
        };
        lock.lock_owned().await
    }

    /// The manifest in `root`, or `None` when there is none. The first open in this process
    /// starts building (or loading) its index in the background; a writable user opens the
    /// delta log.
    pub async fn open(
        &self,
        root: &Path,
        writable: bool,
    ) -> Result<Option<Arc<Manifest>>, ManifestError> {
        // Held across the open so two mounts racing for one manifest share it.
        let mut open = self.open.lock().await;
        open.retain(|_, manifest| manifest.strong_count() > 0);
        let key = std::fs::canonicalize(root).unwrap_or_else(|_| root.to_path_buf());
        if let Some(manifest) = open.get(&key).and_then(Weak::upgrade) {
            if writable {
                let shared = manifest.clone();
                blocking(move || shared.open_log()).await?;
            }
            return Ok(Some(manifest));
        }
        let dir = key.clone();
        let Some(manifest) = blocking(move || Manifest::open(&dir, writable)).await? else {
            return Ok(None);
        };
        let manifest = Arc::new(manifest);
        open.insert(key, Arc::downgrade(&manifest));
        let building = manifest.clone();
        tokio::task::spawn_blocking(move || {
            if let Err(e) = building.load_or_build_index() {
                tracing::error!(
                    manifest = %building.root().display(),
                    "manifest index failed, listings keep being read from the TSV files: {e}"
                );
            }
        });
        Ok(Some(manifest))
    }
}

/// Runs blocking manifest work (local file reads, fsyncs) off the async threads.
pub async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, ManifestError> + Send + 'static,
) -> Result<T, ManifestError> {
    tokio::task::spawn_blocking(work).await.unwrap_or_else(|e| {
        Err(ManifestError::Unusable {
            root: PathBuf::new(),
            what: format!("manifest task failed: {e}"),
        })
    })
}
