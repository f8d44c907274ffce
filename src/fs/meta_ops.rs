//! Modes, owners, times and symbolic links of `posix_metadata` backends (the format is in
//! `posix`): reading them into attributes, changing them (`chmod`, `chown`, `utimensat`),
//! giving new objects their creator's, `symlink` and `readlink`.
//!
//! A change to an object nobody is writing costs one CopyObject of the object onto itself with
//! the new metadata (`ObjectStore::replace_metadata`), never a re-upload; a file being written
//! takes the change into its commit (`DirtyFile::set_metadata`). Without `posix_metadata`
//! modes and owners are the backend's (`uid`, `gid`, `file_perm`, `dir_perm`) and changes to
//! them are accepted and forgotten, as before.

use std::sync::Arc;
use std::time::{Instant, SystemTime};

use bytes::Bytes;
use futures::stream::{self, StreamExt};

use super::inode::Node;
use super::listing::{self, ChildKind, FileMeta};
use super::posix::{
    Posix, S_IFBLK, S_IFCHR, S_IFDIR, S_IFIFO, S_IFLNK, S_IFMT, S_IFREG, S_IFSOCK, SPECIAL_TYPES,
};
use super::{Attr, BackendSettings, DirEntry, Fs, FsError, Kind, Result, SetAttr, lock};
use crate::manifest::delta::Change;
use crate::manifest::format::EntryKind;
use crate::store::{InMemory, Metadata, StoreError};

/// Who creates an object, and its permission bits (the umask already applied).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Creator {
    pub uid: u32,
    pub gid: u32,
    pub perm: u32,
}

/// HEADs sent at once to read the metadata of a listing's entries.
const READ_AHEAD_PARALLEL: usize = 32;
/// Entries of one listing whose metadata is read ahead; the kernel asks for the rest itself.
const READ_AHEAD_MAX: usize = 4_096;

/// Where the metadata of `path` (a directory when `dir`) is kept: its object or its marker.
/// `None` without `posix_metadata`, and for a backend's root directory without a prefix (it has
/// no object to keep metadata on).
fn metadata_key(settings: &BackendSettings, path: &str, dir: bool) -> Option<String> {
    if !settings.posix_metadata {
        return None;
    }
    if dir {
        let marker = settings.dir_prefix_of(path);
        (!marker.is_empty()).then_some(marker)
    } else {
        Some(settings.key_of(path))
    }
}

impl Fs {
    /// What `node`'s own metadata says, as far as known now: a file being written's, else what
    /// the store last said (`None` for backends without `posix_metadata`).
    fn known_posix(&self, node: &Node) -> Option<Posix> {
        let settings = node.backend.as_ref()?.settings();
        let key = metadata_key(&settings, &node.path, node.is_dir())?;
        let store = settings.store.id();
        if node.file().is_some()
            && let Some(file) = self.engines.writes.find(store, &key)
        {
            // Its modification time is the write engine's (each write moves it; the commit
            // stores it).
            let posix = Posix::of(&file.metadata());
            return Some(Posix {
                mtime: None,
                ..posix
            });
        }
        Some(
            self.metadata
                .last(store, &key)
                .map_or_else(Posix::default, |m| Posix::of(&m)),
        )
    }

    /// `attr` with what `node`'s metadata says of its mode, owner, time and type.
    pub(super) fn with_posix(&self, node: &Node, mut attr: Attr) -> Attr {
        let Some(posix) = self.known_posix(node) else {
            return attr;
        };
        if attr.kind == Kind::File {
            attr.kind = match posix.file_type() {
                Some(S_IFLNK) => Kind::Symlink,
                Some(S_IFIFO) => Kind::Fifo,
                Some(S_IFSOCK) => Kind::Socket,
                Some(S_IFCHR) => Kind::CharDevice,
                Some(S_IFBLK) => Kind::BlockDevice,
                _ => Kind::File,
            };
        }
        attr.perm = posix.perm().unwrap_or(attr.perm);
        attr.uid = posix.uid.unwrap_or(attr.uid);
        attr.gid = posix.gid.unwrap_or(attr.gid);
        attr.mtime = posix.mtime.unwrap_or(attr.mtime);
        attr.atime = posix.atime.or(attr.atime);
        attr.ctime = posix.ctime.or(attr.ctime);
        attr.rdev = posix.rdev.unwrap_or(attr.rdev);
        // A directory whose entries this mount changed since its marker's times were written
        // shows that change (not written back to the marker: that would cost a CopyObject per
        // create and unlink).
        if node.is_dir()
            && let Some(changed) = self.dir_changed_at(node.ino)
            && changed > attr.mtime
        {
            attr.mtime = changed;
            attr.ctime = Some(attr.ctime.map_or(changed, |c| c.max(changed)));
        }
        attr
    }

    /// Whether the attributes of `path` can be given without asking the store: always, except
    /// for a `posix_metadata` object whose metadata was not read within the TTL.
    pub(super) fn posix_known(&self, settings: &BackendSettings, path: &str, dir: bool) -> bool {
        match metadata_key(settings, path, dir) {
            None => true,
            Some(key) => {
                let store = settings.store.id();
                self.metadata.fresh(store, &key).is_some()
                    || (!dir && self.engines.writes.find(store, &key).is_some())
            }
        }
    }

    /// Reads `node`'s metadata from the store unless it was read within the TTL (or the file is
    /// being written, whose metadata is the write engine's). A file's HEAD also refreshes its
    /// size and version.
    pub(super) async fn load_metadata(&self, node: &Node) -> Result<()> {
        let Some(backend) = &node.backend else {
            return Ok(());
        };
        let settings = backend.settings();
        if self.posix_known(&settings, &node.path, node.is_dir()) {
            return Ok(());
        }
        let Some(key) = metadata_key(&settings, &node.path, node.is_dir()) else {
            return Ok(());
        };
        let head = (settings.store.head_with_metadata(&key).await)
            .map_err(|e| Self::store_error(backend, e))?;
        let metadata = match head {
            Some((meta, metadata)) => {
                if node.file().is_some()
                    && let Some(node) = lock(&self.inodes).get_mut(node.ino)
                {
                    node.kind = ChildKind::File(FileMeta::from(&meta));
                    node.refreshed = Instant::now();
                }
                metadata
            }
            // No marker (an implicit directory), or an object gone since it was listed: the
            // backend's defaults, until the TTL has passed.
            None => Metadata::new(),
        };
        self.metadata.put(settings.store.id(), &key, metadata);
        Ok(())
    }

    /// Reads the metadata of a listing's entries, many HEADs at once, so that `ls -l` of a
    /// `posix_metadata` directory costs one round of HEADs instead of one lookup after another.
    pub(super) async fn read_ahead_metadata(&self, dir: &Node, entries: &[DirEntry]) {
        let Some(backend) = &dir.backend else {
            return;
        };
        let settings = backend.settings();
        if !settings.posix_metadata {
            return;
        }
        let keys: Vec<String> = entries
            .iter()
            .filter_map(|entry| {
                let path = listing::child_path(&dir.path, &entry.name);
                let is_dir = matches!(entry.kind, ChildKind::Dir { .. });
                if self.posix_known(&settings, &path, is_dir) {
                    return None;
                }
                metadata_key(&settings, &path, is_dir)
            })
            .take(READ_AHEAD_MAX)
            .collect();
        let store = &settings.store;
        let read: Vec<(String, Option<Metadata>)> = stream::iter(keys)
            .map(|key| async move {
                let metadata = match store.head_with_metadata(&key).await {
                    Ok(head) => Some(head.map(|(_, m)| m).unwrap_or_default()),
                    // Left to the lookup of the entry, which reports it.
                    Err(_) => None,
                };
                (key, metadata)
            })
            .buffer_unordered(READ_AHEAD_PARALLEL)
            .collect()
            .await;
        for (key, metadata) in read {
            if let Some(metadata) = metadata {
                self.metadata.put(store.id(), &key, metadata);
            }
        }
    }

    /// The metadata a new object made by `creator` carries (none without `posix_metadata`).
    pub(super) fn creator_metadata(
        settings: &BackendSettings,
        kind: u32,
        creator: Option<Creator>,
    ) -> Metadata {
        match creator {
            Some(c) if settings.posix_metadata => {
                Posix::new_object(kind, c.perm, c.uid, c.gid).written_over(&Metadata::new())
            }
            _ => Metadata::new(),
        }
    }

    /// Applies the mode, owner and time changes of a setattr. The kernel has checked that the
    /// caller may make them (`default_permissions`: the owner for chmod and times, root for
    /// chown), from the attributes this mount gave it.
    pub(super) async fn change_posix(&self, ino: u64, change: &SetAttr) -> Result<()> {
        let asked = change.mode.is_some()
            || change.uid.is_some()
            || change.gid.is_some()
            || change.atime.is_some()
            || change.mtime.is_some();
        if !asked {
            return Ok(());
        }
        let node = self.node(ino)?;
        let Some(backend) = node.backend.clone() else {
            return Err(FsError::NotPermitted(
                "the mount root's attributes are fixed",
            ));
        };
        let settings = backend.settings();
        if let Some(manifest) = settings.manifest.clone() {
            return self
                .change_manifest_owner(&node, &backend, &settings, manifest, change)
                .await;
        }
        if !settings.posix_metadata {
            return Ok(()); // accepted and forgotten: attributes are the backend's
        }
        if settings.readonly {
            return Err(FsError::ReadOnly {
                backend: backend.dir_name.clone(),
            });
        }
        let Some(key) = metadata_key(&settings, &node.path, node.is_dir()) else {
            return Err(FsError::NotPermitted(
                "a backend's root directory has no object to keep its attributes on",
            ));
        };
        self.load_metadata(&node).await?;
        let store = settings.store.id();
        let writing = node
            .file()
            .and_then(|_| self.engines.writes.find(store, &key));
        let current = match &writing {
            Some(file) => file.metadata(),
            None => (self.metadata.last(store, &key))
                .map(|m| m.as_ref().clone())
                .unwrap_or_default(),
        };
        let mut posix = Posix::of(&current);
        let kind = posix.mode.map(|m| m & S_IFMT).filter(|k| *k != 0);
        let kind = kind.unwrap_or(if node.is_dir() { S_IFDIR } else { S_IFREG });
        if let Some(mode) = change.mode {
            posix.mode = Some(kind | (mode & 0o7777));
        }
        posix.uid = change.uid.or(posix.uid);
        posix.gid = change.gid.or(posix.gid);
        posix.mtime = change.mtime.or(posix.mtime);
        posix.atime = change.atime.or(posix.atime);
        posix.ctime = Some(SystemTime::now());
        let wanted = posix.written_over(&current);
        if let Some(file) = &writing {
            file.set_metadata(wanted.clone());
            if file.is_dirty() {
                // The commit to come carries it.
                self.metadata.put(store, &key, wanted);
                return Ok(());
            }
        }
        let replaced = settings.store.replace_metadata(&key, &wanted, None).await;
        match replaced {
            Ok(put) => {
                self.note_new_etag(ino, &put.etag);
                // Changed here: neither a listing asked for before now nor what this mount's
                // last commit left there (`write::recent_commits`) is the object any more.
                self.note_written(store, &key);
            }
            // A directory without a marker gets one, carrying the metadata.
            Err(StoreError::NotFound { .. }) if node.is_dir() => {
                let empty = Arc::new(InMemory(Bytes::new()));
                (settings.store.put_with_metadata(&key, empty, &wanted).await)
                    .map_err(|e| Self::store_error(&backend, e))?;
            }
            Err(e) => return Err(Self::store_error(&backend, e)),
        }
        self.metadata.put(store, &key, wanted);
        Ok(())
    }

    /// A metadata replace may give the object a new ETag (S3 does for one uploaded in parts):
    /// the node's version follows, so reads pinned to it do not fail.
    fn note_new_etag(&self, ino: u64, etag: &str) {
        let mut inodes = lock(&self.inodes);
        if let Some(node) = inodes.get_mut(ino)
            && let ChildKind::File(meta) = &mut node.kind
            && !etag.is_empty()
        {
            meta.etag = etag.to_string();
        }
    }

    /// Creates symbolic link `name` in `parent` pointing at `target`: an object whose body is
    /// the target and whose mode says it is a link (s3fs's form). Only `posix_metadata`
    /// backends can tell a link from a file; elsewhere links are refused with EPERM.
    pub async fn symlink(
        &self,
        parent: u64,
        name: &str,
        target: &[u8],
        creator: Creator,
    ) -> Result<Attr> {
        if target.is_empty() {
            return Err(FsError::NotFound); // symlink(2) with an empty target: ENOENT
        }
        if target.len() > libc::PATH_MAX as usize {
            return Err(FsError::NameTooLong);
        }
        let creator = Creator {
            perm: 0o777,
            ..creator
        };
        let posix = Posix::new_object(S_IFLNK, creator.perm, creator.uid, creator.gid);
        self.make_special(parent, name, Bytes::copy_from_slice(target), posix)
            .await
    }

    /// Makes a FIFO, socket or device node (`kind`: its `S_IF*` type bits): an empty object
    /// whose mode says which, as s3fs stores them. The kernel serves a FIFO or socket itself;
    /// a device node is there to be listed and copied (the mount is `nodev`). Only
    /// `posix_metadata` backends keep the type; elsewhere EPERM.
    pub async fn mknod_special(
        &self,
        parent: u64,
        name: &str,
        kind: u32,
        rdev: u32,
        creator: Creator,
    ) -> Result<Attr> {
        if !SPECIAL_TYPES.contains(&kind) {
            return Err(FsError::Invalid("not a file type mknod can make"));
        }
        let mut posix = Posix::new_object(kind, creator.perm, creator.uid, creator.gid);
        if kind == S_IFCHR || kind == S_IFBLK {
            posix.rdev = Some(rdev);
        }
        self.make_special(parent, name, Bytes::new(), posix).await
    }

    /// Puts a new object that only `posix_metadata` gives a meaning beyond a file's: `body`
    /// with `posix` in its metadata, as `name` in `parent`.
    async fn make_special(
        &self,
        parent: u64,
        name: &str,
        body: Bytes,
        posix: Posix,
    ) -> Result<Attr> {
        let dir = self.writable_dir(parent)?;
        if !dir.settings.posix_metadata {
            return Err(FsError::NotPermitted(
                "links and special files need posix_metadata on the backend",
            ));
        }
        Self::check_new_name(name)?;
        match self.resolve(&dir.node, dir.backend.clone(), name).await {
            Ok(_) => return Err(FsError::Exists),
            Err(FsError::NotFound) => {}
            Err(e) => return Err(e),
        }
        let path = listing::child_path(&dir.node.path, name);
        let key = dir.settings.key_of(&path);
        dir.settings.check_key_len(&key)?;
        let metadata = posix.written_over(&Metadata::new());
        let size = body.len() as u64;
        let put = (dir.settings.store)
            .put_with_metadata(&key, Arc::new(InMemory(body)), &metadata)
            .await
            .map_err(|e| Self::store_error(&dir.backend, e))?;
        let meta = FileMeta {
            size,
            etag: put.etag.clone(),
            mtime: SystemTime::now(),
            owner: None,
        };
        dir.settings
            .record(
                &dir.backend.dir_name,
                &path,
                Change::Upsert(EntryKind::File {
                    size: meta.size,
                    etag: meta.etag.clone(),
                    mtime: meta.mtime,
                    owner: None,
                }),
            )
            .await;
        self.metadata.put(dir.settings.store.id(), &key, metadata);
        self.invalidate_entry(parent, name);
        let node = lock(&self.inodes).lookup(
            parent,
            name,
            dir.backend.clone(),
            path,
            ChildKind::File(meta),
        );
        Ok(self.attr_of(&node))
    }

    /// The target of symbolic link `ino`: its object's body.
    pub async fn readlink(&self, ino: u64) -> Result<Bytes> {
        let node = self.refreshed(ino).await?;
        self.load_metadata(&node).await?;
        let node = self.node(ino)?;
        let (Some(backend), Some(meta)) = (&node.backend, node.file()) else {
            return Err(FsError::Invalid("not a symbolic link"));
        };
        if !self.known_posix(&node).is_some_and(|p| p.is_symlink()) {
            return Err(FsError::Invalid("not a symbolic link"));
        }
        // Another tool may have marked any object a link: a target longer than any path is
        // refused rather than read whole into memory.
        if meta.size > libc::PATH_MAX as u64 {
            return Err(FsError::NameTooLong);
        }
        let settings = backend.settings();
        let key = settings.key_of(&node.path);
        let etag = Some(meta.etag.as_str()).filter(|e| !e.is_empty());
        (settings.store.get_range(&key, 0..meta.size, etag).await)
            .map_err(|e| Self::store_error(backend, e))
    }
}

#[cfg(test)]
#[path = "meta_ops_tests.rs"]
mod tests;
