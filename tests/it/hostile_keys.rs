//! Object keys that are not POSIX paths, through a real mount (live listing and manifest): the
//! documented rule is that a key with an empty, `.` or `..` segment, or a segment longer than
//! 255 bytes, is skipped; any other byte (tab, newline, control characters, spaces) is shown as
//! is. Nothing escapes the mount, nothing crashes, and both namespaces agree.

use std::collections::BTreeSet;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use crate::common::{Garage, MsfsMount, config_yaml, s3_backend_yaml, yaml_str};

const SHOWN: &[&str] = &[
    "ok.txt",
    "tab\there.txt",
    "new\nline.txt",
    "bell\u{7}.txt",
    "sp ace/ x .txt",
    "ünï/cödé.txt",
];

fn skipped() -> Vec<String> {
    vec![
        "a//empty-segment.txt".into(),
        "./dot.txt".into(),
        "../up.txt".into(),
        "dir/./x.txt".into(),
        "dir/../y.txt".into(),
        format!("{}.txt", "L".repeat(300)),
        format!("deep/{}/z.txt", "M".repeat(256)),
    ]
}

/// Every path below `root` (relative, as raw bytes turned lossy), walked with std.
fn walk(root: &Path) -> BTreeSet<String> {
    let mut seen = BTreeSet::new();
    let mut pending = vec![root.to_path_buf()];
    while let Some(dir) = pending.pop() {
        for entry in std::fs::read_dir(&dir).expect("read_dir") {
            let entry = entry.expect("entry");
            let path = entry.path();
            let relative = path.strip_prefix(root).expect("below root");
            seen.insert(String::from_utf8_lossy(relative.as_os_str().as_bytes()).into_owned());
            if entry.file_type().expect("file type").is_dir() {
                pending.push(path);
            }
        }
    }
    seen
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_that_are_not_posix_paths_are_skipped_and_the_rest_shown_verbatim() {
    let garage = Garage::start();
    garage.create_bucket("hostile");
    for key in SHOWN.iter().map(|k| k.to_string()).chain(skipped()) {
        garage
            .put_object("hostile", &key, key.as_bytes().to_vec())
            .await;
    }
    let stored: BTreeSet<String> = garage.list_keys("hostile", "").await.into_iter().collect();
    for key in SHOWN {
        assert!(stored.contains(*key), "the server kept {key:?}: {stored:?}");
    }

    let live = MsfsMount::start(
        &config_yaml(&[s3_backend_yaml("data", "hostile", "", &garage)]),
        "yaml",
    )
    .expect("live mount");
    let root = live.path().join("data");
    let seen = walk(&root);
    for key in SHOWN {
        assert!(seen.contains(*key), "{key:?} is shown: {seen:?}");
        let body = std::fs::read(root.join(key)).expect("read a shown key");
        assert_eq!(body, key.as_bytes());
    }
    let files: BTreeSet<&str> = seen
        .iter()
        .map(String::as_str)
        .filter(|p| root.join(p).is_file())
        .collect();
    let expected: BTreeSet<&str> = SHOWN.iter().copied().collect();
    assert_eq!(files, expected, "every other key is skipped, none escapes");
    // Directories that only hold skipped keys still exist, empty.
    for dir in ["a", "dir", "deep"] {
        assert!(root.join(dir).is_dir(), "{dir}/ exists");
    }
    assert!(!live.path().join("up.txt").exists() && !root.join("up.txt").exists());

    // A manifest of the same bucket shows exactly the same tree.
    let state = tempfile::tempdir().expect("tempdir");
    let backend = format!(
        "{}    readonly: true\n    manifest_path: {}\n",
        s3_backend_yaml("data", "hostile", "", &garage),
        yaml_str(state.path().join("m").to_str().expect("utf-8"))
    );
    let manifest = MsfsMount::start(&config_yaml(&[backend]), "yaml").expect("manifest mount");
    assert_eq!(walk(&manifest.path().join("data")), seen);
    let body = std::fs::read(manifest.path().join("data/new\nline.txt")).expect("read");
    assert_eq!(body, b"new\nline.txt");
}
