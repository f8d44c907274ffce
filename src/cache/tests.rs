//! Line cache behaviour, run against the local-directory store through a wrapper that counts,
//! holds back, cuts short or fails GETs. Every storage mode runs the same suite, which is why it
//! is one file of ~800 lines: split, the modes would each need the whole wrapper again.

use std::collections::HashSet;
use std::ops::Range;
use std::sync::Arc;

use super::{CacheError, LineCache, ObjectReader, ObjectVersion};
use crate::config::{CacheConfig, CacheStorage};
use bytes::Bytes;

use crate::store::testing::TestStore;
use crate::store::{ObjectStore, StoreError};

pub(super) const LINE: u64 = 4096;

/// The byte at `offset` of the object written with `seed`: never periodic in the line size.
fn pattern(seed: u8, offset: u64) -> u8 {
    (offset % 251) as u8 ^ seed
}

pub(super) fn patterned(seed: u8, len: u64) -> Vec<u8> {
    (0..len).map(|o| pattern(seed, o)).collect()
}

/// A cache of `lines` lines of [`LINE`] bytes over a test store of patterned objects.
pub(super) struct Fixture {
    data: tempfile::TempDir,
    _cache_parent: tempfile::TempDir,
    test_store: Arc<TestStore>,
    pub(super) store: Arc<dyn ObjectStore>,
    pub(super) cache: Arc<LineCache>,
}

/// `lines` lines; `tiered` storage has a quarter of them (at least one) in its RAM tier.
fn config(storage: CacheStorage, lines: u64, prefetch: u64, dir: &std::path::Path) -> CacheConfig {
    let ram_lines = match storage {
        CacheStorage::Tiered => (lines / 4).max(1),
        _ => 0,
    };
    CacheConfig {
        storage,
        line_size: LINE,
        lines: lines - ram_lines,
        ram_lines,
        lines_to_prefetch: prefetch,
        dir_path: Some(dir.to_path_buf()),
        persistent: false,
        write_cache_promotion: false,
    }
}

impl Fixture {
    pub(super) fn new(storage: CacheStorage, lines: u64, prefetch: u64) -> Fixture {
        let parent = tempfile::tempdir().expect("cache parent");
        Fixture::over(config(storage, lines, prefetch, parent.path()), parent)
    }

    /// `cache_storage: tiered` with `ram` lines over `disk`, no read-ahead.
    pub(super) fn with_tiers(ram: u64, disk: u64) -> Fixture {
        let parent = tempfile::tempdir().expect("cache parent");
        let config = CacheConfig {
            lines: disk,
            ram_lines: ram,
            ..config(CacheStorage::Tiered, ram + disk, 0, parent.path())
        };
        Fixture::over(config, parent)
    }

    fn over(config: CacheConfig, cache_parent: tempfile::TempDir) -> Fixture {
        let data = tempfile::tempdir().expect("data dir");
        let test_store = TestStore::new(data.path(), "test-store");
        let cache = LineCache::new(&config).expect("cache");
        Fixture {
            data,
            _cache_parent: cache_parent,
            store: test_store.clone(),
            test_store,
            cache,
        }
    }

    pub(super) fn test_store(&self) -> &TestStore {
        &self.test_store
    }

    /// Writes object `key` of `len` patterned bytes and returns its version.
    pub(super) async fn object(&self, key: &str, len: u64, seed: u8) -> ObjectVersion {
        std::fs::write(self.data.path().join(key), patterned(seed, len)).expect("write object");
        self.version(key).await
    }

    async fn version(&self, key: &str) -> ObjectVersion {
        let meta = self
            .store
            .head(key)
            .await
            .expect("head")
            .expect("object exists");
        ObjectVersion {
            key: meta.key,
            etag: meta.etag,
            size: meta.size,
        }
    }

    async fn read(&self, object: &ObjectVersion, range: Range<u64>) -> Result<Bytes, StoreError> {
        self.cache.read(&self.store, object, range, false).await
    }

    pub(super) async fn read_sequential(&self, object: &ObjectVersion, range: Range<u64>) -> Bytes {
        self.cache
            .read(&self.store, object, range, true)
            .await
            .expect("sequential read")
    }

    /// Reads `range` and checks it against the pattern of `seed`.
    pub(super) async fn check(&self, object: &ObjectVersion, range: Range<u64>, seed: u8) {
        let got = self.read(object, range.clone()).await.expect("read");
        let end = range.end.min(object.size);
        let want: Vec<u8> = (range.start..end.max(range.start))
            .map(|o| pattern(seed, o))
            .collect();
        assert!(
            got[..] == want[..],
            "bytes {range:?} of {} differ from the pattern",
            object.key
        );
    }
}

/// Waits until `done` holds; what is awaited happens in other tasks or threads. A minute is
/// not a timing assertion (a loaded machine takes milliseconds): it turns a wait that would
/// never end into a failure that says so.
pub(super) async fn until(mut done: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !done() {
        assert!(
            std::time::Instant::now() < deadline,
            "still waiting after a minute: what was awaited never happened"
        );
        tokio::time::sleep(std::time::Duration::from_millis(1)).await;
    }
}

/// The seed of a randomized test: `MSFS_TEST_SEED` if set, else a fresh one.
pub(super) fn seed() -> u64 {
    match std::env::var("MSFS_TEST_SEED") {
        Ok(s) => s.parse().expect("MSFS_TEST_SEED is a number"),
        Err(_) => std::hash::BuildHasher::hash_one(&std::hash::RandomState::new(), 0u8),
    }
}

/// xorshift64*: enough randomness for offsets, reproducible from the seed.
pub(super) fn next(state: &mut u64) -> u64 {
    *state ^= *state >> 12;
    *state ^= *state << 25;
    *state ^= *state >> 27;
    state.wrapping_mul(0x2545_F491_4F6C_DD1D)
}

macro_rules! in_every_mode {
    ($($test:ident),* $(,)?) => {
        in_every_mode!(@mode ram, Ram; $($test),*);
        in_every_mode!(@mode mapped_file, MappedFile; $($test),*);
        in_every_mode!(@mode per_inode_file, PerInodeFile; $($test),*);
        in_every_mode!(@mode tiered, Tiered; $($test),*);
    };
    (@mode $module:ident, $storage:ident; $($test:ident),*) => {
        mod $module {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $test() {
                    super::$test(crate::config::CacheStorage::$storage).await;
                }
            )*
        }
    };
}

in_every_mode!(
    reads_at_any_offset_and_length_return_the_object_bytes,
    concurrent_overlapping_reads_fetch_each_line_once,
    working_set_larger_than_capacity_is_served_within_capacity,
    concurrent_readers_of_a_working_set_larger_than_capacity_get_exact_bytes,
    changed_etag_is_never_served_from_old_lines,
    failed_fetch_reaches_every_waiter_and_the_next_read_succeeds,
    short_body_is_an_error_not_a_clean_line,
    sequential_reads_prefetch_following_lines_up_to_the_object_end,
    read_ahead_goes_out_in_runs_of_a_quarter_window,
    random_reads_do_not_prefetch,
    read_with_every_slot_inbound_is_served_uncached,
    read_with_every_slot_pinned_is_served_uncached,
    invalidate_drops_every_line_of_the_key,
    invalidated_inbound_line_serves_its_waiters_but_is_not_kept,
    admit_inserts_fully_covered_lines_as_clean,
    admit_never_evicts_pinned_or_inbound_lines,
    stores_with_the_same_id_share_lines,
    private_directory_is_removed_on_drop,
);

/// The modes whose lines live in this process's memory: a fetch streams into its line there.
mod streaming {
    use crate::config::CacheStorage;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn ram() {
        super::a_reader_is_served_once_its_part_of_an_inbound_line_is_in(CacheStorage::Ram).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn mapped_file() {
        super::a_reader_is_served_once_its_part_of_an_inbound_line_is_in(CacheStorage::MappedFile)
            .await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn ram_cut_run() {
        super::a_run_cut_short_keeps_its_complete_lines_and_fails_the_rest(CacheStorage::Ram).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn mapped_file_cut_run() {
        super::a_run_cut_short_keeps_its_complete_lines_and_fails_the_rest(
            CacheStorage::MappedFile,
        )
        .await;
    }
}

async fn a_run_cut_short_keeps_its_complete_lines_and_fails_the_rest(storage: CacheStorage) {
    let f = Fixture::new(storage, 64, 16);
    let object = f.object("cut-run", 5 * LINE, 4).await;
    f.test_store
        .short
        .lock()
        .expect("short")
        .insert("cut-run".into());
    // Line 0 on demand, lines 1..=4 read ahead in one run; every body ends one byte short. The
    // head of line 0 arrived, so this read may be served; the lines are what matters here.
    let _ = f.cache.read(&f.store, &object, 0..10, true).await;
    f.check(&object, LINE..4 * LINE, 4).await;
    let end = f.read(&object, 5 * LINE - 1..5 * LINE).await;
    assert!(matches!(end, Err(StoreError::Truncated { .. })), "{end:?}");
    f.test_store.short.lock().expect("short").clear();
    let before = f.test_store.gets_of("cut-run");
    f.check(&object, 0..5 * LINE, 4).await;
    assert_eq!(
        f.test_store.gets_of("cut-run") - before,
        2,
        "lines 0 and 4 fetched again; lines 1..=3 were complete and kept"
    );
}

async fn a_reader_is_served_once_its_part_of_an_inbound_line_is_in(storage: CacheStorage) {
    let f = Fixture::new(storage, 16, 0);
    let object = f.object("big", 2 * LINE, 9).await;
    // The fetch of line 0 stores the first half of the line, then stalls until the gate opens.
    f.test_store.hold_tail("big");
    // Not a timing check: without early service this read would wait for the gate forever.
    let head = tokio::time::timeout(
        std::time::Duration::from_secs(60),
        f.read(&object, 0..LINE / 4),
    )
    .await
    .expect("the head of an inbound line is served before its tail arrives")
    .expect("read the head");
    assert!(head[..] == patterned(9, LINE / 4)[..], "head bytes differ");

    let (tail, ()) = tokio::join!(f.read(&object, LINE / 4..LINE), async {
        until(|| f.cache.stats().waits >= 1).await;
        f.test_store.open_gate();
    });
    let tail = tail.expect("read the tail");
    assert!(
        tail[..] == patterned(9, LINE)[LINE as usize / 4..],
        "tail bytes differ"
    );
    f.check(&object, 0..LINE, 9).await;
    assert_eq!(f.test_store.gets_of("big"), 1, "the line was fetched once");
}

async fn reads_at_any_offset_and_length_return_the_object_bytes(storage: CacheStorage) {
    let f = Fixture::new(storage, 16, 0);
    let size = 5 * LINE + 123;
    let object = f.object("data", size, 7).await;
    let ranges = [
        0..1,
        0..LINE,
        LINE - 1..LINE + 1,
        100..3 * LINE + 17,
        2 * LINE..2 * LINE + 4000,
        5 * LINE..size,
        5 * LINE + 100..size + 1000,
        0..size,
        size - 1..size,
    ];
    // Cold, then warm: both must be exact.
    for _ in 0..2 {
        for range in ranges.clone() {
            f.check(&object, range, 7).await;
        }
    }
    assert!(
        f.read(&object, size..size + 10)
            .await
            .expect("eof")
            .is_empty()
    );
    // A reader is served once its bytes are in, which can be before the fetch that brought
    // them has returned and counted its bytes.
    until(|| f.cache.stats().bytes_from_backend >= size).await;
    let stats = f.cache.stats();
    assert_eq!(stats.misses, 6, "{stats:?}");
    assert!(stats.hits > 0 && stats.bytes_from_cache > 0, "{stats:?}");
    assert_eq!(stats.bytes_from_backend, size, "{stats:?}");
}

async fn concurrent_overlapping_reads_fetch_each_line_once(storage: CacheStorage) {
    let f = Arc::new(Fixture::new(storage, 64, 0));
    let objects = [
        f.object("a", 12 * LINE + 5, 1).await,
        f.object("b", 9 * LINE, 2).await,
    ];
    let mut tasks = Vec::new();
    for task in 0..24u64 {
        let f = Arc::clone(&f);
        let (object, seed) = if task.is_multiple_of(2) {
            (objects[0].clone(), 1)
        } else {
            (objects[1].clone(), 2)
        };
        tasks.push(tokio::spawn(async move {
            // Each task reads a different window that overlaps its neighbours'.
            let start = (task * 1777) % object.size;
            let end = start + 3 * LINE + task;
            f.check(&object, start..end, seed).await;
            f.check(&object, 0..object.size, seed).await;
        }));
    }
    for task in tasks {
        task.await.expect("reader task");
    }
    let gets = f.test_store.gets();
    let distinct: HashSet<_> = gets.iter().cloned().collect();
    assert_eq!(
        gets.len(),
        distinct.len(),
        "a line was fetched twice: {gets:?}"
    );
    assert_eq!(gets.len(), 13 + 9, "{gets:?}");
    assert_eq!(f.cache.stats().lines_resident, 22);
}

async fn working_set_larger_than_capacity_is_served_within_capacity(storage: CacheStorage) {
    let seed = seed();
    let f = Fixture::new(storage, 8, 0);
    let size = 40 * LINE + 999;
    let object = f.object("big", size, 3).await;
    let mut state = seed | 1;
    for _ in 0..300 {
        let start = next(&mut state) % size;
        let len = next(&mut state) % (2 * LINE);
        let got = f.read(&object, start..start + len).await.expect("read");
        let end = (start + len).min(size);
        let want: Vec<u8> = (start..end).map(|o| pattern(3, o)).collect();
        assert!(
            got[..] == want[..],
            "bytes {start}..{end} differ (MSFS_TEST_SEED={seed})"
        );
        let resident = f.cache.stats().lines_resident;
        assert!(
            resident <= 8,
            "{resident} lines resident (MSFS_TEST_SEED={seed})"
        );
    }
    let stats = f.cache.stats();
    assert!(stats.evictions > 0, "{stats:?} (MSFS_TEST_SEED={seed})");
    assert_eq!(stats.uncached_reads, 0, "{stats:?} (MSFS_TEST_SEED={seed})");
}

async fn concurrent_readers_of_a_working_set_larger_than_capacity_get_exact_bytes(
    storage: CacheStorage,
) {
    let seed = seed();
    let f = Arc::new(Fixture::new(storage, 8, 2));
    let size = 24 * LINE + 77;
    let object = f.object("shared-big", size, 9).await;
    let readers: Vec<_> = (0..6u64)
        .map(|reader| {
            let f = Arc::clone(&f);
            let object = object.clone();
            tokio::spawn(async move {
                let mut state = (seed ^ reader.wrapping_mul(0x9E37_79B9)) | 1;
                for _ in 0..100 {
                    let start = next(&mut state) % size;
                    let len = next(&mut state) % (3 * LINE);
                    let sequential = next(&mut state).is_multiple_of(2);
                    let got = f
                        .cache
                        .read(&f.store, &object, start..start + len, sequential)
                        .await
                        .expect("read");
                    let end = (start + len).min(size);
                    let want: Vec<u8> = (start..end).map(|o| pattern(9, o)).collect();
                    assert!(
                        got[..] == want[..],
                        "bytes {start}..{end} differ (MSFS_TEST_SEED={seed})"
                    );
                    let resident = f.cache.stats().lines_resident;
                    assert!(resident <= 8, "{resident} resident (MSFS_TEST_SEED={seed})");
                }
            })
        })
        .collect();
    for reader in readers {
        reader.await.expect("reader task");
    }
    let stats = f.cache.stats();
    assert!(stats.evictions > 0, "{stats:?} (MSFS_TEST_SEED={seed})");
}

async fn changed_etag_is_never_served_from_old_lines(storage: CacheStorage) {
    let f = Fixture::new(storage, 16, 0);
    let old = f.object("obj", 3 * LINE, 10).await;
    f.check(&old, 0..LINE, 10).await;
    f.store
        .put("obj", Bytes::from(patterned(20, 3 * LINE)))
        .await
        .expect("rewrite");
    let new = f.version("obj").await;
    assert_ne!(old.etag, new.etag);
    f.check(&new, 0..3 * LINE, 20).await;
    assert_eq!(f.test_store.gets_of("obj"), 4);
    // A line the old version never cached cannot be fetched for it any more.
    let stale = f.read(&old, LINE..2 * LINE).await;
    assert!(
        matches!(stale, Err(StoreError::Changed { .. })),
        "{stale:?}"
    );
}

async fn failed_fetch_reaches_every_waiter_and_the_next_read_succeeds(storage: CacheStorage) {
    let f = Arc::new(Fixture::new(storage, 16, 0));
    let object = f.object("flaky", 2 * LINE, 4).await;
    f.test_store.hold("flaky");
    f.test_store.fail_next("flaky", 1);
    let readers: Vec<_> = (0..3u64)
        .map(|i| {
            let f = Arc::clone(&f);
            let object = object.clone();
            tokio::spawn(async move { f.read(&object, i * 10..LINE).await })
        })
        .collect();
    f.test_store.until_arrived(1).await;
    until(|| f.cache.stats().waits == 2).await;
    f.test_store.open_gate();
    for reader in readers {
        let result = reader.await.expect("reader task");
        assert!(
            matches!(result, Err(StoreError::Unreachable { .. })),
            "{result:?}"
        );
    }
    let stats = f.cache.stats();
    assert_eq!(stats.fetch_failures, 1, "{stats:?}");
    assert_eq!(stats.lines_resident, 0, "{stats:?}");
    f.check(&object, 0..LINE, 4).await;
    assert_eq!(f.test_store.gets_of("flaky"), 2);
    f.check(&object, 0..LINE, 4).await;
    assert_eq!(
        f.test_store.gets_of("flaky"),
        2,
        "the retried line is cached"
    );
}

async fn short_body_is_an_error_not_a_clean_line(storage: CacheStorage) {
    let f = Fixture::new(storage, 16, 0);
    let object = f.object("cut", 2 * LINE, 5).await;
    f.test_store
        .short
        .lock()
        .expect("short")
        .insert("cut".into());
    // The body breaks off one byte short of the line: a read of the line's end sees it.
    let result = f.read(&object, LINE - 10..LINE).await;
    assert!(
        matches!(result, Err(StoreError::Truncated { .. })),
        "{result:?}"
    );
    assert_eq!(f.cache.stats().lines_resident, 0);
    f.test_store.short.lock().expect("short").clear();
    f.check(&object, 0..2 * LINE, 5).await;
}

async fn sequential_reads_prefetch_following_lines_up_to_the_object_end(storage: CacheStorage) {
    let f = Fixture::new(storage, 16, 3);
    let object = f.object("stream", 5 * LINE - 10, 6).await;
    f.read_sequential(&object, 0..LINE).await;
    let stats = f.cache.stats();
    assert_eq!((stats.misses, stats.prefetches), (1, 3), "{stats:?}");
    // Lines 1..=3 are present or inbound, so only line 4 (the last) is read ahead.
    f.read_sequential(&object, 2 * LINE..3 * LINE).await;
    assert_eq!(f.cache.stats().prefetches, 4);
    f.check(&object, 0..object.size, 6).await;
    let stats = f.cache.stats();
    assert_eq!(stats.misses, 1, "{stats:?}");
    // A window of 3 lines is too small for runs of several lines: a GET per line.
    assert_eq!(f.test_store.gets_of("stream"), 5);
}

async fn read_ahead_goes_out_in_runs_of_a_quarter_window(storage: CacheStorage) {
    // A window of 16 lines: read-ahead goes out in runs of 4 lines (a quarter of the window; a
    // run may be up to 8 MiB, far more than 4 lines of 4 KiB), each fetched with one GET, once
    // 4 lines of the window are missing.
    let f = Fixture::new(storage, 64, 16);
    let object = f.object("runs", 40 * LINE - 7, 2).await;
    let read_line = async |line: u64| {
        f.read_sequential(&object, line * LINE..(line + 1) * LINE)
            .await
    };
    read_line(0).await;
    assert_eq!(f.cache.stats().prefetches, 16);
    for line in 1..4 {
        read_line(line).await;
    }
    assert_eq!(
        f.cache.stats().prefetches,
        16,
        "fewer than 4 lines were missing"
    );
    read_line(4).await;
    assert_eq!(f.cache.stats().prefetches, 20);
    for line in 5..40 {
        read_line(line).await;
    }
    let stats = f.cache.stats();
    assert_eq!((stats.misses, stats.prefetches), (1, 39), "{stats:?}");
    // Every line was read, so every GET has been made. Line 0 on demand, then runs of 4, and
    // lines 37..=39 once the window reached the object's end.
    let mut runs: Vec<(u64, u64)> = f
        .test_store
        .gets()
        .into_iter()
        .map(|(_, range)| (range.start / LINE, (range.end - 1) / LINE))
        .collect();
    runs.sort();
    let mut expected = vec![(0, 0)];
    expected.extend((0..9).map(|run| (1 + 4 * run, 4 + 4 * run)));
    expected.push((37, 39));
    assert_eq!(runs, expected);
    f.check(&object, 0..object.size, 2).await;
}

async fn random_reads_do_not_prefetch(storage: CacheStorage) {
    let f = Fixture::new(storage, 16, 3);
    let object = f.object("random", 6 * LINE, 8).await;
    f.check(&object, 0..LINE, 8).await;
    f.check(&object, 3 * LINE..3 * LINE + 10, 8).await;
    assert_eq!(f.test_store.gets_of("random"), 2);
    f.check(&object, LINE..LINE + 1, 8).await;
    let stats = f.cache.stats();
    assert_eq!((stats.misses, stats.prefetches), (3, 0), "{stats:?}");
}

async fn read_with_every_slot_inbound_is_served_uncached(storage: CacheStorage) {
    let f = Arc::new(Fixture::new(storage, 4, 0));
    let held = f.object("held", 4 * LINE, 1).await;
    let other = f.object("other", LINE, 2).await;
    f.test_store.hold("held");
    let readers: Vec<_> = (0..4u64)
        .map(|line| {
            let f = Arc::clone(&f);
            let held = held.clone();
            tokio::spawn(async move { f.check(&held, line * LINE..(line + 1) * LINE, 1).await })
        })
        .collect();
    f.test_store.until_arrived(4).await;
    f.check(&other, 0..LINE, 2).await;
    let stats = f.cache.stats();
    assert_eq!(stats.uncached_reads, 1, "{stats:?}");
    assert_eq!(stats.lines_resident, 4, "{stats:?}");
    f.test_store.open_gate();
    for reader in readers {
        reader.await.expect("reader task");
    }
    // Tiered: the mover moves the RAM line down once it is clean, evicting a disk line (its
    // counts are `tiers_tests`' business).
    if storage != CacheStorage::Tiered {
        assert_eq!(f.cache.stats().evictions, 0);
    }
}

async fn read_with_every_slot_pinned_is_served_uncached(storage: CacheStorage) {
    let f = Fixture::new(storage, 4, 0);
    let object = f.object("pinned", 5 * LINE, 3).await;
    f.check(&object, 0..4 * LINE, 3).await;
    let pins: Vec<_> = (0..4)
        .map(|line| {
            f.cache
                .pin_line("test-store", &object, line)
                .expect("cached")
        })
        .collect();
    f.check(&object, 4 * LINE..5 * LINE, 3).await;
    let stats = f.cache.stats();
    assert_eq!((stats.uncached_reads, stats.evictions), (1, 0), "{stats:?}");
    drop(pins);
    f.check(&object, 4 * LINE..5 * LINE, 3).await;
    let stats = f.cache.stats();
    assert_eq!(stats.uncached_reads, 1, "{stats:?}");
    // Tiered: the mover's demotion may have evicted a disk line as well (see above).
    if storage != CacheStorage::Tiered {
        assert_eq!(stats.evictions, 1, "{stats:?}");
    }
}

async fn invalidate_drops_every_line_of_the_key(storage: CacheStorage) {
    let f = Fixture::new(storage, 16, 0);
    let object = f.object("inv", 3 * LINE, 9).await;
    let other = f.object("keep", LINE, 1).await;
    f.check(&object, 0..3 * LINE, 9).await;
    f.check(&other, 0..LINE, 1).await;
    f.cache.invalidate("test-store", "inv");
    f.cache.invalidate("another-store", "keep");
    assert_eq!(f.cache.stats().lines_resident, 1);
    f.check(&object, 0..3 * LINE, 9).await;
    f.check(&other, 0..LINE, 1).await;
    assert_eq!(f.test_store.gets_of("inv"), 6);
    assert_eq!(f.test_store.gets_of("keep"), 1);
}

async fn invalidated_inbound_line_serves_its_waiters_but_is_not_kept(storage: CacheStorage) {
    let f = Arc::new(Fixture::new(storage, 16, 0));
    let object = f.object("moving", LINE, 4).await;
    f.test_store.hold("moving");
    let reader = {
        let f = Arc::clone(&f);
        let object = object.clone();
        tokio::spawn(async move { f.check(&object, 0..LINE, 4).await })
    };
    f.test_store.until_arrived(1).await;
    f.cache.invalidate("test-store", "moving");
    f.test_store.open_gate();
    reader.await.expect("reader task");
    assert_eq!(f.cache.stats().lines_resident, 0);
    f.check(&object, 0..LINE, 4).await;
    assert_eq!(f.test_store.gets_of("moving"), 2);
}

async fn admit_inserts_fully_covered_lines_as_clean(storage: CacheStorage) {
    let f = Fixture::new(storage, 16, 0);
    let size = 3 * LINE + 500;
    let object = f.object("written", size, 12).await;
    let bytes = patterned(12, size);
    // From offset 100: line 0 is only partly covered; lines 1, 2 and the short last line are.
    let admitted = f.cache.admit("test-store", &object, 100, &bytes[100..]);
    assert_eq!(admitted, 3);
    f.check(&object, LINE..size, 12).await;
    assert_eq!(f.test_store.gets_of("written"), 0);
    f.check(&object, 0..LINE, 12).await;
    assert_eq!(f.test_store.gets_of("written"), 1);
    // Lines already present are not admitted again.
    assert_eq!(f.cache.admit("test-store", &object, 0, &bytes), 0);
    // A line the bytes do not fully cover is not admitted.
    let other = ObjectVersion {
        etag: "\"other\"".into(),
        ..object.clone()
    };
    assert_eq!(
        f.cache
            .admit("test-store", &other, 0, &bytes[..LINE as usize - 1]),
        0
    );
}

async fn admit_never_evicts_pinned_or_inbound_lines(storage: CacheStorage) {
    let f = Arc::new(Fixture::new(storage, 4, 0));
    let held = f.object("held", 2 * LINE, 1).await;
    let pinned = f.object("pinned", 2 * LINE, 2).await;
    let written = f.object("written", LINE, 3).await;
    f.check(&pinned, 0..2 * LINE, 2).await;
    let pins: Vec<_> = (0..2)
        .map(|line| {
            f.cache
                .pin_line("test-store", &pinned, line)
                .expect("cached")
        })
        .collect();
    f.test_store.hold("held");
    let reader = {
        let f = Arc::clone(&f);
        let held = held.clone();
        tokio::spawn(async move { f.check(&held, 0..2 * LINE, 1).await })
    };
    f.test_store.until_arrived(2).await;
    let admitted = f
        .cache
        .admit("test-store", &written, 0, &patterned(3, LINE));
    assert_eq!(admitted, 0);
    assert_eq!(f.cache.stats().evictions, 0);
    f.test_store.open_gate();
    reader.await.expect("reader task");
    drop(pins);
    let admitted = f
        .cache
        .admit("test-store", &written, 0, &patterned(3, LINE));
    assert_eq!(admitted, 1);
    f.check(&written, 0..LINE, 3).await;
    assert_eq!(f.test_store.gets_of("written"), 0);
}

async fn stores_with_the_same_id_share_lines(storage: CacheStorage) {
    let f = Fixture::new(storage, 16, 0);
    let object = f.object("shared", 2 * LINE, 5).await;
    f.check(&object, 0..2 * LINE, 5).await;
    let twin = TestStore::new(f.data.path(), "test-store");
    let twin_dyn: Arc<dyn ObjectStore> = twin.clone();
    let got = f
        .cache
        .read(&twin_dyn, &object, 0..2 * LINE, false)
        .await
        .expect("read through the twin");
    assert_eq!(got[..], patterned(5, 2 * LINE)[..]);
    assert!(twin.gets().is_empty(), "{:?}", twin.gets());
    let stranger = TestStore::new(f.data.path(), "another-store");
    let stranger_dyn: Arc<dyn ObjectStore> = stranger.clone();
    f.cache
        .read(&stranger_dyn, &object, 0..LINE, false)
        .await
        .expect("read through another store");
    assert_eq!(stranger.gets().len(), 1);
}

async fn private_directory_is_removed_on_drop(storage: CacheStorage) {
    let f = Fixture::new(storage, 16, 0);
    let object = f.object("file", 2 * LINE, 1).await;
    f.check(&object, 0..2 * LINE, 1).await;
    let dir = f.cache.dir().to_path_buf();
    assert!(dir.is_dir());
    let name = dir.file_name().and_then(|n| n.to_str()).unwrap_or_default();
    let prefix = format!("msfs-cache-{}-", std::process::id());
    assert!(name.starts_with(&prefix), "{name}");
    let Fixture {
        cache,
        _cache_parent,
        ..
    } = f;
    drop(cache);
    assert!(!dir.exists(), "{} still exists", dir.display());
}

#[tokio::test]
async fn per_inode_file_is_removed_when_it_holds_no_lines() {
    let f = Fixture::new(CacheStorage::PerInodeFile, 2, 0);
    let a = f.object("a", 2 * LINE, 1).await;
    let b = f.object("b", LINE, 2).await;
    let files = |f: &Fixture| std::fs::read_dir(f.cache.dir()).expect("cache dir").count();
    f.check(&a, 0..LINE, 1).await;
    f.check(&a, LINE..2 * LINE, 1).await;
    assert_eq!(files(&f), 1, "one file per object version");
    // b evicts line 0 of a (punched out of a's file), which keeps line 1.
    f.check(&b, 0..LINE, 2).await;
    assert_eq!(files(&f), 2);
    f.check(&a, LINE..2 * LINE, 1).await;
    assert_eq!(f.test_store.gets_of("a"), 2, "line 1 of a stayed cached");
    f.cache.invalidate("test-store", "a");
    assert_eq!(files(&f), 1);
    f.cache.invalidate("test-store", "b");
    assert_eq!(files(&f), 0);
}

#[tokio::test]
async fn objects_without_an_etag_are_served_uncached() {
    let f = Fixture::new(CacheStorage::Ram, 16, 0);
    let mut object = f.object("plain", LINE, 1).await;
    object.etag.clear();
    f.check(&object, 0..10, 1).await;
    f.check(&object, 0..10, 1).await;
    let stats = f.cache.stats();
    assert_eq!(
        (stats.uncached_reads, stats.lines_resident),
        (2, 0),
        "{stats:?}"
    );
}

#[test]
fn missing_cache_parent_directory_is_reported_with_its_path() {
    let parent = tempfile::tempdir().expect("tempdir");
    let missing = parent.path().join("not-there");
    let error = LineCache::new(&config(CacheStorage::MappedFile, 16, 0, &missing))
        .expect_err("no parent directory");
    assert!(matches!(error, CacheError::CreateDir { .. }), "{error:?}");
    assert!(error.to_string().contains("not-there"), "{error}");
}

#[test]
fn impossible_geometry_is_refused() {
    let parent = tempfile::tempdir().expect("tempdir");
    let mut cfg = config(CacheStorage::Ram, 16, 0, parent.path());
    cfg.line_size = 0;
    let error = LineCache::new(&cfg).expect_err("zero line size");
    assert!(matches!(error, CacheError::Geometry { .. }), "{error:?}");
    cfg.line_size = u64::MAX / 2;
    let error = LineCache::new(&cfg).expect_err("too large");
    assert!(matches!(error, CacheError::Geometry { .. }), "{error:?}");
    assert_eq!(
        std::fs::read_dir(parent.path()).expect("parent").count(),
        0,
        "a failed setup leaves no directory behind"
    );
}

/// Read-ahead started by a read that also missed goes out once the demanded line's first bytes
/// are in: until then the demanded GET is the only one (so the server answers it first). On
/// one runtime thread, every task that could have sent a GET has run by the time the test looks.
#[tokio::test(flavor = "current_thread")]
async fn read_ahead_waits_for_the_first_bytes_of_the_line_a_reader_waits_on() {
    let f = Arc::new(Fixture::new(CacheStorage::MappedFile, 64, 16));
    let object = f.object("first", 40 * LINE, 3).await;
    f.test_store.hold("first");
    let reader = {
        let (f, object) = (Arc::clone(&f), object.clone());
        tokio::spawn(async move { f.read_sequential(&object, 0..LINE).await })
    };
    f.test_store.until_arrived(1).await;
    for _ in 0..64 {
        tokio::task::yield_now().await;
    }
    assert_eq!(f.test_store.gets(), [("first".to_string(), 0..LINE)]);
    assert_eq!(f.cache.stats().prefetches, 16, "read-ahead is planned");
    f.test_store.open_gate();
    let got = reader.await.expect("reader");
    assert!(got[..] == patterned(3, LINE)[..]);
    // The demanded line, then the window in runs of a quarter of it.
    until(|| f.test_store.gets_of("first") == 5).await;
    f.check(&object, 0..17 * LINE, 3).await;
    assert_eq!(f.test_store.gets_of("first"), 5, "all from the cache");
}

/// A demanded fetch that fails does not hold read-ahead back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_ahead_goes_out_when_the_demanded_line_fails() {
    let f = Fixture::new(CacheStorage::MappedFile, 64, 16);
    let object = f.object("failing", 40 * LINE, 4).await;
    f.test_store.fail_next("failing", 1);
    let read = f.cache.read(&f.store, &object, 0..LINE, true).await;
    assert!(read.is_err(), "the injected failure reaches the reader");
    until(|| f.test_store.gets_of("failing") == 5).await;
    f.check(&object, LINE..17 * LINE, 4).await;
    assert_eq!(
        f.test_store.gets_of("failing"),
        5,
        "read ahead, then served"
    );
}
