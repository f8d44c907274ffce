//! Where line bytes live: the three `cache_storage` modes behind one small trait, and the
//! private directory they live in.
//!
//! The slot table decides *which* line is where and who may touch it; storage only moves bytes.
//! Its one contract with the engine is exclusivity: a placement is written only while its slot is
//! inbound, by the one fill that owns it, and each byte at most once; a byte is read only once it
//! was written — the reader pins the line clean, or (for storage with an address) the fill has
//! announced that it stored the line up to past that byte, and writes only after that mark.
//! Handing bytes from writer to readers goes through the table's mutex or the fill's progress
//! channel (itself behind a lock), which order the memory accesses.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::ptr::NonNull;
use std::sync::{Arc, Mutex, PoisonError};

use memmap2::{MmapMut, MmapOptions};

use super::error::CacheError;
use super::table::Placement;
use crate::config::CacheStorage;

/// Largest copy out of anonymous memory done on an async runtime thread. A FUSE read is at most
/// 1 MiB, and copying that much resident memory takes tens of microseconds (untouched lines map
/// the shared zero page), which is cheaper than a hop to the blocking pool. Whole-line fills
/// (up to `cache_line_size`) are bigger and go to the blocking pool.
const INLINE_RAM: usize = 1 << 20;
/// Same for the shared file mapping, lower because a page fault there may have to wait for the
/// kernel to allocate page cache or read back a page it wrote out under memory pressure.
const INLINE_MAPPED_FILE: usize = 128 << 10;

/// Moves line bytes in and out of one storage mode. See the module doc for the exclusivity
/// contract every implementation relies on.
pub(super) trait LineStorage: Send + Sync + 'static {
    /// Stores `data` at `offset` within the line at `at` (a fill may arrive in chunks).
    fn write_at(&self, at: &Placement, offset: usize, data: &[u8]) -> io::Result<()>;

    /// Copies `buf.len()` bytes of the line at `at`, from `offset` within the line.
    fn read(&self, at: &Placement, offset: usize, buf: &mut [u8]) -> io::Result<()>;

    /// The line at `at` is gone (evicted, invalidated or failed): drop its bytes if that frees
    /// anything. Called outside the table lock, possibly after the slot was reused; a release
    /// whose tenant no longer occupies the place must not touch the newer occupant.
    fn release(&self, at: &Placement);

    /// The slot of `at` is free and stays so until this returns (the caller holds the table
    /// lock): give its memory back to the system if it is this process's anonymous memory.
    fn give_back(&self, _at: &Placement) {}

    /// Largest read or write done on an async runtime thread; bigger ones go to the blocking pool.
    fn inline_limit(&self) -> usize;

    /// The address of `len` bytes at `offset` in the line at `at`, for storage that lives in
    /// this process's memory (`None` for storage only reachable through system calls). Lets a
    /// reader hand out a pinned line's bytes without copying them; the address stays valid
    /// while the storage lives, and the bytes stay those of the line while its slot is pinned.
    fn address(&self, at: &Placement, offset: usize, len: usize) -> Option<io::Result<*const u8>>;

    /// A new read-only descriptor of the file that holds cached object `object` byte for byte
    /// (line `i` at `i * line_size`), for storage that keeps one (`per-inode-file`): the
    /// kernel can then read the object from it itself (FUSE passthrough). `None` for storage
    /// whose lines lie elsewhere.
    fn object_file(&self, _object: u64) -> Option<io::Result<File>> {
        None
    }
}

/// Opens the storage for `mode` in the private directory `dir`: `lines` slots, and with
/// `Tiered` `ram_lines` more in RAM before them (slots `0..ram_lines`).
pub(super) fn open(
    mode: CacheStorage,
    dir: &Path,
    line_size: usize,
    lines: usize,
    ram_lines: usize,
) -> Result<Arc<dyn LineStorage>, CacheError> {
    Ok(match mode {
        CacheStorage::Tiered => Arc::new(TieredLines {
            ram: MappedLines::anonymous(line_size, ram_lines)?,
            disk: MappedLines::file(&dir.join("lines"), line_size, lines, FileOrigin::New)?,
            ram_lines,
        }),
        CacheStorage::Ram => Arc::new(MappedLines::anonymous(line_size, lines)?),
        CacheStorage::MappedFile => Arc::new(MappedLines::file(
            &dir.join("lines"),
            line_size,
            lines,
            FileOrigin::New,
        )?),
        CacheStorage::PerInodeFile => Arc::new(PerInodeFiles {
            dir: dir.to_path_buf(),
            line_size: line_size as u64,
            files: Mutex::new(HashMap::new()),
        }),
    })
}

/// Opens the line file of a persistent cache in `dir` (see `persist`), keeping what an earlier
/// process left in it: `mapped-file` storage over a file that outlives the process, or with
/// `ram_lines` (`tiered`) that file as the main tier below a RAM tier, which is not kept.
pub(super) fn open_kept(
    dir: &Path,
    line_size: usize,
    lines: usize,
    ram_lines: usize,
) -> Result<Arc<dyn LineStorage>, CacheError> {
    let kept = MappedLines::file(
        &dir.join(super::persist::LINES_FILE),
        line_size,
        lines,
        FileOrigin::Kept,
    )?;
    Ok(match ram_lines {
        0 => Arc::new(kept),
        _ => Arc::new(TieredLines {
            ram: MappedLines::anonymous(line_size, ram_lines)?,
            disk: kept,
            ram_lines,
        }),
    })
}

/// `cache_storage: tiered`: slots below `ram_lines` in anonymous memory, the rest in one
/// mapped file (slot `ram_lines + i` is its line `i`). Which line is in which tier, and moving
/// lines between them, is the slot table's and `tiers`'s business; this only routes bytes.
struct TieredLines {
    ram: MappedLines,
    disk: MappedLines,
    ram_lines: usize,
}

impl TieredLines {
    fn route(&self, at: &Placement) -> (&MappedLines, Placement) {
        match at.slot.checked_sub(self.ram_lines) {
            None => (&self.ram, *at),
            Some(slot) => (&self.disk, Placement { slot, ..*at }),
        }
    }
}

impl LineStorage for TieredLines {
    fn write_at(&self, at: &Placement, offset: usize, data: &[u8]) -> io::Result<()> {
        let (tier, at) = self.route(at);
        tier.write_at(&at, offset, data)
    }

    fn read(&self, at: &Placement, offset: usize, buf: &mut [u8]) -> io::Result<()> {
        let (tier, at) = self.route(at);
        tier.read(&at, offset, buf)
    }

    fn release(&self, at: &Placement) {
        let (tier, at) = self.route(at);
        tier.release(&at);
    }

    fn give_back(&self, at: &Placement) {
        let (tier, at) = self.route(at);
        tier.give_back(&at);
    }

    fn inline_limit(&self) -> usize {
        // The lower of the two: a read does not know its tier before it is routed.
        self.ram.inline_limit().min(self.disk.inline_limit())
    }

    fn address(&self, at: &Placement, offset: usize, len: usize) -> Option<io::Result<*const u8>> {
        let (tier, at) = self.route(at);
        tier.address(&at, offset, len)
    }
}

/// Whether a line file is made for this process or kept from an earlier one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum FileOrigin {
    /// Created anew in the cache's private directory.
    New,
    /// A persistent cache's file, reused as found (created if missing).
    Kept,
}

/// `lines` × `line_size` bytes in one mapping: anonymous memory (`ram`) or one shared file
/// (`mapped-file`). Slot `i` is bytes `i * line_size ..` of the mapping. Pages of lines never
/// filled are never touched, so they cost nothing.
struct MappedLines {
    base: NonNull<u8>,
    line_size: usize,
    lines: usize,
    inline: usize,
    /// The mapped file (`mapped-file`), written with `pwrite` rather than through the mapping:
    /// a store into a page of the mapping not yet in memory faults, and the fault reads the page
    /// in (zeros, for a hole) before the filesystem lets it be written — about a quarter of the
    /// cache's CPU time on a cold sequential read, measured. `pwrite` goes straight into the page
    /// cache, which the mapping shares, so readers see the bytes through `base` all the same.
    file: Option<File>,
    /// Keeps the mapping alive; all access goes through `base`, never through a reference into
    /// the map, because slots are written and read concurrently from many threads.
    _map: MmapMut,
}

// SAFETY: `MappedLines` only holds a pointer into a mapping it owns. Moving it or sharing it
// across threads is sound because every access to the bytes behind `base` goes through `span`,
// and the engine's exclusivity contract (module doc) guarantees that a byte range is never
// written while it is read or written by another thread.
unsafe impl Send for MappedLines {}
// SAFETY: as above.
unsafe impl Sync for MappedLines {}

impl MappedLines {
    fn anonymous(line_size: usize, lines: usize) -> Result<MappedLines, CacheError> {
        let len = total_len(line_size, lines)?;
        // No swap reservation: lines are filled lazily, and a large cache must not fail to start
        // just because it could not all be resident at once.
        let map = MmapOptions::new()
            .len(len)
            .no_reserve_swap()
            .map_anon()
            .map_err(|source| CacheError::Map {
                what: "anonymous memory".into(),
                bytes: len,
                source,
            })?;
        Ok(MappedLines::over(map, None, line_size, lines, INLINE_RAM))
    }

    fn file(
        path: &Path,
        line_size: usize,
        lines: usize,
        origin: FileOrigin,
    ) -> Result<MappedLines, CacheError> {
        let len = total_len(line_size, lines)?;
        let file_error = |source| CacheError::CreateFile {
            path: path.to_path_buf(),
            source,
        };
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(origin == FileOrigin::New)
            .create(origin == FileOrigin::Kept)
            .truncate(false)
            .open(path)
            .map_err(file_error)?;
        // Sparse: blocks are allocated only as lines are written. A kept file already has this
        // length (its geometry is checked against the index before it is opened).
        file.set_len(len as u64).map_err(file_error)?;
        // SAFETY: the file lives in a 0700 directory of msfs's own: created just now
        // (create_new) in the cache's private directory, or a persistent cache's file, opened
        // only by the process that holds the lock on its index (`persist`). Nothing else opens,
        // writes or truncates it, so the mapping cannot change under us except through
        // `MappedLines` itself.
        let map = unsafe { MmapOptions::new().len(len).map_mut(&file) }.map_err(|source| {
            CacheError::Map {
                what: path.display().to_string(),
                bytes: len,
                source,
            }
        })?;
        Ok(MappedLines::over(
            map,
            Some(file),
            line_size,
            lines,
            INLINE_MAPPED_FILE,
        ))
    }

    fn over(
        mut map: MmapMut,
        file: Option<File>,
        line_size: usize,
        lines: usize,
        inline: usize,
    ) -> MappedLines {
        let base = NonNull::new(map.as_mut_ptr()).unwrap_or(NonNull::dangling());
        MappedLines {
            base,
            line_size,
            lines,
            inline,
            file,
            _map: map,
        }
    }

    /// Pointer to `len` bytes at `offset` in the slot of `at`, after checking that they lie
    /// inside that slot.
    fn span(&self, at: &Placement, offset: usize, len: usize) -> io::Result<*mut u8> {
        let inside = at.slot < self.lines
            && offset
                .checked_add(len)
                .is_some_and(|end| end <= self.line_size);
        if !inside {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "{len} bytes at {offset} of slot {} are outside the cache",
                    at.slot
                ),
            ));
        }
        // SAFETY: `at.slot * line_size + offset + len <= lines * line_size`, the mapping's
        // length (checked in `total_len`), so the result stays inside the mapping.
        Ok(unsafe { self.base.as_ptr().add(at.slot * self.line_size + offset) })
    }
}

impl LineStorage for MappedLines {
    fn write_at(&self, at: &Placement, offset: usize, data: &[u8]) -> io::Result<()> {
        let dst = self.span(at, offset, data.len())?;
        if let Some(file) = &self.file {
            // The same bytes `span` checked, written through the file (see `file`).
            let position = at.slot * self.line_size + offset;
            return file.write_all_at(data, position as u64);
        }
        // SAFETY: `span` checked the range is inside the mapping. The slot is inbound and owned
        // by this fill alone, which writes each byte once; readers only read bytes the fill has
        // already announced as stored, never these (module doc), so nothing else accesses these
        // bytes now. `data` is a separate allocation, so the ranges do not overlap.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), dst, data.len()) };
        Ok(())
    }

    fn read(&self, at: &Placement, offset: usize, buf: &mut [u8]) -> io::Result<()> {
        let src = self.span(at, offset, buf.len())?;
        // SAFETY: `span` checked the range is inside the mapping. The caller pins the slot clean,
        // so no fill writes it until the pin is dropped; concurrent readers only read. `buf` is
        // the caller's own buffer, so the ranges do not overlap.
        unsafe { std::ptr::copy_nonoverlapping(src, buf.as_mut_ptr(), buf.len()) };
        Ok(())
    }

    fn release(&self, _at: &Placement) {
        // The slot's memory is simply reused by the next line; capacity is already bounded.
    }

    fn give_back(&self, at: &Placement) {
        if self.file.is_some() || at.slot >= self.lines {
            return;
        }
        // Whole pages inside the slot only: a neighbour's bytes must not be touched.
        const PAGE: usize = 4096;
        let start = (at.slot * self.line_size).next_multiple_of(PAGE);
        let end = ((at.slot + 1) * self.line_size) / PAGE * PAGE;
        if start >= end {
            return;
        }
        // SAFETY: `start..end` lies inside the slot, inside the mapping (the mapping starts on a
        // page, so the address is page-aligned); the slot is free and the caller holds the table
        // lock, so no reader or fill touches these bytes until a new line is installed there,
        // and a private anonymous mapping reads back zeros after MADV_DONTNEED.
        unsafe {
            libc::madvise(
                self.base.as_ptr().add(start).cast(),
                end - start,
                libc::MADV_DONTNEED,
            );
        }
    }

    fn inline_limit(&self) -> usize {
        self.inline
    }

    fn address(&self, at: &Placement, offset: usize, len: usize) -> Option<io::Result<*const u8>> {
        Some(self.span(at, offset, len).map(|ptr| ptr.cast_const()))
    }
}

fn total_len(line_size: usize, lines: usize) -> Result<usize, CacheError> {
    line_size
        .checked_mul(lines)
        .filter(|len| *len > 0 && *len <= isize::MAX as usize)
        .ok_or(CacheError::Geometry {
            line_size: line_size as u64,
            lines: lines as u64,
            reason: "the total size does not fit in this machine's address space",
        })
}

/// `per-inode-file`: one sparse file per cached object version, line `i` at `i * line_size`,
/// read with `pread`. An evicted line is punched out of its file; a file left holding no line is
/// closed and removed.
struct PerInodeFiles {
    dir: PathBuf,
    line_size: u64,
    /// Object number → its file and the tenant occupying each of its lines. Hole punches and
    /// unlinks happen under this lock, so a stale release can never punch out a newer tenant's
    /// write: the newer tenant registers here before it writes.
    files: Mutex<HashMap<u64, ObjectFile>>,
}

struct ObjectFile {
    file: Arc<File>,
    tenants: HashMap<u64, u64>,
}

impl PerInodeFiles {
    fn path(&self, object: u64) -> PathBuf {
        self.dir.join(format!("object-{object}"))
    }

    fn offset(&self, at: &Placement, within: usize) -> io::Result<u64> {
        at.line
            .checked_mul(self.line_size)
            .and_then(|o| o.checked_add(within as u64))
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "line offset overflows"))
    }

    fn files(&self) -> std::sync::MutexGuard<'_, HashMap<u64, ObjectFile>> {
        self.files.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl LineStorage for PerInodeFiles {
    fn write_at(&self, at: &Placement, offset: usize, data: &[u8]) -> io::Result<()> {
        let offset = self.offset(at, offset)?;
        let file = {
            let mut files = self.files();
            let entry = match files.get_mut(&at.object) {
                Some(entry) => entry,
                None => {
                    let file = OpenOptions::new()
                        .read(true)
                        .write(true)
                        .create(true)
                        .truncate(false)
                        .open(self.path(at.object))?;
                    files.entry(at.object).or_insert(ObjectFile {
                        file: Arc::new(file),
                        tenants: HashMap::new(),
                    })
                }
            };
            entry.tenants.insert(at.line, at.tenant);
            Arc::clone(&entry.file)
        };
        file.write_all_at(data, offset)
    }

    fn read(&self, at: &Placement, offset: usize, buf: &mut [u8]) -> io::Result<()> {
        let offset = self.offset(at, offset)?;
        let file = self
            .files()
            .get(&at.object)
            .map(|entry| Arc::clone(&entry.file))
            .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "cache file is gone"))?;
        file.read_exact_at(buf, offset)
    }

    fn release(&self, at: &Placement) {
        let mut files = self.files();
        let Some(entry) = files.get_mut(&at.object) else {
            return;
        };
        if entry.tenants.get(&at.line) != Some(&at.tenant) {
            return; // never written, or already replaced by a newer fill of the same line
        }
        entry.tenants.remove(&at.line);
        if entry.tenants.is_empty() {
            files.remove(&at.object);
            match std::fs::remove_file(self.path(at.object)) {
                // The whole directory went with the cache while this line drained.
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => {
                    tracing::warn!(object = at.object, error = %e, "cannot remove a cache file")
                }
                Ok(()) => {}
            }
            return;
        }
        let Ok(offset) = self.offset(at, 0) else {
            return;
        };
        punch_hole(&entry.file, offset, self.line_size);
    }

    fn inline_limit(&self) -> usize {
        // Every pread/pwrite can wait on the disk: always in the blocking pool.
        0
    }

    fn address(&self, _: &Placement, _: usize, _: usize) -> Option<io::Result<*const u8>> {
        None
    }

    fn object_file(&self, object: u64) -> Option<io::Result<File>> {
        // Opened under the lock, so the file cannot be removed (its last line released) between
        // the check and the open.
        let files = self.files();
        files.get(&object)?;
        Some(File::open(self.path(object)))
    }
}

/// Frees the blocks of `len` bytes at `offset`, keeping the file's size. Best effort: where the
/// filesystem cannot punch holes, the bytes stay allocated until the file is removed.
fn punch_hole(file: &File, offset: u64, len: u64) {
    let (Ok(offset), Ok(len)) = (libc::off_t::try_from(offset), libc::off_t::try_from(len)) else {
        return;
    };
    // SAFETY: fallocate only reads its integer arguments; the descriptor is open for writing
    // and stays open for the call because `file` is borrowed.
    let rc = unsafe {
        libc::fallocate(
            file.as_raw_fd(),
            libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
            offset,
            len,
        )
    };
    if rc != 0 {
        let e = io::Error::last_os_error();
        tracing::debug!(error = %e, "cannot punch an evicted line out of its cache file");
    }
}
