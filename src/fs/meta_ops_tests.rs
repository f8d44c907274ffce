//! Modes, owners, times and symbolic links of `posix_metadata` backends, tested at the `Fs`
//! level over a counting RAM store: what the store ends up holding (read back with
//! `head_with_metadata`), what `getattr` shows, and what a second `Fs` over the same store (a
//! fresh mount) shows.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;

use super::super::posix::{S_IFDIR, S_IFLNK, S_IFREG};
use super::super::tests::{WRITE, open_truncating, test_engines};
use super::super::{Backend, FsOptions, OpenMode, Opened, ROOT_INO};
use super::*;
use crate::store::ObjectStore;
use crate::store::testing::TestStore;

/// One mount over a shared store; the spill directory lives as long as it.
struct Mount {
    fs: Fs,
    _spill: tempfile::TempDir,
}

/// Backend defaults, which the objects' own metadata must override.
const FILE_PERM: u16 = 0o644;
const DIR_PERM: u16 = 0o755;
const BACKEND_UID: u32 = 1000;
const BACKEND_GID: u32 = 1000;

/// An `Fs` showing `store` as backend "data", writable, with or without `posix_metadata`.
fn mount(store: &Arc<TestStore>, posix_metadata: bool) -> Mount {
    let backend = Arc::new(Backend::new(
        "data",
        BackendSettings {
            store: store.clone(),
            prefix: String::new(),
            readonly: false,
            flush_on_close: false,
            posix_metadata,
            uid: BACKEND_UID,
            gid: BACKEND_GID,
            dir_perm: DIR_PERM,
            file_perm: FILE_PERM,
            page_size: None,
            max_key_bytes: crate::store::MAX_KEY_LEN,
            manifest: None,
        },
    ));
    let options = FsOptions {
        uid: 0,
        gid: 0,
        dir_perm: 0o555,
        ttl: Duration::from_secs(60),
        inode_limit: crate::memory::InodeLimit::fixed(usize::MAX),
    };
    let spill = tempfile::tempdir().expect("spill dir");
    let engines = test_engines(spill.path(), 64 << 20);
    Mount {
        fs: Fs::new(options, engines, vec![backend]),
        _spill: spill,
    }
}

async fn resolve(fs: &Fs, path: &str) -> Result<Attr> {
    let mut attr = fs.getattr(ROOT_INO).await?;
    for name in path.split('/').filter(|s| !s.is_empty()) {
        attr = fs.lookup(attr.ino, name).await?;
    }
    Ok(attr)
}

/// The metadata the store holds for `key` (panics if there is no such object).
async fn stored_metadata(store: &TestStore, key: &str) -> Metadata {
    store
        .head_with_metadata(key)
        .await
        .expect("head")
        .unwrap_or_else(|| panic!("{key} is in the store"))
        .1
}

async fn stored_body(store: &TestStore, key: &str) -> Bytes {
    let (meta, _) = store
        .head_with_metadata(key)
        .await
        .expect("head")
        .unwrap_or_else(|| panic!("{key} is in the store"));
    store.get_range(key, 0..meta.size, None).await.expect("get")
}

/// Commits everything still being written and checks that nothing failed.
async fn drain(fs: &Fs) {
    let failed = fs.engines.writes.drain().await;
    assert!(failed.is_empty(), "{failed:?}");
}

/// Creates `name` in the backend root by `creator`, writes `body`, and commits it.
async fn create_committed(fs: &Fs, name: &str, body: &[u8], creator: Creator) -> Attr {
    let data = resolve(fs, "data").await.expect("data");
    let (attr, fh) = fs
        .create_as(data.ino, name, Some(creator))
        .await
        .expect("create");
    fs.write(fh, 0, body).await.expect("write");
    fs.flush(fh, None).await.expect("flush");
    fs.release(fh).await;
    drain(fs).await;
    attr
}

fn metadata_of(pairs: &[(&str, &str)]) -> Metadata {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

async fn put_with(store: &TestStore, key: &str, body: &[u8], metadata: &Metadata) {
    let body = Arc::new(InMemory(Bytes::copy_from_slice(body)));
    store
        .put_with_metadata(key, body, metadata)
        .await
        .expect("put");
}

const OWNER: Creator = Creator {
    uid: 1234,
    gid: 5678,
    perm: 0o640,
};

#[tokio::test]
async fn meta_ops_a_created_file_carries_its_creators_mode_and_owner() {
    let store = TestStore::ram();
    let m = mount(&store, true);
    let data = resolve(&m.fs, "data").await.expect("data");
    let (created, fh) =
        m.fs.create_as(data.ino, "f", Some(OWNER))
            .await
            .expect("create");
    assert_eq!(
        (created.perm, created.uid, created.gid),
        (0o640, 1234, 5678),
        "create's reply shows the creator's"
    );
    m.fs.write(fh, 0, b"hello").await.expect("write");
    m.fs.flush(fh, None).await.expect("flush");
    m.fs.release(fh).await;
    drain(&m.fs).await;

    let metadata = stored_metadata(&store, "f").await;
    assert_eq!(metadata["mode"], "33184", "S_IFREG|0640 in decimal");
    assert_eq!(metadata["mode"], (S_IFREG | 0o640).to_string());
    assert_eq!(metadata["uid"], "1234");
    assert_eq!(metadata["gid"], "5678");
    assert!(metadata.contains_key("mtime"), "{metadata:?}");
    assert_eq!(&stored_body(&store, "f").await[..], b"hello");

    let attr = m.fs.getattr(created.ino).await.expect("getattr");
    assert_eq!(
        (attr.kind, attr.size, attr.perm, attr.uid, attr.gid),
        (Kind::File, 5, 0o640, 1234, 5678)
    );
    let again = mount(&store, true);
    let attr = resolve(&again.fs, "data/f").await.expect("lookup");
    assert_eq!(
        (attr.perm, attr.uid, attr.gid),
        (0o640, 1234, 5678),
        "a fresh mount shows them"
    );
}

#[tokio::test]
async fn meta_ops_chmod_of_a_clean_file_is_one_copy_and_sticks() {
    let store = TestStore::ram();
    let m = mount(&store, true);
    let created = create_committed(&m.fs, "f", b"hello", OWNER).await;
    let (puts, copies) = (store.calls("put"), store.calls("copy"));
    let change = SetAttr {
        mode: Some(S_IFREG | 0o600),
        ..SetAttr::default()
    };
    let attr = m.fs.setattr(created.ino, change).await.expect("chmod");
    assert_eq!((attr.perm, attr.uid, attr.gid), (0o600, 1234, 5678));
    assert_eq!(
        store.calls("copy"),
        copies + 1,
        "one CopyObject onto itself"
    );
    assert_eq!(store.calls("put"), puts, "never a re-upload");

    let metadata = stored_metadata(&store, "f").await;
    assert_eq!(metadata["mode"], (S_IFREG | 0o600).to_string());
    assert_eq!(
        (metadata["uid"].as_str(), metadata["gid"].as_str()),
        ("1234", "5678"),
        "the owner is kept"
    );
    assert_eq!(&stored_body(&store, "f").await[..], b"hello", "bytes kept");
    let attr = m.fs.getattr(created.ino).await.expect("getattr");
    assert_eq!(attr.perm, 0o600);

    let again = mount(&store, true);
    let attr = resolve(&again.fs, "data/f").await.expect("lookup");
    assert_eq!((attr.perm, attr.uid, attr.gid), (0o600, 1234, 5678));
    // The file is still readable through the first mount (the replace kept its version).
    let Opened { fh, .. } =
        m.fs.open(created.ino, OpenMode::default())
            .await
            .expect("open");
    assert_eq!(&m.fs.read(fh, 0, 100).await.expect("read")[..], b"hello");
    m.fs.release(fh).await;
}

#[tokio::test]
async fn meta_ops_chown_and_utimens_stick_to_the_nanosecond() {
    let store = TestStore::ram();
    // An object written by someone else, without any metadata.
    store
        .put("f", Bytes::from_static(b"abc"))
        .await
        .expect("put");
    let m = mount(&store, true);
    let f = resolve(&m.fs, "data/f").await.expect("lookup");
    assert_eq!(
        (f.perm, f.uid, f.gid),
        (FILE_PERM, BACKEND_UID, BACKEND_GID),
        "the backend's until changed"
    );
    let copies = store.calls("copy");
    let puts = store.calls("put");

    let chown = SetAttr {
        uid: Some(42),
        gid: Some(43),
        ..SetAttr::default()
    };
    let attr = m.fs.setattr(f.ino, chown).await.expect("chown");
    assert_eq!((attr.uid, attr.gid, attr.perm), (42, 43, FILE_PERM));

    let mtime = UNIX_EPOCH + Duration::new(1_700_000_000, 123_456_789);
    let atime = UNIX_EPOCH + Duration::new(1_700_000_100, 5);
    let utimens = SetAttr {
        mtime: Some(mtime),
        atime: Some(atime),
        ..SetAttr::default()
    };
    let attr = m.fs.setattr(f.ino, utimens).await.expect("utimens");
    assert_eq!(attr.mtime, mtime);
    assert_eq!((attr.uid, attr.gid), (42, 43), "the chown is not lost");
    assert_eq!(store.calls("copy"), copies + 2, "one copy per setattr");
    assert_eq!(store.calls("put"), puts);

    let metadata = stored_metadata(&store, "f").await;
    assert_eq!(metadata["uid"], "42");
    assert_eq!(metadata["gid"], "43");
    assert_eq!(metadata["mtime"], "1700000000.123456789");
    assert_eq!(metadata["atime"], "1700000100.000000005");
    assert!(
        !metadata.contains_key("mode"),
        "no mode was asked for: {metadata:?}"
    );
    assert_eq!(&stored_body(&store, "f").await[..], b"abc");

    let again = mount(&store, true);
    let attr = resolve(&again.fs, "data/f").await.expect("lookup");
    assert_eq!((attr.uid, attr.gid, attr.perm), (42, 43, FILE_PERM));
    assert_eq!(attr.mtime, mtime, "mtime round-trips with its nanoseconds");
    assert_eq!(
        again.fs.getattr(attr.ino).await.expect("getattr").mtime,
        mtime
    );
}

#[tokio::test]
async fn meta_ops_directories_keep_theirs_on_the_marker_made_if_missing() {
    let store = TestStore::ram();
    let m = mount(&store, true);
    let data = resolve(&m.fs, "data").await.expect("data");
    let creator = Creator {
        uid: 7,
        gid: 8,
        perm: 0o750,
    };
    let d =
        m.fs.mkdir_as(data.ino, "d", Some(creator))
            .await
            .expect("mkdir");
    assert_eq!((d.kind, d.perm, d.uid, d.gid), (Kind::Dir, 0o750, 7, 8));
    let metadata = stored_metadata(&store, "d/").await;
    assert_eq!(metadata["mode"], (S_IFDIR | 0o750).to_string());
    assert_eq!(metadata["mode"], "16872");
    assert_eq!(
        (metadata["uid"].as_str(), metadata["gid"].as_str()),
        ("7", "8")
    );
    let attr = m.fs.getattr(d.ino).await.expect("getattr");
    assert_eq!((attr.perm, attr.uid, attr.gid), (0o750, 7, 8));

    // An implicit directory: a key below it, no marker.
    store
        .put("d2/x", Bytes::from_static(b"x"))
        .await
        .expect("put");
    let d2 = resolve(&m.fs, "data/d2").await.expect("d2");
    assert_eq!((d2.kind, d2.perm), (Kind::Dir, DIR_PERM));
    assert!(
        store
            .head_with_metadata("d2/")
            .await
            .expect("head")
            .is_none()
    );
    let chmod = SetAttr {
        mode: Some(S_IFDIR | 0o700),
        ..SetAttr::default()
    };
    let attr = m.fs.setattr(d2.ino, chmod).await.expect("chmod");
    assert_eq!((attr.kind, attr.perm), (Kind::Dir, 0o700));
    let metadata = stored_metadata(&store, "d2/").await;
    assert_eq!(metadata["mode"], (S_IFDIR | 0o700).to_string());
    assert_eq!(
        &stored_body(&store, "d2/").await[..],
        b"",
        "an empty marker"
    );

    let again = mount(&store, true);
    let attr = resolve(&again.fs, "data/d2").await.expect("d2");
    assert_eq!((attr.kind, attr.perm), (Kind::Dir, 0o700));
    let x = resolve(&again.fs, "data/d2/x").await.expect("d2/x");
    assert_eq!(x.kind, Kind::File, "the directory's content is untouched");
    let attr = resolve(&again.fs, "data/d").await.expect("d");
    assert_eq!((attr.perm, attr.uid, attr.gid), (0o750, 7, 8));
}

#[tokio::test]
async fn meta_ops_symlinks_round_trip_and_need_posix_metadata() {
    let store = TestStore::ram();
    let m = mount(&store, true);
    let data = resolve(&m.fs, "data").await.expect("data");
    let target = b"../some dir/target\xff";
    let creator = Creator {
        uid: 11,
        gid: 12,
        perm: 0o644, // links are 0777 whatever the umask
    };
    let link =
        m.fs.symlink(data.ino, "link", target, creator)
            .await
            .expect("symlink");
    assert_eq!(link.kind, Kind::Symlink);
    assert_eq!(link.size, target.len() as u64);
    assert_eq!((link.perm, link.uid, link.gid), (0o777, 11, 12));
    assert_eq!(
        &m.fs.readlink(link.ino).await.expect("readlink")[..],
        target
    );
    assert_eq!(
        m.fs.getattr(link.ino).await.expect("getattr").kind,
        Kind::Symlink
    );

    assert_eq!(&stored_body(&store, "link").await[..], target);
    let metadata = stored_metadata(&store, "link").await;
    assert_eq!(metadata["mode"], (S_IFLNK | 0o777).to_string());
    assert_eq!(metadata["mode"], "41471");
    assert_eq!(
        (metadata["uid"].as_str(), metadata["gid"].as_str()),
        ("11", "12")
    );

    let exists = m.fs.symlink(data.ino, "link", b"x", creator).await;
    assert_eq!(exists.map(|_| ()).map_err(|e| e.errno()), Err(libc::EEXIST));

    let again = mount(&store, true);
    let attr = resolve(&again.fs, "data/link").await.expect("lookup");
    assert_eq!(attr.kind, Kind::Symlink);
    assert_eq!(
        &again.fs.readlink(attr.ino).await.expect("readlink")[..],
        target
    );

    // A plain file is not a link.
    let plain = create_committed(&m.fs, "plain", b"p", OWNER).await;
    let refused = m.fs.readlink(plain.ino).await;
    assert_eq!(refused.map_err(|e| e.errno()), Err(libc::EINVAL));

    let plain_store = TestStore::ram();
    let without = mount(&plain_store, false);
    let data = resolve(&without.fs, "data").await.expect("data");
    let refused = without.fs.symlink(data.ino, "link", target, creator).await;
    assert_eq!(refused.map(|_| ()).map_err(|e| e.errno()), Err(libc::EPERM));
    assert!(
        plain_store
            .head_with_metadata("link")
            .await
            .expect("head")
            .is_none(),
        "nothing was written"
    );
}

#[tokio::test]
async fn meta_ops_rewriting_a_file_keeps_its_mode_and_owner() {
    let store = TestStore::ram();
    // As s3fs leaves it after `chmod 750 f; chown 1234:5678 f`, with a name of someone else's.
    let theirs = metadata_of(&[
        ("mode", "33256"),
        ("uid", "1234"),
        ("gid", "5678"),
        ("mtime", "1600000000"),
        ("owner-team", "ml"),
    ]);
    put_with(&store, "f", b"old contents", &theirs).await;
    let m = mount(&store, true);
    let f = resolve(&m.fs, "data/f").await.expect("lookup");
    assert_eq!((f.perm, f.uid, f.gid), (0o750, 1234, 5678));

    let Opened { fh, .. } = open_truncating(&m.fs, f.ino).await.expect("open");
    m.fs.write(fh, 0, b"new").await.expect("write");
    let writing = m.fs.getattr(f.ino).await.expect("getattr while writing");
    assert_eq!(
        (writing.perm, writing.uid, writing.gid),
        (0o750, 1234, 5678)
    );
    m.fs.fsync(fh).await.expect("fsync");
    m.fs.release(fh).await;
    drain(&m.fs).await;

    assert_eq!(&stored_body(&store, "f").await[..], b"new");
    let metadata = stored_metadata(&store, "f").await;
    assert_eq!(metadata["mode"], "33256");
    assert_eq!(
        (metadata["uid"].as_str(), metadata["gid"].as_str()),
        ("1234", "5678")
    );
    assert_eq!(metadata["owner-team"], "ml", "names of others are kept");
    let attr = m.fs.getattr(f.ino).await.expect("getattr");
    assert_eq!(
        (attr.size, attr.perm, attr.uid, attr.gid),
        (3, 0o750, 1234, 5678)
    );
    let again = mount(&store, true);
    let attr = resolve(&again.fs, "data/f").await.expect("lookup");
    assert_eq!(
        (attr.size, attr.perm, attr.uid, attr.gid),
        (3, 0o750, 1234, 5678)
    );
}

/// Writing a file's content is a modification: its stored `mtime` (which `stat` shows over the
/// object's own Last-Modified) must follow, as s3fs's does, or `make` and `rsync` see a file
/// rewritten just now as unchanged since its creation.
#[tokio::test]
async fn meta_ops_rewriting_a_file_moves_its_mtime() {
    let store = TestStore::ram();
    let old = UNIX_EPOCH + Duration::from_secs(1_600_000_000);
    let theirs = metadata_of(&[("mode", "33188"), ("mtime", "1600000000")]);
    put_with(&store, "f", b"old contents", &theirs).await;
    let m = mount(&store, true);
    let f = resolve(&m.fs, "data/f").await.expect("lookup");
    assert_eq!(f.mtime, old);

    let before = SystemTime::now() - Duration::from_secs(1);
    let Opened { fh, .. } = open_truncating(&m.fs, f.ino).await.expect("open");
    m.fs.write(fh, 0, b"new").await.expect("write");
    let writing = m.fs.getattr(f.ino).await.expect("getattr while writing");
    assert!(
        writing.mtime >= before,
        "while written: {:?}",
        writing.mtime
    );
    m.fs.fsync(fh).await.expect("fsync");
    m.fs.release(fh).await;
    drain(&m.fs).await;

    let attr = m.fs.getattr(f.ino).await.expect("getattr");
    assert!(attr.mtime >= before, "after the commit: {:?}", attr.mtime);
    let again = mount(&store, true);
    let attr = resolve(&again.fs, "data/f").await.expect("lookup");
    assert!(attr.mtime >= before, "on a fresh mount: {:?}", attr.mtime);
}

#[tokio::test]
async fn meta_ops_without_posix_metadata_changes_are_accepted_and_forgotten() {
    let store = TestStore::ram();
    store
        .put("f", Bytes::from_static(b"abc"))
        .await
        .expect("put");
    let m = mount(&store, false);
    let f = resolve(&m.fs, "data/f").await.expect("lookup");
    assert_eq!(
        (f.perm, f.uid, f.gid),
        (FILE_PERM, BACKEND_UID, BACKEND_GID)
    );
    let (puts, copies) = (store.calls("put"), store.calls("copy"));
    let change = SetAttr {
        mode: Some(S_IFREG | 0o600),
        uid: Some(42),
        gid: Some(43),
        ..SetAttr::default()
    };
    let attr = m.fs.setattr(f.ino, change).await.expect("accepted");
    assert_eq!(
        (attr.perm, attr.uid, attr.gid),
        (FILE_PERM, BACKEND_UID, BACKEND_GID)
    );
    assert_eq!(
        (store.calls("put"), store.calls("copy")),
        (puts, copies),
        "no request"
    );
    assert!(stored_metadata(&store, "f").await.is_empty());

    // Creators are not recorded either: new objects carry no metadata.
    let data = resolve(&m.fs, "data").await.expect("data");
    let d =
        m.fs.mkdir_as(data.ino, "d", Some(OWNER))
            .await
            .expect("mkdir");
    assert_eq!((d.perm, d.uid), (DIR_PERM, BACKEND_UID));
    assert!(stored_metadata(&store, "d/").await.is_empty());
    let created = create_committed(&m.fs, "g", b"g", OWNER).await;
    assert_eq!((created.perm, created.uid), (FILE_PERM, BACKEND_UID));
    assert!(stored_metadata(&store, "g").await.is_empty());
}

#[tokio::test]
async fn meta_ops_chmod_of_a_dirty_file_rides_on_its_commit() {
    let store = TestStore::ram();
    let m = mount(&store, true);
    let data = resolve(&m.fs, "data").await.expect("data");
    let (created, fh) =
        m.fs.create_as(data.ino, "f", Some(OWNER))
            .await
            .expect("create");
    m.fs.write(fh, 0, b"pending").await.expect("write");
    let change = SetAttr {
        mode: Some(S_IFREG | 0o604),
        uid: Some(99),
        ..SetAttr::default()
    };
    let attr = m.fs.setattr(created.ino, change).await.expect("chmod");
    assert_eq!((attr.perm, attr.uid, attr.gid), (0o604, 99, 5678));
    assert_eq!(store.calls("copy"), 0, "nothing to copy yet");
    assert!(
        store.head_with_metadata("f").await.expect("head").is_none(),
        "not committed yet"
    );

    m.fs.flush(fh, None).await.expect("flush");
    m.fs.release(fh).await;
    drain(&m.fs).await;
    let metadata = stored_metadata(&store, "f").await;
    assert_eq!(metadata["mode"], (S_IFREG | 0o604).to_string());
    assert_eq!(
        (metadata["uid"].as_str(), metadata["gid"].as_str()),
        ("99", "5678")
    );
    assert_eq!(&stored_body(&store, "f").await[..], b"pending");
    assert_eq!(
        store.calls("copy"),
        0,
        "the commit carried it: no fix-up copy"
    );
    assert_eq!(store.calls("put"), 1, "one upload");

    let again = mount(&store, true);
    let attr = resolve(&again.fs, "data/f").await.expect("lookup");
    assert_eq!((attr.perm, attr.uid, attr.gid), (0o604, 99, 5678));
}

/// `ls -l`: opening a directory reads its entries' metadata in one round, so the lookups that
/// follow ask the store nothing.
#[tokio::test]
async fn meta_ops_opendir_reads_the_entries_metadata_ahead() {
    let store = TestStore::ram();
    for i in 0..5u32 {
        let mode = (S_IFREG | (0o600 + i)).to_string();
        let uid = (100 + i).to_string();
        put_with(
            &store,
            &format!("d/f{i}"),
            b"x",
            &metadata_of(&[("mode", &mode), ("uid", &uid)]),
        )
        .await;
    }
    let dir_mode = (S_IFDIR | 0o711).to_string();
    put_with(&store, "d/sub/", b"", &metadata_of(&[("mode", &dir_mode)])).await;
    let m = mount(&store, true);
    let d = resolve(&m.fs, "data/d").await.expect("d");
    let heads = store.calls("head");
    let fh = m.fs.opendir(d.ino).await.expect("opendir");
    assert_eq!(
        store.calls("head"),
        heads + 6,
        "one HEAD per entry, at opendir"
    );
    let heads = store.calls("head");
    for i in 0..5u32 {
        let attr = m.fs.lookup(d.ino, &format!("f{i}")).await.expect("lookup");
        assert_eq!((attr.perm, attr.uid), ((0o600 + i) as u16, 100 + i));
    }
    let sub = m.fs.lookup(d.ino, "sub").await.expect("sub");
    assert_eq!((sub.kind, sub.perm), (Kind::Dir, 0o711));
    assert_eq!(
        store.calls("head"),
        heads,
        "the lookups asked the store nothing"
    );
    m.fs.releasedir(fh);
}

/// utimens on a file being written: the commit stores the time asked for, not the commit's.
#[tokio::test]
async fn meta_ops_utimens_of_a_dirty_file_is_what_its_commit_stores() {
    let store = TestStore::ram();
    let m = mount(&store, true);
    let data = resolve(&m.fs, "data").await.expect("data");
    let (created, fh) =
        m.fs.create_as(data.ino, "f", Some(OWNER))
            .await
            .expect("create");
    m.fs.write(fh, 0, b"pending").await.expect("write");
    let mtime = UNIX_EPOCH + Duration::new(1_500_000_000, 987_654_321);
    let touch = SetAttr {
        mtime: Some(mtime),
        ..SetAttr::default()
    };
    let attr = m.fs.setattr(created.ino, touch).await.expect("utimens");
    assert_eq!(attr.mtime, mtime);
    m.fs.flush(fh, None).await.expect("flush");
    m.fs.release(fh).await;
    drain(&m.fs).await;
    assert_eq!(
        stored_metadata(&store, "f").await["mtime"],
        "1500000000.987654321"
    );
    assert_eq!(store.calls("copy"), 0, "the commit carried it");
    let again = mount(&store, true);
    let attr = resolve(&again.fs, "data/f").await.expect("lookup");
    assert_eq!(attr.mtime, mtime);
}

/// chmod of a file whose writes are committed but which is still open (the write engine still
/// holds it, clean): the replace keeps the modification time the commit stored.
#[tokio::test]
async fn meta_ops_chmod_of_an_open_committed_file_keeps_its_stored_mtime() {
    let store = TestStore::ram();
    let m = mount(&store, true);
    let data = resolve(&m.fs, "data").await.expect("data");
    let (created, fh) =
        m.fs.create_as(data.ino, "f", Some(OWNER))
            .await
            .expect("create");
    tokio::time::sleep(Duration::from_millis(20)).await;
    m.fs.write(fh, 0, b"written").await.expect("write");
    m.fs.fsync(fh).await.expect("fsync");
    let committed = stored_metadata(&store, "f").await["mtime"].clone();
    let shown = m.fs.getattr(created.ino).await.expect("getattr").mtime;
    assert_eq!(crate::store::format_time(shown), committed);

    let chmod = SetAttr {
        mode: Some(S_IFREG | 0o600),
        ..SetAttr::default()
    };
    m.fs.setattr(created.ino, chmod).await.expect("chmod");
    let metadata = stored_metadata(&store, "f").await;
    assert_eq!(metadata["mode"], (S_IFREG | 0o600).to_string());
    assert_eq!(
        metadata["mtime"], committed,
        "a chmod does not move the stored mtime back to the create's"
    );
    m.fs.release(fh).await;
    drain(&m.fs).await;
    let again = mount(&store, true);
    let attr = resolve(&again.fs, "data/f").await.expect("lookup");
    assert_eq!((attr.perm, attr.mtime), (0o600, shown));
}

/// chmod while a commit is sending the file's bytes: the commit lands with the old mode and
/// fixes it up with one replace (`settle_metadata`), which must keep the modification time of
/// the writes.
#[tokio::test]
async fn meta_ops_chmod_during_a_commit_is_settled_with_the_writes_mtime() {
    let store = TestStore::ram();
    let theirs = metadata_of(&[("mode", "33188"), ("mtime", "1600000000")]);
    put_with(&store, "f", b"0123456789", &theirs).await;
    let m = mount(&store, true);
    let f = resolve(&m.fs, "data/f").await.expect("lookup");
    let Opened { fh, .. } = m.fs.open(f.ino, WRITE).await.expect("open");
    let before = SystemTime::now() - Duration::from_secs(1);
    m.fs.write(fh, 0, b"ab").await.expect("write");
    // The commit reads the rest of the object from the store: held there.
    store.hold("f");
    let fs = &m.fs;
    let (committed, ()) = tokio::join!(fs.fsync(fh), async {
        store.until_arrived(1).await;
        let chmod = SetAttr {
            mode: Some(S_IFREG | 0o600),
            ..SetAttr::default()
        };
        fs.setattr(f.ino, chmod).await.expect("chmod");
        store.open_gate();
    });
    committed.expect("fsync");
    m.fs.release(fh).await;
    drain(&m.fs).await;
    assert_eq!(&stored_body(&store, "f").await[..], b"ab23456789");
    let metadata = stored_metadata(&store, "f").await;
    assert_eq!(metadata["mode"], (S_IFREG | 0o600).to_string());
    assert_eq!(
        store.calls("copy"),
        1,
        "one fix-up replace after the commit landed"
    );
    let mtime = crate::store::parse_time(&metadata["mtime"]).expect("an mtime");
    assert!(
        mtime >= before,
        "the stored mtime is the writes', not the one the file was opened with: {}",
        metadata["mtime"]
    );
}

/// An object another tool marked a link, whose body is no path (5 KiB here; could be 5 GiB):
/// refused with ENAMETOOLONG, never read whole.
#[tokio::test]
async fn meta_ops_a_link_longer_than_any_path_is_refused_unread() {
    let store = TestStore::ram();
    let link = metadata_of(&[("mode", "41471")]);
    put_with(&store, "huge-link", &[b'a'; 5 << 10], &link).await;
    let m = mount(&store, true);
    let attr = resolve(&m.fs, "data/huge-link").await.expect("lookup");
    assert_eq!(attr.kind, Kind::Symlink);
    let gets = store.calls("get");
    let refused = m.fs.readlink(attr.ino).await.expect_err("too long");
    assert_eq!(refused.errno(), libc::ENAMETOOLONG);
    assert_eq!(store.calls("get"), gets, "nothing read");
}

/// A cold lookup reads an object's metadata with the HEAD that finds it: one, not two.
#[tokio::test]
async fn meta_ops_a_cold_lookup_costs_one_head() {
    let store = TestStore::ram();
    put_with(&store, "f", b"abc", &metadata_of(&[("mode", "33216")])).await;
    let m = mount(&store, true);
    let data = resolve(&m.fs, "data").await.expect("data");
    let heads = store.calls("head");
    let attr = m.fs.lookup(data.ino, "f").await.expect("lookup");
    assert_eq!(attr.perm, 0o700);
    assert_eq!(store.calls("head") - heads, 1);
}

/// A directory without a marker (only objects below it) has no metadata to read: its cold
/// lookup costs the probe's HEAD and LIST, no HEAD of a marker.
#[tokio::test]
async fn meta_ops_a_directory_without_a_marker_costs_no_marker_head() {
    let store = TestStore::ram();
    store
        .put("d/x", Bytes::from_static(b"x"))
        .await
        .expect("put");
    let m = mount(&store, true);
    let data = resolve(&m.fs, "data").await.expect("data");
    let heads = store.calls("head");
    let attr = m.fs.lookup(data.ino, "d").await.expect("lookup");
    assert_eq!(attr.kind, Kind::Dir);
    assert_eq!(
        store.calls("head") - heads,
        1,
        "the probe's HEAD of `d` only"
    );
}

/// A directory's attributes known without a store request are answered on the caller's thread
/// (`getattr_now`), the same as `getattr` says, and so are a file's being written; a
/// directory's whose metadata must be read first are not.
#[tokio::test]
async fn meta_ops_a_directorys_known_attributes_are_answered_without_waiting() {
    let store = TestStore::ram();
    store
        .put("implicit/x", Bytes::from_static(b"x"))
        .await
        .expect("put");
    for posix_metadata in [false, true] {
        let m = mount(&store, posix_metadata);
        let now = |ino| m.fs.getattr_now(ino).map(|attr| attr.expect("attr"));
        assert_eq!(
            now(ROOT_INO),
            Some(m.fs.getattr(ROOT_INO).await.expect("root"))
        );
        let data = resolve(&m.fs, "data").await.expect("data");
        let creator = Creator {
            uid: 7,
            gid: 8,
            perm: 0o750,
        };
        let name = format!("made-{posix_metadata}");
        let d =
            m.fs.mkdir_as(data.ino, &name, Some(creator))
                .await
                .expect("mkdir");
        let attr = now(d.ino).expect("known since its mkdir");
        assert_eq!(attr, m.fs.getattr(d.ino).await.expect("getattr"));
        if posix_metadata {
            assert_eq!((attr.perm, attr.uid, attr.gid), (0o750, 7, 8));
        }
        let (f, fh) = m.fs.create_as(data.ino, "f", None).await.expect("create");
        m.fs.write(fh, 0, b"grown").await.expect("write");
        let attr = now(f.ino).expect("a file being written: the engine's");
        assert_eq!(attr, m.fs.getattr(f.ino).await.expect("getattr"));
        assert_eq!(attr.size, 5);
        assert!(matches!(
            m.fs.getattr_now(u64::MAX),
            Some(Err(FsError::UnknownInode(_)))
        ));
    }

    // A fresh mount that has not read the implicit directory's metadata yet (posix_metadata:
    // a HEAD of its marker) leaves it to `getattr`; once read, it is known.
    let m = mount(&store, true);
    let data = resolve(&m.fs, "data").await.expect("data");
    let implicit = m.fs.lookup(data.ino, "implicit").await.expect("lookup");
    m.fs.metadata.forget(store.id(), "implicit/");
    assert_eq!(m.fs.getattr_now(implicit.ino).map(|a| a.is_ok()), None);
    let attr = m.fs.getattr(implicit.ino).await.expect("getattr");
    assert_eq!(
        m.fs.getattr_now(implicit.ino).map(|a| a.expect("attr")),
        Some(attr)
    );
}

/// With `posix_metadata`, a name listed but whose metadata is not read yet is left to `lookup`
/// (its HEAD), and nothing is taken for it; once read, it is answered from memory.
#[tokio::test]
async fn meta_ops_a_listed_name_is_answered_without_waiting_once_its_metadata_is_known() {
    let store = TestStore::ram();
    store.put("f", Bytes::from_static(b"x")).await.expect("put");
    let m = mount(&store, true);
    let data = resolve(&m.fs, "data").await.expect("data");
    let fh = m.fs.opendir(data.ino).await.expect("opendir");
    m.fs.releasedir(fh);
    m.fs.metadata.forget(store.id(), "f");
    assert!(m.fs.lookup_now(data.ino, "f").is_none(), "its HEAD first");
    let looked_up = m.fs.lookup(data.ino, "f").await.expect("lookup");
    let now = (m.fs.lookup_now(data.ino, "f"))
        .expect("metadata known")
        .expect("f");
    assert_eq!(now, looked_up);
}
