//! Subtree listings through real FUSE against a real garage: `find` over a small tree costs a
//! LIST per subtree, not one per directory; a tree over the bound is listed by directory again
//! and still completely; opening a file in a small directory costs one probe. Request counts
//! come from garage's own metrics.

use std::collections::BTreeSet;
use std::path::Path;

use crate::common::{Garage, MsfsMount, config_yaml, s3_backend_yaml};
use aws_sdk_s3::primitives::ByteStream;
use futures::StreamExt;

async fn put_all(garage: &Garage, bucket: &str, keys: &[String]) {
    let client = garage.client();
    let puts = keys.iter().map(|key| {
        let client = client.clone();
        async move {
            client
                .put_object()
                .bucket(bucket)
                .key(key)
                .body(ByteStream::from(key.as_bytes().to_vec()))
                .send()
                .await
                .expect("put");
        }
    });
    futures::stream::iter(puts)
        .buffer_unordered(32)
        .collect::<Vec<()>>()
        .await;
}

/// Every path below `root` as `find` prints it (without `root` itself).
fn find(root: &Path) -> BTreeSet<String> {
    let out = crate::common::run("find", &[root.to_str().expect("utf-8 path")]);
    let prefix = format!("{}/", root.display());
    out.lines()
        .filter_map(|line| line.strip_prefix(&prefix))
        .map(str::to_string)
        .collect()
}

/// The paths below `root/` that `keys` make: each key and each directory above it.
fn paths_of(keys: &[String], root: &str) -> BTreeSet<String> {
    let mut paths = BTreeSet::new();
    for key in keys {
        let rest = key.strip_prefix(root).expect("a key below the root");
        let mut at = 0;
        while let Some(slash) = rest[at..].find('/') {
            paths.insert(rest[..at + slash].to_string());
            at += slash + 1;
        }
        paths.insert(rest.to_string());
    }
    paths
}

struct Requests<'a> {
    garage: &'a Garage,
    lists: u64,
    heads: u64,
}

impl<'a> Requests<'a> {
    fn start(garage: &'a Garage) -> Requests<'a> {
        Requests {
            garage,
            lists: garage.s3_requests("ListObjectsV2"),
            heads: garage.s3_requests("HeadObject"),
        }
    }

    /// LISTs and HEADs since `start`.
    fn since(&self) -> (u64, u64) {
        (
            self.garage.s3_requests("ListObjectsV2") - self.lists,
            self.garage.s3_requests("HeadObject") - self.heads,
        )
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn find_over_a_small_tree_lists_it_once_not_once_per_directory() {
    let garage = Garage::start();
    garage.create_bucket("tree");
    // 6 x 6 x 6 = 216 files in 258 directories: more than a probe reads, fewer than the bound.
    let keys: Vec<String> = (0..216)
        .map(|i| format!("tree/d{}/d{}/d{}/file", i / 36, i / 6 % 6, i % 6))
        .collect();
    put_all(&garage, "tree", &keys).await;
    let mount = MsfsMount::start(
        &config_yaml(&[s3_backend_yaml("data", "tree", "", &garage)]),
        "yaml",
    )
    .expect("mount");
    let requests = Requests::start(&garage);
    assert_eq!(
        find(&mount.path().join("data/tree")),
        paths_of(&keys, "tree/")
    );
    // The lookup of `tree` probes it (a HEAD, and a LIST of its first 100 keys), the listing
    // of `tree` lists its whole subtree, and that answers every directory below it.
    assert_eq!(
        requests.since(),
        (2, 1),
        "(LISTs, HEADs) for 259 directories"
    );
    // Read again within the TTL: nothing more.
    find(&mount.path().join("data/tree"));
    assert_eq!(requests.since(), (2, 1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tree_over_the_bound_is_listed_by_directory_and_completely() {
    let garage = Garage::start();
    garage.create_bucket("big");
    // 1,200 keys: the subtree listing of `big` stops at 1,000, inside `d2`.
    let keys: Vec<String> = (0..1200)
        .map(|i| format!("big/d{}/f{:03}", i / 400, i % 400))
        .collect();
    put_all(&garage, "big", &keys).await;
    let mount = MsfsMount::start(
        &config_yaml(&[s3_backend_yaml("data", "big", "", &garage)]),
        "yaml",
    )
    .expect("mount");
    let requests = Requests::start(&garage);
    assert_eq!(
        find(&mount.path().join("data/big")),
        paths_of(&keys, "big/")
    );
    // The probe of `big`; its subtree listing, cut at the bound but holding `d0` and `d1`
    // whole; `big` itself with the delimiter; then `d2` by its own subtree.
    assert_eq!(requests.since(), (4, 1), "(LISTs, HEADs)");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn opening_a_file_in_a_small_directory_costs_one_probe() {
    let garage = Garage::start();
    garage.create_bucket("ttfb");
    garage
        .put_object("ttfb", "large/object", crate::common::pattern(3 << 20, 5))
        .await;
    garage
        .put_object("ttfb", "large/other", b"x".to_vec())
        .await;
    let mount = MsfsMount::start(
        &config_yaml(&[s3_backend_yaml("data", "ttfb", "", &garage)]),
        "yaml",
    )
    .expect("mount");
    let requests = Requests::start(&garage);
    let gets = garage.s3_requests("GetObject");
    let mut first = [0u8; 1];
    {
        use std::io::Read;
        let mut file = std::fs::File::open(mount.path().join("data/large/object")).expect("open");
        file.read_exact(&mut first).expect("read");
    }
    assert_eq!(first[0], crate::common::pattern(1, 5)[0]);
    // `large` probed (its LIST holds the whole directory), `object` found in that listing.
    assert_eq!(requests.since(), (1, 1), "(LISTs, HEADs)");
    assert!(garage.s3_requests("GetObject") > gets);
    // The other file of the directory is known too, and a name it does not hold is not asked for.
    assert_eq!(
        std::fs::metadata(mount.path().join("data/large/other"))
            .expect("stat")
            .len(),
        1
    );
    assert!(!mount.path().join("data/large/missing").exists());
    assert_eq!(requests.since(), (1, 1));
}
