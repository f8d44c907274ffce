//! Subtree listings through `Fs`, over a RAM store that counts the requests it serves (a
//! `TestStore` over a `RamStore`): how many LISTs a walk of a tree costs, what falls back to
//! delimited listings, and that kept listings follow the TTL and this mount's own changes.

use bytes::Bytes;

use super::*;
use crate::store::ObjectStore;
use crate::store::testing::TestStore;

pub(super) struct Fixture {
    pub(super) fs: Fs,
    pub(super) store: Arc<TestStore>,
    _spill: tempfile::TempDir,
}

/// `Fs` over a RAM store holding `keys` under backend "data", writable, with `ttl`.
pub(super) async fn fixture(keys: &[String], ttl: Duration) -> Fixture {
    let store = TestStore::ram();
    for key in keys {
        store.put(key, Bytes::from_static(b"x")).await.expect("put");
    }
    let backend = Arc::new(Backend::new(
        "data",
        BackendSettings {
            store: store.clone(),
            prefix: String::new(),
            readonly: false,
            flush_on_close: false,
            posix_metadata: false,
            uid: 0,
            gid: 0,
            dir_perm: 0o755,
            file_perm: 0o644,
            page_size: None,
            max_key_bytes: crate::store::MAX_KEY_LEN,
            manifest: None,
        },
    ));
    let spill = tempfile::tempdir().expect("spill dir");
    let options = FsOptions {
        uid: 0,
        gid: 0,
        dir_perm: 0o755,
        ttl,
        inode_limit: crate::memory::InodeLimit::fixed(usize::MAX),
    };
    let engines = super::tests::test_engines(spill.path(), 64 << 20);
    Fixture {
        fs: Fs::new(options, engines, vec![backend]),
        store,
        _spill: spill,
    }
}

/// `tree/dA/dB/file` for A, B below `fanout`, and `tree/dA/dB/dC/file` for C below `fanout` too.
fn tree(fanout: usize) -> Vec<String> {
    let mut keys = Vec::new();
    for a in 0..fanout {
        for b in 0..fanout {
            keys.push(format!("tree/d{a}/d{b}/file"));
            for c in 0..fanout {
                keys.push(format!("tree/d{a}/d{b}/d{c}/file"));
            }
        }
    }
    keys
}

/// The entries of directory `ino`, by name, as `readdir` hands them out.
async fn entries(fs: &Fs, ino: u64) -> Vec<(String, Kind, u64)> {
    let fh = fs.opendir(ino).await.expect("opendir");
    let mut out = Vec::new();
    fs.readdir(fh, 0, false, |_, name, attr, _| {
        if name != "." && name != ".." {
            out.push((name.to_string(), attr.kind, attr.ino));
        }
        true
    })
    .expect("readdir");
    fs.releasedir(fh);
    out
}

/// Walks the tree below `path` as `find` does: every directory opened and read, every entry
/// looked up. Returns every path found, sorted.
async fn find(fs: &Fs, path: &str) -> Vec<String> {
    let mut ino = ROOT_INO;
    for name in path.split('/') {
        ino = fs.lookup(ino, name).await.expect("lookup").ino;
    }
    let mut found = Vec::new();
    let mut stack = vec![(ino, path.to_string())];
    while let Some((dir, dir_path)) = stack.pop() {
        for (name, kind, _) in entries(fs, dir).await {
            let attr = fs.lookup(dir, &name).await.expect("lookup entry");
            let child = format!("{dir_path}/{name}");
            if kind == Kind::Dir {
                stack.push((attr.ino, child.clone()));
            }
            found.push(child);
        }
    }
    found.sort();
    found
}

/// Every path below `root` that `keys` make, as a walk of the mount shows them.
fn expected(keys: &[String], root: &str) -> Vec<String> {
    let mut paths = std::collections::BTreeSet::new();
    for key in keys {
        let mut at = 0;
        while let Some(slash) = key[at..].find('/') {
            paths.insert(format!("data/{}", &key[..at + slash]));
            at += slash + 1;
        }
        paths.insert(format!("data/{key}"));
    }
    let below = format!("{root}/");
    paths
        .into_iter()
        .filter(|p| p.starts_with(&below))
        .collect()
}

#[tokio::test]
async fn walking_a_small_tree_costs_one_probe_and_one_subtree_listing() {
    let keys = tree(5); // 150 keys: more than a probe reads, fewer than a subtree listing
    let f = fixture(&keys, Duration::from_secs(60)).await;
    assert_eq!(find(&f.fs, "data/tree").await, expected(&keys, "data/tree"));
    let lists = f.store.lists();
    assert_eq!(
        lists.len(),
        2,
        "the probe of `tree`, then its subtree: {lists:?}"
    );
    assert!(lists.iter().all(|l| !l.delimited && l.prefix == "tree/"));
    assert_eq!(f.store.calls("head"), 1, "the probe's HEAD of `tree`");
}

#[tokio::test]
async fn a_probe_that_lists_a_small_directory_whole_answers_the_lookups_below_it() {
    let keys = vec!["large/object".to_string(), "other/x".to_string()];
    let f = fixture(&keys, Duration::from_secs(60)).await;
    let data = f.fs.lookup(ROOT_INO, "data").await.expect("data");
    let large = f.fs.lookup(data.ino, "large").await.expect("large");
    let object = f.fs.lookup(large.ino, "object").await.expect("object");
    assert_eq!((object.kind, object.size), (Kind::File, 1));
    assert!(matches!(
        f.fs.lookup(large.ino, "missing").await,
        Err(FsError::NotFound)
    ));
    let Opened { fh, .. } =
        f.fs.open(object.ino, OpenMode::default())
            .await
            .expect("open");
    assert_eq!(&f.fs.read(fh, 0, 10).await.expect("read")[..], b"x");
    assert_eq!(f.store.lists().len(), 1, "one probe LIST, for `large`");
    assert_eq!(f.store.calls("head"), 1, "one probe HEAD, for `large`");
}

#[tokio::test]
async fn a_subtree_over_the_bound_is_listed_with_the_delimiter_and_remembered_as_large() {
    // Five keys in `a/`, then the rest: a bound of 8 keys cuts the listing inside `b/`.
    let mut keys: Vec<String> = (0..5).map(|i| format!("a/f{i}")).collect();
    keys.extend((0..20).map(|i| format!("b/f{i:02}")));
    keys.push("top".into());
    let f = fixture(&keys, Duration::from_secs(60)).await;
    let f = Fixture {
        fs: f.fs.with_subtree_listing_max(8),
        ..f
    };
    let data = f.fs.lookup(ROOT_INO, "data").await.expect("data");
    let names: Vec<String> = entries(&f.fs, data.ino)
        .await
        .into_iter()
        .map(|e| e.0)
        .collect();
    assert_eq!(names, ["a", "b", "top"]);
    let lists = f.store.lists();
    assert_eq!(lists.len(), 2, "{lists:?}");
    assert!(!lists[0].delimited, "the subtree, cut at the bound");
    assert!(lists[1].delimited, "then the directory itself");
    // `a/` came whole before the cut: its listing was kept; `b/` was cut and is listed.
    let a = f.fs.lookup(data.ino, "a").await.expect("a");
    assert_eq!(entries(&f.fs, a.ino).await.len(), 5);
    assert_eq!(f.store.lists().len(), 2, "a/ from the kept listing");
    let b = f.fs.lookup(data.ino, "b").await.expect("b");
    assert_eq!(entries(&f.fs, b.ino).await.len(), 20);
    assert_eq!(
        f.store.lists().len(),
        4,
        "b/ by subtree (cut), then delimited"
    );
    // Listed again (its snapshot dropped), the large root goes straight to the delimiter.
    lock(&f.fs.listings).remove(&data.ino);
    entries(&f.fs, data.ino).await;
    let lists = f.store.lists();
    assert_eq!(lists.len(), 5);
    assert!(lists[4].delimited && lists[4].prefix.is_empty());
}

#[tokio::test]
async fn kept_listings_are_not_used_past_the_ttl() {
    let keys = tree(2);
    let f = fixture(&keys, Duration::ZERO).await;
    assert_eq!(find(&f.fs, "data/tree").await, expected(&keys, "data/tree"));
    // Nothing is fresh for a moment: every directory is listed when opened, and every entry
    // looked up is probed (the tree's 2 + 4 + 8 directories, each opened once).
    let opened = f
        .store
        .lists()
        .iter()
        .filter(|l| l.max_keys != Some(100))
        .count();
    assert_eq!(opened, 1 + 2 + 4 + 8);
}

#[tokio::test]
async fn changes_in_a_kept_directory_are_seen_at_once() {
    let keys = tree(2);
    let f = fixture(&keys, Duration::from_secs(60)).await;
    find(&f.fs, "data/tree").await;
    let before = f.store.lists().len();
    let data = f.fs.lookup(ROOT_INO, "data").await.expect("data");
    let tree = f.fs.lookup(data.ino, "tree").await.expect("tree");
    let d0 = f.fs.lookup(tree.ino, "d0").await.expect("d0");
    let d1 = f.fs.lookup(d0.ino, "d1").await.expect("d1");
    // A new file and directory, and an unlinked one, in directories listed by the subtree.
    let (_, fh) = f.fs.create(d1.ino, "new").await.expect("create");
    f.fs.release(fh).await;
    f.fs.mkdir(d0.ino, "made").await.expect("mkdir");
    f.fs.unlink(d1.ino, "file").await.expect("unlink");
    let names = |e: Vec<(String, Kind, u64)>| e.into_iter().map(|e| e.0).collect::<Vec<_>>();
    assert_eq!(names(entries(&f.fs, d1.ino).await), ["d0", "d1", "new"]);
    assert_eq!(names(entries(&f.fs, d0.ino).await), ["d0", "d1", "made"]);
    assert!(
        f.store.lists().len() > before,
        "the changed directories were listed again"
    );
    // A sibling the changes did not touch still answers from its kept listing.
    let quiet = f.store.lists().len();
    let d1_d0 = f.fs.lookup(d1.ino, "d0").await.expect("d1/d0");
    assert_eq!(names(entries(&f.fs, d1_d0.ino).await), ["file"]);
    assert_eq!(f.store.lists().len(), quiet);
}

/// xorshift64, reproducible from the seed.
struct Rng(u64);

impl Rng {
    fn below(&mut self, bound: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % bound.max(1) as u64) as usize
    }
}

async fn resolve_path(fs: &Fs, path: &str) -> Attr {
    let mut attr = fs.lookup(ROOT_INO, "data").await.expect("data");
    for name in path.split('/').filter(|n| !n.is_empty()) {
        attr = fs.lookup(attr.ino, name).await.expect("lookup");
    }
    attr
}

/// Every path below the backend root with its size (`None`: a directory), as a walk sees it.
async fn walk_sizes(fs: &Fs) -> BTreeMap<String, Option<u64>> {
    let root = fs.lookup(ROOT_INO, "data").await.expect("data");
    let mut found = BTreeMap::new();
    let mut stack = vec![(root.ino, String::new())];
    while let Some((dir, dir_path)) = stack.pop() {
        for (name, kind, _) in entries(fs, dir).await {
            let attr = fs.lookup(dir, &name).await.expect("lookup entry");
            assert_eq!(
                attr.kind, kind,
                "{dir_path}/{name}: listed and looked up alike"
            );
            let path = listing::child_path(&dir_path, &name);
            if kind == Kind::Dir {
                stack.push((attr.ino, path.clone()));
                found.insert(path, None);
            } else {
                found.insert(path, Some(attr.size));
            }
        }
    }
    found
}

/// Random creates, mkdirs, unlinks, rmdirs and renames in a tree listed by subtrees (every
/// directory has its marker, so none vanishes when emptied), each followed by a walk of the
/// whole tree, which must show exactly what the mount did. `MSFS_TEST_SEED` replays a run.
#[tokio::test]
async fn walks_between_random_changes_show_exactly_the_changed_tree() {
    let seed = match std::env::var("MSFS_TEST_SEED") {
        Ok(s) => s.parse().expect("MSFS_TEST_SEED is a number"),
        Err(_) => std::hash::BuildHasher::hash_one(&std::hash::RandomState::new(), 0u8) | 1,
    };
    eprintln!("seed {seed} (repeat with MSFS_TEST_SEED={seed})");
    let mut rng = Rng(seed);
    let mut model: BTreeMap<String, Option<u64>> = BTreeMap::new();
    let mut keys = Vec::new();
    for a in 0..3 {
        model.insert(format!("d{a}"), None);
        keys.push(format!("d{a}/"));
        for b in 0..3 {
            model.insert(format!("d{a}/e{b}"), None);
            keys.push(format!("d{a}/e{b}/"));
            model.insert(format!("d{a}/e{b}/f"), Some(1));
            keys.push(format!("d{a}/e{b}/f"));
        }
    }
    let f = fixture(&keys, Duration::from_secs(600)).await;
    assert_eq!(walk_sizes(&f.fs).await, model, "seeded tree");
    for step in 0..150 {
        let dirs: Vec<String> = std::iter::once(String::new())
            .chain(
                model
                    .iter()
                    .filter(|(_, s)| s.is_none())
                    .map(|(p, _)| p.clone()),
            )
            .collect();
        let files: Vec<String> = model
            .iter()
            .filter(|(_, s)| s.is_some())
            .map(|(p, _)| p.clone())
            .collect();
        let dir = dirs[rng.below(dirs.len())].clone();
        let fresh = listing::child_path(&dir, &format!("n{step}"));
        let parent_of = |path: &str| path.rsplit_once('/').map_or("", |(d, _)| d).to_string();
        let name_of = |path: &str| path.rsplit('/').next().unwrap_or(path).to_string();
        match rng.below(5) {
            0 => {
                let len = 1 + rng.below(4);
                let parent = resolve_path(&f.fs, &dir).await;
                let (_, fh) =
                    f.fs.create(parent.ino, &name_of(&fresh))
                        .await
                        .expect("create");
                f.fs.write(fh, 0, &vec![7; len]).await.expect("write");
                f.fs.release(fh).await;
                model.insert(fresh, Some(len as u64));
            }
            1 => {
                let parent = resolve_path(&f.fs, &dir).await;
                f.fs.mkdir(parent.ino, &name_of(&fresh))
                    .await
                    .expect("mkdir");
                model.insert(fresh, None);
            }
            2 if !files.is_empty() => {
                let file = files[rng.below(files.len())].clone();
                let parent = resolve_path(&f.fs, &parent_of(&file)).await;
                f.fs.unlink(parent.ino, &name_of(&file))
                    .await
                    .expect("unlink");
                model.remove(&file);
            }
            3 if !files.is_empty() => {
                let file = files[rng.below(files.len())].clone();
                let from = resolve_path(&f.fs, &parent_of(&file)).await;
                let into = resolve_path(&f.fs, &dir).await;
                f.fs.rename(
                    from.ino,
                    &name_of(&file),
                    into.ino,
                    &name_of(&fresh),
                    RenameFlags::default(),
                )
                .await
                .expect("rename");
                let size = model.remove(&file).expect("a file");
                model.insert(fresh, size);
            }
            _ => {
                let below = |d: &String| {
                    let prefix = format!("{d}/");
                    !model.keys().any(|p| p.starts_with(&prefix))
                };
                let empty: Vec<&String> =
                    dirs.iter().filter(|d| !d.is_empty() && below(d)).collect();
                if let Some(gone) = empty.get(rng.below(empty.len())).map(|d| d.to_string()) {
                    let parent = resolve_path(&f.fs, &parent_of(&gone)).await;
                    f.fs.rmdir(parent.ino, &name_of(&gone))
                        .await
                        .expect("rmdir");
                    model.remove(&gone);
                }
            }
        }
        assert_eq!(walk_sizes(&f.fs).await, model, "after step {step}");
    }
    // However many directories were walked, a fraction of them were listed from the store.
    eprintln!("{} LISTs for 150 walks", f.store.lists().len());
}
