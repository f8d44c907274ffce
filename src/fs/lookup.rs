//! Names and attributes: `lookup`, `getattr`, `forget`, and the refresh of a file's metadata
//! once the TTL has passed. Apart from opens and reads because this is where the sources of
//! what a name is are ranked: a file being written, an unlinked file still open, a listing
//! snapshot, the manifest, the store.

use std::sync::Arc;
use std::time::{Instant, SystemTime};

use super::BackendSettings;
use super::inode::Node;
use super::listing::{self, ChildKind, FileMeta, valid_name};
use super::manifest_listing;
use super::{Attr, Backend, Fs, FsError, Kind, ROOT_INO, Result, lock, pending_kind};
use crate::manifest::format::Ownership;
use crate::write::RecentCommit;

/// What a name is by what this process knows already ([`Fs::resolve_known`]).
enum Known {
    Found(ChildKind),
    Missing,
    /// Only the manifest or the store can say.
    Ask,
}

impl Fs {
    pub fn attr_of(&self, node: &Node) -> Attr {
        let attr = self.default_attr_of(node);
        self.with_posix(node, attr)
    }

    /// `node`'s attributes as the backend's settings give them (see `with_posix` for the
    /// objects' own).
    fn default_attr_of(&self, node: &Node) -> Attr {
        match (&node.backend, &node.kind) {
            (None, _) => Attr {
                ino: node.ino,
                kind: Kind::Dir,
                nlink: 2,
                size: 0,
                mtime: self.mounted_at,
                perm: self.options.dir_perm,
                uid: self.options.uid,
                gid: self.options.gid,
                atime: None,
                ctime: None,
                rdev: 0,
            },
            (Some(b), kind) => listed_attr(node.ino, kind, &b.settings(), self.mounted_at),
        }
    }

    /// Resolves `name` in directory `parent` and takes a kernel reference on the result.
    pub async fn lookup(&self, parent: u64, name: &str) -> Result<Attr> {
        let dir = self.node(parent)?;
        if !dir.is_dir() {
            return Err(FsError::NotADirectory);
        }
        let Some(backend) = dir.backend.clone() else {
            return self.lookup_backend(name);
        };
        let (backend, path, kind) = self.resolve(&dir, backend, name).await?;
        let node = lock(&self.inodes).lookup(parent, name, backend, path, kind);
        if let Err(e) = self.load_metadata(&node).await {
            self.forget(node.ino, 1);
            return Err(e);
        }
        // The node as the metadata read left it (it cannot be forgotten before this reply).
        let node = self.node(node.ino).unwrap_or(node);
        Ok(self.attr_of(&node))
    }

    /// [`Fs::lookup`] when neither the manifest nor the store need be asked (see
    /// [`Fs::resolve_known`]), answered on the caller's thread (a FUSE worker's): every create
    /// looks its name up first, and every path walk past the kernel's entry TTL looks up each
    /// name again. `None` when only `lookup` can say; then nothing was changed, and in
    /// particular no kernel reference was taken.
    pub fn lookup_now(&self, parent: u64, name: &str) -> Option<Result<Attr>> {
        let dir = self.node(parent).ok().filter(Node::is_dir)?;
        let Some(backend) = dir.backend.clone() else {
            // The mount root's names are the backends: memory, like `lookup` says.
            return Some(self.lookup_backend(name));
        };
        let kind = match self.resolve_known(&dir, &backend, name) {
            Ok(Known::Found(kind)) => kind,
            Ok(Known::Missing) => {
                self.remember_missing(dir.ino, name);
                return Some(Err(FsError::NotFound));
            }
            Err(e) => return Some(Err(e)),
            Ok(Known::Ask) => return None,
        };
        let path = listing::child_path(&dir.path, name);
        // A `posix_metadata` name whose metadata is not known yet needs its HEAD.
        let is_dir = matches!(kind, ChildKind::Dir { .. });
        if !self.posix_known(&backend.settings(), &path, is_dir) {
            return None;
        }
        let node = lock(&self.inodes).lookup(parent, name, backend, path, kind);
        Some(Ok(self.attr_of(&node)))
    }

    /// A backend's directory, the mount root's entry `name`.
    fn lookup_backend(&self, name: &str) -> Result<Attr> {
        let backend = (self.backends().into_iter())
            .find(|b| b.dir_name == name)
            .ok_or(FsError::NotFound)?;
        let node =
            lock(&self.inodes).lookup(ROOT_INO, name, backend, String::new(), ChildKind::DIR);
        Ok(self.attr_of(&node))
    }

    /// What `name` in directory `dir` (of `backend`) is, without taking a kernel reference: a
    /// file being written, else what the listing snapshot or the store says.
    pub(super) async fn resolve(
        &self,
        dir: &Node,
        backend: Arc<Backend>,
        name: &str,
    ) -> Result<(Arc<Backend>, String, ChildKind)> {
        let path = listing::child_path(&dir.path, name);
        let settings = backend.settings();
        let kind = match self.resolve_known(dir, &backend, name)? {
            Known::Found(kind) => Some(kind),
            Known::Missing => None,
            Known::Ask => match &settings.manifest {
                Some(manifest) => manifest_listing::lookup(manifest, &dir.path, name)
                    .await
                    .map_err(|e| Self::manifest_error(&backend, e))?,
                None => self
                    .probe(&settings, &path)
                    .await
                    .map_err(|e| Self::store_error(&backend, e))?,
            },
        };
        let Some(kind) = kind else {
            self.remember_missing(dir.ino, name);
            return Err(FsError::NotFound);
        };
        Ok((backend, path, kind))
    }

    /// What this process knows of `name` in directory `dir` (of `backend`) without asking the
    /// manifest or the store, in the order the sources rank: an unlinked file still open, a
    /// file being written, a fresh listing snapshot, a name just found missing or a directory
    /// known to hold only what this mount made.
    fn resolve_known(&self, dir: &Node, backend: &Backend, name: &str) -> Result<Known> {
        if name.len() > listing::NAME_MAX {
            return Err(FsError::NameTooLong);
        }
        if !valid_name(name) {
            return Err(FsError::NotFound);
        }
        let path = listing::child_path(&dir.path, name);
        let settings = backend.settings();
        let key = settings.key_of(&path);
        settings.check_key_len(&key)?;
        if self.is_unlinked(settings.store.id(), &key) {
            return Err(FsError::NotFound);
        }
        // What a manifest row said of the name's owner, kept while this mount writes it.
        let owner_of = |dir: u64, name: &str| {
            let inodes = lock(&self.inodes);
            let known = inodes.child(dir, name).and_then(|ino| inodes.get(ino));
            known.and_then(|node| node.kind.owner())
        };
        if let Some(file) = self.engines.writes.find(settings.store.id(), &key) {
            return Ok(Known::Found(pending_kind(
                file.meta(),
                owner_of(dir.ino, name),
            )));
        }
        if let Some(kind) = self.committed_kind(&settings, &key, || owner_of(dir.ino, name)) {
            return Ok(Known::Found(kind));
        }
        // A listing may have caught a file this mount wrote while it was being written (an
        // early size); until the TTL has passed since, only the store knows its version.
        let listing = self
            .fresh_listing(dir.ino)
            .filter(|_| !self.recently_written(settings.store.id(), &key));
        Ok(match listing {
            Some((children, _)) => match children.get(name) {
                Some(kind) => Known::Found(kind.clone()),
                None => Known::Missing,
            },
            None if settings.manifest.is_none()
                && (self.recently_missing(dir.ino, name) || self.known_absent(dir.ino, name)) =>
            {
                Known::Missing
            }
            None => Known::Ask,
        })
    }

    /// What this process's own commit left at `key`, if the write engine has let go of the file
    /// within the TTL and nothing here has written the name since (`write::recent_commits`):
    /// the store holds it, unless another client replaced it, which the TTL allows for as with
    /// any answer.
    pub(super) fn fresh_commit(&self, store: &str, key: &str) -> Option<RecentCommit> {
        self.engines
            .writes
            .recent_commit(store, key)
            .filter(|commit| {
                commit.at.elapsed() < self.options.ttl && !self.written_since(store, key, commit.at)
            })
    }

    /// [`Fs::fresh_commit`] as the name's kind, with the `owner` asked for only when there is
    /// one (a lookup's takes the inode table's lock); a `posix_metadata` backend learns the
    /// object's metadata from it too.
    fn committed_kind(
        &self,
        settings: &BackendSettings,
        key: &str,
        owner: impl FnOnce() -> Option<Ownership>,
    ) -> Option<ChildKind> {
        let store = settings.store.id();
        let commit = self.fresh_commit(store, key)?;
        if settings.posix_metadata {
            self.metadata.put(store, key, commit.metadata);
        }
        Some(ChildKind::File(FileMeta {
            size: commit.version.size,
            etag: commit.version.etag,
            mtime: commit.mtime,
            owner: owner(),
        }))
    }

    fn is_unlinked(&self, store_id: &str, key: &str) -> bool {
        lock(&self.unlinked).contains_key(&(store_id.to_string(), key.to_string()))
    }

    pub fn forget(&self, ino: u64, count: u64) {
        let mut inodes = lock(&self.inodes);
        inodes.forget(ino, count);
        if inodes.get(ino).is_none() {
            drop(inodes);
            lock(&self.listings).remove(&ino);
            self.forget_known(ino);
        }
        if self
            .kernel_state
            .as_ref()
            .is_some_and(|state| state.wants_compaction())
        {
            self.compact_kernel_state();
        }
    }

    /// [`Fs::getattr`] when it needs no store request, answered on the caller's thread (a FUSE
    /// worker's): the kernel asks for a directory's attributes again after every create or
    /// unlink in it, before the next path walk through it, and for a file's after every write
    /// through it and whenever its attribute TTL has passed. `None` for a file whose metadata
    /// is older than the TTL (`refreshed_now`), or a name whose POSIX metadata must be read
    /// first: then call `getattr`.
    pub fn getattr_now(&self, ino: u64) -> Option<Result<Attr>> {
        let node = match self.refreshed_now(ino)? {
            Ok(node) => node,
            Err(e) => return Some(Err(e)),
        };
        if let Some(backend) = &node.backend
            && !self.posix_known(&backend.settings(), &node.path, node.is_dir())
        {
            return None;
        }
        Some(Ok(self.refreshed_attr(&node)))
    }

    /// The attributes of `node`, refreshed already: a file unlinked while open has no link.
    fn refreshed_attr(&self, node: &Node) -> Attr {
        let mut attr = self.attr_of(node);
        if let (Some(backend), Some(_)) = (&node.backend, node.file()) {
            let settings = backend.settings();
            if self.is_unlinked(settings.store.id(), &settings.key_of(&node.path)) {
                attr.nlink = 0;
            }
        }
        attr
    }

    /// Attributes of `ino`; a file's are re-read from the store once they are older than the TTL.
    pub async fn getattr(&self, ino: u64) -> Result<Attr> {
        let node = self.refreshed(ino).await?;
        self.load_metadata(&node).await?;
        // Re-read for what the metadata HEAD refreshed; never an error of its own.
        let node = self.node(ino).unwrap_or(node);
        Ok(self.refreshed_attr(&node))
    }

    /// The node, with a file's metadata confirmed by a HEAD if it is older than the TTL.
    pub(super) async fn refreshed(&self, ino: u64) -> Result<Node> {
        if let Some(known) = self.refreshed_now(ino) {
            return known;
        }
        let node = self.node(ino)?;
        let (Some(backend), Some(_)) = (&node.backend, node.file()) else {
            return Ok(node);
        };
        let settings = backend.settings();
        let key = settings.key_of(&node.path);
        let kind = match &settings.manifest {
            // The manifest (with this mount's own commits in its delta log) is the namespace:
            // asking the store would cost the HEAD it exists to avoid.
            Some(manifest) => {
                let (dir, name) = node.path.rsplit_once('/').unwrap_or(("", &node.path));
                manifest_listing::lookup(manifest, dir, name)
                    .await
                    .map_err(|e| Self::manifest_error(backend, e))?
                    .ok_or(FsError::NotFound)?
            }
            // With `posix_metadata`, the HEAD that confirms the version reads its metadata too.
            None if settings.posix_metadata => {
                let head = (settings.store.head_with_metadata(&key).await)
                    .map_err(|e| Self::store_error(backend, e))?;
                let (meta, metadata) = head.ok_or(FsError::NotFound)?;
                self.metadata.put(settings.store.id(), &key, metadata);
                ChildKind::File(FileMeta::from(&meta))
            }
            None => {
                let head = settings
                    .store
                    .head(&key)
                    .await
                    .map_err(|e| Self::store_error(backend, e))?;
                ChildKind::File(FileMeta::from(&head.ok_or(FsError::NotFound)?))
            }
        };
        let mut inodes = lock(&self.inodes);
        let node = inodes.get_mut(ino).ok_or(FsError::UnknownInode(ino))?;
        node.kind = kind;
        node.refreshed = Instant::now();
        Ok(node.clone())
    }

    /// What `refreshed` answers without asking the manifest or the store: a directory, a file
    /// being written or unlinked while open, or one whose metadata is younger than the TTL.
    /// `None` when only the store (or the manifest) can say.
    pub(super) fn refreshed_now(&self, ino: u64) -> Option<Result<Node>> {
        let node = match self.node(ino) {
            Ok(node) => node,
            Err(e) => return Some(Err(e)),
        };
        let (Some(backend), Some(_)) = (&node.backend, node.file()) else {
            return Some(Ok(node));
        };
        let settings = backend.settings();
        let key = settings.key_of(&node.path);
        if let Some(file) = self.engines.writes.find(settings.store.id(), &key) {
            self.note_written(settings.store.id(), &key);
            let mut inodes = lock(&self.inodes);
            let Some(node) = inodes.get_mut(ino) else {
                return Some(Err(FsError::UnknownInode(ino)));
            };
            node.kind = pending_kind(file.meta(), node.kind.owner());
            node.refreshed = Instant::now();
            return Some(Ok(node.clone()));
        }
        // Unlinked while open: the store's object is the old one (or none), not this file any
        // more. What the open handles hold is its content: a write handle's file, else the
        // metadata it was opened with.
        if self.is_unlinked(settings.store.id(), &key) {
            let written = lock(&self.files)
                .values()
                .filter(|h| h.ino == ino)
                .find_map(|h| h.dirty());
            let mut inodes = lock(&self.inodes);
            let Some(node) = inodes.get_mut(ino) else {
                return Some(Err(FsError::UnknownInode(ino)));
            };
            if let Some(file) = written {
                node.kind = pending_kind(file.meta(), node.kind.owner());
            }
            return Some(Ok(node.clone()));
        }
        if let Some(kind) = self.committed_kind(&settings, &key, || node.kind.owner()) {
            let mut inodes = lock(&self.inodes);
            let Some(node) = inodes.get_mut(ino) else {
                return Some(Err(FsError::UnknownInode(ino)));
            };
            node.kind = kind;
            return Some(Ok(node.clone()));
        }
        // An empty ETag marks metadata last seen in the write engine, which has let go of the
        // file since (its commit landed): only the store knows the object's version now.
        let from_writes = node.file().is_some_and(|meta| meta.etag.is_empty())
            || self.recently_written(settings.store.id(), &key);
        (!from_writes && node.refreshed.elapsed() < self.options.ttl).then_some(Ok(node))
    }
}

/// The attributes of an entry of a backend as its listing (or manifest row) gives them: the
/// backend's mode and owner unless the manifest row states its own. A directory's time is the
/// mount's (a prefix has none of its own).
pub(super) fn listed_attr(
    ino: u64,
    kind: &ChildKind,
    settings: &BackendSettings,
    mounted_at: SystemTime,
) -> Attr {
    let (kind_of, size, mtime, perm) = match kind {
        ChildKind::Dir { .. } => (Kind::Dir, 0, mounted_at, settings.dir_perm),
        ChildKind::File(meta) => (Kind::File, meta.size, meta.mtime, settings.file_perm),
    };
    let owner = kind.owner();
    Attr {
        ino,
        kind: kind_of,
        nlink: if kind_of == Kind::Dir { 2 } else { 1 },
        size,
        mtime,
        perm: owner.map_or(perm, |o| o.perm),
        uid: owner.map_or(settings.uid, |o| o.uid),
        gid: owner.map_or(settings.gid, |o| o.gid),
        atime: None,
        ctime: None,
        rdev: 0,
    }
}
