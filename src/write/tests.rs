//! The write engine against a local-directory store that counts (and on demand fails) requests.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use bytes::Bytes;

use super::*;
use crate::cache::DirectReader;
use crate::store::testing::TestStore;

const MIB: u64 = 1 << 20;

struct Fixture {
    data: tempfile::TempDir,
    _spill: tempfile::TempDir,
    store: Arc<TestStore>,
    engine: WriteEngine,
}

fn fixture(threshold: u64, dirty_limit: u64) -> Fixture {
    let data = tempfile::tempdir().expect("data dir");
    let spill = tempfile::tempdir().expect("spill dir");
    let store = TestStore::new(data.path(), "test-store");
    let config = WriteConfig {
        multipart_threshold: threshold,
        commit_workers: 2,
        dirty_limit,
        buffer_limit: 256 << 20,
        promote: false,
        spill_parent: Some(spill.path().to_path_buf()),
        journal_parent: None,
    };
    let engine =
        WriteEngine::new(config, Arc::new(DirectReader), None, Metrics::new()).expect("engine");
    Fixture {
        data,
        _spill: spill,
        store,
        engine,
    }
}

impl Fixture {
    fn target(&self, key: &str) -> Target {
        Target {
            store: self.store.clone(),
            backend: "test".into(),
            key: key.into(),
            observer: None,
        }
    }

    /// The object's bytes as the store holds them, if it exists.
    fn stored(&self, key: &str) -> Option<Vec<u8>> {
        std::fs::read(self.data.path().join(key)).ok()
    }

    /// The object as it is now, as a base to open it over.
    async fn version(&self, key: &str) -> ObjectVersion {
        let meta = self
            .store
            .head(key)
            .await
            .expect("head")
            .expect("object exists");
        ObjectVersion {
            key: key.into(),
            etag: meta.etag,
            size: meta.size,
        }
    }

    async fn read_all(&self, file: &Arc<DirtyFile>) -> Vec<u8> {
        let size = file.meta().size;
        self.engine
            .read(file, 0..size, false)
            .await
            .expect("read")
            .to_vec()
    }
}

/// Deterministic pseudo-random numbers (xorshift), so a failure replays.
struct Rng(u64);

impl Rng {
    fn below(&mut self, bound: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % bound.max(1)
    }

    fn bytes(&mut self, len: usize) -> Vec<u8> {
        (0..len).map(|_| self.below(256) as u8).collect()
    }
}

use crate::store::ObjectStore;
use crate::telemetry::Metrics;

#[tokio::test]
async fn a_small_file_is_committed_with_one_put() {
    let f = fixture(64 * MIB, 1 << 30);
    let file = f.engine.create(f.target("small")).await;
    f.engine.write(&file, 0, b"hello ").await.expect("write");
    f.engine.write(&file, 6, b"world").await.expect("write");
    assert_eq!(f.read_all(&file).await, b"hello world", "reads see writes");
    assert!(f.stored("small").is_none(), "nothing lands before a commit");
    f.engine.commit(&file).await.expect("commit");
    assert_eq!(f.stored("small").as_deref(), Some(&b"hello world"[..]));
    assert_eq!(f.store.calls("put"), 1);
    assert_eq!(f.store.calls("create_multipart"), 0);
    assert!(!file.is_dirty());
    assert_eq!(f.engine.dirty_bytes(), 0);
    f.engine.release(&file);
    assert!(
        f.engine.find("test-store", "small").is_none(),
        "clean and closed: let go"
    );
}

#[tokio::test]
async fn what_a_commit_left_is_known_once_the_file_is_let_go_until_the_name_is_forgotten() {
    for threshold in [64 * MIB, 5 * MIB] {
        let f = fixture(threshold, 1 << 30);
        let file = f.engine.create(f.target("kept")).await;
        let body = vec![3u8; 6 * MIB as usize];
        f.engine.write(&file, 0, &body).await.expect("write");
        f.engine.commit(&file).await.expect("commit");
        assert_eq!(
            f.engine.recent_commit("test-store", "kept"),
            None,
            "held by a handle: the engine's file answers"
        );
        let mtime = file.meta().mtime;
        f.engine.release(&file);
        let landed = f
            .engine
            .recent_commit("test-store", "kept")
            .expect("recorded");
        assert_eq!(
            landed.version,
            f.version("kept").await,
            "threshold {threshold}"
        );
        assert_eq!(landed.mtime, mtime, "the time stat showed while writing");

        // Written again: the second commit's result replaces the first.
        let file = f
            .engine
            .open(f.target("kept"), Some(landed.version.clone()));
        f.engine.write(&file, 0, b"changed").await.expect("write");
        f.engine.commit(&file).await.expect("commit");
        f.engine.release(&file);
        let again = f
            .engine
            .recent_commit("test-store", "kept")
            .expect("recorded");
        assert_eq!(again.version, f.version("kept").await);
        assert_ne!(again.version.etag, landed.version.etag);

        f.engine.forget("test-store", "kept").await;
        assert_eq!(
            f.engine.recent_commit("test-store", "kept"),
            None,
            "deleted or renamed away"
        );
    }
}

#[tokio::test]
async fn a_file_let_go_without_a_commit_records_nothing() {
    let f = fixture(64 * MIB, 1 << 30);
    f.store
        .put("old", Bytes::from_static(b"old bytes"))
        .await
        .expect("put");
    let file = f.engine.open(f.target("old"), Some(f.version("old").await));
    f.engine.release(&file);
    assert_eq!(
        f.engine.recent_commit("test-store", "old"),
        None,
        "opened and closed unwritten: its time and version are the store's to say"
    );
    let deleted = f.engine.create(f.target("gone")).await;
    f.engine.write(&deleted, 0, b"bytes").await.expect("write");
    f.engine.forget("test-store", "gone").await;
    f.engine.release(&deleted);
    assert_eq!(f.engine.recent_commit("test-store", "gone"), None);
}

/// Remembers every commit it hears about.
#[derive(Debug, Default)]
pub(super) struct Recorder(pub std::sync::Mutex<Vec<(String, u64, String)>>);

#[async_trait::async_trait]
impl CommitObserver for Recorder {
    async fn committed(&self, key: &str, size: u64, etag: &str) {
        self.0
            .lock()
            .expect("lock")
            .push((key.into(), size, etag.into()));
    }
}

#[tokio::test]
async fn the_observer_hears_each_landed_commit_with_the_stored_version() {
    for threshold in [64 * MIB, 5 * MIB] {
        let f = fixture(threshold, 1 << 30);
        let recorder = Arc::new(Recorder::default());
        let mut target = f.target("seen");
        target.observer = Some(recorder.clone());
        let file = f.engine.create(target).await;
        let body = vec![7u8; 6 * MIB as usize];
        f.engine.write(&file, 0, &body).await.expect("write");
        assert!(
            recorder.0.lock().expect("lock").is_empty(),
            "nothing landed yet"
        );
        f.engine.commit(&file).await.expect("commit");
        let stored = f.version("seen").await;
        let heard = recorder.0.lock().expect("lock").clone();
        assert_eq!(
            heard,
            [("seen".to_string(), stored.size, stored.etag)],
            "threshold {threshold}"
        );
        f.engine.commit(&file).await.expect("clean commit");
        assert_eq!(
            recorder.0.lock().expect("lock").len(),
            1,
            "a clean file commits nothing"
        );
    }
}

/// Polls `done` every 10 ms until it holds, failing after `limit` (never a timing assertion:
/// for what a background task does at its own pace).
async fn eventually(what: &str, limit: Duration, done: impl Fn() -> bool) {
    let deadline = std::time::Instant::now() + limit;
    while !done() {
        assert!(std::time::Instant::now() < deadline, "timed out: {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn a_file_closed_while_still_open_elsewhere_is_committed_once_idle() {
    let f = fixture(64 * MIB, 1 << 30);
    let file = f.engine.create(f.target("kept")).await;
    f.engine
        .write(&file, 0, b"closed once")
        .await
        .expect("write");
    f.engine.commit_when_idle(&file);
    f.engine.commit_when_idle(&file); // a second close meanwhile: still one wait
    eventually(
        "committed while a handle is open",
        Duration::from_secs(30),
        || f.stored("kept").as_deref() == Some(&b"closed once"[..]),
    )
    .await;
    assert_eq!(f.store.calls("put"), 1);
    f.engine.commit_in_background(&file); // the last close: nothing left to send
    f.engine.release(&file);
    eventually("let go", Duration::from_secs(30), || {
        f.engine.find("test-store", "kept").is_none()
    })
    .await;
    assert_eq!(f.store.calls("put"), 1);
}

#[tokio::test]
async fn the_idle_wait_sends_nothing_once_the_last_handle_has_committed() {
    let f = fixture(64 * MIB, 1 << 30);
    let file = f.engine.create(f.target("closed")).await;
    f.engine.write(&file, 0, b"data").await.expect("write");
    f.engine.commit_when_idle(&file);
    f.engine.commit(&file).await.expect("commit"); // the last close
    f.engine.release(&file);
    eventually("the idle wait ended", Duration::from_secs(30), || {
        !file.state().idle_wait
    })
    .await;
    assert_eq!(f.store.calls("put"), 1, "one PUT, by the last close");
    // A clean file needs no wait at all.
    let clean = f
        .engine
        .open(f.target("closed"), Some(f.version("closed").await));
    f.engine.commit_when_idle(&clean);
    assert!(!clean.state().idle_wait);
    f.engine.release(&clean);
}

#[tokio::test]
async fn an_empty_new_file_becomes_an_empty_object() {
    let f = fixture(64 * MIB, 1 << 30);
    let file = f.engine.create(f.target("empty")).await;
    f.engine.commit(&file).await.expect("commit");
    assert_eq!(f.stored("empty").as_deref(), Some(&b""[..]));
}

#[tokio::test]
async fn random_writes_and_truncates_match_a_model_across_commits_and_reopens() {
    // A low threshold sends larger files through multipart (copies, uploads, zero tails) and
    // smaller ones through a single PUT, as sizes wander across it.
    let f = fixture(MIB, 1 << 30);
    let mut rng = Rng(0x5eed_1234_abcd_ef01);
    let mut model: Vec<u8> = Vec::new();
    let mut file = f.engine.create(f.target("model")).await;
    for step in 0..400 {
        match rng.below(20) {
            0 => {
                let size = rng.below(20 * MIB) as usize;
                f.engine.truncate(&file, size as u64).expect("truncate");
                model.resize(size, 0);
            }
            1 | 2 => {
                f.engine.commit(&file).await.expect("commit");
                assert_eq!(
                    f.stored("model").as_deref(),
                    Some(&model[..]),
                    "step {step}"
                );
            }
            3 => {
                f.engine.commit(&file).await.expect("commit");
                f.engine.release(&file);
                let base = f.version("model").await;
                file = f.engine.open(f.target("model"), Some(base));
            }
            _ => {
                // Mostly near the end of the model, sometimes far past it (a hole).
                let offset = match rng.below(4) {
                    0 => rng.below(model.len() as u64 + 2 * MIB),
                    _ => rng.below(model.len() as u64 + 1),
                } as usize;
                let len = 1 + rng.below(96 * 1024) as usize;
                let data = rng.bytes(len);
                f.engine
                    .write(&file, offset as u64, &data)
                    .await
                    .expect("write");
                if model.len() < offset + data.len() {
                    model.resize(offset + data.len(), 0);
                }
                model[offset..offset + data.len()].copy_from_slice(&data);
            }
        }
        assert_eq!(file.meta().size, model.len() as u64, "step {step}");
        if step % 25 == 0 {
            assert_eq!(f.read_all(&file).await, model, "step {step}");
        }
    }
    f.engine.commit(&file).await.expect("final commit");
    assert_eq!(f.stored("model").as_deref(), Some(&model[..]));
    assert!(
        f.store.calls("upload_part_copy") > 0,
        "unchanged parts were copied"
    );
}

#[tokio::test]
async fn rewriting_4k_of_a_large_object_copies_the_rest_server_side() {
    let f = fixture(8 * MIB, 1 << 30);
    let mut rng = Rng(7);
    let original = rng.bytes((40 * MIB) as usize);
    std::fs::write(f.data.path().join("big"), &original).expect("seed");
    let base = f.version("big").await;
    let file = f.engine.open(f.target("big"), Some(base));
    let patch = rng.bytes(4096);
    f.engine
        .write(&file, 20 * MIB + 100, &patch)
        .await
        .expect("write");
    f.engine.commit(&file).await.expect("commit");

    let mut expected = original;
    let at = (20 * MIB + 100) as usize;
    expected[at..at + 4096].copy_from_slice(&patch);
    assert_eq!(f.stored("big").as_deref(), Some(&expected[..]));
    // Five 8 MiB parts: the one holding the patch is uploaded, the other four copied.
    assert_eq!(f.store.calls("upload_part"), 1);
    assert_eq!(f.store.calls("upload_part_copy"), 4);
    assert_eq!(f.store.calls("put"), 0);
    let fetched: u64 = f.store.gets().iter().map(|(_, r)| r.end - r.start).sum();
    // (A body chunk's base bytes are read as one span, the patch's 4 KiB included.)
    assert!(
        fetched <= 8 * MIB,
        "only the rewritten part's own range is read back: {fetched}"
    );
}

#[tokio::test]
async fn scattered_writes_are_read_back_with_one_get_of_the_base_per_read() {
    // 4 KiB written into every other 8 KiB of a 1 MiB object: 128 dirty and 128 base pieces.
    let f = fixture(8 * MIB, 1 << 30);
    let mut rng = Rng(11);
    let original = rng.bytes(MIB as usize);
    std::fs::write(f.data.path().join("holes"), &original).expect("seed");
    let base = f.version("holes").await;
    let file = f.engine.open(f.target("holes"), Some(base));
    let mut expected = original;
    for at in (0..MIB as usize).step_by(8192) {
        let patch = rng.bytes(4096);
        f.engine
            .write(&file, at as u64, &patch)
            .await
            .expect("write");
        expected[at..at + 4096].copy_from_slice(&patch);
    }
    assert_eq!(f.read_all(&file).await, expected);
    assert_eq!(f.store.gets_of("holes"), 1, "one GET for the whole read");
    f.engine.commit(&file).await.expect("commit");
    assert_eq!(f.stored("holes").as_deref(), Some(&expected[..]));
    assert_eq!(
        f.store.gets_of("holes"),
        2,
        "one more GET for the commit's body"
    );
}

/// Another writer replaces `key` in the store (a different size, so the local store's ETag of
/// it changes whatever its clock's resolution).
fn replace_behind_the_engine(f: &Fixture, key: &str, len: usize) -> Vec<u8> {
    let other = Rng(99).bytes(len);
    std::fs::write(f.data.path().join(key), &other).expect("the other writer's object");
    other
}

#[tokio::test]
async fn a_base_replaced_during_the_commit_is_a_conflict_and_copies_nothing_of_the_new_one() {
    let f = fixture(8 * MIB, 1 << 30);
    let mut rng = Rng(11);
    let original = rng.bytes((40 * MIB) as usize);
    std::fs::write(f.data.path().join("big"), &original).expect("seed");
    let base = f.version("big").await;
    let file = f.engine.open(f.target("big"), Some(base.clone()));
    let patch = rng.bytes(4096);
    f.engine.write(&file, 5 * MIB, &patch).await.expect("write");
    let theirs = replace_behind_the_engine(&f, "big", (40 * MIB) as usize + 1);

    let err = f.engine.commit(&file).await.expect_err("a conflict");
    assert!(
        matches!(&err, WriteError::Conflict { key, base: b } if key == "big" && *b == base.etag),
        "{err}"
    );
    assert!(err.is_terminal(), "retrying cannot resolve it");
    // Their object stands; no part of it was copied into a commit of ours.
    assert_eq!(f.stored("big").as_deref(), Some(&theirs[..]));
    // Ours is kept: the written range still reads back from the file.
    let kept = f
        .engine
        .read(&file, 5 * MIB..5 * MIB + 4096, false)
        .await
        .expect("read the kept bytes");
    assert_eq!(&kept[..], &patch[..]);
}

#[tokio::test]
async fn a_small_file_whose_base_was_replaced_is_a_conflict_too() {
    let f = fixture(8 * MIB, 1 << 30);
    std::fs::write(f.data.path().join("small"), b"0123456789").expect("seed");
    let base = f.version("small").await;
    let file = f.engine.open(f.target("small"), Some(base));
    f.engine.write(&file, 2, b"ab").await.expect("write");
    let theirs = replace_behind_the_engine(&f, "small", 20);

    let err = f.engine.commit(&file).await.expect_err("a conflict");
    assert!(matches!(err, WriteError::Conflict { .. }), "{err}");
    assert_eq!(f.stored("small").as_deref(), Some(&theirs[..]));
    assert_eq!(f.store.calls("put"), 0);
}

#[tokio::test]
async fn a_large_sequential_write_streams_its_parts_before_the_commit() {
    let f = fixture(8 * MIB, 1 << 30);
    let mut rng = Rng(99);
    let body = rng.bytes((40 * MIB) as usize);
    let file = f.engine.create(f.target("stream")).await;
    for (i, chunk) in body.chunks(MIB as usize).enumerate() {
        f.engine
            .write(&file, i as u64 * MIB, chunk)
            .await
            .expect("write");
    }
    // Parts 0..4 are complete; the writer does not wait for their uploads. Wait (bounded) for
    // them to land before closing.
    eventually(
        "parts uploaded while writing",
        Duration::from_secs(30),
        || f.store.calls("upload_part") >= 4,
    )
    .await;
    f.engine.commit(&file).await.expect("commit");
    assert_eq!(f.stored("stream").as_deref(), Some(&body[..]));
    assert_eq!(
        f.store.calls("upload_part"),
        5,
        "the commit reused every streamed part and sent only the last"
    );
    assert_eq!(f.store.calls("create_multipart"), 1);
}

#[tokio::test]
async fn a_write_now_writes_within_the_bound_and_does_nothing_past_it() {
    let f = fixture(64 * MIB, MIB);
    let file = f.engine.create(f.target("now")).await;
    assert!(matches!(
        f.engine.write_now(&file, 0, b"hello"),
        Some(Ok(false))
    ));
    assert_eq!(f.read_all(&file).await, b"hello");
    assert_eq!(f.engine.dirty_bytes(), 5);

    // No room at once: nothing is written, counted or recorded, for the caller to wait.
    let big = vec![7u8; MIB as usize];
    assert!(f.engine.write_now(&file, 5, &big).is_none());
    assert_eq!(file.meta().size, 5);
    assert_eq!(f.engine.dirty_bytes(), 5);
    assert_eq!(
        f.engine.inner.budget.used(),
        5,
        "the reservation was not kept"
    );

    let max = f.store.max_object_size();
    assert!(matches!(
        f.engine.write_now(&file, max, b"x"),
        Some(Err(WriteError::TooLarge { .. }))
    ));
    assert!(matches!(f.engine.write_now(&file, 5, b""), Some(Ok(false))));
    assert_eq!(file.meta().size, 5, "an empty write changes nothing");

    f.engine.commit(&file).await.expect("commit");
    assert_eq!(f.stored("now").as_deref(), Some(&b"hello"[..]));
    assert_eq!(f.engine.dirty_bytes(), 0);
    // With the bound free again the large write fits (alone, even past the bound).
    assert!(matches!(
        f.engine.write_now(&file, 5, &big),
        Some(Ok(false))
    ));
    f.engine.commit(&file).await.expect("commit");
    assert_eq!(f.stored("now").map(|b| b.len()), Some(5 + MIB as usize));
}

#[tokio::test]
async fn a_write_now_that_finishes_a_part_says_so_and_the_part_is_streamed() {
    let f = fixture(8 * MIB, 1 << 30);
    let body = Rng(42).bytes((40 * MIB) as usize);
    let file = f.engine.create(f.target("stream-now")).await;
    let mut finished = Vec::new();
    for (i, chunk) in body.chunks(MIB as usize).enumerate() {
        let offset = i as u64 * MIB;
        match f.engine.write_now(&file, offset, chunk) {
            Some(Ok(true)) => {
                finished.push(i);
                f.engine
                    .stream_parts_after(&file, offset, chunk.len() as u64)
                    .await;
            }
            Some(Ok(false)) => {}
            other => panic!("write {i}: {other:?}"),
        }
    }
    assert_eq!(finished, [7, 15, 23, 31, 39], "each write ending a part");
    eventually("four parts streamed", Duration::from_secs(30), || {
        f.store.calls("upload_part") >= 4
    })
    .await;
    f.engine.commit(&file).await.expect("commit");
    assert_eq!(f.stored("stream-now").as_deref(), Some(&body[..]));
    assert_eq!(
        f.store.calls("upload_part"),
        5,
        "the commit reused every streamed part"
    );
}

#[tokio::test]
async fn a_failed_background_commit_keeps_the_data_and_is_reported_to_fsync_once() {
    let f = fixture(64 * MIB, 1 << 30);
    let file = f.engine.create(f.target("flaky")).await;
    f.engine.write(&file, 0, b"precious").await.expect("write");
    f.store.fail_writes.store(true, Ordering::SeqCst);
    f.engine.commit_in_background(&file);
    eventually("the failure was recorded", Duration::from_secs(30), || {
        file.state().failure.is_some()
    })
    .await;
    assert!(file.is_dirty(), "the data stays dirty");
    assert!(f.stored("flaky").is_none());

    f.store.fail_writes.store(false, Ordering::SeqCst);
    let first = f.engine.fsync(&file).await;
    assert!(
        matches!(first, Err(WriteError::EarlierCommitFailed { .. })),
        "{first:?}"
    );
    assert_eq!(f.stored("flaky").as_deref(), Some(&b"precious"[..]));
    f.engine.fsync(&file).await.expect("reported once only");
}

#[tokio::test]
async fn a_foreground_commit_failure_is_returned_and_retried_in_the_background() {
    let f = fixture(64 * MIB, 1 << 30);
    let file = f.engine.create(f.target("retry")).await;
    f.engine.write(&file, 0, b"data").await.expect("write");
    f.store.fail_writes.store(true, Ordering::SeqCst);
    assert!(f.engine.commit(&file).await.is_err());
    f.store.fail_writes.store(false, Ordering::SeqCst);
    // The background retry lands it without anyone asking again.
    eventually("the retry landed", Duration::from_secs(30), || {
        f.stored("retry").is_some() && !file.is_dirty()
    })
    .await;
    assert_eq!(f.stored("retry").as_deref(), Some(&b"data"[..]));
}

#[tokio::test]
async fn a_writer_waiting_behind_a_commit_that_leaves_its_file_dirty_gets_another() {
    const KIB: u64 = 1024;
    let f = fixture(64 * MIB, MIB);
    let mut rng = Rng(5);
    let body = rng.bytes((1100 * KIB) as usize);
    let a = f.engine.create(f.target("a")).await;
    let b = f.engine.create(f.target("b")).await;
    let write_a = |range: std::ops::Range<u64>| {
        let (engine, a, bytes) = (
            f.engine.clone(),
            a.clone(),
            body[range.start as usize..range.end as usize].to_vec(),
        );
        tokio::spawn(async move { engine.write(&a, range.start, &bytes).await })
    };
    write_a(0..700 * KIB).await.expect("join").expect("write");
    f.engine
        .write(&b, 0, &rng.bytes((300 * KIB) as usize))
        .await
        .expect("write b");
    // Over the bound: the writer starts a background commit of `a`, held at its PUT.
    f.store.hold("a");
    let first = write_a(700 * KIB..800 * KIB);
    f.store.until_arrived(1).await;
    // Committing `b` frees room, so that writer goes on while the commit of `a` still runs...
    f.engine.commit(&b).await.expect("commit b");
    first.await.expect("join").expect("write");
    // ...and the next one waits behind that commit, which took its snapshot at 700 KiB.
    let second = write_a(800 * KIB..1100 * KIB);
    f.store.open_gate();
    tokio::time::timeout(std::time::Duration::from_secs(60), second)
        .await
        .expect("the waiting writer got a commit that freed room (no deadlock)")
        .expect("join")
        .expect("write");
    f.engine.commit(&a).await.expect("commit a");
    assert_eq!(f.stored("a").as_deref(), Some(&body[..]));
}

#[tokio::test]
async fn writers_past_the_dirty_bound_wait_for_commits_and_lose_nothing() {
    let f = fixture(64 * MIB, MIB);
    let mut rng = Rng(3);
    let body = rng.bytes((5 * MIB) as usize);
    let file = f.engine.create(f.target("bounded")).await;
    for (i, chunk) in body.chunks(64 * 1024).enumerate() {
        f.engine
            .write(&file, i as u64 * 64 * 1024, chunk)
            .await
            .expect("write");
        assert!(f.engine.dirty_bytes() <= MIB + 64 * 1024);
    }
    f.engine.commit(&file).await.expect("commit");
    assert_eq!(f.stored("bounded").as_deref(), Some(&body[..]));
    assert!(f.store.calls("put") > 1, "early commits drained the bound");
    assert_eq!(f.engine.dirty_bytes(), 0);
}

#[tokio::test]
async fn a_forgotten_file_is_never_committed() {
    let f = fixture(64 * MIB, 1 << 30);
    let file = f.engine.create(f.target("gone")).await;
    f.engine.write(&file, 0, b"x").await.expect("write");
    f.engine.forget("test-store", "gone").await;
    f.engine.commit(&file).await.expect("nothing to do");
    assert!(f.stored("gone").is_none());
    assert_eq!(f.engine.dirty_bytes(), 0);
    assert!(f.engine.find("test-store", "gone").is_none());
}

/// Issue #18's first case: a file unlinked while open, written on past the bound. Its bytes can
/// never be committed, so they must not count against the bound; before, every writer of the
/// process waited forever for a commit that returned at once for a deleted file.
#[tokio::test]
async fn writes_to_a_file_unlinked_while_open_never_wait_for_the_dirty_bound() {
    let f = fixture(64 * MIB, MIB);
    let scratch = f.engine.create(f.target("scratch")).await;
    let chunk = vec![7u8; 64 * 1024];
    f.engine.write(&scratch, 0, &chunk).await.expect("write");
    f.engine.forget("test-store", "scratch").await;
    let written = tokio::time::timeout(Duration::from_secs(60), async {
        for i in 1..64u64 {
            f.engine
                .write(&scratch, i * chunk.len() as u64, &chunk)
                .await
                .expect("write");
        }
    })
    .await;
    assert!(
        written.is_ok(),
        "writes past the bound to an unlinked file hung"
    );
    assert_eq!(f.engine.dirty_bytes(), 0, "nothing of it is counted");
    assert_eq!(
        f.read_all(&scratch).await.len() as u64,
        4 * MIB,
        "it still reads back"
    );
    let other = f.engine.create(f.target("other")).await;
    let body = Rng(9).bytes((2 * MIB) as usize);
    tokio::time::timeout(Duration::from_secs(60), f.engine.write(&other, 0, &body))
        .await
        .expect("another file's writer is not held back")
        .expect("write");
    f.engine.commit(&other).await.expect("commit");
    assert_eq!(f.stored("other").as_deref(), Some(&body[..]));
    assert!(f.stored("scratch").is_none());
    f.engine.release(&scratch);
}

/// A commit the store refuses for good (AccessDenied) stops retrying, keeps the data, frees the
/// bound for every other writer, and is reported at the next fsync, which tries again.
#[tokio::test]
async fn a_commit_refused_for_good_stops_retrying_keeps_the_data_and_frees_the_bound() {
    let f = fixture(64 * MIB, MIB);
    let denied = f.engine.create(f.target("denied")).await;
    let body = Rng(11).bytes((900 * 1024) as usize);
    f.engine.write(&denied, 0, &body).await.expect("write");
    f.store.deny_writes.store(true, Ordering::SeqCst);
    f.engine.commit_in_background(&denied);
    eventually(
        "the failure was taken as final",
        Duration::from_secs(30),
        || denied.state().stranded,
    )
    .await;
    assert_eq!(
        f.engine.dirty_bytes(),
        0,
        "its bytes no longer hold the bound"
    );
    let puts = f.store.calls("put");
    // Past the first background retry delay: nothing is retried on its own.
    tokio::time::sleep(RETRY_FIRST + Duration::from_millis(500)).await;
    assert_eq!(
        f.store.calls("put"),
        puts,
        "no retry loop against a final error"
    );
    f.store.deny_writes.store(false, Ordering::SeqCst);
    let other = f.engine.create(f.target("other")).await;
    tokio::time::timeout(
        Duration::from_secs(60),
        f.engine
            .write(&other, 0, &Rng(12).bytes((900 * 1024) as usize)),
    )
    .await
    .expect("another writer proceeds")
    .expect("write");
    let reported = f.engine.fsync(&denied).await;
    assert!(
        matches!(reported, Err(WriteError::EarlierCommitFailed { .. })),
        "{reported:?}"
    );
    assert_eq!(
        f.stored("denied").as_deref(),
        Some(&body[..]),
        "the fsync tried again"
    );
    assert!(!denied.state().stranded);
    f.engine.fsync(&denied).await.expect("reported once");
}

/// Sizes past what the store can hold are refused when asked for, not at the commit (issue #18:
/// a truncate to 10^15 bytes used to be accepted, then aborted the process at commit).
#[tokio::test]
async fn sizes_past_the_store_limit_are_refused_before_any_commit() {
    let f = fixture(64 * MIB, 1 << 30);
    let max = crate::store::MAX_OBJECT_SIZE;
    let file = f.engine.create(f.target("huge")).await;
    let refused = f.engine.truncate(&file, 999_999_999_999_999);
    assert!(
        matches!(refused, Err(WriteError::TooLarge { .. })),
        "{refused:?}"
    );
    assert!(matches!(
        f.engine.truncate(&file, max + 1),
        Err(WriteError::TooLarge { .. })
    ));
    assert!(matches!(
        f.engine.write(&file, max, b"x").await,
        Err(WriteError::TooLarge { .. })
    ));
    assert!(matches!(
        f.engine.write(&file, u64::MAX, b"x").await,
        Err(WriteError::TooLarge { .. })
    ));
    f.engine
        .truncate(&file, max)
        .expect("the largest size itself is allowed");
    assert_eq!(file.meta().size, max);
    f.engine.forget("test-store", "huge").await;
    f.engine.release(&file);
}

/// Commits draw their in-memory chunks from `write_buffer_limit_bytes`: with room for about one
/// chunk, a multipart commit of parts sent four at a time still completes, and every byte held
/// comes back.
#[tokio::test]
async fn commits_within_a_tiny_buffer_bound_complete_and_give_their_memory_back() {
    let data = tempfile::tempdir().expect("data dir");
    let spill = tempfile::tempdir().expect("spill dir");
    let store = TestStore::new(data.path(), "test-store");
    let config = WriteConfig {
        multipart_threshold: 5 * MIB,
        commit_workers: 2,
        dirty_limit: 1 << 30,
        buffer_limit: 2 * MIB,
        promote: false,
        spill_parent: Some(spill.path().to_path_buf()),
        journal_parent: None,
    };
    let engine =
        WriteEngine::new(config, Arc::new(DirectReader), None, Metrics::new()).expect("engine");
    let target = Target {
        store: store.clone(),
        backend: "test".into(),
        key: "big".into(),
        observer: None,
    };
    let body = Rng(21).bytes((40 * MIB) as usize);
    let file = engine.create(target).await;
    // Written backwards, so no part is streamed early: the commit sends them all.
    for (i, chunk) in body.chunks(MIB as usize).enumerate().rev() {
        engine
            .write(&file, i as u64 * MIB, chunk)
            .await
            .expect("write");
    }
    let small = engine
        .create(Target {
            store: store.clone(),
            backend: "test".into(),
            key: "small".into(),
            observer: None,
        })
        .await;
    engine
        .write(&small, 0, &body[..(3 * MIB) as usize])
        .await
        .expect("write");
    let (big, small_commit) = tokio::time::timeout(Duration::from_secs(120), async {
        tokio::join!(engine.commit(&file), engine.commit(&small))
    })
    .await
    .expect("no commit waits forever for buffer room");
    big.expect("commit big");
    small_commit.expect("commit small");
    assert_eq!(
        std::fs::read(data.path().join("big")).ok().as_deref(),
        Some(&body[..])
    );
    assert_eq!(
        engine.buffered_bytes(),
        0,
        "every chunk gave its bytes back"
    );
}

#[tokio::test]
async fn two_handles_share_one_file() {
    let f = fixture(64 * MIB, 1 << 30);
    let a = f.engine.create(f.target("shared")).await;
    let b = f.engine.open(f.target("shared"), None);
    assert!(Arc::ptr_eq(&a, &b));
    f.engine.write(&a, 0, b"aaaa").await.expect("write a");
    f.engine.write(&b, 2, b"bb").await.expect("write b");
    assert_eq!(f.read_all(&a).await, b"aabb");
    f.engine.release(&a);
    assert!(
        f.engine.find("test-store", "shared").is_some(),
        "b still open, dirty"
    );
    f.engine.commit(&b).await.expect("commit");
    f.engine.release(&b);
    assert!(f.engine.find("test-store", "shared").is_none());
    assert_eq!(f.stored("shared").as_deref(), Some(&b"aabb"[..]));
}

/// Waits (bounded) until the engine's journal holds `n` uploads.
async fn until_journalled(f: &Fixture, n: usize) {
    for _ in 0..500 {
        if f.engine.inner.journal.entries().len() == n {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!(
        "the journal holds {:?}, not {n} uploads",
        f.engine.inner.journal.entries()
    );
}

#[tokio::test]
async fn a_multipart_upload_is_journalled_until_completed_or_aborted() {
    let f = fixture(8 * MIB, 1 << 30);
    let body = Rng(7).bytes((17 * MIB) as usize);
    for key in ["landed", "dropped"] {
        let file = f.engine.create(f.target(key)).await;
        for (i, chunk) in body.chunks(MIB as usize).enumerate() {
            f.engine
                .write(&file, i as u64 * MIB, chunk)
                .await
                .expect("write");
        }
        f.engine.release(&file);
    }
    // Both files streamed parts into an upload each, journalled at once.
    until_journalled(&f, 2).await;
    let landed = f.engine.find("test-store", "landed").expect("dirty file");
    f.engine.commit(&landed).await.expect("commit");
    until_journalled(&f, 1).await;
    assert_eq!(f.engine.inner.journal.entries()[0].key, "dropped");
    f.engine.forget("test-store", "dropped").await;
    // Aborted in the background, then forgotten.
    until_journalled(&f, 0).await;
    assert!(f.store.list_uploads("").await.expect("list").is_empty());
    assert_eq!(f.stored("landed").as_deref(), Some(&body[..]));
}

/// `close(2)` does not wait for FUSE's `release`, so a reopen of the same name races the engine
/// letting go of the file: the opener must always get the file `find` (and so `stat`) sees.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_open_racing_the_release_of_the_last_handle_gets_the_file_stat_sees() {
    let f = fixture(64 * MIB, 64 * MIB);
    std::fs::write(f.data.path().join("raced"), b"object").expect("object");
    let base = f.version("raced").await;
    let target = f.target("raced");
    for round in 0..2_000 {
        // Over the object as it is: clean, so the last release lets it go.
        let first = f.engine.open(target.clone(), Some(base.clone()));
        let start = std::sync::Barrier::new(2);
        let second = std::thread::scope(|s| {
            s.spawn(|| {
                start.wait();
                f.engine.release(&first);
            });
            let opener = s.spawn(|| {
                start.wait();
                f.engine.open(target.clone(), Some(base.clone()))
            });
            opener.join().expect("opener")
        });
        let seen = f.engine.find("test-store", "raced");
        assert!(
            seen.as_ref().is_some_and(|s| Arc::ptr_eq(s, &second)),
            "round {round}: the reopened handle's file is not the one the engine shows"
        );
        f.engine.release(&second);
        assert!(
            f.engine.find("test-store", "raced").is_none(),
            "round {round}: let go"
        );
    }
}

/// The spill directories made ahead of need that a file would take: those with an empty log.
fn spares_of(engine: &WriteEngine) -> Vec<std::path::PathBuf> {
    std::fs::read_dir(engine.inner.spill_dir.path())
        .expect("list")
        .flatten()
        .map(|e| e.path())
        .filter(|dir| std::fs::metadata(dir.join("log")).is_ok_and(|m| m.len() == 0))
        .collect()
}

/// The spill directory `file` writes into.
fn spill_dir_of(file: &DirtyFile) -> std::path::PathBuf {
    let state = file.state();
    state.log.as_ref().expect("a log").dir().to_path_buf()
}

#[tokio::test]
async fn files_take_spill_directories_made_ahead_and_broken_ones_are_replaced() {
    let f = fixture(64 * MIB, 1 << 30);
    for _ in 0..3000 {
        if !spares_of(&f.engine).is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let spares = spares_of(&f.engine);
    assert!(!spares.is_empty(), "spares are made");

    let first = f.engine.create(f.target("first")).await;
    f.engine.write(&first, 0, b"one").await.expect("write");
    let dir = spill_dir_of(&first);
    assert!(
        spares.contains(&dir),
        "{dir:?} is one of the spares {spares:?}"
    );
    f.engine.commit(&first).await.expect("commit");
    assert_eq!(f.stored("first").as_deref(), Some(&b"one"[..]));

    // Spares broken by hand (their logs removed): the oldest is taken first, dropped, and
    // the file gets a new directory.
    let broken = spares_of(&f.engine);
    for spare in &broken {
        std::fs::remove_file(spare.join("log")).expect("break a spare");
    }
    let second = f.engine.create(f.target("second")).await;
    f.engine
        .write(&second, 0, b"two")
        .await
        .expect("write despite broken spares");
    let dir = spill_dir_of(&second);
    assert!(
        !broken.contains(&dir),
        "a new directory, not a broken spare"
    );
    assert!(
        broken.iter().any(|spare| !spare.exists()),
        "the broken spare taken was dropped"
    );
    f.engine.commit(&second).await.expect("commit");
    assert_eq!(f.stored("second").as_deref(), Some(&b"two"[..]));
}
