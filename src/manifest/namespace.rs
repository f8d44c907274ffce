//! A manifest being served: the base snapshot (from its index, or from the TSV files while the
//! index is still being built) with the delta log's overlay on top.
//!
//! The mount is browsable as soon as the manifest exists: until the index is ready, a lookup or
//! listing reads the directory's TSV file (parsed directories are kept in a small LRU), which is
//! fine for directories up to a few hundred thousand entries. Once the index is complete every
//! answer comes from it. Neither path touches the object store.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::ops::Bound;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Instant;

use super::bisect;
use super::delta::{Change, DELTA_DIR, DeltaError, DeltaLog, Overlay};
use super::format::{self, Entry, EntryKind, FormatError, ManifestInfo, Ownership};
use super::index::{Index, IndexError};

/// The index's file inside the manifest directory.
pub const INDEX_DB: &str = "_msfs_index.redb";
/// Directories parsed from TSV files kept while the index builds.
const PARSED_DIRS: usize = 8;

#[derive(Debug, thiserror::Error)]
pub enum ManifestError {
    #[error(transparent)]
    Format(#[from] FormatError),
    #[error(transparent)]
    Index(#[from] IndexError),
    #[error(transparent)]
    Delta(#[from] DeltaError),
    #[error("manifest {}: {what}", root.display())]
    Unusable { root: PathBuf, what: String },
}

type Children = Arc<BTreeMap<String, EntryKind>>;

#[derive(Debug)]
pub struct Manifest {
    root: PathBuf,
    info: ManifestInfo,
    /// Set once the index is complete; until then the TSVs are read.
    index: RwLock<Option<Arc<Index>>>,
    parsed: Mutex<VecDeque<(String, Children)>>,
    overlay: RwLock<Overlay>,
    /// Present when a writable mount uses this manifest (or a log already existed).
    log: Mutex<Option<DeltaLog>>,
    /// Owners and modes set (chmod, chown) on files that have no row yet, by path: a file being
    /// written for the first time. Its commit's row states it (`take_pending_owner`).
    pending_owners: Mutex<HashMap<String, Ownership>>,
}

impl Manifest {
    /// The manifest in `root`, or `None` when `root` holds no complete manifest. The delta log
    /// is opened (and created) when `writable`, and replayed whenever it exists.
    pub fn open(root: &Path, writable: bool) -> Result<Option<Manifest>, ManifestError> {
        let Some(info) = ManifestInfo::read(root)? else {
            return Ok(None);
        };
        let manifest = Manifest {
            root: root.to_path_buf(),
            info,
            index: RwLock::new(None),
            parsed: Mutex::new(VecDeque::new()),
            overlay: RwLock::new(Overlay::default()),
            log: Mutex::new(None),
            pending_owners: Mutex::new(HashMap::new()),
        };
        if writable || root.join(DELTA_DIR).exists() {
            manifest.open_log()?;
        }
        Ok(Some(manifest))
    }

    pub fn info(&self) -> &ManifestInfo {
        &self.info
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Opens the delta log if it is not open yet (a writable mount joined).
    pub fn open_log(&self) -> Result<(), ManifestError> {
        let mut log = lock(&self.log);
        if log.is_none() {
            let (opened, overlay) = DeltaLog::open(&self.root)?;
            *log = Some(opened);
            *self.overlay.write().unwrap_or_else(|p| p.into_inner()) = overlay;
        }
        Ok(())
    }

    pub fn index_ready(&self) -> bool {
        self.index().is_some()
    }

    /// Uses the index if a complete one was built from this manifest, else builds it (on the
    /// calling thread: run it with `spawn_blocking`). Until it is done, answers come from the
    /// TSVs.
    pub fn load_or_build_index(&self) -> Result<(), ManifestError> {
        let path = self.root.join(INDEX_DB);
        if let Some(index) = Index::open_complete(&path, &self.info)? {
            self.set_index(index);
            return Ok(());
        }
        let started = Instant::now();
        tracing::info!(
            manifest = %self.root.display(),
            objects = self.info.totals.objects,
            "building the manifest index; until it is ready, listings are read from the TSV files"
        );
        let mut last_report = Instant::now();
        let (index, stats) = Index::build(&path, &self.root, &self.info, |stats| {
            if last_report.elapsed().as_secs() >= 5 {
                last_report = Instant::now();
                let secs = started.elapsed().as_secs_f64().max(0.001);
                tracing::info!(
                    manifest = %self.root.display(),
                    entries = stats.entries,
                    directories = stats.directories,
                    entries_per_second = (stats.entries as f64 / secs) as u64,
                    "ingesting manifest"
                );
            }
        })?;
        let secs = started.elapsed().as_secs_f64().max(0.001);
        tracing::info!(
            manifest = %self.root.display(),
            entries = stats.entries,
            directories = stats.directories,
            seconds = format!("{secs:.1}"),
            entries_per_second = (stats.entries as f64 / secs) as u64,
            "manifest index ready"
        );
        self.set_index(index);
        Ok(())
    }

    fn set_index(&self, index: Index) {
        *self.index.write().unwrap_or_else(|p| p.into_inner()) = Some(Arc::new(index));
        lock(&self.parsed).clear();
    }

    fn index(&self) -> Option<Arc<Index>> {
        self.index.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// What `name` in directory `dir` ("" for the root) is. Blocking: reads local files.
    pub fn lookup(&self, dir: &str, name: &str) -> Result<Option<EntryKind>, ManifestError> {
        let path = join(dir, name);
        {
            let overlay = self.overlay.read().unwrap_or_else(|p| p.into_inner());
            if overlay.has_live_below(&path) {
                return Ok(Some(EntryKind::DIR));
            }
            match overlay.get(&path) {
                Some(Change::Upsert(kind)) => return Ok(Some(kind.clone())),
                Some(Change::Deleted) => return Ok(None),
                None => {}
            }
        }
        match self.index() {
            Some(index) => Ok(index.lookup(dir, name)?),
            // Until the index is built: a few reads of a sorted TSV, not a parse of all of it.
            None if self.info.sorted_rows => {
                Ok(bisect::find(&format::dir_file(&self.root, dir), name)?)
            }
            None => Ok(self.parsed_dir(dir)?.get(name).cloned()),
        }
    }

    /// Every entry of directory `dir` in name order, the delta log applied: the reference the
    /// tests hold the paged readers to. (Serving reads a page at a time: [`Manifest::base_page`]
    /// and [`Manifest::overlay_children`].)
    #[cfg(test)]
    pub fn list(&self, dir: &str) -> Result<BTreeMap<String, EntryKind>, ManifestError> {
        const LIST_PAGE: usize = 8192;
        let mut children = BTreeMap::new();
        let mut after: Option<String> = None;
        loop {
            let page = self.base_page(dir, after.as_deref(), LIST_PAGE)?;
            let full = page.len() == LIST_PAGE;
            after = page.last().map(|e| e.name.clone());
            children.extend(page.into_iter().map(|e| (e.name, e.kind)));
            if !full {
                break;
            }
        }
        for (name, change) in self.overlay_children(dir) {
            match change {
                Some(kind) => children.insert(name, kind),
                None => children.remove(&name),
            };
        }
        Ok(children)
    }

    /// Up to `limit` entries of directory `dir` in the base manifest (without the delta log),
    /// in name order, after `after`. Blocking: reads local files.
    pub fn base_page(
        &self,
        dir: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<Entry>, ManifestError> {
        if let Some(index) = self.index() {
            return Ok(index.list(dir, after, limit)?.unwrap_or_default());
        }
        let parsed = self.parsed_dir(dir)?;
        let start = match after {
            Some(name) => Bound::Excluded(name),
            None => Bound::Unbounded,
        };
        Ok(parsed
            .range::<str, _>((start, Bound::Unbounded))
            .take(limit)
            .map(|(name, kind)| Entry {
                name: name.clone(),
                kind: kind.clone(),
            })
            .collect())
    }

    /// What the delta log says about the children of `dir`: `Some` for one that exists (also a
    /// directory implied by something deeper), `None` for one deleted.
    pub fn overlay_children(&self, dir: &str) -> BTreeMap<String, Option<EntryKind>> {
        self.overlay
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .children(dir)
    }

    /// Records a change the object store has already committed. Blocking: fsyncs the log.
    /// The change is served from now on even if it cannot be logged (the store holds it; only
    /// a later mount would miss it), and the error says so.
    pub fn record(&self, path: &str, change: Change) -> Result<(), ManifestError> {
        if matches!(change, Change::Deleted) {
            lock(&self.pending_owners).remove(path);
        }
        let mut log = lock(&self.log);
        let logged = match log.as_mut() {
            Some(log) => log.append(path, &change).map_err(ManifestError::from),
            None => Err(ManifestError::Unusable {
                root: self.root.clone(),
                what: "the delta log is not open (a read-only mount cannot record changes)".into(),
            }),
        };
        self.overlay
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .apply(path.to_string(), change);
        logged
    }

    /// `owner` was set on `path`, which has no row yet: its first row will state it.
    pub fn set_pending_owner(&self, path: &str, owner: Ownership) {
        lock(&self.pending_owners).insert(path.to_string(), owner);
    }

    /// The owner set on `path` before it had a row, if any (taken: the row states it now).
    pub fn take_pending_owner(&self, path: &str) -> Option<Ownership> {
        lock(&self.pending_owners).remove(path)
    }

    /// Directory `dir` parsed from its TSV file (a name listed as both file and directory is a
    /// directory), from the LRU when recently read.
    fn parsed_dir(&self, dir: &str) -> Result<Children, ManifestError> {
        {
            let mut parsed = lock(&self.parsed);
            if let Some(at) = parsed.iter().position(|(d, _)| d == dir) {
                let hit = parsed.remove(at).expect("position is in range");
                let children = hit.1.clone();
                parsed.push_front(hit);
                return Ok(children);
            }
        }
        let mut children = BTreeMap::new();
        format::for_each_row(&format::dir_file(&self.root, dir), |entry: Entry| {
            if !matches!(children.get(&entry.name), Some(EntryKind::Dir { .. })) {
                children.insert(entry.name, entry.kind);
            }
            Ok::<(), FormatError>(())
        })?;
        let children = Arc::new(children);
        let mut parsed = lock(&self.parsed);
        parsed.push_front((dir.to_string(), children.clone()));
        parsed.truncate(PARSED_DIRS);
        Ok(children)
    }
}

fn join(dir: &str, name: &str) -> String {
    if dir.is_empty() {
        name.to_string()
    } else {
        format!("{dir}/{name}")
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, SystemTime, UNIX_EPOCH};

    use super::*;
    use crate::manifest::format::write_dir_file;

    fn at(secs: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(secs)
    }

    fn file(size: u64) -> EntryKind {
        EntryKind::File {
            size,
            etag: format!("e{size}"),
            mtime: at(size),
            owner: None,
        }
    }

    /// Rows in listing order (`format::sort_key`); `sorted` says so in the manifest's index,
    /// so lookups bisect the TSVs until the index is built.
    fn write_manifest(root: &Path, sorted: bool) {
        write_dir_file(
            root,
            "",
            &[
                Entry::file("clash", 2, "e2", at(2)),
                Entry::dir("clash"),
                Entry::dir("d"),
                Entry::file("top", 1, "e1", at(1)),
            ],
        )
        .expect("root");
        write_dir_file(
            root,
            "d",
            &[
                Entry::file("a", 3, "e3", at(3)),
                Entry::file("b", 4, "e4", at(4)),
            ],
        )
        .expect("d");
        let info = ManifestInfo {
            sorted_rows: sorted,
            ..ManifestInfo::for_test()
        };
        info.write(root).expect("info");
    }

    /// The directories of the manifest sample (`tests/fixtures/formats/manifest`), with their
    /// rows: escaped names, owners, a top-level directory whose TSV name is escaped.
    fn sample_dirs() -> Vec<(&'static str, Vec<Entry>)> {
        let owner = Ownership {
            perm: 0o750,
            uid: 1234,
            gid: 100,
        };
        vec![
            (
                "",
                vec![
                    Entry::dir("_under"),
                    Entry::dir("d").owned(Some(owner)),
                    Entry::file("tab\there", 5, "\"etag-5\"", at(5)),
                    Entry::file("top", 1, "e1", at(1)),
                ],
            ),
            (
                "_under",
                vec![Entry::file("back\\slash\nnewline", 2, "e2", at(2))],
            ),
            (
                "d",
                vec![
                    Entry::file("a", 3, "e3-1", at(1_700_000_000)).owned(Some(owner)),
                    Entry::file("b%c", 4, "e4", at(4)),
                ],
            ),
        ]
    }

    /// Writes the manifest sample: the TSVs and `manifest_index.json`, the index built from
    /// them, and a delta log of one upsert and one deletion.
    fn write_manifest_sample() {
        let dir = tempfile::tempdir().expect("tempdir");
        for (path, entries) in sample_dirs() {
            write_dir_file(dir.path(), path, &entries).expect("tsv");
        }
        ManifestInfo {
            sorted_rows: true,
            ..ManifestInfo::for_test()
        }
        .write(dir.path())
        .expect("info");
        let manifest = Manifest::open(dir.path(), true)
            .expect("open")
            .expect("some");
        manifest.load_or_build_index().expect("index");
        manifest
            .record("_under/new", Change::Upsert(file(9)))
            .expect("record");
        manifest.record("top", Change::Deleted).expect("record");
        drop(manifest);
        crate::format_fixtures::store("manifest", dir.path());
    }

    /// Every directory of the sample as the manifest shows it (base and delta).
    fn assert_is_the_sample(manifest: &Manifest) {
        for (path, entries) in sample_dirs() {
            let listed = manifest.list(path).expect("list");
            for entry in entries {
                let shown = if path.is_empty() && entry.name == "top" {
                    None
                } else {
                    Some(&entry.kind)
                };
                assert_eq!(listed.get(&entry.name), shown, "{path}/{}", entry.name);
                let looked_up = manifest.lookup(path, &entry.name).expect("lookup");
                assert_eq!(looked_up.as_ref(), shown, "{path}/{}", entry.name);
            }
        }
        assert_eq!(
            manifest.lookup("_under", "new").expect("lookup"),
            Some(file(9))
        );
    }

    #[test]
    fn the_manifest_sample_is_served_from_its_tsvs_its_index_and_its_delta_log() {
        if crate::format_fixtures::writing() {
            write_manifest_sample();
        }
        // From the TSV files, as before the index is built.
        let dir = tempfile::tempdir().expect("tempdir");
        crate::format_fixtures::copy_to("manifest", dir.path());
        std::fs::remove_file(dir.path().join(INDEX_DB)).expect("remove the index");
        let manifest = Manifest::open(dir.path(), false)
            .expect("open")
            .expect("some");
        assert_eq!(
            manifest.info().totals.objects,
            ManifestInfo::for_test().totals.objects
        );
        assert!(!manifest.index_ready());
        assert_is_the_sample(&manifest);

        // From the index the sample holds, used as it is, not rebuilt.
        let dir = tempfile::tempdir().expect("tempdir");
        crate::format_fixtures::copy_to("manifest", dir.path());
        let info = ManifestInfo::read(dir.path()).expect("read").expect("some");
        let index = Index::open_complete(&dir.path().join(INDEX_DB), &info).expect("open");
        assert!(
            index.is_some(),
            "the sample's index is complete and current"
        );
        let manifest = Manifest::open(dir.path(), false)
            .expect("open")
            .expect("some");
        manifest.load_or_build_index().expect("index");
        assert!(manifest.index_ready());
        assert_is_the_sample(&manifest);
    }

    fn names(map: &BTreeMap<String, EntryKind>) -> Vec<&str> {
        map.keys().map(String::as_str).collect()
    }

    #[test]
    fn no_manifest_means_none() {
        let dir = tempfile::tempdir().expect("tempdir");
        assert!(Manifest::open(dir.path(), true).expect("open").is_none());
    }

    #[test]
    fn a_sorted_manifest_is_looked_up_without_parsing_a_whole_tsv() {
        let dir = tempfile::tempdir().expect("tempdir");
        write_manifest(dir.path(), true);
        let m = Manifest::open(dir.path(), false)
            .expect("open")
            .expect("manifest");
        assert!(!m.index_ready());
        assert_eq!(m.lookup("", "clash").expect("clash"), Some(EntryKind::DIR));
        assert_eq!(m.lookup("", "top").expect("top"), Some(file(1)));
        assert_eq!(m.lookup("d", "b").expect("b"), Some(file(4)));
        assert_eq!(m.lookup("d", "c").expect("c"), None);
        assert_eq!(m.lookup("nowhere", "x").expect("x"), None);
        assert!(lock(&m.parsed).is_empty(), "no TSV parsed whole");
    }

    #[test]
    fn tsv_and_index_answers_agree_and_the_overlay_applies_to_both() {
        for sorted in [false, true] {
            tsv_and_index_answers_agree(sorted);
        }
    }

    fn tsv_and_index_answers_agree(sorted: bool) {
        let dir = tempfile::tempdir().expect("tempdir");
        write_manifest(dir.path(), sorted);
        let manifest = Manifest::open(dir.path(), true)
            .expect("open")
            .expect("manifest");
        manifest.record("d/a", Change::Deleted).expect("delete");
        manifest
            .record("d/new", Change::Upsert(file(9)))
            .expect("create");
        manifest
            .record("made/deep/x", Change::Upsert(file(8)))
            .expect("create deep");
        manifest
            .record("top", Change::Upsert(file(7)))
            .expect("overwrite");

        let check = |m: &Manifest| {
            assert_eq!(
                names(&m.list("").expect("root")),
                ["clash", "d", "made", "top"]
            );
            assert_eq!(m.lookup("", "clash").expect("clash"), Some(EntryKind::DIR));
            assert_eq!(m.lookup("", "top").expect("top"), Some(file(7)));
            assert_eq!(names(&m.list("d").expect("d")), ["b", "new"]);
            assert_eq!(m.lookup("d", "a").expect("a"), None);
            assert_eq!(m.lookup("d", "b").expect("b"), Some(file(4)));
            assert_eq!(m.lookup("", "made").expect("made"), Some(EntryKind::DIR));
            assert_eq!(names(&m.list("made/deep").expect("deep")), ["x"]);
            assert_eq!(m.lookup("d", "zzz").expect("zzz"), None);
        };
        assert!(!manifest.index_ready());
        check(&manifest);
        manifest.load_or_build_index().expect("index");
        assert!(manifest.index_ready());
        check(&manifest);
        drop(manifest);

        // A later mount replays the log and reuses the index.
        let again = Manifest::open(dir.path(), false)
            .expect("open")
            .expect("manifest");
        again.load_or_build_index().expect("index reused");
        check(&again);
        assert!(
            again.record("x", Change::Deleted).is_ok(),
            "an existing log stays writable"
        );
    }

    #[test]
    fn a_read_only_mount_without_a_log_cannot_record() {
        let dir = tempfile::tempdir().expect("tempdir");
        write_manifest(dir.path(), false);
        let manifest = Manifest::open(dir.path(), false)
            .expect("open")
            .expect("manifest");
        assert!(
            !dir.path().join(DELTA_DIR).exists(),
            "a read-only open creates nothing"
        );
        let error = manifest
            .record("x", Change::Deleted)
            .expect_err("read-only")
            .to_string();
        assert!(error.contains("delta log is not open"), "{error}");
    }
}
