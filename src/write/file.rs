//! `DirtyFile`: one object being written through the mount — what its bytes are now, which of
//! them exist only locally, and what of it the store already holds.
//!
//! The content model: byte `o` (below `size`) is the local spill file's byte if `o` lies in a
//! `dirty` extent, else the base object's byte if `o < base_len`, else zero. Truncating only
//! ever lowers `base_len`, so bytes cut off and grown back read as zeros, never as the old
//! object's.
//!
//! Bytes are written into the spill file *before* the write is recorded under the lock, and a
//! snapshot (a commit, or a part uploaded early) notes the generation *before* it reads. So a
//! snapshot that raced a write either saw its bytes or is known to be stale — never silently
//! both old and marked current.
//!
//! The same order keeps a killed process's writes: every change of this state that a commit
//! needs is appended to the file's spill log (`durable`) under the lock, after its bytes and
//! before the state records it, so the next process rebuilds exactly the writes that returned.

use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::ops::Range;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::SystemTime;

use crate::cache::ObjectVersion;
use crate::store::{
    CompletedPart, METADATA_CTIME, METADATA_MTIME, Metadata, ObjectStore, format_time, parse_time,
};

use super::durable::{self, Snapshot, SpillLog};
use super::extents::Extents;

/// Spill reads up to this size are tried in place on the calling (async) thread when the page
/// cache holds them (`DirtyFile::read_spill_off_runtime`): the size of a small file's commit.
const READ_IN_PLACE_MAX: u64 = 64 * 1024;

/// Where a file is committed: which store, under which key, for which backend (metrics, logs).
#[derive(Debug, Clone)]
pub struct Target {
    pub store: Arc<dyn ObjectStore>,
    pub backend: String,
    pub key: String,
    /// Told about every commit of this file that lands.
    pub observer: Option<Arc<dyn CommitObserver>>,
}

/// Hears about every commit that landed, before anyone waiting for it (fsync, a close with
/// `flush_on_close`) is told: a manifest-backed mount records the new version in its delta log
/// here, so the log never names a version the store does not hold.
#[async_trait::async_trait]
pub trait CommitObserver: Send + Sync + std::fmt::Debug {
    async fn committed(&self, key: &str, size: u64, etag: &str);
}

/// A multipart upload that parts are streamed into while the application still writes.
#[derive(Debug, Clone)]
pub(super) struct Upload {
    pub id: String,
    pub part_size: u64,
    /// The `metadata_version` the upload was created with: its object carries that metadata.
    pub metadata_version: u64,
    /// Part index → the part as uploaded, with the generation its bytes were read at and the
    /// range they covered.
    pub parts: BTreeMap<u64, UploadedPart>,
}

#[derive(Debug, Clone)]
pub(super) struct UploadedPart {
    pub part: CompletedPart,
    pub generation: u64,
    pub range: Range<u64>,
}

#[derive(Debug)]
pub(super) struct State {
    pub size: u64,
    pub mtime: SystemTime,
    /// The object the clean bytes come from (`None` for a file new to the store).
    pub base: Option<ObjectVersion>,
    pub base_len: u64,
    pub dirty: Extents,
    pub spill: Option<Arc<File>>,
    /// The spill's log (`durable`), beside it; `None` with no spill, or for a deleted file
    /// (nothing of it is ever committed, so nothing is kept for the next process).
    pub log: Option<SpillLog>,
    /// Writes putting bytes into `spill` that have not recorded them yet.
    pub writers: usize,
    /// Bumped by every change of content.
    pub generation: u64,
    /// The generation the store holds.
    pub committed: u64,
    /// A commit of this file has landed: `base` is what it left in the store.
    pub commit_landed: bool,
    /// The smallest size since the running commit took its snapshot.
    pub low_water: u64,
    /// The user metadata the next commit gives the object (`posix_metadata`: mode, owner,
    /// times); empty for backends without.
    pub metadata: Metadata,
    /// Bumped by every change of `metadata`: a commit that sent an older one fixes it up after
    /// landing (`commit/rebase.rs`: `settle_metadata`) rather than sending the bytes again.
    pub metadata_version: u64,
    /// A background commit failure fsync has not reported yet.
    pub failure: Option<String>,
    /// Unlinked or renamed away: nothing more is committed.
    pub deleted: bool,
    /// A commit failed in a way no retry can fix (`WriteError::is_terminal`): the bytes stay
    /// in the spill file and the next fsync or close tries again, but until a commit lands
    /// they are not counted against the dirty bound (nothing would ever free them).
    pub stranded: bool,
    /// Recovered from a killed process, its base not yet checked against the store: checked
    /// before its first commit, or by a read that finds the base gone (`durable::check_base`),
    /// against what the file held when it was recovered.
    pub check_base: Option<AsRecovered>,
    /// A commit's start is in the spill log without its landing (`Record::CommitStarting`):
    /// until it is, every write is logged, even one over bytes already dirty, so that a
    /// successor knows which of the bytes that commit sent the spill file still holds.
    pub commit_unrecorded: bool,
    /// Open handles on this file through any mount.
    pub handles: usize,
    /// A background commit task is scheduled or running.
    pub background: bool,
    /// A task waits for the file to be idle to commit it (`WriteEngine::commit_when_idle`).
    pub idle_wait: bool,
    /// Dirty bytes counted against the engine's budget.
    pub budgeted: u64,
    pub upload: Option<Upload>,
    /// While `upload` is set: part index → generation of its last change.
    pub part_changed: HashMap<u64, u64>,
    /// Parts being streamed ahead of the commit right now (never the same part twice at once).
    pub streaming: Vec<u64>,
    /// A multipart commit is sending parts: nothing is streamed meanwhile, so no early upload
    /// of a part can overtake the commit's own.
    pub committing: bool,
    /// Where the last write ended, and whether it started where the one before ended: only an
    /// appending writer has its finished parts streamed ahead of the commit.
    pub last_write_end: u64,
    pub appending: bool,
}

/// The part of the state that says where each byte comes from.
pub(super) struct View<'a> {
    pub dirty: &'a Extents,
    pub base: Option<&'a ObjectVersion>,
    pub base_len: u64,
}

/// The contents a file recovered from a killed process may have in the store without its log
/// saying so, kept until its base is checked against the store (`durable::check_base`):
/// whether the killed process's commit landed is a question about *those* contents, not about
/// what was written since.
#[derive(Debug, Clone)]
pub struct AsRecovered {
    /// The file's generation when it was recovered.
    pub generation: u64,
    /// The file as recovered (its last commit may have sent all of it).
    pub whole: Snapshot,
    /// What the last commit the log saw start sent, if the log does not say it landed.
    pub in_flight: Option<Snapshot>,
}

impl AsRecovered {
    fn rewrite(&mut self, range: Range<u64>) {
        self.whole.rewrite(range.clone());
        if let Some(sent) = &mut self.in_flight {
            sent.rewrite(range);
        }
    }

    fn truncate(&mut self, size: u64) {
        self.whole.truncate(size);
        if let Some(sent) = &mut self.in_flight {
            sent.truncate(size);
        }
    }
}

impl State {
    pub fn view(&self) -> View<'_> {
        View {
            dirty: &self.dirty,
            base: self.base.as_ref(),
            base_len: self.base_len,
        }
    }

    pub fn is_dirty(&self) -> bool {
        self.generation != self.committed
    }

    /// The file's metadata with its modification time as of now, when it keeps one: writes and
    /// `set_mtime` move `mtime`, not the map. What a commit sends, and what a change of other
    /// values starts from.
    pub fn metadata_now(&self) -> Metadata {
        let mut metadata = self.metadata.clone();
        if let Some(mtime) = metadata.get_mut(METADATA_MTIME) {
            *mtime = format_time(self.mtime);
        }
        // A change of content is a change of status too: ctime is never older than mtime.
        if let Some(ctime) = metadata.get_mut(METADATA_CTIME)
            && parse_time(ctime).is_some_and(|c| c < self.mtime)
        {
            *ctime = format_time(self.mtime);
        }
        metadata
    }

    /// Whether this file's new dirty bytes count against the engine's bound: only while a
    /// commit could free them.
    pub fn counts_against_budget(&self) -> bool {
        !self.deleted && !self.stranded
    }

    /// Records a change to `range` (already in the spill file): marks it dirty, grows the size,
    /// and returns how many bytes became dirty that were not before.
    pub fn record_write(&mut self, range: Range<u64>) -> u64 {
        self.appending = range.start == self.last_write_end;
        self.last_write_end = range.end;
        self.generation += 1;
        self.size = self.size.max(range.end);
        self.mtime = SystemTime::now();
        self.mark_parts_changed(range.start, range.end);
        if let Some(recovered) = &mut self.check_base {
            recovered.rewrite(range.clone());
        }
        self.dirty.insert(range)
    }

    /// Sets the size; returns how many dirty bytes were dropped.
    pub fn record_truncate(&mut self, size: u64) -> u64 {
        self.generation += 1;
        self.mtime = SystemTime::now();
        let (low, high) = (size.min(self.size), size.max(self.size));
        self.mark_parts_changed(low, high.max(low + 1));
        self.size = size;
        self.base_len = self.base_len.min(size);
        self.low_water = self.low_water.min(size);
        if let Some(recovered) = &mut self.check_base {
            recovered.truncate(size);
        }
        self.dirty.truncate(size)
    }

    fn mark_parts_changed(&mut self, start: u64, end: u64) {
        let Some(upload) = &self.upload else {
            return;
        };
        let size = upload.part_size;
        for index in start / size..=(end.saturating_sub(1)) / size {
            self.part_changed.insert(index, self.generation);
        }
    }

    /// Whether the uploaded part `index` still holds exactly bytes `range` of the file.
    pub fn part_current(&self, index: u64, range: &Range<u64>) -> bool {
        let Some(uploaded) = self.upload.as_ref().and_then(|u| u.parts.get(&index)) else {
            return false;
        };
        let changed = self.part_changed.get(&index).copied().unwrap_or(0);
        uploaded.range == *range && uploaded.generation >= changed
    }
}

/// One file being written. Shared by every handle open on it, in every mount of the process.
#[derive(Debug)]
pub struct DirtyFile {
    pub target: Target,
    pub(super) state: Mutex<State>,
    /// Held for a whole commit: one commit of a file at a time.
    pub(super) commit_lock: tokio::sync::Mutex<()>,
    /// Held while a multipart upload is being started, so only one is.
    pub(super) upload_lock: tokio::sync::Mutex<()>,
    /// Signalled when a streamed part finishes.
    pub(super) streamed: tokio::sync::Notify,
}

/// What `stat` shows for a file being written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirtyMeta {
    pub size: u64,
    pub mtime: SystemTime,
}

impl DirtyFile {
    pub(super) fn new(target: Target, base: Option<ObjectVersion>) -> DirtyFile {
        let (size, committed) = match &base {
            Some(base) => (base.size, 0),
            // A new file: its (empty) object still has to be created.
            None => (0, u64::MAX),
        };
        DirtyFile {
            target,
            state: Mutex::new(State {
                size,
                mtime: SystemTime::now(),
                base_len: size,
                base,
                dirty: Extents::new(),
                spill: None,
                log: None,
                writers: 0,
                generation: 0,
                committed,
                commit_landed: false,
                low_water: size,
                metadata: Metadata::new(),
                metadata_version: 0,
                failure: None,
                deleted: false,
                stranded: false,
                check_base: None,
                commit_unrecorded: false,
                handles: 0,
                background: false,
                idle_wait: false,
                budgeted: 0,
                upload: None,
                part_changed: HashMap::new(),
                streaming: Vec::new(),
                committing: false,
                last_write_end: 0,
                appending: false,
            }),
            commit_lock: tokio::sync::Mutex::new(()),
            upload_lock: tokio::sync::Mutex::new(()),
            streamed: tokio::sync::Notify::new(),
        }
    }

    pub(super) fn state(&self) -> MutexGuard<'_, State> {
        // Every critical section leaves the state consistent; a panic elsewhere does not make
        // it unusable.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub fn meta(&self) -> DirtyMeta {
        let state = self.state();
        DirtyMeta {
            size: state.size,
            mtime: state.mtime,
        }
    }

    pub fn is_dirty(&self) -> bool {
        self.state().is_dirty()
    }

    /// Sets the modification time `stat` shows until the next write. (An object's own time is
    /// set by the store at commit; this is what the application asked for meanwhile.) Recorded
    /// in the spill log, if the file has one: one small append, on the caller's thread.
    pub fn set_mtime(&self, mtime: SystemTime) {
        let mut state = self.state();
        durable::log_mtime(&mut state, mtime);
        state.mtime = mtime;
    }

    /// The metadata the file's object is committed with from now on. A commit already sending
    /// bytes with older metadata replaces it once it lands (one CopyObject, not a new upload).
    pub fn set_metadata(&self, metadata: Metadata) {
        let mut state = self.state();
        if state.metadata != metadata {
            state.metadata = metadata;
            state.metadata_version += 1;
            durable::log_metadata(&mut state);
        }
    }

    /// Sets the metadata of a file just opened, unless someone set it first (another handle
    /// opened it meanwhile and may already have changed it).
    pub fn init_metadata(&self, metadata: Metadata) {
        let mut state = self.state();
        if state.metadata_version == 0 {
            state.metadata = metadata;
            state.metadata_version = 1;
            durable::log_metadata(&mut state);
        }
    }

    /// The metadata the next commit sends (see `State::metadata_now`).
    pub fn metadata(&self) -> Metadata {
        self.state().metadata_now()
    }

    /// `read_spill` on a blocking-pool thread: a slow or stalled local disk must not hold up the
    /// async runtime's threads (and with them every other request of the process). A small
    /// range the page cache holds whole is read in place (`read_spill_cached`): the hop to the
    /// blocking pool and back costs more than such a read (a small file's commit reads all of
    /// it that way, just after it was written).
    pub(super) async fn read_spill_off_runtime(
        spill: Arc<File>,
        range: Range<u64>,
    ) -> Result<Vec<u8>, super::WriteError> {
        if range.end - range.start <= READ_IN_PLACE_MAX
            && let Some(bytes) = Self::read_spill_cached(&spill, range.clone())
        {
            return Ok(bytes);
        }
        tokio::task::spawn_blocking(move || Self::read_spill(&spill, range))
            .await
            .map_err(|_| super::WriteError::Internal("a spill read task panicked"))?
            .map_err(|source| super::WriteError::Spill { source })
    }

    /// `read_spill`, if the page cache holds all of `range`: `preadv2` with `RWF_NOWAIT`, which
    /// returns what is cached and never waits for the disk. `None` as soon as any of it would
    /// (or the kernel cannot tell): then read it on the blocking pool.
    fn read_spill_cached(spill: &File, range: Range<u64>) -> Option<Vec<u8>> {
        let mut buf = vec![0; (range.end - range.start) as usize];
        let mut done = 0;
        while done < buf.len() {
            let rest = &mut buf[done..];
            let iov = libc::iovec {
                iov_base: rest.as_mut_ptr().cast(),
                iov_len: rest.len(),
            };
            let offset = libc::off_t::try_from(range.start + done as u64).ok()?;
            // SAFETY: `iov` points at `rest`, which is valid for writes of its length and
            // outlives the call; the descriptor is `spill`'s, open for the whole call.
            let read =
                unsafe { libc::preadv2(spill.as_raw_fd(), &iov, 1, offset, libc::RWF_NOWAIT) };
            match read {
                0 => break, // past the spill file's end: the rest stays zero
                n if n > 0 => done += n as usize,
                _ => return None, // EAGAIN: not cached; EOPNOTSUPP, EINTR: ask the pool
            }
        }
        Some(buf)
    }

    /// Reads `range` of the spill file; short only if the spill file is (a hole reads as zeros).
    pub(super) fn read_spill(spill: &File, range: Range<u64>) -> std::io::Result<Vec<u8>> {
        let mut buf = vec![0; (range.end - range.start) as usize];
        let mut done = 0;
        while done < buf.len() {
            match spill.read_at(&mut buf[done..], range.start + done as u64) {
                Ok(0) => break, // past the spill file's end: the rest stays zero
                Ok(n) => done += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(buf)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_spill_read_in_place_or_on_the_pool_returns_the_bytes_and_zeros_past_the_end() {
        let spill = tempfile::tempfile().expect("spill");
        let bytes: Vec<u8> = (0..5000u32).map(|i| (i % 251) as u8).collect();
        spill.write_all_at(&bytes, 100).expect("write");
        let spill = Arc::new(spill);
        let mut expected = vec![0; 100];
        expected.extend_from_slice(&bytes);
        expected.resize(6000, 0);

        // Just written: in the page cache, read in place (where the kernel can tell).
        if let Some(read) = DirtyFile::read_spill_cached(&spill, 0..6000) {
            assert_eq!(read, expected, "in place: a hole and the end read as zeros");
        }
        for range in [0..6000, 50..150, 5090..5200, 7000..7100] {
            let read = DirtyFile::read_spill_off_runtime(Arc::clone(&spill), range.clone())
                .await
                .expect("read");
            let want: Vec<u8> = (range.start..range.end)
                .map(|i| expected.get(i as usize).copied().unwrap_or(0))
                .collect();
            assert_eq!(read, want, "{range:?}");
        }
        // Past the in-place bound: the blocking pool, same bytes.
        let large = READ_IN_PLACE_MAX + 1;
        let read = DirtyFile::read_spill_off_runtime(Arc::clone(&spill), 0..large)
            .await
            .expect("read");
        assert_eq!(read.len() as u64, large);
        assert_eq!(&read[..6000], &expected[..]);
        assert!(read[6000..].iter().all(|b| *b == 0));
    }
}
