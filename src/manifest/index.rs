//! The persistent index a manifest's TSV files are ingested into, so that a lookup or a page of
//! a listing is a couple of B-tree reads however large the namespace.
//!
//! Stored in redb: one file, pure Rust, copy-on-write B+trees with MVCC, so readers never wait
//! for the ingest and a crash mid-ingest leaves the last committed state. An LSM store (fjall)
//! would ingest faster but brings compaction threads and more memory; a sorted file format of
//! our own would need an external sort to stay bounded in memory. Ingest order here is already
//! nearly sorted (directory by directory), which is redb's fast path.
//!
//! Layout: every directory gets a numeric id (`dir_ids`: path → id, `dir_paths`: id → path), and
//! a directory's entries are stored in runs (`block`): `blocks` maps `(parent id, first name)`
//! to a run of entries in name order, so one directory is one contiguous key range and a lookup
//! is one B-tree read and a scan of a few kilobytes. An ingest of rows in name order (a sorted
//! manifest's) fills a run and inserts it whole; rows out of order are held and merged into the
//! runs in bulk (`Packer`). Ids are handed out breadth-first as `d` rows are met, which makes
//! `dir_paths` the ingest's work queue: memory stays bounded whatever the namespace's size.
//! `meta` records which manifest (by `created_at`) the index was built from and whether the
//! build finished; anything else is rebuilt.
//!
//! A finished index is only read, and is opened read-only: redb lets any number of processes
//! share it so, which an upgrade's two processes (the one handing over has it open until it
//! exits) and two mounts of one manifest need.

use std::collections::{BTreeMap, VecDeque};
use std::ops::Bound;
use std::path::{Path, PathBuf};

use redb::{
    Database, DatabaseError, Durability, ReadOnlyDatabase, ReadableDatabase, ReadableTable,
    TableDefinition,
};

use super::block::{self, Corrupt};
use super::codec::{self, decode, encode_into};
use super::format::{Entry, EntryKind, FormatError, ManifestInfo};
use super::rows_ahead::RowsAhead;

const META: TableDefinition<&str, &str> = TableDefinition::new("meta");
const DIR_IDS: TableDefinition<&str, u64> = TableDefinition::new("dir_ids");
const DIR_PATHS: TableDefinition<u64, &str> = TableDefinition::new("dir_paths");
/// `(directory id, first name)` → a run of that directory's entries (`block`).
const BLOCKS: TableDefinition<(u64, &str), &[u8]> = TableDefinition::new("blocks");

const META_BUILT_FROM: &str = "built_from";
const META_COMPLETE: &str = "complete";
/// Bumped whenever the tables' layout or value encoding changes: older indexes are rebuilt.
/// 2: entries in runs (`blocks`) instead of a key per entry (`entries`, layout 1).
const LAYOUT: &str = "2";
const META_LAYOUT: &str = "layout";

/// Rows inserted between two commits during ingest: bounds the transaction's dirty pages.
const ROWS_PER_COMMIT: usize = 200_000;
/// Rows handed to the index at once while a directory streams in.
const BATCH_ROWS: usize = 4096;
/// redb's page cache while building: the dirty pages of a commit and the tree's upper levels.
const BUILD_CACHE_BYTES: usize = 64 << 20;
/// redb's page cache when serving, the index's share of the process's memory. Small: a lookup
/// or a page of a listing reads a few 4 KiB pages, which the kernel's page cache keeps too (not
/// counted against the process); a large one filled up with the pages a long listing read once
/// (64 MiB did: `find` of a 10M-entry directory).
const READ_CACHE_BYTES: usize = 16 << 20;

const ROOT_ID: u64 = 0;

#[derive(Debug, thiserror::Error)]
pub enum IndexError {
    #[error("manifest index {}: {source}", path.display())]
    // Boxed: redb's error is large, and this one travels up through every fs result.
    Store {
        path: PathBuf,
        source: Box<redb::Error>,
    },
    #[error(transparent)]
    Format(#[from] FormatError),
    #[error("manifest index {}: corrupt entry {key:?}; delete the file to rebuild it", path.display())]
    Corrupt { path: PathBuf, key: String },
}

/// Counts of one ingest.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct IngestStats {
    pub directories: u64,
    pub entries: u64,
}

pub struct Index {
    db: ReadOnlyDatabase,
    path: PathBuf,
}

impl std::fmt::Debug for Index {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Index").field("path", &self.path).finish()
    }
}

impl Index {
    /// The index at `path` if it was completely built from the manifest `info` describes.
    pub fn open_complete(path: &Path, info: &ManifestInfo) -> Result<Option<Index>, IndexError> {
        if !path.exists() {
            return Ok(None);
        }
        let index = match Self::open(path) {
            Ok(index) => index,
            // An index that cannot even be opened is rebuilt, not served; one being built by
            // another process right now too (that build is only as good as this one).
            Err(e) => {
                tracing::warn!(index = %path.display(), "manifest index unreadable, rebuilding: {e}");
                return Ok(None);
            }
        };
        let complete = index.meta(META_COMPLETE)?.as_deref() == Some("1")
            && index.meta(META_LAYOUT)?.as_deref() == Some(LAYOUT)
            && index.meta(META_BUILT_FROM)?.as_deref() == Some(info.created_at.as_str());
        Ok(complete.then_some(index))
    }

    /// Opens the index at `path` read-only. One a killed process left unclosed is repaired
    /// first (which takes a writer's handle, closed again at once).
    fn open(path: &Path) -> Result<Index, DatabaseError> {
        let mut builder = Database::builder();
        builder.set_cache_size(READ_CACHE_BYTES);
        let db = match builder.open_read_only(path) {
            Err(DatabaseError::RepairAborted) => {
                builder.open(path)?.close()?;
                builder.open_read_only(path)?
            }
            opened => opened?,
        };
        Ok(Index {
            db,
            path: path.to_path_buf(),
        })
    }

    /// Builds the index at `path` (replacing whatever is there) from the manifest in `root`,
    /// calling `progress` with running counts after every commit.
    pub fn build(
        path: &Path,
        root: &Path,
        info: &ManifestInfo,
        mut progress: impl FnMut(IngestStats),
    ) -> Result<(Index, IngestStats), IndexError> {
        match std::fs::remove_file(path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                return Err(store_error(path, redb::Error::Io(e)));
            }
            _ => {}
        }
        let db = Database::builder()
            .set_cache_size(BUILD_CACHE_BYTES)
            .create(path)
            .map_err(|e| store_error(path, e))?;
        let mut ingest = Ingest::start(&db, path)?;
        ingest.add_dir("")?;
        std::thread::scope(|scope| {
            let ahead = RowsAhead::start(scope, root, BATCH_ROWS);
            // Directories asked of the reader, in id order: `next`'s and at most one more.
            let mut asked = VecDeque::new();
            let mut next = ROOT_ID;
            loop {
                let mut ask = next + asked.len() as u64;
                while ask <= next + 1
                    && let Some(dir) = ingest.dir_path(ask)?
                {
                    ahead.request(&dir);
                    asked.push_back(dir);
                    ask += 1;
                }
                let Some(dir) = asked.pop_front() else {
                    return Ok::<(), IndexError>(()); // no directory numbered `next`: all done
                };
                while let Some(mut batch) = ahead.next()? {
                    ingest.insert(next, &dir, &mut batch)?;
                    if ingest.rows_since_commit >= ROWS_PER_COMMIT {
                        ingest.commit_and_begin()?;
                        progress(ingest.stats);
                    }
                }
                ingest.end_dir()?;
                ingest.stats.directories += 1;
                next += 1;
            }
        })?;
        let stats = ingest.stats;
        ingest.finish(&info.created_at)?;
        db.close().map_err(|e| store_error(path, e))?;
        let index = Self::open(path).map_err(|e| store_error(path, e))?;
        progress(stats);
        Ok((index, stats))
    }

    /// What `name` in directory `dir` is, or `None` when the manifest has no such entry (or no
    /// such directory).
    pub fn lookup(&self, dir: &str, name: &str) -> Result<Option<EntryKind>, IndexError> {
        let txn = self.db.begin_read().map_err(|e| self.error(e))?;
        let Some(id) = self.dir_id(&txn, dir)? else {
            return Ok(None);
        };
        let blocks = txn.open_table(BLOCKS).map_err(|e| self.error(e))?;
        let Some((_, run)) = covering(&blocks, id, name).map_err(|e| self.error(e))? else {
            return Ok(None);
        };
        for entry in block::entries(run.value()) {
            let (listed, attributes) = entry.map_err(|Corrupt| self.corrupt(dir, name))?;
            match listed.cmp(name) {
                std::cmp::Ordering::Less => continue,
                std::cmp::Ordering::Equal => {
                    return decode(attributes)
                        .map(Some)
                        .ok_or_else(|| self.corrupt(dir, name));
                }
                std::cmp::Ordering::Greater => break,
            }
        }
        Ok(None)
    }

    /// Up to `limit` entries of directory `dir` in name order, starting after `after`.
    /// `None` when the directory is not in the manifest.
    pub fn list(
        &self,
        dir: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Option<Vec<Entry>>, IndexError> {
        let txn = self.db.begin_read().map_err(|e| self.error(e))?;
        let Some(id) = self.dir_id(&txn, dir)? else {
            return Ok(None);
        };
        let blocks = txn.open_table(BLOCKS).map_err(|e| self.error(e))?;
        // The run holding `after`'s place, then the ones after it.
        let first_run = match after {
            Some(name) => covering(&blocks, id, name).map_err(|e| self.error(e))?,
            None => None,
        };
        let start = match &first_run {
            Some((first, _)) => (id, first.as_str()),
            None => (id, ""),
        };
        let runs = blocks
            .range::<(u64, &str)>((Bound::Included(start), Bound::Excluded((id + 1, ""))))
            .map_err(|e| self.error(e))?;
        let mut page = Vec::new();
        for run in runs {
            let (_, run) = run.map_err(|e| self.error(e))?;
            for entry in block::entries(run.value()) {
                let (name, attributes) = entry.map_err(|Corrupt| self.corrupt(dir, "(a run)"))?;
                if after.is_some_and(|after| name <= after) {
                    continue;
                }
                let kind = decode(attributes).ok_or_else(|| self.corrupt(dir, name))?;
                page.push(Entry {
                    name: name.to_string(),
                    kind,
                });
                if page.len() >= limit {
                    return Ok(Some(page));
                }
            }
        }
        Ok(Some(page))
    }

    fn dir_id(&self, txn: &redb::ReadTransaction, dir: &str) -> Result<Option<u64>, IndexError> {
        let ids = txn.open_table(DIR_IDS).map_err(|e| self.error(e))?;
        let id = ids.get(dir).map_err(|e| self.error(e))?;
        Ok(id.map(|v| v.value()))
    }

    fn meta(&self, key: &str) -> Result<Option<String>, IndexError> {
        let txn = self.db.begin_read().map_err(|e| self.error(e))?;
        let meta = match txn.open_table(META) {
            Ok(meta) => meta,
            Err(redb::TableError::TableDoesNotExist(_)) => return Ok(None),
            Err(e) => return Err(self.error(e)),
        };
        let value = meta.get(key).map_err(|e| self.error(e))?;
        Ok(value.map(|v| v.value().to_string()))
    }

    fn error(&self, e: impl Into<redb::Error>) -> IndexError {
        store_error(&self.path, e)
    }

    fn corrupt(&self, dir: &str, name: &str) -> IndexError {
        IndexError::Corrupt {
            path: self.path.clone(),
            key: format!("{dir}/{name}"),
        }
    }
}

/// A stored run's bytes, as read from the table.
type Run<'t> = redb::AccessGuard<'t, &'static [u8]>;

/// The run of directory `id` whose range holds `name` (the last one whose first name is at or
/// before it), with its first name; `None` when `name` comes before every run of the directory.
fn covering<'t, T: ReadableTable<(u64, &'static str), &'static [u8]>>(
    blocks: &'t T,
    id: u64,
    name: &str,
) -> Result<Option<(String, Run<'t>)>, redb::StorageError> {
    let last = blocks
        .range::<(u64, &str)>((id, "")..=(id, name))?
        .next_back()
        .transpose()?;
    Ok(last.map(|(first, run)| (first.value().1.to_string(), run)))
}

/// A failure of the redb store at `path`.
fn store_error(path: &Path, e: impl Into<redb::Error>) -> IndexError {
    IndexError::Store {
        path: path.to_path_buf(),
        source: Box::new(e.into()),
    }
}

/// One running ingest: a write transaction committed every [`ROWS_PER_COMMIT`] rows.
struct Ingest<'a> {
    db: &'a Database,
    path: &'a Path,
    txn: Option<redb::WriteTransaction>,
    next_dir_id: u64,
    rows_since_commit: usize,
    stats: IngestStats,
    packer: Packer<'a>,
}

impl<'a> Ingest<'a> {
    fn start(db: &'a Database, path: &'a Path) -> Result<Ingest<'a>, IndexError> {
        let mut ingest = Ingest {
            db,
            path,
            txn: None,
            next_dir_id: ROOT_ID,
            rows_since_commit: 0,
            stats: IngestStats::default(),
            packer: Packer::new(path),
        };
        ingest.begin()?;
        Ok(ingest)
    }

    fn begin(&mut self) -> Result<(), IndexError> {
        let mut txn = self.db.begin_write().map_err(|e| self.error(e))?;
        // Intermediate commits need not reach the disk: an interrupted ingest is redone from
        // scratch anyway. Only the last one, which marks the index complete, is made durable.
        txn.set_durability(Durability::None)
            .map_err(|e| self.error(redb::Error::from(e)))?;
        self.txn = Some(txn);
        Ok(())
    }

    fn txn(&self) -> &redb::WriteTransaction {
        self.txn
            .as_ref()
            .expect("an ingest always holds a transaction until it finishes")
    }

    fn error(&self, e: impl Into<redb::Error>) -> IndexError {
        store_error(self.path, e)
    }

    fn commit_and_begin(&mut self) -> Result<(), IndexError> {
        if let Some(txn) = self.txn.take() {
            txn.commit().map_err(|e| self.error(e))?;
        }
        self.rows_since_commit = 0;
        self.begin()
    }

    /// Registers directory `path` and queues it for ingest. Returns false if it already was.
    fn add_dir(&mut self, path: &str) -> Result<bool, IndexError> {
        let id = self.next_dir_id;
        let txn = self.txn();
        let mut ids = txn.open_table(DIR_IDS).map_err(|e| self.error(e))?;
        if ids.get(path).map_err(|e| self.error(e))?.is_some() {
            return Ok(false);
        }
        ids.insert(path, id).map_err(|e| self.error(e))?;
        let mut paths = txn.open_table(DIR_PATHS).map_err(|e| self.error(e))?;
        paths.insert(id, path).map_err(|e| self.error(e))?;
        drop((ids, paths));
        self.next_dir_id += 1;
        Ok(true)
    }

    fn dir_path(&self, id: u64) -> Result<Option<String>, IndexError> {
        let paths = self
            .txn()
            .open_table(DIR_PATHS)
            .map_err(|e| self.error(e))?;
        let path = paths.get(id).map_err(|e| self.error(e))?;
        Ok(path.map(|p| p.value().to_string()))
    }

    /// Inserts (and drains) `batch`, the next rows of directory `dir` (id `id`). A name listed
    /// both as a directory and as a file is a directory, as in a live listing.
    fn insert(&mut self, id: u64, dir: &str, batch: &mut Vec<Entry>) -> Result<(), IndexError> {
        let mut new_dirs = Vec::new();
        {
            let txn = self
                .txn
                .as_ref()
                .expect("an ingest always holds a transaction until it finishes");
            let mut blocks = txn.open_table(BLOCKS).map_err(|e| self.error(e))?;
            for entry in batch.iter() {
                if entry.is_dir() {
                    new_dirs.push(entry.name.clone());
                }
                self.packer.add(&mut blocks, id, entry)?;
            }
        }
        // Held rows are counted when merged: the count may trail the rows read.
        self.stats.entries = self.packer.entries;
        self.rows_since_commit += batch.len();
        batch.clear();
        for name in new_dirs {
            let path = if dir.is_empty() {
                name
            } else {
                format!("{dir}/{name}")
            };
            self.add_dir(&path)?;
        }
        Ok(())
    }

    /// Stores what is left of the directory being ingested: call at the end of each.
    fn end_dir(&mut self) -> Result<(), IndexError> {
        let txn = self
            .txn
            .as_ref()
            .expect("an ingest always holds a transaction until it finishes");
        let mut blocks = txn.open_table(BLOCKS).map_err(|e| self.error(e))?;
        self.packer.end_dir(&mut blocks)?;
        self.stats.entries = self.packer.entries;
        Ok(())
    }

    fn finish(mut self, built_from: &str) -> Result<(), IndexError> {
        let Some(mut txn) = self.txn.take() else {
            return Ok(());
        };
        txn.set_durability(Durability::Immediate)
            .map_err(|e| self.error(redb::Error::from(e)))?;
        {
            let mut meta = txn.open_table(META).map_err(|e| self.error(e))?;
            for (key, value) in [
                (META_BUILT_FROM, built_from),
                (META_LAYOUT, LAYOUT),
                (META_COMPLETE, "1"),
            ] {
                meta.insert(key, value).map_err(|e| self.error(e))?;
            }
        }
        txn.commit().map_err(|e| self.error(e))
    }
}

type Blocks<'txn> = redb::Table<'txn, (u64, &'static str), &'static [u8]>;

/// Packs one directory's rows into runs (`block`) as the ingest meets them.
///
/// A row whose name comes after every name of its directory so far goes into the open run,
/// which is stored when full: every row of a sorted manifest but the few a `/` reorders
/// (`a.txt` is listed before the directory `a`). A row that comes earlier is held in memory
/// (`pending`, bounded by [`PENDING_BYTES`]) and merged into the stored runs in name order when
/// the directory ends or the bound is reached: one rewrite per run touched, not per row, so
/// a directory in any order costs at most about what an insert per row did.
struct Packer<'a> {
    path: &'a Path,
    /// The directory whose rows are being packed.
    dir: Option<u64>,
    /// The runs of rows in order being written; the last one not yet stored.
    open: Option<RunWriter>,
    /// The greatest name packed in `dir` ("" before its first).
    dir_max: String,
    /// Rows of `dir` that came after a greater name, merged in by [`Packer::merge`].
    pending: BTreeMap<String, Vec<u8>>,
    pending_bytes: usize,
    /// Distinct names packed (a name listed twice in a directory counts once).
    entries: u64,
    attributes: Vec<u8>,
}

/// Out-of-order rows held before a merge: with a row's overhead, some 300,000 short names.
const PENDING_BYTES: usize = if cfg!(test) { 300 } else { 32 << 20 };
/// What a held row costs beyond its name and attributes (the map's node, two allocations).
const PENDING_ROW_OVERHEAD: usize = 64;

/// As a TSV is read: the first directory of a name stays, a later row replaces a file.
fn later_row_wins(earlier: &[u8]) -> bool {
    !codec::is_dir(earlier)
}

impl<'a> Packer<'a> {
    fn new(path: &'a Path) -> Packer<'a> {
        Packer {
            path,
            dir: None,
            open: None,
            dir_max: String::new(),
            pending: BTreeMap::new(),
            pending_bytes: 0,
            entries: 0,
            attributes: Vec::new(),
        }
    }

    fn error(&self, e: redb::StorageError) -> IndexError {
        store_error(self.path, e)
    }

    /// Packs `entry`, the next row of directory `dir`.
    fn add(&mut self, blocks: &mut Blocks, dir: u64, entry: &Entry) -> Result<(), IndexError> {
        if self.dir != Some(dir) {
            self.end_dir(blocks)?;
            self.dir = Some(dir);
            self.dir_max.clear();
        }
        self.attributes.clear();
        encode_into(&entry.kind, &mut self.attributes);
        if entry.name <= self.dir_max {
            return self.hold(blocks, &entry.name);
        }
        self.dir_max.clear();
        self.dir_max.push_str(&entry.name);
        self.entries += 1;
        self.open
            .get_or_insert_with(|| RunWriter::new(dir, &entry.name))
            .push(blocks, &entry.name, &self.attributes)
            .map_err(|e| store_error(self.path, e))
    }

    /// Stores what is left of the directory being packed: call at the end of each.
    fn end_dir(&mut self, blocks: &mut Blocks) -> Result<(), IndexError> {
        self.close(blocks)?;
        self.merge(blocks)
    }

    /// Stores the open run, if any.
    fn close(&mut self, blocks: &mut Blocks) -> Result<(), IndexError> {
        match self.open.take() {
            Some(mut run) => run.finish(blocks).map_err(|e| self.error(e)),
            None => Ok(()),
        }
    }

    /// Holds `name` (with `self.attributes`) for the next merge.
    fn hold(&mut self, blocks: &mut Blocks, name: &str) -> Result<(), IndexError> {
        match self.pending.get_mut(name) {
            Some(held) => {
                if later_row_wins(held) {
                    held.clone_from(&self.attributes);
                }
            }
            None => {
                self.pending_bytes += name.len() + self.attributes.len() + PENDING_ROW_OVERHEAD;
                self.pending
                    .insert(name.to_string(), self.attributes.clone());
            }
        }
        if self.pending_bytes >= PENDING_BYTES {
            self.close(blocks)?;
            self.merge(blocks)?;
        }
        Ok(())
    }

    /// Merges the held rows into the stored runs of the directory: each run whose span holds
    /// some is rewritten once with them (and cut into runs of [`block::FULL_BYTES`]); those
    /// before the directory's first run make runs of their own. The open run must be closed.
    fn merge(&mut self, blocks: &mut Blocks) -> Result<(), IndexError> {
        let Some(dir) = self.dir else {
            return Ok(());
        };
        let mut held = std::mem::take(&mut self.pending).into_iter().peekable();
        self.pending_bytes = 0;
        while let Some((name, attributes)) = held.next() {
            let spanning = covering(blocks, dir, &name)
                .map_err(|e| self.error(e))?
                .map(|(first, run)| (first, run.value().to_vec()));
            let (first, run) = spanning.unwrap_or_else(|| (name.clone(), Vec::new()));
            let next_run = blocks
                .range::<(u64, &str)>((
                    Bound::Excluded((dir, first.as_str())),
                    Bound::Excluded((dir + 1, "")),
                ))
                .map_err(|e| self.error(e))?
                .next()
                .transpose()
                .map_err(|e| self.error(e))?
                .map(|(next, _)| next.value().1.to_string());
            let mut group = vec![(name, attributes)];
            while let Some((name, _)) = held.peek()
                && next_run.as_deref().is_none_or(|next| name.as_str() < next)
            {
                group.extend(held.next());
            }
            self.rewrite(blocks, dir, &first, &run, group)?;
        }
        Ok(())
    }

    /// Stores run `run` (first name `first`) of `dir` with the rows of `group` merged in, cut
    /// into runs of about [`block::FULL_BYTES`], the first still under `first`.
    fn rewrite(
        &mut self,
        blocks: &mut Blocks,
        dir: u64,
        first: &str,
        run: &[u8],
        group: Vec<(String, Vec<u8>)>,
    ) -> Result<(), IndexError> {
        let corrupt = |Corrupt| IndexError::Corrupt {
            path: self.path.to_path_buf(),
            key: format!("directory #{dir}, run {first}"),
        };
        let mut stored = block::entries(run).peekable();
        let mut group = group.into_iter().peekable();
        let mut out = RunWriter::new(dir, first);
        loop {
            let next_stored = match stored.peek() {
                Some(Err(Corrupt)) => return Err(corrupt(Corrupt)),
                Some(Ok((name, _))) => Some(*name),
                None => None,
            };
            let next_held = group.peek().map(|(name, _)| name.as_str());
            match (next_stored, next_held) {
                (None, None) => break,
                (Some(s), Some(h)) if s == h => {
                    let (name, earlier) = stored.next().expect("peeked").map_err(corrupt)?;
                    let (_, later) = group.next().expect("peeked");
                    let kept = if later_row_wins(earlier) {
                        &later[..]
                    } else {
                        earlier
                    };
                    out.push(blocks, name, kept).map_err(|e| self.error(e))?;
                }
                (Some(s), h) if h.is_none_or(|h| s < h) => {
                    let (name, attributes) = stored.next().expect("peeked").map_err(corrupt)?;
                    out.push(blocks, name, attributes)
                        .map_err(|e| self.error(e))?;
                }
                _ => {
                    let (name, attributes) = group.next().expect("peeked");
                    out.push(blocks, &name, &attributes)
                        .map_err(|e| self.error(e))?;
                    self.entries += 1;
                }
            }
        }
        out.finish(blocks).map_err(|e| self.error(e))
    }
}

/// Writes a sorted stream of entries of one directory as runs of about [`block::FULL_BYTES`],
/// the first under `first`; each run is stored when the next entry does not fit it, the last
/// by [`RunWriter::finish`].
struct RunWriter {
    dir: u64,
    /// The first name of the run being written: the next entry's once a run is stored.
    first: String,
    bytes: Vec<u8>,
}

impl RunWriter {
    fn new(dir: u64, first: &str) -> RunWriter {
        RunWriter {
            dir,
            first: first.to_string(),
            bytes: Vec::with_capacity(block::FULL_BYTES + 256),
        }
    }

    fn push(
        &mut self,
        blocks: &mut Blocks,
        name: &str,
        attributes: &[u8],
    ) -> Result<(), redb::StorageError> {
        if self.bytes.len() >= block::FULL_BYTES {
            self.finish(blocks)?;
            self.bytes.clear();
            self.first.clear();
            self.first.push_str(name);
        }
        block::push(&mut self.bytes, name, attributes);
        Ok(())
    }

    fn finish(&mut self, blocks: &mut Blocks) -> Result<(), redb::StorageError> {
        if !self.bytes.is_empty() {
            blocks.insert((self.dir, self.first.as_str()), self.bytes.as_slice())?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, SystemTime, UNIX_EPOCH};

    use super::*;
    use crate::manifest::format::{self, Totals, write_dir_file};

    fn at(secs: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(secs)
    }

    fn info(created_at: &str) -> ManifestInfo {
        ManifestInfo {
            version: format::FORMAT_VERSION,
            bucket: "b".into(),
            prefix: String::new(),
            totals: Totals::default(),
            created_at: created_at.into(),
            sorted_rows: false,
        }
    }

    /// root: a/ (x, y/ (deep)), f0..f(n-1), both (file and dir rows)
    fn sample(root: &Path, files_in_root: usize) {
        let mut rows = vec![
            Entry::dir("a"),
            Entry::file("both", 1, "e", at(5)),
            Entry::dir("both"),
        ];
        rows.extend(
            (0..files_in_root)
                .map(|i| Entry::file(format!("f{i:05}"), i as u64, format!("e{i}"), at(i as u64))),
        );
        write_dir_file(root, "", &rows).expect("root");
        write_dir_file(
            root,
            "a",
            &[Entry::file("x", 7, "ex", at(7)), Entry::dir("y")],
        )
        .expect("a");
        write_dir_file(root, "a/y", &[Entry::file("deep\tname", 9, "ed", at(9))]).expect("y");
    }

    #[test]
    fn built_index_answers_lookups_and_pages_in_name_order() {
        let dir = tempfile::tempdir().expect("tempdir");
        sample(dir.path(), 1000);
        let db = dir.path().join("index.redb");
        let mut reports = 0;
        let (index, stats) =
            Index::build(&db, dir.path(), &info("t1"), |_| reports += 1).expect("build");
        assert!(reports >= 1);
        assert_eq!(stats.directories, 4, "root, a, a/y, both");
        assert_eq!(
            index.lookup("a", "x").expect("lookup"),
            Some(EntryKind::File {
                size: 7,
                etag: "ex".into(),
                mtime: at(7),
                owner: None,
            })
        );
        assert_eq!(
            index
                .lookup("a/y", "deep\tname")
                .expect("deep")
                .map(|k| matches!(k, EntryKind::File { size: 9, .. })),
            Some(true)
        );
        assert_eq!(
            index.lookup("", "both").expect("both"),
            Some(EntryKind::DIR)
        );
        assert_eq!(index.lookup("", "nope").expect("missing"), None);
        assert_eq!(index.lookup("nodir", "x").expect("missing dir"), None);

        let mut names = Vec::new();
        let mut after: Option<String> = None;
        loop {
            let page = index
                .list("", after.as_deref(), 97)
                .expect("list")
                .expect("root exists");
            if page.is_empty() {
                break;
            }
            after = page.last().map(|e| e.name.clone());
            names.extend(page.into_iter().map(|e| e.name));
        }
        let mut expected: Vec<String> = vec!["a".into(), "both".into()];
        expected.extend((0..1000).map(|i| format!("f{i:05}")));
        assert_eq!(names, expected);
        assert_eq!(
            index.list("a/y", None, 10).expect("list").expect("y").len(),
            1
        );
        assert_eq!(index.list("nodir", None, 10).expect("list"), None);
    }

    #[test]
    fn an_index_is_reused_only_when_complete_and_built_from_the_same_manifest() {
        let dir = tempfile::tempdir().expect("tempdir");
        sample(dir.path(), 3);
        let db = dir.path().join("index.redb");
        assert!(
            Index::open_complete(&db, &info("t1"))
                .expect("open")
                .is_none()
        );
        drop(Index::build(&db, dir.path(), &info("t1"), |_| {}).expect("build"));
        let reopened = Index::open_complete(&db, &info("t1"))
            .expect("open")
            .expect("complete");
        assert!(reopened.lookup("", "f00002").expect("lookup").is_some());
        drop(reopened);
        assert!(
            Index::open_complete(&db, &info("t2"))
                .expect("open")
                .is_none(),
            "other manifest"
        );
        std::fs::write(&db, b"garbage").expect("corrupt");
        assert!(
            Index::open_complete(&db, &info("t1"))
                .expect("open")
                .is_none(),
            "unreadable file"
        );
    }

    /// An index of the previous layout (a key per entry, table `entries`), complete and built
    /// from the same manifest, is not read as runs: it is rebuilt.
    #[test]
    fn an_index_of_the_previous_layout_is_rebuilt_not_misread() {
        const ENTRIES_V1: TableDefinition<(u64, &str), &[u8]> = TableDefinition::new("entries");
        let dir = tempfile::tempdir().expect("tempdir");
        sample(dir.path(), 3);
        let db = dir.path().join("index.redb");
        {
            let old = Database::create(&db).expect("create");
            let txn = old.begin_write().expect("txn");
            {
                let mut entries = txn.open_table(ENTRIES_V1).expect("entries");
                let file = crate::manifest::codec::encode(&EntryKind::File {
                    size: 1,
                    etag: "old".into(),
                    mtime: at(1),
                    owner: None,
                });
                entries
                    .insert((ROOT_ID, "f00002"), file.as_slice())
                    .expect("row");
                let mut ids = txn.open_table(DIR_IDS).expect("ids");
                ids.insert("", ROOT_ID).expect("root");
                let mut meta = txn.open_table(META).expect("meta");
                for (key, value) in [
                    (META_BUILT_FROM, "t1"),
                    (META_LAYOUT, "1"),
                    (META_COMPLETE, "1"),
                ] {
                    meta.insert(key, value).expect("meta");
                }
            }
            txn.commit().expect("commit");
        }
        assert!(
            Index::open_complete(&db, &info("t1"))
                .expect("open")
                .is_none(),
            "layout 1 is not served"
        );
        let (index, _) = Index::build(&db, dir.path(), &info("t1"), |_| {}).expect("rebuild");
        assert!(matches!(
            index.lookup("", "f00002").expect("lookup"),
            Some(EntryKind::File { size: 2, .. })
        ));
    }

    /// An upgrade's two processes have the index open at once: the one handing over until it
    /// exits, and its successor from its start. Both read it; neither rebuilds it.
    #[test]
    fn a_built_index_is_shared_by_every_process_serving_it() {
        let dir = tempfile::tempdir().expect("tempdir");
        sample(dir.path(), 3);
        let db = dir.path().join("index.redb");
        let (built, _) = Index::build(&db, dir.path(), &info("t1"), |_| {}).expect("build");
        let second = Index::open_complete(&db, &info("t1"))
            .expect("open")
            .expect("a second server finds it complete while the builder serves it");
        let third = Index::open_complete(&db, &info("t1"))
            .expect("open")
            .expect("complete");
        for index in [&built, &second, &third] {
            assert!(index.lookup("", "f00002").expect("lookup").is_some());
        }
    }

    /// A writer's handle left unclosed (a process killed while it had the index open for
    /// writing, as msfs before read-only opens did) is repaired, not rebuilt.
    #[test]
    fn an_index_left_open_for_writing_is_repaired_and_served() {
        let dir = tempfile::tempdir().expect("tempdir");
        sample(dir.path(), 3);
        let db = dir.path().join("index.redb");
        drop(Index::build(&db, dir.path(), &info("t1"), |_| {}).expect("build"));
        let writer = Database::open(&db).expect("open for writing");
        // As after a kill: the clean-shutdown mark is never written.
        std::mem::forget(writer);
        let copy = dir.path().join("copy.redb");
        std::fs::copy(&db, &copy).expect("copy the unclosed file");
        assert!(
            matches!(
                Database::builder().open_read_only(&copy),
                Err(DatabaseError::RepairAborted)
            ),
            "the copy needs a repair"
        );
        let reopened = Index::open_complete(&copy, &info("t1"))
            .expect("open")
            .expect("repaired and complete");
        assert!(reopened.lookup("", "f00002").expect("lookup").is_some());
    }

    #[test]
    fn a_bad_row_fails_the_build_naming_the_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join("_root.tsv"), "f\tbroken\n").expect("write");
        let error = Index::build(&dir.path().join("i.redb"), dir.path(), &info("t"), |_| {})
            .expect_err("bad row")
            .to_string();
        assert!(error.contains("_root.tsv:1"), "{error}");
    }
}
