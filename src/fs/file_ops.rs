//! Opening, reading and closing files: each `FileHandle` is pinned to the object version seen
//! at open (or to the file being written there), and the last close commits what was written
//! and deletes a file unlinked while open. The file counterpart of `dir_ops`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;

use super::inode::Node;
use super::kernel_state::Record;
use super::listing::FileMeta;
use super::passthrough::{HandleIo, OpenKind};
use super::unlinked::Doomed;
use super::{
    Backend, FileHandle, Fs, FsError, OpenIo, OpenMode, Opened, Result, SequentialDetector, lock,
    pending_kind,
};
use crate::cache::ObjectVersion;
use crate::warm::abi::{SharedCacheReport, WarmReport};
use crate::write::{DirtyFile, Target};

impl Fs {
    /// Opens a file. Returns the handle and how the kernel is to read it: passthrough, direct,
    /// or through its page cache, keeping the pages it cached at an earlier open when they are
    /// of the same object version and nobody is writing it (see `passthrough`).
    pub async fn open(&self, ino: u64, mode: OpenMode) -> Result<Opened> {
        let node = self.refreshed(ino).await?;
        let (backend, _) = openable(&node, mode)?;
        let written = if mode.write {
            // A writer cannot join a lent inode.
            if self.io_modes.lent(ino) {
                return Err(self.supersede(ino));
            }
            let target = backend.settings().target(&backend.dir_name, &node.path);
            let file = self.open_for_write(backend, target).await?;
            self.began_writing(&node, &file);
            Some(file)
        } else {
            None
        };
        self.open_handle(&node, mode, written)
    }

    /// `open` without waiting: a read-only open of a file whose metadata needs no store
    /// request (`refreshed_now`), answered on the calling thread. `None` when only `open` can
    /// answer: an open for writing (it asks the store for the object's version) or of a file
    /// whose metadata is older than the TTL.
    pub fn open_now(&self, ino: u64, mode: OpenMode) -> Option<Result<Opened>> {
        if mode.write {
            return None;
        }
        Some(
            self.refreshed_now(ino)?
                .and_then(|node| self.open_handle(&node, mode, None)),
        )
    }

    /// The handle of an open of `node`, refreshed already; `written` is the file a write open
    /// writes (a read-only open reads the one being written there, if any).
    fn open_handle(
        &self,
        node: &Node,
        mode: OpenMode,
        written: Option<Arc<DirtyFile>>,
    ) -> Result<Opened> {
        let ino = node.ino;
        let (backend, meta) = openable(node, mode)?;
        let settings = backend.settings();
        let key = settings.key_of(&node.path);
        let version = ObjectVersion {
            key: key.clone(),
            etag: meta.etag.clone(),
            size: meta.size,
        };
        let writes = &self.engines.writes;
        let dirty = written.or_else(|| writes.find(settings.store.id(), &key));
        let keep_cache = {
            let mut inodes = lock(&self.inodes);
            let node = inodes.get_mut(ino).ok_or(FsError::UnknownInode(ino))?;
            let same = dirty.is_none() && node.cached_etag.as_deref() == Some(meta.etag.as_str());
            node.cached_etag = dirty.is_none().then(|| meta.etag.clone());
            same
        };
        let how = match (mode.write || dirty.is_some(), mode.direct) {
            (true, _) => OpenKind::Write,
            (false, true) => OpenKind::Direct,
            (false, false) => OpenKind::Lendable,
        };
        let io = self.io_modes.open(ino, &version.etag, how, || {
            let cache = self.engines.cache.as_ref()?;
            cache.pin_object_file(settings.store.cache_scope(), &version)
        });
        let Some(io) = io else {
            if let Some(file) = &dirty
                && mode.write
            {
                writes.release(file);
            }
            return Err(self.supersede(ino));
        };
        let opened = match &io {
            HandleIo::Passthrough(backing) => OpenIo::Passthrough(Arc::clone(backing)),
            HandleIo::PageCache | HandleIo::Inherited => OpenIo::PageCache { keep_cache },
        };
        let handle = FileHandle {
            ino,
            store: settings.store.clone(),
            backend: backend.dir_name.clone(),
            version,
            stream: SequentialDetector::default(),
            dirty: Mutex::new(dirty),
            writable: mode.write,
            flush_on_close: settings.flush_on_close,
            wrote: AtomicBool::new(false),
            io,
        };
        Ok(Opened {
            fh: self.add_handle(handle),
            io: opened,
        })
    }

    /// A write handle on `target`: the file already being written there, or a new one over the
    /// object as the store has it now. (Never over cached metadata: a version committed since
    /// would be overwritten with stale bytes.)
    pub(super) async fn open_for_write(
        &self,
        backend: &Backend,
        target: Target,
    ) -> Result<Arc<DirtyFile>> {
        let writes = &self.engines.writes;
        if let Some(file) = writes.join(target.store.id(), &target.key) {
            return Ok(file);
        }
        // A `posix_metadata` object is rewritten with the mode and owner it has.
        let head = target
            .store
            .head_with_metadata(&target.key)
            .await
            .map_err(|e| Self::store_error(backend, e))?;
        let (head, metadata) = match head {
            Some((meta, metadata)) => (Some(meta), metadata),
            None => (None, Default::default()),
        };
        // Gone from the store (deleted behind the mount's back): writing creates it again.
        let base = head.map(|meta| ObjectVersion {
            key: meta.key,
            etag: meta.etag,
            size: meta.size,
        });
        let file = writes.open(target, base);
        if backend.settings().posix_metadata {
            file.init_metadata(metadata);
        }
        Ok(file)
    }

    /// From now on the write engine knows `node`'s content, not the store, the node's cached
    /// metadata or the parent's listing snapshot: after the commit lands, the next open asks
    /// the store for the new version.
    pub(super) fn began_writing(&self, node: &Node, file: &Arc<DirtyFile>) {
        let (store, key) = (file.target.store.id(), &file.target.key);
        self.note_written(store, key);
        // While the file is written its metadata is the write engine's (`known_posix`); once it
        // is let go, what its commit stored (a new mtime) is read from the store, never what was
        // cached of the version before.
        self.metadata.forget(store, key);
        if let Some(node) = lock(&self.inodes).get_mut(node.ino) {
            node.kind = pending_kind(file.meta(), node.kind.owner());
        }
        lock(&self.listings).remove(&node.parent);
        let name = node.path.rsplit('/').next().unwrap_or(&node.path);
        self.forget_kept(node.parent, name);
        // Descriptors opened for reading before the writing began read what it writes, as the
        // writer's own do: one file has one content, whichever descriptor reads it.
        for handle in lock(&self.files).values() {
            if handle.ino == node.ino && !handle.writable {
                *lock(&handle.dirty) = Some(file.clone());
            }
        }
    }

    /// Gives the name of `ino` a new inode at its next lookup, because `ino` is read from a
    /// lent cache file that an open could not join (see `passthrough`); returns the error
    /// that tells the kernel to look the name up again.
    pub(super) fn supersede(&self, ino: u64) -> FsError {
        let mut inodes = lock(&self.inodes);
        if let Some(node) = inodes.get(ino).cloned()
            && inodes.child(node.parent, &node.name) == Some(ino)
        {
            inodes.remove_name(node.parent, &node.name);
        }
        FsError::Superseded(ino)
    }

    pub(super) fn add_handle(&self, handle: FileHandle) -> u64 {
        let fh = self.next_handle.fetch_add(1, Ordering::Relaxed);
        self.journal(|| Record::File(handle.record(fh)));
        lock(&self.files).insert(fh, Arc::new(handle));
        fh
    }

    pub(super) fn handle(&self, fh: u64) -> Result<Arc<FileHandle>> {
        lock(&self.files)
            .get(&fh)
            .cloned()
            .ok_or(FsError::BadHandle(fh))
    }

    /// Bytes `offset..offset + size` of an open file (fewer at its end): from the cache, the
    /// store, or, for a file being written, its spill file and base.
    pub async fn read(&self, fh: u64, offset: u64, size: u32) -> Result<Bytes> {
        match self.read_now(fh, offset, size) {
            ReadNow::Answered(read) => read,
            ReadNow::Later(later) => self.read_later(fh, offset, size, later).await,
        }
    }

    /// [`Fs::read`] on the caller's thread (a FUSE worker's) when the bytes are at hand: a
    /// cache hit in memory (`ObjectReader::read_now`). Otherwise what [`Fs::read_later`] needs
    /// to finish the read on the runtime: the handle's stream has seen this read (it must see
    /// each read once, or a sequential reader would look random).
    pub fn read_now(&self, fh: u64, offset: u64, size: u32) -> ReadNow {
        let handle = match self.handle(fh) {
            Ok(handle) => handle,
            Err(e) => return ReadNow::Answered(Err(e)),
        };
        let sequential = handle.stream.observe(offset, u64::from(size));
        let later = ReadNow::Later(ReadLater { sequential });
        if handle.dirty().is_some() {
            // A file being written reads its spill file, and perhaps its base: on the runtime.
            return later;
        }
        let range = offset..offset.saturating_add(u64::from(size));
        let engines = &self.engines;
        let Some(read) =
            (engines.reader).read_now(&handle.store, &handle.version, range, sequential)
        else {
            return later;
        };
        ReadNow::Answered(match read {
            Ok(bytes) => {
                engines.metrics.read_served(&handle.backend, bytes.len());
                Ok(bytes)
            }
            Err(source) => Err(FsError::Store {
                backend: handle.backend.clone(),
                source,
            }),
        })
    }

    /// The rest of a read [`Fs::read_now`] could not answer: fetched, or read from a disk.
    pub async fn read_later(
        &self,
        fh: u64,
        offset: u64,
        size: u32,
        later: ReadLater,
    ) -> Result<Bytes> {
        let handle = self.handle(fh)?;
        let range = offset..offset.saturating_add(u64::from(size));
        let bytes = match &handle.dirty() {
            Some(file) => {
                self.engines
                    .writes
                    .read(file, range, later.sequential)
                    .await?
            }
            None => self
                .engines
                .reader
                .read(&handle.store, &handle.version, range, later.sequential)
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

    /// `msfs warm` of `len` bytes from `offset` of an open file: fetched into the line cache,
    /// nothing returned but what the cache held before and its size. A file being written is
    /// reported as cached whole: its bytes are local already and there is no object to fetch.
    pub async fn warm(&self, fh: u64, offset: u64, len: u64) -> Result<WarmReport> {
        let handle = self.handle(fh)?;
        let cache = self
            .engines
            .cache
            .as_ref()
            .ok_or(FsError::Unsupported("warm: this mount has no cache"))?;
        let end = offset.saturating_add(len).min(handle.version.size);
        let cached_before = match handle.dirty() {
            Some(_) => end.saturating_sub(offset),
            None => cache
                .warm(&handle.store, &handle.version, offset..end)
                .await
                .map_err(|source| FsError::Store {
                    backend: handle.backend.clone(),
                    source,
                })?,
        };
        Ok(WarmReport {
            size: handle.version.size,
            cached_before,
            capacity: cache.capacity_bytes(),
            line_size: cache.line_size(),
        })
    }

    /// The shared cache's counts for `msfs warm`'s summary; `None` without a shared cache.
    pub fn shared_cache_report(&self) -> Option<SharedCacheReport> {
        let counts = &self.engines.shared_cache.as_ref()?.metrics().counts;
        let get = |n: &std::sync::atomic::AtomicU64| n.load(std::sync::atomic::Ordering::Relaxed);
        Some(SharedCacheReport {
            hits: get(&counts.hits),
            misses: get(&counts.misses),
            fills: get(&counts.fills),
            fill_drops: get(&counts.fill_drops),
            pending: get(&counts.pending),
            verification_failures: get(&counts.verification_failures),
            fallbacks: get(&counts.fallbacks),
        })
    }

    /// The last close of a handle. A written file left dirty is committed in the background,
    /// at once (the idle delay a `flush` may have started is for descriptors left open; with
    /// `flush_on_close` the last FLUSH has committed it already); an object unlinked while
    /// open is deleted once no handle of this mount has it open.
    pub async fn release(&self, fh: u64) {
        if let Some(doomed) = self.release_now(fh) {
            self.delete_unlinked(doomed).await;
        }
    }

    /// `release` but for the deletion of an object unlinked while open, which it returns for
    /// `delete_unlinked` when this was the object's last handle. Needs a runtime context (a
    /// commit is started as a task), not a runtime thread: nothing here waits.
    pub fn release_now(&self, fh: u64) -> Option<Doomed> {
        let handle = lock(&self.files).remove(&fh)?;
        self.journal(|| Record::Closed { fh });
        self.io_modes.close(handle.ino, &handle.io);
        if let (true, Some(file)) = (handle.writable, handle.dirty()) {
            self.engines.writes.commit_in_background(&file);
            self.engines.writes.release(&file);
        }
        self.doomed_by_release(handle)
    }
}

/// What [`Fs::read_now`] gives: the read's answer, or what finishing it later needs.
#[derive(Debug)]
pub enum ReadNow {
    Answered(Result<Bytes>),
    Later(ReadLater),
}

/// A read [`Fs::read_now`] has seen but not answered, for [`Fs::read_later`].
#[derive(Debug, Clone, Copy)]
pub struct ReadLater {
    /// What the handle's stream made of the read.
    sequential: bool,
}

/// The backend and metadata of `node` if it is a file `mode` may open.
fn openable(node: &Node, mode: OpenMode) -> Result<(&Arc<Backend>, &FileMeta)> {
    let (Some(backend), Some(meta)) = (&node.backend, node.file()) else {
        return Err(FsError::IsADirectory);
    };
    if mode.write && backend.settings().readonly {
        return Err(FsError::ReadOnly {
            backend: backend.dir_name.clone(),
        });
    }
    Ok((backend, meta))
}
