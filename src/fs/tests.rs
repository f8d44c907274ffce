//! `Fs` tested without FUSE, over a local-directory store.

use super::*;
use crate::store::FileStore;

pub(super) struct Fixture {
    pub dir: tempfile::TempDir,
    _spill: tempfile::TempDir,
    pub fs: Fs,
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
    let backend = Arc::new(Backend::new(
        "data",
        BackendSettings {
            store,
            prefix: String::new(),
            readonly: !writable,
            flush_on_close: false,
            uid: 1000,
            gid: 1000,
            dir_perm: 0o555,
            file_perm: 0o444,
            page_size: Some(2),
            manifest: None,
        },
    ));
    let options = FsOptions {
        uid: 0,
        gid: 0,
        dir_perm: 0o555,
        ttl: Duration::from_secs(60),
    };
    let spill = tempfile::tempdir().expect("spill dir");
    let writes = crate::write::WriteConfig {
        multipart_threshold: threshold,
        commit_workers: 2,
        dirty_limit: 1 << 30,
        promote: false,
        spill_parent: Some(spill.path().to_path_buf()),
        journal_parent: None,
    };
    let engines = Engines::uncached(writes).expect("engines");
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
    let (fh, _) =
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
    let err =
        f.fs.open(
            attr.ino,
            OpenMode {
                write: true,
                truncate: false,
            },
        )
        .await
        .expect_err("must refuse");
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

// --- Writes -----------------------------------------------------------------------------------

const WRITE: OpenMode = OpenMode {
    write: true,
    truncate: false,
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
    f.fs.flush(fh).await.expect("flush");
    f.fs.release(fh).await;
    let again = resolve(&f.fs, "data/new.txt").await.expect("lookup");
    let (fh, _) =
        f.fs.open(again.ino, OpenMode::default())
            .await
            .expect("open");
    assert_eq!(&f.fs.read(fh, 0, 100).await.expect("read")[..], b"hello");
}

#[tokio::test]
async fn opening_with_truncate_and_rewriting_replaces_the_object() {
    let f = writable(&[("f", b"old contents")]);
    let attr = resolve(&f.fs, "data/f").await.expect("f");
    let mode = OpenMode {
        write: true,
        truncate: true,
    };
    let (fh, _) = f.fs.open(attr.ino, mode).await.expect("open");
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
    let (fh, _) = f.fs.open(attr.ino, WRITE).await.expect("open");
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
    let (fh, _) =
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
    let (fh, _) =
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
    f.fs.flush(fh).await.expect("flush");
    f.fs.release(fh).await;
    f.fs.rename(data.ino, "tmp", data.ino, "final", RenameFlags::default())
        .await
        .expect("rename");
    assert_eq!(stored(&f, "final").as_deref(), Some(&b"payload"[..]));
    assert!(stored(&f, "tmp").is_none());
}
