//! `Fs`: one mount's POSIX view over its backends — inodes, handles, attributes, errors.
//!
//! The mount root lists the backends as sibling directories (`dir_name`); below each, the
//! namespace comes live from the backend's store (see [`listing`]). Nothing here knows about
//! FUSE: the adapter in `crate::fuse` only translates, so everything is testable without a mount.
//! No lock is held across an await; store calls run on tokio tasks spawned by the adapter.
//!
//! Where things live: lookups, attributes, opens, reads and the per-name records here;
//! directories (`opendir`/`readdir`) in `dir_ops`, over `dir_pages` (manifest), `live_pages`
//! (large live directories) and `subtree` (small subtrees listed at once); creating, writing,
//! renaming and removing in `write_ops`.
//!
//! Lock order, where two are held at once: `unlinked` before `files` (the check for open
//! handles and the record of an unlinked name are one step for `unlink` and `release`), and
//! `removed` before `dirs`. Every other map is locked alone.

mod backend;
mod descriptors;
mod dir_ops;
mod dir_pages;
mod error;
mod inode;
mod kernel_state;
mod listing;
mod live_pages;
mod manifest_listing;
mod stream;
mod subtree;
mod write_ops;

use std::collections::{BTreeMap, HashMap};
use std::ffi::OsStr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};
use std::time::{Duration, Instant, SystemTime};

use bytes::Bytes;

pub use backend::{Backend, BackendSettings};
pub use error::{FsError, errno_name};
pub use inode::ROOT_INO;
pub use kernel_state::{KernelState, Restored};
pub use listing::{ChildKind, FileMeta, valid_name};
pub use write_ops::{RenameFlags, SetAttr};

use crate::cache::ObjectVersion;
use crate::engines::Engines;
use crate::manifest::delta::Change;
use crate::manifest::namespace::ManifestError;
use crate::store::ObjectStore;
use crate::write::{DirtyFile, DirtyMeta, Target};
use dir_pages::DirEntries;
use inode::{InodeTable, Node};
use kernel_state::{FileRecord, Record};
use stream::SequentialDetector;

pub type Result<T> = std::result::Result<T, FsError>;

/// Negative lookups remembered at most (least recently used go first), and the size past which
/// the other per-name records (`written`, `dir_changed`, `removed`) are pruned.
const NEGATIVE_CACHE_LIMIT: usize = 65_536;
/// Entries taken from an open directory at a time while filling one readdir reply.
const READDIR_CHUNK: usize = 128;

/// Mount-wide settings the filesystem needs.
#[derive(Debug, Clone)]
pub struct FsOptions {
    pub uid: u32,
    pub gid: u32,
    pub dir_perm: u16,
    /// How long the kernel and `Fs` may trust an entry or attribute without asking the store.
    pub ttl: Duration,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Dir,
    File,
}

/// What `stat` shows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attr {
    pub ino: u64,
    pub kind: Kind,
    pub size: u64,
    pub mtime: SystemTime,
    pub perm: u16,
    pub uid: u32,
    pub gid: u32,
    /// Links to it: 2 for a directory, 1 for a file, 0 for a file unlinked while open.
    pub nlink: u32,
}

/// The block size `stat` and `statfs` report: the unit applications size their I/O by.
pub const BLOCK_SIZE: u32 = 4096;

/// What `statfs` reports (the numbers of statfs(2), in its order).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StatFs {
    /// Total, free and available blocks of `frsize` bytes.
    pub blocks: u64,
    pub bfree: u64,
    pub bavail: u64,
    /// Total and free inodes.
    pub files: u64,
    pub ffree: u64,
    pub bsize: u32,
    /// The longest name a directory entry can have.
    pub namelen: u32,
    pub frsize: u32,
}

/// What a name in a request is for, which decides what a name no object key can hold (one
/// that is not UTF-8) is answered with: see [`request_name`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NameUse {
    /// A name looked up, removed (unlink, rmdir) or renamed away.
    Existing,
    /// A name to be made: create, mknod, mkdir, a rename's destination.
    New,
}

/// A name from a request, as the UTF-8 every object key is. The one rule for a name that is
/// not UTF-8, in every operation:
///
/// - [`NameUse::Existing`]: ENOENT (`NotFound`). No key can hold the name, so nothing has it,
///   and that is what a lookup of any absent name says.
/// - [`NameUse::New`]: EINVAL (`Invalid`). The name cannot be made, as any other name msfs
///   cannot store is refused. The kernel looks a name up before it creates one or renames
///   onto it, so the lookup's ENOENT comes first and the create's EINVAL after, as a local
///   filesystem answers a name its encoding refuses.
pub fn request_name(name: &OsStr, purpose: NameUse) -> Result<String> {
    match (name.to_str(), purpose) {
        (Some(name), _) => Ok(name.to_string()),
        (None, NameUse::Existing) => Err(FsError::NotFound),
        (None, NameUse::New) => Err(FsError::Invalid("name is not UTF-8, as object keys are")),
    }
}

/// One entry of a directory listing as handed to the kernel.
#[derive(Debug, Clone)]
pub struct DirEntry {
    pub name: String,
    pub kind: ChildKind,
}

/// An open file: the exact object version it reads, fixed at open (close-to-open consistency),
/// or the file being written there.
struct FileHandle {
    ino: u64,
    store: Arc<dyn ObjectStore>,
    backend: String,
    version: ObjectVersion,
    stream: SequentialDetector,
    /// The file's content while it is being written (through this handle or another): reads
    /// go through it, so a writer reads its own writes.
    dirty: Option<Arc<DirtyFile>>,
    /// Opened for writing; `dirty` is then this handle's, released at close.
    writable: bool,
    flush_on_close: bool,
    /// Something was written (or truncated) through this handle since it was opened: its
    /// closes commit. Until then the file holds at most what the open itself did (created it,
    /// or truncated it), which a close with another descriptor still open may leave to that
    /// descriptor's close (see `flush`).
    wrote: AtomicBool,
}

impl FileHandle {
    fn record(&self, fh: u64) -> FileRecord {
        FileRecord {
            fh,
            ino: self.ino,
            backend: self.backend.clone(),
            key: self.version.key.clone(),
            etag: self.version.etag.clone(),
            size: self.version.size,
            writable: self.writable,
        }
    }
}

/// How a file is opened.
#[derive(Debug, Clone, Copy, Default)]
pub struct OpenMode {
    pub write: bool,
    pub truncate: bool,
}

/// An open directory and its entries, by stable offset.
struct DirHandle {
    ino: u64,
    parent: u64,
    entries: DirEntries,
    /// When the listing behind `entries` was asked for (`None`: not a store listing). Changes
    /// this mount made since win over what the listing says.
    listed_at: Option<Instant>,
}

/// An object unlinked while a handle was open on it.
struct Unlinked {
    ino: u64,
    /// The backend's settings when it was unlinked: its store, and its manifest to record the
    /// deletion in once it happens.
    settings: Arc<BackendSettings>,
    path: String,
}

struct DirSnapshot {
    children: Arc<BTreeMap<String, ChildKind>>,
    fetched: Instant,
}

pub struct Fs {
    options: FsOptions,
    engines: Engines,
    mounted_at: SystemTime,
    backends: RwLock<Vec<Arc<Backend>>>,
    inodes: Mutex<InodeTable>,
    /// Recent full listings, which answer lookups without another request.
    listings: Mutex<HashMap<u64, DirSnapshot>>,
    /// Listings of directories below one that was listed by its subtree (or probed), by key
    /// prefix: they become `listings` when their directory is looked in (see `subtree`).
    kept: subtree::KeptListings,
    /// Names known to be absent, by (directory, name), with since when: a lookup miss, or a
    /// name this mount removed. A bounded LRU: forgetting a miss only costs a request.
    negative: Mutex<lru::LruCache<(u64, String), Instant>>,
    /// Names this mount removed (unlink, rmdir, rename away), with when: an open directory
    /// listing taken before then must not show them. Kept apart from `negative`, whose
    /// evictions must never bring a removed name back; pruned of what no open listing predates.
    removed: Mutex<HashMap<(u64, String), Instant>>,
    /// When this mount last changed each directory's entries: a listing asked for before that
    /// is not cached.
    dir_changed: Mutex<HashMap<u64, Instant>>,
    /// Objects this mount wrote recently, by (store id, key), with when it last saw them being
    /// written: metadata of theirs from a listing snapshot may predate the commit, so opens ask
    /// the store until the TTL has passed since.
    written: Mutex<HashMap<(String, String), Instant>>,
    /// Objects unlinked while open: hidden from lookups and listings, deleted at the last close.
    unlinked: Mutex<HashMap<(String, String), Unlinked>>,
    files: Mutex<HashMap<u64, Arc<FileHandle>>>,
    dirs: Mutex<HashMap<u64, Arc<DirHandle>>>,
    next_handle: AtomicU64,
    /// Live directories with more entries are read a page at a time (see `live_pages`).
    whole_listing_max: usize,
    /// Keys a subtree listing reads before the directory is listed with the delimiter instead.
    subtree_listing_max: usize,
    /// Where what the kernel holds is journalled for a successor (`None`: nowhere).
    kernel_state: Option<Arc<KernelState>>,
}

/// Locks a mutex, recovering the data if a panicking thread poisoned it: every critical section
/// here leaves the maps consistent, so the data stays usable.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl Fs {
    pub fn new(options: FsOptions, engines: Engines, backends: Vec<Arc<Backend>>) -> Fs {
        Fs {
            options,
            engines,
            mounted_at: SystemTime::now(),
            backends: RwLock::new(backends),
            inodes: Mutex::new(InodeTable::new()),
            listings: Mutex::new(HashMap::new()),
            kept: subtree::KeptListings::default(),
            negative: Mutex::new(lru::LruCache::new(
                std::num::NonZeroUsize::new(NEGATIVE_CACHE_LIMIT).expect("a non-zero limit"),
            )),
            removed: Mutex::new(HashMap::new()),
            dir_changed: Mutex::new(HashMap::new()),
            written: Mutex::new(HashMap::new()),
            unlinked: Mutex::new(HashMap::new()),
            files: Mutex::new(HashMap::new()),
            dirs: Mutex::new(HashMap::new()),
            next_handle: AtomicU64::new(1),
            whole_listing_max: listing::WHOLE_LISTING_MAX,
            subtree_listing_max: subtree::SUBTREE_LISTING_MAX_KEYS,
            kernel_state: None,
        }
    }

    /// Journals what the kernel holds in `state` from now on (see `kernel_state`), so that a
    /// successor serving the same connection can [`Fs::restore`] it.
    pub fn with_kernel_state(mut self, state: Arc<KernelState>) -> Fs {
        lock(&self.inodes).set_journal(state.clone());
        self.kernel_state = Some(state);
        self
    }

    fn journal(&self, record: impl FnOnce() -> Record) {
        if let Some(state) = &self.kernel_state {
            state.append(&record());
        }
    }

    /// Takes over what a previous server of this connection left: its inodes, its open files
    /// (each pinned to the object version it was opened on; a written one joins the file the
    /// write engine recovered, or the object as the store has it now) and its open
    /// directories (listed again). What cannot be restored — a backend gone, an object that
    /// cannot be asked about — is logged; the kernel's requests on it fail as on a stale handle.
    pub async fn restore(&self, restored: &Restored) {
        let nodes = lock(&self.inodes).restore(restored, |name| self.backend(name));
        let mut next_handle = 1;
        let mut files = 0;
        for record in restored.files.values() {
            next_handle = next_handle.max(record.fh + 1);
            match self.restored_handle(record).await {
                Ok(handle) => {
                    lock(&self.files).insert(record.fh, Arc::new(handle));
                    files += 1;
                }
                Err(e) => tracing::warn!(backend = %record.backend, key = %record.key,
                    error = %e, "cannot restore an open file of the previous server"),
            }
        }
        let mut dirs = 0;
        for (&fh, &ino) in &restored.dirs {
            next_handle = next_handle.max(fh + 1);
            match self.dir_handle(ino).await {
                Ok(handle) => {
                    lock(&self.dirs).insert(fh, Arc::new(handle));
                    dirs += 1;
                }
                Err(e) => tracing::warn!(ino, error = %e,
                    "cannot restore an open directory of the previous server"),
            }
        }
        self.next_handle.fetch_max(next_handle, Ordering::Relaxed);
        tracing::info!(
            inodes = nodes,
            files,
            dirs,
            "took over the kernel's state from the previous server"
        );
        self.compact_kernel_state();
    }

    async fn restored_handle(&self, record: &FileRecord) -> Result<FileHandle> {
        let backend = self.backend(&record.backend).ok_or(FsError::NotFound)?;
        let node = self.node(record.ino)?;
        let settings = backend.settings();
        let dirty = if record.writable {
            let target = settings.target(&backend.dir_name, &node.path);
            let file = self.open_for_write(&backend, target).await?;
            self.began_writing(&node, &file);
            Some(file)
        } else {
            self.engines.writes.find(settings.store.id(), &record.key)
        };
        Ok(FileHandle {
            ino: record.ino,
            store: settings.store.clone(),
            backend: backend.dir_name.clone(),
            version: ObjectVersion {
                key: record.key.clone(),
                etag: record.etag.clone(),
                size: record.size,
            },
            stream: SequentialDetector::default(),
            dirty,
            writable: record.writable,
            flush_on_close: settings.flush_on_close,
            // What the previous server's handle did is not known: its closes commit.
            wrote: AtomicBool::new(record.writable),
        })
    }

    /// Rewrites the kernel-state journal as what is live now (see `kernel_state`).
    fn compact_kernel_state(&self) {
        let Some(state) = &self.kernel_state else {
            return;
        };
        let result = state.compact(|| {
            let mut live = Restored::default();
            lock(&self.inodes).snapshot(&mut live);
            for (fh, handle) in lock(&self.files).iter() {
                live.files.insert(*fh, handle.record(*fh));
            }
            for (fh, handle) in lock(&self.dirs).iter() {
                live.dirs.insert(*fh, handle.ino);
            }
            live.records()
        });
        if let Err(e) = result {
            tracing::warn!(dir = %state.dir().display(), error = %e,
                "cannot compact the kernel-state journal");
        }
    }

    /// Sets how many entries a live directory may have to be listed whole (tests).
    #[cfg(test)]
    pub(crate) fn with_whole_listing_max(mut self, max: usize) -> Fs {
        self.whole_listing_max = max;
        self
    }

    /// Sets how many keys a subtree listing may read (tests).
    #[cfg(test)]
    pub(crate) fn with_subtree_listing_max(mut self, max: usize) -> Fs {
        self.subtree_listing_max = max;
        self
    }

    pub fn metrics(&self) -> &Arc<crate::telemetry::Metrics> {
        &self.engines.metrics
    }

    pub fn ttl(&self) -> Duration {
        self.options.ttl
    }

    /// The mount's capacity. Object stores have no fixed one: a large, constant capacity, all
    /// of it free, so that tools that check free space before copying proceed.
    pub fn statfs(&self) -> StatFs {
        const BLOCKS: u64 = 1 << 40;
        const FILES: u64 = 1 << 32;
        StatFs {
            blocks: BLOCKS,
            bfree: BLOCKS,
            bavail: BLOCKS,
            files: FILES,
            ffree: FILES,
            bsize: BLOCK_SIZE,
            namelen: listing::NAME_MAX as u32,
            frsize: BLOCK_SIZE,
        }
    }

    pub fn backends(&self) -> Vec<Arc<Backend>> {
        self.backends
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }

    /// The mounted backend named `dir_name`.
    pub fn backend(&self, dir_name: &str) -> Option<Arc<Backend>> {
        self.backends().into_iter().find(|b| b.dir_name == dir_name)
    }

    /// Shows a new backend under the mount root.
    pub fn add_backend(&self, backend: Arc<Backend>) {
        let mut backends = self
            .backends
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        backends.retain(|b| b.dir_name != backend.dir_name);
        backends.push(backend);
    }

    /// How many open files and directories are inside backend `dir_name`.
    pub fn open_handles_in(&self, dir_name: &str) -> usize {
        let files = lock(&self.files)
            .values()
            .filter(|h| h.backend == dir_name)
            .count();
        let dir_inos: Vec<u64> = lock(&self.dirs).values().map(|h| h.ino).collect();
        let inodes = lock(&self.inodes);
        let dirs = dir_inos
            .iter()
            .filter_map(|ino| inodes.get(*ino))
            .filter(|n| n.backend.as_ref().is_some_and(|b| b.dir_name == dir_name))
            .count();
        files + dirs
    }

    /// Stops showing backend `dir_name`. Inodes the kernel still holds below it keep working
    /// until it forgets them; new lookups no longer find it.
    pub fn remove_backend(&self, dir_name: &str) {
        self.backends
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .retain(|b| b.dir_name != dir_name);
    }

    fn node(&self, ino: u64) -> Result<Node> {
        lock(&self.inodes)
            .get(ino)
            .cloned()
            .ok_or(FsError::UnknownInode(ino))
    }

    fn store_error(backend: &Backend, source: crate::store::StoreError) -> FsError {
        FsError::Store {
            backend: backend.dir_name.clone(),
            source,
        }
    }

    fn manifest_error(backend: &Backend, source: ManifestError) -> FsError {
        FsError::Manifest {
            backend: backend.dir_name.clone(),
            source,
        }
    }

    pub fn attr_of(&self, node: &Node) -> Attr {
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
            },
            (Some(b), ChildKind::Dir) => {
                let b = b.settings();
                Attr {
                    ino: node.ino,
                    kind: Kind::Dir,
                    nlink: 2,
                    size: 0,
                    mtime: self.mounted_at,
                    perm: b.dir_perm,
                    uid: b.uid,
                    gid: b.gid,
                }
            }
            (Some(b), ChildKind::File(meta)) => {
                let b = b.settings();
                Attr {
                    ino: node.ino,
                    kind: Kind::File,
                    nlink: 1,
                    size: meta.size,
                    mtime: meta.mtime,
                    perm: b.file_perm,
                    uid: b.uid,
                    gid: b.gid,
                }
            }
        }
    }

    /// Resolves `name` in directory `parent` and takes a kernel reference on the result.
    pub async fn lookup(&self, parent: u64, name: &str) -> Result<Attr> {
        let dir = self.node(parent)?;
        if !dir.is_dir() {
            return Err(FsError::NotADirectory);
        }
        let Some(backend) = dir.backend.clone() else {
            let backend = self
                .backends()
                .into_iter()
                .find(|b| b.dir_name == name)
                .ok_or(FsError::NotFound)?;
            let node =
                lock(&self.inodes).lookup(ROOT_INO, name, backend, String::new(), ChildKind::Dir);
            return Ok(self.attr_of(&node));
        };
        let (backend, path, kind) = self.resolve(&dir, backend, name).await?;
        let node = lock(&self.inodes).lookup(parent, name, backend, path, kind);
        Ok(self.attr_of(&node))
    }

    /// What `name` in directory `dir` (of `backend`) is, without taking a kernel reference: a
    /// file being written, else what the listing snapshot or the store says.
    async fn resolve(
        &self,
        dir: &Node,
        backend: Arc<Backend>,
        name: &str,
    ) -> Result<(Arc<Backend>, String, ChildKind)> {
        if name.len() > listing::NAME_MAX {
            return Err(FsError::NameTooLong);
        }
        if !valid_name(name) {
            return Err(FsError::NotFound);
        }
        let path = listing::child_path(&dir.path, name);
        let settings = backend.settings();
        let key = settings.key_of(&path);
        check_key_len(&key)?;
        if self.is_unlinked(settings.store.id(), &key) {
            return Err(FsError::NotFound);
        }
        if let Some(file) = self.engines.writes.find(settings.store.id(), &key) {
            return Ok((backend, path, pending_kind(file.meta())));
        }
        // A listing may have caught a file this mount wrote while it was being written (an
        // early size); until the TTL has passed since, only the store knows its version.
        let listing = self
            .fresh_listing(dir.ino)
            .filter(|_| !self.recently_written(settings.store.id(), &key));
        let kind = match (listing, &settings.manifest) {
            (Some((children, _)), _) => children.get(name).cloned(),
            (None, Some(manifest)) => manifest_listing::lookup(manifest, &dir.path, name)
                .await
                .map_err(|e| Self::manifest_error(&backend, e))?,
            (None, None) if self.recently_missing(dir.ino, name) => None,
            (None, None) => self
                .probe(&settings, &path)
                .await
                .map_err(|e| Self::store_error(&backend, e))?,
        };
        let Some(kind) = kind else {
            self.remember_missing(dir.ino, name);
            return Err(FsError::NotFound);
        };
        Ok((backend, path, kind))
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
        }
        if self
            .kernel_state
            .as_ref()
            .is_some_and(|state| state.wants_compaction())
        {
            self.compact_kernel_state();
        }
    }

    /// Attributes of `ino`; a file's are re-read from the store once they are older than the TTL.
    pub async fn getattr(&self, ino: u64) -> Result<Attr> {
        let node = self.refreshed(ino).await?;
        let mut attr = self.attr_of(&node);
        if let Some(backend) = &node.backend
            && node.file().is_some()
        {
            let settings = backend.settings();
            if self.is_unlinked(settings.store.id(), &settings.key_of(&node.path)) {
                attr.nlink = 0;
            }
        }
        Ok(attr)
    }

    /// The node, with a file's metadata confirmed by a HEAD if it is older than the TTL.
    async fn refreshed(&self, ino: u64) -> Result<Node> {
        let node = self.node(ino)?;
        let (Some(backend), Some(_)) = (&node.backend, node.file()) else {
            return Ok(node);
        };
        let settings = backend.settings();
        let key = settings.key_of(&node.path);
        if let Some(file) = self.engines.writes.find(settings.store.id(), &key) {
            self.note_written(settings.store.id(), &key);
            let mut inodes = lock(&self.inodes);
            let node = inodes.get_mut(ino).ok_or(FsError::UnknownInode(ino))?;
            node.kind = pending_kind(file.meta());
            node.refreshed = Instant::now();
            return Ok(node.clone());
        }
        // Unlinked while open: the store's object is the old one (or none), not this file any
        // more. What the open handles hold is its content: a write handle's file, else the
        // metadata it was opened with.
        if self.is_unlinked(settings.store.id(), &key) {
            let written = lock(&self.files)
                .values()
                .filter(|h| h.ino == ino)
                .find_map(|h| h.dirty.clone());
            let mut inodes = lock(&self.inodes);
            let node = inodes.get_mut(ino).ok_or(FsError::UnknownInode(ino))?;
            if let Some(file) = written {
                node.kind = pending_kind(file.meta());
            }
            return Ok(node.clone());
        }
        // An empty ETag marks metadata last seen in the write engine, which has let go of the
        // file since (its commit landed): only the store knows the object's version now.
        let from_writes = node.file().is_some_and(|meta| meta.etag.is_empty())
            || self.recently_written(settings.store.id(), &key);
        if !from_writes && node.refreshed.elapsed() < self.options.ttl {
            return Ok(node);
        }
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
            None => {
                let head = settings
                    .store
                    .head(&settings.key_of(&node.path))
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

    /// Opens a file. Returns the handle and whether the kernel may keep the pages it cached at
    /// an earlier open (same object version, and nobody writing it).
    pub async fn open(&self, ino: u64, mode: OpenMode) -> Result<(u64, bool)> {
        let node = self.refreshed(ino).await?;
        let (Some(backend), Some(meta)) = (&node.backend, node.file()) else {
            return Err(FsError::IsADirectory);
        };
        let settings = backend.settings();
        if mode.write && settings.readonly {
            return Err(FsError::ReadOnly {
                backend: backend.dir_name.clone(),
            });
        }
        let key = settings.key_of(&node.path);
        let version = ObjectVersion {
            key: key.clone(),
            etag: meta.etag.clone(),
            size: meta.size,
        };
        let writes = &self.engines.writes;
        let dirty = if mode.write {
            let target = settings.target(&backend.dir_name, &node.path);
            let file = self.open_for_write(backend, target).await?;
            self.began_writing(&node, &file);
            if mode.truncate
                && let Err(e) = writes.truncate(&file, 0)
            {
                writes.release(&file);
                return Err(e.into());
            }
            Some(file)
        } else {
            writes.find(settings.store.id(), &key)
        };
        let keep_cache = {
            let mut inodes = lock(&self.inodes);
            let node = inodes.get_mut(ino).ok_or(FsError::UnknownInode(ino))?;
            let same = dirty.is_none() && node.cached_etag.as_deref() == Some(meta.etag.as_str());
            node.cached_etag = dirty.is_none().then(|| meta.etag.clone());
            same
        };
        let handle = FileHandle {
            ino,
            store: settings.store.clone(),
            backend: backend.dir_name.clone(),
            version,
            stream: SequentialDetector::default(),
            dirty,
            writable: mode.write,
            flush_on_close: settings.flush_on_close,
            wrote: AtomicBool::new(false),
        };
        Ok((self.add_handle(handle), keep_cache))
    }

    /// A write handle on `target`: the file already being written there, or a new one over the
    /// object as the store has it now. (Never over cached metadata: a version committed since
    /// would be overwritten with stale bytes.)
    async fn open_for_write(&self, backend: &Backend, target: Target) -> Result<Arc<DirtyFile>> {
        let writes = &self.engines.writes;
        if let Some(file) = writes.join(target.store.id(), &target.key) {
            return Ok(file);
        }
        let head = target
            .store
            .head(&target.key)
            .await
            .map_err(|e| Self::store_error(backend, e))?;
        // Gone from the store (deleted behind the mount's back): writing creates it again.
        let base = head.map(|meta| ObjectVersion {
            key: meta.key,
            etag: meta.etag,
            size: meta.size,
        });
        Ok(writes.open(target, base))
    }

    /// From now on the write engine knows `node`'s content, not the store, the node's cached
    /// metadata or the parent's listing snapshot: after the commit lands, the next open asks
    /// the store for the new version.
    fn began_writing(&self, node: &Node, file: &DirtyFile) {
        self.note_written(file.target.store.id(), &file.target.key);
        if let Some(node) = lock(&self.inodes).get_mut(node.ino) {
            node.kind = pending_kind(file.meta());
        }
        lock(&self.listings).remove(&node.parent);
        let name = node.path.rsplit('/').next().unwrap_or(&node.path);
        self.forget_kept(node.parent, name);
    }

    fn note_written(&self, store_id: &str, key: &str) {
        let mut written = lock(&self.written);
        let ttl = self.options.ttl;
        if written.len() >= NEGATIVE_CACHE_LIMIT {
            written.retain(|_, at| at.elapsed() < ttl);
        }
        written.insert((store_id.to_string(), key.to_string()), Instant::now());
    }

    fn recently_written(&self, store_id: &str, key: &str) -> bool {
        lock(&self.written)
            .get(&(store_id.to_string(), key.to_string()))
            .is_some_and(|at| at.elapsed() < self.options.ttl)
    }

    fn add_handle(&self, handle: FileHandle) -> u64 {
        let fh = self.next_handle.fetch_add(1, Ordering::Relaxed);
        self.journal(|| Record::File(handle.record(fh)));
        lock(&self.files).insert(fh, Arc::new(handle));
        fh
    }

    fn handle(&self, fh: u64) -> Result<Arc<FileHandle>> {
        lock(&self.files)
            .get(&fh)
            .cloned()
            .ok_or(FsError::BadHandle(fh))
    }

    pub async fn read(&self, fh: u64, offset: u64, size: u32) -> Result<Bytes> {
        let handle = self.handle(fh)?;
        let end = offset.saturating_add(u64::from(size));
        let sequential = handle.stream.observe(offset, u64::from(size));
        let bytes = match &handle.dirty {
            Some(file) => {
                self.engines
                    .writes
                    .read(file, offset..end, sequential)
                    .await?
            }
            None => self
                .engines
                .reader
                .read(&handle.store, &handle.version, offset..end, sequential)
                .await
                .map_err(|source| FsError::Store {
                    backend: handle.backend.clone(),
                    source,
                })?,
        };
        self.engines
            .metrics
            .read_served(&handle.backend, bytes.len());
        Ok(bytes)
    }

    /// The last close of a handle. A written file left dirty is committed in the background,
    /// at once (the idle delay a `flush` may have started is for descriptors left open; with
    /// `flush_on_close` the last FLUSH has committed it already); an object unlinked while
    /// open is deleted once no handle of this mount has it open.
    pub async fn release(&self, fh: u64) {
        let Some(handle) = lock(&self.files).remove(&fh) else {
            return;
        };
        self.journal(|| Record::Closed { fh });
        if let (true, Some(file)) = (handle.writable, &handle.dirty) {
            self.engines.writes.commit_in_background(file);
            self.engines.writes.release(file);
        }
        // Whether this was the last handle, and taking the unlinked record if so, happen under
        // the `unlinked` lock, which `unlink` holds while it checks for open handles and records
        // the name: so exactly one of the two deletes the object, never neither.
        let doomed = {
            let mut unlinked = lock(&self.unlinked);
            let still_open = lock(&self.files).values().any(|h| h.ino == handle.ino);
            let id = (handle.store.id().to_string(), handle.version.key.clone());
            match unlinked.get(&id) {
                Some(u) if u.ino == handle.ino && !still_open => unlinked.remove(&id),
                _ => None,
            }
        };
        if let Some(doomed) = doomed {
            match doomed.settings.store.delete(&handle.version.key).await {
                Ok(()) => {
                    doomed
                        .settings
                        .record(&handle.backend, &doomed.path, Change::Deleted)
                        .await
                }
                Err(e) => tracing::warn!(backend = %handle.backend, key = %handle.version.key,
                    error = %e, "cannot delete a file unlinked while open"),
            }
        }
    }

    /// Forgets what is known of directory `dir` and of `name` in it, after a change there.
    fn invalidate_entry(&self, dir: u64, name: &str) {
        lock(&self.listings).remove(&dir);
        self.forget_kept(dir, name);
        let entry = (dir, name.to_string());
        lock(&self.negative).pop(&entry);
        lock(&self.removed).remove(&entry);
        let mut changed = lock(&self.dir_changed);
        if changed.len() >= NEGATIVE_CACHE_LIMIT {
            let ttl = self.options.ttl;
            changed.retain(|_, at| at.elapsed() < ttl);
        }
        changed.insert(dir, Instant::now());
    }

    /// As `invalidate_entry`, for a name this mount just removed: listings asked for before
    /// now must not bring it back.
    fn note_removed(&self, dir: u64, name: &str) {
        self.invalidate_entry(dir, name);
        self.remember_missing(dir, name);
        let now = Instant::now();
        let mut removed = lock(&self.removed);
        if removed.len() >= NEGATIVE_CACHE_LIMIT {
            // Only listings still open can show a removed name: keep what one of them predates.
            let oldest_listing = lock(&self.dirs).values().filter_map(|h| h.listed_at).min();
            removed.retain(|_, at| oldest_listing.is_some_and(|oldest| *at >= oldest));
        }
        removed.insert((dir, name.to_string()), now);
    }

    fn dir_changed_since(&self, dir: u64, since: Instant) -> bool {
        lock(&self.dir_changed)
            .get(&dir)
            .is_some_and(|at| *at >= since)
    }

    /// Whether this mount removed `name` from `dir` after `since`.
    fn removed_since(&self, dir: u64, name: &str, since: Instant) -> bool {
        lock(&self.removed)
            .get(&(dir, name.to_string()))
            .is_some_and(|at| *at >= since)
    }

    /// A cached listing of `ino` younger than the TTL, with when it was asked for: its own, or
    /// one a listing of an ancestor kept for it.
    fn fresh_listing(&self, ino: u64) -> Option<(Arc<BTreeMap<String, ChildKind>>, Instant)> {
        let own = lock(&self.listings)
            .get(&ino)
            .filter(|snapshot| snapshot.fetched.elapsed() < self.options.ttl)
            .map(|snapshot| (snapshot.children.clone(), snapshot.fetched));
        own.or_else(|| self.kept_listing(ino))
    }

    fn recently_missing(&self, parent: u64, name: &str) -> bool {
        let mut negative = lock(&self.negative);
        negative
            .get(&(parent, name.to_string()))
            .is_some_and(|at| at.elapsed() < self.options.ttl)
    }

    fn remember_missing(&self, parent: u64, name: &str) {
        lock(&self.negative).put((parent, name.to_string()), Instant::now());
    }
}

/// Refuses a key the store cannot hold (S3: 1,024 bytes) with ENAMETOOLONG, as a local
/// filesystem refuses a path past PATH_MAX.
fn check_key_len(key: &str) -> Result<()> {
    if key.len() > crate::store::MAX_KEY_LEN {
        return Err(FsError::NameTooLong);
    }
    Ok(())
}

/// What a file being written looks like to `stat` and listings. Its ETag is left empty: the
/// kernel must not keep pages cached for it across opens.
fn pending_kind(meta: DirtyMeta) -> ChildKind {
    ChildKind::File(FileMeta {
        size: meta.size,
        etag: String::new(),
        mtime: meta.mtime,
    })
}

#[cfg(test)]
mod manifest_tests;
#[cfg(test)]
mod model_tests;
#[cfg(test)]
mod subtree_tests;
#[cfg(test)]
mod tests;
