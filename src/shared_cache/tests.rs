//! The shared cache between two "nodes" (two `SharedCache`s over one shared store) and an
//! origin that records its GETs, all in memory: what is served, what reaches the origin, what
//! is filled, what is dropped. The same behaviours over garage and FUSE are in
//! `tests/it/shared_cache.rs`.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

use bytes::Bytes;

use super::SharedCache;
use crate::config::SharedCacheConfig;
use crate::store::ObjectStore;
use crate::store::testing::TestStore;
use crate::telemetry::Metrics;

const LINE: u64 = 1024;

fn config(fill_buffer: u64) -> SharedCacheConfig {
    let text = format!(
        "msfs_version: 1\ncache_line_size: {LINE}\nshared_cache:\n  bucket_container_name: shared\n  \
         prefix: lines/\n  read_timeout_ms: 5000\n  fill_buffer_limit_bytes: {fill_buffer}\n  \
         S3:\n    endpoint: http://127.0.0.1:9\n    region: r\n    access_key_id: a\n    \
         secret_access_key: s\nbackends: []\n"
    );
    crate::config::parse_str(&text, Path::new("c.yaml"), &|_| None)
        .expect("config")
        .config
        .shared_cache
        .expect("shared_cache")
}

/// A node: its own client and counters, over the one shared store.
fn node(shared: &Arc<TestStore>, fill_buffer: u64) -> Arc<SharedCache> {
    let cache = SharedCache::new(&config(fill_buffer), LINE, &Metrics::new());
    let store: Arc<dyn ObjectStore> = shared.clone();
    cache.store.set(store).expect("unset");
    cache
}

fn body(len: usize, seed: u8) -> Bytes {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect::<Vec<u8>>()
        .into()
}

async fn filled(node: &SharedCache, lines: u64) {
    for _ in 0..500 {
        let counts = &node.metrics.counts;
        if counts.fills.load(Relaxed) >= lines && counts.pending.load(Relaxed) == 0 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("the fills did not end: {:?}", node.metrics.counts);
}

/// The origin with one object of 3.5 lines, and its ETag.
async fn origin_with(data: &Bytes) -> (Arc<TestStore>, String) {
    let origin = TestStore::ram();
    let etag = origin.put("obj", data.clone()).await.expect("put").etag;
    (origin, etag)
}

#[tokio::test]
async fn a_second_node_reads_what_the_first_read_without_the_origin() {
    let data = body(3 * LINE as usize + 512, 1);
    let (origin, etag) = origin_with(&data).await;
    let shared = TestStore::ram();
    let a = node(&shared, 1 << 20);
    let b = node(&shared, 1 << 20);
    let end = data.len() as u64;

    let read = a
        .wrap(origin.clone())
        .get_range("obj", 0..end, Some(&etag))
        .await;
    assert_eq!(read.expect("read"), data);
    assert_eq!(origin.gets_of("obj"), 1);
    filled(&a, 4).await;
    assert_eq!(a.metrics.counts.misses.load(Relaxed), 4);

    // A run of lines, as the line cache asks, and a single last line.
    let b_store = b.wrap(origin.clone());
    let read = b_store.get_range("obj", LINE..end, Some(&etag)).await;
    assert_eq!(read.expect("read"), data.slice(LINE as usize..));
    let read = b_store.get_range("obj", 3 * LINE..end, Some(&etag)).await;
    assert_eq!(read.expect("read"), data.slice(3 * LINE as usize..));
    assert_eq!(origin.gets_of("obj"), 1, "node B asked the origin");
    assert_eq!(b.metrics.counts.hits.load(Relaxed), 4);
    assert_eq!(b.metrics.counts.fills.load(Relaxed), 0);
}

#[tokio::test]
async fn another_version_misses_and_is_read_from_the_origin() {
    let old = body(2 * LINE as usize, 2);
    let (origin, old_etag) = origin_with(&old).await;
    let shared = TestStore::ram();
    let a = node(&shared, 1 << 20);
    let read = a
        .wrap(origin.clone())
        .get_range("obj", 0..2 * LINE, Some(&old_etag))
        .await;
    assert_eq!(read.expect("read"), old);
    filled(&a, 2).await;

    let new = body(2 * LINE as usize, 3);
    let new_etag = origin.put("obj", new.clone()).await.expect("put").etag;
    assert_ne!(new_etag, old_etag);
    let b = node(&shared, 1 << 20);
    let read = b
        .wrap(origin.clone())
        .get_range("obj", 0..2 * LINE, Some(&new_etag))
        .await;
    assert_eq!(read.expect("read"), new);
    assert_eq!(b.metrics.counts.hits.load(Relaxed), 0);
    assert_eq!(origin.gets_of("obj"), 2);
}

#[tokio::test]
async fn a_flipped_shared_byte_is_a_miss_and_the_line_is_written_again() {
    let data = body(LINE as usize, 4);
    let (origin, etag) = origin_with(&data).await;
    let shared = TestStore::ram();
    let a = node(&shared, 1 << 20);
    let read = a
        .wrap(origin.clone())
        .get_range("obj", 0..LINE, Some(&etag))
        .await;
    assert_eq!(read.expect("read"), data);
    filled(&a, 1).await;
    assert_eq!(
        shared.gets().len(),
        1,
        "one look-up, of the then-absent line"
    );
    let listed = shared
        .list(&crate::store::ListRequest::flat("lines/"))
        .await
        .expect("list");
    let object_key = listed.objects[0].key.clone();
    let object = shared
        .get_range(&object_key, 0..1 << 20, None)
        .await
        .expect("get");
    let mut flipped = object.to_vec();
    let last = flipped.len() - 1;
    flipped[last] ^= 1;
    shared.put(&object_key, flipped.into()).await.expect("put");

    let b = node(&shared, 1 << 20);
    let read = b
        .wrap(origin.clone())
        .get_range("obj", 0..LINE, Some(&etag))
        .await;
    assert_eq!(read.expect("read"), data);
    assert_eq!(b.metrics.counts.verification_failures.load(Relaxed), 1);
    assert_eq!(b.metrics.counts.hits.load(Relaxed), 0);
    assert_eq!(origin.gets_of("obj"), 2);
    filled(&b, 1).await;
    let again = shared
        .get_range(&object_key, 0..1 << 20, None)
        .await
        .expect("get");
    assert_eq!(again, object, "refilled with the right bytes");
}

#[tokio::test]
async fn a_run_the_fill_buffer_has_no_room_for_is_dropped_and_counted() {
    let data = body(4 * LINE as usize, 5);
    let (origin, etag) = origin_with(&data).await;
    let shared = TestStore::ram();
    // Room for two lines: a run of four does not fit.
    let a = node(&shared, 2 * LINE);
    let read = a
        .wrap(origin.clone())
        .get_range("obj", 0..4 * LINE, Some(&etag))
        .await;
    assert_eq!(read.expect("read"), data);
    assert_eq!(a.metrics.counts.fill_drops.load(Relaxed), 4);
    assert_eq!(a.metrics.counts.pending.load(Relaxed), 0);
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(a.metrics.counts.fills.load(Relaxed), 0);
    assert_eq!(shared.calls("put"), 0);
}

#[tokio::test]
async fn reads_without_an_etag_or_off_a_line_go_straight_to_the_origin() {
    let data = body(2 * LINE as usize, 6);
    let (origin, etag) = origin_with(&data).await;
    let shared = TestStore::ram();
    let a = node(&shared, 1 << 20);
    let store = a.wrap(origin.clone());
    let read = store.get_range("obj", 10..LINE, Some(&etag)).await;
    assert_eq!(read.expect("read"), data.slice(10..LINE as usize));
    let read = store.get_range("obj", 0..LINE, None).await;
    assert_eq!(read.expect("read"), data.slice(..LINE as usize));
    assert_eq!(shared.gets().len(), 0, "the shared cache was asked");
    assert_eq!(origin.gets_of("obj"), 2);
}
