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

/// The open index of a persistent cache: the writer thread and the channel to it.
pub(super) struct Persisted {
    /// `None` once closed.
    sender: Mutex<Option<Sender<Stored>>>,
    writer: Mutex<Option<JoinHandle<()>>>,
}

/// The persistent directory, once opened for this process.
pub(super) struct Opened {
    pub dir: PathBuf,
    pub persisted: Persisted,
    pub restored: Vec<RestoredLine>,
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
    let restored = if same_geometry(&db, &geometry).map_err(index_error)? {
        read_lines(&db, line_size, lines).map_err(index_error)?
    } else {
        // Another geometry, another format, or a new directory: no line is where the index
        // says. The line file is laid out anew by the storage (same name, new size).
        remove_if_present(&dir.join(LINES_FILE))?;
        reset(&db, &geometry).map_err(index_error)?;
        Vec::new()
    };
    let (sender, receiver) = mpsc::channel();
    let writer = std::thread::Builder::new()
        .name("msfs-cache-index".into())
        .spawn(move || write_batches(&db, &receiver))
        .map_err(|source| CacheError::CreateFile {
            path: index_path.clone(),
            source,
        })?;
    Ok(Some(Opened {
        dir,
        persisted: Persisted {
            sender: Mutex::new(Some(sender)),
            writer: Mutex::new(Some(writer)),
        },
        restored,
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

    /// Commits what is queued and stops the writer; later records are dropped.
    pub fn close(&self) {
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

/// Every indexed line that fits the geometry (an index is never trusted further than that).
fn read_lines(
    db: &Database,
    line_size: usize,
    lines: usize,
) -> Result<Vec<RestoredLine>, redb::Error> {
    let txn = db.begin_read()?;
    let table = match txn.open_table(LINES) {
        Ok(table) => table,
        Err(redb::TableError::TableDoesNotExist(_)) => return Ok(Vec::new()),
        Err(e) => return Err(e.into()),
    };
    let mut restored = Vec::new();
    for entry in table.iter()? {
        let (slot, record) = entry?;
        let slot = slot.value();
        let (store, key, etag, line, len, crc) = record.value();
        if slot as usize >= lines || len == 0 || len as usize > line_size {
            continue;
        }
        restored.push(RestoredLine {
            slot,
            store: store.to_string(),
            key: key.to_string(),
            etag: etag.to_string(),
            line,
            check: Check { len, crc },
        });
    }
    Ok(restored)
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
