//! The operations that change files and the namespace: create, mknod, write, flush, fsync,
//! setattr, unlink, mkdir, rmdir, rename. File contents go through the write engine; namespace
//! changes are made in the store at once (a directory is a zero-byte `dir/` marker object).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Instant, SystemTime};

use bytes::Bytes;

use super::descriptors::{self, OpenFile};
use super::dir_pages::ManifestPages;
use super::inode::Node;
use super::listing::{self, ChildKind, FileMeta, NAME_MAX, valid_name};
use super::meta_ops::Creator;
use super::passthrough::{HandleIo, OpenKind};
use super::posix::{S_IFDIR, S_IFREG};
use super::unlinked::Unlinked;
use super::{
    Attr, Backend, BackendSettings, FileHandle, Fs, FsError, Result, SequentialDetector, lock,
    pending_kind,
};
use crate::cache::ObjectVersion;
use crate::manifest::delta::Change;
use crate::manifest::format::{EntryKind, Ownership};
use crate::manifest::registry::blocking;
use crate::store::{InMemory, Metadata};
use crate::write::{DirtyFile, RecentCommit, Target};

/// A rename's flags that msfs honours (the rest are refused).
#[derive(Debug, Clone, Copy, Default)]
pub struct RenameFlags {
    /// RENAME_NOREPLACE: fail with EEXIST rather than replace the target.
    pub no_replace: bool,
    /// RENAME_EXCHANGE: swap the two names; object stores cannot do that atomically.
    pub exchange: bool,
}

/// What setattr asks to change.
#[derive(Debug, Clone, Default)]
pub struct SetAttr {
    pub size: Option<u64>,
    pub mtime: Option<SystemTime>,
    /// Permission bits, owner and access time: kept by `posix_metadata` backends only.
    pub mode: Option<u32>,
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    pub atime: Option<SystemTime>,
    /// The handle the change was made through, if any (ftruncate).
    pub fh: Option<u64>,
}

/// A write [`Fs::write_now`] did: the bytes it took, and whether it finished a part of a large
/// file streamed as it is written ([`Fs::stream_parts_after`] is then due before the answer).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WrittenNow {
    pub len: u32,
    pub part_finished: bool,
}

/// What a write of `data` answers: its length (a FUSE write is never larger than `u32`).
fn written_len(data: &[u8]) -> u32 {
    u32::try_from(data.len()).unwrap_or(u32::MAX)
}

/// How long a rename of a file just closed waits for the kernel's RELEASE of its handle before
/// taking the file for one still open for writing (EBUSY): 2 s in rounds of 10 ms.
const RELEASE_WAIT_ROUNDS: u32 = 200;
const RELEASE_WAIT_ROUND: std::time::Duration = std::time::Duration::from_millis(10);

/// A directory that can be changed: its node, backend and the backend's current settings.
pub(super) struct WritableDir {
    pub node: Node,
    pub backend: Arc<Backend>,
    pub settings: Arc<BackendSettings>,
}

impl Fs {
    /// Directory `ino`, if changes may be made in it.
    pub(super) fn writable_dir(&self, ino: u64) -> Result<WritableDir> {
        let node = self.node(ino)?;
        if !node.is_dir() {
            return Err(FsError::NotADirectory);
        }
        let Some(backend) = node.backend.clone() else {
            // The mount root lists the configured backends; nothing else can be created there.
            return Err(FsError::ReadOnly {
                backend: "(mount root)".into(),
            });
        };
        let settings = backend.settings();
        if settings.readonly {
            return Err(FsError::ReadOnly {
                backend: backend.dir_name.clone(),
            });
        }
        Ok(WritableDir {
            node,
            backend,
            settings,
        })
    }

    pub(super) fn check_new_name(name: &str) -> Result<()> {
        if name.len() > NAME_MAX {
            return Err(FsError::NameTooLong);
        }
        if !valid_name(name) {
            return Err(FsError::Invalid("name"));
        }
        Ok(())
    }

    /// Creates and opens a new, empty file. (The kernel only asks after a failed lookup, and
    /// handles O_EXCL itself.)
    pub async fn create(&self, parent: u64, name: &str) -> Result<(Attr, u64)> {
        self.create_as(parent, name, None).await
    }

    /// [`Fs::create`] by `creator`, whose owner and mode a `posix_metadata` backend keeps.
    pub async fn create_as(
        &self,
        parent: u64,
        name: &str,
        creator: Option<Creator>,
    ) -> Result<(Attr, u64)> {
        let (dir, target) = self.new_file(parent, name)?;
        self.claim_name_waiting(target.store.id(), &target.key)
            .await;
        let file = self.engines.writes.create(target).await;
        self.created(parent, name, dir, file, creator)
    }

    /// `create_as` without waiting, when nothing is being written at the name (a new name, the
    /// usual case: `WriteEngine::create_now`). `None` when a file is: `create_as` replaces it.
    pub fn create_now(
        &self,
        parent: u64,
        name: &str,
        creator: Option<Creator>,
    ) -> Option<Result<(Attr, u64)>> {
        let (dir, target) = match self.new_file(parent, name) {
            Ok(new) => new,
            Err(e) => return Some(Err(e)),
        };
        if self.claim_name(target.store.id(), &target.key).is_some() {
            // The old object of an unlinked-while-open name is being deleted: `create_as` waits.
            return None;
        }
        let file = self.engines.writes.create_now(target)?;
        Some(self.created(parent, name, dir, file, creator))
    }

    /// Where a new file `name` in `parent` is written, once the name and the directory are
    /// found fit for it. The caller then claims the name (`Fs::claim_name`).
    fn new_file(&self, parent: u64, name: &str) -> Result<(WritableDir, Target)> {
        Self::check_new_name(name)?;
        let dir = self.writable_dir(parent)?;
        let path = listing::child_path(&dir.node.path, name);
        dir.settings.check_key_len(&dir.settings.key_of(&path))?;
        let target = dir.settings.target(&dir.backend.dir_name, &path);
        Ok((dir, target))
    }

    /// The inode and handle of `file`, created as `name` in `parent`.
    fn created(
        &self,
        parent: u64,
        name: &str,
        dir: WritableDir,
        file: Arc<DirtyFile>,
        creator: Option<Creator>,
    ) -> Result<(Attr, u64)> {
        let key = file.target.key.clone();
        let path = listing::child_path(&dir.node.path, name);
        file.set_metadata(Self::creator_metadata(&dir.settings, S_IFREG, creator));
        self.metadata.forget(file.target.store.id(), &key);
        self.note_written(file.target.store.id(), &key);
        let kind = pending_kind(file.meta(), None);
        let node = {
            let mut inodes = lock(&self.inodes);
            // The name's inode may still be read from a lent cache file (the object was deleted
            // behind the mount while open): a new file is a new inode.
            if let Some(ino) = inodes.child(parent, name)
                && self.io_modes.lent(ino)
            {
                inodes.remove_name(parent, name);
            }
            inodes.lookup(parent, name, dir.backend.clone(), path, kind)
        };
        self.invalidate_entry(parent, name);
        let handle = FileHandle {
            ino: node.ino,
            store: dir.settings.store.clone(),
            backend: dir.backend.dir_name.clone(),
            version: ObjectVersion {
                key,
                etag: String::new(),
                size: 0,
            },
            stream: SequentialDetector::default(),
            dirty: Mutex::new(Some(file)),
            writable: true,
            flush_on_close: dir.settings.flush_on_close,
            wrote: AtomicBool::new(false),
            io: HandleIo::PageCache,
        };
        if self
            .io_modes
            .open(node.ino, "", OpenKind::Write, || None)
            .is_none()
        {
            // Lent between the two locks, which a read-only open of a file being created
            // cannot be: it reads through the write engine.
            return Err(self.supersede(node.ino));
        }
        let fh = self.add_handle(handle);
        Ok((self.attr_of(&node), fh))
    }

    /// Makes a new, empty file without opening it (mknod(2) of a regular file, the only kind
    /// there is): created, then closed as close(2) closes it, a FLUSH and the RELEASE. So it is
    /// committed as a new file closed unwritten is: in the background after the release, or,
    /// with `flush_on_close`, before this returns. A failed flush fails the mknod; the file is
    /// released all the same, as the kernel's RELEASE follows a failed FLUSH.
    pub async fn mknod(&self, parent: u64, name: &str) -> Result<Attr> {
        self.mknod_as(parent, name, None).await
    }

    /// [`Fs::mknod`] by `creator`.
    pub async fn mknod_as(
        &self,
        parent: u64,
        name: &str,
        creator: Option<Creator>,
    ) -> Result<Attr> {
        let (attr, fh) = self.create_as(parent, name, creator).await?;
        let flushed = self.flush(fh, None).await;
        self.release(fh).await;
        flushed.map(|()| attr)
    }

    pub async fn write(&self, fh: u64, offset: u64, data: &[u8]) -> Result<u32> {
        let handle = self.handle(fh)?;
        let file = Self::writing_through(&handle)?;
        self.engines.writes.write(&file, offset, data).await?;
        Ok(written_len(data))
    }

    /// [`Fs::write`] on the caller's thread (a FUSE worker's) when nothing must wait: `None`,
    /// having changed nothing but the handle's written-through mark, when the dirty bound has
    /// no room at once (then call `write`). A write that finished a part of a large file
    /// streamed as it is written says so: call [`Fs::stream_parts_after`] before answering.
    pub fn write_now(&self, fh: u64, offset: u64, data: &[u8]) -> Option<Result<WrittenNow>> {
        let written = (|| {
            let handle = self.handle(fh)?;
            let file = Self::writing_through(&handle)?;
            Ok(self.engines.writes.write_now(&file, offset, data))
        })();
        let part_finished = match written {
            Ok(Some(Ok(part_finished))) => part_finished,
            Ok(None) => return None,
            Ok(Some(Err(e))) => return Some(Err(e.into())),
            Err(e) => return Some(Err(e)),
        };
        Some(Ok(WrittenNow {
            len: written_len(data),
            part_finished,
        }))
    }

    /// What a write that [`Fs::write_now`] answered with `part_finished` leaves to do: start
    /// the upload of the parts it finished, waiting for a slot (the writer's backpressure).
    pub async fn stream_parts_after(&self, fh: u64, offset: u64, len: u64) {
        if let Ok(handle) = self.handle(fh)
            && let Some(file) = handle.dirty()
        {
            self.engines
                .writes
                .stream_parts_after(&file, offset, len)
                .await;
        }
    }

    /// The file a write through `handle` goes to, marking the handle written through (what
    /// `flush` reads); `NotWritable` for a handle not open for writing.
    fn writing_through(handle: &FileHandle) -> Result<Arc<DirtyFile>> {
        let (true, Some(file)) = (handle.writable, handle.dirty()) else {
            return Err(FsError::NotWritable);
        };
        handle.wrote.store(true, Ordering::Relaxed);
        Ok(file)
    }

    /// A close of a descriptor of `fh` (FUSE FLUSH) by process `closer`, if known. The kernel
    /// sends one at every close(2) and never says whether it was the open file's last
    /// descriptor: after a dup or fork there are more, and the RELEASE of `fh` comes after the
    /// last. A shell redirect (`echo x > f`) opens the file, dup2s it to stdout and closes the
    /// first descriptor before anything is written.
    ///
    /// Without `flush_on_close` nothing waits: the commit starts at the RELEASE, or, for a
    /// handle something was written through, once the file has been idle for the write engine's
    /// delay while a descriptor stays open (`commit_when_idle`).
    ///
    /// With `flush_on_close` the close commits and waits for the store, so that after it
    /// returns every other client sees the file; a failed commit fails the close (the data
    /// stays, retried in the background). One exception: a handle nothing has been written
    /// through yet holds at most what its open did (an empty new file, a truncation), and when
    /// the closing process still holds another descriptor open for writing on the file
    /// (`descriptors`), that descriptor's close commits instead. So the redirect costs one PUT,
    /// not an empty one that the next close replaces.
    pub async fn flush(&self, fh: u64, closer: Option<u32>) -> Result<()> {
        let handle = self.handle(fh)?;
        let (true, Some(file)) = (handle.writable, handle.dirty()) else {
            return Ok(());
        };
        let file = &file;
        let wrote = handle.wrote.load(Ordering::Relaxed);
        if !handle.flush_on_close {
            if wrote {
                self.engines.writes.commit_when_idle(file);
            }
            return Ok(());
        }
        if !wrote
            && file.is_dirty()
            && let Some(pid) = closer
            && self.held_open_for_writing_by(pid, &handle).await
        {
            return Ok(());
        }
        self.engines.writes.commit(file).await?;
        Ok(())
    }

    /// Whether process `pid` has a descriptor open for writing on the file of `handle`.
    async fn held_open_for_writing_by(&self, pid: u32, handle: &FileHandle) -> bool {
        let Ok(node) = self.node(handle.ino) else {
            return false;
        };
        let file = OpenFile {
            ino: handle.ino,
            path_suffix: format!("/{}", node.path),
        };
        tokio::task::spawn_blocking(move || descriptors::another_writer(pid, &file))
            .await
            .unwrap_or(false)
    }

    /// Makes everything written to the file durable in the store before returning.
    pub async fn fsync(&self, fh: u64) -> Result<()> {
        let handle = self.handle(fh)?;
        if let Some(file) = handle.dirty() {
            self.engines.writes.fsync(&file).await?;
        }
        Ok(())
    }

    /// Truncates or extends a file, and sets its times, mode and owner: kept with the object by
    /// a `posix_metadata` backend (`meta_ops`); elsewhere only the time `stat` shows while the
    /// file is being written, and mode and owner changes are accepted and ignored (they are the
    /// backend's).
    pub async fn setattr(&self, ino: u64, change: SetAttr) -> Result<Attr> {
        if let Some(size) = change.size {
            self.set_size(ino, size, change.fh).await?;
        }
        self.change_posix(ino, &change).await?;
        if let Some(mtime) = change.mtime {
            let node = self.node(ino)?;
            if let Some(backend) = &node.backend {
                let settings = backend.settings();
                let key = settings.key_of(&node.path);
                if let Some(file) = self.engines.writes.find(settings.store.id(), &key) {
                    file.set_mtime(mtime);
                }
            }
        }
        self.getattr(ino).await
    }

    async fn set_size(&self, ino: u64, size: u64, fh: Option<u64>) -> Result<()> {
        let writes = &self.engines.writes;
        if let Some(fh) = fh {
            let handle = self.handle(fh)?;
            if let (true, Some(file)) = (handle.writable, handle.dirty()) {
                handle.wrote.store(true, Ordering::Relaxed);
                writes.truncate(&file, size)?;
                return Ok(());
            }
        }
        // truncate(2) on a path, and the truncation of an open with O_TRUNC (the kernel sends
        // it after the open, without the handle): open, resize and close, committing as a close
        // would — unless a handle open for writing holds the file, whose close commits it (one
        // PUT for `> file`, not an empty one first).
        let node = self.node(ino)?;
        let (Some(backend), Some(_)) = (&node.backend, node.file()) else {
            return Err(FsError::IsADirectory);
        };
        let settings = backend.settings();
        if settings.readonly {
            return Err(FsError::ReadOnly {
                backend: backend.dir_name.clone(),
            });
        }
        let target = settings.target(&backend.dir_name, &node.path);
        let file = self.open_for_write(backend, target).await?;
        self.began_writing(&node, &file);
        let held = self.held_for_writing(&file);
        let result = match writes.truncate(&file, size) {
            Ok(()) if held => Ok(()),
            Ok(()) if settings.flush_on_close => writes.commit(&file).await.map_err(FsError::from),
            Ok(()) => {
                writes.commit_in_background(&file);
                Ok(())
            }
            Err(e) => Err(e.into()),
        };
        writes.release(&file);
        result
    }

    /// Whether a handle open for writing holds `file` (its release commits it).
    fn held_for_writing(&self, file: &Arc<DirtyFile>) -> bool {
        lock(&self.files).values().any(|handle| {
            handle.writable && handle.dirty().is_some_and(|held| Arc::ptr_eq(&held, file))
        })
    }

    pub async fn unlink(&self, parent: u64, name: &str) -> Result<()> {
        let dir = self.writable_dir(parent)?;
        // The kernel looks a name up before unlinking it, so its inode is normally at hand:
        // no HEAD and LIST to learn again what it is.
        let (path, kind) = match self.known_child(parent, name) {
            Some(known) => known,
            None => {
                let (_, path, kind) = self.resolve(&dir.node, dir.backend.clone(), name).await?;
                (path, kind)
            }
        };
        if matches!(kind, ChildKind::Dir { .. }) {
            return Err(FsError::IsADirectory);
        }
        let key = dir.settings.key_of(&path);
        let store = &dir.settings.store;
        self.engines.writes.forget(store.id(), &key).await;
        self.metadata.forget(store.id(), &key);
        let ino = lock(&self.inodes).child(parent, name);
        // Checked and recorded under the `unlinked` lock, which `release` holds while it decides
        // whether its handle was the last (see there): the object is deleted exactly once.
        let kept_for_open_handles = {
            let mut unlinked = lock(&self.unlinked);
            let open_ino = ino.filter(|ino| lock(&self.files).values().any(|h| h.ino == *ino));
            if let Some(ino) = open_ino {
                unlinked.insert(
                    (store.id().to_string(), key.clone()),
                    Unlinked {
                        ino,
                        settings: dir.settings.clone(),
                        path: path.clone(),
                        deleting: None,
                    },
                );
            }
            open_ino.is_some()
        };
        // Kept for the open handles, which read it until their last close deletes it.
        if !kept_for_open_handles {
            store
                .delete(&key)
                .await
                .map_err(|e| Self::store_error(&dir.backend, e))?;
            dir.settings
                .record(&dir.backend.dir_name, &path, Change::Deleted)
                .await;
        }
        lock(&self.inodes).remove_name(parent, name);
        self.note_removed(parent, name);
        Ok(())
    }

    pub async fn mkdir(&self, parent: u64, name: &str) -> Result<Attr> {
        self.mkdir_as(parent, name, None).await
    }

    /// [`Fs::mkdir`] by `creator`: a `posix_metadata` backend's marker carries its owner and
    /// mode.
    pub async fn mkdir_as(
        &self,
        parent: u64,
        name: &str,
        creator: Option<Creator>,
    ) -> Result<Attr> {
        Self::check_new_name(name)?;
        let dir = self.writable_dir(parent)?;
        let asked = Instant::now();
        match self.resolve(&dir.node, dir.backend.clone(), name).await {
            Ok(_) => return Err(FsError::Exists),
            Err(FsError::NotFound) => {}
            Err(e) => return Err(e),
        }
        // Nothing was below `path` then, so the new directory starts known to be empty.
        let missing_since = self.missing_since(parent, name, asked);
        let path = listing::child_path(&dir.node.path, name);
        let marker = dir.settings.dir_prefix_of(&path);
        dir.settings.check_key_len(&marker)?;
        let metadata = Self::creator_metadata(&dir.settings, S_IFDIR, creator);
        let made = if metadata.is_empty() {
            dir.settings.store.put(&marker, Bytes::new()).await
        } else {
            let empty = Arc::new(InMemory(Bytes::new()));
            (dir.settings.store)
                .put_with_metadata(&marker, empty, &metadata)
                .await
        };
        made.map_err(|e| Self::store_error(&dir.backend, e))?;
        if dir.settings.posix_metadata {
            self.metadata
                .put(dir.settings.store.id(), &marker, metadata);
        }
        dir.settings
            .record(&dir.backend.dir_name, &path, Change::Upsert(EntryKind::DIR))
            .await;
        self.invalidate_entry(parent, name);
        let node = lock(&self.inodes).lookup(parent, name, dir.backend, path, ChildKind::DIR);
        self.know_made_empty(node.ino, missing_since);
        Ok(self.attr_of(&node))
    }

    pub async fn rmdir(&self, parent: u64, name: &str) -> Result<()> {
        let dir = self.writable_dir(parent)?;
        let (path, kind) = match self.resolve(&dir.node, dir.backend.clone(), name).await {
            Ok((_, path, kind)) => (path, kind),
            // A directory with no marker exists only while something is below it: emptied
            // (say, by `rm -r` or `mv`), it is gone from the store though the kernel still
            // knows it. Removing it then just succeeds.
            Err(FsError::NotFound) if self.known_dir(parent, name) => {
                (listing::child_path(&dir.node.path, name), ChildKind::DIR)
            }
            Err(e) => return Err(e),
        };
        if !matches!(kind, ChildKind::Dir { .. }) {
            return Err(FsError::NotADirectory);
        }
        if !self
            .dir_is_empty(&dir.backend, &dir.settings, &path)
            .await?
        {
            return Err(FsError::NotEmpty);
        }
        dir.settings
            .store
            .delete(&dir.settings.dir_prefix_of(&path))
            .await
            .map_err(|e| Self::store_error(&dir.backend, e))?;
        dir.settings
            .record(&dir.backend.dir_name, &path, Change::Deleted)
            .await;
        let ino = lock(&self.inodes).child(parent, name);
        if let Some(ino) = ino {
            lock(&self.listings).remove(&ino);
            self.forget_known(ino);
        }
        lock(&self.inodes).remove_name(parent, name);
        self.note_removed(parent, name);
        Ok(())
    }

    /// The path and kind of `name` in `parent` if the kernel holds an inode for it.
    fn known_child(&self, parent: u64, name: &str) -> Option<(String, ChildKind)> {
        let inodes = lock(&self.inodes);
        let node = inodes.get(inodes.child(parent, name)?)?;
        Some((node.path.clone(), node.kind.clone()))
    }

    /// Whether the kernel holds `name` in `parent` as a directory.
    fn known_dir(&self, parent: u64, name: &str) -> bool {
        let inodes = lock(&self.inodes);
        inodes
            .child(parent, name)
            .and_then(|ino| inodes.get(ino))
            .is_some_and(Node::is_dir)
    }

    /// Whether directory `path` has no entries, asking the store (not a snapshot).
    async fn dir_is_empty(
        &self,
        backend: &Backend,
        settings: &BackendSettings,
        path: &str,
    ) -> Result<bool> {
        let prefix = settings.dir_prefix_of(path);
        if !self
            .engines
            .writes
            .files_in(settings.store.id(), &prefix)
            .is_empty()
        {
            return Ok(false);
        }
        match &settings.manifest {
            // One entry decides it: read the first page, not the whole directory.
            Some(manifest) => {
                let changes = self.mount_changes(settings, Some(manifest), path);
                let mut pages = ManifestPages::new(manifest.clone(), path.to_string(), changes);
                let first = blocking(move || pages.get(0, 1))
                    .await
                    .map_err(|e| Self::manifest_error(backend, e))?;
                Ok(first.is_empty())
            }
            // One entry decides it: the first page, not the whole directory.
            None => {
                let children = listing::list_dir(settings, path, 0)
                    .await
                    .map_err(|e| Self::store_error(backend, e))?;
                Ok(children.is_some_and(|c| c.is_empty()))
            }
        }
    }

    /// Renames a file (copy, then delete) or an empty directory (its marker) within one
    /// backend. A non-empty directory, or a move across backends, is refused with EXDEV, which
    /// makes `mv` copy and delete entry by entry; a file open for writing is refused with EBUSY.
    pub async fn rename(
        &self,
        parent: u64,
        name: &str,
        new_parent: u64,
        new_name: &str,
        flags: RenameFlags,
    ) -> Result<()> {
        if flags.exchange {
            return Err(FsError::Invalid("RENAME_EXCHANGE"));
        }
        Self::check_new_name(new_name)?;
        let from = self.writable_dir(parent)?;
        let to = self.writable_dir(new_parent)?;
        if !Arc::ptr_eq(&from.backend, &to.backend) {
            return Err(FsError::CrossDevice("across backends"));
        }
        let (_, path, kind) = self.resolve(&from.node, from.backend.clone(), name).await?;
        let new_path = listing::child_path(&to.node.path, new_name);
        to.settings
            .check_key_len(&to.settings.dir_prefix_of(&new_path))?;
        if path == new_path {
            return Ok(());
        }
        if new_path.starts_with(&format!("{path}/")) {
            return Err(FsError::Invalid("a directory cannot move into itself"));
        }
        let existing = match self.resolve(&to.node, to.backend.clone(), new_name).await {
            Ok((_, _, kind)) => Some(kind),
            Err(FsError::NotFound) => None,
            Err(e) => return Err(e),
        };
        if existing.is_some() && flags.no_replace {
            return Err(FsError::Exists);
        }
        let settings = &from.settings;
        let mut copied = None;
        match &kind {
            ChildKind::File(_) => {
                if matches!(existing, Some(ChildKind::Dir { .. })) {
                    return Err(FsError::IsADirectory);
                }
                // The destination becomes a new object: an older one there unlinked while
                // open must not be deleted after it lands.
                let new_key = settings.key_of(&new_path);
                self.claim_name_waiting(settings.store.id(), &new_key).await;
                let owner = kind.owner();
                copied = Some(
                    self.rename_file(&from.backend, settings, &path, &new_path, owner)
                        .await?,
                );
            }
            ChildKind::Dir { .. } => {
                if existing
                    .as_ref()
                    .is_some_and(|k| !matches!(k, ChildKind::Dir { .. }))
                {
                    return Err(FsError::NotADirectory);
                }
                if existing.is_some()
                    && !self.dir_is_empty(&to.backend, settings, &new_path).await?
                {
                    return Err(FsError::NotEmpty);
                }
                if !self.dir_is_empty(&from.backend, settings, &path).await? {
                    return Err(FsError::CrossDevice("a non-empty directory"));
                }
                let store = &settings.store;
                let marker = |p: &str| settings.dir_prefix_of(p);
                // The moved directory keeps its mode and owner (`posix_metadata`).
                let metadata = match settings.posix_metadata {
                    true => (store.head_with_metadata(&marker(&path)).await)
                        .map_err(|e| Self::store_error(&from.backend, e))?
                        .map(|(_, metadata)| metadata)
                        .unwrap_or_default(),
                    false => Default::default(),
                };
                let empty = Arc::new(InMemory(Bytes::new()));
                (store
                    .put_with_metadata(&marker(&new_path), empty, &metadata)
                    .await)
                    .map_err(|e| Self::store_error(&from.backend, e))?;
                self.metadata.forget(store.id(), &marker(&new_path));
                self.metadata.forget(store.id(), &marker(&path));
                store
                    .delete(&marker(&path))
                    .await
                    .map_err(|e| Self::store_error(&from.backend, e))?;
                let backend = &from.backend.dir_name;
                let dir = Change::Upsert(EntryKind::Dir {
                    owner: kind.owner(),
                });
                settings.record(backend, &new_path, dir).await;
                settings.record(backend, &path, Change::Deleted).await;
            }
        }
        self.renamed(parent, name, new_parent, new_name, &new_path, settings);
        if let (ChildKind::File(meta), Some(copied)) = (&kind, copied) {
            self.remember_copy(settings, meta, copied);
        }
        Ok(())
    }

    /// What a rename's copy left at the new name is known like a commit's result (`stat`, a
    /// lookup or an open of the moved file ask the store nothing within the TTL): the copy's
    /// ETag, the size, and the time the file showed before. Recorded after [`Fs::renamed`]
    /// noted the name as written, which would otherwise make it stale at once. A
    /// `posix_metadata` backend's copy carries the source's metadata: known only when the
    /// source was this mount's own recent commit.
    fn remember_copy(&self, settings: &BackendSettings, moved: &FileMeta, copied: Copied) {
        let metadata = match (copied.source_commit, settings.posix_metadata) {
            (Some(commit), _) => commit.metadata,
            (None, false) => Metadata::new(),
            (None, true) => return,
        };
        let commit = RecentCommit {
            mtime: moved.mtime,
            version: copied.version,
            metadata,
            at: Instant::now(),
        };
        self.engines.writes.remember(settings.store.id(), commit);
    }

    /// A rename the kernel resent to this process after a takeover, whose source is gone: if
    /// its destination is there, the previous server carried it out (and died before it could
    /// answer), and this records what it would have recorded — the kernel's inode moves to the
    /// new name, the manifest's delta log learns the move — so that the kernel, told it
    /// succeeded, finds the file under its new name. `NotFound` if the destination is not
    /// there either.
    pub async fn rename_landed(
        &self,
        parent: u64,
        name: &str,
        new_parent: u64,
        new_name: &str,
    ) -> Result<()> {
        let from = self.writable_dir(parent)?;
        let to = self.writable_dir(new_parent)?;
        let (_, new_path, kind) = self.resolve(&to.node, to.backend.clone(), new_name).await?;
        let path = listing::child_path(&from.node.path, name);
        let settings = &from.settings;
        let backend = &from.backend.dir_name;
        let moved = match kind {
            ChildKind::Dir { owner } => EntryKind::Dir { owner },
            ChildKind::File(meta) => EntryKind::File {
                size: meta.size,
                etag: meta.etag,
                mtime: meta.mtime,
                owner: meta.owner,
            },
        };
        settings
            .record(backend, &new_path, Change::Upsert(moved))
            .await;
        settings.record(backend, &path, Change::Deleted).await;
        self.renamed(parent, name, new_parent, new_name, &new_path, settings);
        Ok(())
    }

    /// What a rename changes besides the store: the inode's name, and what listings and
    /// the kernel's caches may still show.
    fn renamed(
        &self,
        parent: u64,
        name: &str,
        new_parent: u64,
        new_name: &str,
        new_path: &str,
        settings: &BackendSettings,
    ) {
        {
            let mut inodes = lock(&self.inodes);
            inodes.rename(parent, name, new_parent, new_name, new_path.to_string());
            // A copied object may have a new ETag: make the next open ask the store. What the
            // node holds is newer than any listing asked for before now.
            if let Some(node) = inodes
                .child(new_parent, new_name)
                .and_then(|ino| inodes.get_mut(ino))
            {
                node.refreshed = Instant::now();
                if let ChildKind::File(meta) = &mut node.kind {
                    meta.etag.clear();
                }
            }
        }
        // Listings asked for before now show the name's old object, if it had one.
        self.note_written(settings.store.id(), &settings.key_of(new_path));
        self.note_removed(parent, name);
        self.invalidate_entry(new_parent, new_name);
    }

    async fn rename_file(
        &self,
        backend: &Backend,
        settings: &Arc<BackendSettings>,
        path: &str,
        new_path: &str,
        // What a manifest row states of the file's owner and mode, kept at its new name.
        owner: Option<Ownership>,
    ) -> Result<Copied> {
        let store = &settings.store;
        let (key, new_key) = (settings.key_of(path), settings.key_of(new_path));
        let writes = &self.engines.writes;
        if let Some(file) = writes.find(store.id(), &key) {
            let writing = || {
                lock(&self.files)
                    .values()
                    .any(|h| h.writable && h.version.key == key && h.store.id() == store.id())
            };
            // close(2) returns once the kernel has sent FLUSH; the RELEASE that ends the handle
            // follows on its own, so `cp a b && mv b c` can get here first. Give it a moment.
            for _ in 0..RELEASE_WAIT_ROUNDS {
                if !writing() {
                    break;
                }
                tokio::time::sleep(RELEASE_WAIT_ROUND).await;
            }
            if writing() {
                return Err(FsError::Busy("the file is open for writing"));
            }
            // What was written must be in the store before it can be copied server-side.
            writes.commit(&file).await?;
        }
        // The version the copy may take its parts from: one replaced midway fails the rename.
        // What this mount's own commit just left needs no HEAD (`rsync` renames every file it
        // has just written).
        let source_commit = self.fresh_commit(store.id(), &key);
        let source = match &source_commit {
            Some(commit) => commit.version.clone(),
            None => {
                let head = store
                    .head(&key)
                    .await
                    .map_err(|e| Self::store_error(backend, e))?
                    .ok_or(FsError::NotFound)?;
                ObjectVersion {
                    key: key.clone(),
                    etag: head.etag,
                    size: head.size,
                }
            }
        };
        // Whatever was being written at the destination is replaced: dropped, and any commit
        // of it finished, before the copy, so that it cannot land on top of the copy.
        writes.forget(store.id(), &new_key).await;
        self.metadata.forget(store.id(), &new_key);
        self.metadata.forget(store.id(), &key);
        let copied = writes
            .copy_object(store.as_ref(), &source, &new_key)
            .await
            .map_err(|e| Self::store_error(backend, e))?;
        let version = ObjectVersion {
            key: new_key.clone(),
            etag: copied.etag,
            size: source.size,
        };
        let moved = EntryKind::File {
            size: version.size,
            etag: version.etag.clone(),
            mtime: SystemTime::now(),
            owner,
        };
        settings
            .record(&backend.dir_name, new_path, Change::Upsert(moved))
            .await;
        writes.forget(store.id(), &key).await;
        if !self.keep_for_open_readers(settings, &key, path) {
            store
                .delete(&key)
                .await
                .map_err(|e| Self::store_error(backend, e))?;
            settings
                .record(&backend.dir_name, path, Change::Deleted)
                .await;
        }
        Ok(Copied {
            version,
            source_commit,
        })
    }
}

impl Fs {
    /// Whether a handle of this mount has `key` open (for reading: a writer makes the rename
    /// fail first). Then the old object is kept for it, as after an unlink, and recorded so:
    /// hidden from lookups and listings, deleted by its last release. Deleted at once, it
    /// would fail every read of bytes the handle has not cached.
    fn keep_for_open_readers(
        &self,
        settings: &Arc<BackendSettings>,
        key: &str,
        path: &str,
    ) -> bool {
        let store_id = settings.store.id();
        // Under the `unlinked` lock, as in `unlink`: `release` decides there whether its handle
        // was the last.
        let mut unlinked = lock(&self.unlinked);
        let reader = lock(&self.files)
            .values()
            .find(|h| h.version.key == key && h.store.id() == store_id)
            .map(|h| h.ino);
        if let Some(ino) = reader {
            unlinked.insert(
                (store_id.to_string(), key.to_string()),
                Unlinked {
                    ino,
                    settings: settings.clone(),
                    path: path.to_string(),
                    deleting: None,
                },
            );
        }
        reader.is_some()
    }
}

/// What a file rename's copy left at the new name.
struct Copied {
    version: ObjectVersion,
    /// The source was this mount's own recent commit ([`Fs::fresh_commit`]).
    source_commit: Option<RecentCommit>,
}
