//! `Fs` tested without FUSE, over a local-directory store. One file of ~800 lines on purpose:
//! the tests share one fixture and read as one tour of the operations; the subtree and listing
//! races have their own files.

use std::os::unix::ffi::OsStrExt;
use std::sync::atomic::Ordering;

use bytes::Bytes;

use super::*;
use crate::store::FileStore;
use crate::store::testing::TestStore;

pub(super) struct Fixture {
    pub dir: tempfile::TempDir,
    _spill: tempfile::TempDir,
    pub fs: Fs,
}

impl Fixture {
    /// Stops this `Fs` (dropping its spill directory) and keeps the store's directory.
    pub(super) fn into_store_dir(self) -> tempfile::TempDir {
        self.dir
    }
}

fn fixture(files: &[(&str, &[u8])]) -> Fixture {
    fixture_with(files, false, 64 << 20)
}

/// A fixture over `files`, writable or not, committing by multipart from `threshold` bytes.
pub(super) fn fixture_with(files: &[(&str, &[u8])], writable: bool, threshold: u64) -> Fixture {
    let dir = tempfile::tempdir().expect("tempdir");
    for (key, body) in files {
        let path = dir.path().join(key);
        std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        std::fs::write(path, body).expect("write");
    }
    let store = Arc::new(FileStore::new(dir.path().to_path_buf()).expect("store"));
    fixture_over(dir, store, writable, false, threshold)
}

/// The engines of a test `Fs`: no cache, spill files under `spill`, commits by multipart from
/// `threshold` bytes.
/// What the kernel sends for `open(O_WRONLY | O_TRUNC)` of an existing file: the open, then a
/// setattr of size 0 that names no handle (see `FuseAdapter::init`).
pub(super) async fn open_truncating(fs: &Fs, ino: u64) -> Result<Opened> {
    let opened = fs.open(ino, WRITE).await?;
    let truncate = SetAttr {
        size: Some(0),
        ..SetAttr::default()
    };
    if let Err(e) = fs.setattr(ino, truncate).await {
        fs.release(opened.fh).await;
        return Err(e);
    }
    Ok(opened)
}

pub(super) fn test_engines(spill: &std::path::Path, threshold: u64) -> Engines {
    Engines::uncached(crate::write::WriteConfig {
        multipart_threshold: threshold,
        commit_workers: 2,
        dirty_limit: 1 << 30,
        buffer_limit: 256 << 20,
        promote: false,
        spill_parent: Some(spill.to_path_buf()),
        journal_parent: None,
    })
    .expect("engines")
}

/// A fixture whose backend `data` is `store`, over the objects in `dir`.
pub(super) fn fixture_over(
    dir: tempfile::TempDir,
    store: Arc<dyn ObjectStore>,
    writable: bool,
    flush_on_close: bool,
    threshold: u64,
) -> Fixture {
    let backend = Arc::new(Backend::new(
        "data",
        BackendSettings {
            store,
            prefix: String::new(),
            readonly: !writable,
            flush_on_close,
            posix_metadata: false,
            uid: 1000,
            gid: 1000,
            dir_perm: 0o555,
            file_perm: 0o444,
            page_size: Some(2),
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
    let engines = test_engines(spill.path(), threshold);
    Fixture {
        dir,
        _spill: spill,
        fs: Fs::new(options, engines, vec![backend]),
    }
}

async fn resolve(fs: &Fs, path: &str) -> Result<Attr> {
    let mut attr = fs.getattr(ROOT_INO).await?;
    for name in path.split('/').filter(|s| !s.is_empty()) {
        attr = fs.lookup(attr.ino, name).await?;
    }
    Ok(attr)
}

fn names(fs: &Fs, fh: u64, plus: bool) -> Vec<String> {
    let mut out = Vec::new();
    fs.readdir(fh, 0, plus, |_, name, _, _| {
        out.push(name.to_string());
        true
    })
    .expect("readdir");
    out
}

#[tokio::test]
async fn root_lists_backends_as_directories() {
    let f = fixture(&[("a.txt", b"1")]);
    let fh = f.fs.opendir(ROOT_INO).await.expect("opendir");
    assert_eq!(names(&f.fs, fh, false), [".", "..", "data"]);
    let attr = resolve(&f.fs, "data").await.expect("backend dir");
    assert_eq!(attr.kind, Kind::Dir);
    assert_eq!((attr.uid, attr.perm), (1000, 0o555));
}

#[tokio::test]
async fn nested_directories_are_inferred_from_keys() {
    let f = fixture(&[("x/y/z.bin", b"abc"), ("x/top", b"t"), ("x/a/b", b"")]);
    let x = resolve(&f.fs, "data/x").await.expect("x");
    assert_eq!(x.kind, Kind::Dir);
    let fh = f.fs.opendir(x.ino).await.expect("opendir");
    assert_eq!(names(&f.fs, fh, true), [".", "..", "a", "top", "y"]);
    let z = resolve(&f.fs, "data/x/y/z.bin").await.expect("z");
    assert_eq!((z.kind, z.size, z.perm), (Kind::File, 3, 0o444));
}

#[tokio::test]
async fn missing_names_are_not_found_and_files_are_not_directories() {
    let f = fixture(&[("f", b"1")]);
    assert!(matches!(
        resolve(&f.fs, "data/nope").await,
        Err(FsError::NotFound)
    ));
    assert!(matches!(
        resolve(&f.fs, "other").await,
        Err(FsError::NotFound)
    ));
    assert!(matches!(
        resolve(&f.fs, "data/f/g").await,
        Err(FsError::NotADirectory)
    ));
}

#[tokio::test]
async fn reads_return_the_object_bytes_at_any_offset() {
    let body: Vec<u8> = (0..10_000u32).map(|i| (i % 251) as u8).collect();
    let f = fixture(&[("big", &body)]);
    let attr = resolve(&f.fs, "data/big").await.expect("big");
    let Opened { fh, .. } =
        f.fs.open(attr.ino, OpenMode::default())
            .await
            .expect("open");
    let chunk = f.fs.read(fh, 4096, 4096).await.expect("read");
    assert_eq!(&chunk[..], &body[4096..8192]);
    let tail = f.fs.read(fh, 9_000, 4096).await.expect("read tail");
    assert_eq!(&tail[..], &body[9_000..]);
    let past = f.fs.read(fh, 20_000, 10).await.expect("read past end");
    assert!(past.is_empty());
    f.fs.release(fh).await;
    assert!(matches!(
        f.fs.read(fh, 0, 1).await,
        Err(FsError::BadHandle(_))
    ));
}

#[tokio::test]
async fn opening_for_write_on_a_readonly_backend_is_refused() {
    let f = fixture(&[("f", b"1")]);
    let attr = resolve(&f.fs, "data/f").await.expect("f");
    let err = f.fs.open(attr.ino, WRITE).await.expect_err("must refuse");
    assert_eq!(err.errno(), libc::EROFS);
}

#[tokio::test]
async fn listing_pages_are_all_read() {
    let files: Vec<(String, Vec<u8>)> =
        (0..7).map(|i| (format!("d/f{i}"), vec![b'x'; i])).collect();
    let refs: Vec<(&str, &[u8])> = files
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_slice()))
        .collect();
    let f = fixture(&refs);
    let d = resolve(&f.fs, "data/d").await.expect("d");
    let fh = f.fs.opendir(d.ino).await.expect("opendir");
    assert_eq!(names(&f.fs, fh, false).len(), 2 + 7);
}

#[tokio::test]
async fn readdir_resumes_from_the_offset_the_kernel_passes_back() {
    let f = fixture(&[("a", b""), ("b", b""), ("c", b"")]);
    let root = resolve(&f.fs, "data").await.expect("data");
    let fh = f.fs.opendir(root.ino).await.expect("opendir");
    let mut first = Vec::new();
    f.fs.readdir(fh, 0, true, |off, name, _, _| {
        first.push((off, name.to_string()));
        first.len() < 3
    })
    .expect("readdir");
    // The third entry did not fit: resume after the second.
    let resume = first[1].0;
    let mut rest = Vec::new();
    f.fs.readdir(fh, resume, true, |_, name, _, _| {
        rest.push(name.to_string());
        true
    })
    .expect("readdir");
    assert_eq!(rest, ["a", "b", "c"]);
}

#[tokio::test]
async fn readdirplus_references_are_released_by_forget() {
    let f = fixture(&[("a", b"1")]);
    let root = resolve(&f.fs, "data").await.expect("data");
    let fh = f.fs.opendir(root.ino).await.expect("opendir");
    let mut inos = Vec::new();
    f.fs.readdir(fh, 2, true, |_, _, attr, _| {
        inos.push(attr.ino);
        true
    })
    .expect("readdir");
    let ino = inos[0];
    assert!(f.fs.getattr(ino).await.is_ok());
    f.fs.forget(ino, 1);
    assert!(matches!(
        f.fs.getattr(ino).await,
        Err(FsError::UnknownInode(_))
    ));
}

/// The children of directory `ino` by readdirplus: name, number, and how each was listed.
async fn list_plus(fs: &Fs, ino: u64) -> Vec<(String, u64, Listed)> {
    let fh = fs.opendir(ino).await.expect("opendir");
    let mut listed = Vec::new();
    fs.readdir(fh, 2, true, |_, name, attr, how| {
        listed.push((name.to_string(), attr.ino, how));
        true
    })
    .expect("readdir");
    fs.releasedir(fh);
    listed
}

/// Past twice `evictable_inode_limit` inodes, readdirplus lists a name that has no inode yet
/// without one: a listing longer than the evictor keeps up with cannot grow the table without
/// bound. Every name is still listed, a bare one is looked up as any, and a name that has an
/// inode keeps getting it.
#[tokio::test]
async fn readdirplus_past_the_inode_cap_lists_names_without_inodes() {
    let files: Vec<(String, Vec<u8>)> = (0..40).map(|i| (format!("f{i:02}"), vec![b'x'])).collect();
    let refs: Vec<(&str, &[u8])> = files
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_slice()))
        .collect();
    let mut f = fixture(&refs);
    f.fs.set_inode_limit(8);
    let root = resolve(&f.fs, "data").await.expect("data");
    let held_before = f.fs.inode_count();
    let listed = list_plus(&f.fs, root.ino).await;
    assert_eq!(listed.len(), 40, "every name is listed");
    let with_inode: Vec<_> = listed
        .iter()
        .filter(|(_, _, how)| matches!(how, Listed::Inode { .. }))
        .collect();
    assert_eq!(with_inode.len(), 16 - held_before, "inodes up to the cap");
    assert_eq!(f.fs.inode_count(), 16);
    let (bare, _, _) = listed
        .iter()
        .find(|(_, _, how)| *how == Listed::Bare)
        .expect("bare entries past the cap");
    let looked_up =
        f.fs.lookup(root.ino, bare)
            .await
            .expect("a bare name is looked up");
    assert_eq!(f.fs.inode_count(), 17, "a lookup always gives an inode");

    let again = list_plus(&f.fs, root.ino).await;
    for (name, ino, _) in &with_inode {
        let (_, listed_ino, how) = again.iter().find(|(n, _, _)| n == name).expect("listed");
        assert_eq!(
            (listed_ino, how),
            (ino, &Listed::Inode { cache: true }),
            "{name}"
        );
    }
    let (_, ino, how) = again.iter().find(|(n, _, _)| n == bare).expect("listed");
    assert_eq!((*ino, *how), (looked_up.ino, Listed::Inode { cache: true }));
    assert_eq!(f.fs.inode_count(), 17, "nothing new past the cap");
}

// --- Writes -----------------------------------------------------------------------------------

pub(super) const WRITE: OpenMode = OpenMode {
    write: true,
    direct: false,
};

fn writable(files: &[(&str, &[u8])]) -> Fixture {
    fixture_with(files, true, 64 << 20)
}

fn stored(f: &Fixture, key: &str) -> Option<Vec<u8>> {
    std::fs::read(f.dir.path().join(key)).ok()
}

/// Lists directory `path` by name through a fresh handle.
async fn ls(fs: &Fs, path: &str) -> Vec<String> {
    let attr = resolve(fs, path).await.expect("dir");
    let fh = fs.opendir(attr.ino).await.expect("opendir");
    let out = names(fs, fh, false);
    fs.releasedir(fh);
    out.into_iter().filter(|n| n != "." && n != "..").collect()
}

#[tokio::test]
async fn a_created_file_is_listed_readable_and_committed_at_fsync() {
    let f = writable(&[]);
    let data = resolve(&f.fs, "data").await.expect("data");
    let (attr, fh) = f.fs.create(data.ino, "new.txt").await.expect("create");
    assert_eq!(attr.size, 0);
    assert_eq!(f.fs.write(fh, 0, b"hello").await.expect("write"), 5);
    assert_eq!(
        ls(&f.fs, "data").await,
        vec!["new.txt"],
        "listed before any commit"
    );
    assert_eq!(
        resolve(&f.fs, "data/new.txt").await.expect("lookup").size,
        5
    );
    assert_eq!(&f.fs.read(fh, 0, 100).await.expect("read")[..], b"hello");
    f.fs.fsync(fh).await.expect("fsync");
    assert_eq!(stored(&f, "new.txt").as_deref(), Some(&b"hello"[..]));
    f.fs.flush(fh, None).await.expect("flush");
    f.fs.release(fh).await;
    let again = resolve(&f.fs, "data/new.txt").await.expect("lookup");
    let Opened { fh, .. } =
        f.fs.open(again.ino, OpenMode::default())
            .await
            .expect("open");
    assert_eq!(&f.fs.read(fh, 0, 100).await.expect("read")[..], b"hello");
}

#[tokio::test]
async fn opening_with_truncate_and_rewriting_replaces_the_object() {
    let f = writable(&[("f", b"old contents")]);
    let attr = resolve(&f.fs, "data/f").await.expect("f");
    let Opened { fh, .. } = open_truncating(&f.fs, attr.ino).await.expect("open");
    assert_eq!(f.fs.getattr(attr.ino).await.expect("attr").size, 0);
    f.fs.write(fh, 0, b"new").await.expect("write");
    f.fs.fsync(fh).await.expect("fsync");
    f.fs.release(fh).await;
    assert_eq!(stored(&f, "f").as_deref(), Some(&b"new"[..]));
}

#[tokio::test]
async fn a_write_into_the_middle_keeps_the_rest_of_the_object() {
    let f = writable(&[("f", b"0123456789")]);
    let attr = resolve(&f.fs, "data/f").await.expect("f");
    let Opened { fh, .. } = f.fs.open(attr.ino, WRITE).await.expect("open");
    f.fs.write(fh, 3, b"abc").await.expect("write");
    assert_eq!(
        &f.fs.read(fh, 0, 100).await.expect("read")[..],
        b"012abc6789"
    );
    f.fs.fsync(fh).await.expect("fsync");
    assert_eq!(stored(&f, "f").as_deref(), Some(&b"012abc6789"[..]));
}

#[tokio::test]
async fn truncate_by_path_shrinks_and_grows_with_zeros() {
    let f = writable(&[("f", b"0123456789")]);
    let attr = resolve(&f.fs, "data/f").await.expect("f");
    let shrink = SetAttr {
        size: Some(4),
        ..SetAttr::default()
    };
    assert_eq!(
        f.fs.setattr(attr.ino, shrink).await.expect("shrink").size,
        4
    );
    let grow = SetAttr {
        size: Some(6),
        ..SetAttr::default()
    };
    assert_eq!(f.fs.setattr(attr.ino, grow).await.expect("grow").size, 6);
    let Opened { fh, .. } =
        f.fs.open(attr.ino, OpenMode::default())
            .await
            .expect("open");
    assert_eq!(&f.fs.read(fh, 0, 100).await.expect("read")[..], b"0123\0\0");
    f.fs.fsync(fh).await.expect("fsync");
    assert_eq!(stored(&f, "f").as_deref(), Some(&b"0123\0\0"[..]));
}

#[tokio::test]
async fn directories_are_made_as_markers_and_removed_only_when_empty() {
    let f = writable(&[]);
    let data = resolve(&f.fs, "data").await.expect("data");
    let dir = f.fs.mkdir(data.ino, "d").await.expect("mkdir");
    assert_eq!(dir.kind, Kind::Dir);
    assert!(
        f.dir.path().join("d").is_dir(),
        "the marker exists in the store"
    );
    assert!(matches!(
        f.fs.mkdir(data.ino, "d").await,
        Err(FsError::Exists)
    ));
    let (_, fh) = f.fs.create(dir.ino, "x").await.expect("create in d");
    assert_eq!(
        f.fs.rmdir(data.ino, "d")
            .await
            .expect_err("not empty")
            .errno(),
        libc::ENOTEMPTY
    );
    f.fs.fsync(fh).await.expect("fsync");
    f.fs.release(fh).await;
    f.fs.unlink(dir.ino, "x").await.expect("unlink");
    f.fs.rmdir(data.ino, "d").await.expect("rmdir");
    assert!(!f.dir.path().join("d").exists());
    assert!(ls(&f.fs, "data").await.is_empty());
}

#[tokio::test]
async fn an_unlinked_open_file_stays_readable_until_its_last_close() {
    let f = writable(&[("f", b"still here")]);
    let data = resolve(&f.fs, "data").await.expect("data");
    let attr = resolve(&f.fs, "data/f").await.expect("f");
    let Opened { fh, .. } =
        f.fs.open(attr.ino, OpenMode::default())
            .await
            .expect("open");
    f.fs.unlink(data.ino, "f").await.expect("unlink");
    assert!(matches!(
        resolve(&f.fs, "data/f").await,
        Err(FsError::NotFound)
    ));
    assert!(ls(&f.fs, "data").await.is_empty(), "hidden from listings");
    assert_eq!(
        &f.fs.read(fh, 0, 100).await.expect("read")[..],
        b"still here"
    );
    f.fs.release(fh).await;
    assert!(stored(&f, "f").is_none(), "deleted at the last close");
}

/// Found by the reference model: the reader read the object as it was when opened, past the
/// new end too.
#[tokio::test]
async fn a_reader_opened_before_a_rewrite_reads_the_rewritten_bytes() {
    let f = writable(&[("f", &[7u8; 5000])]);
    let attr = resolve(&f.fs, "data/f").await.expect("f");
    let Opened { fh: reader, .. } =
        f.fs.open(attr.ino, OpenMode::default())
            .await
            .expect("open for reading");
    let writer = open_truncating(&f.fs, attr.ino)
        .await
        .expect("open O_TRUNC");
    f.fs.write(writer.fh, 0, b"short").await.expect("write");
    f.fs.flush(writer.fh, None).await.expect("flush");
    f.fs.release(writer.fh).await;
    assert_eq!(
        &f.fs.read(reader, 0, 100).await.expect("read")[..],
        b"short"
    );
    assert!(
        f.fs.read(reader, 4000, 100)
            .await
            .expect("read past the end")
            .is_empty(),
        "nothing of the old bytes past the new end"
    );
    let failed = f.fs.engines.writes.drain().await;
    assert!(failed.is_empty(), "{failed:?}");
    assert_eq!(
        &f.fs.read(reader, 0, 100).await.expect("read")[..],
        b"short"
    );
    f.fs.release(reader).await;
    assert_eq!(stored(&f, "f").as_deref(), Some(&b"short"[..]));
}

/// The rename used to delete the old key at once: every read the descriptor had not cached
/// then failed.
#[tokio::test]
async fn a_file_renamed_while_open_for_reading_reads_whole_until_closed() {
    let body: Vec<u8> = (0..9000u32).map(|i| (i % 251) as u8).collect();
    let f = writable(&[("a", &body)]);
    let data = resolve(&f.fs, "data").await.expect("data");
    let attr = resolve(&f.fs, "data/a").await.expect("a");
    let Opened { fh, .. } =
        f.fs.open(attr.ino, OpenMode::default())
            .await
            .expect("open");
    f.fs.rename(data.ino, "a", data.ino, "b", RenameFlags::default())
        .await
        .expect("rename");
    assert_eq!(ls(&f.fs, "data").await, ["b"], "the old name is gone");
    assert_eq!(&f.fs.read(fh, 0, 9000).await.expect("read")[..], &body[..]);
    assert_eq!(stored(&f, "b").as_deref(), Some(&body[..]));
    f.fs.release(fh).await;
    assert!(stored(&f, "a").is_none(), "deleted at the last close");
}

#[tokio::test]
async fn renames_move_files_and_empty_directories_and_refuse_the_rest() {
    let f = writable(&[("a", b"A"), ("full/x", b"X")]);
    let data = resolve(&f.fs, "data").await.expect("data");
    f.fs.rename(data.ino, "a", data.ino, "b", RenameFlags::default())
        .await
        .expect("rename file");
    assert!(stored(&f, "a").is_none());
    assert_eq!(stored(&f, "b").as_deref(), Some(&b"A"[..]));
    assert_eq!(
        f.fs.rename(data.ino, "full", data.ino, "moved", RenameFlags::default())
            .await
            .expect_err("non-empty directory")
            .errno(),
        libc::EXDEV
    );
    f.fs.mkdir(data.ino, "empty").await.expect("mkdir");
    f.fs.rename(
        data.ino,
        "empty",
        data.ino,
        "renamed",
        RenameFlags::default(),
    )
    .await
    .expect("rename empty dir");
    let mut names = ls(&f.fs, "data").await;
    names.sort();
    assert_eq!(names, vec!["b", "full", "renamed"]);
    let no_replace = RenameFlags {
        no_replace: true,
        exchange: false,
    };
    assert_eq!(
        f.fs.rename(data.ino, "b", data.ino, "full", no_replace)
            .await
            .expect_err("exists")
            .errno(),
        libc::EEXIST
    );
}

#[tokio::test]
async fn a_file_written_but_not_yet_committed_is_committed_before_a_rename() {
    let f = writable(&[]);
    let data = resolve(&f.fs, "data").await.expect("data");
    let (_, fh) = f.fs.create(data.ino, "tmp").await.expect("create");
    f.fs.write(fh, 0, b"payload").await.expect("write");
    f.fs.flush(fh, None).await.expect("flush");
    f.fs.release(fh).await;
    f.fs.rename(data.ino, "tmp", data.ino, "final", RenameFlags::default())
        .await
        .expect("rename");
    assert_eq!(stored(&f, "final").as_deref(), Some(&b"payload"[..]));
    assert!(stored(&f, "tmp").is_none());
}

// --- Large live directories, read a page at a time ---------------------------------------------

/// An `Fs` over a RAM store holding `keys` (in one backend "data", LIST pages of `page` keys),
/// listing whole only directories of at most `whole` entries.
async fn ram_fixture(keys: &[String], page: u32, whole: usize) -> (Fs, tempfile::TempDir) {
    let store = Arc::new(crate::store::RamStore::new(
        "ram",
        crate::config::RamConfig {
            max_list_page_size: 1000,
            max_total_objects: 1 << 20,
            max_total_object_space: 1 << 30,
        },
    ));
    for key in keys {
        store.put(key, Bytes::from(key.clone())).await.expect("put");
    }
    let backend = Arc::new(Backend::new(
        "data",
        BackendSettings {
            store,
            prefix: String::new(),
            readonly: true,
            flush_on_close: false,
            posix_metadata: false,
            uid: 0,
            gid: 0,
            dir_perm: 0o555,
            file_perm: 0o444,
            page_size: Some(page),
            max_key_bytes: crate::store::MAX_KEY_LEN,
            manifest: None,
        },
    ));
    let spill = tempfile::tempdir().expect("spill dir");
    let options = FsOptions {
        uid: 0,
        gid: 0,
        dir_perm: 0o555,
        ttl: Duration::from_secs(60),
        inode_limit: crate::memory::InodeLimit::fixed(usize::MAX),
    };
    let engines = test_engines(spill.path(), 64 << 20);
    let fs = Fs::new(options, engines, vec![backend]).with_whole_listing_max(whole);
    (fs, spill)
}

/// Reads a whole directory as the kernel does: `readdir_prepare` when not ready, replies that
/// take only part of what they are offered, resumed at the offset of the last entry taken.
async fn walk(fs: &Fs, fh: u64, per_reply: usize) -> Vec<(String, Kind)> {
    let mut out = Vec::new();
    let mut offset = 0;
    loop {
        if !fs.readdir_ready(fh, offset) {
            fs.readdir_prepare(fh, offset).await.expect("prepare");
        }
        let mut reply = Vec::new();
        fs.readdir(fh, offset, false, |next, name, attr, _| {
            if reply.len() == per_reply {
                return false;
            }
            reply.push((next, name.to_string(), attr.kind));
            true
        })
        .expect("readdir");
        let Some((last, _, _)) = reply.last() else {
            return out;
        };
        offset = *last;
        out.extend(reply.into_iter().map(|(_, name, kind)| (name, kind)));
    }
}

#[tokio::test]
async fn a_directory_too_large_to_list_whole_is_read_a_page_at_a_time() {
    // "a" is both a file and a directory ("a/x"); "a.txt" lies between them in key order.
    let mut keys: Vec<String> = vec!["big/a".into(), "big/a.txt".into(), "big/a/x".into()];
    keys.extend((0..500).map(|i| format!("big/f{i:04}")));
    keys.push("big/sub/deep/y".into());
    let (fs, _spill) = ram_fixture(&keys, 7, 50).await;
    let big = resolve(&fs, "data/big").await.expect("big");
    let fh = fs.opendir(big.ino).await.expect("opendir");
    assert!(
        !fs.readdir_ready(fh, 2),
        "the entries come from the store as readdir asks"
    );

    let entries = walk(&fs, fh, 13).await;
    let names: Vec<&str> = entries.iter().map(|(n, _)| n.as_str()).collect();
    let mut expected: Vec<String> = vec![".".into(), "..".into(), "a.txt".into(), "a".into()];
    expected.extend((0..500).map(|i| format!("f{i:04}")));
    expected.push("sub".into());
    assert_eq!(
        names, expected,
        "each name once, a directory winning over a file"
    );
    let kind_of = |name: &str| entries.iter().find(|(n, _)| n == name).map(|(_, k)| *k);
    assert_eq!(kind_of("a"), Some(Kind::Dir));
    assert_eq!(kind_of("a.txt"), Some(Kind::File));
    assert_eq!(kind_of("sub"), Some(Kind::Dir));

    let handle = lock(&fs.dirs).get(&fh).cloned().expect("handle");
    let DirEntries::Live(pages) = &handle.entries else {
        panic!("a large directory is read a page at a time");
    };
    let pages = Arc::clone(pages);
    let read = pages.pages_read();
    assert!(read <= 505 / 7 + 2, "each page read once: {read} pages");
    assert!(
        pages.window_len() <= 1024 + 7 * 2,
        "memory stays at a window: {} entries held",
        pages.window_len()
    );
    // rewinddir: listed again from the start, same answer.
    assert_eq!(walk(&fs, fh, 500).await, entries);
    fs.releasedir(fh);
}

#[tokio::test]
async fn a_small_directory_is_still_listed_whole() {
    let keys: Vec<String> = (0..20).map(|i| format!("small/f{i}")).collect();
    let (fs, _spill) = ram_fixture(&keys, 7, 50).await;
    let small = resolve(&fs, "data/small").await.expect("small");
    let fh = fs.opendir(small.ino).await.expect("opendir");
    assert!(fs.readdir_ready(fh, 2));
    assert_eq!(walk(&fs, fh, 5).await.len(), 2 + 20);
}

/// The record of names this mount removed is not the negative-lookup cache: filling that cache
/// past its bound (which evicts, and once cleared it all) must not bring a removed name back into
/// a listing taken before the removal.
#[tokio::test]
async fn a_full_negative_cache_never_brings_a_removed_name_back_into_an_open_listing() {
    let f = writable(&[("gone", b"x"), ("kept", b"y")]);
    let data = resolve(&f.fs, "data").await.expect("data");
    let fh = f.fs.opendir(data.ino).await.expect("opendir");
    f.fs.unlink(data.ino, "gone").await.expect("unlink");
    for i in 0..NEGATIVE_CACHE_LIMIT + 10 {
        f.fs.remember_missing(data.ino, &format!("miss{i}"));
    }
    assert!(
        lock(&f.fs.negative).len() <= NEGATIVE_CACHE_LIMIT,
        "the cache stays bounded"
    );
    let listed = names(&f.fs, fh, false);
    assert!(listed.contains(&"kept".to_string()), "{listed:?}");
    assert!(!listed.contains(&"gone".to_string()), "{listed:?}");
    f.fs.releasedir(fh);
}

#[tokio::test]
async fn a_new_file_unlinked_while_open_reads_back_what_is_written_after() {
    let f = writable(&[]);
    let data = resolve(&f.fs, "data").await.expect("data");
    let (created, fh) = f.fs.create(data.ino, "scratch").await.expect("create");
    let ino = created.ino;
    f.fs.unlink(data.ino, "scratch").await.expect("unlink");
    f.fs.write(fh, 0, b"after the unlink").await.expect("write");
    // The kernel asks for its size before reading: not the store, which never had it.
    let attr =
        f.fs.getattr(ino)
            .await
            .expect("getattr of an unlinked open file");
    assert_eq!(attr.size, 16);
    assert_eq!(attr.nlink, 0, "no name links to it any more");
    assert_eq!(
        &f.fs.read(fh, 0, 100).await.expect("read")[..],
        b"after the unlink"
    );
    f.fs.release(fh).await;
    assert!(stored(&f, "scratch").is_none());
}

/// A file still open for writing cannot be renamed (EBUSY), but one whose last close the kernel
/// is still delivering (RELEASE follows close(2) on its own) is waited for, not refused.
#[tokio::test]
async fn a_rename_waits_for_a_closing_writer_and_refuses_an_open_one() {
    let f = writable(&[]);
    let data = resolve(&f.fs, "data").await.expect("data");
    let (_, open) = f.fs.create(data.ino, "open").await.expect("create");
    f.fs.write(open, 0, b"still writing").await.expect("write");
    let refused =
        f.fs.rename(data.ino, "open", data.ino, "moved", RenameFlags::default())
            .await;
    assert!(matches!(refused, Err(FsError::Busy(_))), "{refused:?}");

    let (_, closing) = f.fs.create(data.ino, "closing").await.expect("create");
    f.fs.write(closing, 0, b"done").await.expect("write");
    f.fs.flush(closing, None).await.expect("flush");
    let fs = &f.fs;
    let (renamed, ()) = tokio::join!(
        fs.rename(
            data.ino,
            "closing",
            data.ino,
            "closed",
            RenameFlags::default()
        ),
        async {
            tokio::time::sleep(Duration::from_millis(50)).await;
            fs.release(closing).await;
        }
    );
    renamed.expect("the rename waited for the release");
    assert_eq!(stored(&f, "closed").as_deref(), Some(&b"done"[..]));
    f.fs.release(open).await;
}

/// mknod makes an empty file and closes it at once: no handle is left open, it is found by
/// name, and it is committed as a new file closed unwritten is.
#[tokio::test]
async fn mknod_makes_an_empty_file_and_leaves_no_handle_open() {
    let f = writable(&[]);
    let data = resolve(&f.fs, "data").await.expect("data");
    let attr = f.fs.mknod(data.ino, "node").await.expect("mknod");
    assert_eq!((attr.kind, attr.size, attr.nlink), (Kind::File, 0, 1));
    assert_eq!(f.fs.open_handles_in("data"), 0, "closed as it was made");
    let found = resolve(&f.fs, "data/node").await.expect("lookup");
    assert_eq!((found.ino, found.size), (attr.ino, 0));
    assert_eq!(ls(&f.fs, "data").await, vec!["node"]);
    let failed = f.fs.engines.writes.drain().await;
    assert!(failed.is_empty(), "{failed:?}");
    assert_eq!(stored(&f, "node").as_deref(), Some(&b""[..]));
}

/// mknod refuses what create refuses, before anything is opened.
#[tokio::test]
async fn mknod_refuses_what_create_refuses() {
    let readonly = fixture(&[]);
    let data = resolve(&readonly.fs, "data").await.expect("data");
    let refused = readonly.fs.mknod(data.ino, "node").await;
    assert!(
        matches!(refused, Err(FsError::ReadOnly { .. })),
        "{refused:?}"
    );
    let f = writable(&[]);
    let data = resolve(&f.fs, "data").await.expect("data");
    let long = "n".repeat(300);
    for (name, errno) in [("..", libc::EINVAL), (long.as_str(), libc::ENAMETOOLONG)] {
        let refused = f.fs.mknod(data.ino, name).await.map(|_| ());
        assert_eq!(refused.map_err(|e| e.errno()), Err(errno), "{name}");
    }
    let refused = f.fs.mknod(ROOT_INO, "node").await;
    assert!(
        matches!(refused, Err(FsError::ReadOnly { .. })),
        "{refused:?}"
    );
    assert_eq!(f.fs.open_handles_in("data"), 0);
}

/// With flush_on_close the empty object is in the store when mknod returns; a commit the
/// store refuses fails the mknod, and the file is released all the same.
#[tokio::test]
async fn mknod_with_flush_on_close_commits_before_it_returns_and_releases_on_failure() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = TestStore::new(dir.path(), "flushing");
    let f = fixture_over(dir, store.clone(), true, true, 64 << 20);
    let data = resolve(&f.fs, "data").await.expect("data");
    f.fs.mknod(data.ino, "node").await.expect("mknod");
    assert_eq!(stored(&f, "node").as_deref(), Some(&b""[..]));

    store.deny_writes.store(true, Ordering::SeqCst);
    let failed = f.fs.mknod(data.ino, "denied").await;
    assert_eq!(
        failed.map(|_| ()).map_err(|e| e.errno()),
        Err(libc::EACCES),
        "the store's refusal is the mknod's"
    );
    assert_eq!(f.fs.open_handles_in("data"), 0, "released all the same");
    assert!(stored(&f, "denied").is_none());
}

#[tokio::test]
async fn statfs_reports_a_large_constant_capacity_all_free() {
    let f = fixture(&[]);
    let s = f.fs.statfs();
    assert_eq!((s.bsize, s.frsize), (BLOCK_SIZE, BLOCK_SIZE));
    assert_eq!(s.namelen, 255);
    assert_eq!((s.blocks, s.bfree, s.bavail), (1 << 40, 1 << 40, 1 << 40));
    assert_eq!((s.files, s.ffree), (1 << 32, 1 << 32));
}

/// One rule for a name that is not UTF-8: absent where it would have to exist (ENOENT),
/// invalid where it would be made (EINVAL).
#[test]
fn a_name_that_is_not_utf8_is_absent_or_invalid_by_its_use() {
    let bad = std::ffi::OsStr::from_bytes(b"caf\xe9.txt");
    let errno = |purpose| request_name(bad, purpose).map_err(|e| e.errno());
    assert_eq!(errno(NameUse::Existing), Err(libc::ENOENT));
    assert_eq!(errno(NameUse::New), Err(libc::EINVAL));
    let good = std::ffi::OsStr::new("café.txt");
    for purpose in [NameUse::Existing, NameUse::New] {
        assert_eq!(request_name(good, purpose).expect("utf-8"), "café.txt");
    }
}

/// Store and msfs failures are told apart from expected answers by the errno they give, and
/// every errno msfs answers with has a name for logs and metrics.
#[test]
fn failures_are_told_from_expected_answers_and_every_errno_is_named() {
    let store = |source| FsError::Store {
        backend: "data".into(),
        source,
    };
    let expected = [
        FsError::NotFound,
        FsError::Exists,
        FsError::NotEmpty,
        FsError::ReadOnly {
            backend: "data".into(),
        },
        FsError::Invalid("name"),
        FsError::CrossDevice("a non-empty directory"),
        FsError::Busy("open for writing"),
        store(crate::store::StoreError::AccessDenied {
            op: "put",
            key: "k".into(),
            code: "AccessDenied".into(),
        }),
        store(crate::store::StoreError::NotFound {
            op: "get",
            key: "k".into(),
        }),
    ];
    for e in &expected {
        assert!(!e.is_failure(), "{e}");
        assert_ne!(errno_name(e.errno()), "other", "{e}");
    }
    let failures = [
        FsError::UnknownInode(7),
        FsError::BadHandle(7),
        store(crate::store::StoreError::Unreachable {
            op: "get",
            key: "k".into(),
            endpoint: "http://store".into(),
            message: "refused".into(),
        }),
        store(crate::store::StoreError::Changed {
            op: "get",
            key: "k".into(),
            expected: "e".into(),
        }),
    ];
    for e in &failures {
        assert!(e.is_failure(), "{e}");
        assert_ne!(errno_name(e.errno()), "other", "{e}");
    }
    assert_eq!(errno_name(libc::ENOENT), "ENOENT");
    assert_eq!(errno_name(libc::EIO), "EIO");
    assert_eq!(errno_name(libc::EPERM), "EPERM");
    assert_eq!(errno_name(libc::ENOSYS), "ENOSYS");
}

#[tokio::test]
async fn a_backends_max_key_bytes_bounds_the_keys_its_names_make() {
    let f = writable(&[]);
    let backend = f.fs.backends().remove(0);
    // The backend as a config with `max_key_bytes: 12` makes it, over the fixture's store.
    let text = "msfs_version: 1\nbackends:\n  - {dir_name: data, backend_type: RAM, readonly: false, max_key_bytes: 12}\n";
    let loaded =
        crate::config::parse_str(text, std::path::Path::new("c.yaml"), &|_| None).expect("config");
    let store = backend.settings().store.clone();
    backend.replace(BackendSettings::new(
        &loaded.config.backends[0],
        store,
        None,
    ));
    let data = resolve(&f.fs, "data").await.expect("data").ino;
    let (_, fh) =
        f.fs.create(data, &"a".repeat(12))
            .await
            .expect("a 12-byte key");
    f.fs.release(fh).await;
    assert!(matches!(
        f.fs.create(data, &"b".repeat(13)).await,
        Err(FsError::NameTooLong)
    ));
    assert!(matches!(
        f.fs.lookup(data, &"c".repeat(13)).await,
        Err(FsError::NameTooLong)
    ));
    // A directory's key is its marker, `name/`.
    f.fs.mkdir(data, &"d".repeat(11))
        .await
        .expect("a 12-byte marker");
    assert!(matches!(
        f.fs.mkdir(data, &"e".repeat(12)).await,
        Err(FsError::NameTooLong)
    ));
    let made =
        f.fs.lookup(data, &"a".repeat(12))
            .await
            .expect("the 12-byte name");
    assert_eq!(made.kind, Kind::File);
}

/// A name whose presence or absence is known is answered on the caller's thread (`lookup_now`),
/// exactly when `lookup` would answer without asking the store, and with what `lookup` answers;
/// anything else is left to `lookup`, with nothing taken.
#[tokio::test]
async fn a_known_name_is_answered_without_waiting() {
    let f = writable(&[("d/here", b"1")]);
    let data = resolve(&f.fs, "data").await.expect("data");
    let now = |dir: u64, name: &str| f.fs.lookup_now(dir, name);
    let missing = |dir: u64, name: &str| matches!(now(dir, name), Some(Err(FsError::NotFound)));

    // Nothing known of the name yet: only the store can say.
    assert!(now(data.ino, "never-seen").is_none());
    assert!(matches!(
        f.fs.lookup(data.ino, "never-seen").await,
        Err(FsError::NotFound)
    ));
    assert!(missing(data.ino, "never-seen"), "just found missing");

    // A fresh listing says what is there and what is not.
    assert!(now(data.ino, "d").is_none(), "not listed yet");
    assert_eq!(ls(&f.fs, "data/d").await, ["here"]);
    let d = resolve(&f.fs, "data/d").await.expect("d");
    let here = now(d.ino, "here").expect("listed").expect("here");
    let looked_up = f.fs.lookup(d.ino, "here").await.expect("here");
    assert_eq!(
        (here.ino, here.size, here.kind),
        (looked_up.ino, 1, Kind::File)
    );
    assert!(missing(d.ino, "absent"));

    // A file being written is there, listed or not.
    let (created, fh) = f.fs.create_as(d.ino, "new", None).await.expect("create");
    let new = now(d.ino, "new").expect("being written").expect("new");
    assert_eq!(new.ino, created.ino);
    f.fs.release(fh).await;

    assert!(matches!(
        now(d.ino, &"n".repeat(300)),
        Some(Err(FsError::NameTooLong))
    ));
    assert!(
        now(u64::MAX, "x").is_none(),
        "an unknown directory: lookup says"
    );
    let backend = now(ROOT_INO, "data").expect("the root's names are the backends");
    assert_eq!(backend.expect("data").ino, data.ino);
    assert!(missing(ROOT_INO, "nothing"));
}

/// A read-only open of a file whose metadata is fresh is answered on the caller's thread
/// (`open_now`), and so is every release but the one that deletes an object unlinked while
/// open (`release_now` hands that deletion back); anything that needs the store is left to
/// `open`.
#[tokio::test]
async fn a_read_only_open_of_fresh_metadata_and_its_release_need_no_waiting() {
    let f = writable(&[("f", b"from memory"), ("g", b"doomed")]);
    let data = resolve(&f.fs, "data").await.expect("data");
    let file = resolve(&f.fs, "data/f").await.expect("f");

    assert!(
        f.fs.open_now(file.ino, WRITE).is_none(),
        "a writer asks the store"
    );
    let opened = f.fs.open_now(file.ino, OpenMode::default());
    let fh = opened.expect("fresh").expect("open").fh;
    assert_eq!(
        &f.fs.read(fh, 0, 100).await.expect("read")[..],
        b"from memory"
    );
    assert!(f.fs.release_now(fh).is_none(), "nothing to delete");
    assert!(matches!(
        f.fs.read(fh, 0, 1).await,
        Err(FsError::BadHandle(_))
    ));

    assert!(matches!(
        f.fs.open_now(data.ino, OpenMode::default()),
        Some(Err(FsError::IsADirectory))
    ));
    assert!(matches!(
        f.fs.open_now(u64::MAX, OpenMode::default()),
        Some(Err(FsError::UnknownInode(_)))
    ));

    // Metadata older than the TTL: only the store can say which version an open reads.
    if let Some(node) = lock(&f.fs.inodes).get_mut(file.ino) {
        node.refreshed = Instant::now()
            .checked_sub(Duration::from_secs(120))
            .expect("uptime");
    }
    assert!(f.fs.open_now(file.ino, OpenMode::default()).is_none());
    let fh = (f.fs.open(file.ino, OpenMode::default()).await)
        .expect("open")
        .fh;
    assert!(f.fs.release_now(fh).is_none());

    // Unlinked while open: the last release hands the deletion back, and until it runs the
    // object is still stored.
    let doomed_file = resolve(&f.fs, "data/g").await.expect("g");
    let fh = (f.fs.open_now(doomed_file.ino, OpenMode::default()))
        .expect("fresh")
        .expect("open")
        .fh;
    f.fs.unlink(data.ino, "g").await.expect("unlink");
    let doomed =
        f.fs.release_now(fh)
            .expect("the last handle of an unlinked object");
    assert_eq!(stored(&f, "g").as_deref(), Some(&b"doomed"[..]));
    f.fs.delete_unlinked(doomed).await;
    assert!(stored(&f, "g").is_none(), "deleted");
}

/// A create of a new name is answered on the caller's thread (`create_now`); one over a file
/// still being written there is left to `create_as`, which waits out its commit and replaces it.
#[tokio::test]
async fn a_create_of_a_new_name_needs_no_waiting() {
    let f = writable(&[]);
    let data = resolve(&f.fs, "data").await.expect("data");

    let (attr, fh) = (f.fs.create_now(data.ino, "new", None))
        .expect("a new name")
        .expect("create");
    assert_eq!(attr.size, 0);
    f.fs.write(fh, 0, b"first").await.expect("write");
    assert!(
        f.fs.create_now(data.ino, "new", None).is_none(),
        "being written: create_as replaces it"
    );
    let (_, again) = f.fs.create_as(data.ino, "new", None).await.expect("create");
    f.fs.release(fh).await;
    f.fs.write(again, 0, b"second").await.expect("write");
    f.fs.fsync(again).await.expect("fsync");
    f.fs.release(again).await;
    assert_eq!(
        stored(&f, "new").as_deref(),
        Some(&b"second"[..]),
        "the second create's content, never the first's"
    );

    assert!(matches!(
        f.fs.create_now(data.ino, &"n".repeat(300), None),
        Some(Err(FsError::NameTooLong))
    ));
    let read_only = fixture(&[]);
    let data = resolve(&read_only.fs, "data").await.expect("data");
    assert!(matches!(
        read_only.fs.create_now(data.ino, "x", None),
        Some(Err(FsError::ReadOnly { .. }))
    ));
}

/// A file's attributes are answered on the caller's thread (`getattr_now`) while its metadata is
/// younger than the TTL, the same as `getattr` says; older, they are left to `getattr`, which
/// asks the store; a file unlinked while open has no link either way.
#[tokio::test]
async fn a_files_fresh_attributes_are_answered_without_waiting() {
    let f = writable(&[("f", b"12345")]);
    let data = resolve(&f.fs, "data").await.expect("data");
    let file = resolve(&f.fs, "data/f").await.expect("f");
    let now = f.fs.getattr_now(file.ino).expect("fresh").expect("attr");
    assert_eq!(now, f.fs.getattr(file.ino).await.expect("getattr"));
    assert_eq!(now.size, 5);

    if let Some(node) = lock(&f.fs.inodes).get_mut(file.ino) {
        node.refreshed = Instant::now()
            .checked_sub(Duration::from_secs(120))
            .expect("uptime");
    }
    assert!(f.fs.getattr_now(file.ino).is_none(), "older than the TTL");
    std::fs::write(f.dir.path().join("f"), b"1234567").expect("replaced behind the mount");
    assert_eq!(f.fs.getattr(file.ino).await.expect("getattr").size, 7);
    assert_eq!(
        f.fs.getattr_now(file.ino)
            .expect("fresh again")
            .expect("attr")
            .size,
        7
    );

    let fh = (f.fs.open(file.ino, OpenMode::default()).await)
        .expect("open")
        .fh;
    f.fs.unlink(data.ino, "f").await.expect("unlink");
    let unlinked = f.fs.getattr_now(file.ino).expect("known").expect("attr");
    assert_eq!(unlinked.nlink, 0);
    assert_eq!(unlinked, f.fs.getattr(file.ino).await.expect("getattr"));
    f.fs.release(fh).await;
}

/// The backend directory of `f` (over object `g`), and `g` unlinked while open and its last
/// handle released: its deletion under way, not yet sent.
async fn g_unlinked_while_open_and_released(f: &Fixture) -> (Attr, crate::fs::Doomed) {
    let data = resolve(&f.fs, "data").await.expect("data");
    let old = resolve(&f.fs, "data/g").await.expect("g");
    let fh = (f.fs.open(old.ino, OpenMode::default()).await)
        .expect("open")
        .fh;
    f.fs.unlink(data.ino, "g").await.expect("unlink");
    let doomed = (f.fs.release_now(fh)).expect("the last handle of an unlinked object");
    (data, doomed)
}

/// A name taken again while the object unlinked there (open when it was unlinked) is being
/// deleted: the create waits for the deletion, so the new object lands after the DELETE of the
/// old one, never under it (a `close` reported the new file written; the late DELETE removed it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_create_over_an_unlinked_object_being_deleted_lands_after_the_deletion() {
    let f = writable(&[("g", b"old")]);
    let (data, doomed) = g_unlinked_while_open_and_released(&f).await;
    assert!(
        f.fs.create_now(data.ino, "g", None).is_none(),
        "the old object is being deleted: no create on the spot"
    );
    let create = f.fs.create_as(data.ino, "g", None);
    tokio::pin!(create);
    assert!(
        futures::poll!(&mut create).is_pending(),
        "the create waits for the deletion"
    );
    f.fs.delete_unlinked(doomed).await;
    assert!(stored(&f, "g").is_none(), "the old object is deleted");
    let (_, fh) = create.await.expect("the create, once the deletion is done");
    f.fs.write(fh, 0, b"new").await.expect("write");
    f.fs.fsync(fh).await.expect("fsync");
    f.fs.release(fh).await;
    assert_eq!(stored(&f, "g").as_deref(), Some(&b"new"[..]));

    // With no deletion under way, a create of an unlinked-while-open name takes it: the old
    // object is not deleted at its last release, which would delete the new one.
    let fh = (f.fs.open(
        resolve(&f.fs, "data/g").await.expect("g").ino,
        OpenMode::default(),
    ))
    .await
    .expect("open")
    .fh;
    f.fs.unlink(data.ino, "g").await.expect("unlink");
    let (_, created) = (f.fs.create_now(data.ino, "g", None))
        .expect("nothing being deleted")
        .expect("create");
    f.fs.write(created, 0, b"newer").await.expect("write");
    f.fs.fsync(created).await.expect("fsync");
    f.fs.release(created).await;
    assert!(
        f.fs.release_now(fh).is_none(),
        "the name was taken: nothing to delete"
    );
    assert_eq!(stored(&f, "g").as_deref(), Some(&b"newer"[..]));
}

/// A deletion of an unlinked-while-open object that never finishes (its task dropped) does not
/// keep the name from being created again.
#[tokio::test]
async fn a_deletion_given_up_frees_the_name() {
    let f = writable(&[("g", b"old")]);
    let (data, doomed) = g_unlinked_while_open_and_released(&f).await;
    assert!(f.fs.create_now(data.ino, "g", None).is_none());
    drop(doomed);
    let (_, fh) = (f.fs.create_now(data.ino, "g", None))
        .expect("the name is free")
        .expect("create");
    f.fs.write(fh, 0, b"new").await.expect("write");
    f.fs.fsync(fh).await.expect("fsync");
    f.fs.release(fh).await;
    assert_eq!(stored(&f, "g").as_deref(), Some(&b"new"[..]));
}
