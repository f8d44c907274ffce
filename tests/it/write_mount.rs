//! The write path end to end: a real garage, a real `msfs mount`, writes through the kernel.
//! Contents are checked through the mount, through the S3 API, and after a remount.

use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use crate::common::{Garage, MsfsMount, config_yaml_with, pattern, s3_backend_yaml, wait_until};

const MIB: usize = 1 << 20;

/// A writable backend `data` over `bucket`, with `extra` backend keys (4-space indented lines)
/// and `top` top-level keys.
fn writable_config(garage: &Garage, bucket: &str, top: &str, extra: &str) -> String {
    let backend = format!(
        "{}    readonly: false\n{extra}",
        s3_backend_yaml("data", bucket, "", garage)
    );
    config_yaml_with(top, &[backend])
}

fn mount(garage: &Garage, bucket: &str, extra: &str) -> MsfsMount {
    MsfsMount::start(&writable_config(garage, bucket, "", extra), "yaml").expect("mount")
}

/// Waits (bounded) until the store holds `key` with exactly `body`: background commits land
/// shortly after close.
async fn eventually_stored(garage: &Garage, bucket: &str, key: &str, body: &[u8]) {
    wait_until(
        &format!("{key} reached the store with the written bytes"),
        Duration::from_secs(60),
        async || garage.try_get_object(bucket, key).await.as_deref() == Some(body),
    )
    .await;
}

fn run(cmd: &mut Command) {
    let out = cmd.output().expect("spawn");
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Files of a small tree: (relative path, bytes).
fn sample_tree() -> Vec<(String, Vec<u8>)> {
    let mut files = vec![
        ("top.txt".to_string(), b"top level\n".to_vec()),
        ("empty".to_string(), Vec::new()),
        ("a/one.bin".to_string(), pattern(100_000, 1)),
        ("a/b/two.bin".to_string(), pattern(3 * MIB + 7, 2)),
        ("a/b/c/three.txt".to_string(), b"deep\n".to_vec()),
    ];
    for i in 0..20 {
        files.push((format!("many/f{i:02}"), pattern(1000 + i * 37, i as u64)));
    }
    files
}

fn write_tree(root: &Path, files: &[(String, Vec<u8>)]) {
    for (path, body) in files {
        let path = root.join(path);
        std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        std::fs::write(path, body).expect("write");
    }
}

fn assert_tree(root: &Path, files: &[(String, Vec<u8>)]) {
    for (path, body) in files {
        let got = std::fs::read(root.join(path)).unwrap_or_else(|e| panic!("read {path}: {e}"));
        assert!(got == *body, "{path}: bytes differ");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn files_written_through_the_mount_land_in_the_bucket_and_survive_a_remount() {
    let garage = Garage::start();
    garage.create_bucket("basic");
    let mut m = mount(&garage, "basic", "");
    let root = m.path().join("data");
    std::fs::write(root.join("hello.txt"), b"hello, world\n").expect("write");
    // Close-to-open: the mount shows the new content at once, committed or not.
    assert_eq!(
        std::fs::read(root.join("hello.txt")).expect("read back"),
        b"hello, world\n"
    );
    assert_eq!(
        std::fs::metadata(root.join("hello.txt"))
            .expect("stat")
            .len(),
        13
    );
    std::fs::create_dir(root.join("empty-dir")).expect("mkdir");
    eventually_stored(&garage, "basic", "hello.txt", b"hello, world\n").await;
    assert_eq!(garage.get_object("basic", "empty-dir/").await, b"");
    assert_eq!(m.stop_with_umount().code(), Some(0));

    let m = mount(&garage, "basic", "");
    let root = m.path().join("data");
    assert_eq!(
        std::fs::read(root.join("hello.txt")).expect("read"),
        b"hello, world\n"
    );
    assert!(
        root.join("empty-dir").is_dir(),
        "an empty directory survives"
    );
    assert_eq!(
        std::fs::read_dir(root.join("empty-dir"))
            .expect("ls")
            .count(),
        0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_flush_on_close_the_object_exists_when_close_returns() {
    let garage = Garage::start();
    garage.create_bucket("flush-on-close");
    let m = mount(&garage, "flush-on-close", "    flush_on_close: true\n");
    let body = pattern(2 * MIB + 5, 11);
    let path = m.path().join("data/f.bin");
    {
        let mut file = std::fs::File::create(&path).expect("create");
        file.write_all(&body).expect("write");
    } // close
    assert!(
        garage.get_object("flush-on-close", "f.bin").await == body,
        "committed before close returned"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fsync_makes_the_data_durable_before_returning() {
    let garage = Garage::start();
    garage.create_bucket("fsync");
    let m = mount(&garage, "fsync", "");
    let mut file = std::fs::File::create(m.path().join("data/log")).expect("create");
    file.write_all(b"first").expect("write");
    file.sync_all().expect("fsync");
    assert_eq!(garage.get_object("fsync", "log").await, b"first");
    file.write_all(b" second").expect("write");
    file.sync_data().expect("fdatasync");
    assert_eq!(garage.get_object("fsync", "log").await, b"first second");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trees_copied_in_with_cp_tar_and_rsync_come_back_byte_identical() {
    let garage = Garage::start();
    garage.create_bucket("trees");
    let m = mount(&garage, "trees", "");
    let root = m.path().join("data");
    let scratch = tempfile::tempdir().expect("scratch");
    let source = scratch.path().join("src");
    let files = sample_tree();
    write_tree(&source, &files);

    run(Command::new("cp")
        .arg("-r")
        .arg(&source)
        .arg(root.join("cp")));
    assert_tree(&root.join("cp"), &files);

    let tarball = scratch.path().join("tree.tar");
    run(Command::new("tar")
        .arg("-cf")
        .arg(&tarball)
        .arg("-C")
        .arg(&source)
        .arg("."));
    std::fs::create_dir(root.join("tar")).expect("mkdir tar");
    run(Command::new("tar")
        .arg("-xf")
        .arg(&tarball)
        .arg("-C")
        .arg(root.join("tar"))
        .arg("--no-same-owner"));
    assert_tree(&root.join("tar"), &files);

    // rsync writes each file to a temporary name and renames it into place.
    run(Command::new("rsync")
        .arg("-r")
        .arg(format!("{}/", source.display()))
        .arg(root.join("rsync")));
    assert_tree(&root.join("rsync"), &files);

    let out = scratch.path().join("out");
    run(Command::new("cp")
        .arg("-r")
        .arg(root.join("rsync"))
        .arg(&out));
    assert_tree(&out, &files);
    for (path, body) in &files {
        eventually_stored(&garage, "trees", &format!("tar/{path}"), body).await;
    }
    let leftovers: Vec<String> = garage
        .list_keys("trees", "rsync/")
        .await
        .into_iter()
        .filter(|k| k.contains("/."))
        .collect();
    assert!(
        leftovers.is_empty(),
        "rsync temporaries left: {leftovers:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn namespace_changes_through_the_mount() {
    let garage = Garage::start();
    garage.create_bucket("names");
    garage.put_object("names", "full/x", b"x".to_vec()).await;
    let m = mount(&garage, "names", "");
    let root = m.path().join("data");
    std::fs::write(root.join("a"), b"A").expect("write a");
    std::fs::rename(root.join("a"), root.join("b")).expect("rename");
    assert!(!root.join("a").exists());
    assert_eq!(std::fs::read(root.join("b")).expect("read b"), b"A");
    eventually_stored(&garage, "names", "b", b"A").await;
    assert_eq!(garage.try_get_object("names", "a").await, None);

    std::fs::create_dir(root.join("d")).expect("mkdir");
    std::fs::write(root.join("d/inner"), b"1").expect("write inner");
    let err = std::fs::remove_dir(root.join("d")).expect_err("not empty");
    assert_eq!(err.raw_os_error(), Some(libc::ENOTEMPTY));
    std::fs::remove_file(root.join("d/inner")).expect("unlink");
    std::fs::remove_dir(root.join("d")).expect("rmdir");
    assert!(!root.join("d").exists());

    // mv of a non-empty directory falls back to copy + delete on EXDEV.
    run(Command::new("mv")
        .arg(root.join("full"))
        .arg(root.join("moved")));
    assert_eq!(std::fs::read(root.join("moved/x")).expect("moved"), b"x");
    assert!(!root.join("full").exists());

    let err = std::fs::hard_link(root.join("b"), root.join("link")).expect_err("no links");
    assert_eq!(err.raw_os_error(), Some(libc::EPERM));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unlinked_open_file_is_readable_until_closed() {
    let garage = Garage::start();
    garage.create_bucket("unlinked");
    garage
        .put_object("unlinked", "f", b"still readable".to_vec())
        .await;
    let m = mount(&garage, "unlinked", "");
    let path = m.path().join("data/f");
    let mut file = std::fs::File::open(&path).expect("open");
    std::fs::remove_file(&path).expect("unlink");
    assert!(!path.exists());
    let mut body = Vec::new();
    file.read_to_end(&mut body).expect("read after unlink");
    assert_eq!(body, b"still readable");
    drop(file);
    wait_until(
        "the object is deleted at the last close",
        Duration::from_secs(30),
        async || garage.try_get_object("unlinked", "f").await.is_none(),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_writers_and_two_handles_on_one_file() {
    let garage = Garage::start();
    garage.create_bucket("concurrent");
    let m = mount(&garage, "concurrent", "");
    let root = m.path().join("data");
    let writers: Vec<_> = (0..6)
        .map(|i| {
            let path = root.join(format!("w{i}"));
            std::thread::spawn(move || {
                let body = pattern(MIB + i * 1000, i as u64);
                let mut file = std::fs::File::create(&path).expect("create");
                for chunk in body.chunks(64 * 1024) {
                    file.write_all(chunk).expect("write");
                }
                body
            })
        })
        .collect();
    let bodies: Vec<Vec<u8>> = writers
        .into_iter()
        .map(|w| w.join().expect("writer"))
        .collect();
    for (i, body) in bodies.iter().enumerate() {
        assert!(std::fs::read(root.join(format!("w{i}"))).expect("read") == *body);
        eventually_stored(&garage, "concurrent", &format!("w{i}"), body).await;
    }

    let path = root.join("shared");
    let a = std::fs::File::create(&path).expect("create a");
    let b = std::fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .expect("open b");
    a.write_all_at(b"aaaa", 0).expect("write a");
    b.write_all_at(b"bb", 2).expect("write b");
    drop(a);
    drop(b);
    assert_eq!(std::fs::read(&path).expect("read shared"), b"aabb");
    eventually_stored(&garage, "concurrent", "shared", b"aabb").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_operations_match_a_model_through_the_mount_and_after_a_remount() {
    let garage = Garage::start();
    garage.create_bucket("random");
    // A low threshold takes larger states through multipart (part copies, uploads) as well.
    let config = writable_config(
        &garage,
        "random",
        "multipart_upload_threshold_bytes: 5242880\n",
        "",
    );
    let mut m = MsfsMount::start(&config, "yaml").expect("mount");
    let path = m.path().join("data/model.bin");
    let mut model: Vec<u8> = Vec::new();
    let mut state = 0x1234_5678_9abc_def0_u64;
    let mut next = move |bound: u64| {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state % bound.max(1)
    };
    let open = |truncate: bool| {
        std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(truncate)
            .open(&path)
            .expect("open")
    };
    let mut file = open(true);
    for step in 0..2000 {
        match next(40) {
            0 => {
                let size = next(12 * MIB as u64);
                file.set_len(size).expect("ftruncate");
                model.resize(size as usize, 0);
            }
            1 => {
                file.sync_all().expect("fsync");
            }
            2 => {
                drop(file);
                file = open(false);
            }
            3 => {
                let offset = next(model.len() as u64 + 1);
                let len = next(64 * 1024) as usize;
                let mut buf = vec![0; len];
                let n = file.read_at(&mut buf, offset).expect("read");
                let end = (offset as usize + len).min(model.len());
                assert_eq!(
                    &buf[..n],
                    &model[offset as usize..end.max(offset as usize)],
                    "step {step}"
                );
            }
            _ => {
                let offset = match next(8) {
                    0 => next(model.len() as u64 + MIB as u64),
                    _ => next(model.len() as u64 + 1),
                } as usize;
                let len = 1 + next(32 * 1024) as usize;
                let data = pattern(len, step);
                file.write_all_at(&data, offset as u64).expect("write");
                if model.len() < offset + len {
                    model.resize(offset + len, 0);
                }
                model[offset..offset + len].copy_from_slice(&data);
            }
        }
    }
    file.seek(SeekFrom::Start(0)).expect("seek");
    let mut whole = Vec::new();
    file.read_to_end(&mut whole).expect("read all");
    assert!(whole == model, "content differs from the model");
    drop(file);
    assert_eq!(m.stop_with_umount().code(), Some(0), "{}", m.stderr_text());
    assert!(garage.get_object("random", "model.bin").await == model);

    let m = MsfsMount::start(&config, "yaml").expect("remount");
    let again = std::fs::read(m.path().join("data/model.bin")).expect("read after remount");
    assert!(again == model, "content differs after a remount");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_4k_rewrite_in_a_large_object_copies_the_rest_server_side() {
    let garage = Garage::start();
    garage.create_bucket("rewrite");
    let body = pattern(1024 * MIB, 5);
    garage.put_object("rewrite", "big", body.clone()).await;
    let m = mount(&garage, "rewrite", "");
    let (puts, parts, copies, gets) = (
        garage.s3_requests("PutObject"),
        garage.s3_requests("UploadPart"),
        garage.s3_requests("UploadPartCopy"),
        garage.s3_requests("GetObject"),
    );
    let patch = pattern(4096, 6);
    let at = 500 * MIB as u64 + 12_345;
    {
        let file = std::fs::OpenOptions::new()
            .write(true)
            .open(m.path().join("data/big"))
            .expect("open");
        file.write_all_at(&patch, at).expect("write");
        file.sync_all().expect("fsync");
    }
    let mut expected = body;
    expected[at as usize..at as usize + 4096].copy_from_slice(&patch);
    assert!(garage.get_object("rewrite", "big").await == expected);
    // 128 parts of 8 MiB: one uploaded (its untouched bytes read back once), 127 copied.
    assert_eq!(garage.s3_requests("UploadPartCopy") - copies, 127);
    assert_eq!(garage.s3_requests("UploadPart") - parts, 1);
    assert_eq!(garage.s3_requests("PutObject") - puts, 0);
    assert!(
        garage.s3_requests("GetObject") - gets <= 4,
        "no full download to rewrite 4 KiB"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_only_backends_still_refuse_writes_beside_writable_ones() {
    let garage = Garage::start();
    garage.create_bucket("rw-data");
    garage.create_bucket("ro-data");
    garage.put_object("ro-data", "keep", b"keep".to_vec()).await;
    let backends = [
        format!(
            "{}    readonly: false\n",
            s3_backend_yaml("rw", "rw-data", "", &garage)
        ),
        s3_backend_yaml("ro", "ro-data", "", &garage),
    ];
    let m = MsfsMount::start(&config_yaml_with("", &backends), "yaml").expect("mount");
    std::fs::write(m.path().join("rw/new"), b"ok").expect("write rw");
    let err = std::fs::write(m.path().join("ro/new"), b"no").expect_err("ro");
    assert_eq!(err.raw_os_error(), Some(libc::EROFS));
    let err = std::fs::remove_file(m.path().join("ro/keep")).expect_err("ro unlink");
    assert_eq!(err.raw_os_error(), Some(libc::EROFS));
    eventually_stored(&garage, "rw-data", "new", b"ok").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn promoted_writes_are_read_back_without_a_download() {
    let garage = Garage::start();
    garage.create_bucket("promote");
    let config = writable_config(
        &garage,
        "promote",
        &format!("write_cache_promotion: true\ncache_line_size: {MIB}\ncache_lines: 32\n"),
        "    flush_on_close: true\n",
    );
    let m = MsfsMount::start(&config, "yaml").expect("mount");
    let body = pattern(3 * MIB + 5, 21);
    std::fs::write(m.path().join("data/p.bin"), &body).expect("write");
    let before = garage.s3_requests("GetObject");
    assert!(crate::common::read_direct(&m.path().join("data/p.bin")) == body);
    assert_eq!(
        garage.s3_requests("GetObject") - before,
        0,
        "served from the bytes admitted at commit"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn appends_and_exclusive_creates_behave_as_on_a_local_filesystem() {
    let garage = Garage::start();
    garage.create_bucket("append");
    garage.put_object("append", "log", b"one\n".to_vec()).await;
    let m = mount(&garage, "append", "");
    let path = m.path().join("data/log");
    for line in ["two\n", "three\n"] {
        let mut file = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .expect("open for append");
        file.write_all(line.as_bytes()).expect("append");
    }
    assert_eq!(std::fs::read(&path).expect("read"), b"one\ntwo\nthree\n");
    let err = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&path)
        .expect_err("O_EXCL on an existing file");
    assert_eq!(err.raw_os_error(), Some(libc::EEXIST));
    let fresh = m.path().join("data/fresh");
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&fresh)
        .expect("O_EXCL on a new name");
    eventually_stored(&garage, "append", "log", b"one\ntwo\nthree\n").await;
    eventually_stored(&garage, "append", "fresh", b"").await;
}

/// A file this mount has just written is not asked of the store again: within the TTL, `stat`
/// a read and a rename of it cost no HEAD, whether the close waited for the commit
/// (`flush_on_close`) or it landed in the background, and they show what was written. Renamed
/// away, the name is gone and the new one shows the same bytes, again without a HEAD.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_just_written_is_not_asked_of_the_store_again() {
    let garage = Garage::start();
    for (bucket, extra) in [
        ("landed-on-close", "    flush_on_close: true\n"),
        ("landed-in-background", ""),
    ] {
        garage.create_bucket(bucket);
        let config = writable_config(&garage, bucket, "entry_attr_ttl: 60000\n", extra);
        let m = MsfsMount::start(&config, "yaml").expect("mount");
        // A directory this mount made: a lookup of a name it does not hold asks nothing either.
        let dir = m.path().join("data/d");
        std::fs::create_dir(&dir).expect("mkdir");
        let path = dir.join("f.txt");
        std::fs::write(&path, b"hello").expect("write");
        eventually_stored(&garage, bucket, "d/f.txt", b"hello").await;

        let heads = garage.s3_requests("HeadObject");
        let seen = std::fs::metadata(&path).expect("stat");
        assert_eq!(seen.len(), 5, "{bucket}: the written size");
        assert_eq!(crate::common::read_direct(&path), b"hello", "{bucket}");
        let again = std::fs::metadata(&path).expect("stat again");
        assert_eq!(
            again.modified().expect("mtime"),
            seen.modified().expect("mtime"),
            "{bucket}: the time stays what it was"
        );
        assert_eq!(
            garage.s3_requests("HeadObject") - heads,
            0,
            "{bucket}: the commit said what the store holds"
        );

        let moved = dir.join("g.txt");
        std::fs::rename(&path, &moved).expect("rename");
        assert_eq!(
            garage.s3_requests("HeadObject") - heads,
            0,
            "{bucket}: the rename copies the version the commit left"
        );
        assert!(!path.exists(), "{bucket}: the old name is gone");
        assert_eq!(std::fs::metadata(&moved).expect("stat").len(), 5);
        assert_eq!(crate::common::read_direct(&moved), b"hello", "{bucket}");
        assert_eq!(
            garage.s3_requests("HeadObject") - heads,
            0,
            "{bucket}: the copy said what the new name holds"
        );
        assert_eq!(garage.try_get_object(bucket, "d/f.txt").await, None);
        assert_eq!(garage.get_object(bucket, "d/g.txt").await, b"hello");
    }
}
