//! Lines that outlive the process (`cache_persistent: true`).
//!
//! The cache's one line file (`mapped-file` storage, or the disk tier of `tiered`) then lives in
//! a fixed directory, `<cache_dir_path>/msfs-line-cache/`, beside a small redb index that says
//! which line each slot holds: slot → (cache scope, key, ETag, line, length, CRC-32 of its
//! bytes). A `tiered` cache's RAM tier is not kept: its lines are indexed once they move down to
//! the file (the line's length and checksum travel with it), and the file's geometry is the
//! same either way, so a cache switched between the two modes keeps its lines. A restarted
//! process reopens both and puts every indexed line back in its slot, clean but *unverified*: the
//! first read of such a line checksums it before serving it ([`Check`]), and a line whose bytes
//! do not match is dropped and fetched again. The index is keyed by ETag and scope, so a line is
//! served only for the object version, and to the signers, it was fetched for — exactly as in
//! the process that fetched it.
//!
//! The lines go back in the background ([`Persisted::start_restore`]), a batch per table lock,
//! so that a start — a CSI plugin taking over live mounts above all — never waits for an index
//! of a million lines (about 1.3 s here). Meanwhile the cache serves what is back, and a read
//! that would fetch waits for the rest instead (`LineCache::read`), so a restart still costs no
//! GET for a kept line. A slot this process has used is never restored into: its index record
//! may already be the new line's, and the restore reads the index as it was at start.
//!
//! Nothing on the read path waits for the index: a fill that completes sends its record to a
//! writer thread, which commits them in batches (one fsync per batch). What the index may lag
//! by is harmless, because the checksum, not the order of writes, decides what is served:
//! - a slot refilled but not yet re-indexed still names its old line, whose checksum the new
//!   bytes fail (or, were they the same bytes, pass rightly);
//! - a torn line (the process killed mid-fill) fails its checksum the same way;
//! - an invalidated line stays indexed under its old ETag, which no open asks for again unless
//!   the object comes back with those very bytes.
//!
//! One process at a time owns the directory: redb locks its file, and a second process over the
//! same `cache_dir_path` gets an ordinary private cache (and says so in its log).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use redb::{Database, DatabaseError, ReadableDatabase, ReadableTable, TableDefinition};

use super::error::CacheError;
use super::table::ObjectName;

/// The directory under `cache_dir_path`. Not `msfs-cache-…`: those are private directories,
/// and the ones of dead processes are removed (`private_dir::abandoned`).
pub(super) const DIR_NAME: &str = "msfs-line-cache";
const INDEX_FILE: &str = "index.redb";
/// The line file, slot `i` at `i * line_size` (see `storage::MappedLines`).
pub(super) const LINES_FILE: &str = "lines";

/// Slot → (scope, key, ETag, line, length, CRC-32).
const LINES: TableDefinition<u32, (&str, &str, &str, u64, u32, u32)> =
    TableDefinition::new("lines");
/// The geometry the line file was laid out for; a change discards every line.
const META: TableDefinition<&str, u64> = TableDefinition::new("meta");
const META_FORMAT: &str = "format";
const META_LINE_SIZE: &str = "line_size";
const META_LINES: &str = "lines";
const FORMAT: u64 = 1;

/// Records gathered into one commit: at most this many, or what arrived within the window.
const BATCH_RECORDS: usize = 4096;
const BATCH_WINDOW: Duration = Duration::from_millis(100);

/// Lines put back per table lock by the restore: about 3 ms of the lock here, so readers
/// meanwhile wait no longer than for an ordinary busy moment.
const RESTORE_BATCH: usize = 4096;

/// What the first read of a restored line checks before serving it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Check {
    pub len: u32,
    pub crc: u32,
}

/// A line found in the index at start.
#[derive(Debug, Clone)]
pub(super) struct RestoredLine {
    pub slot: u32,
    pub store: String,
    pub key: String,
    pub etag: String,
    pub line: u64,
    pub check: Check,
}

/// A line just stored in the kept file (fetched there, or moved down from the RAM tier of
/// `tiered` storage), to be indexed.
pub(super) struct Stored {
    /// Its slot in the line file.
    pub slot: u32,
    pub name: Arc<ObjectName>,
    pub line: u64,
    pub check: Check,
}

/// The open index of a persistent cache: the writer thread and the channel to it, and the
/// thread restoring the lines an earlier process kept.
pub(super) struct Persisted {
    /// `None` once closed.
    sender: Mutex<Option<Sender<Stored>>>,
    writer: Mutex<Option<JoinHandle<()>>>,
    restorer: Mutex<Option<JoinHandle<()>>>,
    /// Tells the restorer to stop at its next batch (the cache is closing).
    stop_restoring: Arc<AtomicBool>,
}

/// The persistent directory, once opened for this process.
pub(super) struct Opened {
    pub dir: PathBuf,
    pub persisted: Persisted,
    /// The lines to restore, if the index holds any for this geometry.
    pub to_restore: Option<ToRestore>,
}

/// The index's lines as an earlier process left them, for [`Persisted::start_restore`].
pub(super) struct ToRestore {
    db: Arc<Database>,
    path: PathBuf,
    line_size: usize,
    lines: usize,
}

/// Opens (creating it if needed) the persistent cache under `parent` for `lines` lines of
/// `line_size` bytes. `Ok(None)` when another process owns it.
pub(super) fn open(
    parent: &Path,
    line_size: usize,
    lines: usize,
) -> Result<Option<Opened>, CacheError> {
    let dir = parent.join(DIR_NAME);
    // Not recursive: `cache_dir_path` itself must exist, as for a private cache (a typo must
    // not create a directory tree somewhere unexpected).
    match std::os::unix::fs::DirBuilderExt::mode(&mut std::fs::DirBuilder::new(), 0o700)
        .create(&dir)
    {
        Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => {
            return Err(CacheError::CreateDir {
                path: dir.clone(),
                source: e,
            });
        }
        _ => {}
    }
    let index_path = dir.join(INDEX_FILE);
    let index_error = |source: redb::Error| CacheError::Index {
        path: index_path.clone(),
        source: Box::new(source),
    };
    let db = match Database::create(&index_path) {
        Ok(db) => db,
        Err(DatabaseError::DatabaseAlreadyOpen) => {
            tracing::warn!(
                dir = %dir.display(),
                "another msfs process keeps its cache lines here; this one's cache starts \
                 empty and is not kept (give each process its own cache_dir_path)"
            );
            return Ok(None);
        }
        Err(e) => {
            // A damaged index costs the kept lines, never the mount: start the cache anew.
            tracing::warn!(path = %index_path.display(), error = %e,
                "cannot read the persistent cache's index; starting the cache empty");
            for file in [INDEX_FILE, LINES_FILE] {
                remove_if_present(&dir.join(file))?;
            }
            Database::create(&index_path).map_err(|e| index_error(e.into()))?
        }
    };
    let geometry = [
        (META_FORMAT, FORMAT),
        (META_LINE_SIZE, line_size as u64),
        (META_LINES, lines as u64),
    ];
    let kept = same_geometry(&db, &geometry).map_err(index_error)?;
    if !kept {
        // Another geometry, another format, or a new directory: no line is where the index
        // says. The line file is laid out anew by the storage (same name, new size).
        remove_if_present(&dir.join(LINES_FILE))?;
        reset(&db, &geometry).map_err(index_error)?;
    }
    let db = Arc::new(db);
    let (sender, receiver) = mpsc::channel();
    let writer_db = Arc::clone(&db);
    let writer = std::thread::Builder::new()
        .name("msfs-cache-index".into())
        .spawn(move || write_batches(&writer_db, &receiver))
        .map_err(|source| CacheError::CreateFile {
            path: index_path.clone(),
            source,
        })?;
    Ok(Some(Opened {
        dir,
        persisted: Persisted {
            sender: Mutex::new(Some(sender)),
            writer: Mutex::new(Some(writer)),
            restorer: Mutex::new(None),
            stop_restoring: Arc::new(AtomicBool::new(false)),
        },
        to_restore: kept.then_some(ToRestore {
            db,
            path: index_path,
            line_size,
            lines,
        }),
    }))
}

fn remove_if_present(path: &Path) -> Result<(), CacheError> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(CacheError::CreateFile {
            path: path.to_path_buf(),
            source: e,
        }),
        _ => Ok(()),
    }
}

impl Persisted {
    /// Queues a filled line for the index; never blocks.
    pub fn record(&self, stored: Stored) {
        if let Some(sender) = self
            .sender
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .as_ref()
        {
            // A send fails only once the writer is gone (its commit failed for good): the line
            // is then simply not kept.
            let _ = sender.send(stored);
        }
    }

    /// Restores `kept`'s lines on a thread of its own: each batch goes to `deliver` (which
    /// returns false to stop), and `finished` gets how long it took, however it ended. If the
    /// thread cannot start, nothing is restored and both are dropped unrun: a caller waiting
    /// for the end must take a drop for one (as a `watch::Sender` does).
    pub fn start_restore(
        &self,
        kept: ToRestore,
        mut deliver: impl FnMut(Vec<RestoredLine>) -> bool + Send + 'static,
        finished: impl FnOnce(Duration) + Send + 'static,
    ) {
        let stop = Arc::clone(&self.stop_restoring);
        let spawned = std::thread::Builder::new()
            .name("msfs-cache-restore".into())
            .spawn(move || {
                let started = Instant::now();
                let keep_going = |batch| !stop.load(Ordering::Relaxed) && deliver(batch);
                if let Err(e) = read_batches(&kept, keep_going) {
                    // The lines not yet back are fetched again when read: a cost, not a fault.
                    tracing::warn!(path = %kept.path.display(), error = %e,
                        "cannot read the persistent cache's index; its remaining lines are \
                         fetched again when read");
                }
                finished(started.elapsed());
            });
        match spawned {
            Ok(handle) => {
                *self.restorer.lock().unwrap_or_else(PoisonError::into_inner) = Some(handle);
            }
            Err(e) => tracing::warn!(error = %e,
                "cannot start restoring the persistent cache's lines; the cache starts empty"),
        }
    }

    /// Commits what is queued and stops the writer and the restorer; later records are dropped.
    pub fn close(&self) {
        self.stop_restoring.store(true, Ordering::Relaxed);
        let restorer = self
            .restorer
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        // Never joined from its own thread (were the cache's last user dropped there).
        if let Some(restorer) = restorer
            && restorer.thread().id() != std::thread::current().id()
        {
            let _ = restorer.join();
        }
        drop(
            self.sender
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .take(),
        );
        let writer = self
            .writer
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(writer) = writer {
            let _ = writer.join();
        }
    }
}

impl Drop for Persisted {
    fn drop(&mut self) {
        self.close();
    }
}

fn same_geometry(db: &Database, geometry: &[(&str, u64)]) -> Result<bool, redb::Error> {
    let txn = db.begin_read()?;
    let meta = match txn.open_table(META) {
        Ok(meta) => meta,
        Err(redb::TableError::TableDoesNotExist(_)) => return Ok(false),
        Err(e) => return Err(e.into()),
    };
    for (name, value) in geometry {
        if meta.get(*name)?.map(|v| v.value()) != Some(*value) {
            return Ok(false);
        }
    }
    Ok(true)
}

fn reset(db: &Database, geometry: &[(&str, u64)]) -> Result<(), redb::Error> {
    let txn = db.begin_write()?;
    txn.delete_table(LINES)?;
    {
        let mut meta = txn.open_table(META)?;
        for (name, value) in geometry {
            meta.insert(*name, *value)?;
        }
        txn.open_table(LINES)?;
    }
    txn.commit()?;
    Ok(())
}

/// Hands every indexed line that fits the geometry (an index is never trusted further than
/// that) to `deliver`, [`RESTORE_BATCH`] at a time, until it returns false. One read
/// transaction: the index as it was when the restore began, whatever the writer adds meanwhile.
fn read_batches(
    kept: &ToRestore,
    mut deliver: impl FnMut(Vec<RestoredLine>) -> bool,
) -> Result<(), redb::Error> {
    let txn = kept.db.begin_read()?;
    let table = match txn.open_table(LINES) {
        Ok(table) => table,
        Err(redb::TableError::TableDoesNotExist(_)) => return Ok(()),
        Err(e) => return Err(e.into()),
    };
    let mut batch = Vec::with_capacity(RESTORE_BATCH);
    for entry in table.iter()? {
        let (slot, record) = entry?;
        let slot = slot.value();
        let (store, key, etag, line, len, crc) = record.value();
        if slot as usize >= kept.lines || len == 0 || len as usize > kept.line_size {
            continue;
        }
        batch.push(RestoredLine {
            slot,
            store: store.to_string(),
            key: key.to_string(),
            etag: etag.to_string(),
            line,
            check: Check { len, crc },
        });
        if batch.len() == RESTORE_BATCH && !deliver(std::mem::take(&mut batch)) {
            return Ok(());
        }
    }
    if !batch.is_empty() {
        deliver(batch);
    }
    Ok(())
}

/// The writer thread: one commit per batch until the channel closes, then the last one.
fn write_batches(db: &Database, receiver: &Receiver<Stored>) {
    while let Ok(first) = receiver.recv() {
        let mut batch = vec![first];
        let deadline = Instant::now() + BATCH_WINDOW;
        while batch.len() < BATCH_RECORDS {
            let left = deadline.saturating_duration_since(Instant::now());
            match receiver.recv_timeout(left) {
                Ok(stored) => batch.push(stored),
                Err(RecvTimeoutError::Timeout | RecvTimeoutError::Disconnected) => break,
            }
        }
        if let Err(e) = commit(db, &batch) {
            // The lines stay cached in this process; they are only not found by the next.
            tracing::warn!(error = %e, lines = batch.len(),
                "cannot index cache lines; they will not outlive this process");
        }
    }
}

fn commit(db: &Database, batch: &[Stored]) -> Result<(), redb::Error> {
    let txn = db.begin_write()?;
    {
        let mut table = txn.open_table(LINES)?;
        for stored in batch {
            let name = &stored.name;
            table.insert(
                stored.slot,
                (
                    name.store.as_str(),
                    name.key.as_str(),
                    name.etag.as_str(),
                    stored.line,
                    stored.check.len,
                    stored.check.crc,
                ),
            )?;
        }
    }
    txn.commit()?;
    Ok(())
}
