//! `Fs`: one mount's POSIX view over its backends — inodes, handles, attributes, errors.
//!
//! The mount root lists the backends as sibling directories (`dir_name`); below each, the
//! namespace comes live from the backend's store (see [`listing`]). Nothing here knows about
//! FUSE: the adapter in `crate::fuse` only translates, so everything is testable without a mount.
//! No lock is held across an await; store calls run on tokio tasks spawned by the adapter.
//!
//! Where things live: the types, the `Fs` state and its backends here; lookups and attributes
//! in `lookup`; opens, reads and closes of files in `file_ops`; the per-name records (misses,
//! removals, recent writes and changes, listing snapshots) in `recent`, directories whose names
//! are known (lookups of new names answered without a request) in `known_names`; taking over a previous
//! server's kernel state in `restore`; directories (`opendir`/`readdir`) in `dir_ops`, over
//! `dir_pages` (manifest), `live_pages` (large live directories) and `subtree` (small subtrees
//! listed at once); creating, writing, renaming and removing in `write_ops`.
//!
//! Lock order, where two are held at once: `unlinked` before `files` (the check for open
//! handles and the record of an unlinked name are one step for `unlink` and `release`), and
//! `removed` before `dirs`. Every other map is locked alone.

mod backend;
mod descriptors;
mod dir_ops;
mod dir_pages;
mod error;
mod file_ops;
mod inode;
mod kernel_state;
mod known_names;
mod listing;
mod live_pages;
mod lookup;
mod manifest_listing;
mod manifest_owner;
mod mapped_log;
mod meta_ops;
mod passthrough;
mod posix;
mod recent;
mod restore;
mod stream;
mod subtree;
mod unlinked;
mod write_ops;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::ffi::OsStr;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};
use std::time::{Duration, Instant, SystemTime};

pub use backend::{Backend, BackendSettings};
pub use dir_ops::Listed;
pub use error::{FsError, errno_name};
pub use file_ops::{ReadLater, ReadNow};
pub use inode::ROOT_INO;
pub use kernel_state::{KernelState, Restored};
pub use listing::{ChildKind, FileMeta, valid_name};
pub use meta_ops::Creator;
pub use passthrough::{Backing, OpenIo, Registration};
pub use unlinked::Doomed;
pub use write_ops::{RenameFlags, SetAttr, WrittenNow};

use crate::cache::ObjectVersion;
use crate::engines::Engines;
use crate::manifest::format::Ownership;
use crate::manifest::namespace::ManifestError;
pub use crate::memory::InodeLimit;
use crate::store::ObjectStore;
use crate::write::{DirtyFile, DirtyMeta};
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
    /// `evictable_inode_limit`, or this mount's share of the process's inode pool when that is
    /// smaller: readdirplus stops handing out new inodes at twice this ([`Fs::readdir`]); the
    /// evictor keeps the table near it. Read at every use: it shrinks as mounts are added.
    pub inode_limit: InodeLimit,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Dir,
    File,
    /// Kinds a `posix_metadata` object's mode may give it (s3fs's forms): a symbolic link,
    /// and special files whose object is empty (the kernel serves a FIFO or socket itself; a
    /// device node cannot be opened on a `nodev` mount).
    Symlink,
    Fifo,
    Socket,
    CharDevice,
    BlockDevice,
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
    /// Access and change times, where kept (`posix_metadata`); else `stat` shows `mtime`.
    pub atime: Option<SystemTime>,
    pub ctime: Option<SystemTime>,
    /// The device a character or block device node stands for (`posix_metadata`).
    pub rdev: u32,
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
    /// go through it, so a writer reads its own writes. A handle opened for reading before the
    /// writing began is given it then (`Fs::began_writing`): read it through [`FileHandle::dirty`].
    dirty: Mutex<Option<Arc<DirtyFile>>>,
    /// Opened for writing; `dirty` is then this handle's, released at close.
    writable: bool,
    flush_on_close: bool,
    /// Something was written (or truncated) through this handle since it was opened: its
    /// closes commit. Until then the file holds at most what the open itself did (created it,
    /// or truncated it), which a close with another descriptor still open may leave to that
    /// descriptor's close (see `flush`).
    wrote: AtomicBool,
    /// How the kernel reads it (see `passthrough`).
    io: passthrough::HandleIo,
}

impl FileHandle {
    /// The file being written that this handle reads and writes, if any.
    fn dirty(&self) -> Option<Arc<DirtyFile>> {
        lock(&self.dirty).clone()
    }

    fn record(&self, fh: u64) -> FileRecord {
        FileRecord {
            fh,
            ino: self.ino,
            backend: self.backend.clone(),
            key: self.version.key.clone(),
            etag: self.version.etag.clone(),
            size: self.version.size,
            writable: self.writable,
            io: self.io.record(),
        }
    }
}

/// How a file is opened. `O_TRUNC` is not here: the kernel truncates through a setattr after
/// the open (see `FuseAdapter::init`, why msfs does not take it with the open).
#[derive(Debug, Clone, Copy, Default)]
pub struct OpenMode {
    pub write: bool,
    /// `O_DIRECT`: the application asked to bypass caches, so never passthrough (the kernel
    /// would read the cache file with direct I/O, from the disk).
    pub direct: bool,
}

/// A file just opened: its handle, and how the kernel is to read it.
#[derive(Debug, Clone)]
pub struct Opened {
    pub fh: u64,
    pub io: OpenIo,
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
    /// Directories whose names are known for a while (made here, or listed before a change of
    /// this mount's): lookups of other names in them miss without a request.
    known: Mutex<known_names::KnownNames>,
    /// Names known to be absent, by (directory, name), with since when: a lookup miss, or a
    /// name this mount removed. A bounded LRU: forgetting a miss only costs a request.
    negative: Mutex<lru::LruCache<(u64, String), Instant>>,
    /// Names this mount removed (unlink, rmdir, rename away), with when: an open directory
    /// listing taken before then must not show them. Kept apart from `negative`, whose
    /// evictions must never bring a removed name back; pruned of what no open listing predates.
    removed: Mutex<HashMap<(u64, String), Instant>>,
    /// When this mount last changed each directory's entries: a listing asked for before that
    /// is not cached.
    /// (Also by the clock: a `posix_metadata` directory's times show it, see `meta_ops`.)
    dir_changed: Mutex<HashMap<u64, (Instant, SystemTime)>>,
    /// Objects this mount wrote recently, by (store id, key), with when it last saw them being
    /// written: metadata of theirs from a listing snapshot may predate the commit, so opens ask
    /// the store until the TTL has passed since.
    written: Mutex<HashMap<(String, String), Instant>>,
    /// Objects unlinked while open: hidden from lookups and listings, deleted at the last close
    /// (see `unlinked`).
    unlinked: Mutex<HashMap<(String, String), unlinked::Unlinked>>,
    files: Mutex<HashMap<u64, Arc<FileHandle>>>,
    dirs: Mutex<HashMap<u64, Arc<DirHandle>>>,
    next_handle: AtomicU64,
    /// Live directories with more entries are read a page at a time (see `live_pages`).
    whole_listing_max: usize,
    /// Keys a subtree listing reads before the directory is listed with the delimiter instead.
    subtree_listing_max: usize,
    /// Where what the kernel holds is journalled for a successor (`None`: nowhere).
    kernel_state: Option<Arc<KernelState>>,
    /// How each open inode is read: page cache, direct, or passthrough.
    io_modes: passthrough::IoModes,
    /// What objects of `posix_metadata` backends carry (modes, owners, times).
    metadata: posix::MetadataCache,
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
        let metadata = posix::MetadataCache::new(options.ttl);
        let mut inodes = InodeTable::new();
        inodes.set_metrics(engines.metrics.clone());
        Fs {
            options,
            engines,
            mounted_at: SystemTime::now(),
            backends: RwLock::new(backends),
            inodes: Mutex::new(inodes),
            listings: Mutex::new(HashMap::new()),
            kept: subtree::KeptListings::default(),
            known: Mutex::new(known_names::KnownNames::default()),
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
            io_modes: passthrough::IoModes::default(),
            metadata,
        }
    }

    /// Journals what the kernel holds in `state` from now on (see `kernel_state`), so that a
    /// successor serving the same connection can [`Fs::restore`] it.
    pub fn with_kernel_state(mut self, state: Arc<KernelState>) -> Fs {
        lock(&self.inodes).set_journal(state.clone());
        self.kernel_state = Some(state);
        self
    }

    /// The connection negotiated FUSE passthrough: read-only opens of wholly cached objects
    /// may be answered with a backing file from now on (see `passthrough`).
    pub fn enable_passthrough(&self) {
        self.io_modes.enable();
    }

    /// The connection refused to register a backing file (`error`; no `CAP_SYS_ADMIN`, most
    /// likely): every open from now on is answered the usual way. Said once.
    pub fn passthrough_refused(&self, error: &std::io::Error) {
        if self.io_modes.enabled() {
            self.io_modes.disable();
            tracing::warn!(%error,
                "the kernel refused a passthrough backing file; reads go through msfs from now on");
        }
    }

    fn journal(&self, record: impl FnOnce() -> Record) {
        if let Some(state) = &self.kernel_state {
            state.append(&record());
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

    /// Inode `ino`, which the kernel is asking about (so it is not idle: see
    /// [`Fs::evictable_entries`]).
    fn node(&self, ino: u64) -> Result<Node> {
        lock(&self.inodes)
            .used(ino)
            .cloned()
            .ok_or(FsError::UnknownInode(ino))
    }

    /// Entries (parent inode, name) to ask the kernel to drop (`FUSE_NOTIFY_INVAL_ENTRY`), so
    /// that it forgets their inodes and this mount frees them: files nobody has open that the
    /// kernel has not asked about for `idle`, and, while more than `limit` inodes are held, the
    /// least recently used beyond it (`evictable_inode_ttl`, `evictable_inode_limit`). Only
    /// what the kernel may drop on its own under memory pressure: a dropped entry is looked up
    /// again when next used.
    pub fn evictable_entries(&self, idle: Duration, limit: usize) -> Vec<(u64, String)> {
        let open: HashSet<u64> = lock(&self.files).values().map(|h| h.ino).collect();
        lock(&self.inodes).evictable(idle, limit, &open)
    }

    /// Inodes this mount holds for the kernel.
    pub fn inode_count(&self) -> usize {
        lock(&self.inodes).len()
    }

    /// Inodes this mount may hold now (see [`FsOptions::inode_limit`]).
    pub fn inode_limit(&self) -> usize {
        self.options.inode_limit.get()
    }

    #[cfg(test)]
    pub(super) fn set_inode_limit(&mut self, limit: usize) {
        self.options.inode_limit = InodeLimit::fixed(limit);
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
}

/// Refuses a key the store cannot hold (S3: 1,024 bytes) with ENAMETOOLONG, as a local
/// filesystem refuses a path past PATH_MAX.
/// What a file being written looks like to `stat` and listings. Its ETag is left empty: the
/// kernel must not keep pages cached for it across opens. `owner`: what the manifest row of the
/// file it rewrites states, kept.
fn pending_kind(meta: DirtyMeta, owner: Option<Ownership>) -> ChildKind {
    ChildKind::File(FileMeta {
        size: meta.size,
        etag: String::new(),
        mtime: meta.mtime,
        owner,
    })
}

#[cfg(test)]
mod known_names_tests;
#[cfg(test)]
mod manifest_tests;
#[cfg(test)]
mod model_tests;
#[cfg(test)]
mod subtree_tests;
#[cfg(test)]
mod tests;
