//! `ObjectReader::read_now`: a read the cache answers without waiting (every line at hand in
//! memory), and one it leaves to `read` having started nothing.

use std::ops::Range;

use bytes::Bytes;

use super::ObjectReader;
use super::ObjectVersion;
use super::tests::{Fixture, LINE, patterned, until};
use crate::config::CacheStorage;
use crate::store::StoreError;

fn read_now(
    f: &Fixture,
    object: &ObjectVersion,
    range: Range<u64>,
    sequential: bool,
) -> Option<Result<Bytes, StoreError>> {
    f.cache.read_now(&f.store, object, range, sequential)
}

/// The bytes of `range` of the object written with `seed`.
fn expected(object: &ObjectVersion, seed: u8, range: Range<u64>) -> Vec<u8> {
    patterned(seed, object.size)[range.start as usize..range.end as usize].to_vec()
}

async fn a_hit_is_answered_now_and_a_miss_starts_nothing(storage: CacheStorage) {
    let f = Fixture::new(storage, 16, 0);
    let object = f.object("hit", 3 * LINE + 100, 4).await;
    assert!(read_now(&f, &object, 0..LINE, false).is_none());
    assert_eq!(
        f.test_store().gets_of("hit"),
        0,
        "a read not at hand fetches nothing"
    );
    assert_eq!(f.cache.stats().misses, 0);
    let past_end = read_now(&f, &object, object.size..object.size + 10, false);
    assert!(
        past_end
            .expect("past the end: nothing to fetch")
            .expect("read")
            .is_empty()
    );

    f.check(&object, 0..2 * LINE, 4).await;
    if storage == CacheStorage::PerInodeFile {
        // Its lines are read with `pread`, which may wait on the disk: always left to `read`.
        assert!(read_now(&f, &object, 0..LINE, false).is_none());
        return;
    }
    // A fill marks its line ready just after the line's last byte is in.
    until(|| read_now(&f, &object, 0..2 * LINE, false).is_some()).await;
    let gets = f.test_store().gets_of("hit");
    for range in [LINE - 10..LINE + 20, LINE + 5..LINE + 6, 0..2 * LINE] {
        let got = read_now(&f, &object, range.clone(), false)
            .expect("lines 0 and 1 are at hand")
            .expect("read");
        assert_eq!(
            &got[..],
            &expected(&object, 4, range.clone())[..],
            "{range:?}"
        );
    }
    assert!(
        read_now(&f, &object, 2 * LINE - 1..2 * LINE + 1, false).is_none(),
        "line 2 was never fetched"
    );
    assert_eq!(f.test_store().gets_of("hit"), gets, "nor is it now");
}

async fn a_sequential_read_whose_read_ahead_is_due_is_left_to_read(storage: CacheStorage) {
    let f = Fixture::new(storage, 16, 3);
    let object = f.object("ahead", 8 * LINE, 9).await;
    f.check(&object, 0..LINE, 9).await; // not sequential: line 0 alone
    until(|| read_now(&f, &object, 0..LINE, false).is_some()).await;
    assert!(
        read_now(&f, &object, 0..LINE, true).is_none(),
        "lines 1 to 3 are due to be read ahead"
    );
    assert_eq!(
        f.cache.stats().prefetches,
        0,
        "and read_now did not send them"
    );

    let got = f.cache.read(&f.store, &object, 0..LINE, true).await;
    assert_eq!(&got.expect("read")[..], &expected(&object, 9, 0..LINE)[..]);
    assert_eq!(f.cache.stats().prefetches, 3, "read did");
    let window = read_now(&f, &object, 0..LINE, true);
    assert_eq!(
        &window.expect("the window is in or inbound").expect("read")[..],
        &expected(&object, 9, 0..LINE)[..]
    );
    assert_eq!(f.cache.stats().prefetches, 3);
}

macro_rules! in_modes {
    ($test:ident: $($module:ident = $storage:ident),*) => {
        mod $test {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $module() {
                    super::$test(crate::config::CacheStorage::$storage).await;
                }
            )*
        }
    };
}

in_modes!(a_hit_is_answered_now_and_a_miss_starts_nothing:
    ram = Ram, mapped_file = MappedFile, per_inode_file = PerInodeFile, tiered = Tiered);
in_modes!(a_sequential_read_whose_read_ahead_is_due_is_left_to_read:
    ram = Ram, mapped_file = MappedFile, tiered = Tiered);
