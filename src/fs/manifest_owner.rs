//! `chmod` and `chown` through a writable manifest-backed mount. A manifest row can state an
//! owner and mode (columns 6–8); a change is recorded as that row with the new owner in the
//! delta log, like any other change, so a remount (and a manifest built from the log) shows it.
//! A file written for the first time has no row until its commit: its owner waits in the
//! manifest (`Manifest::set_pending_owner`) for the row the commit records. Times are accepted
//! and not kept, as on any backend without `posix_metadata`: a row holds the commit's mtime.

use std::sync::Arc;

use super::backend::Backend;
use super::inode::Node;
use super::{BackendSettings, Fs, FsError, Result, SetAttr, lock};
use crate::manifest::delta::Change;
use crate::manifest::format::Ownership;
use crate::manifest::namespace::Manifest;
use crate::manifest::registry::blocking;

impl Fs {
    pub(super) async fn change_manifest_owner(
        &self,
        node: &Node,
        backend: &Arc<Backend>,
        settings: &BackendSettings,
        manifest: Arc<Manifest>,
        change: &SetAttr,
    ) -> Result<()> {
        if change.mode.is_none() && change.uid.is_none() && change.gid.is_none() {
            return Ok(());
        }
        if settings.readonly {
            return Err(FsError::ReadOnly {
                backend: backend.dir_name.clone(),
            });
        }
        if node.path.is_empty() {
            return Err(FsError::NotPermitted(
                "a backend's root directory has no manifest row to keep its owner in",
            ));
        }
        let current = node.kind.owner().unwrap_or(Ownership {
            perm: if node.is_dir() {
                settings.dir_perm
            } else {
                settings.file_perm
            },
            uid: settings.uid,
            gid: settings.gid,
        });
        let owner = Ownership {
            perm: change
                .mode
                .map_or(current.perm, |mode| (mode & 0o7777) as u16),
            uid: change.uid.unwrap_or(current.uid),
            gid: change.gid.unwrap_or(current.gid),
        };
        let row = {
            let (manifest, path) = (manifest.clone(), node.path.clone());
            blocking(move || {
                let (dir, name) = path.rsplit_once('/').unwrap_or(("", &path));
                manifest.lookup(dir, name)
            })
            .await
            .map_err(|e| Self::manifest_error(backend, e))?
        };
        match row {
            Some(kind) => {
                let change = Change::Upsert(kind.with_owner(Some(owner)));
                settings.record(&backend.dir_name, &node.path, change).await;
            }
            None => manifest.set_pending_owner(&node.path, owner),
        }
        if let Some(node) = lock(&self.inodes).get_mut(node.ino) {
            node.kind.set_owner(Some(owner));
        }
        Ok(())
    }
}
