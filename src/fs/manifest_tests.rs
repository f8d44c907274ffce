//! `Fs` over a manifest-backed backend: browsing asks the store nothing, and changes made
//! through the mount survive a remount through the delta log.

use std::path::Path;
use std::time::UNIX_EPOCH;

use super::*;
use crate::manifest::format::{Entry, ManifestInfo, Ownership, write_dir_file};
use crate::manifest::registry::Manifests;
use crate::store::ObjectStore;
use crate::store::testing::TestStore;

/// `train/2.bin`'s row states this owner and mode…
const OWNED_FILE: Ownership = Ownership {
    perm: 0o750,
    uid: 1234,
    gid: 100,
};
/// …and `train/sub`'s this one; every other entry shows the backend's (0644/0755, root).
const OWNED_DIR: Ownership = Ownership {
    perm: 0o700,
    uid: 5,
    gid: 6,
};

struct Fixture {
    data: tempfile::TempDir,
    manifest_dir: tempfile::TempDir,
    _spill: tempfile::TempDir,
    store: Arc<TestStore>,
    setup_calls: usize,
}

impl Fixture {
    /// Objects `train/{0..5}.bin`, `train/sub/x`, `readme` in the store and in a manifest.
    async fn new() -> Fixture {
        let data = tempfile::tempdir().expect("data");
        let manifest_dir = tempfile::tempdir().expect("manifest");
        let put = |key: &str, body: &[u8]| {
            let path = data.path().join(key);
            std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
            std::fs::write(path, body).expect("write");
        };
        let store = TestStore::new(data.path(), "manifest-store");
        put("readme", b"hello");
        let mut train = vec![Entry::dir("sub")];
        for i in 0..5 {
            let key = format!("train/{i}.bin");
            put(&key, &[i as u8; 100]);
            // Reads are keyed by ETag: the manifest must name the stored version.
            let etag = store.head(&key).await.expect("head").expect("exists").etag;
            train.push(Entry::file(format!("{i}.bin"), 100, etag, UNIX_EPOCH));
        }
        // Rows stating their own owner and mode (columns 6–8).
        train[3] = train[3].clone().owned(Some(OWNED_FILE));
        train[0] = Entry::dir("sub").owned(Some(OWNED_DIR));
        put("train/sub/x", b"x");
        let root = manifest_dir.path();
        write_dir_file(
            root,
            "",
            &[
                Entry::dir("train"),
                Entry::file("readme", 5, "r", UNIX_EPOCH),
            ],
        )
        .expect("root");
        write_dir_file(root, "train", &train).expect("train");
        write_dir_file(root, "train/sub", &[Entry::file("x", 1, "x", UNIX_EPOCH)]).expect("sub");
        ManifestInfo::for_test().write(root).expect("info");
        Fixture {
            data,
            manifest_dir,
            _spill: tempfile::tempdir().expect("spill"),
            setup_calls: store.calls("list") + store.calls("head"),
            store,
        }
    }

    /// A fresh `Fs` (a new mount) over the store and manifest, with a zero TTL so every
    /// attribute is re-checked.
    async fn mount(&self, writable: bool) -> Fs {
        let manifest = Manifests::new()
            .open(self.manifest_dir.path(), writable)
            .await
            .expect("open manifest")
            .expect("manifest exists");
        let backend = Arc::new(Backend::new(
            "data",
            BackendSettings {
                store: self.store.clone(),
                prefix: String::new(),
                readonly: !writable,
                flush_on_close: true,
                posix_metadata: false,
                uid: 0,
                gid: 0,
                dir_perm: 0o755,
                file_perm: 0o644,
                page_size: None,
                max_key_bytes: crate::store::MAX_KEY_LEN,
                manifest: Some(manifest),
            },
        ));
        let options = FsOptions {
            uid: 0,
            gid: 0,
            dir_perm: 0o755,
            ttl: Duration::ZERO,
            inode_limit: crate::memory::InodeLimit::fixed(usize::MAX),
        };
        Fs::new(
            options,
            super::tests::test_engines(self._spill.path(), 64 << 20),
            vec![backend],
        )
    }

    /// LIST and HEAD requests since the fixture was set up.
    fn namespace_calls(&self) -> usize {
        self.store.calls("list") + self.store.calls("head") - self.setup_calls
    }

    fn stored(&self, key: &str) -> bool {
        Path::new(&self.data.path().join(key)).exists()
    }
}

async fn resolve(fs: &Fs, path: &str) -> Result<Attr> {
    let mut attr = fs.getattr(ROOT_INO).await?;
    for name in path.split('/').filter(|s| !s.is_empty()) {
        attr = fs.lookup(attr.ino, name).await?;
    }
    Ok(attr)
}

async fn list(fs: &Fs, path: &str) -> Vec<String> {
    let dir = resolve(fs, path).await.expect("dir");
    let fh = fs.opendir(dir.ino).await.expect("opendir");
    let mut names = Vec::new();
    fs.readdir(fh, 0, true, |_, name, _, _| {
        names.push(name.to_string());
        true
    })
    .expect("readdir");
    fs.releasedir(fh);
    names.retain(|n| n != "." && n != "..");
    names
}

#[tokio::test]
async fn browsing_a_manifest_backend_asks_the_store_nothing() {
    let f = Fixture::new().await;
    let fs = f.mount(false).await;
    assert_eq!(list(&fs, "data").await, ["readme", "train"]);
    assert_eq!(
        list(&fs, "data/train").await,
        ["0.bin", "1.bin", "2.bin", "3.bin", "4.bin", "sub"]
    );
    assert_eq!(list(&fs, "data/train/sub").await, ["x"]);
    let attr = resolve(&fs, "data/train/3.bin").await.expect("file");
    assert_eq!((attr.kind, attr.size), (Kind::File, 100));
    // A zero TTL makes getattr re-check: against the manifest, not with a HEAD.
    assert_eq!(fs.getattr(attr.ino).await.expect("getattr").size, 100);
    assert!(matches!(
        resolve(&fs, "data/train/nope").await,
        Err(FsError::NotFound)
    ));
    assert_eq!(f.namespace_calls(), 0, "no LIST or HEAD while browsing");

    let Opened { fh, .. } = fs.open(attr.ino, OpenMode::default()).await.expect("open");
    assert_eq!(&fs.read(fh, 0, 10).await.expect("read")[..], &[3u8; 10]);
    fs.release(fh).await;
}

#[tokio::test]
async fn changes_through_a_writable_manifest_mount_survive_a_remount() {
    let f = Fixture::new().await;
    {
        let fs = f.mount(true).await;
        let train = resolve(&fs, "data/train").await.expect("train");
        let (_, fh) = fs.create(train.ino, "new.bin").await.expect("create");
        fs.write(fh, 0, b"fresh bytes").await.expect("write");
        fs.flush(fh, None)
            .await
            .expect("flush commits (flush_on_close)");
        fs.release(fh).await;
        fs.unlink(train.ino, "0.bin").await.expect("unlink");
        fs.rename(
            train.ino,
            "1.bin",
            train.ino,
            "one.bin",
            RenameFlags::default(),
        )
        .await
        .expect("rename");
        let made = fs.mkdir(train.ino, "made").await.expect("mkdir");
        fs.mkdir(made.ino, "inner").await.expect("mkdir inner");
        fs.rmdir(made.ino, "inner").await.expect("rmdir");
        assert!(f.stored("train/new.bin") && !f.stored("train/0.bin") && f.stored("train/one.bin"));
    }
    let fs = f.mount(false).await;
    let before = f.namespace_calls();
    assert_eq!(
        list(&fs, "data/train").await,
        [
            "2.bin", "3.bin", "4.bin", "made", "new.bin", "one.bin", "sub"
        ]
    );
    assert!(list(&fs, "data/train/made").await.is_empty());
    let new = resolve(&fs, "data/train/new.bin").await.expect("new");
    assert_eq!(new.size, 11);
    assert_eq!(
        resolve(&fs, "data/train/one.bin").await.expect("one").size,
        100
    );
    assert!(matches!(
        resolve(&fs, "data/train/0.bin").await,
        Err(FsError::NotFound)
    ));
    assert_eq!(
        f.namespace_calls(),
        before,
        "the remount browses from the manifest alone"
    );
    let Opened { fh, .. } = fs.open(new.ino, OpenMode::default()).await.expect("open");
    assert_eq!(&fs.read(fh, 0, 64).await.expect("read")[..], b"fresh bytes");
    fs.release(fh).await;
}

/// Every name of directory `fh` read in replies of `batch` entries, each resumed at the offset
/// the previous one ended with (as the kernel does).
fn read_in_batches(fs: &Fs, fh: u64, batch: usize) -> Vec<String> {
    let mut names = Vec::new();
    let mut offset = 0;
    loop {
        let mut got = 0;
        fs.readdir(fh, offset, false, |next, name, _, _| {
            if got == batch {
                return false;
            }
            got += 1;
            offset = next;
            names.push(name.to_string());
            true
        })
        .expect("readdir");
        if got == 0 {
            break;
        }
    }
    names.retain(|n| n != "." && n != "..");
    names
}

#[tokio::test]
async fn a_huge_manifest_directory_is_read_page_by_page_with_this_mounts_changes_merged() {
    let f = Fixture::new().await;
    let root = f.manifest_dir.path();
    let big: Vec<Entry> = (0..2500)
        .map(|i| Entry::file(format!("f{i:05}"), 1, "e", UNIX_EPOCH))
        .collect();
    write_dir_file(root, "train/sub", &big).expect("big dir");
    let fs = f.mount(true).await;
    let sub = resolve(&fs, "data/train/sub").await.expect("sub");
    // Changes on both sides of the 1024-entry page boundaries, and past the last entry.
    fs.unlink(sub.ino, "f00000").await.expect("unlink first");
    fs.unlink(sub.ino, "f01024")
        .await
        .expect("unlink at a boundary");
    fs.mkdir(sub.ino, "f01023x")
        .await
        .expect("mkdir inside a page");
    let (_, fh) = fs
        .create(sub.ino, "zzz-being-written")
        .await
        .expect("create");
    fs.write(fh, 0, b"1").await.expect("write");

    let mut expected: Vec<String> = (1..2500)
        .filter(|i| *i != 1024)
        .map(|i| format!("f{i:05}"))
        .collect();
    expected.push("f01023x".into());
    expected.push("zzz-being-written".into());
    expected.sort();

    let dh = fs.opendir(sub.ino).await.expect("opendir");
    assert_eq!(read_in_batches(&fs, dh, 100), expected);
    // A rewind (offset 0 after the end) and a resume in the middle give the same entries.
    assert_eq!(read_in_batches(&fs, dh, 333), expected);
    let mut middle = Vec::new();
    fs.readdir(dh, 2 + 1500, false, |_, name, _, _| {
        middle.push(name.to_string());
        true
    })
    .expect("readdir from the middle");
    assert_eq!(middle, expected[1500..]);
    fs.releasedir(dh);
    fs.release(fh).await;
}

fn owner_of(attr: &Attr) -> (u16, u32, u32) {
    (attr.perm, attr.uid, attr.gid)
}

#[tokio::test]
async fn rows_with_owner_columns_show_their_owner_and_keep_it_across_rewrites_and_renames() {
    let f = Fixture::new().await;
    let owned = (OWNED_FILE.perm, OWNED_FILE.uid, OWNED_FILE.gid);
    let owned_dir = (OWNED_DIR.perm, OWNED_DIR.uid, OWNED_DIR.gid);
    {
        let fs = f.mount(true).await;
        let attr = resolve(&fs, "data/train/2.bin").await.expect("2.bin");
        assert_eq!(owner_of(&attr), owned);
        assert_eq!(
            owner_of(&fs.getattr(attr.ino).await.expect("getattr")),
            owned
        );
        let plain = resolve(&fs, "data/train/3.bin").await.expect("3.bin");
        assert_eq!(owner_of(&plain), (0o644, 0, 0), "the backend's");
        let sub = resolve(&fs, "data/train/sub").await.expect("sub");
        assert_eq!((sub.kind, owner_of(&sub)), (Kind::Dir, owned_dir));

        // readdirplus shows the same, for entries the kernel has not looked up too.
        let train = resolve(&fs, "data/train").await.expect("train");
        let fh = fs.opendir(train.ino).await.expect("opendir");
        let mut listed = BTreeMap::new();
        fs.readdir(fh, 0, true, |_, name, attr, _| {
            listed.insert(name.to_string(), owner_of(&attr));
            true
        })
        .expect("readdir");
        fs.releasedir(fh);
        assert_eq!(listed["2.bin"], owned);
        assert_eq!(listed["sub"], owned_dir);
        assert_eq!(listed["4.bin"], (0o644, 0, 0));

        // Rewritten in place: the row keeps its owner, as a rewrite keeps it on any filesystem.
        let write = OpenMode {
            write: true,
            ..OpenMode::default()
        };
        let Opened { fh, .. } = fs.open(attr.ino, write).await.expect("open");
        fs.write(fh, 0, b"rewritten").await.expect("write");
        assert_eq!(
            owner_of(&fs.getattr(attr.ino).await.expect("getattr")),
            owned,
            "while being written"
        );
        fs.flush(fh, None).await.expect("commit");
        fs.release(fh).await;
        fs.rename(
            train.ino,
            "2.bin",
            train.ino,
            "two.bin",
            RenameFlags::default(),
        )
        .await
        .expect("rename");
    }
    let fs = f.mount(false).await;
    let two = resolve(&fs, "data/train/two.bin").await.expect("renamed");
    assert_eq!(owner_of(&two), owned, "after rewrite, rename and remount");
    assert_eq!(
        owner_of(&resolve(&fs, "data/train/sub").await.expect("sub")),
        owned_dir
    );
}

#[tokio::test]
async fn chmod_and_chown_through_a_manifest_mount_are_recorded_and_survive_a_remount() {
    let f = Fixture::new().await;
    let set = |mode: Option<u32>, uid: Option<u32>| SetAttr {
        mode,
        uid,
        ..SetAttr::default()
    };
    {
        let fs = f.mount(true).await;
        let plain = resolve(&fs, "data/train/3.bin").await.expect("3.bin");
        let changed = fs
            .setattr(plain.ino, set(Some(0o100600), Some(42)))
            .await
            .expect("chmod and chown");
        assert_eq!(owner_of(&changed), (0o600, 42, 0));
        let sub = resolve(&fs, "data/train/sub").await.expect("sub");
        fs.setattr(sub.ino, set(Some(0o40711), None))
            .await
            .expect("chmod a directory");

        // `cp -p`: the new file's mode is set while it is still being written (no row yet).
        let train = resolve(&fs, "data/train").await.expect("train");
        let (new, fh) = fs.create(train.ino, "copied.bin").await.expect("create");
        fs.write(fh, 0, b"copied").await.expect("write");
        let attr = fs
            .setattr(new.ino, set(Some(0o100640), Some(7)))
            .await
            .expect("fchmod");
        assert_eq!(owner_of(&attr), (0o640, 7, 0), "while being written");
        fs.flush(fh, None).await.expect("commit");
        fs.release(fh).await;

        let root = resolve(&fs, "data").await.expect("backend root");
        assert_eq!(
            fs.setattr(root.ino, set(Some(0o40700), None))
                .await
                .expect_err("no row for the backend's root")
                .errno(),
            libc::EPERM
        );
    }
    let fs = f.mount(false).await;
    let owner = |path: &'static str| {
        let fs = &fs;
        async move { owner_of(&resolve(fs, path).await.expect(path)) }
    };
    assert_eq!(owner("data/train/3.bin").await, (0o600, 42, 0));
    assert_eq!(
        owner("data/train/sub").await,
        (0o711, 5, 6),
        "its row's owner kept"
    );
    assert_eq!(owner("data/train/copied.bin").await, (0o640, 7, 0));
    assert_eq!(owner("data/train/4.bin").await, (0o644, 0, 0), "untouched");
    let read_only = resolve(&fs, "data/train/4.bin").await.expect("4.bin");
    assert_eq!(
        fs.setattr(read_only.ino, set(Some(0o100600), None))
            .await
            .expect_err("a read-only mount")
            .errno(),
        libc::EROFS
    );
}
