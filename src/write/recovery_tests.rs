//! A killed process's unsaved writes, recovered by the next one (`durable`): engines on one
//! spill parent, the first dropped without committing as a SIGKILL would leave it (its files in
//! place, its directory unlocked), the next recovering and committing them.

use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, SystemTime};

use bytes::Bytes;

use super::*;
use crate::cache::DirectReader;
use crate::store::testing::TestStore;
use crate::telemetry::Metrics;

const MIB: u64 = 1 << 20;

/// A spill parent shared by the engines of successive "processes", and two stores.
struct Node {
    parent: tempfile::TempDir,
    _data: tempfile::TempDir,
    a: Arc<TestStore>,
    b: Arc<TestStore>,
    a_root: PathBuf,
}

fn node() -> Node {
    let parent = tempfile::tempdir().expect("spill parent");
    let data = tempfile::tempdir().expect("data");
    let (a_root, b_root) = (data.path().join("a"), data.path().join("b"));
    std::fs::create_dir(&a_root).expect("mkdir");
    std::fs::create_dir(&b_root).expect("mkdir");
    Node {
        a: TestStore::new(&a_root, "s3:a"),
        b: TestStore::new(&b_root, "s3:b"),
        a_root,
        _data: data,
        parent,
    }
}

impl Node {
    /// A new process's write engine.
    fn engine(&self) -> WriteEngine {
        let config = WriteConfig {
            multipart_threshold: 8 * MIB,
            commit_workers: 2,
            dirty_limit: 1 << 30,
            buffer_limit: 256 << 20,
            promote: false,
            spill_parent: Some(self.parent.path().to_path_buf()),
            journal_parent: None,
        };
        WriteEngine::new(config, Arc::new(DirectReader), None, Metrics::new()).expect("engine")
    }

    fn stored(&self, key: &str) -> Option<Vec<u8>> {
        std::fs::read(self.a_root.join(key)).ok()
    }

    /// Every spill directory under the parent, with the files' directories in each.
    fn spill_dirs(&self) -> Vec<(PathBuf, Vec<PathBuf>)> {
        let mut dirs: Vec<_> = std::fs::read_dir(self.parent.path())
            .expect("list parent")
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().starts_with("msfs-spill-"))
            .map(|e| {
                let files = std::fs::read_dir(e.path())
                    .expect("list spill dir")
                    .flatten()
                    .map(|f| f.path())
                    .collect();
                (e.path(), files)
            })
            .collect();
        dirs.sort();
        dirs
    }
}

fn target(store: &Arc<TestStore>, key: &str) -> Target {
    Target {
        store: store.clone(),
        backend: "test".into(),
        key: key.into(),
        observer: None,
    }
}

/// Every key of `store` is the caller's.
fn all_of(store: &Arc<TestStore>) -> impl Fn(&str) -> Option<Target> + '_ {
    move |key| Some(target(store, key))
}

async fn version(store: &TestStore, key: &str) -> ObjectVersion {
    let meta = store.head(key).await.expect("head").expect("exists");
    ObjectVersion {
        key: key.into(),
        etag: meta.etag,
        size: meta.size,
    }
}

async fn read_all(engine: &WriteEngine, file: &Arc<DirtyFile>) -> Vec<u8> {
    let size = file.meta().size;
    engine
        .read(file, 0..size, false)
        .await
        .expect("read")
        .to_vec()
}

/// What a SIGKILL leaves: nothing committed, nothing cleaned up (spill directories made ahead
/// of need included), the directory unlocked (the engine's handle and every file's are
/// dropped, once no task of the engine is running).
async fn kill(engine: WriteEngine, files: Vec<Arc<DirtyFile>>) {
    engine.inner.spares.abandon();
    drop(files);
    until("no task of the engine is running", || {
        Arc::strong_count(&engine.inner) == 1
    })
    .await;
    drop(engine);
}

/// `data` written at `offset` into `model`, zero-filled past its end.
fn model_write(model: &mut Vec<u8>, offset: usize, data: &[u8]) {
    if model.len() < offset + data.len() {
        model.resize(offset + data.len(), 0);
    }
    model[offset..offset + data.len()].copy_from_slice(data);
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

/// Waits (bounded) until `done`.
async fn until(what: &str, mut done: impl FnMut() -> bool) {
    for _ in 0..500 {
        if done() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("timed out waiting until {what}");
}

/// The files' directories in this engine's spill directory: not its spares (made ahead of
/// need: their logs empty, or not made yet).
fn file_spills(engine: &WriteEngine) -> Vec<PathBuf> {
    std::fs::read_dir(engine.inner.spill_dir.path())
        .map(|dir| {
            dir.flatten()
                .map(|e| e.path())
                .filter(|path| std::fs::metadata(path.join("log")).is_ok_and(|m| m.len() > 0))
                .collect()
        })
        .unwrap_or_default()
}

/// The one file's directory in this engine's spill directory.
fn only_spill(engine: &WriteEngine) -> PathBuf {
    let files = file_spills(engine);
    assert_eq!(files.len(), 1, "{files:?}");
    files[0].clone()
}

fn spill_is_empty(engine: &WriteEngine) -> bool {
    file_spills(engine).is_empty()
}

#[tokio::test]
async fn writes_that_returned_survive_a_kill_and_are_committed_by_the_next_process() {
    let n = node();
    let original = pattern(1000, 1);
    std::fs::write(n.a_root.join("old"), &original).expect("seed");
    let first = n.engine();

    // A new file: a write, a rewrite inside it (no record needed), a write past a gap.
    let mut new_model = Vec::new();
    let new = first.create(target(&n.a, "new")).await;
    for (offset, data) in [
        (0, pattern(300, 2)),
        (100, pattern(50, 3)),
        (500, pattern(20, 4)),
    ] {
        first.write(&new, offset, &data).await.expect("write");
        model_write(&mut new_model, offset as usize, &data);
    }
    // An existing object: a rewrite in the middle, an extension, a truncate down and a write
    // past the cut (the gap reads as zeros, not as the old bytes).
    let mut old_model = original.clone();
    let old = first.open(target(&n.a, "old"), Some(version(&n.a, "old").await));
    first
        .write(&old, 400, &pattern(50, 5))
        .await
        .expect("write");
    model_write(&mut old_model, 400, &pattern(50, 5));
    first
        .write(&old, 990, &pattern(210, 6))
        .await
        .expect("write");
    model_write(&mut old_model, 990, &pattern(210, 6));
    first.truncate(&old, 700).expect("truncate");
    old_model.truncate(700);
    first
        .write(&old, 800, &pattern(10, 7))
        .await
        .expect("write");
    model_write(&mut old_model, 800, &pattern(10, 7));
    let mtime = SystemTime::UNIX_EPOCH + Duration::from_secs(1_234_567_890);
    old.set_mtime(mtime);
    assert_eq!(read_all(&first, &old).await, old_model);
    kill(first, vec![new, old]).await;

    let second = n.engine();
    assert_eq!(second.recover_spills(n.a.as_ref(), all_of(&n.a)).await, 2);
    // Before anything yields to the background commits just scheduled.
    assert_eq!(
        second.dirty_bytes(),
        (300 + 20) + (50 + 10),
        "counted against the dirty bound"
    );
    let old = second.find("s3:a", "old").expect("recovered");
    let new = second.find("s3:a", "new").expect("recovered");
    assert_eq!(
        read_all(&second, &old).await,
        old_model,
        "before its commit"
    );
    assert_eq!(old.meta().mtime, mtime);
    assert_eq!(read_all(&second, &new).await, new_model);
    second.commit(&old).await.expect("commit");
    second.commit(&new).await.expect("commit");
    assert_eq!(n.stored("old"), Some(old_model));
    assert_eq!(n.stored("new"), Some(new_model));

    // Committed and unused: let go, and nothing left behind anywhere.
    drop((old, new));
    until("both files are let go", || {
        second.find("s3:a", "old").is_none() && second.find("s3:a", "new").is_none()
    })
    .await;
    until("the spill files are removed", || spill_is_empty(&second)).await;
    assert_eq!(second.dirty_bytes(), 0);
    let dirs = n.spill_dirs();
    assert_eq!(dirs.len(), 1, "the dead directory is gone: {dirs:?}");
    assert_eq!(dirs[0].0, second.inner.spill_dir.path());
}

#[tokio::test]
async fn a_recovered_large_file_copies_its_unchanged_base_server_side() {
    let n = node();
    let original = pattern((24 * MIB) as usize, 9);
    std::fs::write(n.a_root.join("big"), &original).expect("seed");
    let first = n.engine();
    let file = first.open(target(&n.a, "big"), Some(version(&n.a, "big").await));
    let patch = pattern(4096, 10);
    first.write(&file, 10 * MIB, &patch).await.expect("write");
    kill(first, vec![file]).await;

    let second = n.engine();
    assert_eq!(second.recover_spills(n.a.as_ref(), all_of(&n.a)).await, 1);
    let file = second.find("s3:a", "big").expect("recovered");
    second.commit(&file).await.expect("commit");
    let mut expected = original;
    model_write(&mut expected, (10 * MIB) as usize, &patch);
    assert_eq!(n.stored("big"), Some(expected));
    // Three 8 MiB parts: the patched one uploaded, the two others copied from the base.
    assert_eq!(n.a.calls("upload_part"), 1);
    assert_eq!(n.a.calls("upload_part_copy"), 2);
}

#[tokio::test]
async fn a_torn_last_record_is_ignored_and_a_second_kill_recovers_again() {
    let n = node();
    let first = n.engine();
    let file = first.create(target(&n.a, "f")).await;
    let mut model = Vec::new();
    first
        .write(&file, 0, &pattern(100, 1))
        .await
        .expect("write");
    model_write(&mut model, 0, &pattern(100, 1));
    // A write killed halfway through its record: its bytes are in the data file, its record
    // cut short. It never returned, so it must not be recovered.
    let dir = only_spill(&first);
    let spill = file.state().spill.clone().expect("spill");
    spill
        .write_all_at(&pattern(50, 2), 200)
        .expect("bytes of a write that never returned");
    let torn = durable_tests::write_frame(200..250);
    let mut log = std::fs::OpenOptions::new()
        .append(true)
        .open(dir.join("log"))
        .expect("log");
    std::io::Write::write_all(&mut log, &torn[..torn.len() - 3]).expect("torn record");
    drop((log, spill));
    kill(first, vec![file]).await;

    let second = n.engine();
    // The store refuses writes until the file is joined: otherwise the recovered file's
    // background commit could land and let the file go before this test holds it.
    n.a.fail_writes.store(true, Ordering::SeqCst);
    assert_eq!(second.recover_spills(n.a.as_ref(), all_of(&n.a)).await, 1);
    let file = second.find("s3:a", "f").expect("recovered");
    assert_eq!(read_all(&second, &file).await, model);
    // Its next records follow the whole ones, so a second kill loses nothing either. Held open
    // (as an application would), the file is not let go after its background commit.
    second.join("s3:a", "f").expect("join");
    n.a.fail_writes.store(false, Ordering::SeqCst);
    second
        .write(&file, 100, &pattern(30, 3))
        .await
        .expect("write");
    model_write(&mut model, 100, &pattern(30, 3));
    until("the background commit is done", || !file.state().background).await;
    second
        .write(&file, 130, &pattern(5, 4))
        .await
        .expect("write");
    model_write(&mut model, 130, &pattern(5, 4));
    kill(second, vec![file]).await;

    let third = n.engine();
    assert_eq!(third.recover_spills(n.a.as_ref(), all_of(&n.a)).await, 1);
    let file = third.find("s3:a", "f").expect("recovered");
    third.commit(&file).await.expect("commit");
    assert_eq!(n.stored("f"), Some(model));
}

#[tokio::test]
async fn files_of_a_store_not_built_yet_wait_for_it() {
    let n = node();
    let first = n.engine();
    let in_a = first.create(target(&n.a, "x")).await;
    let in_b = first.create(target(&n.b, "y")).await;
    first.write(&in_a, 0, b"for a").await.expect("write");
    first.write(&in_b, 0, b"for b").await.expect("write");
    kill(first, vec![in_a, in_b]).await;

    let second = n.engine();
    assert_eq!(second.recover_spills(n.a.as_ref(), all_of(&n.a)).await, 1);
    assert!(second.find("s3:b", "y").is_none());
    assert_eq!(
        n.spill_dirs().len(),
        2,
        "the dead directory still holds b's file"
    );
    // A backend that does not claim the key (another prefix over the same bucket) leaves it.
    assert_eq!(second.recover_spills(n.b.as_ref(), |_| None).await, 0);
    assert_eq!(n.spill_dirs().len(), 2);

    assert_eq!(second.recover_spills(n.b.as_ref(), all_of(&n.b)).await, 1);
    let y = second.find("s3:b", "y").expect("recovered");
    second.commit(&y).await.expect("commit");
    let meta = n.b.head("y").await.expect("head").expect("committed");
    assert_eq!(meta.size, 5);
    let dirs = n.spill_dirs();
    assert_eq!(dirs.len(), 1, "the emptied dead directory goes: {dirs:?}");
    assert_eq!(second.recover_spills(n.a.as_ref(), all_of(&n.a)).await, 0);
}

#[tokio::test]
async fn a_committed_or_deleted_file_leaves_no_spill_files() {
    let n = node();
    let first = n.engine();
    let file = first.create(target(&n.a, "clean")).await;
    first.write(&file, 0, b"hello").await.expect("write");
    first.truncate(&file, 3).expect("truncate");
    assert!(!spill_is_empty(&first));
    first.commit(&file).await.expect("commit");
    // Still open, but clean: its spill goes at the commit.
    until("the committed file's spill is removed", || {
        spill_is_empty(&first)
    })
    .await;
    assert_eq!(n.stored("clean").as_deref(), Some(&b"hel"[..]));

    let gone = first.create(target(&n.a, "gone")).await;
    first
        .write(&gone, 0, b"never committed")
        .await
        .expect("write");
    first.forget("s3:a", "gone").await;
    until("the deleted file's spill is removed", || {
        spill_is_empty(&first)
    })
    .await;
    // Its bytes stay readable through the handle still open on it, and writable.
    first.write(&gone, 5, b"!").await.expect("write");
    assert_eq!(read_all(&first, &gone).await, b"never!committed");
    assert!(spill_is_empty(&first), "nothing named for a deleted file");
    kill(first, vec![file, gone]).await;

    let second = n.engine();
    assert_eq!(second.recover_spills(n.a.as_ref(), all_of(&n.a)).await, 0);
    assert_eq!(
        n.spill_dirs().len(),
        1,
        "the empty dead directory was removed at exit"
    );
}

#[tokio::test]
async fn a_live_process_spill_directory_is_never_touched() {
    let n = node();
    let live = n.engine();
    let file = live.create(target(&n.a, "mine")).await;
    live.write(&file, 0, b"still writing").await.expect("write");
    let dir = only_spill(&live);

    let other = n.engine();
    assert_eq!(other.recover_spills(n.a.as_ref(), all_of(&n.a)).await, 0);
    assert!(other.find("s3:a", "mine").is_none());
    assert!(dir.join("data").exists() && dir.join("log").exists());
    live.commit(&file).await.expect("commit");
    assert_eq!(n.stored("mine").as_deref(), Some(&b"still writing"[..]));
}

#[tokio::test]
async fn a_file_stranded_by_a_refused_commit_is_kept_for_the_next_process() {
    let n = node();
    let first = n.engine();
    let file = first.create(target(&n.a, "denied")).await;
    first.write(&file, 0, b"keep me").await.expect("write");
    n.a.deny_writes.store(true, Ordering::SeqCst);
    assert!(first.commit(&file).await.is_err());
    until("the background commit gives up", || {
        let state = file.state();
        state.stranded && !state.background
    })
    .await;
    kill(first, vec![file]).await;

    n.a.deny_writes.store(false, Ordering::SeqCst);
    let second = n.engine();
    assert_eq!(second.recover_spills(n.a.as_ref(), all_of(&n.a)).await, 1);
    let file = second.find("s3:a", "denied").expect("recovered");
    second.commit(&file).await.expect("commit");
    assert_eq!(n.stored("denied").as_deref(), Some(&b"keep me"[..]));
}

#[tokio::test]
async fn a_key_being_written_again_keeps_this_process_file() {
    let n = node();
    let first = n.engine();
    let file = first.create(target(&n.a, "k")).await;
    first.write(&file, 0, b"old process").await.expect("write");
    kill(first, vec![file]).await;

    let second = n.engine();
    let file = second.create(target(&n.a, "k")).await;
    second.write(&file, 0, b"new").await.expect("write");
    assert_eq!(second.recover_spills(n.a.as_ref(), all_of(&n.a)).await, 0);
    second.commit(&file).await.expect("commit");
    assert_eq!(n.stored("k").as_deref(), Some(&b"new"[..]));
    until("the dead process's file is discarded", || {
        spill_is_empty(&second)
    })
    .await;
    assert_eq!(n.spill_dirs().len(), 1);
}

/// Access to `durable`'s record framing for the tests above.
mod durable_tests {
    use std::ops::Range;
    use std::time::SystemTime;

    pub fn write_frame(range: Range<u64>) -> Vec<u8> {
        super::durable::Record::Write {
            range,
            mtime: SystemTime::now(),
        }
        .frame()
    }
}

#[test]
fn recovery_can_be_awaited_on_any_thread() {
    // The call sites (a backend being opened, a CSI publish) run in tasks that move between
    // threads, with a closure borrowing the backend's settings.
    fn send<T: Send>(_: T) {}
    let n = node();
    let engine = n.engine();
    let prefix = String::from("volume/");
    send(engine.recover_spills(n.a.as_ref(), |key| {
        key.strip_prefix(prefix.as_str()).map(|_| target(&n.a, key))
    }));
}

#[tokio::test]
async fn a_commit_failure_no_fsync_reported_is_reported_once_by_the_next_process() {
    let n = node();
    let first = n.engine();
    let file = first.create(target(&n.a, "f")).await;
    first.write(&file, 0, b"kept").await.expect("write");
    // Refused for good: the background commit gives up (a transient failure would retry on).
    n.a.deny_writes.store(true, Ordering::SeqCst);
    first.commit_in_background(&file);
    until("the background commit failed", || {
        file.state().failure.is_some()
    })
    .await;
    let message = file.state().failure.clone().expect("failure");
    kill(first, vec![file]).await;

    // Rebuilt, not yet committed again: its fsync says what the dead process's would have.
    let second = n.engine();
    let files = durable::recover(&second.inner, "s3:a", all_of(&n.a)).await;
    let [file] = &files[..] else {
        panic!("one file recovered: {files:?}");
    };
    n.a.deny_writes.store(false, Ordering::SeqCst);
    match second.fsync(file).await {
        Err(WriteError::EarlierCommitFailed { message: reported }) => {
            assert_eq!(reported, message)
        }
        other => panic!("the earlier failure is reported: {other:?}"),
    }
    // Once: reported, and the commit that fsync made landed.
    second.fsync(file).await.expect("a second fsync succeeds");
    assert_eq!(n.stored("f").as_deref(), Some(&b"kept"[..]));
}

/// A file over an existing 1000-byte object "f", patched at 400..450 by a process then killed.
/// Returns the content it left, and the ETag of the base it was written over.
async fn patched_then_killed(n: &Node) -> (Vec<u8>, String) {
    let original = pattern(1000, 1);
    std::fs::write(n.a_root.join("f"), &original).expect("seed");
    let first = n.engine();
    let base = version(&n.a, "f").await;
    let file = first.open(target(&n.a, "f"), Some(base.clone()));
    first
        .write(&file, 400, &pattern(50, 5))
        .await
        .expect("write");
    let mut model = original;
    model_write(&mut model, 400, &pattern(50, 5));
    kill(first, vec![file]).await;
    (model, base.etag)
}

#[tokio::test]
async fn a_commit_that_landed_without_its_record_leaves_the_recovered_file_clean() {
    let n = node();
    let (model, base) = patched_then_killed(&n).await;
    // The killed process's commit reached the store; the kill came before its log record.
    n.a.put("f", Bytes::from(model.clone()))
        .await
        .expect("the killed process's commit");
    let landed = version(&n.a, "f").await;
    assert_ne!(landed.etag, base);
    let puts = n.a.calls("put");

    let second = n.engine();
    let recorder = Arc::new(tests::Recorder::default());
    let observed = |key: &str| {
        let mut target = target(&n.a, key);
        target.observer = Some(recorder.clone());
        Some(target)
    };
    assert_eq!(second.recover_spills(n.a.as_ref(), observed).await, 1);
    let file = second.find("s3:a", "f").expect("recovered");
    until("the recovered file's background commit is done", || {
        !file.state().background
    })
    .await;
    {
        let state = file.state();
        assert!(!state.is_dirty(), "clean");
        assert!(state.dirty.is_empty());
        assert_eq!(
            state.base.as_ref(),
            Some(&landed),
            "rebased onto the landed version"
        );
        assert!(state.failure.is_none() && !state.stranded);
    }
    assert_eq!(n.a.calls("put"), puts, "nothing sent again");
    assert_eq!(n.stored("f"), Some(model));
    assert_eq!(
        *recorder.0.lock().expect("lock"),
        [("f".to_string(), landed.size, landed.etag)],
        "the observer hears of the version it may have missed"
    );
    assert!(
        second.find("s3:a", "f").is_none(),
        "clean and unused: let go"
    );
    until("the spill files are removed", || spill_is_empty(&second)).await;
    assert_eq!(second.dirty_bytes(), 0);
}

/// `patched_then_killed`, whose commit landed unrecorded, recovered by a second process whose
/// base check could not reach the store and waits to retry: the recovered file still says its
/// base is the version that commit replaced. Returns the content, the landed version, the
/// second process's engine and the file.
async fn landed_with_the_check_pending(
    n: &Node,
) -> (Vec<u8>, ObjectVersion, WriteEngine, Arc<DirtyFile>) {
    let (model, base) = patched_then_killed(n).await;
    n.a.put("f", Bytes::from(model.clone()))
        .await
        .expect("the killed process's commit");
    let landed = version(&n.a, "f").await;
    n.a.fail_next_heads("f", 1);
    let second = n.engine();
    assert_eq!(second.recover_spills(n.a.as_ref(), all_of(&n.a)).await, 1);
    let file = second.find("s3:a", "f").expect("recovered");
    until("the background commit's first try failed", || {
        file.state().failure.is_some()
    })
    .await;
    assert_eq!(file.state().base.as_ref().map(|b| &b.etag), Some(&base));
    (model, landed, second, file)
}

#[tokio::test]
async fn a_read_before_the_recovered_commit_finds_the_version_that_landed_unrecorded() {
    let n = node();
    let (model, landed, second, file) = landed_with_the_check_pending(&n).await;
    let puts = n.a.calls("put");

    // Bytes the file takes from its base: that version is gone, the landed one holds them.
    assert_eq!(
        second.read(&file, 0..400, false).await.expect("read"),
        model[..400],
        "read from the version that landed"
    );
    assert_eq!(read_all(&second, &file).await, model);
    {
        let state = file.state();
        assert_eq!(state.base.as_ref(), Some(&landed), "rebased by the read");
        assert!(!state.is_dirty(), "nothing left to commit");
    }
    assert_eq!(n.a.calls("put"), puts, "nothing sent again");
}

#[tokio::test]
async fn writes_since_recovery_do_not_hide_a_commit_that_landed_unrecorded() {
    // The descriptor the killed process served is still open: after the takeover its writer
    // appends, and rewrites part of what was recovered, before the base is checked.
    let n = node();
    let (mut model, landed, second, file) = landed_with_the_check_pending(&n).await;
    for (offset, data) in [(1000, pattern(300, 9)), (420, pattern(10, 8))] {
        second
            .write(&file, offset as u64, &data)
            .await
            .expect("write after the takeover");
        model_write(&mut model, offset, &data);
    }
    assert_eq!(
        read_all(&second, &file).await,
        model,
        "read across the base"
    );
    assert_eq!(
        file.state().base.as_ref(),
        Some(&landed),
        "rebased onto the landed version"
    );
    assert!(file.is_dirty(), "what was written since is still to commit");
    second.fsync(&file).await.expect("commit");
    assert_eq!(n.stored("f"), Some(model));
}

#[tokio::test]
async fn a_commit_that_landed_unrecorded_before_later_writes_is_recognised_and_they_commit() {
    // The process started a commit, recorded that it did, and died before the commit's own
    // record — after more writes (one over the bytes the commit sent), a truncate and an
    // extension. What landed is an earlier content of the file, not the recovered one.
    let n = node();
    let original = pattern(1000, 1);
    std::fs::write(n.a_root.join("f"), &original).expect("seed");
    let first = n.engine();
    let base = version(&n.a, "f").await;
    let file = first.open(target(&n.a, "f"), Some(base.clone()));
    let mut model = original;
    first
        .write(&file, 400, &pattern(50, 5))
        .await
        .expect("write");
    model_write(&mut model, 400, &pattern(50, 5));
    // The commit starts (its record first), and lands.
    durable::log_commit_starting(&mut file.state());
    n.a.put("f", Bytes::from(model.clone()))
        .await
        .expect("the commit's PUT");
    let landed = version(&n.a, "f").await;
    // Written while it was on its way.
    first
        .write(&file, 420, &pattern(10, 6))
        .await
        .expect("write over it");
    model_write(&mut model, 420, &pattern(10, 6));
    first.truncate(&file, 600).expect("truncate");
    model.truncate(600);
    first
        .write(&file, 900, &pattern(50, 7))
        .await
        .expect("write past the end");
    model_write(&mut model, 900, &pattern(50, 7));
    kill(first, vec![file]).await;
    let puts = n.a.calls("put");

    let second = n.engine();
    assert_eq!(second.recover_spills(n.a.as_ref(), all_of(&n.a)).await, 1);
    let file = second.find("s3:a", "f").expect("recovered");
    until("the recovered file is committed", || {
        let state = file.state();
        !state.background
    })
    .await;
    {
        let state = file.state();
        assert!(
            state.failure.is_none() && !state.stranded,
            "{:?}",
            state.failure
        );
    }
    assert_eq!(
        n.stored("f"),
        Some(model),
        "the later writes over what landed"
    );
    assert_eq!(n.a.calls("put"), puts + 1);
    assert_ne!(version(&n.a, "f").await.etag, landed.etag);
}

#[tokio::test]
async fn a_base_another_writer_changed_fails_the_recovered_commit_for_good() {
    // Replaced by other bytes of the same size (compared, and found different), or deleted.
    for replacement in [Some(pattern(1000, 2)), None] {
        let n = node();
        let (model, base) = patched_then_killed(&n).await;
        let current = match &replacement {
            Some(bytes) => {
                n.a.put("f", Bytes::from(bytes.clone())).await.expect("put");
                version(&n.a, "f").await.etag
            }
            None => {
                n.a.delete("f").await.expect("delete");
                "deleted".to_string()
            }
        };
        let puts = n.a.calls("put");

        let second = n.engine();
        assert_eq!(second.recover_spills(n.a.as_ref(), all_of(&n.a)).await, 1);
        let file = second.find("s3:a", "f").expect("recovered");
        until("the background commit gives up", || {
            let state = file.state();
            state.stranded && !state.background
        })
        .await;
        let message = file
            .state()
            .failure
            .clone()
            .expect("failure kept for fsync");
        for part in ["f:", &base, &current] {
            assert!(message.contains(part), "{part:?} in {message:?}");
        }
        match second.fsync(&file).await {
            Err(WriteError::EarlierCommitFailed { message: reported }) => {
                assert_eq!(reported, message)
            }
            other => panic!("fsync reports the failure: {other:?}"),
        }
        // The fsync tried again, failed the same way, and its background retry gave up too.
        until("the retry gives up", || !file.state().background).await;
        assert!(file.state().stranded && file.is_dirty());
        assert_eq!(
            n.a.calls("put"),
            puts,
            "nothing committed over the other version"
        );
        assert_eq!(n.stored("f"), replacement);
        let dir = only_spill(&second);
        assert!(dir.join("data").exists() && dir.join("log").exists());
        assert_eq!(
            second.read(&file, 400..450, false).await.expect("read"),
            model[400..450],
            "its own bytes are kept"
        );
    }
}

#[tokio::test]
async fn a_recovered_file_rewritten_whole_commits_over_a_replaced_base() {
    // Truncated and written again (O_TRUNC), or overwritten in place and past its end: either
    // way no byte comes from the base.
    for truncated in [true, false] {
        let n = node();
        std::fs::write(n.a_root.join("f"), pattern(1000, 1)).expect("seed");
        let first = n.engine();
        let file = first.open(target(&n.a, "f"), Some(version(&n.a, "f").await));
        if truncated {
            first.truncate(&file, 0).expect("truncate");
        }
        let model = pattern(1200, 7);
        first.write(&file, 0, &model).await.expect("write");
        kill(first, vec![file]).await;
        n.a.put("f", Bytes::from(pattern(1200, 2)))
            .await
            .expect("another writer's version");

        let second = n.engine();
        assert_eq!(second.recover_spills(n.a.as_ref(), all_of(&n.a)).await, 1);
        let file = second.find("s3:a", "f").expect("recovered");
        second.commit(&file).await.expect("commit");
        assert_eq!(n.stored("f"), Some(model), "truncated: {truncated}");
        assert!(!file.is_dirty());
    }
}

/// The file the spill samples hold (`tests/fixtures/formats/spill-v*`): its key, its bytes,
/// its mtime and its metadata.
fn spill_sample() -> (&'static str, Vec<u8>, SystemTime, crate::store::Metadata) {
    let mut model = Vec::new();
    model_write(&mut model, 0, &pattern(300, 2));
    model_write(&mut model, 100, &pattern(50, 3));
    model_write(&mut model, 500, &pattern(20, 4));
    model.truncate(450);
    model_write(&mut model, 460, &pattern(5, 5));
    let mtime = SystemTime::UNIX_EPOCH + Duration::new(1_700_000_000, 123_456_789);
    let metadata = crate::store::Metadata::from([("mode".to_string(), "33188".to_string())]);
    ("sample file", model, mtime, metadata)
}

/// The dead process's directory in a spill sample (its PID above the kernel's largest).
const SAMPLE_DIR: &str = "msfs-spill-4194400-00000000deadbeef";

/// Writes the spill samples with this build: the current format as a killed process leaves
/// it, and format 1, the same log with its header's format field at 1 (format 2 only added
/// the commit-starting record, which this file never got).
async fn write_spill_samples() {
    let n = node();
    let (key, model, mtime, metadata) = spill_sample();
    let first = n.engine();
    let file = first.create(target(&n.a, key)).await;
    file.set_metadata(metadata);
    for (offset, data) in [
        (0, pattern(300, 2)),
        (100, pattern(50, 3)),
        (500, pattern(20, 4)),
    ] {
        first.write(&file, offset, &data).await.expect("write");
    }
    first.truncate(&file, 450).expect("truncate");
    first
        .write(&file, 460, &pattern(5, 5))
        .await
        .expect("write");
    file.set_mtime(mtime);
    assert_eq!(read_all(&first, &file).await, model);
    let spill = only_spill(&first);
    kill(first, vec![file]).await;

    let out = tempfile::tempdir().expect("out");
    let v2 = out.path().join("v2").join(SAMPLE_DIR).join("0");
    std::fs::create_dir_all(&v2).expect("mkdir");
    for name in ["data", "log"] {
        std::fs::copy(spill.join(name), v2.join(name)).expect("copy");
    }
    crate::format_fixtures::store("spill-v2", &out.path().join("v2"));

    let v1 = out.path().join("v1").join(SAMPLE_DIR).join("0");
    std::fs::create_dir_all(&v1).expect("mkdir");
    std::fs::copy(spill.join("data"), v1.join("data")).expect("copy");
    let mut log = std::fs::read(spill.join("log")).expect("log");
    // The header frame: length, CRC-32, then the tag byte and the format field.
    log[9..13].copy_from_slice(&1u32.to_le_bytes());
    let len = u32::from_le_bytes(log[0..4].try_into().expect("len")) as usize;
    let crc = crc32fast::hash(&log[8..8 + len]);
    log[4..8].copy_from_slice(&crc.to_le_bytes());
    std::fs::write(v1.join("log"), log).expect("write");
    crate::format_fixtures::store("spill-v1", &out.path().join("v1"));
}

/// A spill sample of each format read is recovered by this build: the file's bytes, mtime and
/// metadata as the killed process left them, and committed.
#[tokio::test]
async fn the_spill_samples_of_every_format_read_are_recovered() {
    if crate::format_fixtures::writing() {
        write_spill_samples().await;
    }
    let (key, model, mtime, metadata) = spill_sample();
    for sample in ["spill-v1", "spill-v2"] {
        let n = node();
        crate::format_fixtures::copy_to(sample, n.parent.path());
        let engine = n.engine();
        assert_eq!(
            engine.recover_spills(n.a.as_ref(), all_of(&n.a)).await,
            1,
            "{sample}"
        );
        let file = engine.find("s3:a", key).expect("recovered");
        assert_eq!(read_all(&engine, &file).await, model, "{sample}");
        assert_eq!(file.meta().mtime, mtime, "{sample}");
        assert_eq!(file.metadata(), metadata, "{sample}");
        // The test store keeps no object metadata: the bytes are what is committed here.
        file.set_metadata(crate::store::Metadata::new());
        engine.commit(&file).await.expect("commit");
        assert_eq!(n.stored(key), Some(model.clone()), "{sample}");
    }
}
