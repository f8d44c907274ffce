//! The line cache under the process's memory pressure (`crate::memory::pressure`): read-ahead
//! halves near the target and stops over it, the RAM cache gives back clean lines, and in the
//! last stage a read that must fetch waits while one of cached lines does not.

use std::sync::Arc;

use super::ObjectReader;
use super::tests::{Fixture, LINE, until};
use crate::config::CacheStorage;
use crate::memory::{InodePool, Pressure, Shed, Stage};

/// A pressure the cache follows, moved to `stage` by readings against a target of 800 bytes.
fn pressed(f: &Fixture, stage: Stage) -> (Arc<Pressure>, Arc<InodePool>) {
    let pressure = Arc::new(Pressure::default());
    let pool = InodePool::new(1000);
    f.cache.follow(pressure.clone());
    set(&pressure, &pool, stage);
    (pressure, pool)
}

fn set(pressure: &Pressure, pool: &InodePool, stage: Stage) {
    match stage {
        Stage::Calm => {
            pressure.reading(100, 800, pool);
        }
        Stage::Near => {
            pressure.reading(700, 800, pool);
        }
        _ => {
            while pressure.stage() < stage {
                pressure.reading(900, 800, pool);
            }
        }
    }
    assert_eq!(pressure.stage(), stage);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_ahead_halves_near_the_target_and_stops_over_it() {
    let f = Fixture::new(CacheStorage::Ram, 64, 16);
    let (pressure, pool) = pressed(&f, Stage::Calm);
    let object = f.object("stream", 40 * LINE, 3).await;
    f.read_sequential(&object, 0..LINE).await;
    assert_eq!(f.cache.stats().prefetches, 16, "calm: the whole window");

    set(&pressure, &pool, Stage::Near);
    let near = f.object("near", 40 * LINE, 4).await;
    f.read_sequential(&near, 0..LINE).await;
    assert_eq!(f.cache.stats().prefetches, 16 + 8, "near: half the window");

    set(&pressure, &pool, Stage::Shed);
    let over = f.object("over", 40 * LINE, 5).await;
    for line in 0..8 {
        f.read_sequential(&over, line * LINE..(line + 1) * LINE)
            .await;
    }
    assert_eq!(f.cache.stats().prefetches, 24, "over: no read-ahead at all");
    f.check(&over, 0..over.size, 5).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_ram_cache_gives_back_half_its_clean_lines_and_serves_them_again_by_refetching() {
    let f = Fixture::new(CacheStorage::Ram, 16, 0);
    let object = f.object("lines", 8 * LINE, 6).await;
    f.check(&object, 0..8 * LINE, 6).await;
    assert_eq!(f.cache.stats().lines_resident, 8);
    assert_eq!(f.cache.shed(), 4 * LINE, "half of 8 clean lines");
    assert_eq!(f.cache.stats().lines_resident, 4);
    let gets = f.test_store().gets_of("lines");
    // The lines given back were zeroed by the system; they are fetched again, never served.
    f.check(&object, 0..8 * LINE, 6).await;
    assert_eq!(f.test_store().gets_of("lines"), gets + 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_line_being_read_is_not_given_back() {
    let f = Fixture::new(CacheStorage::Ram, 16, 0);
    let object = f.object("held", 2 * LINE, 7).await;
    f.check(&object, 0..2 * LINE, 7).await;
    // A fetch in flight holds its slot: hold the next object's GET and shed meanwhile.
    f.test_store().hold("other");
    let other = f.object("other", LINE, 8).await;
    let reading = tokio::spawn({
        let (cache, store, other) = (f.cache.clone(), f.store.clone(), other.clone());
        async move { cache.read(&store, &other, 0..LINE, false).await }
    });
    until(|| f.cache.stats().misses == 3).await;
    assert_eq!(
        f.cache.shed(),
        LINE,
        "one of the two clean lines, not the inbound one"
    );
    assert_eq!(f.cache.shed(), 0, "the last clean line stays");
    f.test_store().open_gate();
    let got = reading.await.expect("join").expect("read");
    assert!(got[..] == super::tests::patterned(8, LINE)[..]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cache_in_files_gives_back_nothing_and_a_tiered_one_only_its_ram_tier() {
    let f = Fixture::new(CacheStorage::MappedFile, 16, 0);
    let object = f.object("file", 4 * LINE, 9).await;
    f.check(&object, 0..4 * LINE, 9).await;
    assert_eq!(f.cache.shed(), 0, "page cache is the kernel's to reclaim");

    let f = Fixture::with_tiers(4, 12);
    let object = f.object("tiers", 4 * LINE, 10).await;
    f.check(&object, 0..4 * LINE, 10).await;
    let before = f.cache.stats();
    let shed = f.cache.shed();
    let after = f.cache.stats();
    assert_eq!(
        before.ram_lines_resident - after.ram_lines_resident,
        shed / LINE,
        "only RAM-tier lines go"
    );
    assert_eq!(
        before.lines_resident - after.lines_resident,
        shed / LINE,
        "{before:?} {after:?}"
    );
    f.check(&object, 0..4 * LINE, 10).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_the_last_stage_a_fetch_waits_for_the_stage_to_drop_and_a_cached_read_does_not() {
    let f = Fixture::new(CacheStorage::Ram, 16, 0);
    let cached = f.object("cached", LINE, 11).await;
    f.check(&cached, 0..LINE, 11).await;
    let (pressure, pool) = pressed(&f, Stage::Wait);
    f.check(&cached, 0..LINE, 11).await;
    assert_eq!(
        pressure.waits(),
        0,
        "a read of a cached line allocates nothing"
    );

    let absent = f.object("absent", LINE, 12).await;
    let reading = tokio::spawn({
        let (cache, store, absent) = (f.cache.clone(), f.store.clone(), absent.clone());
        async move { cache.read(&store, &absent, 0..LINE, false).await }
    });
    until(|| pressure.waits() == 1).await;
    assert!(!reading.is_finished());
    assert_eq!(f.test_store().gets_of("absent"), 0, "no fetch before room");
    set(&pressure, &pool, Stage::Calm);
    let got = reading.await.expect("join").expect("read");
    assert!(got[..] == super::tests::patterned(12, LINE)[..]);
}
