//! The kernel's side of a mount — the inode numbers it holds, its open file and directory
//! handles — journalled on local disk so that the next server of a live connection (an fd
//! holder kept it open across a crash or an upgrade) answers them as this one would have.
//!
//! The kernel never tells a new server what it holds: a node id or handle the server does not
//! know is answered `ESTALE`/`EBADF` and the application holding it fails. So every change the
//! kernel is told of is appended here *before* the kernel is answered: a new inode (its parent,
//! name, backend and path), a rename, a name removed, an inode forgotten, a handle opened or
//! closed. One JSON line per change, appended to the log file, no fsync: the page
//! cache survives the process, not the node — and a node reboot ends the FUSE connection anyway.
//! A process killed mid-append leaves at most a torn last line, which replay skips (it belongs
//! to a change the kernel was never told of).
//!
//! Lookup counts are not journalled (that would be a write per lookup). The kernel sends one
//! FORGET with its whole count when it drops an inode, so a restored inode counts only the
//! lookups since the restore: a FORGET for more than that is the kernel letting go entirely
//! (see `InodeTable::forget`).
//!
//! The journal is compacted once it holds much more than the live state: appends move to a
//! new generation's log first, then a snapshot of the live state becomes that generation's
//! base (written aside, renamed into place), then the older files go. Replay reads the newest
//! complete base and every log from its generation on, so a crash at any step loses nothing;
//! records are idempotent, so a change that is both in the snapshot and in the new log is
//! simply applied twice.
//!
//! An append costs no system call: the log is written through a shared mapping of its tail
//! (`mapped_log`), a copy into the page cache under the journal's lock. A `write(2)` per record
//! was most of the journal's cost on `ls -l` and `find` (`bench/journal-cost.sh`), where nearly
//! every reply to the kernel carries a change to record first.

use std::collections::BTreeMap;
use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};

use serde::{Deserialize, Serialize};

use super::mapped_log::{self, MappedLog};

/// Appends past which a compaction is due, on top of four times the live state.
const COMPACT_SLACK: u64 = 100_000;
const LOG_PREFIX: &str = "log.";
const BASE_PREFIX: &str = "base.";

/// One change the kernel was told of.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "r")]
pub enum Record {
    /// A new inode; file metadata as first seen (a restored file is asked about again).
    #[serde(rename = "node")]
    Node(NodeRecord),
    /// An inode moved to `name` in `parent`, at `path`.
    #[serde(rename = "moved")]
    Moved {
        ino: u64,
        parent: u64,
        name: String,
        path: String,
    },
    /// `name` in `parent` no longer resolves to its inode (unlinked, removed, renamed away).
    #[serde(rename = "unnamed")]
    Unnamed { parent: u64, name: String },
    /// The kernel forgot the inode.
    #[serde(rename = "forgotten")]
    Forgotten { ino: u64 },
    #[serde(rename = "file")]
    File(FileRecord),
    #[serde(rename = "closed")]
    Closed { fh: u64 },
    #[serde(rename = "dir")]
    Dir { fh: u64, ino: u64 },
    #[serde(rename = "dir_closed")]
    DirClosed { fh: u64 },
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeRecord {
    pub ino: u64,
    pub parent: u64,
    pub name: String,
    /// The backend's directory name.
    pub backend: String,
    pub path: String,
    pub dir: bool,
}

/// An open file handle, with the object version it is pinned to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileRecord {
    pub fh: u64,
    pub ino: u64,
    pub backend: String,
    pub key: String,
    pub etag: String,
    pub size: u64,
    pub writable: bool,
    /// How the kernel reads it: a passthrough handle's reads never reach a server.
    #[serde(default)]
    pub io: super::passthrough::IoRecord,
}

/// The kernel's state as the journal last recorded it.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Restored {
    pub nodes: BTreeMap<u64, NodeRecord>,
    /// (parent, name) → inode, for names that still resolve.
    pub names: BTreeMap<(u64, String), u64>,
    pub files: BTreeMap<u64, FileRecord>,
    /// Directory handle → its directory's inode.
    pub dirs: BTreeMap<u64, u64>,
}

impl Restored {
    fn apply(&mut self, record: Record) {
        match record {
            Record::Node(node) => {
                self.names
                    .insert((node.parent, node.name.clone()), node.ino);
                self.nodes.insert(node.ino, node);
            }
            Record::Moved {
                ino,
                parent,
                name,
                path,
            } => {
                if let Some(node) = self.nodes.get_mut(&ino) {
                    let old = (node.parent, std::mem::take(&mut node.name));
                    if self.names.get(&old) == Some(&ino) {
                        self.names.remove(&old);
                    }
                    node.parent = parent;
                    node.name = name.clone();
                    node.path = path;
                }
                self.names.insert((parent, name), ino);
            }
            Record::Unnamed { parent, name } => {
                self.names.remove(&(parent, name));
            }
            Record::Forgotten { ino } => {
                if let Some(node) = self.nodes.remove(&ino) {
                    let key = (node.parent, node.name);
                    if self.names.get(&key) == Some(&ino) {
                        self.names.remove(&key);
                    }
                }
            }
            Record::File(file) => {
                self.files.insert(file.fh, file);
            }
            Record::Closed { fh } => {
                self.files.remove(&fh);
            }
            Record::Dir { fh, ino } => {
                self.dirs.insert(fh, ino);
            }
            Record::DirClosed { fh } => {
                self.dirs.remove(&fh);
            }
        }
    }

    /// Writes the records that rebuild this state from nothing (tests: a mount snapshots its
    /// own tables, `Fs::compact_kernel_state`).
    #[cfg(test)]
    fn write_to(&self, out: &mut Snapshot) {
        let nodes: Vec<&NodeRecord> = self.nodes.values().collect();
        out.nodes(
            &nodes,
            |node| (*node).clone(),
            |node| {
                let held = self.names.get(&(node.parent, node.name.clone()));
                NameHeld::of(node.ino, held.copied())
            },
        );
        for file in self.files.values() {
            out.record(&Record::File(file.clone()));
        }
        for (&fh, &ino) in &self.dirs {
            out.record(&Record::Dir { fh, ino });
        }
    }

    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty() && self.files.is_empty() && self.dirs.is_empty()
    }
}

/// The live state a compaction writes as the new base, encoded as it is handed over: about 100
/// bytes a record, where the tables' own records (a node's three strings, map entries) took
/// three times that, twice, at the moment a listing had the most inodes.
#[derive(Debug, Default)]
pub struct Snapshot {
    body: Vec<u8>,
    records: u64,
}

impl Snapshot {
    pub fn record(&mut self, record: &Record) {
        if encode_line(record, &mut self.body) {
            self.records += 1;
        }
    }

    /// Writes a table's nodes: `record` makes a node's record, `name` says who holds the node's
    /// (parent, name) now. A node's own name may have gone (unlinked) or been taken by another
    /// (renamed over, replaced): such nodes come first, each followed by what unnames its name if
    /// nothing holds it, then the nodes that hold their names, whose records map the names again.
    /// Each record is made once, when it is written.
    pub fn nodes<N>(
        &mut self,
        nodes: &[N],
        record: impl Fn(&N) -> NodeRecord,
        name: impl Fn(&N) -> NameHeld,
    ) {
        let mut holders = Vec::new();
        for (at, node) in nodes.iter().enumerate() {
            let held = name(node);
            if held == NameHeld::Itself {
                holders.push(at);
                continue;
            }
            let node_record = record(node);
            let unnamed = (held == NameHeld::Nobody).then(|| Record::Unnamed {
                parent: node_record.parent,
                name: node_record.name.clone(),
            });
            self.record(&Record::Node(node_record));
            if let Some(unnamed) = unnamed {
                self.record(&unnamed);
            }
        }
        for at in holders {
            self.record(&Record::Node(record(&nodes[at])));
        }
    }
}

/// Who holds a node's (parent, name) now: the node itself, another node, or nobody.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NameHeld {
    Itself,
    Another,
    Nobody,
}

impl NameHeld {
    /// `ino`'s name, resolving to `held` (if anything).
    pub fn of(ino: u64, held: Option<u64>) -> NameHeld {
        match held {
            Some(holder) if holder == ino => NameHeld::Itself,
            Some(_) => NameHeld::Another,
            None => NameHeld::Nobody,
        }
    }
}

/// Appends `record` to `out` as one JSON line; false (logged, `out` unchanged) if it cannot be
/// encoded.
fn encode_line(record: &Record, out: &mut Vec<u8>) -> bool {
    let start = out.len();
    if let Err(e) = serde_json::to_writer(&mut *out, record) {
        out.truncate(start);
        tracing::error!(error = %e, "cannot encode a kernel-state record");
        return false;
    }
    out.push(b'\n');
    true
}

/// The journal of one mount's kernel state, in a directory of its own.
#[derive(Debug)]
pub struct KernelState {
    dir: PathBuf,
    log: Mutex<Log>,
    /// Records appended since the last compaction.
    appended: AtomicU64,
    /// Records the last snapshot held.
    live: AtomicU64,
}

#[derive(Debug)]
struct Log {
    generation: u64,
    file: MappedLog,
    /// A record being encoded (kept to reuse its allocation).
    line: Vec<u8>,
}

impl KernelState {
    /// A fresh journal in `dir` (created if missing): whatever an earlier mount left is removed.
    pub fn create(dir: &Path) -> io::Result<KernelState> {
        std::fs::create_dir_all(dir)?;
        for (_, path) in journal_files(dir)? {
            std::fs::remove_file(path)?;
        }
        KernelState::open_generation(dir, 0)
    }

    /// Opens the journal a previous server of the same connection left in `dir` and returns
    /// what it recorded. Call [`KernelState::compact`] with the state once it is applied.
    pub fn resume(dir: &Path) -> io::Result<(KernelState, Restored)> {
        std::fs::create_dir_all(dir)?;
        let files = journal_files(dir)?;
        let base = files
            .iter()
            .filter(|(kind, _)| kind.0 == BASE_PREFIX)
            .map(|(kind, _)| kind.1)
            .max()
            .unwrap_or(0);
        let mut restored = Restored::default();
        let mut last = base;
        let mut ordered: Vec<&(FileKind, PathBuf)> = files
            .iter()
            .filter(|(kind, _)| kind.1 >= base)
            .filter(|(kind, _)| kind.0 == LOG_PREFIX || kind.1 == base)
            .collect();
        // The base of a generation comes before its log.
        ordered.sort_by_key(|(kind, _)| (kind.1, kind.0 == LOG_PREFIX));
        for (kind, path) in ordered {
            last = last.max(kind.1);
            replay(path, &mut restored)?;
        }
        let state = KernelState::open_generation(dir, last + 1)?;
        Ok((state, restored))
    }

    fn open_generation(dir: &Path, generation: u64) -> io::Result<KernelState> {
        let file = open_log(dir, generation)?;
        Ok(KernelState {
            dir: dir.to_path_buf(),
            log: Mutex::new(Log {
                generation,
                file,
                line: Vec::new(),
            }),
            appended: AtomicU64::new(0),
            live: AtomicU64::new(0),
        })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Records a change before the kernel hears of it. A failure is logged, not returned: the
    /// mount keeps serving, only its survival of a restart is at stake.
    pub fn append(&self, record: &Record) {
        let mut log = self.lock_log();
        let Log { file, line, .. } = &mut *log;
        line.clear();
        if !encode_line(record, line) {
            return;
        }
        self.appended.fetch_add(1, Ordering::Relaxed);
        if let Err(e) = file.append(line) {
            tracing::warn!(dir = %self.dir.display(), error = %e,
                "cannot journal the kernel's state; a restart of this process will not find it");
        }
    }

    fn lock_log(&self) -> std::sync::MutexGuard<'_, Log> {
        self.log.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether the journal holds enough more than the live state to be worth compacting.
    pub fn wants_compaction(&self) -> bool {
        let live = self.live.load(Ordering::Relaxed);
        self.appended.load(Ordering::Relaxed) > live.saturating_mul(4) + COMPACT_SLACK
    }

    /// Rewrites the journal as what `snapshot` writes, the live state. Appends made while the
    /// snapshot is taken go to the new generation's log, so none is lost (see the module doc).
    pub fn compact(&self, snapshot: impl FnOnce(&mut Snapshot)) -> io::Result<()> {
        let old = {
            let mut log = self.lock_log();
            let generation = log.generation + 1;
            log.file = open_log(&self.dir, generation)?;
            self.appended.store(0, Ordering::Relaxed);
            std::mem::replace(&mut log.generation, generation)
        };
        let generation = old + 1;
        let mut records = Snapshot::default();
        snapshot(&mut records);
        let temp = self.dir.join(format!(".{BASE_PREFIX}{generation}.tmp"));
        std::fs::write(&temp, &records.body)?;
        std::fs::rename(&temp, self.dir.join(format!("{BASE_PREFIX}{generation}")))?;
        self.live.store(records.records, Ordering::Relaxed);
        for (kind, path) in journal_files(&self.dir)? {
            if kind.1 < generation {
                std::fs::remove_file(path)?;
            }
        }
        Ok(())
    }
}

/// (prefix, generation) of a journal file.
type FileKind = (&'static str, u64);

fn journal_files(dir: &Path) -> io::Result<Vec<(FileKind, PathBuf)>> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        for prefix in [LOG_PREFIX, BASE_PREFIX] {
            if let Some(generation) = name.strip_prefix(prefix).and_then(|g| g.parse().ok()) {
                files.push(((prefix, generation), entry.path()));
            }
        }
    }
    Ok(files)
}

fn open_log(dir: &Path, generation: u64) -> io::Result<MappedLog> {
    MappedLog::create(&dir.join(format!("{LOG_PREFIX}{generation}")))
}

fn replay(path: &Path, into: &mut Restored) -> io::Result<()> {
    for line in mapped_log::read_lines(io::BufReader::new(File::open(path)?)) {
        match serde_json::from_slice::<Record>(&line?) {
            Ok(record) => into.apply(record),
            // Only the last line can be torn (a process killed mid-append); a change the
            // kernel was never told of.
            Err(e) => tracing::warn!(path = %path.display(), error = %e,
                "skipping an unreadable kernel-state record"),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(ino: u64, parent: u64, name: &str) -> Record {
        Record::Node(NodeRecord {
            ino,
            parent,
            name: name.into(),
            backend: "b".into(),
            path: name.into(),
            dir: false,
        })
    }

    fn file(fh: u64, ino: u64) -> Record {
        Record::File(FileRecord {
            fh,
            ino,
            backend: "b".into(),
            key: "k".into(),
            etag: "e".into(),
            size: 3,
            writable: false,
            io: Default::default(),
        })
    }

    /// The records in the journal's current log, as the next process would read them.
    fn logged(dir: &Path) -> Vec<Record> {
        let log = io::BufReader::new(File::open(dir.join("log.0")).expect("log"));
        mapped_log::read_lines(log)
            .map(|line| serde_json::from_slice(&line.expect("read")).expect("a record"))
            .collect()
    }

    #[test]
    fn each_change_is_in_the_log_at_once_in_the_order_made() {
        let dir = tempfile::tempdir().expect("tempdir");
        let state = std::sync::Arc::new(KernelState::create(dir.path()).expect("create"));
        state.append(&node(2, 1, "a"));
        assert_eq!(logged(dir.path()), [node(2, 1, "a")]);
        let other = std::sync::Arc::clone(&state);
        std::thread::spawn(move || other.append(&Record::Forgotten { ino: 2 }))
            .join()
            .expect("the other thread");
        state.append(&file(7, 3));
        assert_eq!(
            logged(dir.path()),
            [node(2, 1, "a"), Record::Forgotten { ino: 2 }, file(7, 3)]
        );
        // What a successor replays from a log its writer never closed (killed).
        let (_, restored) = KernelState::resume(dir.path()).expect("resume");
        assert!(restored.nodes.is_empty());
        assert_eq!(restored.files.len(), 1);
    }

    #[test]
    fn replay_returns_what_was_recorded_and_skips_a_torn_tail() {
        let dir = tempfile::tempdir().expect("tempdir");
        let state = KernelState::create(dir.path()).expect("create");
        for record in [
            node(2, 1, "a"),
            node(3, 1, "b"),
            Record::Moved {
                ino: 3,
                parent: 2,
                name: "c".into(),
                path: "a/c".into(),
            },
            node(4, 1, "gone"),
            Record::Forgotten { ino: 4 },
            file(7, 2),
            file(8, 3),
            Record::Closed { fh: 7 },
            Record::Dir { fh: 9, ino: 2 },
        ] {
            state.append(&record);
        }
        // Killed mid-append (the state is not dropped, so the window's zeros stay): the first
        // bytes of a record, then zeros.
        let log = dir.path().join("log.0");
        let end = std::fs::read(&log)
            .expect("log")
            .iter()
            .position(|&b| b == 0);
        let torn = File::options().write(true).open(&log).expect("log");
        std::os::unix::fs::FileExt::write_at(
            &torn,
            b"{\"r\":\"node\",\"ino\":5,",
            end.expect("zeros after the records") as u64,
        )
        .expect("torn");

        let (_state, restored) = KernelState::resume(dir.path()).expect("resume");
        assert_eq!(restored.nodes.keys().copied().collect::<Vec<_>>(), [2, 3]);
        assert_eq!(restored.nodes[&3].path, "a/c");
        assert_eq!(restored.names.get(&(2, "c".into())), Some(&3));
        assert_eq!(restored.names.get(&(1, "b".into())), None);
        assert_eq!(restored.files.keys().copied().collect::<Vec<_>>(), [8]);
        assert_eq!(restored.dirs.get(&9), Some(&2));
    }

    #[test]
    fn compaction_keeps_the_state_and_the_appends_made_after_it() {
        let dir = tempfile::tempdir().expect("tempdir");
        let state = KernelState::create(dir.path()).expect("create");
        let mut expected = Restored::default();
        for ino in 2..50 {
            let record = node(ino, 1, &format!("n{ino}"));
            expected.apply(record.clone());
            state.append(&record);
        }
        for ino in 2..40 {
            let record = Record::Forgotten { ino };
            expected.apply(record.clone());
            state.append(&record);
        }
        state
            .compact(|out| expected.write_to(out))
            .expect("compact");
        let late = file(3, 45);
        expected.apply(late.clone());
        state.append(&late);
        drop(state);

        let mut names: Vec<String> = std::fs::read_dir(dir.path())
            .expect("dir")
            .map(|e| e.expect("entry").file_name().into_string().expect("utf-8"))
            .collect();
        names.sort();
        assert_eq!(names, ["base.1", "log.1"]);
        let (_state, restored) = KernelState::resume(dir.path()).expect("resume");
        assert_eq!(restored, expected);
    }

    fn write_lines(path: &Path, records: &[Record]) {
        let mut body = Vec::new();
        for record in records {
            serde_json::to_writer(&mut body, record).expect("encode");
            body.push(b'\n');
        }
        std::fs::write(path, body).expect("write");
    }

    /// The sample journal (`tests/fixtures/formats/kernel-state`): a base written by a
    /// compaction, then a log of every kind of record after it.
    fn write_kernel_state_sample() -> Restored {
        let dir = tempfile::tempdir().expect("tempdir");
        let state = KernelState::create(dir.path()).expect("create");
        let mut expected = Restored::default();
        let append = |record: Record, expected: &mut Restored| {
            expected.apply(record.clone());
            state.append(&record);
        };
        append(node(2, 1, "a"), &mut expected);
        append(node(3, 1, "b"), &mut expected);
        append(file(7, 3), &mut expected);
        state
            .compact(|out| expected.write_to(out))
            .expect("compact");
        for record in [
            node(4, 2, "name with \"quotes\" and \u{e9}"),
            Record::Moved {
                ino: 3,
                parent: 2,
                name: "c".into(),
                path: "a/c".into(),
            },
            node(5, 1, "gone"),
            Record::Unnamed {
                parent: 1,
                name: "gone".into(),
            },
            Record::Forgotten { ino: 5 },
            file(8, 4),
            Record::Closed { fh: 7 },
            Record::Dir { fh: 9, ino: 2 },
            Record::Dir { fh: 10, ino: 1 },
            Record::DirClosed { fh: 10 },
        ] {
            append(record, &mut expected);
        }
        drop(state);
        crate::format_fixtures::store("kernel-state", dir.path());
        expected
    }

    #[test]
    fn the_kernel_state_sample_is_restored_as_it_was_recorded() {
        if crate::format_fixtures::writing() {
            write_kernel_state_sample();
        }
        let dir = tempfile::tempdir().expect("tempdir");
        crate::format_fixtures::copy_to("kernel-state", dir.path());
        let (_state, restored) = KernelState::resume(dir.path()).expect("resume");
        assert_eq!(
            restored.nodes.keys().copied().collect::<Vec<_>>(),
            [2, 3, 4]
        );
        assert_eq!(restored.nodes[&3].path, "a/c");
        assert_eq!(restored.nodes[&4].name, "name with \"quotes\" and \u{e9}");
        assert_eq!(restored.names.get(&(2, "c".into())), Some(&3));
        assert_eq!(restored.names.get(&(1, "b".into())), None);
        assert_eq!(restored.names.get(&(1, "gone".into())), None);
        assert_eq!(restored.files.keys().copied().collect::<Vec<_>>(), [8]);
        assert_eq!(
            restored.files[&8],
            match file(8, 4) {
                Record::File(f) => f,
                _ => unreachable!(),
            }
        );
        assert_eq!(restored.dirs.iter().collect::<Vec<_>>(), [(&9, &2)]);
    }

    #[test]
    fn a_compaction_cut_short_at_either_step_loses_nothing() {
        // Killed after the swap, before the base: both logs count, oldest first.
        let dir = tempfile::tempdir().expect("tempdir");
        write_lines(
            &dir.path().join("log.0"),
            &[node(2, 1, "a"), node(3, 1, "b")],
        );
        write_lines(&dir.path().join("log.1"), &[Record::Forgotten { ino: 3 }]);
        let (_state, restored) = KernelState::resume(dir.path()).expect("resume");
        assert_eq!(restored.nodes.keys().copied().collect::<Vec<_>>(), [2]);

        // Killed after the base, before the old files went: the old log is not read again
        // (it would bring back what the base knows was forgotten).
        let dir = tempfile::tempdir().expect("tempdir");
        write_lines(
            &dir.path().join("log.0"),
            &[node(2, 1, "a"), node(3, 1, "b")],
        );
        write_lines(&dir.path().join("base.1"), &[node(2, 1, "a")]);
        write_lines(&dir.path().join("log.1"), &[node(4, 1, "c")]);
        let (_state, restored) = KernelState::resume(dir.path()).expect("resume");
        assert_eq!(restored.nodes.keys().copied().collect::<Vec<_>>(), [2, 4]);
    }

    #[test]
    fn a_snapshot_keeps_names_taken_over_and_names_gone() {
        let mut expected = Restored::default();
        for record in [
            node(2, 1, "x"),
            // "x" replaced by a new inode while the kernel still holds the old one.
            node(3, 1, "x"),
            node(4, 1, "y"),
            Record::Unnamed {
                parent: 1,
                name: "y".into(),
            },
        ] {
            expected.apply(record);
        }
        let mut out = Snapshot::default();
        expected.write_to(&mut out);
        let mut rebuilt = Restored::default();
        for line in mapped_log::read_lines(&out.body[..]) {
            rebuilt.apply(serde_json::from_slice(&line.expect("read")).expect("a record"));
        }
        assert_eq!(rebuilt, expected);
        assert_eq!(rebuilt.names.get(&(1, "x".into())), Some(&3));
        assert_eq!(rebuilt.names.get(&(1, "y".into())), None);
    }

    #[test]
    fn a_fresh_journal_forgets_an_earlier_mount() {
        let dir = tempfile::tempdir().expect("tempdir");
        let state = KernelState::create(dir.path()).expect("create");
        state.append(&node(2, 1, "a"));
        drop(state);
        drop(KernelState::create(dir.path()).expect("create again"));
        let (_state, restored) = KernelState::resume(dir.path()).expect("resume");
        assert!(restored.is_empty());
    }
}
