//! `msfs generate-manifest` end to end: the real binary lists a real garage S3 server, and the
//! manifest it writes must describe exactly the tree a plain full listing of the bucket implies —
//! over flat directories (split into ranges), hybrid ones (flat with a few sub-directories),
//! deep trees and a hinted directory.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::{Command, Output};

use crate::common::{Garage, config_yaml, s3_backend_yaml};
use aws_sdk_s3::primitives::ByteStream;
use futures::StreamExt;
use msfs::manifest::format::{EntryKind, ManifestInfo, dir_file, format_time, read_dir_file};

/// One row as compared: kind, name, size, ETag, mtime (as the format keeps it).
type Row = (char, String, u64, String, String);
type Tree = BTreeMap<String, BTreeSet<Row>>;

fn generate(config: &Path, backend: &str, output: &Path, extra: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_msfs"))
        .args(["generate-manifest", "--backend", backend, "--output"])
        .arg(output)
        .args(extra)
        .arg(config)
        // Debug lines of the generator say which directories were split, and how.
        .env("RUST_LOG", "info,msfs::manifest::generate=debug")
        .output()
        .expect("run msfs generate-manifest")
}

fn text(output: &Output) -> String {
    format!(
        "status {}\nstdout:\n{}\nstderr:\n{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// PUTs `keys` (a directory marker empty, others a few bytes) through one client, many at once.
async fn seed(garage: &Garage, bucket: &str, keys: &[String]) {
    let client = &garage.client();
    futures::stream::iter(keys)
        .map(|key| async move {
            let body = if key.ends_with('/') {
                Vec::new()
            } else {
                vec![b'x'; key.len() % 11]
            };
            client
                .put_object()
                .bucket(bucket)
                .key(key)
                .body(ByteStream::from(body))
                .send()
                .await
                .unwrap_or_else(|e| panic!("put {key:?}: {e:?}"));
        })
        .buffer_unordered(64)
        .collect::<Vec<()>>()
        .await;
}

/// The tree a live mount shows, from a plain (undelimited) listing of every key: objects are
/// `f` rows in their parent, every proper prefix segment a `d` row; a directory marker
/// (`dir/`) makes its directory exist but is no entry.
async fn full_listing_tree(garage: &Garage, bucket: &str) -> Tree {
    let client = garage.client();
    let mut tree = Tree::new();
    tree.insert(String::new(), BTreeSet::new());
    let mut token = None;
    loop {
        let page = client
            .list_objects_v2()
            .bucket(bucket)
            .set_continuation_token(token.take())
            .send()
            .await
            .expect("list");
        for object in page.contents() {
            let key = object.key().expect("key");
            let mtime = std::time::SystemTime::try_from(*object.last_modified().expect("mtime"))
                .expect("time");
            let segments: Vec<&str> = key.split('/').collect();
            let (name, dirs) = segments.split_last().expect("segments");
            let mut dir = String::new();
            for segment in dirs {
                tree.entry(dir.clone()).or_default().insert((
                    'd',
                    segment.to_string(),
                    0,
                    String::new(),
                    String::new(),
                ));
                dir = if dir.is_empty() {
                    segment.to_string()
                } else {
                    format!("{dir}/{segment}")
                };
                tree.entry(dir.clone()).or_default();
            }
            if !name.is_empty() {
                tree.entry(dir).or_default().insert((
                    'f',
                    name.to_string(),
                    object.size().expect("size") as u64,
                    object.e_tag().expect("etag").to_string(),
                    format_time(mtime),
                ));
            }
        }
        match page.next_continuation_token() {
            Some(next) if page.is_truncated() == Some(true) => token = Some(next.to_string()),
            _ => return tree,
        }
    }
}

/// The manifest's rows for `expected`'s directories, checking no row appears twice and no TSV
/// exists for any other directory.
fn manifest_tree(root: &Path, expected: &Tree) -> Tree {
    let mut tree = Tree::new();
    let mut wanted = BTreeSet::new();
    for dir in expected.keys() {
        let path = dir_file(root, dir);
        let mut rows = BTreeSet::new();
        for entry in read_dir_file(&path).expect("read TSV") {
            let row = match entry.kind {
                EntryKind::Dir { .. } => ('d', entry.name, 0, String::new(), String::new()),
                EntryKind::File {
                    size, etag, mtime, ..
                } => ('f', entry.name, size, etag, format_time(mtime)),
            };
            assert!(rows.insert(row.clone()), "{dir:?}: {row:?} written twice");
        }
        tree.insert(dir.clone(), rows);
        wanted.insert(path);
    }
    let mut found = BTreeSet::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).expect("read manifest") {
            let path = entry.expect("entry").path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "tsv") {
                found.insert(path);
            }
        }
    }
    assert_eq!(found, wanted, "TSV files beyond the bucket's directories");
    tree
}

fn layout() -> Vec<String> {
    let mut keys = Vec::new();
    // Flat, with varied first characters: split by key-prefix characters.
    for i in 0..800u64 {
        keys.push(format!("flat/{:x}-{i}.bin", (i * 2_654_435_761) % 4096));
    }
    // Flat, all names alike: split at sampled keys.
    for i in 0..500 {
        keys.push(format!("frames/frame_{i:05}.png"));
    }
    // Hybrid: flat plus a few sub-directories, a directory marker, and a name that is both
    // an object and a prefix.
    for i in 0..400u64 {
        keys.push(format!("hybrid/{:x}", (i * 40_503) % 65_536));
    }
    for sub in ["Alpha", "m-sub", "zz"] {
        for j in 0..3 {
            keys.push(format!("hybrid/{sub}/item-{j}"));
        }
    }
    keys.push("hybrid/marker-dir/".into());
    keys.push("hybrid/both".into());
    keys.push("hybrid/both/inner".into());
    // Deep.
    for a in 0..4 {
        for b in 0..4 {
            for c in 0..4 {
                keys.push(format!("deep/a{a}/b{b}/c{c}/leaf"));
            }
            keys.push(format!("deep/a{a}/b{b}.txt"));
        }
    }
    // Hinted by digits, with names outside the hint's characters.
    for i in 0..200 {
        keys.push(format!("hinted/{i:04}"));
    }
    for name in ["Zeta", "_under", "x-ray", "~tilde", "0"] {
        keys.push(format!("hinted/{name}"));
    }
    // Awkward names at the root.
    keys.push("tab\there".into());
    keys.push("new\nline/inside".into());
    keys.push("top.txt".into());
    keys
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn generated_manifest_matches_a_full_listing_of_flat_hybrid_and_deep_layouts() {
    let garage = Garage::start();
    garage.create_bucket("gen");
    let keys = layout();
    seed(&garage, "gen", &keys).await;

    let work = tempfile::tempdir().expect("tempdir");
    let backend = format!(
        "{}    directory_page_size: 50\n    manifest_gen_workers: 16\n    flat_dir_confirmation_pages: 2\n    flat_dir_hints:\n      - path: hinted/\n        key_prefix_chars: \"0123456789\"\n        split_depth: 2\n",
        s3_backend_yaml("data", "gen", "", &garage)
    );
    let config = work.path().join("config.yaml");
    std::fs::write(&config, config_yaml(&[backend])).expect("write config");
    let output = work.path().join("manifest");

    let run = generate(&config, "data", &output, &[]);
    assert!(run.status.success(), "{}", text(&run));
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert!(
        // Every key but the directory marker is an object.
        stdout.contains(&format!("{} objects", keys.len() - 1)) && stdout.contains("objects/s"),
        "{}",
        text(&run)
    );

    // Each way of splitting a flat directory ran against the real server.
    for (dir, strategy) in [
        ("flat", "key-prefix characters"),
        ("frames", "sampled key ranges"),
        ("hybrid", "key-prefix characters"),
        ("hinted", "flat_dir_hints"),
    ] {
        assert!(
            stdout
                .lines()
                .any(|l| l.contains("splitting a flat directory")
                    && l.contains(&format!("dir=\"{dir}\""))
                    && l.contains(strategy)),
            "{dir} not split by {strategy}: {}",
            text(&run)
        );
    }

    let expected = full_listing_tree(&garage, "gen").await;
    let actual = manifest_tree(&output, &expected);
    for (dir, rows) in &expected {
        let got = &actual[dir];
        let missing: Vec<_> = rows.difference(got).collect();
        let extra: Vec<_> = got.difference(rows).collect();
        assert!(
            missing.is_empty() && extra.is_empty(),
            "directory {dir:?}: missing {missing:?}, extra {extra:?}"
        );
    }
    let info = ManifestInfo::read(&output)
        .expect("index")
        .expect("a manifest");
    assert_eq!(info.bucket, "gen");
    assert_eq!(
        info.totals.objects,
        keys.len() as u64 - 1,
        "all but the marker"
    );
    // The build directory is gone: only the config and the manifest remain.
    let names: BTreeSet<_> = std::fs::read_dir(work.path())
        .expect("read")
        .map(|e| e.expect("entry").file_name())
        .collect();
    assert_eq!(names, ["config.yaml", "manifest"].map(Into::into).into());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_backend_or_an_existing_manifest_is_refused_clearly() {
    let garage = Garage::start();
    garage.create_bucket("small");
    seed(&garage, "small", &["a/b".to_string(), "c".to_string()]).await;
    let work = tempfile::tempdir().expect("tempdir");
    let config = work.path().join("config.yaml");
    std::fs::write(
        &config,
        config_yaml(&[s3_backend_yaml("data", "small", "", &garage)]),
    )
    .expect("write config");
    let output = work.path().join("manifest");

    let wrong = generate(&config, "nope", &output, &[]);
    assert!(!wrong.status.success(), "{}", text(&wrong));
    let stderr = String::from_utf8_lossy(&wrong.stderr);
    assert!(
        stderr.contains("no backend named \"nope\"") && stderr.contains("backends: data"),
        "{}",
        text(&wrong)
    );
    assert!(!output.exists());

    let first = generate(&config, "data", &output, &[]);
    assert!(first.status.success(), "{}", text(&first));
    let again = generate(&config, "data", &output, &[]);
    assert!(!again.status.success(), "{}", text(&again));
    let stderr = String::from_utf8_lossy(&again.stderr);
    assert!(
        stderr.contains("already holds a manifest") && stderr.contains("--force"),
        "{}",
        text(&again)
    );

    garage.put_object("small", "d", b"new".to_vec()).await;
    let forced = generate(&config, "data", &output, &["--force", "--workers", "3"]);
    assert!(forced.status.success(), "{}", text(&forced));
    let info = ManifestInfo::read(&output)
        .expect("index")
        .expect("a manifest");
    assert_eq!(info.totals.objects, 3);
}
