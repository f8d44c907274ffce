//! The reference model: random sequences of file and namespace operations applied both to `Fs`
//! (over a local-directory store, writes committed in the background as after a close) and to a
//! plain in-memory tree of the semantics msfs promises. Every result — bytes, sizes, errno,
//! listings — must agree, and at the end the store must hold exactly the model. Background
//! commits race the operations, so a failure may not replay exactly; `MSFS_MODEL_TRACE=1`
//! prints each step.

use std::collections::BTreeMap;

use super::tests::{Fixture, WRITE, fixture_with, open_truncating};
use super::*;

#[derive(Debug, Clone, PartialEq)]
enum Entry {
    File(Vec<u8>),
    Dir,
}

/// The promised semantics, as simply as they can be written.
#[derive(Default)]
struct Model {
    /// Path inside the backend ("d0/f1") → entry.
    entries: BTreeMap<String, Entry>,
}

impl Model {
    /// What resolving `path`'s parent directory gives: 0, or the errno of the first ancestor
    /// that is missing (ENOENT) or a file (ENOTDIR), as a path walk finds it.
    fn parent_errno(&self, path: &str) -> i32 {
        let mut at = 0;
        while let Some(slash) = path[at..].find('/') {
            let ancestor = &path[..at + slash];
            match self.entries.get(ancestor) {
                Some(Entry::Dir) => {}
                Some(Entry::File(_)) => return libc::ENOTDIR,
                None => return libc::ENOENT,
            }
            at += slash + 1;
        }
        0
    }

    /// The errno for `path` not being in the model.
    fn missing(&self, path: &str) -> i32 {
        match self.parent_errno(path) {
            0 => libc::ENOENT,
            e => e,
        }
    }

    fn parent_exists(&self, path: &str) -> bool {
        self.parent_errno(path) == 0
    }

    fn children(&self, dir: &str) -> Vec<String> {
        let prefix = if dir.is_empty() {
            String::new()
        } else {
            format!("{dir}/")
        };
        self.entries
            .keys()
            .filter_map(|p| p.strip_prefix(&prefix))
            .filter(|rest| !rest.is_empty() && !rest.contains('/'))
            .map(str::to_string)
            .collect()
    }
}

/// xorshift64, reproducible from the seed (also the subtree tests').
pub(super) struct Rng(pub(super) u64);

impl Rng {
    pub(super) fn below(&mut self, bound: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % bound.max(1) as u64) as usize
    }

    fn pick<'a>(&mut self, from: &[&'a str]) -> &'a str {
        from[self.below(from.len())]
    }

    fn bytes(&mut self, max: usize) -> Vec<u8> {
        let len = self.below(max + 1);
        (0..len).map(|_| self.below(256) as u8).collect()
    }
}

const PATHS: [&str; 10] = [
    "f0", "f1", "f2", "d0", "d1", "d0/f0", "d0/f1", "d0/d2", "d0/d2/f0", "d1/f0",
];

/// Resolves a backend path to its inode (taking kernel references, as lookups do).
async fn ino_of(fs: &Fs, path: &str) -> std::result::Result<u64, i32> {
    let mut ino = fs
        .lookup(ROOT_INO, "data")
        .await
        .map_err(|e| e.errno())?
        .ino;
    for name in path.split('/').filter(|s| !s.is_empty()) {
        ino = fs.lookup(ino, name).await.map_err(|e| e.errno())?.ino;
    }
    Ok(ino)
}

/// Resolves a directory path as a path walk does: ENOTDIR if it names a file.
async fn dir_ino_of(fs: &Fs, path: &str) -> std::result::Result<u64, i32> {
    let ino = ino_of(fs, path).await?;
    match fs.getattr(ino).await.map_err(|e| e.errno())?.kind {
        Kind::Dir => Ok(ino),
        _ => Err(libc::ENOTDIR),
    }
}

fn split(path: &str) -> (&str, &str) {
    path.rsplit_once('/').unwrap_or(("", path))
}

/// Errno of an `Fs` result, 0 for success.
fn code<T>(result: &Result<T>) -> i32 {
    result.as_ref().err().map_or(0, FsError::errno)
}

async fn write_file(fs: &Fs, path: &str, offset: u64, data: &[u8], truncate: bool) -> i32 {
    let (dir, name) = split(path);
    let dir_ino = match dir_ino_of(fs, dir).await {
        Ok(ino) => ino,
        Err(e) => return e,
    };
    let fh = match fs.lookup(dir_ino, name).await {
        Ok(attr) if attr.kind == Kind::Dir => return libc::EISDIR,
        Ok(attr) => {
            let opened = if truncate {
                open_truncating(fs, attr.ino).await
            } else {
                fs.open(attr.ino, WRITE).await
            };
            match opened {
                Ok(opened) => opened.fh,
                Err(e) => return e.errno(),
            }
        }
        Err(FsError::NotFound) => match fs.create(dir_ino, name).await {
            Ok((_, fh)) => fh,
            Err(e) => return e.errno(),
        },
        Err(e) => return e.errno(),
    };
    let written = fs.write(fh, offset, data).await;
    let flushed = fs.flush(fh, None).await;
    fs.release(fh).await;
    code(&written).max(code(&flushed))
}

async fn read_file(fs: &Fs, path: &str) -> std::result::Result<Vec<u8>, i32> {
    let ino = ino_of(fs, path).await?;
    let size = fs.getattr(ino).await.map_err(|e| e.errno())?.size;
    let Opened { fh, .. } = fs
        .open(ino, OpenMode::default())
        .await
        .map_err(|e| e.errno())?;
    let bytes = fs.read(fh, 0, size as u32 + 10).await;
    fs.release(fh).await;
    let bytes = bytes.map_err(|e| e.errno())?;
    assert_eq!(bytes.len() as u64, size, "{path}: read length != stat size");
    Ok(bytes.to_vec())
}

async fn list(fs: &Fs, dir: &str) -> std::result::Result<Vec<String>, i32> {
    let ino = ino_of(fs, dir).await?;
    let fh = fs.opendir(ino).await.map_err(|e| e.errno())?;
    let mut names = Vec::new();
    fs.readdir(fh, 0, false, |_, name, _, _| {
        names.push(name.to_string());
        true
    })
    .map_err(|e| e.errno())?;
    fs.releasedir(fh);
    names.retain(|n| n != "." && n != "..");
    names.sort();
    Ok(names)
}

/// Applies one random operation to both sides and checks they agree.
async fn step(fs: &Fs, model: &mut Model, rng: &mut Rng, at: usize) {
    let path = rng.pick(&PATHS);
    let (dir, name) = split(path);
    let op = rng.below(10);
    if std::env::var_os("MSFS_MODEL_TRACE").is_some() {
        eprintln!("step {at}: op {op} on {path}");
    }
    match op {
        0 | 1 => {
            let data = rng.bytes(3000);
            let got = write_file(fs, path, 0, &data, true).await;
            let want = match model.entries.get(path) {
                _ if !model.parent_exists(path) => model.parent_errno(path),
                Some(Entry::Dir) => libc::EISDIR,
                _ => {
                    model.entries.insert(path.into(), Entry::File(data));
                    0
                }
            };
            assert_eq!(got, want, "step {at}: write {path}");
        }
        2 => {
            let offset = rng.below(4000);
            let data = rng.bytes(1000);
            let got = write_file(fs, path, offset as u64, &data, false).await;
            let parent = model.parent_errno(path);
            let want = match model.entries.get_mut(path) {
                _ if parent != 0 => parent,
                Some(Entry::Dir) => libc::EISDIR,
                Some(Entry::File(body)) => {
                    if body.len() < offset + data.len() {
                        body.resize(offset + data.len(), 0);
                    }
                    body[offset..offset + data.len()].copy_from_slice(&data);
                    0
                }
                None => {
                    let mut body = vec![0; offset];
                    body.extend_from_slice(&data);
                    model.entries.insert(path.into(), Entry::File(body));
                    0
                }
            };
            assert_eq!(got, want, "step {at}: write at {offset} into {path}");
        }
        3 => {
            let size = rng.below(5000) as u64;
            let got = match ino_of(fs, path).await {
                Ok(ino) => {
                    let change = SetAttr {
                        size: Some(size),
                        ..SetAttr::default()
                    };
                    code(&fs.setattr(ino, change).await)
                }
                Err(e) => e,
            };
            let want = match model.entries.get_mut(path) {
                Some(Entry::File(body)) => {
                    body.resize(size as usize, 0);
                    0
                }
                Some(Entry::Dir) => libc::EISDIR,
                None => model.missing(path),
            };
            assert_eq!(got, want, "step {at}: truncate {path} to {size}");
        }
        4 => {
            let got = read_file(fs, path).await;
            match model.entries.get(path) {
                Some(Entry::File(body)) => assert!(
                    got.as_ref() == Ok(body),
                    "step {at}: read {path}: {:?}, model has {} bytes",
                    got.as_ref().map(Vec::len),
                    body.len()
                ),
                Some(Entry::Dir) => assert_eq!(got, Err(libc::EISDIR), "step {at}: read {path}"),
                None => assert_eq!(got, Err(model.missing(path)), "step {at}: read {path}"),
            }
        }
        5 => {
            let got = match dir_ino_of(fs, dir).await {
                Ok(ino) => code(&fs.unlink(ino, name).await),
                Err(e) => e,
            };
            let want = match model.entries.get(path) {
                Some(Entry::File(_)) => {
                    model.entries.remove(path);
                    0
                }
                Some(Entry::Dir) => libc::EISDIR,
                None => model.missing(path),
            };
            assert_eq!(got, want, "step {at}: unlink {path}");
        }
        6 => {
            let got = match dir_ino_of(fs, dir).await {
                Ok(ino) => code(&fs.mkdir(ino, name).await),
                Err(e) => e,
            };
            let want = if model.entries.contains_key(path) {
                libc::EEXIST
            } else if !model.parent_exists(path) {
                model.parent_errno(path)
            } else {
                model.entries.insert(path.into(), Entry::Dir);
                0
            };
            assert_eq!(got, want, "step {at}: mkdir {path}");
        }
        7 => {
            let got = match dir_ino_of(fs, dir).await {
                Ok(ino) => code(&fs.rmdir(ino, name).await),
                Err(e) => e,
            };
            let want = match model.entries.get(path) {
                Some(Entry::Dir) if !model.children(path).is_empty() => libc::ENOTEMPTY,
                Some(Entry::Dir) => {
                    model.entries.remove(path);
                    0
                }
                Some(Entry::File(_)) => libc::ENOTDIR,
                None => model.missing(path),
            };
            assert_eq!(got, want, "step {at}: rmdir {path}");
        }
        8 => {
            let to = rng.pick(&PATHS);
            let (to_dir, to_name) = split(to);
            let got = match (dir_ino_of(fs, dir).await, dir_ino_of(fs, to_dir).await) {
                (Ok(from), Ok(into)) => code(
                    &fs.rename(from, name, into, to_name, RenameFlags::default())
                        .await,
                ),
                (Err(e), _) | (_, Err(e)) => e,
            };
            let want = rename_in_model(model, path, to);
            assert_eq!(got, want, "step {at}: rename {path} -> {to}");
        }
        _ => {
            let got = list(fs, path).await;
            match model.entries.get(path) {
                Some(Entry::Dir) => {
                    assert_eq!(got, Ok(model.children(path)), "step {at}: ls {path}")
                }
                Some(Entry::File(_)) => {
                    assert_eq!(got, Err(libc::ENOTDIR), "step {at}: ls {path}")
                }
                None => assert_eq!(got, Err(model.missing(path)), "step {at}: ls {path}"),
            }
        }
    }
}

/// Renames in the model, returning the errno msfs promises.
fn rename_in_model(model: &mut Model, from: &str, to: &str) -> i32 {
    // As rename(2) resolves them: both parents first, then the source.
    for parent in [model.parent_errno(from), model.parent_errno(to)] {
        if parent != 0 {
            return parent;
        }
    }
    let Some(entry) = model.entries.get(from).cloned() else {
        return libc::ENOENT;
    };
    if from == to {
        return 0;
    }
    let target = model.entries.get(to).cloned();
    match entry {
        Entry::File(_) => {
            if target == Some(Entry::Dir) {
                return libc::EISDIR;
            }
        }
        Entry::Dir => {
            if to.starts_with(&format!("{from}/")) {
                return libc::EINVAL;
            }
            match target {
                Some(Entry::File(_)) => return libc::ENOTDIR,
                Some(Entry::Dir) if !model.children(to).is_empty() => return libc::ENOTEMPTY,
                _ => {}
            }
            if !model.children(from).is_empty() {
                return libc::EXDEV;
            }
        }
    }
    model.entries.remove(from);
    model.entries.insert(to.into(), entry);
    0
}

async fn run_model(seed: u64, steps: usize) {
    let f: Fixture = fixture_with(&[], true, 64 << 20);
    let mut model = Model::default();
    let mut rng = Rng(seed);
    for at in 0..steps {
        step(&f.fs, &mut model, &mut rng, at).await;
    }
    let failed = f.fs.engines.writes.drain().await;
    assert!(failed.is_empty(), "seed {seed}: commits failed: {failed:?}");
    for (path, entry) in &model.entries {
        let on_disk = f.dir.path().join(path);
        match entry {
            Entry::Dir => assert!(on_disk.is_dir(), "seed {seed}: {path} is not a directory"),
            Entry::File(body) => {
                let stored = std::fs::read(&on_disk).ok();
                assert!(
                    stored.as_ref() == Some(body),
                    "seed {seed}: {path} in the store: {:?} bytes, model has {}",
                    stored.as_ref().map(Vec::len),
                    body.len()
                )
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_operations_agree_with_the_reference_model() {
    for seed in 1..=12u64 {
        run_model(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15), 300).await;
    }
}
