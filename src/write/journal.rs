//! The upload journal: the multipart uploads this process has started and not yet completed or
//! aborted, recorded on local disk so that the next msfs process aborts exactly those a killed
//! one left.
//!
//! S3 shows a killed writer's upload exactly like a live writer's on another node, so only the
//! process that started an upload can say it is abandoned. Each process keeps its entries in a
//! [`PrivateDir`] of its own (`msfs-uploads-<pid>-<random>`, `flock`ed while it lives), one
//! small file per upload, written right after CreateMultipartUpload returns and removed once
//! the upload is completed or aborted. When a process builds a store (a daemon's backend at
//! mount or reload, a CSI volume at publish or restore), [`UploadJournal::recover`] aborts the
//! journalled uploads of dead processes for that store and removes their entries; entries for
//! stores not built yet (a CSI volume waiting for its republish's secrets) stay until then, and
//! a dead process's directory goes once it is empty. A process that exits with uploads still
//! open (a commit that could not land before an unmount) leaves its directory behind the same
//! way.
//!
//! Entries name their store by [`ObjectStore::id`], endpoint and bucket, not by
//! [`ObjectStore::cache_scope`], which adds who signs: credentials rotate (a CSI secret, STS
//! keys), and whatever credentials now reach the bucket may abort what older ones started (S3
//! decides whether they may). No secret is written: the id never holds one.
//!
//! Entries are not fsynced: they survive the death of the process (the kernel still holds
//! them), not a power loss or a reboot that empties the temp dir; `msfs abort-uploads` and a
//! bucket lifecycle rule remain for those. A process killed between CreateMultipartUpload and
//! its entry leaves an upload no journal knows, for the same remedies.

use std::io;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use serde::{Deserialize, Serialize};

use crate::private_dir::{self, PrivateDir};
use crate::store::{ObjectStore, StoreError};

/// The kind of the journal's private directories.
const KIND: &str = "msfs-uploads";
const FORMAT_VERSION: u32 = 1;
const ENTRY_SUFFIX: &str = ".json";
const TEMP_SUFFIX: &str = ".tmp";

/// One upload, as written to its file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct Entry {
    version: u32,
    /// The store's id (endpoint and bucket); see the module docs.
    store: String,
    pub(super) key: String,
    upload_id: String,
    /// When the upload was started, in seconds since the Unix epoch.
    started: u64,
}

/// What one recovery pass did for a store.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Recovered {
    /// Uploads of dead processes aborted (or found gone already).
    pub aborted: usize,
    /// Uploads of dead processes that could not be aborted; tried again next time.
    pub kept: usize,
}

#[derive(Debug)]
pub struct UploadJournal {
    parent: PathBuf,
    dir: PrivateDir,
    /// One recovery pass at a time: stores opened together (a daemon's backends) would
    /// otherwise abort the same dead uploads twice.
    recovering: tokio::sync::Mutex<()>,
}

impl UploadJournal {
    /// Creates this process's journal directory under `parent`. The dead processes' directories
    /// there are left for [`UploadJournal::recover`].
    pub fn open(parent: &Path) -> Result<UploadJournal, (PathBuf, io::Error)> {
        Ok(UploadJournal {
            parent: parent.to_path_buf(),
            dir: PrivateDir::create_kept(parent, KIND)?,
            recovering: tokio::sync::Mutex::new(()),
        })
    }

    /// Unlocks this process's journal for its successor (see [`PrivateDir::leave`]).
    pub fn leave(&self) {
        self.dir.leave();
    }

    /// Records an upload just started. A failure is logged, not returned: the upload goes on,
    /// and only its cleanup after a crash falls back on `msfs abort-uploads`.
    pub async fn record(&self, store: &dyn ObjectStore, key: &str, upload_id: &str) {
        let entry = Entry {
            version: FORMAT_VERSION,
            store: store.id().to_string(),
            key: key.to_string(),
            upload_id: upload_id.to_string(),
            started: SystemTime::now()
                .duration_since(SystemTime::UNIX_EPOCH)
                .unwrap_or_default()
                .as_secs(),
        };
        let dir = self.dir.path().to_path_buf();
        let written = blocking(move || write_entry(&dir, &entry)).await;
        if let Err(e) = written {
            tracing::warn!(key, dir = %self.dir.path().display(), error = %e,
                "cannot journal a multipart upload; if this process is killed, \
                 `msfs abort-uploads` must clean it");
        }
    }

    /// Forgets an upload that was completed or aborted.
    pub async fn remove(&self, store: &dyn ObjectStore, key: &str, upload_id: &str) {
        let path = self
            .dir
            .path()
            .join(entry_name(store.id(), key, upload_id, ENTRY_SUFFIX));
        if let Err(e) = blocking(move || remove_file(&path)).await {
            tracing::debug!(key, error = %e, "cannot remove a journal entry");
        }
    }

    /// Aborts the journalled uploads of dead processes that were started in `store`'s bucket,
    /// and forgets them; removes a dead process's directory once it is empty. An upload the
    /// store no longer knows (completed, or aborted already) counts as done. One that cannot be
    /// aborted is kept for the next pass; when the store does not answer, the pass stops there
    /// (the rest would fail the same way).
    pub async fn recover(&self, store: &dyn ObjectStore) -> Recovered {
        let _one_pass = self.recovering.lock().await;
        let parent = self.parent.clone();
        let dirs = blocking(move || Ok(private_dir::abandoned(&parent, KIND)))
            .await
            .unwrap_or_default();
        let mut recovered = Recovered::default();
        for dir in dirs {
            let path = dir.path().to_path_buf();
            let entries = blocking(move || Ok(read_entries(&path, true)))
                .await
                .unwrap_or_default();
            let mut unreachable = false;
            for (file, entry) in entries {
                if entry.store != store.id() {
                    continue;
                }
                if unreachable {
                    recovered.kept += 1;
                    continue;
                }
                match store.abort_multipart(&entry.key, &entry.upload_id).await {
                    Ok(()) => {}
                    Err(e) if matches!(e.root(), StoreError::NotFound { .. }) => {}
                    Err(e) => {
                        tracing::warn!(key = %entry.key, error = %e,
                            "cannot abort a multipart upload a killed msfs process left; \
                             trying again when the bucket is next mounted");
                        unreachable = e.root().is_retryable();
                        recovered.kept += 1;
                        continue;
                    }
                }
                tracing::info!(key = %entry.key, started = entry.started,
                    "aborted a multipart upload a killed msfs process left");
                recovered.aborted += 1;
                if let Err(e) = blocking(move || remove_file(&file)).await {
                    tracing::debug!(error = %e, "cannot remove a journal entry");
                }
            }
            // Only once empty; entries for other buckets wait for their stores.
            let _ = blocking(move || {
                std::fs::remove_dir(dir.path())?;
                tracing::info!(path = %dir.path().display(),
                    "removed the upload journal of a killed msfs process");
                Ok(())
            })
            .await;
        }
        recovered
    }

    /// This process's entries, for tests.
    #[cfg(test)]
    pub(super) fn entries(&self) -> Vec<Entry> {
        let mut entries: Vec<Entry> = read_entries(self.dir.path(), false)
            .into_iter()
            .map(|(_, entry)| entry)
            .collect();
        entries.sort_by(|a, b| a.key.cmp(&b.key));
        entries
    }
}

/// Runs journal file I/O off the async runtime (a local disk can stall).
async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> io::Result<T> + Send + 'static,
) -> io::Result<T> {
    tokio::task::spawn_blocking(work)
        .await
        .unwrap_or_else(|e| Err(io::Error::other(e)))
}

/// The entry's file name: a hash of what identifies the upload (ids may hold any byte), the
/// same for the same upload within a process, which is all `remove` needs.
fn entry_name(store: &str, key: &str, upload_id: &str, suffix: &str) -> String {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    (store, key, upload_id).hash(&mut hasher);
    format!("{:016x}{suffix}", hasher.finish())
}

/// Writes `entry` whole or not at all: a temporary file renamed into place.
fn write_entry(dir: &Path, entry: &Entry) -> io::Result<()> {
    let name = |suffix| {
        dir.join(entry_name(
            &entry.store,
            &entry.key,
            &entry.upload_id,
            suffix,
        ))
    };
    let (temp, path) = (name(TEMP_SUFFIX), name(ENTRY_SUFFIX));
    std::fs::write(&temp, serde_json::to_vec(entry)?)?;
    std::fs::rename(&temp, &path)
}

fn remove_file(path: &Path) -> io::Result<()> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

/// The entries in `dir` with their files. A temporary file holding a whole entry (its process
/// died before the rename) counts. In a dead process's directory (`dead`), what does not parse
/// was torn by the kill, will never be finished, and is removed.
fn read_entries(dir: &Path, dead: bool) -> Vec<(PathBuf, Entry)> {
    let Ok(files) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut entries = Vec::new();
    for file in files.flatten() {
        let path = file.path();
        let name = file.file_name();
        let name = name.to_string_lossy();
        if !name.ends_with(ENTRY_SUFFIX) && !name.ends_with(TEMP_SUFFIX) {
            continue;
        }
        let parsed = std::fs::read(&path)
            .ok()
            .and_then(|bytes| serde_json::from_slice::<Entry>(&bytes).ok());
        match parsed {
            Some(entry) if entry.version == FORMAT_VERSION => entries.push((path, entry)),
            Some(_) => {} // another msfs version's: left to it
            None if dead => {
                tracing::debug!(path = %path.display(), "dropping a torn upload journal entry");
                let _ = std::fs::remove_file(&path);
            }
            None => {}
        }
    }
    entries
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::Ordering;

    use super::*;
    use crate::store::testing::TestStore;

    /// A journal directory as a process that is gone would have left it (its PID is above the
    /// kernel's largest, 2^22), holding `entries`.
    fn dead_journal(parent: &Path, entries: &[(&dyn ObjectStore, &str, &str)]) -> PathBuf {
        let dir = parent.join(format!("{KIND}-4194400-00000000deadbeef"));
        std::fs::create_dir(&dir).expect("mkdir");
        for (store, key, upload_id) in entries {
            let entry = Entry {
                version: FORMAT_VERSION,
                store: store.id().to_string(),
                key: key.to_string(),
                upload_id: upload_id.to_string(),
                started: 1,
            };
            write_entry(&dir, &entry).expect("write entry");
        }
        dir
    }

    /// The entries of the upload-journal sample (`tests/fixtures/formats/upload-journal`).
    fn sample_entries() -> Vec<Entry> {
        ["dir/big file", "other"]
            .into_iter()
            .enumerate()
            .map(|(i, key)| Entry {
                version: FORMAT_VERSION,
                store: "s3:http://127.0.0.1:9000/bucket".into(),
                key: key.into(),
                upload_id: format!("upload-{i}"),
                started: 1_700_000_000 + i as u64,
            })
            .collect()
    }

    #[test]
    fn the_upload_journal_sample_is_read_as_written() {
        if crate::format_fixtures::writing() {
            let dir = tempfile::tempdir().expect("tempdir");
            for entry in sample_entries() {
                write_entry(dir.path(), &entry).expect("write entry");
            }
            crate::format_fixtures::store("upload-journal", dir.path());
        }
        let dir = tempfile::tempdir().expect("tempdir");
        crate::format_fixtures::copy_to("upload-journal", dir.path());
        let mut read: Vec<Entry> = read_entries(dir.path(), true)
            .into_iter()
            .map(|(_, entry)| entry)
            .collect();
        read.sort_by(|a, b| a.key.cmp(&b.key));
        assert_eq!(read, sample_entries());
    }

    fn stores(root: &Path) -> (Arc<TestStore>, Arc<TestStore>) {
        let (a, b) = (root.join("a"), root.join("b"));
        std::fs::create_dir(&a).expect("mkdir");
        std::fs::create_dir(&b).expect("mkdir");
        (TestStore::new(&a, "s3:a"), TestStore::new(&b, "s3:b"))
    }

    /// (aborted, kept) of a recovery pass.
    fn counts(done: Recovered) -> (usize, usize) {
        (done.aborted, done.kept)
    }

    async fn pending(store: &TestStore) -> Vec<String> {
        let uploads = store.list_uploads("").await.expect("list uploads");
        uploads.into_iter().map(|u| u.upload_id).collect()
    }

    #[tokio::test]
    async fn uploads_are_recorded_until_completed_or_aborted() {
        let root = tempfile::tempdir().expect("temp dir");
        let (store, _) = stores(root.path());
        let journal = UploadJournal::open(root.path()).expect("journal");
        journal.record(store.as_ref(), "big", "upload-1").await;
        journal.record(store.as_ref(), "copy", "upload-2").await;
        let entries = journal.entries();
        assert_eq!(entries.len(), 2);
        assert_eq!(
            (
                entries[0].store.as_str(),
                entries[0].key.as_str(),
                entries[0].upload_id.as_str()
            ),
            ("s3:a", "big", "upload-1")
        );
        assert!(entries[0].started > 0);
        journal.remove(store.as_ref(), "big", "upload-1").await;
        journal.remove(store.as_ref(), "never", "recorded").await;
        assert_eq!(journal.entries().len(), 1);
        assert_eq!(journal.entries()[0].upload_id, "upload-2");
        let names: Vec<String> = std::fs::read_dir(journal.dir.path())
            .expect("list")
            .flatten()
            .map(|f| f.file_name().to_string_lossy().into_owned())
            .collect();
        assert!(
            names.iter().all(|n| n.ends_with(ENTRY_SUFFIX)),
            "no temporary file is left: {names:?}"
        );
    }

    #[tokio::test]
    async fn a_dead_process_uploads_are_aborted_per_store_and_live_ones_kept() {
        let root = tempfile::tempdir().expect("temp dir");
        let (a, b) = stores(root.path());
        let parent = root.path().join("journals");
        std::fs::create_dir(&parent).expect("mkdir");
        let dead_upload = a.create_multipart("big").await.expect("create");
        let live_upload = a.create_multipart("open").await.expect("create");
        let other_writer = a.create_multipart("theirs").await.expect("create");
        let dead = dead_journal(
            &parent,
            &[
                (a.as_ref(), "big", &dead_upload),
                (a.as_ref(), "done", "completed-long-ago"),
                (b.as_ref(), "elsewhere", "b-upload"),
            ],
        );
        std::fs::write(dead.join("0123456789abcdef.tmp"), b"{\"version\":1,\"sto").expect("torn");
        let journal = UploadJournal::open(&parent).expect("journal");
        journal.record(a.as_ref(), "open", &live_upload).await;
        // Another live process's journal (the lock, not the PID, tells it is alive).
        let other = UploadJournal::open(&parent).expect("journal");
        other.record(a.as_ref(), "theirs", &other_writer).await;

        assert_eq!(counts(journal.recover(a.as_ref()).await), (2, 0));
        let mut left = pending(&a).await;
        left.sort();
        let mut expected = vec![live_upload, other_writer];
        expected.sort();
        assert_eq!(left, expected, "only the dead process's upload is aborted");
        assert_eq!(journal.entries().len(), 1, "the live entry stays");
        assert_eq!(other.entries().len(), 1);
        let files: Vec<_> = std::fs::read_dir(&dead)
            .expect("dead dir")
            .flatten()
            .collect();
        assert_eq!(files.len(), 1, "b's entry waits for b: {files:?}");

        assert_eq!(counts(journal.recover(a.as_ref()).await), (0, 0));
        // b's upload is gone already: that is done too, and the empty directory goes.
        assert_eq!(counts(journal.recover(b.as_ref()).await), (1, 0));
        assert!(!dead.exists(), "the dead process's empty journal stays");
        assert!(journal.dir.path().exists() && other.dir.path().exists());
    }

    #[tokio::test]
    async fn an_upload_that_cannot_be_aborted_is_kept_for_the_next_time() {
        let root = tempfile::tempdir().expect("temp dir");
        let (a, _) = stores(root.path());
        let first = a.create_multipart("one").await.expect("create");
        let second = a.create_multipart("two").await.expect("create");
        let dead = dead_journal(
            root.path(),
            &[(a.as_ref(), "one", &first), (a.as_ref(), "two", &second)],
        );
        let journal = UploadJournal::open(root.path()).expect("journal");
        a.fail_writes.store(true, Ordering::SeqCst);
        assert_eq!(counts(journal.recover(a.as_ref()).await), (0, 2));
        // The store did not answer: the pass stopped at the first failure.
        assert_eq!(a.calls("abort_multipart"), 1);
        assert_eq!(pending(&a).await.len(), 2);

        a.fail_writes.store(false, Ordering::SeqCst);
        assert_eq!(counts(journal.recover(a.as_ref()).await), (2, 0));
        assert!(pending(&a).await.is_empty());
        assert!(!dead.exists());
    }

    #[tokio::test]
    async fn a_journal_left_at_exit_is_recovered_by_the_next_process() {
        let root = tempfile::tempdir().expect("temp dir");
        let (a, _) = stores(root.path());
        let upload = a.create_multipart("unfinished").await.expect("create");
        let journal = UploadJournal::open(root.path()).expect("journal");
        journal.record(a.as_ref(), "unfinished", &upload).await;
        let left = journal.dir.path().to_path_buf();
        drop(journal);
        assert!(left.exists(), "an entry still open keeps the directory");

        // The next process (here with the same PID, as in a restarted container).
        let next = UploadJournal::open(root.path()).expect("journal");
        assert_eq!(next.recover(a.as_ref()).await.aborted, 1);
        assert!(pending(&a).await.is_empty());
        assert!(!left.exists());
    }
}
