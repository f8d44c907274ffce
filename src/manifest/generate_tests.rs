//! Generation against a local-directory store: the manifest must equal the tree derived from a
//! plain full listing, whatever the layout and however the listing was split.

use std::collections::{BTreeMap, BTreeSet};

use super::*;
use crate::manifest::format::{EntryKind, Ownership, parse_time, read_dir_file};
use crate::store::testing::TestStore;

/// Range listings of directory prefix `prefix`: the `start_after` of each page-sized LIST that
/// starts after a key (probes ask for one key).
fn range_starts(store: &TestStore, prefix: &str) -> Vec<String> {
    store
        .lists()
        .into_iter()
        .filter(|r| r.prefix == prefix && r.max_keys != Some(1) && r.continuation.is_none())
        .filter_map(|r| r.start_after)
        .collect()
}

/// A bucket directory holding `keys`, each a file of (key length % 7) bytes.
fn bucket_with(keys: &[String]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    for key in keys {
        let path = dir.path().join(key);
        fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        fs::write(&path, vec![b'x'; key.len() % 7]).expect("write");
    }
    dir
}

fn options(workers: usize, page_size: u32, confirmation_pages: u32) -> GenerateOptions {
    GenerateOptions {
        workers,
        flat_dir_confirmation_pages: confirmation_pages,
        flat_dir_hints: Vec::new(),
        page_size: Some(page_size),
        temp_dir: None,
        overwrite: false,
        posix_metadata: false,
        progress: ProgressMode::Off,
    }
}

type Tree = BTreeMap<String, BTreeMap<String, Entry>>;

/// The tree a live mount shows, derived from a flat (undelimited) listing of every key.
async fn brute_force_tree(store: &dyn ObjectStore, prefix: &str) -> Tree {
    let mut tree = Tree::new();
    tree.insert(String::new(), BTreeMap::new());
    let mut token = None;
    loop {
        let page = store
            .list(&ListRequest::flat(prefix).continuing(token.take()))
            .await
            .expect("flat list");
        for object in page.objects {
            let rest = object.key.strip_prefix(prefix).expect("under prefix");
            let segments: Vec<&str> = rest.split('/').collect();
            let (name, dirs) = segments.split_last().expect("segments");
            let mut dir = String::new();
            for segment in dirs {
                tree.entry(dir.clone())
                    .or_default()
                    .insert(segment.to_string(), Entry::dir(*segment));
                dir = child_path(&dir, segment);
                tree.entry(dir.clone()).or_default();
            }
            if !name.is_empty() {
                tree.entry(dir).or_default().insert(
                    name.to_string(),
                    Entry::file(
                        *name,
                        object.size,
                        object.etag,
                        // As precise as the format keeps times (milliseconds).
                        parse_time(&format_time(object.last_modified)).expect("time"),
                    ),
                );
            }
        }
        match page.next {
            Some(next) => token = Some(next),
            None => return tree,
        }
    }
}

/// The manifest at `root`, read through the format's parser, checking there is no TSV file
/// beyond those of `expected`'s directories and no duplicate row.
fn read_manifest(root: &Path, expected: &Tree) -> Tree {
    let mut tree = Tree::new();
    let mut wanted_files = BTreeSet::new();
    for dir in expected.keys() {
        let path = dir_file(root, dir);
        assert!(
            path.exists(),
            "no TSV for directory {dir:?}: {}",
            path.display()
        );
        let mut rows = BTreeMap::new();
        for entry in read_dir_file(&path).expect("read TSV") {
            let name = entry.name.clone();
            assert!(
                rows.insert(name.clone(), entry).is_none(),
                "{dir:?}: {name:?} written twice"
            );
        }
        tree.insert(dir.clone(), rows);
        wanted_files.insert(path);
    }
    let mut found_files = BTreeSet::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in fs::read_dir(&dir).expect("read manifest dir") {
            let path = entry.expect("entry").path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "tsv") {
                found_files.insert(path);
            }
        }
    }
    assert_eq!(
        found_files, wanted_files,
        "TSV files beyond the tree's directories"
    );
    tree
}

fn assert_trees_equal(actual: &Tree, expected: &Tree, context: &str) {
    for (dir, rows) in expected {
        let got = &actual[dir];
        let missing: Vec<_> = rows.keys().filter(|n| !got.contains_key(*n)).collect();
        let extra: Vec<_> = got.keys().filter(|n| !rows.contains_key(*n)).collect();
        assert!(
            missing.is_empty() && extra.is_empty(),
            "{context}: directory {dir:?}: missing {missing:?}, extra {extra:?}"
        );
        for (name, entry) in rows {
            assert_eq!(&got[name], entry, "{context}: {dir:?}/{name:?}");
        }
    }
    assert_eq!(actual.len(), expected.len(), "{context}: directory count");
}

/// Generates a manifest of `bucket` and checks it against a full listing; returns the store
/// (for its recorded LISTs) and the index.
async fn generate_and_compare(
    bucket: &Path,
    prefix: &str,
    options: &GenerateOptions,
    context: &str,
) -> (Arc<TestStore>, ManifestInfo) {
    let store = TestStore::new(bucket, "recorder");
    let out = tempfile::tempdir().expect("tempdir");
    let output = out.path().join("manifest");
    let info = generate(store.clone(), "bucket", prefix, &output, options)
        .await
        .unwrap_or_else(|e| panic!("{context}: generate: {e}"));
    let expected = brute_force_tree(store.as_ref(), &info.prefix).await;
    let actual = read_manifest(&output, &expected);
    assert_trees_equal(&actual, &expected, context);
    assert!(info.sorted_rows, "{context}: a store listing in key order");
    // Each entry is found by bisection as the full parse has it (split directories included).
    for (dir, rows) in &actual {
        for (name, entry) in rows {
            let found = crate::manifest::bisect::find(&dir_file(&output, dir), name);
            assert_eq!(
                found.expect("bisect").as_ref(),
                Some(&entry.kind),
                "{context}: {dir}/{name}"
            );
        }
    }
    let objects: usize = expected
        .values()
        .flat_map(|rows| rows.values())
        .filter(|e| !e.is_dir())
        .count();
    assert_eq!(info.totals.objects, objects as u64, "{context}");
    assert_eq!(
        info.totals.directories,
        expected.len() as u64 - 1,
        "{context}"
    );
    assert_eq!(
        ManifestInfo::read(&output).expect("index"),
        Some(info.clone())
    );
    // Nothing left beside the output but the output.
    let left: Vec<_> = fs::read_dir(out.path())
        .expect("read")
        .map(|e| e.expect("entry").file_name())
        .collect();
    assert_eq!(left, ["manifest"], "{context}: scratch left behind");
    (store, info)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_deep_tree_matches_a_full_listing() {
    let mut keys = Vec::new();
    for a in 0..3 {
        for b in 0..3 {
            for c in 0..3 {
                keys.push(format!("l1-{a}/l2-{b}/l3-{c}/leaf.bin"));
                keys.push(format!("l1-{a}/l2-{b}/file-{c}"));
            }
        }
        keys.push(format!("top-{a}.txt"));
    }
    keys.push("l1-0/l2-0/l3-0/l4/l5/l6/deepest".into());
    let bucket = bucket_with(&keys);
    let (store, info) = generate_and_compare(bucket.path(), "", &options(8, 4, 2), "deep").await;
    assert_eq!(info.totals.objects, keys.len() as u64);
    // No directory here is flat: nothing was split.
    assert!(store.lists().iter().all(|r| r.start_after.is_none()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_flat_directory_with_varied_first_characters_is_split_by_key_prefix() {
    // 36 distinct first characters, 20 names each.
    let alphabet: Vec<char> = ('0'..='9').chain('a'..='z').collect();
    let keys: Vec<String> = (0..720)
        .map(|i| format!("flat/{}{:04}.dat", alphabet[(i * 7) % 36], i))
        .collect();
    let bucket = bucket_with(&keys);
    let (store, _) =
        generate_and_compare(bucket.path(), "", &options(16, 10, 2), "key prefix").await;
    let starts = range_starts(&store, "flat/");
    // Ranges start at single characters (and, split again later, at keys).
    let at_characters = starts
        .iter()
        .filter(|s| s.len() == "flat/".len() + 1)
        .count();
    assert!(at_characters >= split::MIN_PREFIX_BLOCKS, "{starts:?}");
    // One-character prefix probes were made.
    assert!(
        store
            .lists()
            .iter()
            .any(|r| r.max_keys == Some(1) && r.prefix == "flat/q")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_flat_directory_of_similar_names_is_split_at_sampled_keys() {
    let keys: Vec<String> = (0..900).map(|i| format!("imgs/img_{i:05}.jpg")).collect();
    let bucket = bucket_with(&keys);
    let (store, _) =
        generate_and_compare(bucket.path(), "", &options(12, 10, 3), "sampled ranges").await;
    let starts = range_starts(&store, "imgs/");
    assert!(starts.len() >= 4, "{starts:?}");
    // Split points are real keys found by sampling, not synthetic prefixes.
    let keys: BTreeSet<&String> = keys.iter().collect();
    let sampled = starts.iter().filter(|s| keys.contains(s)).count();
    assert!(sampled + 1 >= starts.len(), "{starts:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_skewed_range_is_split_again_for_idle_listers() {
    // Ten one-character blocks, so the directory is split by key prefix, but one of them
    // holds nearly every key: its range must be split again while the others stand idle.
    let mut keys: Vec<String> = (0..600).map(|i| format!("skew/img_{i:05}")).collect();
    for c in 'a'..='h' {
        keys.push(format!("skew/{c}"));
    }
    for c in 'j'..='r' {
        keys.push(format!("skew/{c}"));
    }
    let bucket = bucket_with(&keys);
    let (store, _) = generate_and_compare(bucket.path(), "", &options(16, 10, 2), "skew").await;
    let starts = range_starts(&store, "skew/");
    let first_split = "skew/img_00011";
    assert!(starts.iter().any(|s| s == first_split), "{starts:?}");
    let again = starts
        .iter()
        .filter(|s| s.starts_with("skew/img_") && s.as_str() > first_split)
        .count();
    assert!(again >= 2, "the img_ range was not split again: {starts:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_hybrid_directory_is_split_and_its_subdirectories_listed_once() {
    let mut keys: Vec<String> = (0..800)
        .map(|i| format!("mix/{:x}-{i}", (i * 2_654_435_761u64) % 65_536))
        .collect();
    for sub in ["Asub", "m-sub", "zz_sub", "7"] {
        for j in 0..3 {
            keys.push(format!("mix/{sub}/inner-{j}"));
            keys.push(format!("mix/{sub}/deeper/x{j}"));
        }
    }
    keys.push("mix.txt".into());
    let bucket = bucket_with(&keys);
    let (store, _) = generate_and_compare(bucket.path(), "", &options(6, 16, 2), "hybrid").await;
    assert!(!range_starts(&store, "mix/").is_empty());
    // Each sub-directory was listed once, by whichever range held it.
    for sub in ["Asub", "m-sub", "zz_sub", "7"] {
        let lists = store
            .lists()
            .iter()
            .filter(|r| r.prefix == format!("mix/{sub}/"))
            .count();
        assert_eq!(lists, 1, "{sub}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_hinted_directory_is_split_at_once_and_keeps_keys_outside_the_hint() {
    let mut keys: Vec<String> = (0..200).map(|i| format!("h/{}{i:03}", i % 4)).collect();
    // Outside the hint's characters, below, between and above them, and exact split points.
    for name in [
        "-dash", "0", "00", "1", "4zz", "A", "_under", "zz", "~", "ünï",
    ] {
        keys.push(format!("h/{name}"));
    }
    keys.push("h/sub/x".into());
    let bucket = bucket_with(&keys);
    let mut opts = options(4, 25, 0);
    opts.flat_dir_hints = vec![FlatDirHint {
        path: "h/".into(),
        key_prefix_chars: "0123".into(),
        split_depth: 2,
    }];
    let (store, _) = generate_and_compare(bucket.path(), "", &opts, "hint").await;
    let starts: BTreeSet<String> = range_starts(&store, "h/").into_iter().collect();
    assert!(
        starts.contains("h/00") && starts.contains("h/33"),
        "{starts:?}"
    );
    assert_eq!(starts.len(), 16, "{starts:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn names_with_tabs_and_newlines_round_trip() {
    let keys: Vec<String> = [
        "t/tab\there",
        "t/new\nline",
        "t/back\\slash",
        "t/dir\twith\ntab/inner",
        "cr\rdir/x",
        "plain",
    ]
    .into_iter()
    .map(String::from)
    .collect();
    let bucket = bucket_with(&keys);
    generate_and_compare(bucket.path(), "", &options(3, 2, 1), "escapes").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn only_keys_under_the_prefix_are_listed() {
    let keys: Vec<String> = ["p/a/1", "p/b", "p/c/d/e", "pq/no", "other/no", "p.txt"]
        .into_iter()
        .map(String::from)
        .collect();
    let bucket = bucket_with(&keys);
    let (_, info) = generate_and_compare(bucket.path(), "p", &options(2, 5, 5), "prefix").await;
    assert_eq!(info.prefix, "p/");
    assert_eq!(info.totals.objects, 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_existing_manifest_is_replaced_only_when_asked() {
    let bucket = bucket_with(&["a/b".to_string(), "c".to_string()]);
    let store = TestStore::new(bucket.path(), "recorder");
    let out = tempfile::tempdir().expect("tempdir");
    let output = out.path().join("m");
    let mut opts = options(2, 10, 5);
    let first = generate(store.clone(), "b", "", &output, &opts)
        .await
        .expect("first");

    let error = generate(store.clone(), "b", "", &output, &opts)
        .await
        .expect_err("refused");
    assert!(
        matches!(error, GenerateError::ManifestExists { .. }),
        "{error}"
    );
    assert!(error.to_string().contains("--force"), "{error}");
    assert!(error.to_string().contains(&first.created_at), "{error}");

    fs::write(bucket.path().join("new"), b"n").expect("write");
    opts.overwrite = true;
    let second = generate(store.clone(), "b", "", &output, &opts)
        .await
        .expect("overwrite");
    assert_eq!(second.totals.objects, 3);
    assert_eq!(ManifestInfo::read(&output).expect("read"), Some(second));
    let names: Vec<_> = fs::read_dir(out.path())
        .expect("read")
        .map(|e| e.expect("entry").file_name())
        .collect();
    assert_eq!(names, ["m"], "old manifest or scratch left behind");

    let other = out.path().join("not-a-manifest");
    fs::create_dir(&other).expect("mkdir");
    fs::write(other.join("precious"), b"p").expect("write");
    opts.overwrite = false;
    let error = generate(store, "b", "", &other, &opts)
        .await
        .expect_err("refused");
    assert!(
        matches!(error, GenerateError::OutputNotEmpty { .. }),
        "{error}"
    );
    assert!(other.join("precious").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_listing_leaves_neither_output_nor_scratch() {
    let keys: Vec<String> = (0..30).map(|i| format!("d{}/f{i}", i % 5)).collect();
    let bucket = bucket_with(&keys);
    let store = TestStore::new(bucket.path(), "recorder");
    *store.fail_lists_under.lock().expect("fail") = Some("d3/".into());
    let out = tempfile::tempdir().expect("tempdir");
    let scratch = tempfile::tempdir().expect("tempdir");
    let output = out.path().join("m");
    let mut opts = options(4, 3, 2);
    opts.temp_dir = Some(scratch.path().to_path_buf());
    let error = generate(store, "bkt", "", &output, &opts)
        .await
        .expect_err("fails");
    let message = error.to_string();
    assert!(
        message.contains("\"bkt\"") && message.contains("d3/") && message.contains("injected"),
        "{message}"
    );
    assert!(!output.exists());
    // The build directory is removed in the background.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while fs::read_dir(scratch.path()).expect("read").count() > 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "build directory left behind"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_empty_bucket_gives_an_empty_root() {
    let bucket = tempfile::tempdir().expect("tempdir");
    let store = TestStore::new(bucket.path(), "recorder");
    let out = tempfile::tempdir().expect("tempdir");
    let output = out.path().join("m");
    let info = generate(store, "b", "", &output, &options(3, 10, 5))
        .await
        .expect("generate");
    assert_eq!(info.totals, Totals::default());
    assert!(
        read_dir_file(&dir_file(&output, ""))
            .expect("root")
            .is_empty()
    );
}

/// Random layouts, page sizes and worker counts; `MSFS_TEST_SEED` replays a failure.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn random_layouts_match_a_full_listing() {
    let seed: u64 = std::env::var("MSFS_TEST_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            SystemTime::now()
                .duration_since(SystemTime::UNIX_EPOCH)
                .map(|d| d.as_nanos() as u64)
                .unwrap_or(7)
        });
    let mut state = seed | 1;
    let mut next = move |n: u64| {
        // xorshift64*
        state ^= state >> 12;
        state ^= state << 25;
        state ^= state >> 27;
        (state.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 33) % n
    };
    const CHARS: &[char] = &['0', '5', 'a', 'k', 'z', 'A', '_', '-', '.', '~', 'é'];
    for round in 0..3 {
        let mut keys = BTreeSet::new();
        for _ in 0..(200 + next(400)) {
            let depth = match next(10) {
                0..=5 => 1,
                6..=8 => 2,
                _ => 3,
            };
            let mut key = String::new();
            for level in 0..depth {
                let len = 1 + next(if level + 1 == depth { 6 } else { 2 });
                let segment: String = (0..len)
                    .map(|_| CHARS[next(CHARS.len() as u64) as usize])
                    .collect();
                if level > 0 {
                    key.push('/');
                }
                key.push_str(&segment);
                if segment.chars().all(|c| c == '.') {
                    // "." and ".." are no names in a local directory.
                    key.push('x');
                }
            }
            keys.insert(format!("r/{key}"));
        }
        // A name cannot be both a file and a directory in a local directory.
        let keys: Vec<String> = keys
            .iter()
            .filter(|k| !keys.iter().any(|o| o.starts_with(&format!("{k}/"))))
            .cloned()
            .collect();
        let bucket = bucket_with(&keys);
        let opts = options(1 + next(8) as usize, 2 + next(12) as u32, next(4) as u32);
        let context = format!("seed {seed} (MSFS_TEST_SEED={seed}), round {round}, {opts:?}");
        generate_and_compare(bucket.path(), "", &opts, &context).await;
    }
}

#[test]
fn entry_kinds_compare_by_every_field() {
    // The comparison above relies on Entry equality covering size, ETag and mtime.
    let a = Entry::file("x", 1, "e", SystemTime::UNIX_EPOCH);
    let mut b = a.clone();
    if let EntryKind::File { etag, .. } = &mut b.kind {
        etag.push('2');
    }
    assert_ne!(a, b);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn posix_metadata_fills_the_owner_columns_from_s3fs_style_metadata() {
    use crate::store::{InMemory, Metadata};
    let store = TestStore::ram();
    let s3fs = |mode: u32, uid: u32, gid: u32| -> Metadata {
        [("mode", mode), ("uid", uid), ("gid", gid)]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    };
    let objects = [
        ("a", s3fs(0o100750, 1234, 100)),
        ("b", Metadata::new()),
        ("d/", s3fs(0o40700, 5, 6)),
        ("d/x", s3fs(0o104755, 0, 0)),
        ("e/y", Metadata::new()),
    ];
    for (key, metadata) in &objects {
        let body = Arc::new(InMemory(bytes::Bytes::from_static(b"12")));
        store
            .put_with_metadata(key, body, metadata)
            .await
            .expect("put");
    }
    let out = tempfile::tempdir().expect("tempdir");
    let output = out.path().join("m");
    let mut opts = options(2, 2, 0);
    opts.posix_metadata = true;
    generate(store.clone(), "b", "", &output, &opts)
        .await
        .expect("generate");
    let owners = |dir: &str| -> BTreeMap<String, Option<Ownership>> {
        read_dir_file(&dir_file(&output, dir))
            .expect("tsv")
            .into_iter()
            .map(|e| (e.name.clone(), e.kind.owner()))
            .collect()
    };
    let owner = |perm, uid, gid| Some(Ownership { perm, uid, gid });
    assert_eq!(
        owners(""),
        BTreeMap::from([
            ("a".to_string(), owner(0o750, 1234, 100)),
            ("b".to_string(), None),
            ("d".to_string(), owner(0o700, 5, 6)),
            ("e".to_string(), None),
        ]),
        "a directory without a marker has none"
    );
    assert_eq!(
        owners("d"),
        BTreeMap::from([("x".to_string(), owner(0o4755, 0, 0))])
    );
    // One HEAD per entry (four in the root, one in each directory).
    assert_eq!(store.calls("head"), 6);

    // Without the option: no HEAD, no owners.
    let heads = store.calls("head");
    let plain = out.path().join("plain");
    generate(store.clone(), "b", "", &plain, &options(2, 2, 0))
        .await
        .expect("generate");
    assert_eq!(store.calls("head"), heads);
    let rows = read_dir_file(&dir_file(&plain, "")).expect("tsv");
    assert!(rows.iter().all(|e| e.kind.owner().is_none()));
}
