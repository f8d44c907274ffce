//! The read-only mount end to end: a real garage S3 server, a real `msfs mount` process, real
//! FUSE, and the tools users run (`ls`, `find`, `stat`, `cat`, `dd`, `md5sum`, `cp -r`).

use std::collections::BTreeSet;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::Path;
use std::process::Command;

use crate::common::{
    Garage, MsfsMount, config_yaml, config_yaml_with, pattern, run, s3_backend_yaml,
};
use aws_sdk_s3::primitives::ByteStream;
use aws_sdk_s3::types::{CompletedMultipartUpload, CompletedPart};
use futures::StreamExt;

fn md5_of(path: &Path) -> String {
    let out = run("md5sum", &[path.to_str().expect("utf-8 path")]);
    out.split_whitespace().next().expect("hash").to_string()
}

fn mount_one(garage: &Garage, bucket: &str, prefix: &str) -> MsfsMount {
    let config = config_yaml(&[s3_backend_yaml("data", bucket, prefix, garage)]);
    MsfsMount::start(&config, "yaml").expect("mount")
}

const TREE: &[(&str, usize)] = &[
    ("top.txt", 11),
    ("empty", 0),
    ("a/one.bin", 4096),
    ("a/b/two.bin", 300_000),
    ("a/b/c/three.bin", 1),
    ("names/with space.txt", 17),
    ("names/ünïcödé ✓.txt", 23),
    ("big/five-mib.bin", 5 * 1024 * 1024 + 7),
];

async fn seed_tree(garage: &Garage, bucket: &str, prefix: &str) {
    for (i, (key, len)) in TREE.iter().enumerate() {
        garage
            .put_object(bucket, &format!("{prefix}{key}"), pattern(*len, i as u64))
            .await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_byte_size_and_name_matches_the_bucket() {
    let garage = Garage::start();
    garage.create_bucket("tree");
    seed_tree(&garage, "tree", "").await;
    let mount = mount_one(&garage, "tree", "");
    let root = mount.path().join("data");

    // find sees exactly the objects, with directories inferred from the keys.
    let found: BTreeSet<String> = run("find", &[root.to_str().expect("path"), "-type", "f"])
        .lines()
        .map(|l| {
            l.strip_prefix(&format!("{}/", root.display()))
                .expect("under root")
                .to_string()
        })
        .collect();
    let expected: BTreeSet<String> = TREE.iter().map(|(k, _)| k.to_string()).collect();
    assert_eq!(found, expected);
    let dirs = run(
        "find",
        &[root.to_str().expect("path"), "-mindepth", "1", "-type", "d"],
    );
    assert_eq!(dirs.lines().count(), 5, "a a/b a/b/c names big: {dirs}");

    let copy = tempfile::tempdir().expect("tempdir");
    run(
        "cp",
        &[
            "-r",
            root.to_str().expect("path"),
            copy.path().to_str().expect("path"),
        ],
    );
    for (i, (key, len)) in TREE.iter().enumerate() {
        let path = root.join(key);
        let want = pattern(*len, i as u64);
        // stat: size from S3
        assert_eq!(
            std::fs::metadata(&path).expect("stat").len(),
            *len as u64,
            "{key}"
        );
        // cat / read: every byte
        assert_eq!(std::fs::read(&path).expect("read"), want, "{key}");
        // cp -r copied the same bytes
        assert_eq!(
            std::fs::read(copy.path().join("data").join(key)).expect("copy"),
            want,
            "{key}"
        );
        // md5sum through the mount equals md5sum of the original bytes
        let local = copy.path().join("original");
        std::fs::write(&local, &want).expect("write");
        assert_eq!(md5_of(&path), md5_of(&local), "{key}");
    }
    // ls -lR shows every name, including spaces and unicode.
    let listing = run("ls", &["-lR", root.to_str().expect("path")]);
    assert!(
        listing.contains("with space.txt") && listing.contains("ünïcödé ✓.txt"),
        "{listing}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mtimes_come_from_the_objects() {
    let garage = Garage::start();
    garage.create_bucket("times");
    garage.put_object("times", "dir/file", b"x".to_vec()).await;
    let head = garage
        .client()
        .head_object()
        .bucket("times")
        .key("dir/file")
        .send()
        .await
        .expect("head");
    let modified = head.last_modified().expect("last-modified").secs();
    let mount = mount_one(&garage, "times", "");
    let meta = std::fs::metadata(mount.path().join("data/dir/file")).expect("stat");
    assert_eq!(meta.mtime(), modified);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dd_reads_exact_ranges_across_the_one_gib_boundary() {
    const GIB: u64 = 1 << 30;
    const PART: usize = 64 << 20;
    const TAIL: usize = 3 << 20;
    let garage = Garage::start();
    garage.create_bucket("huge");
    // Build a 1 GiB + 3 MiB object server-side: 16 copies of one 64 MiB object, then a tail.
    let source = pattern(PART, 1);
    garage.put_object("huge", "source", source.clone()).await;
    let client = garage.client();
    let upload = client
        .create_multipart_upload()
        .bucket("huge")
        .key("big")
        .send()
        .await
        .expect("create upload");
    let id = upload.upload_id().expect("upload id");
    let mut parts = Vec::new();
    for n in 1..=16 {
        let copied = client
            .upload_part_copy()
            .bucket("huge")
            .key("big")
            .upload_id(id)
            .part_number(n)
            .copy_source("huge/source")
            .send()
            .await
            .expect("copy part");
        let etag = copied
            .copy_part_result()
            .and_then(|r| r.e_tag())
            .expect("etag");
        parts.push(CompletedPart::builder().part_number(n).e_tag(etag).build());
    }
    let tail = pattern(TAIL, 2);
    let last = client
        .upload_part()
        .bucket("huge")
        .key("big")
        .upload_id(id)
        .part_number(17)
        .body(ByteStream::from(tail.clone()))
        .send()
        .await
        .expect("tail part");
    parts.push(
        CompletedPart::builder()
            .part_number(17)
            .e_tag(last.e_tag().expect("etag"))
            .build(),
    );
    client
        .complete_multipart_upload()
        .bucket("huge")
        .key("big")
        .upload_id(id)
        .multipart_upload(
            CompletedMultipartUpload::builder()
                .set_parts(Some(parts))
                .build(),
        )
        .send()
        .await
        .expect("complete");
    let expected_at = |offset: u64| -> u8 {
        if offset < GIB {
            source[(offset % PART as u64) as usize]
        } else {
            tail[(offset - GIB) as usize]
        }
    };

    let mount = mount_one(&garage, "huge", "");
    let path = mount.path().join("data/big");
    assert_eq!(
        std::fs::metadata(&path).expect("stat").len(),
        GIB + TAIL as u64
    );

    // One read straddling the boundary.
    let file = std::fs::File::open(&path).expect("open");
    let start = GIB - (1 << 20);
    let mut buf = vec![0u8; 2 << 20];
    file.read_exact_at(&mut buf, start)
        .expect("read across 1 GiB");
    for (i, byte) in buf.iter().enumerate() {
        assert_eq!(
            *byte,
            expected_at(start + i as u64),
            "offset {}",
            start + i as u64
        );
    }
    // dd of the last 4 KiB blocks, past 1 GiB, as a user would.
    let out = Command::new("dd")
        .args([
            &format!("if={}", path.display()),
            "bs=4096",
            &format!("skip={}", (GIB + TAIL as u64 - 8192) / 4096),
            "status=none",
        ])
        .output()
        .expect("dd");
    assert!(out.status.success());
    assert_eq!(out.stdout, tail[TAIL - 8192..]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_directory_of_more_than_a_thousand_objects_lists_completely() {
    let garage = Garage::start();
    garage.create_bucket("wide");
    let keys: Vec<String> = (0..1100).map(|i| format!("many/obj-{i:05}")).collect();
    let client = garage.client();
    let puts = keys.iter().map(|key| {
        let client = client.clone();
        async move {
            client
                .put_object()
                .bucket("wide")
                .key(key)
                .body(ByteStream::from(key.as_bytes().to_vec()))
                .send()
                .await
                .expect("put");
        }
    });
    futures::stream::iter(puts)
        .buffer_unordered(32)
        .collect::<Vec<()>>()
        .await;
    let mount = mount_one(&garage, "wide", "");
    let names: BTreeSet<String> = std::fs::read_dir(mount.path().join("data/many"))
        .expect("readdir")
        .map(|e| e.expect("entry").file_name().into_string().expect("utf-8"))
        .collect();
    assert_eq!(names.len(), 1100);
    let expected: BTreeSet<String> = (0..1100).map(|i| format!("obj-{i:05}")).collect();
    assert_eq!(names, expected);
    let last = std::fs::read(mount.path().join("data/many/obj-01099")).expect("read");
    assert_eq!(last, b"many/obj-01099");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_backends_are_sibling_directories_and_prefixes_are_hidden() {
    let garage = Garage::start();
    garage.create_bucket("first");
    garage.create_bucket("second");
    garage.put_object("first", "f.txt", b"first".to_vec()).await;
    garage
        .put_object("second", "datasets/train/x.txt", b"x".to_vec())
        .await;
    garage
        .put_object("second", "outside.txt", b"no".to_vec())
        .await;
    let config = config_yaml(&[
        s3_backend_yaml("one", "first", "", &garage),
        s3_backend_yaml("two", "second", "datasets/", &garage),
    ]);
    let mount = MsfsMount::start(&config, "yaml").expect("mount");
    let roots: BTreeSet<String> = std::fs::read_dir(mount.path())
        .expect("readdir")
        .map(|e| e.expect("entry").file_name().into_string().expect("utf-8"))
        .collect();
    assert_eq!(
        roots,
        BTreeSet::from(["one".to_string(), "two".to_string()])
    );
    assert_eq!(
        std::fs::read(mount.path().join("one/f.txt")).expect("read"),
        b"first"
    );
    assert_eq!(
        std::fs::read(mount.path().join("two/train/x.txt")).expect("read"),
        b"x"
    );
    assert!(!mount.path().join("two/outside.txt").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_directory_marker_object_is_a_directory_not_a_file() {
    let garage = Garage::start();
    garage.create_bucket("markers");
    garage.put_object("markers", "empty-dir/", Vec::new()).await;
    garage.put_object("markers", "full/", Vec::new()).await;
    garage
        .put_object("markers", "full/inside", b"i".to_vec())
        .await;
    let mount = mount_one(&garage, "markers", "");
    assert!(mount.path().join("data/empty-dir").is_dir());
    let inside: Vec<_> = std::fs::read_dir(mount.path().join("data/full"))
        .expect("readdir")
        .map(|e| e.expect("entry").file_name())
        .collect();
    assert_eq!(inside, ["inside"]);
    assert_eq!(
        std::fs::read_dir(mount.path().join("data/empty-dir"))
            .expect("readdir")
            .count(),
        0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_are_refused_as_read_only() {
    let garage = Garage::start();
    garage.create_bucket("read-only");
    garage.put_object("read-only", "f", b"keep".to_vec()).await;
    let mount = mount_one(&garage, "read-only", "");
    let root = mount.path().join("data");
    let erofs = Some(libc::EROFS);
    assert_eq!(
        std::fs::write(root.join("new"), b"x")
            .map_err(|e| e.raw_os_error())
            .err(),
        Some(erofs)
    );
    assert_eq!(
        std::fs::remove_file(root.join("f"))
            .map_err(|e| e.raw_os_error())
            .err(),
        Some(erofs)
    );
    assert_eq!(
        std::fs::create_dir(root.join("d"))
            .map_err(|e| e.raw_os_error())
            .err(),
        Some(erofs)
    );
    assert_eq!(garage.get_object("read-only", "f").await, b"keep");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replaced_object_is_read_afresh_once_the_ttl_passes() {
    let garage = Garage::start();
    garage.create_bucket("change");
    garage
        .put_object("change", "f", b"old contents".to_vec())
        .await;
    let config = config_yaml_with(
        "entry_attr_ttl: 200\n",
        &[s3_backend_yaml("data", "change", "", &garage)],
    );
    let mount = MsfsMount::start(&config, "yaml").expect("mount");
    let path = mount.path().join("data/f");
    assert_eq!(std::fs::read(&path).expect("read"), b"old contents");
    garage
        .put_object("change", "f", b"new, longer contents".to_vec())
        .await;
    std::thread::sleep(std::time::Duration::from_millis(600));
    assert_eq!(std::fs::read(&path).expect("read"), b"new, longer contents");
}
