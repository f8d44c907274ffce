//! A mounted backend: one store and prefix, shown as one directory under the mount root.
//!
//! Its settings sit behind one lock so that a configuration reload can change credentials,
//! endpoint or permissions in place: every inode of the backend shares the `Backend`, and each
//! operation takes a snapshot of the settings it started with.

use std::sync::{Arc, RwLock};

use super::FsError;
use crate::config::BackendConfig;
use crate::manifest::delta::Change;
use crate::manifest::format::EntryKind;
use crate::manifest::namespace::Manifest;
use crate::manifest::registry::blocking;
use crate::store::ObjectStore;
use crate::write::{CommitObserver, Target};

#[derive(Debug)]
pub struct Backend {
    pub dir_name: String,
    current: RwLock<Arc<BackendSettings>>,
}

#[derive(Debug)]
pub struct BackendSettings {
    pub store: Arc<dyn ObjectStore>,
    /// Key prefix of everything this backend shows; "" or ending with "/".
    pub prefix: String,
    pub readonly: bool,
    /// Close waits for the commit (`true`) or leaves it to the background (`false`).
    pub flush_on_close: bool,
    /// Modes, owners and times are each object's own, kept in its user metadata (`posix`).
    pub posix_metadata: bool,
    pub uid: u32,
    pub gid: u32,
    pub dir_perm: u16,
    pub file_perm: u16,
    /// Keys per LIST request; `None` lets the store choose.
    pub page_size: Option<u32>,
    /// The longest key a name may make (`max_key_bytes`).
    pub max_key_bytes: usize,
    /// When set, the namespace comes from this manifest (and its delta log), never from LIST
    /// or HEAD.
    pub manifest: Option<Arc<Manifest>>,
}

impl Backend {
    pub fn new(dir_name: &str, settings: BackendSettings) -> Backend {
        Backend {
            dir_name: dir_name.to_string(),
            current: RwLock::new(Arc::new(settings)),
        }
    }

    /// The settings in force now; an operation keeps the snapshot it started with.
    pub fn settings(&self) -> Arc<BackendSettings> {
        self.current
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }

    /// Applies new settings (a reload that changed this backend in place).
    pub fn replace(&self, settings: BackendSettings) {
        *self
            .current
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = Arc::new(settings);
    }
}

impl BackendSettings {
    pub fn new(
        config: &BackendConfig,
        store: Arc<dyn ObjectStore>,
        manifest: Option<Arc<Manifest>>,
    ) -> BackendSettings {
        BackendSettings {
            manifest,
            store,
            prefix: config.prefix.clone(),
            readonly: config.readonly,
            flush_on_close: config.flush_on_close,
            posix_metadata: config.posix_metadata,
            uid: config.uid,
            gid: config.gid,
            dir_perm: config.dir_perm,
            file_perm: config.file_perm,
            page_size: (config.directory_page_size > 0).then_some(config.directory_page_size),
            max_key_bytes: config.max_key_bytes as usize,
        }
    }

    /// The object key of `path` (a "/"-joined path inside the backend, "" for its root).
    pub fn key_of(&self, path: &str) -> String {
        format!("{}{}", self.prefix, path)
    }

    /// `ENAMETOOLONG` for a key longer than this backend's stores take, before any request.
    pub fn check_key_len(&self, key: &str) -> Result<(), FsError> {
        if key.len() > self.max_key_bytes {
            return Err(FsError::NameTooLong);
        }
        Ok(())
    }

    /// The listing prefix of directory `path`: its key followed by "/" (just the backend prefix
    /// for the backend root).
    pub fn dir_prefix_of(&self, path: &str) -> String {
        if path.is_empty() {
            self.prefix.clone()
        } else {
            format!("{}{}/", self.prefix, path)
        }
    }

    /// Where a file at `path` is committed; commits of a manifest-backed backend are recorded
    /// in its delta log.
    pub fn target(&self, backend: &str, path: &str) -> Target {
        Target {
            store: self.store.clone(),
            backend: backend.to_string(),
            key: self.key_of(path),
            observer: self.manifest.as_ref().map(|manifest| {
                Arc::new(DeltaRecorder {
                    manifest: manifest.clone(),
                    prefix: self.prefix.clone(),
                    backend: backend.to_string(),
                }) as Arc<dyn CommitObserver>
            }),
        }
    }

    /// Records a change the store has already made in the manifest's delta log, if this
    /// backend has one. The change is visible to this process even if the log cannot be
    /// written (the error is logged: only a later mount would miss it).
    pub async fn record(&self, backend: &str, path: &str, change: Change) {
        if let Some(manifest) = &self.manifest {
            record(manifest, backend, path, change).await;
        }
    }
}

async fn record(manifest: &Arc<Manifest>, backend: &str, path: &str, change: Change) {
    let (shared, owned) = (manifest.clone(), path.to_string());
    if let Err(e) = blocking(move || shared.record(&owned, change)).await {
        tracing::error!(%backend, path, "cannot record a change in the manifest's delta log: {e}");
    }
}

/// Records the commits of one backend's files in its manifest's delta log.
#[derive(Debug)]
struct DeltaRecorder {
    manifest: Arc<Manifest>,
    prefix: String,
    backend: String,
}

#[async_trait::async_trait]
impl CommitObserver for DeltaRecorder {
    async fn committed(&self, key: &str, size: u64, etag: &str) {
        let Some(path) = key.strip_prefix(&self.prefix) else {
            return;
        };
        // A file rewritten keeps the owner and mode its row states, as a rewrite keeps them
        // on any filesystem; a new file has what was set on it while it was written, if
        // anything (else the backend's apply).
        let owner = match self.manifest.take_pending_owner(path) {
            Some(owner) => Some(owner),
            None => {
                let (manifest, file) = (self.manifest.clone(), path.to_string());
                let before = blocking(move || {
                    let (dir, name) = file.rsplit_once('/').unwrap_or(("", &file));
                    manifest.lookup(dir, name)
                });
                before.await.ok().flatten().and_then(|kind| kind.owner())
            }
        };
        let kind = EntryKind::File {
            size,
            etag: etag.to_string(),
            // The store's own time would cost a HEAD; the commit just happened.
            mtime: std::time::SystemTime::now(),
            owner,
        };
        record(&self.manifest, &self.backend, path, Change::Upsert(kind)).await;
    }
}
