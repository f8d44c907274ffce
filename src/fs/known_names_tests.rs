//! Lookups of new names in directories whose names are known (`known_names`), through `Fs` over
//! a RAM store that counts its requests: made here or listed, then changed by this mount.

use bytes::Bytes;

use super::subtree_tests::fixture;
use super::*;
use crate::store::ObjectStore;
use crate::store::testing::TestStore;

const TTL: Duration = Duration::from_secs(60);

/// HEADs and LISTs served so far: what a lookup that asks the store costs.
fn probes(store: &TestStore) -> usize {
    store.calls("head") + store.calls("list")
}

async fn data_dir(fs: &Fs) -> u64 {
    fs.lookup(ROOT_INO, "data").await.expect("data").ino
}

/// Creates `name` in `dir` the way `echo x > name` does: a lookup that misses, then a create,
/// a write and a close (committed before it returns).
async fn echo_into(fs: &Fs, dir: u64, name: &str) {
    assert!(matches!(fs.lookup(dir, name).await, Err(FsError::NotFound)));
    let (_, fh) = fs.create(dir, name).await.expect("create");
    fs.write(fh, 0, b"x\n").await.expect("write");
    fs.fsync(fh).await.expect("fsync");
    fs.release(fh).await;
}

#[tokio::test]
async fn files_created_in_a_new_directory_cost_no_lookup_requests() {
    let f = fixture(&[], TTL).await;
    let data = data_dir(&f.fs).await;
    let dir = f.fs.mkdir(data, "new").await.expect("mkdir").ino;
    let before = probes(&f.store);
    for i in 0..20 {
        echo_into(&f.fs, dir, &format!("f{i}")).await;
    }
    assert_eq!(probes(&f.store), before, "every miss answered from memory");
    assert_eq!(f.store.calls("put"), 21, "the marker and one PUT per file");

    // What this mount created, and removed, is asked of the store (or the write engine).
    assert_eq!(f.fs.lookup(dir, "f7").await.expect("created").size, 2);
    f.fs.unlink(dir, "f7").await.expect("unlink");
    assert!(matches!(
        f.fs.lookup(dir, "f7").await,
        Err(FsError::NotFound)
    ));
    let sub = f.fs.mkdir(dir, "sub").await.expect("mkdir sub").ino;
    f.fs.forget(sub, 1);
    assert_eq!(f.fs.lookup(dir, "sub").await.expect("sub").kind, Kind::Dir);
    assert!(matches!(
        f.fs.lookup(dir, "f99").await,
        Err(FsError::NotFound)
    ));
}

#[tokio::test]
async fn a_listed_directory_still_answers_misses_after_a_change_of_this_mount() {
    let keys = ["d/a".to_string(), "d/b".to_string()];
    let f = fixture(&keys, TTL).await;
    let data = data_dir(&f.fs).await;
    let dir = f.fs.lookup(data, "d").await.expect("d").ino;
    let fh = f.fs.opendir(dir).await.expect("opendir");
    f.fs.releasedir(fh);
    echo_into(&f.fs, dir, "new").await;
    let before = probes(&f.store);
    assert!(matches!(
        f.fs.lookup(dir, "zzz").await,
        Err(FsError::NotFound)
    ));
    assert_eq!(
        probes(&f.store),
        before,
        "a miss of a name the listing lacked"
    );
    assert_eq!(f.fs.lookup(dir, "a").await.expect("listed").size, 1);
    assert_eq!(f.fs.lookup(dir, "new").await.expect("created").size, 2);
}

#[tokio::test]
async fn a_name_another_client_adds_is_found_once_the_ttl_has_passed() {
    let ttl = Duration::from_millis(300);
    let f = fixture(&[], ttl).await;
    let data = data_dir(&f.fs).await;
    let dir = f.fs.mkdir(data, "shared").await.expect("mkdir").ino;
    f.store
        .put("shared/theirs", Bytes::from_static(b"abc"))
        .await
        .expect("put behind the mount");
    tokio::time::sleep(ttl + Duration::from_millis(50)).await;
    assert_eq!(f.fs.lookup(dir, "theirs").await.expect("found").size, 3);
}

#[tokio::test]
async fn with_no_ttl_every_miss_asks_the_store() {
    let f = fixture(&[], Duration::ZERO).await;
    let data = data_dir(&f.fs).await;
    let dir = f.fs.mkdir(data, "new").await.expect("mkdir").ino;
    let before = probes(&f.store);
    assert!(matches!(
        f.fs.lookup(dir, "x").await,
        Err(FsError::NotFound)
    ));
    assert!(probes(&f.store) > before);
}
