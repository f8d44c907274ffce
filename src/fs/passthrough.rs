//! Which way the kernel reads an open file: through msfs with the kernel's page cache (the usual
//! way), through msfs without it (direct I/O), or — FUSE passthrough, `fuse_passthrough` — from
//! the object's file in the line cache itself, without a request to msfs per read.
//!
//! The kernel holds an inode's opens to one mode: while one of them is passthrough, every open
//! of the inode must be passthrough with the same backing file (anything else fails in the
//! application with EIO, `FOPEN_DIRECT_IO` included), and a passthrough open beside a
//! page-cached one fails the same way. So every handle's way is decided here, under one lock,
//! against the inode's other handles:
//! - a read-only, non-`O_DIRECT` open of a version whose every line is cached and clean, with no
//!   page-cached handle of the inode live, is lent the object's cache file (passthrough);
//! - while it is lent, a read-only open of the same version shares it (an `O_DIRECT` one too:
//!   the kernel reads the cache file with direct I/O, the same bytes), and any other open — a
//!   writer, or a newer version of the object — cannot be served on this inode at all. Such an
//!   open *supersedes* it: the name is given a new inode and the open answered `ESTALE`, on
//!   which the kernel looks the name up again (`LOOKUP_REVAL`) and opens the new inode, as after
//!   a rename over the file; the lent handles keep reading the version they opened;
//! - everything else is page-cached, exactly as without passthrough.
//!
//! The kernel leaves an inode's io mode at a file's last close, before it sends the RELEASE,
//! so what this table counts is never behind the kernel. A lent object's lines stay pinned in
//! the cache until its last passthrough handle is released (see
//! [`crate::cache::LineCache::pin_object_file`]), so the kernel never reads a line punched out.

use std::any::Any;
use std::collections::HashMap;
use std::fs::File;
use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};

use serde::{Deserialize, Serialize};

use super::lock;
use crate::cache::PinnedObjectFile;

/// An object version the kernel reads from its cache file itself, shared by every passthrough
/// handle of one inode.
pub struct Backing {
    etag: String,
    /// The object's lines, pinned; its file until it is registered.
    object: Mutex<PinnedObjectFile>,
    /// What the connection registered the object's file as (the FUSE adapter's backing id), at
    /// the first open that uses it; dropped, unregistering it, with the last handle.
    registration: Mutex<Option<Registration>>,
    /// The kernel refused the file: no open was passthrough with it, so it binds no other open.
    refused: AtomicBool,
}

/// The connection's registration of a backing file (a `fuser::BackingId`).
pub type Registration = Box<dyn Any + Send + Sync>;

impl Backing {
    /// The connection's registration of the object's file, made by `register` at the first
    /// open that uses it. The file is closed then: the kernel holds its own reference, so msfs
    /// keeps no descriptor per lent object. Held while an open's reply names it. Fails when
    /// the kernel refused the file (`register` failed then, or now).
    pub fn registration(
        &self,
        register: impl FnOnce(&File) -> io::Result<Registration>,
    ) -> io::Result<MutexGuard<'_, Option<Registration>>> {
        let mut registration = lock(&self.registration);
        if registration.is_none() {
            let file = lock(&self.object).take_file().ok_or_else(|| {
                io::Error::other("the kernel refused this backing file at an earlier open")
            })?;
            match register(&file) {
                Ok(registered) => *registration = Some(registered),
                Err(e) => {
                    self.refused.store(true, Ordering::Relaxed);
                    return Err(e);
                }
            }
        }
        Ok(registration)
    }

    fn refused(&self) -> bool {
        self.refused.load(Ordering::Relaxed)
    }
}

impl std::fmt::Debug for Backing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Backing")
            .field("etag", &self.etag)
            .field("object", &self.object)
            .finish_non_exhaustive()
    }
}

/// How an open is answered: what the kernel is told about the new handle.
#[derive(Debug, Clone)]
pub enum OpenIo {
    /// Through msfs and the kernel's page cache; `keep_cache`: pages the kernel cached at an
    /// earlier open of the same version are still good.
    PageCache { keep_cache: bool },
    /// The kernel reads the backing file itself.
    Passthrough(Arc<Backing>),
}

/// What an open asks for, as far as the io mode goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum OpenKind {
    /// Read-only, of an object not being written, without `O_DIRECT`: may be lent a backing.
    Lendable,
    /// Read-only, but `O_DIRECT`: never lent a backing of its own (the kernel would read the
    /// cache file from the disk), but shares one already lent.
    Direct,
    /// For writing, or of a file being written: read and written through msfs.
    Write,
}

/// A handle's way of reading, as this server (or the previous one) answered its open.
#[derive(Debug, Clone)]
pub(super) enum HandleIo {
    PageCache,
    Passthrough(Arc<Backing>),
    /// Opened passthrough by a previous server of the connection: its backing file is not
    /// known here, so no other may be lent for the inode until it closes.
    Inherited,
}

/// [`HandleIo`] as the kernel-state journal records it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum IoRecord {
    /// Absent from what processes before passthrough journalled: all their handles were.
    #[default]
    PageCache,
    Passthrough,
}

impl HandleIo {
    pub(super) fn record(&self) -> IoRecord {
        match self {
            HandleIo::PageCache => IoRecord::PageCache,
            HandleIo::Passthrough(_) | HandleIo::Inherited => IoRecord::Passthrough,
        }
    }

    pub(super) fn restored(record: IoRecord) -> HandleIo {
        match record {
            IoRecord::PageCache => HandleIo::PageCache,
            IoRecord::Passthrough => HandleIo::Inherited,
        }
    }
}

/// The io modes of one mount's open inodes.
#[derive(Debug, Default)]
pub(super) struct IoModes {
    inodes: Mutex<HashMap<u64, InodeIo>>,
    /// The connection negotiated passthrough (and has not refused a backing file since).
    enabled: AtomicBool,
}

#[derive(Debug, Default)]
struct InodeIo {
    page_cached: usize,
    inherited: usize,
    /// The backing lent to the inode's passthrough handles, while one lives.
    backing: Weak<Backing>,
}

impl InodeIo {
    fn idle(&self) -> bool {
        self.page_cached == 0 && self.inherited == 0 && self.backing.strong_count() == 0
    }
}

impl IoModes {
    /// Lends backing files from now on: the connection negotiated passthrough.
    pub fn enable(&self) {
        self.enabled.store(true, Ordering::Relaxed);
    }

    /// Lends no more: the connection refused a backing file (without `CAP_SYS_ADMIN`).
    pub fn disable(&self) {
        self.enabled.store(false, Ordering::Relaxed);
    }

    pub fn enabled(&self) -> bool {
        self.enabled.load(Ordering::Relaxed)
    }

    /// Decides, and counts, how a new handle of `ino` on version `etag` reads: `None` when the
    /// inode is lent and this open cannot share it (the caller supersedes the inode). `how` is
    /// the open's kind; `lend` is asked for the object's file only for a [`OpenKind::Lendable`]
    /// open of an inode with neither a backing nor a page-cached handle.
    pub fn open(
        &self,
        ino: u64,
        etag: &str,
        how: OpenKind,
        lend: impl FnOnce() -> Option<PinnedObjectFile>,
    ) -> Option<HandleIo> {
        let mut inodes = lock(&self.inodes);
        let io = inodes.entry(ino).or_default();
        if io.inherited > 0 {
            return None;
        }
        // A backing the kernel refused was never passthrough in the kernel: its handles read
        // direct, beside which anything goes. One it took binds every open of the inode, even
        // once another file's refusal has turned lending off.
        if let Some(backing) = io.backing.upgrade().filter(|b| !b.refused()) {
            let shares = how != OpenKind::Write && backing.etag == etag;
            return shares.then_some(HandleIo::Passthrough(backing));
        }
        if how == OpenKind::Lendable
            && self.enabled()
            && io.page_cached == 0
            && let Some(object) = lend()
        {
            let backing = Arc::new(Backing {
                etag: etag.to_string(),
                object: Mutex::new(object),
                registration: Mutex::new(None),
                refused: AtomicBool::new(false),
            });
            io.backing = Arc::downgrade(&backing);
            return Some(HandleIo::Passthrough(backing));
        }
        io.page_cached += 1;
        Some(HandleIo::PageCache)
    }

    /// Whether `ino` has handles reading from a backing file, which no other open can join.
    pub fn lent(&self, ino: u64) -> bool {
        lock(&self.inodes)
            .get(&ino)
            .is_some_and(|io| io.inherited > 0 || io.backing.strong_count() > 0)
    }

    /// Counts a handle a previous server of the connection opened.
    pub fn restore(&self, ino: u64, handle: &HandleIo) {
        let mut inodes = lock(&self.inodes);
        let io = inodes.entry(ino).or_default();
        match handle {
            HandleIo::PageCache => io.page_cached += 1,
            HandleIo::Inherited => io.inherited += 1,
            HandleIo::Passthrough(_) => {}
        }
    }

    /// A handle of `ino` was released (the kernel has left its io mode already). A passthrough
    /// handle's share of the backing goes when the handle itself is dropped.
    pub fn close(&self, ino: u64, handle: &HandleIo) {
        let mut inodes = lock(&self.inodes);
        let Some(io) = inodes.get_mut(&ino) else {
            return;
        };
        match handle {
            HandleIo::PageCache => io.page_cached = io.page_cached.saturating_sub(1),
            HandleIo::Inherited => io.inherited = io.inherited.saturating_sub(1),
            HandleIo::Passthrough(_) => {}
        }
        let last_share = matches!(handle, HandleIo::Passthrough(b) if Arc::strong_count(b) == 1);
        if io.idle() || (last_share && io.page_cached == 0 && io.inherited == 0) {
            inodes.remove(&ino);
        }
    }

    /// Inodes with a handle open in any mode (tests).
    #[cfg(test)]
    pub fn tracked(&self) -> usize {
        lock(&self.inodes).values().filter(|io| !io.idle()).count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::{LineCache, ObjectVersion};
    use crate::config::{CacheConfig, CacheStorage};

    const STORE: &str = "store";

    /// A per-object-file cache holding version `etag` of `obj` (two lines) whole.
    fn cache_holding(dir: &std::path::Path, etags: &[&str]) -> Arc<LineCache> {
        let cache = LineCache::new(&CacheConfig {
            storage: CacheStorage::PerInodeFile,
            line_size: 4096,
            lines: 64,
            ram_lines: 0,
            lines_to_prefetch: 0,
            dir_path: Some(dir.to_path_buf()),
            persistent: false,
            write_cache_promotion: false,
        })
        .expect("cache");
        for etag in etags {
            let body = vec![7u8; 8192];
            assert_eq!(cache.admit(STORE, &version(etag), 0, &body), 2, "two lines");
        }
        cache
    }

    fn version(etag: &str) -> ObjectVersion {
        ObjectVersion {
            key: "obj".into(),
            etag: etag.into(),
            size: 8192,
        }
    }

    fn lend<'a>(
        cache: &'a LineCache,
        etag: &'a str,
    ) -> impl FnOnce() -> Option<PinnedObjectFile> + 'a {
        move || cache.pin_object_file(STORE, &version(etag))
    }

    fn enabled() -> IoModes {
        let modes = IoModes::default();
        modes.enable();
        modes
    }

    use OpenKind::{Direct, Lendable, Write};

    fn page_cached(io: Option<HandleIo>) -> bool {
        matches!(io, Some(HandleIo::PageCache))
    }

    fn lent(io: &Option<HandleIo>) -> &Arc<Backing> {
        match io {
            Some(HandleIo::Passthrough(backing)) => backing,
            other => panic!("not passthrough: {other:?}"),
        }
    }

    #[test]
    fn readers_of_the_lent_version_share_its_backing_and_no_other_open_joins_it() {
        let dir = tempfile::tempdir().expect("tempdir");
        let cache = cache_holding(dir.path(), &["v1", "v2"]);
        let modes = enabled();
        let first = modes.open(1, "v1", Lendable, lend(&cache, "v1"));
        let second = modes.open(1, "v1", Lendable, || panic!("shared, not lent again"));
        // O_DIRECT beside it: the kernel reads the same cache file with direct I/O.
        let direct = modes.open(1, "v1", Direct, || panic!("shared, not lent again"));
        assert!(
            Arc::ptr_eq(lent(&first), lent(&second)),
            "one backing per inode"
        );
        assert!(Arc::ptr_eq(lent(&first), lent(&direct)));
        assert!(modes.lent(1));
        // A writer or a newer version cannot be served on this inode: the caller supersedes it.
        assert!(modes.open(1, "v1", Write, || None).is_none());
        assert!(modes.open(1, "v2", Lendable, lend(&cache, "v2")).is_none());
        for io in [first, second, direct] {
            let io = io.expect("opened");
            modes.close(1, &io);
        }
        assert!(!modes.lent(1));
        assert_eq!(modes.tracked(), 0);
        assert!(
            page_cached(modes.open(1, "v2", Write, || None)),
            "free again"
        );
    }

    #[test]
    fn a_page_cached_handle_keeps_its_inode_out_of_passthrough_until_it_closes() {
        let dir = tempfile::tempdir().expect("tempdir");
        let cache = cache_holding(dir.path(), &["v1"]);
        let modes = enabled();
        let cached = modes.open(1, "v1", Lendable, || None).expect("opened");
        assert!(matches!(cached, HandleIo::PageCache), "nothing to lend");
        let beside = modes.open(1, "v1", Lendable, || {
            panic!("not asked beside a cached handle")
        });
        assert!(page_cached(beside));
        assert!(!modes.lent(1));
        lent(&modes.open(2, "v1", Lendable, lend(&cache, "v1")));
        modes.close(1, &cached);
        modes.close(1, &HandleIo::PageCache);
        assert!(page_cached(
            modes.open(1, "v1", Direct, || panic!("O_DIRECT is never lent"))
        ));
        modes.close(1, &HandleIo::PageCache);
        lent(&modes.open(1, "v1", Lendable, lend(&cache, "v1")));
    }

    #[test]
    fn a_previous_servers_passthrough_handle_keeps_its_inode_from_every_open_until_it_closes() {
        let dir = tempfile::tempdir().expect("tempdir");
        let cache = cache_holding(dir.path(), &["v1"]);
        let modes = enabled();
        let inherited = HandleIo::restored(IoRecord::Passthrough);
        modes.restore(1, &inherited);
        assert!(modes.lent(1));
        assert!(
            modes
                .open(1, "v1", Lendable, || panic!("its backing is not known"))
                .is_none()
        );
        assert!(modes.open(1, "v1", Write, || None).is_none());
        modes.close(1, &inherited);
        lent(&modes.open(1, "v1", Lendable, lend(&cache, "v1")));
    }

    #[test]
    fn without_passthrough_every_open_is_page_cached() {
        let dir = tempfile::tempdir().expect("tempdir");
        let cache = cache_holding(dir.path(), &["v1"]);
        let modes = IoModes::default();
        assert!(page_cached(modes.open(1, "v1", Lendable, || panic!("off"))));
        modes.enable();
        let backing = modes.open(2, "v1", Lendable, lend(&cache, "v1"));
        lent(&backing);
        // The kernel refused to register it: the handle that was to share it reads direct,
        // beside which page-cached opens are fine.
        let refused = lent(&backing).registration(|_| Err(io::Error::other("EPERM")));
        assert!(refused.is_err());
        modes.disable();
        assert!(page_cached(modes.open(2, "v1", Lendable, || panic!("off"))));
    }

    #[test]
    fn a_backing_the_kernel_took_binds_its_inode_after_another_files_refusal() {
        let dir = tempfile::tempdir().expect("tempdir");
        let cache = cache_holding(dir.path(), &["v1"]);
        let modes = enabled();
        let taken = modes.open(1, "v1", Lendable, lend(&cache, "v1"));
        let registered = lent(&taken).registration(|_| Ok(Box::new(7u32)));
        assert!(registered.is_ok());
        drop(registered);
        // Another file's registration failed, and lending is off for the connection.
        modes.disable();
        assert!(
            modes.open(1, "v1", Write, || None).is_none(),
            "a page-cached open beside the kernel's passthrough one would fail with EIO"
        );
        assert!(matches!(
            modes.open(1, "v1", Lendable, || panic!("shared")),
            Some(HandleIo::Passthrough(_))
        ));
    }

    #[test]
    fn the_journal_keeps_which_handles_read_a_backing() {
        assert_eq!(HandleIo::PageCache.record(), IoRecord::PageCache);
        assert_eq!(HandleIo::Inherited.record(), IoRecord::Passthrough);
        let old: super::super::kernel_state::FileRecord = serde_json::from_str(
            r#"{"fh":1,"ino":2,"backend":"b","key":"k","etag":"e","size":3,"writable":false}"#,
        )
        .expect("decode a record of a process before passthrough");
        assert_eq!(old.io, IoRecord::PageCache, "absent: page-cached");
        let new: IoRecord = serde_json::from_str("\"passthrough\"").expect("decode");
        assert!(matches!(HandleIo::restored(new), HandleIo::Inherited));
    }
}
