//! The line cache through real FUSE against a real garage: bytes are right in every storage mode
//! (RAM-over-disk tiers included),
//! concurrent readers fetch each line once, repeat reads never reach the backend, and a working
//! set larger than the cache still reads correctly. GET counts come from garage's own metrics.

use crate::common::{Garage, MsfsMount, config_yaml_with, pattern, read_direct, s3_backend_yaml};

const MIB: usize = 1 << 20;

fn mount_with_cache(garage: &Garage, bucket: &str, storage: &str, lines: u32) -> MsfsMount {
    let cache = format!(
        "cache_storage: {storage}\ncache_line_size: {MIB}\ncache_lines: {lines}\ncache_lines_to_prefetch: 4\n"
    );
    let config = config_yaml_with(&cache, &[s3_backend_yaml("data", bucket, "", garage)]);
    MsfsMount::start(&config, "yaml").expect("mount")
}

/// `tiered`: a quarter of `cache_lines` more in RAM (the default `cache_ram_lines`).
const MODES: [&str; 4] = ["ram", "mapped-file", "per-inode-file", "tiered"];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_readers_fetch_each_line_once_in_every_storage_mode() {
    let garage = Garage::start();
    garage.create_bucket("single-flight");
    let body = pattern(8 * MIB + 12_345, 7);
    garage
        .put_object("single-flight", "obj", body.clone())
        .await;
    for storage in MODES {
        let mount = mount_with_cache(&garage, "single-flight", storage, 64);
        let path = mount.path().join("data/obj");
        let before = garage.s3_requests("GetObject");
        let readers: Vec<_> = (0..6)
            .map(|_| {
                let path = path.clone();
                std::thread::spawn(move || read_direct(&path))
            })
            .collect();
        for reader in readers {
            assert!(
                reader.join().expect("reader") == body,
                "{storage}: bytes differ"
            );
        }
        let gets = garage.s3_requests("GetObject") - before;
        // 9 lines of 1 MiB: each fetched once, whoever asked first.
        assert_eq!(gets, 9, "{storage}: {gets} GETs for 9 lines");
        // A repeat read is served from the cache.
        assert!(read_direct(&path) == body);
        assert_eq!(
            garage.s3_requests("GetObject") - before,
            9,
            "{storage}: repeat read hit the backend"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_working_set_larger_than_the_cache_reads_correctly_in_every_storage_mode() {
    let garage = Garage::start();
    garage.create_bucket("eviction");
    let objects: Vec<Vec<u8>> = (0..3)
        .map(|i| pattern(10 * MIB + i * 1000, i as u64))
        .collect();
    for (i, body) in objects.iter().enumerate() {
        garage
            .put_object("eviction", &format!("obj{i}"), body.clone())
            .await;
    }
    for storage in MODES {
        // 16 lines of 1 MiB hold about half of the 30 MiB read twice over.
        let mount = mount_with_cache(&garage, "eviction", storage, 16);
        let before = garage.s3_requests("GetObject");
        for _pass in 0..2 {
            for (i, body) in objects.iter().enumerate() {
                let got = read_direct(&mount.path().join(format!("data/obj{i}")));
                assert!(got == *body, "{storage}: obj{i} differs");
            }
        }
        let gets = garage.s3_requests("GetObject") - before;
        // Lines were evicted and fetched again: more GETs than the 33 lines in the objects.
        assert!(
            gets > 33,
            "{storage}: only {gets} GETs; was anything evicted?"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_live_mount_lets_the_kernel_read_a_mib_ahead() {
    use std::os::unix::fs::MetadataExt;
    let garage = Garage::start();
    garage.create_bucket("window");
    let mount = mount_with_cache(&garage, "window", "ram", 16);
    let dev = std::fs::metadata(mount.path()).expect("stat mount").dev();
    let setting = format!(
        "/sys/class/bdi/{}:{}/read_ahead_kb",
        libc::major(dev),
        libc::minor(dev)
    );
    // The kernel starts every FUSE mount at 128 KiB; msfs raises it just after the handshake.
    crate::common::wait_until(
        "the mount's read-ahead is 1 MiB",
        std::time::Duration::from_secs(10),
        async || std::fs::read_to_string(&setting).is_ok_and(|kib| kib.trim() == "1024"),
    )
    .await;
}

/// `cache_persistent`: a remount (a restart of msfs) reads what the last process cached
/// without a GET; a kill in the middle never makes it serve wrong bytes; and an object replaced
/// while no msfs ran is read anew, never from the lines kept for its old version.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_persistent_cache_outlives_the_process_and_never_serves_an_old_version() {
    persistent_cache_outlives_the_process("cache_storage: mapped-file\n", 0).await;
}

/// The same with `tiered`: its disk tier is kept; what was only in its RAM tier (two lines at
/// most) is fetched again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tiered_persistent_cache_keeps_its_disk_tier() {
    persistent_cache_outlives_the_process("cache_storage: tiered\ncache_ram_lines: 2\n", 2).await;
}

/// What both tests above check, with `storage` (the cache_storage lines of the config) and at
/// most `refetched` GETs for the object read again after the restart.
async fn persistent_cache_outlives_the_process(storage: &str, refetched: u64) {
    let garage = Garage::start();
    garage.create_bucket("kept-lines");
    let body = pattern(8 * MIB + 12_345, 11);
    let other = pattern(3 * MIB + 7, 12);
    garage.put_object("kept-lines", "obj", body.clone()).await;
    garage
        .put_object("kept-lines", "other", other.clone())
        .await;
    let cache_parent = tempfile::tempdir().expect("cache parent");
    let cache = format!(
        "{storage}cache_line_size: {MIB}\ncache_lines: 64\n\
         cache_lines_to_prefetch: 4\ncache_persistent: true\ncache_dir_path: {}\n",
        cache_parent.path().display()
    );
    let config = config_yaml_with(
        &cache,
        &[s3_backend_yaml("data", "kept-lines", "", &garage)],
    );
    let start = || MsfsMount::start(&config, "yaml").expect("mount");

    let mut first = start();
    assert!(read_direct(&first.path().join("data/obj")) == body);
    first.stop_with_umount();

    let before = garage.s3_requests("GetObject");
    let mut second = start();
    assert!(read_direct(&second.path().join("data/obj")) == body);
    let fetched = garage.s3_requests("GetObject") - before;
    assert!(
        fetched <= refetched,
        "the restarted msfs fetched lines the last one had cached: {fetched} GETs"
    );
    // Killed right after a read: whatever of it was indexed or not, nothing wrong is served.
    assert!(read_direct(&second.path().join("data/other")) == other);
    second.stop_with_signal(libc::SIGKILL);
    drop(second);
    let mut third = start();
    assert!(read_direct(&third.path().join("data/other")) == other);
    assert!(read_direct(&third.path().join("data/obj")) == body);
    third.stop_with_umount();

    // Replaced while no msfs runs: same size, other bytes.
    let replaced = pattern(8 * MIB + 12_345, 13);
    garage
        .put_object("kept-lines", "obj", replaced.clone())
        .await;
    let before = garage.s3_requests("GetObject");
    let fourth = start();
    assert!(
        read_direct(&fourth.path().join("data/obj")) == replaced,
        "bytes of the old version were served"
    );
    assert!(garage.s3_requests("GetObject") - before >= 9);
}

/// An upgrade (`msfs mount --takeover` beside the running daemon) keeps the persistent cache:
/// the daemon handing over writes and closes its index before it exits, and the successor
/// reads what it cached without a GET.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upgrade_keeps_the_persistent_cache() {
    let garage = Garage::start();
    garage.create_bucket("kept-upgrade");
    let body = pattern(6 * MIB + 99, 14);
    garage.put_object("kept-upgrade", "obj", body.clone()).await;
    let cache_parent = tempfile::tempdir().expect("cache parent");
    let cache = format!(
        "cache_storage: mapped-file\ncache_line_size: {MIB}\ncache_lines: 32\n\
         cache_persistent: true\ncache_dir_path: {}\n",
        cache_parent.path().display()
    );
    let config = config_yaml_with(
        &cache,
        &[s3_backend_yaml("data", "kept-upgrade", "", &garage)],
    );
    let mut mount = MsfsMount::start(&config, "yaml").expect("mount");
    assert!(read_direct(&mount.path().join("data/obj")) == body);

    let (status, old_log) = mount.upgrade().expect("upgrade");
    assert!(status.success(), "{old_log}");
    let log = mount.stdout_text();
    assert!(
        !log.contains("another msfs process keeps its cache lines here"),
        "the successor found the cache still held: {log}"
    );
    let before = garage.s3_requests("GetObject");
    assert!(read_direct(&mount.path().join("data/obj")) == body);
    assert_eq!(
        garage.s3_requests("GetObject") - before,
        0,
        "the successor fetched lines the daemon it succeeded had cached"
    );
    assert!(mount.stop_with_umount().success());
}

fn msfs_warm(args: &[&std::path::Path], flags: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_msfs"))
        .arg("warm")
        .args(flags)
        .args(args)
        .output()
        .expect("run msfs warm")
}

/// `msfs warm`: a tree warmed through the mount is then read without a GET; a second warm
/// finds it all cached; a directory needs --recursive, a file elsewhere is named, and more
/// than the cache holds is refused before anything is fetched.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn msfs_warm_fetches_a_tree_so_that_reading_it_needs_no_get() {
    let garage = Garage::start();
    garage.create_bucket("warm-tree");
    let objects = [
        ("dir/a", pattern(3 * MIB + 5, 1)),
        ("dir/sub/b", pattern(MIB, 2)),
        ("dir/sub/c", pattern(10, 3)),
        ("big", pattern(20 * MIB, 4)),
    ];
    for (key, body) in &objects {
        garage.put_object("warm-tree", key, body.clone()).await;
    }
    let mount = mount_with_cache(&garage, "warm-tree", "mapped-file", 16);
    let dir = mount.path().join("data/dir");

    let refused = msfs_warm(&[&dir], &[]);
    assert!(!refused.status.success());
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(stderr.contains("add --recursive"), "{stderr}");

    let before = garage.s3_requests("GetObject");
    let warmed = msfs_warm(&[&dir], &["--recursive", "--jobs", "3"]);
    let stdout = String::from_utf8_lossy(&warmed.stdout);
    assert!(
        warmed.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&warmed.stderr)
    );
    assert!(stdout.contains("warmed 3 files"), "{stdout}");
    let fetched = garage.s3_requests("GetObject") - before;
    assert!(fetched >= 4, "{fetched} GETs for 5 lines");
    for (key, body) in &objects[..3] {
        assert!(
            read_direct(&mount.path().join("data").join(key)) == *body,
            "{key}"
        );
    }
    assert_eq!(
        garage.s3_requests("GetObject") - before,
        fetched,
        "a warmed file was fetched again when read"
    );
    let again = msfs_warm(&[&dir], &["-r"]);
    let stdout = String::from_utf8_lossy(&again.stdout);
    assert!(stdout.contains("100% was already cached"), "{stdout}");
    assert_eq!(garage.s3_requests("GetObject") - before, fetched);

    // 20 MiB into a cache of 16 lines of 1 MiB.
    let too_big = msfs_warm(&[&mount.path().join("data/big")], &[]);
    assert!(!too_big.status.success());
    let stderr = String::from_utf8_lossy(&too_big.stderr);
    assert!(stderr.contains("would not fit in the cache"), "{stderr}");
    assert_eq!(garage.s3_requests("GetObject") - before, fetched);

    let elsewhere = tempfile::NamedTempFile::new().expect("temp file");
    let outside = msfs_warm(&[elsewhere.path()], &[]);
    let stderr = String::from_utf8_lossy(&outside.stderr);
    assert!(stderr.contains("not a file of an msfs mount"), "{stderr}");
}

/// The `warm` backend key: the listed directory and file are fetched at mount, in the
/// background, so that reading them needs no GET; what is not listed is not fetched.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backend_warm_list_is_fetched_at_mount() {
    let garage = Garage::start();
    garage.create_bucket("warm-at-mount");
    let listed = [
        ("train/a", pattern(2 * MIB + 1, 1)),
        ("train/deep/b", pattern(MIB, 2)),
        ("labels.csv", pattern(100, 3)),
    ];
    let other = pattern(MIB, 4);
    for (key, body) in &listed {
        garage.put_object("warm-at-mount", key, body.clone()).await;
    }
    garage
        .put_object("warm-at-mount", "other", other.clone())
        .await;
    let cache = format!("cache_storage: mapped-file\ncache_line_size: {MIB}\ncache_lines: 64\n");
    let backend = format!(
        "{}    warm: [train/, labels.csv]\n",
        s3_backend_yaml("data", "warm-at-mount", "", &garage)
    );
    let mount = MsfsMount::start(&config_yaml_with(&cache, &[backend]), "yaml").expect("mount");
    crate::common::wait_until(
        "the warm at mount is done",
        std::time::Duration::from_secs(60),
        async || mount.stdout_text().contains("warm at mount done"),
    )
    .await;
    assert!(
        mount.stdout_text().contains("objects=3"),
        "{}",
        mount.stdout_text()
    );
    let before = garage.s3_requests("GetObject");
    for (key, body) in &listed {
        assert!(
            read_direct(&mount.path().join("data").join(key)) == *body,
            "{key}"
        );
    }
    assert_eq!(
        garage.s3_requests("GetObject") - before,
        0,
        "a warmed object was fetched when read"
    );
    assert!(read_direct(&mount.path().join("data/other")) == other);
    assert!(
        garage.s3_requests("GetObject") > before,
        "other was warmed too"
    );
}
