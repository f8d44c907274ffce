//! The persistent cache (`cache_persistent`): lines outlive the cache that fetched them, are
//! served to the next one only for the same object version and only once their checksum holds,
//! and one directory serves one cache at a time.

use std::path::Path;
use std::sync::Arc;

use super::persist::{DIR_NAME, LINES_FILE};
use super::tests::{LINE, patterned, until};
use super::{LineCache, ObjectReader, ObjectVersion};
use crate::config::{CacheConfig, CacheStorage};
use crate::store::ObjectStore;
use crate::store::testing::TestStore;

const LINES: u64 = 16;

fn persistent_config(parent: &Path, lines: u64) -> CacheConfig {
    CacheConfig {
        storage: CacheStorage::MappedFile,
        line_size: LINE,
        lines,
        ram_lines: 0,
        lines_to_prefetch: 0,
        dir_path: Some(parent.to_path_buf()),
        persistent: true,
        write_cache_promotion: false,
    }
}

/// A persistent cache whose kept lines are all back (the restore runs in the background).
fn persistent(parent: &Path, lines: u64) -> Arc<LineCache> {
    let cache = LineCache::new(&persistent_config(parent, lines)).expect("persistent cache");
    cache.wait_restored();
    cache
}

/// A store over a directory, and objects written into it.
struct Objects {
    dir: tempfile::TempDir,
    test_store: Arc<TestStore>,
    store: Arc<dyn ObjectStore>,
}

impl Objects {
    fn new() -> Objects {
        let dir = tempfile::tempdir().expect("data dir");
        let test_store = TestStore::new(dir.path(), "test-store");
        Objects {
            dir,
            store: test_store.clone(),
            test_store,
        }
    }

    async fn put(&self, key: &str, len: u64, seed: u8) -> ObjectVersion {
        std::fs::write(self.dir.path().join(key), patterned(seed, len)).expect("write object");
        let meta = self.store.head(key).await.expect("head").expect("exists");
        ObjectVersion {
            key: meta.key,
            etag: meta.etag,
            size: meta.size,
        }
    }

    async fn read_all(&self, cache: &LineCache, object: &ObjectVersion) -> Vec<u8> {
        cache
            .read(&self.store, object, 0..object.size, false)
            .await
            .expect("read")
            .to_vec()
    }
}

/// An object of `len` bytes of `seed`, read whole through a persistent cache in a fresh parent
/// directory which is then dropped: what the next process finds.
async fn read_by_a_first_cache(len: u64, seed: u8) -> (tempfile::TempDir, Objects, ObjectVersion) {
    read_by_a_first_cache_of(LINES, len, seed).await
}

/// [`read_by_a_first_cache`] with a cache of `lines` lines.
async fn read_by_a_first_cache_of(
    lines: u64,
    len: u64,
    seed: u8,
) -> (tempfile::TempDir, Objects, ObjectVersion) {
    let parent = tempfile::tempdir().expect("cache parent");
    let objects = Objects::new();
    let object = objects.put("obj", len, seed).await;
    let first = persistent(parent.path(), lines);
    assert_eq!(
        objects.read_all(&first, &object).await,
        patterned(seed, len)
    );
    drop(first);
    (parent, objects, object)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lines_outlive_the_cache_and_are_served_without_a_fetch() {
    let parent = tempfile::tempdir().expect("cache parent");
    let objects = Objects::new();
    // Four whole lines and a short last one.
    let object = objects.put("obj", 4 * LINE + 100, 3).await;
    let first = persistent(parent.path(), LINES);
    assert_eq!(first.dir(), parent.path().join(DIR_NAME));
    assert_eq!(
        objects.read_all(&first, &object).await,
        patterned(3, object.size)
    );
    drop(first);
    let fetched = objects.test_store.gets_of("obj");
    assert_eq!(fetched, 5, "one GET per line");

    let second = persistent(parent.path(), LINES);
    assert_eq!(second.stats().lines_restored, 5);
    assert_eq!(second.stats().lines_resident, 5);
    assert_eq!(
        objects.read_all(&second, &object).await,
        patterned(3, object.size)
    );
    assert_eq!(
        objects.test_store.gets_of("obj"),
        fetched,
        "a kept line was fetched again"
    );
    assert_eq!(second.stats().lines_rejected, 0);
    // A third generation finds them too (the second kept its index as it found it).
    drop(second);
    let third = persistent(parent.path(), LINES);
    assert_eq!(third.stats().lines_restored, 5);
}

/// The kept lines go back in the background: a read straight after the start, racing the
/// restore, waits for a line not back yet instead of fetching it. Enough lines for several of
/// the restore's batches, so that the read usually starts while it runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_during_the_restore_waits_for_the_kept_lines_instead_of_fetching() {
    const MANY: u64 = 5_000;
    let (parent, objects, object) = read_by_a_first_cache_of(MANY, MANY * LINE, 4).await;
    let fetched = objects.test_store.gets_of("obj");

    let second = LineCache::new(&persistent_config(parent.path(), MANY)).expect("second cache");
    // The last line first: the restore reads the index in slot order, so it comes back last.
    let last = (MANY - 1) * LINE..MANY * LINE;
    let bytes = second
        .read(&objects.store, &object, last.clone(), false)
        .await
        .expect("read");
    assert_eq!(
        &bytes[..],
        &patterned(4, object.size)[last.start as usize..last.end as usize]
    );
    assert_eq!(
        objects.read_all(&second, &object).await,
        patterned(4, object.size)
    );
    assert_eq!(
        objects.test_store.gets_of("obj"),
        fetched,
        "a kept line was fetched again"
    );
    assert_eq!(second.stats().lines_restored, MANY);
    assert_eq!(second.stats().lines_rejected, 0);
}

/// Dropping a cache while it restores stops the restore and frees the directory at once for
/// the next cache (a restarted mount in the same process must not find it locked).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cache_dropped_while_restoring_frees_its_directory() {
    const MANY: u64 = 5_000;
    let (parent, _objects, _object) = read_by_a_first_cache_of(MANY, MANY * LINE, 5).await;
    for _ in 0..3 {
        drop(LineCache::new(&persistent_config(parent.path(), MANY)).expect("cache"));
    }
    let last = persistent(parent.path(), MANY);
    assert_eq!(
        last.dir(),
        parent.path().join(DIR_NAME),
        "the kept directory"
    );
    assert_eq!(last.stats().lines_restored, MANY);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replaced_object_is_read_anew_never_from_kept_lines() {
    let (parent, objects, old) = read_by_a_first_cache(3 * LINE, 1).await;
    // Another writer replaces the object between the two processes.
    std::thread::sleep(std::time::Duration::from_millis(20));
    let new = objects.put("obj", 3 * LINE, 2).await;
    assert_ne!(
        old.etag, new.etag,
        "the test store gives a new version a new ETag"
    );
    let second = persistent(parent.path(), LINES);
    let before = objects.test_store.gets_of("obj");
    assert_eq!(
        objects.read_all(&second, &new).await,
        patterned(2, new.size)
    );
    assert_eq!(objects.test_store.gets_of("obj") - before, 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_line_corrupted_on_disk_is_detected_and_fetched_again() {
    let (parent, objects, object) = read_by_a_first_cache(2 * LINE, 5).await;
    // Slots are handed out from 0: the object's two lines are in slots 0 and 1. Flip one byte
    // of the second, as a bad disk block or a torn write would.
    let path = parent.path().join(DIR_NAME).join(LINES_FILE);
    let mut bytes = std::fs::read(&path).expect("line file");
    bytes[LINE as usize + 17] ^= 0xff;
    std::fs::write(&path, bytes).expect("corrupt the line file");

    let second = persistent(parent.path(), LINES);
    assert_eq!(second.stats().lines_restored, 2);
    let before = objects.test_store.gets_of("obj");
    assert_eq!(
        objects.read_all(&second, &object).await,
        patterned(5, object.size)
    );
    assert_eq!(second.stats().lines_rejected, 1);
    assert_eq!(
        objects.test_store.gets_of("obj") - before,
        1,
        "only the corrupted line is fetched"
    );
    // Fetched again, the line is an ordinary clean line: the next read is a hit.
    objects.read_all(&second, &object).await;
    assert_eq!(objects.test_store.gets_of("obj") - before, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_geometry_starts_empty() {
    let (parent, objects, object) = read_by_a_first_cache(2 * LINE, 5).await;
    let resized = persistent(parent.path(), LINES * 2);
    assert_eq!(resized.stats().lines_restored, 0);
    assert_eq!(
        objects.read_all(&resized, &object).await,
        patterned(5, object.size)
    );
    drop(resized);
    // And the new geometry is what the next cache finds.
    let again = persistent(parent.path(), LINES * 2);
    assert_eq!(again.stats().lines_restored, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_cache_over_the_same_directory_gets_a_private_one() {
    let parent = tempfile::tempdir().expect("cache parent");
    let objects = Objects::new();
    let object = objects.put("obj", 2 * LINE, 9).await;
    let first = persistent(parent.path(), LINES);
    let second = persistent(parent.path(), LINES);
    assert_ne!(second.dir(), first.dir(), "two caches share one line file");
    // Both work, each in its own lines.
    assert_eq!(
        objects.read_all(&first, &object).await,
        patterned(9, object.size)
    );
    assert_eq!(
        objects.read_all(&second, &object).await,
        patterned(9, object.size)
    );
    let private = second.dir().to_path_buf();
    drop(second);
    assert!(
        !private.exists(),
        "the private fallback is removed like any"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn capacity_holds_across_restarts() {
    let parent = tempfile::tempdir().expect("cache parent");
    let objects = Objects::new();
    // Twice the capacity, read through: only the last LINES lines can be kept.
    let object = objects.put("big", 2 * LINES * LINE, 4).await;
    let first = persistent(parent.path(), LINES);
    objects.read_all(&first, &object).await;
    drop(first);
    let second = persistent(parent.path(), LINES);
    assert_eq!(second.stats().lines_restored, LINES);
    assert_eq!(
        objects.read_all(&second, &object).await,
        patterned(4, object.size)
    );
    assert!(second.stats().lines_resident <= LINES);
    assert_eq!(second.stats().lines_rejected, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_damaged_index_costs_the_kept_lines_not_the_mount() {
    let (parent, objects, object) = read_by_a_first_cache(2 * LINE, 6).await;
    std::fs::write(
        parent.path().join(DIR_NAME).join("index.redb"),
        b"not a redb file at all",
    )
    .expect("damage the index");
    let second = persistent(parent.path(), LINES);
    assert_eq!(second.stats().lines_restored, 0);
    assert_eq!(
        objects.read_all(&second, &object).await,
        patterned(6, object.size)
    );
    drop(second);
    // The index made anew works like any.
    assert_eq!(persistent(parent.path(), LINES).stats().lines_restored, 2);
}

/// `tiered` keeps its disk tier: the lines that moved down from RAM are there for the next
/// cache, checked as any; those still in RAM at the end are fetched again. The line file is the
/// same for `mapped-file`, so switching modes keeps the lines too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tiered_cache_keeps_the_lines_of_its_disk_tier() {
    const RAM: u64 = 4;
    let tiered = |parent: &Path| {
        let cache = LineCache::new(&CacheConfig {
            storage: CacheStorage::Tiered,
            ram_lines: RAM,
            ..persistent_config(parent, LINES)
        })
        .expect("tiered persistent cache");
        cache.wait_restored();
        cache
    };
    let parent = tempfile::tempdir().expect("cache parent");
    let objects = Objects::new();
    // Eleven whole lines and a short last one: more than RAM holds.
    let object = objects.put("obj", 11 * LINE + 100, 8).await;
    let first = tiered(parent.path());
    // Line by line: each fill rings the mover, which moves the lines read before it down.
    for line in 0..12 {
        let range = line * LINE..((line + 1) * LINE).min(object.size);
        let bytes = first
            .read(&objects.store, &object, range.clone(), false)
            .await
            .expect("read");
        assert_eq!(
            &bytes[..],
            &patterned(8, object.size)[range.start as usize..range.end as usize]
        );
    }
    until(|| first.stats().ram_lines_resident < RAM).await;
    let stats = first.stats();
    assert!(stats.demotions > 0, "lines moved down from RAM: {stats:?}");
    let on_disk = stats.lines_resident - stats.ram_lines_resident;
    drop(first);
    assert_eq!(objects.test_store.gets_of("obj"), 12);

    let second = tiered(parent.path());
    assert_eq!(second.stats().lines_restored, on_disk);
    assert_eq!(
        objects.read_all(&second, &object).await,
        patterned(8, object.size)
    );
    assert_eq!(second.stats().lines_rejected, 0, "{:?}", second.stats());
    assert_eq!(
        objects.test_store.gets_of("obj") as u64,
        12 + (12 - on_disk),
        "only the lines that were in RAM are fetched again"
    );
    drop(second);
    let as_mapped_file = persistent(parent.path(), LINES);
    let restored = as_mapped_file.stats().lines_restored;
    assert!(restored >= on_disk);
    let before = objects.test_store.gets_of("obj") as u64;
    assert_eq!(
        objects.read_all(&as_mapped_file, &object).await,
        patterned(8, object.size)
    );
    assert_eq!(as_mapped_file.stats().lines_rejected, 0);
    assert_eq!(
        objects.test_store.gets_of("obj") as u64 - before,
        12 - restored
    );
}

#[test]
fn a_missing_cache_dir_path_is_reported_not_created() {
    let parent = tempfile::tempdir().expect("cache parent");
    let missing = parent.path().join("no/such/dir");
    let error = LineCache::new(&persistent_config(&missing, LINES))
        .expect_err("refused")
        .to_string();
    assert!(error.contains("no/such/dir"), "{error}");
    assert!(!missing.exists(), "the missing directory was created");
}

/// The persistent-cache sample (`tests/fixtures/formats/line-cache`: the directory a cache of
/// [`LINES`] lines left after reading one object of four lines and a short one), and the ETag
/// of the object it was read from (`line-cache.etag`: the test store's ETags are not
/// reproducible, so the sample names the one its index holds).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_persistent_cache_sample_serves_its_lines_without_a_fetch() {
    let len = 4 * LINE + 100;
    let etag_file = crate::format_fixtures::path("line-cache.etag");
    if crate::format_fixtures::writing() {
        let (parent, _objects, object) = read_by_a_first_cache(len, 3).await;
        crate::format_fixtures::store("line-cache", &parent.path().join(DIR_NAME));
        std::fs::write(&etag_file, &object.etag).expect("write the ETag");
    }
    let parent = tempfile::tempdir().expect("cache parent");
    crate::format_fixtures::copy_to("line-cache", &parent.path().join(DIR_NAME));
    let objects = Objects::new();
    std::fs::write(objects.dir.path().join("obj"), patterned(3, len)).expect("object");
    let object = ObjectVersion {
        key: "obj".into(),
        etag: std::fs::read_to_string(&etag_file).expect("the sample's ETag"),
        size: len,
    };
    let cache = persistent(parent.path(), LINES);
    assert_eq!(cache.stats().lines_restored, 5);
    assert_eq!(objects.read_all(&cache, &object).await, patterned(3, len));
    assert_eq!(
        objects.test_store.gets_of("obj"),
        0,
        "served from the sample"
    );
    assert_eq!(cache.stats().lines_rejected, 0);
}
