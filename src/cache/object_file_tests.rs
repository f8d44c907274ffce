//! Objects lent whole to the kernel (`LineCache::pin_object_file`, FUSE passthrough): only a
//! wholly cached, clean object in per-object files is lent, its file holds it byte for byte, and
//! its lines stay put under eviction until it is given back.

use std::io::Read;

use super::tests::{Fixture, LINE, patterned};
use crate::config::CacheStorage;

fn file_bytes(file: &std::fs::File) -> Vec<u8> {
    let mut bytes = Vec::new();
    (&*file)
        .read_to_end(&mut bytes)
        .expect("read the lent file");
    bytes
}

#[tokio::test]
async fn a_wholly_cached_object_is_lent_as_a_file_holding_it_byte_for_byte() {
    let f = Fixture::new(CacheStorage::PerInodeFile, 16, 0);
    let object = f.object("obj", 3 * LINE + 17, 4).await;
    assert!(
        f.cache
            .pin_object_file(f.store.cache_scope(), &object)
            .is_none(),
        "nothing cached yet"
    );
    f.check(&object, 0..LINE, 4).await;
    assert!(
        f.cache
            .pin_object_file(f.store.cache_scope(), &object)
            .is_none(),
        "one line of four cached"
    );
    f.check(&object, 0..object.size, 4).await;
    let mut lent = f
        .cache
        .pin_object_file(f.store.cache_scope(), &object)
        .expect("every line is cached");
    let file = lent.take_file().expect("its file");
    assert!(file_bytes(&file) == patterned(4, object.size));
    assert!(lent.take_file().is_none(), "handed out once");
    let other_version = super::ObjectVersion {
        etag: "another".into(),
        ..object.clone()
    };
    assert!(
        f.cache
            .pin_object_file(f.store.cache_scope(), &other_version)
            .is_none(),
        "another version of the key is not what is cached"
    );
}

#[tokio::test]
async fn lent_lines_are_never_evicted_and_return_to_the_cache_when_given_back() {
    let f = Fixture::new(CacheStorage::PerInodeFile, 8, 0);
    let lent_object = f.object("lent", 4 * LINE, 1).await;
    f.check(&lent_object, 0..lent_object.size, 1).await;
    let mut lent = f
        .cache
        .pin_object_file(f.store.cache_scope(), &lent_object)
        .expect("lent");
    // The file goes (as once the kernel holds it); the pins stay with `lent`.
    let file = lent.take_file().expect("its file");
    // Four other lines' worth of reads, three times over, through the four lines left.
    for seed in 10..13 {
        let other = f.object(&format!("other{seed}"), 4 * LINE, seed).await;
        f.check(&other, 0..other.size, seed).await;
    }
    assert!(
        file_bytes(&file) == patterned(1, lent_object.size),
        "a lent line was evicted or punched out"
    );
    drop(lent);
    // Given back, its lines are ordinary again: evicted by the next reads.
    for seed in 20..23 {
        let other = f.object(&format!("other{seed}"), 4 * LINE, seed).await;
        f.check(&other, 0..other.size, seed).await;
    }
    assert!(
        f.cache
            .pin_object_file(f.store.cache_scope(), &lent_object)
            .is_none(),
        "the returned lines were evicted like any other"
    );
}

#[tokio::test]
async fn at_most_half_the_lines_are_lent_and_only_from_per_object_files() {
    let f = Fixture::new(CacheStorage::PerInodeFile, 8, 0);
    let a = f.object("a", 3 * LINE, 1).await;
    let b = f.object("b", 2 * LINE, 2).await;
    f.check(&a, 0..a.size, 1).await;
    f.check(&b, 0..b.size, 2).await;
    let lent_a = f
        .cache
        .pin_object_file(f.store.cache_scope(), &a)
        .expect("3 of 8");
    assert!(
        f.cache.pin_object_file(f.store.cache_scope(), &b).is_none(),
        "3 + 2 lines lent would be more than half of 8"
    );
    let again = f.cache.pin_object_file(f.store.cache_scope(), &a);
    assert!(again.is_none(), "3 + 3 lines would be more than half too");
    drop(lent_a);
    assert!(f.cache.pin_object_file(f.store.cache_scope(), &b).is_some());

    for storage in [CacheStorage::Ram, CacheStorage::MappedFile] {
        let f = Fixture::new(storage, 8, 0);
        let object = f.object("obj", 2 * LINE, 3).await;
        f.check(&object, 0..object.size, 3).await;
        assert!(
            f.cache
                .pin_object_file(f.store.cache_scope(), &object)
                .is_none(),
            "{storage:?} keeps no file per object"
        );
    }
}
