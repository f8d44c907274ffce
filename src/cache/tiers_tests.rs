//! `cache_storage: tiered`: what lands where, what moves, and that moving never serves wrong
//! bytes. (The whole line-cache suite also runs over tiered storage: `tests::tiered`.)

use std::sync::Arc;

use super::tests::{Fixture, LINE, next, seed, until};

/// A cache of `ram` RAM lines over `disk` disk lines, no read-ahead, whose main-tier lines move
/// up as soon as they are read again.
fn tiered(ram: u64, disk: u64) -> Fixture {
    let f = Fixture::with_tiers(ram, disk);
    f.cache.promote_at_once();
    f
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_working_set_bigger_than_ram_and_within_both_tiers_is_fetched_once() {
    // 20 lines: more than the 8 in RAM, fewer than the 24 of both tiers (less the one RAM slot
    // the mover keeps free for new lines).
    let f = tiered(8, 16);
    let object = f.object("set", 20 * LINE, 5).await;
    for pass in 0..3 {
        for line in 0..20 {
            f.check(&object, line * LINE..(line + 1) * LINE, 5).await;
            // The mover has given RAM its free slot back before the next line: otherwise,
            // on a loaded machine, a line lands in the disk tier at once and is never moved.
            until(|| f.cache.stats().ram_lines_resident <= 7).await;
        }
        // Let the mover finish what the pass gave it.
        until(|| f.cache.stats().ram_lines_resident >= 7).await;
        let stats = f.cache.stats();
        assert_eq!(
            f.test_store().gets_of("set"),
            20,
            "pass {pass}: no line fetched twice ({stats:?})"
        );
    }
    // A cyclic scan bigger than RAM finds each line moved down again before its next read;
    // a line read over and over is served from RAM once it has moved up.
    // (Promotions commit on the mover's thread, after the reads that queued them: on a loaded
    // machine, some while later.)
    for _ in 0..5000 {
        f.check(&object, 19 * LINE..20 * LINE, 5).await;
        let stats = f.cache.stats();
        if stats.ram_hits > 0 && stats.promotions > 0 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(1)).await;
    }
    let stats = f.cache.stats();
    assert_eq!(f.test_store().gets_of("set"), 20, "{stats:?}");
    assert_eq!(stats.evictions, 0, "{stats:?}");
    assert!(
        stats.demotions >= 13,
        "new lines land in RAM and move down: {stats:?}"
    );
    assert!(stats.promotions > 0, "lines read again move up: {stats:?}");
    assert!(stats.ram_hits > 0, "a hot line is read from RAM: {stats:?}");
    assert_eq!(stats.ram_lines_capacity, 8);
    assert_eq!(stats.lines_capacity, 24);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn readers_racing_moves_and_invalidations_always_get_the_exact_bytes() {
    // Tiny tiers and a working set bigger than both: lines land, move down, move up, are
    // evicted and invalidated while four readers read them.
    let f = Arc::new(tiered(3, 6));
    let objects = [
        f.object("a", 12 * LINE + 100, 1).await,
        f.object("b", 7 * LINE, 2).await,
    ];
    let seed = seed();
    eprintln!("MSFS_TEST_SEED={seed}");
    let readers: Vec<_> = (0..4u64)
        .map(|r| {
            let (f, objects) = (Arc::clone(&f), objects.clone());
            tokio::spawn(async move {
                let mut state = seed ^ (r + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
                for _ in 0..400 {
                    let which = (next(&mut state) % 2) as usize;
                    let object = &objects[which];
                    let start = next(&mut state) % object.size;
                    let len = 1 + next(&mut state) % (2 * LINE);
                    f.check(object, start..start + len, which as u8 + 1).await;
                }
            })
        })
        .collect();
    let invalidator = {
        let f = Arc::clone(&f);
        tokio::spawn(async move {
            for i in 0..50 {
                f.cache
                    .invalidate("test-store", if i % 2 == 0 { "a" } else { "b" });
                tokio::time::sleep(std::time::Duration::from_millis(2)).await;
            }
        })
    };
    for reader in readers {
        reader.await.expect("reader");
    }
    invalidator.await.expect("invalidator");
    let stats = f.cache.stats();
    assert!(stats.promotions + stats.demotions > 0, "{stats:?}");
    assert!(stats.lines_resident <= stats.lines_capacity, "{stats:?}");
}
