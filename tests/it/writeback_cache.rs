//! `fuse_writeback_cache: true` (issue #21): the kernel keeps written pages and sends them
//! merged, so many small `write()`s reach msfs as a few `max_write`-sized requests, and what
//! the kernel then owns (a cached file's size and mtime, `O_APPEND`, the partial pages it reads
//! back through a write-only descriptor) still adds up to the bytes the application wrote.
//!
//! Every check compares the object in garage with a model of the writes, after the last close
//! (and, for `fsync`, while the file is still open). A mount without the option runs the same
//! small writes, so the merge count is shown to depend on the option rather than assumed.

use std::fs::OpenOptions;
use std::io::Write;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::time::Duration;

use crate::common::{
    Garage, MsfsMount, config_yaml_with, free_port, http_get, pattern, s3_backend_yaml, wait_until,
};

const MIB: usize = 1 << 20;

/// A writable backend `data` over `bucket`, with the kernel's writeback cache on or off and a
/// metrics endpoint on `port` (to count the FUSE write requests).
fn mount(garage: &Garage, bucket: &str, writeback: bool, port: u16) -> MsfsMount {
    let top = format!(
        "fuse_writeback_cache: {writeback}\nendpoint: http://127.0.0.1:{port}\n\
         cache_storage: ram\ncache_line_size: {MIB}\ncache_lines: 32\n"
    );
    let backend = format!(
        "{}    readonly: false\n",
        s3_backend_yaml("data", bucket, "", garage)
    );
    MsfsMount::start(&config_yaml_with(&top, &[backend]), "yaml").expect("mount")
}

/// FUSE WRITE requests the mount has answered so far.
fn write_requests(port: u16) -> u64 {
    let (status, text) = http_get(port, "/metrics").expect("scrape /metrics");
    assert_eq!(status, 200, "{text}");
    text.lines()
        .find_map(|line| line.strip_prefix("msfs_fuse_request_seconds_count{op=\"write\"} "))
        .map_or(0, |v| v.trim().parse::<f64>().expect("a number") as u64)
}

/// 10,000 unbuffered 100-byte `write()`s into one new file; returns the FUSE WRITE requests
/// they cost and checks the object.
async fn small_writes(garage: &Garage, mount: &MsfsMount, bucket: &str, port: u16) -> u64 {
    let body = pattern(1_000_000, 3);
    let before = write_requests(port);
    let mut file = std::fs::File::create(mount.path().join("data/small-writes")).expect("create");
    for chunk in body.chunks(100) {
        file.write_all(chunk).expect("write");
    }
    drop(file);
    let requests = write_requests(port) - before;
    wait_until(
        "the file is committed",
        Duration::from_secs(60),
        async || {
            garage
                .try_get_object(bucket, "small-writes")
                .await
                .as_deref()
                == Some(&body[..])
        },
    )
    .await;
    requests
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn small_writes_reach_msfs_merged_only_with_the_writeback_cache() {
    let garage = Garage::start();
    let mut counts = Vec::new();
    for writeback in [true, false] {
        let bucket = format!("merge-{writeback}");
        garage.create_bucket(&bucket);
        let port = free_port();
        let mut m = mount(&garage, &bucket, writeback, port);
        counts.push(small_writes(&garage, &m, &bucket, port).await);
        assert_eq!(m.stop_with_umount().code(), Some(0), "{}", m.stderr_text());
    }
    let (merged, unmerged) = (counts[0], counts[1]);
    println!(
        "FUSE WRITE requests for 10,000 writes of 100 bytes: {merged} with the writeback cache, {unmerged} without"
    );
    // 1,000,000 bytes in 128 KiB requests is 8; the kernel may split at page-cache pressure.
    assert!(
        merged <= 100,
        "with the writeback cache: {merged} WRITE requests"
    );
    assert!(
        unmerged >= 10_000,
        "without it every write() is a request: {unmerged}"
    );
}

/// Random, unaligned writes (the kernel reads the partial pages back through the write-only
/// descriptor), appends, truncates and an fsync while open, each checked in the store.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_the_kernel_owns_still_adds_up_to_the_bytes_written() {
    let garage = Garage::start();
    garage.create_bucket("owned");
    let original = pattern(8 * MIB, 5);
    garage.put_object("owned", "base", original.clone()).await;
    let port = free_port();
    let mut m = mount(&garage, "owned", true, port);
    let dir = m.path().join("data");

    // Unaligned writes into an existing object through O_WRONLY, past its end too.
    let mut model = original;
    let file = OpenOptions::new()
        .write(true)
        .open(dir.join("base"))
        .expect("open write-only");
    let mut seed = 17u64;
    for i in 0..300u64 {
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let offset = (seed >> 20) as usize % (model.len() + 4096);
        let len = 1 + (seed >> 8) as usize % 9000;
        let data = pattern(len, i);
        file.write_all_at(&data, offset as u64).expect("write_at");
        if model.len() < offset + len {
            model.resize(offset + len, 0);
        }
        model[offset..offset + len].copy_from_slice(&data);
    }
    // fsync commits while the file stays open.
    file.sync_all().expect("fsync");
    assert!(
        garage.get_object("owned", "base").await == model,
        "after fsync the store holds every write"
    );
    // Shrink, then grow with a hole, through the descriptor.
    file.set_len(3 * MIB as u64 + 5).expect("ftruncate down");
    model.truncate(3 * MIB + 5);
    file.set_len(4 * MIB as u64).expect("ftruncate up");
    model.resize(4 * MIB, 0);
    drop(file);
    assert_eq!(
        std::fs::metadata(dir.join("base")).expect("stat").len(),
        model.len() as u64
    );

    // O_APPEND: the kernel puts each write at its own idea of the end.
    std::fs::write(dir.join("log"), b"first\n").expect("create log");
    for line in ["second\n", "third\n"] {
        let mut log = OpenOptions::new()
            .append(true)
            .custom_flags(libc::O_WRONLY)
            .open(dir.join("log"))
            .expect("open append");
        log.write_all(line.as_bytes()).expect("append");
    }
    // Dirty pages read back through another descriptor before any commit.
    assert_eq!(
        std::fs::read(dir.join("log")).expect("read log"),
        b"first\nsecond\nthird\n"
    );

    assert_eq!(m.stop_with_umount().code(), Some(0), "{}", m.stderr_text());
    assert!(
        garage.get_object("owned", "base").await == model,
        "random writes and truncates"
    );
    assert_eq!(
        garage.get_object("owned", "log").await,
        b"first\nsecond\nthird\n"
    );
}

/// The writeback cache does not cost a shell redirect its one PutObject per file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shell_redirect_still_costs_one_put_per_file() {
    let garage = Garage::start();
    garage.create_bucket("redirect");
    let port = free_port();
    let mut m = mount(&garage, "redirect", true, port);
    let dir = m.path().join("data");
    let puts = garage.s3_requests("PutObject");
    let status = std::process::Command::new("bash")
        .arg("-c")
        .arg("for i in $(seq 20); do echo \"file $i\" > \"$0/s$i\"; done")
        .arg(&dir)
        .status()
        .expect("bash");
    assert!(status.success());
    assert_eq!(m.stop_with_umount().code(), Some(0), "{}", m.stderr_text());
    assert_eq!(garage.s3_requests("PutObject") - puts, 20);
    for i in 1..=20 {
        assert_eq!(
            garage.get_object("redirect", &format!("s{i}")).await,
            format!("file {i}\n").into_bytes()
        );
    }
}
