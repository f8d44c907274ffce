//! `fuse_io_uring: true`: the mount is served over FUSE over io_uring (Linux 6.14 and later)
//! — requests reach msfs through per-CPU rings, not `read(2)` on `/dev/fuse` — and everything a
//! program does through it works as over `/dev/fuse`: large and small writes land, reads
//! (buffered, `O_DIRECT`, many at once, more than the rings hold) return what was written,
//! listings, renames and unlinks answer, an unmount ends the daemon; and a daemon killed while
//! serving is taken over, its successor registering rings of its own (real garage, real FUSE).
//!
//! The transport is seen from outside: the daemon's threads `fuser-ring-N` and its log line.

use std::io::{Read, Seek, SeekFrom};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::time::Duration;

use crate::common::mount::{abort_fuse_connection, daemon_log, within};
use crate::common::{Garage, MsfsMount, config_yaml_with, pattern, s3_backend_yaml, wait_until};

const MIB: usize = 1 << 20;
const ENABLE_URING: &str = "/sys/module/fuse/parameters/enable_uring";
const HANG_LIMIT: Duration = Duration::from_secs(120);
const LANDING: Duration = Duration::from_secs(60);
const RINGS_UP: Duration = Duration::from_secs(10);

/// Whether this kernel has FUSE over io_uring at all; without it the tests say so and pass
/// nothing off as tested.
fn kernel_has_io_uring() -> bool {
    let present = Path::new(ENABLE_URING).exists();
    if !present {
        eprintln!("SKIPPED: this kernel has no {ENABLE_URING} (FUSE over io_uring)");
    }
    present
}

fn start(bucket: &str) -> (Garage, MsfsMount) {
    let garage = Garage::start();
    garage.create_bucket(bucket);
    let top = format!(
        "fuse_io_uring: true\ncache_storage: ram\ncache_line_size: {MIB}\ncache_lines: 64\n\
         max_write: {MIB}\nentry_attr_ttl: 500\n"
    );
    let backend = format!(
        "{}    readonly: false\n",
        s3_backend_yaml("data", bucket, "", &garage)
    );
    let mount = MsfsMount::start(&config_yaml_with(&top, &[backend]), "yaml").expect("mount");
    (garage, mount)
}

/// The names of the daemon's threads that serve an io_uring queue.
fn ring_threads(pid: u32) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(format!("/proc/{pid}/task"))
        .expect("the daemon's threads")
        .filter_map(|task| {
            let comm = task.ok()?.path().join("comm");
            let name = std::fs::read_to_string(comm).ok()?.trim().to_string();
            let queue = name.strip_prefix("fuser-ring-")?;
            queue.bytes().all(|b| b.is_ascii_digit()).then_some(name)
        })
        .collect();
    names.sort();
    names
}

fn possible_cpus() -> usize {
    let text = std::fs::read_to_string("/sys/devices/system/cpu/possible").expect("cpus");
    text.trim()
        .split(',')
        .map(|range| {
            let (a, b) = range.split_once('-').unwrap_or((range, range));
            b.parse::<usize>().unwrap() - a.parse::<usize>().unwrap() + 1
        })
        .sum()
}

/// Waits until the daemon runs one ring thread per possible CPU: the session starts them once
/// mounted (requests wait in the kernel until every queue has registered).
async fn assert_served_over_io_uring(mount: &MsfsMount) {
    let cpus = possible_cpus();
    wait_until("one ring thread per possible CPU", RINGS_UP, async || {
        ring_threads(mount.pid()).len() == cpus
    })
    .await;
    let rings = ring_threads(mount.pid());
    assert_eq!(
        rings.len(),
        cpus,
        "ring threads: {rings:?}\n{}",
        daemon_log(mount)
    );
}

/// 4 KiB `O_DIRECT` reads at `offsets` of `path`, each compared with `expected`.
fn direct_reads_match(path: &Path, expected: &[u8], offsets: &[usize]) {
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECT)
        .open(path)
        .expect("open O_DIRECT");
    // O_DIRECT wants an aligned buffer: a page-aligned slice of a larger one.
    let mut raw = vec![0u8; 8192];
    let at = raw.as_ptr().align_offset(4096);
    let buf = &mut raw[at..at + 4096];
    for &offset in offsets {
        file.seek(SeekFrom::Start(offset as u64)).expect("seek");
        file.read_exact(buf).expect("an O_DIRECT read");
        assert!(
            buf == &expected[offset..offset + 4096],
            "O_DIRECT read at {offset} differs"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mount_served_over_io_uring_does_what_dev_fuse_does() {
    if !kernel_has_io_uring() {
        return;
    }
    let (garage, mut mount) = start("uring");
    assert_served_over_io_uring(&mount).await;
    assert!(
        mount.stdout_text().contains("serving over io_uring"),
        "{}",
        mount.stdout_text()
    );
    let root = mount.path().join("data");

    let work = root.clone();
    let (big, smalls) = within(&mount, HANG_LIMIT, "writes and reads", move || {
        // Larger than a ring entry's payload (max_write): the kernel splits it.
        let big = pattern(5 * MIB + 123, 1);
        std::fs::write(work.join("big.bin"), &big).expect("write big.bin");
        std::fs::create_dir(work.join("dir")).expect("mkdir");
        let smalls: Vec<Vec<u8>> = (0..50).map(|i| pattern(100 + i * 37, i as u64)).collect();
        for (i, bytes) in smalls.iter().enumerate() {
            std::fs::write(work.join(format!("dir/s{i}")), bytes).expect("write a small file");
        }
        assert_eq!(std::fs::read(work.join("big.bin")).expect("read"), big);
        let offsets: Vec<usize> = (0..200).map(|i| (i * 7919 * 4096) % (5 * MIB)).collect();
        direct_reads_match(&work.join("big.bin"), &big, &offsets);
        (big, smalls)
    });

    // Many callers at once, more than the rings' entries (16 a CPU): the rest wait in the
    // kernel and are fetched as entries commit.
    let work = root.clone();
    let expected = big.clone();
    within(&mount, HANG_LIMIT, "96 readers at once", move || {
        let readers: Vec<_> = (0..96)
            .map(|i| {
                let path = work.join("big.bin");
                let expected = expected.clone();
                std::thread::spawn(move || {
                    let offsets: Vec<usize> =
                        (0..20).map(|j| ((i * 31 + j) * 4096) % (5 * MIB)).collect();
                    direct_reads_match(&path, &expected, &offsets);
                })
            })
            .collect();
        for reader in readers {
            reader.join().expect("a reader");
        }
    });

    let work = root.clone();
    within(
        &mount,
        HANG_LIMIT,
        "listing, renames and unlinks",
        move || {
            let mut names: Vec<String> = std::fs::read_dir(work.join("dir"))
                .expect("readdir")
                .map(|e| e.expect("entry").file_name().into_string().unwrap())
                .collect();
            names.sort();
            let mut want: Vec<String> = (0..50).map(|i| format!("s{i}")).collect();
            want.sort();
            assert_eq!(names, want);
            std::fs::rename(work.join("dir/s0"), work.join("dir/renamed")).expect("rename");
            std::fs::remove_file(work.join("dir/s1")).expect("unlink");
            assert_eq!(
                std::fs::metadata(work.join("dir/s2")).expect("stat").len(),
                100 + 2 * 37
            );
            let missing = std::fs::metadata(work.join("dir/s1")).expect_err("s1 was unlinked");
            assert_eq!(missing.raw_os_error(), Some(libc::ENOENT));
        },
    );

    wait_until("every object lands", LANDING, async || {
        garage.try_get_object("uring", "big.bin").await.as_deref() == Some(&big[..])
            && garage
                .try_get_object("uring", "dir/renamed")
                .await
                .as_deref()
                == Some(&smalls[0][..])
            && garage.try_get_object("uring", "dir/s1").await.is_none()
            && garage.try_get_object("uring", "dir/s49").await.as_deref() == Some(&smalls[49][..])
    })
    .await;
    assert!(
        mount.stop_with_umount().success(),
        "the daemon ends with its unmount\n{}",
        daemon_log(&mount)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_daemon_serving_over_io_uring_is_taken_over_by_one_with_rings_of_its_own() {
    if !kernel_has_io_uring() {
        return;
    }
    let (garage, mut mount) = start("uringtake");
    garage
        .put_object("uringtake", "before.txt", b"before the kill\n".to_vec())
        .await;
    assert_served_over_io_uring(&mount).await;
    let root = mount.path().join("data");
    let work = root.clone();
    within(&mount, HANG_LIMIT, "a read before the kill", move || {
        assert_eq!(
            std::fs::read(work.join("before.txt")).expect("read"),
            b"before the kill\n"
        );
    });

    // The mount appears before its connection is handed to the fd holder: a kill in between
    // would leave nothing to take over (on a loaded machine it happens).
    wait_until(
        "the fd holder keeps the connection",
        HANG_LIMIT,
        async || daemon_log(&mount).contains("the fd holder keeps the mount's connection"),
    )
    .await;
    let status = mount.stop_with_signal(libc::SIGKILL);
    assert!(!status.success(), "SIGKILL ends the daemon: {status}");
    assert!(
        crate::common::mount::is_mounted(mount.path()),
        "the mount outlives its daemon"
    );
    // Asked while nobody serves: waits in the kernel for the successor's rings.
    let late = std::process::Command::new("cat")
        .arg(root.join("before.txt"))
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("spawn cat");
    if let Err(e) = mount.take_over() {
        panic!("take over: {e}\n{}", abort_fuse_connection(mount.path()));
    }
    assert_served_over_io_uring(&mount).await;
    assert!(
        mount
            .stdout_text()
            .contains("taking over a connection served over io_uring"),
        "{}",
        mount.stdout_text()
    );
    let late = within(
        &mount,
        HANG_LIMIT,
        "the read asked while none served",
        || late.wait_with_output(),
    )
    .expect("cat");
    assert!(late.status.success(), "cat failed across the takeover");
    assert_eq!(late.stdout, b"before the kill\n");

    let work = root.clone();
    let after = pattern(3 * MIB, 9);
    let written = after.clone();
    within(
        &mount,
        HANG_LIMIT,
        "a write after the takeover",
        move || {
            std::fs::write(work.join("after.bin"), &written).expect("write after.bin");
            assert_eq!(
                std::fs::read(work.join("after.bin")).expect("read"),
                written
            );
        },
    );
    wait_until("after.bin lands", LANDING, async || {
        garage
            .try_get_object("uringtake", "after.bin")
            .await
            .as_deref()
            == Some(&after[..])
    })
    .await;
    assert!(mount.stop_with_umount().success());
}
