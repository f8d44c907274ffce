//! `Fs` tested without FUSE, over a local-directory store.

use super::*;
use crate::store::FileStore;

struct Fixture {
    _dir: tempfile::TempDir,
    fs: Fs,
}

fn fixture(files: &[(&str, &[u8])]) -> Fixture {
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
            readonly: true,
            uid: 1000,
            gid: 1000,
            dir_perm: 0o555,
            file_perm: 0o444,
            page_size: Some(2),
        },
    ));
    let options = FsOptions {
        uid: 0,
        gid: 0,
        dir_perm: 0o555,
        ttl: Duration::from_secs(60),
    };
    Fixture {
        _dir: dir,
        fs: Fs::new(options, Engines::uncached(), vec![backend]),
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
    fs.readdir(fh, 0, plus, |_, name, _| {
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
    let (fh, _) = f.fs.open(attr.ino, false).await.expect("open");
    let chunk = f.fs.read(fh, 4096, 4096).await.expect("read");
    assert_eq!(&chunk[..], &body[4096..8192]);
    let tail = f.fs.read(fh, 9_000, 4096).await.expect("read tail");
    assert_eq!(&tail[..], &body[9_000..]);
    let past = f.fs.read(fh, 20_000, 10).await.expect("read past end");
    assert!(past.is_empty());
    f.fs.release(fh);
    assert!(matches!(
        f.fs.read(fh, 0, 1).await,
        Err(FsError::BadHandle(_))
    ));
}

#[tokio::test]
async fn opening_for_write_on_a_readonly_backend_is_refused() {
    let f = fixture(&[("f", b"1")]);
    let attr = resolve(&f.fs, "data/f").await.expect("f");
    let err = f.fs.open(attr.ino, true).await.expect_err("must refuse");
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
    f.fs.readdir(fh, 0, true, |off, name, _| {
        first.push((off, name.to_string()));
        first.len() < 3
    })
    .expect("readdir");
    // The third entry did not fit: resume after the second.
    let resume = first[1].0;
    let mut rest = Vec::new();
    f.fs.readdir(fh, resume, true, |_, name, _| {
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
    f.fs.readdir(fh, 2, true, |_, _, attr| {
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
