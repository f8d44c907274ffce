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
//! every entry is keyed by `(parent id, basename)`, so one directory's entries are one contiguous
//! key range in name order. Ids are handed out breadth-first as `d` rows are met, which makes
//! `dir_paths` the ingest's work queue: memory stays bounded whatever the namespace's size.
//! `meta` records which manifest (by `created_at`) the index was built from and whether the
//! build finished; anything else is rebuilt.
//!
//! A finished index is only read, and is opened read-only: redb lets any number of processes
//! share it so, which an upgrade's two processes (the one handing over has it open until it
//! exits) and two mounts of one manifest need.

use std::collections::VecDeque;
use std::ops::Bound;
use std::path::{Path, PathBuf};

use redb::{
    Database, DatabaseError, Durability, ReadOnlyDatabase, ReadableDatabase, ReadableTable,
    TableDefinition,
};

use super::codec::{DIR_TAG, decode, encode};
use super::format::{Entry, EntryKind, FormatError, ManifestInfo};
use super::rows_ahead::RowsAhead;

const META: TableDefinition<&str, &str> = TableDefinition::new("meta");
const DIR_IDS: TableDefinition<&str, u64> = TableDefinition::new("dir_ids");
const DIR_PATHS: TableDefinition<u64, &str> = TableDefinition::new("dir_paths");
const ENTRIES: TableDefinition<(u64, &str), &[u8]> = TableDefinition::new("entries");

const META_BUILT_FROM: &str = "built_from";
const META_COMPLETE: &str = "complete";
/// Bumped whenever the tables' layout or value encoding changes: older indexes are rebuilt.
const LAYOUT: &str = "1";
const META_LAYOUT: &str = "layout";

/// Rows inserted between two commits during ingest: bounds the transaction's dirty pages.
const ROWS_PER_COMMIT: usize = 200_000;
/// Rows handed to the index at once while a directory streams in.
const BATCH_ROWS: usize = 4096;
/// redb's page cache; the index's share of the process's memory.
const CACHE_BYTES: usize = 64 * 1024 * 1024;

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
        builder.set_cache_size(CACHE_BYTES);
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
            .set_cache_size(CACHE_BYTES)
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
        let entries = txn.open_table(ENTRIES).map_err(|e| self.error(e))?;
        let value = entries.get((id, name)).map_err(|e| self.error(e))?;
        value
            .map(|v| decode(v.value()).ok_or_else(|| self.corrupt(dir, name)))
            .transpose()
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
        let entries = txn.open_table(ENTRIES).map_err(|e| self.error(e))?;
        let start = match after {
            Some(name) => Bound::Excluded((id, name)),
            None => Bound::Included((id, "")),
        };
        let range = entries
            .range::<(u64, &str)>((start, Bound::Excluded((id + 1, ""))))
            .map_err(|e| self.error(e))?;
        let mut page = Vec::new();
        for item in range.take(limit) {
            let (key, value) = item.map_err(|e| self.error(e))?;
            let (_, name) = key.value();
            let kind = decode(value.value()).ok_or_else(|| self.corrupt(dir, name))?;
            page.push(Entry {
                name: name.to_string(),
                kind,
            });
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
        let mut inserted = 0;
        {
            let mut entries = self.txn().open_table(ENTRIES).map_err(|e| self.error(e))?;
            for entry in batch.iter() {
                let key = (id, entry.name.as_str());
                if entry.is_dir() {
                    new_dirs.push(entry.name.clone());
                }
                // One descent per row: what a file row replaced is looked at afterwards (a
                // directory of the same name wins, and is put back: rare, unlike a row).
                let replaced = entries
                    .insert(key, encode(&entry.kind).as_slice())
                    .map_err(|e| self.error(e))?
                    .filter(|old| !entry.is_dir() && old.value().first() == Some(&DIR_TAG))
                    .map(|old| old.value().to_vec());
                match replaced {
                    Some(dir) => {
                        entries
                            .insert(key, dir.as_slice())
                            .map_err(|e| self.error(e))?;
                    }
                    None => inserted += 1,
                }
            }
        }
        self.stats.entries += inserted;
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
