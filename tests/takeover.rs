//! A daemon killed with SIGKILL is invisible to the programs using its mount: the fd holder
//! keeps the FUSE connection, requests wait for the successor (`msfs mount --takeover`), and
//! open files, open directories and written bytes carry on with it (real garage, real FUSE).
//!
//! Every step through the mount runs under a hang guard ([`within`]): a step that never
//! finishes aborts the connection through fusectl and fails the test, saying what hung.

mod common;

use std::collections::BTreeSet;
use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::app::{HoldingApp, md5_hex};
use common::mount::{abort_fuse_connection, within};
use common::{Garage, MsfsMount, config_yaml_with, pattern, s3_backend_yaml, wait_until};

const MIB: usize = 1 << 20;
/// Files in the directory read across the kill: more than one getdents buffer (32 KiB) holds.
const DIR_FILES: usize = 1_500;
const HANG_LIMIT: Duration = Duration::from_secs(120);
const LANDING: Duration = Duration::from_secs(180);

fn start(bucket: &str) -> (Garage, MsfsMount) {
    let garage = Garage::start();
    garage.create_bucket(bucket);
    let top = format!(
        "cache_storage: ram\ncache_line_size: {MIB}\ncache_lines: 32\nmax_write: {MIB}\n\
         fuse_request_stall_warn_secs: 10\n"
    );
    let backend = format!(
        "{}    readonly: false\n",
        s3_backend_yaml("data", bucket, "", &garage)
    );
    let mount = MsfsMount::start(&config_yaml_with(&top, &[backend]), "yaml").expect("mount");
    (garage, mount)
}

fn name_of(i: usize) -> String {
    format!("entry-{i:05}-with-a-name-long-enough-to-fill-buffers")
}

fn holder_socket(mount: &MsfsMount) -> PathBuf {
    mount.state_dir().join("fd-holder.sock")
}

/// Takes the mount over; on failure, aborts the connection first so that nothing this test
/// holds in the mount stays blocked while it unwinds.
fn take_over(mount: &mut MsfsMount) {
    if let Err(e) = mount.take_over() {
        let aborted = abort_fuse_connection(mount.path());
        panic!("take over: {e}\n{aborted}");
    }
}

fn kill(mount: &mut MsfsMount) {
    let status = mount.stop_with_signal(libc::SIGKILL);
    assert!(!status.success(), "SIGKILL ends the daemon: {status}");
    assert!(
        common::mount::is_mounted(mount.path()),
        "the mount outlives its daemon"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn open_files_directories_and_waiting_callers_carry_on_across_a_killed_daemon() {
    let (garage, mut mount) = start("take");
    let big = pattern(8 * MIB, 7);
    garage.put_object("take", "big", big.clone()).await;
    garage
        .put_object("take", "small.txt", b"small and late\n".to_vec())
        .await;
    for i in 0..DIR_FILES {
        garage
            .put_object("take", &format!("many/{}", name_of(i)), b"x".to_vec())
            .await;
    }
    let root = mount.path().join("data");
    let local = tempfile::tempdir().expect("tempdir");
    let (before, after) = (pattern(3 * MIB, 11), pattern(2 * MIB, 12));
    std::fs::write(local.path().join("before"), &before).expect("before");
    std::fs::write(local.path().join("after"), &after).expect("after");

    let app = HoldingApp::start(
        &root,
        &local.path().join("before"),
        &local.path().join("after"),
    );
    let app = within(
        &mount,
        HANG_LIMIT,
        "the application's first steps",
        move || app.wait_ready(),
    );

    kill(&mut mount);
    // Asked while nobody serves: waits for the successor instead of failing.
    let late_reader = Command::new("cat")
        .arg(root.join("small.txt"))
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn cat");
    take_over(&mut mount);

    let late = within(
        &mount,
        HANG_LIMIT,
        "the read asked while no daemon served",
        || late_reader.wait_with_output(),
    )
    .expect("cat");
    assert!(
        late.status.success(),
        "cat small.txt failed across the takeover"
    );
    assert_eq!(late.stdout, b"small and late\n");

    let (status, report) = within(
        &mount,
        HANG_LIMIT,
        "the application carrying on",
        move || app.go_on(),
    );
    assert!(
        status.success(),
        "the application failed across the takeover"
    );
    let report = report.expect("the application's report");
    assert_eq!(report.big_md5, md5_hex(&big), "big read across the kill");
    let expected: Vec<String> = (0..DIR_FILES)
        .map(name_of)
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    assert_eq!(
        report.names, expected,
        "the directory listed across the kill"
    );

    let mut expected_new = before;
    expected_new.extend_from_slice(&after);
    wait_until("new.bin lands whole", LANDING, async || {
        garage.get_object("take", "new.bin").await == expected_new
    })
    .await;
    assert!(
        mount.stdout_text().contains("took over the kernel's state"),
        "{}",
        mount.stdout_text()
    );

    let socket = holder_socket(&mount);
    assert!(socket.exists(), "the successor's connection is held too");
    assert!(mount.stop_with_umount().success());
    wait_until("the fd holder exits with the mount", LANDING, async || {
        !socket.exists()
    })
    .await;
}

/// The position `dd`'s output descriptor has reached (`/proc/PID/fdinfo/1`).
fn output_position(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/fdinfo/1"))
        .ok()
        .and_then(|info| {
            info.lines()
                .find_map(|l| l.strip_prefix("pos:").map(|p| p.trim().parse().ok()))
                .flatten()
        })
        .unwrap_or(0)
}

fn file_bytes(path: &Path) -> Vec<u8> {
    let mut bytes = Vec::new();
    File::open(path)
        .and_then(|mut f| f.read_to_end(&mut bytes))
        .expect("read a local file");
    bytes
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dd_killed_under_finishes_after_the_takeover_and_the_object_is_what_it_wrote() {
    const SIZE: usize = 256 * MIB;
    let (garage, mut mount) = start("ddwrite");
    let source_dir = tempfile::tempdir().expect("tempdir");
    let source = source_dir.path().join("source");
    OpenOptions::new()
        .create_new(true)
        .write(true)
        .open(&source)
        .and_then(|mut f| f.write_all(&pattern(SIZE, 99)))
        .expect("write the source");
    let target = mount.path().join("data/dd.bin");
    let mut dd = Command::new("dd")
        .arg(format!("if={}", source.display()))
        .arg(format!("of={}", target.display()))
        .args(["bs=1M", "status=none"])
        .stdin(Stdio::null())
        .spawn()
        .expect("spawn dd");
    let deadline = Instant::now() + HANG_LIMIT;
    while output_position(dd.id()) < (SIZE / 4) as u64 {
        assert!(Instant::now() < deadline, "dd made no progress");
        assert!(dd.try_wait().expect("dd").is_none(), "dd ended early");
        std::thread::sleep(Duration::from_millis(10));
    }

    kill(&mut mount);
    take_over(&mut mount);
    let status = within(&mount, HANG_LIMIT, "dd writing on", move || dd.wait());
    assert!(
        status.expect("dd").success(),
        "dd fails across the takeover"
    );

    let expected = file_bytes(&source);
    wait_until("dd.bin lands", LANDING, async || {
        garage.get_object("ddwrite", "dd.bin").await.len() == SIZE
    })
    .await;
    assert!(
        garage.get_object("ddwrite", "dd.bin").await == expected,
        "the object differs from what dd wrote"
    );
    assert!(mount.stop_with_umount().success());
}
