//! The delta log of a writable manifest-backed mount, and the overlay it replays into.
//!
//! The base manifest is an immutable snapshot. Every change committed to the object store
//! through the mount is appended here afterwards as an *upsert* (a file with its new attributes,
//! or a directory) or a *tombstone*, so a later mount sees the namespace as it is without
//! listing it again. The log is `<manifest>/_msfs_delta/delta.log`, a framed log
//! (`crate::framed_log`) whose magic is `MSFSDLT1`, each record's body `[path length u32][path]
//! [attributes]` in the codec's form, or a single tombstone tag for a deletion. A crash can tear
//! only the last record; replay stops at the first record whose frame or checksum does not add
//! up and cuts the file there, so the next append starts clean. Each append is fsynced before
//! the mount replies: an acknowledged change survives a crash.

use std::collections::BTreeMap;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read as _, Write};
use std::path::{Path, PathBuf};

use super::codec::{decode, encode};
use super::format::EntryKind;
use crate::framed_log::{self, Layout, Read, Sync};

pub const DELTA_DIR: &str = "_msfs_delta";
const LOG_FILE: &str = "delta.log";
/// A record larger than 1 MiB cannot be ours (paths are at most a few KiB): it is torn.
const LAYOUT: Layout = Layout {
    header: framed_log::Header::Magic { family: b"MSFSDLT" },
    version: 1,
    reads: &[1],
    max_body: 1 << 20,
};
const TOMBSTONE_TAG: u8 = 2;

#[derive(Debug, thiserror::Error)]
pub enum DeltaError {
    #[error("delta log {}: {source}", path.display())]
    Io { path: PathBuf, source: io::Error },
    #[error("delta log {}: not a delta log (bad header); move it away to start a new one", path.display())]
    BadHeader { path: PathBuf },
}

/// What happened to one path since the base manifest was generated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    Upsert(EntryKind),
    Deleted,
}

/// An open delta log, positioned for appending.
#[derive(Debug)]
pub struct DeltaLog {
    /// Opened for appending.
    file: File,
    path: PathBuf,
    /// Bytes of the magic and the whole records: where a record that fails halfway is cut
    /// back to.
    len: u64,
}

impl DeltaLog {
    /// Opens (creating if needed) the log of the manifest at `root` and replays it into an
    /// overlay. A torn tail is reported in the log and cut off.
    pub fn open(root: &Path) -> Result<(DeltaLog, Overlay), DeltaError> {
        let dir = root.join(DELTA_DIR);
        let path = dir.join(LOG_FILE);
        let io_error = |source| DeltaError::Io {
            path: path.clone(),
            source,
        };
        fs::create_dir_all(&dir).map_err(io_error)?;
        let mut file = OpenOptions::new()
            .read(true)
            .append(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(io_error)?;
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes).map_err(io_error)?;
        let frames = match LAYOUT.read(&bytes) {
            Read::Log { frames, .. } => frames,
            Read::Foreign => return Err(DeltaError::BadHeader { path }),
            // A crash while the magic itself was written leaves a part of it: a log that never
            // held a record, torn like any last write, so it starts again instead of being
            // refused.
            Read::Empty | Read::Torn => {
                let magic = LAYOUT.magic();
                file.set_len(0).map_err(io_error)?;
                file.write_all(&magic).map_err(io_error)?;
                file.sync_all().map_err(io_error)?;
                let len = magic.len() as u64;
                return Ok((DeltaLog { file, path, len }, Overlay::default()));
            }
        };
        let mut overlay = Overlay::default();
        let mut offset = frames.start() as usize;
        let mut records = 0u64;
        for (body, end) in frames {
            let Some((path, change)) = parse(body) else {
                break;
            };
            overlay.apply(path, change);
            offset = end as usize;
            records += 1;
        }
        if offset < bytes.len() {
            tracing::warn!(
                log = %path.display(),
                records,
                dropped_bytes = bytes.len() - offset,
                "delta log ends in a torn record (a crash while appending); it is ignored"
            );
            file.set_len(offset as u64).map_err(io_error)?;
            file.sync_all().map_err(io_error)?;
        }
        let len = offset as u64;
        Ok((DeltaLog { file, path, len }, overlay))
    }

    /// Appends one change and makes it durable.
    pub fn append(&mut self, path: &str, change: &Change) -> Result<(), DeltaError> {
        let mut payload = Vec::with_capacity(path.len() + 32);
        payload.extend_from_slice(&(path.len() as u32).to_le_bytes());
        payload.extend_from_slice(path.as_bytes());
        match change {
            Change::Upsert(kind) => payload.extend_from_slice(&encode(kind)),
            Change::Deleted => payload.push(TOMBSTONE_TAG),
        }
        let frame = framed_log::frame(&payload);
        framed_log::append(&self.file, self.len, &frame, Sync::Data).map_err(|e| {
            DeltaError::Io {
                path: self.path.clone(),
                source: e.error,
            }
        })?;
        self.len += frame.len() as u64;
        Ok(())
    }
}

/// The path and change a record's body holds; `None` if it does not parse (then it ends the
/// log).
fn parse(payload: &[u8]) -> Option<(String, Change)> {
    let path_len = u32::from_le_bytes(payload.get(0..4)?.try_into().ok()?) as usize;
    let path = std::str::from_utf8(payload.get(4..4 + path_len)?).ok()?;
    let rest = payload.get(4 + path_len..)?;
    let change = if rest == [TOMBSTONE_TAG] {
        Change::Deleted
    } else {
        Change::Upsert(decode(rest)?)
    };
    Some((path.to_string(), change))
}

/// The latest change of every path the log mentions, laid over the base manifest by lookups
/// and listings. Its size follows the number of paths changed through the mount, not the
/// namespace's.
#[derive(Debug, Default, Clone)]
pub struct Overlay {
    changes: BTreeMap<String, Change>,
}

impl Overlay {
    pub fn apply(&mut self, path: String, change: Change) {
        self.changes.insert(path, change);
    }

    pub fn is_empty(&self) -> bool {
        self.changes.is_empty()
    }

    /// The change recorded for exactly `path`.
    pub fn get(&self, path: &str) -> Option<&Change> {
        self.changes.get(path)
    }

    /// Whether something that still exists was recorded below directory `path`, which makes
    /// the directory exist whatever the base manifest says (as a key `a/b/c` makes `a/b` exist).
    pub fn has_live_below(&self, path: &str) -> bool {
        let prefix = format!("{path}/");
        self.changes
            .range(prefix.clone()..)
            .take_while(|(p, _)| p.starts_with(&prefix))
            .any(|(_, change)| matches!(change, Change::Upsert(_)))
    }

    /// What the overlay says about each child of directory `dir` ("" for the root): `Some`
    /// for a child that exists (a recorded upsert, or a directory implied by an upsert deeper
    /// down), `None` for one recorded as deleted.
    pub fn children(&self, dir: &str) -> BTreeMap<String, Option<EntryKind>> {
        let prefix = if dir.is_empty() {
            String::new()
        } else {
            format!("{dir}/")
        };
        let mut children: BTreeMap<String, Option<EntryKind>> = BTreeMap::new();
        for (path, change) in self
            .changes
            .range(prefix.clone()..)
            .take_while(|(p, _)| p.starts_with(&prefix))
        {
            let rest = &path[prefix.len()..];
            match (rest.split_once('/'), change) {
                (None, Change::Upsert(kind)) => {
                    // A directory implied by a deeper upsert stays one.
                    if !matches!(children.get(rest), Some(Some(EntryKind::Dir { .. }))) {
                        children.insert(rest.to_string(), Some(kind.clone()));
                    }
                }
                (None, Change::Deleted) => {
                    children.entry(rest.to_string()).or_insert(None);
                }
                (Some((name, _)), Change::Upsert(_)) => {
                    children.insert(name.to_string(), Some(EntryKind::DIR));
                }
                (Some(_), Change::Deleted) => {}
            }
        }
        children
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, UNIX_EPOCH};

    use super::*;

    fn file(size: u64) -> Change {
        Change::Upsert(EntryKind::File {
            size,
            etag: format!("e{size}"),
            mtime: UNIX_EPOCH + Duration::from_secs(size),
            owner: None,
        })
    }

    #[test]
    fn appended_changes_replay_in_order_after_reopening() {
        let dir = tempfile::tempdir().expect("tempdir");
        {
            let (mut log, overlay) = DeltaLog::open(dir.path()).expect("open");
            assert!(overlay.is_empty());
            log.append("a/x", &file(1)).expect("append");
            log.append("a/x", &file(2)).expect("append");
            log.append("b", &Change::Upsert(EntryKind::DIR))
                .expect("append");
            log.append("c\twith tab", &file(3)).expect("append");
            log.append("gone", &Change::Deleted).expect("append");
        }
        let (_log, overlay) = DeltaLog::open(dir.path()).expect("reopen");
        assert_eq!(overlay.get("a/x"), Some(&file(2)));
        assert_eq!(overlay.get("b"), Some(&Change::Upsert(EntryKind::DIR)));
        assert_eq!(overlay.get("c\twith tab"), Some(&file(3)));
        assert_eq!(overlay.get("gone"), Some(&Change::Deleted));
    }

    #[test]
    fn a_torn_last_record_is_ignored_and_cut_so_appends_continue() {
        let dir = tempfile::tempdir().expect("tempdir");
        {
            let (mut log, _) = DeltaLog::open(dir.path()).expect("open");
            log.append("kept", &file(1)).expect("append");
            log.append("torn", &file(2)).expect("append");
        }
        let path = dir.path().join(DELTA_DIR).join(LOG_FILE);
        let full = fs::metadata(&path).expect("meta").len();
        for cut in 1..20 {
            let f = OpenOptions::new().write(true).open(&path).expect("open");
            f.set_len(full - cut).expect("truncate");
            drop(f);
            let (mut log, overlay) = DeltaLog::open(dir.path()).expect("reopen torn");
            assert_eq!(overlay.get("kept"), Some(&file(1)), "cut {cut}");
            assert_eq!(overlay.get("torn"), None, "cut {cut}");
            log.append("torn", &file(2)).expect("append after repair");
            drop(log);
            let (_, overlay) = DeltaLog::open(dir.path()).expect("reopen repaired");
            assert_eq!(overlay.get("torn"), Some(&file(2)), "cut {cut}");
        }
    }

    #[test]
    fn a_corrupted_record_stops_replay_there() {
        let dir = tempfile::tempdir().expect("tempdir");
        {
            let (mut log, _) = DeltaLog::open(dir.path()).expect("open");
            log.append("one", &file(1)).expect("append");
            log.append("two", &file(2)).expect("append");
        }
        let path = dir.path().join(DELTA_DIR).join(LOG_FILE);
        let mut bytes = fs::read(&path).expect("read");
        let last = bytes.len() - 1;
        bytes[last] ^= 0xff;
        fs::write(&path, &bytes).expect("write");
        let (_, overlay) = DeltaLog::open(dir.path()).expect("reopen");
        assert_eq!(overlay.get("one"), Some(&file(1)));
        assert_eq!(overlay.get("two"), None);
    }

    #[test]
    fn a_foreign_file_is_refused_not_overwritten() {
        let dir = tempfile::tempdir().expect("tempdir");
        fs::create_dir_all(dir.path().join(DELTA_DIR)).expect("mkdir");
        let path = dir.path().join(DELTA_DIR).join(LOG_FILE);
        fs::write(&path, b"not a log at all").expect("write");
        let error = DeltaLog::open(dir.path())
            .expect_err("bad header")
            .to_string();
        assert!(error.contains("bad header"), "{error}");
        assert_eq!(fs::read(&path).expect("read"), b"not a log at all");
    }

    /// The changes the delta-log sample (`tests/fixtures/formats/delta-v1`) holds, in order.
    fn sample_changes() -> Vec<(&'static str, Change)> {
        let owner = crate::manifest::format::Ownership {
            perm: 0o750,
            uid: 1234,
            gid: 100,
        };
        vec![
            ("a/x", file(1)),
            ("a/x", file(2)),
            ("b", Change::Upsert(EntryKind::DIR)),
            (
                "b/owned",
                Change::Upsert(file_kind(3).with_owner(Some(owner))),
            ),
            ("c\twith tab", file(4)),
            ("gone", Change::Deleted),
        ]
    }

    fn file_kind(size: u64) -> EntryKind {
        match file(size) {
            Change::Upsert(kind) => kind,
            Change::Deleted => unreachable!(),
        }
    }

    #[test]
    fn the_delta_log_sample_replays_to_the_changes_it_holds() {
        if crate::format_fixtures::writing() {
            let dir = tempfile::tempdir().expect("tempdir");
            let (mut log, _) = DeltaLog::open(dir.path()).expect("open");
            for (path, change) in sample_changes() {
                log.append(path, &change).expect("append");
            }
            drop(log);
            crate::format_fixtures::store("delta-v1", &dir.path().join(DELTA_DIR));
        }
        let dir = tempfile::tempdir().expect("tempdir");
        crate::format_fixtures::copy_to("delta-v1", &dir.path().join(DELTA_DIR));
        let (_, overlay) = DeltaLog::open(dir.path()).expect("open the sample");
        let mut expected = Overlay::default();
        for (path, change) in sample_changes() {
            expected.apply(path.to_string(), change);
        }
        assert_eq!(overlay.changes, expected.changes);
        assert_eq!(overlay.get("a/x"), Some(&file(2)));
        let path = dir.path().join(DELTA_DIR).join(LOG_FILE);
        assert_eq!(
            fs::read(&path).expect("read"),
            fs::read(crate::format_fixtures::path("delta-v1").join(LOG_FILE)).expect("sample"),
            "a whole log is read as it is, not repaired"
        );
    }

    #[test]
    fn overlay_children_show_upserts_implied_directories_and_deletions() {
        let mut overlay = Overlay::default();
        overlay.apply("d/new".into(), file(1));
        overlay.apply("d/sub/deep/x".into(), file(2));
        overlay.apply("d/old".into(), Change::Deleted);
        overlay.apply("d/gonedir/y".into(), Change::Deleted);
        overlay.apply("other/z".into(), file(3));
        overlay.apply("top".into(), file(4));
        let children = overlay.children("d");
        assert_eq!(
            children.get("new"),
            Some(&Some(match file(1) {
                Change::Upsert(k) => k,
                _ => unreachable!(),
            }))
        );
        assert_eq!(children.get("sub"), Some(&Some(EntryKind::DIR)));
        assert_eq!(children.get("old"), Some(&None));
        assert_eq!(
            children.get("gonedir"),
            None,
            "a deletion deeper down says nothing about d/gonedir"
        );
        assert_eq!(children.len(), 3);
        assert_eq!(
            overlay.children("").keys().collect::<Vec<_>>(),
            ["d", "other", "top"]
        );
        assert!(overlay.has_live_below("d/sub"));
        assert!(!overlay.has_live_below("d/gonedir"));
        assert!(
            !overlay.has_live_below("d/ne"),
            "a name prefix is not a directory"
        );
    }
}
