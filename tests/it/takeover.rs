//! A daemon killed with SIGKILL is invisible to the programs using its mount: the fd holder
//! keeps the FUSE connection, requests wait for the successor (`msfs mount --takeover`), and
//! open files, open directories and written bytes carry on with it (real garage, real FUSE).
//!
//! Every step through the mount runs under a hang guard ([`within`]): a step that never
//! finishes aborts the connection through fusectl and fails the test, saying what hung.

use std::collections::BTreeSet;
use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::app::{HoldingApp, md5_hex};
use crate::common::fault_proxy::{Fault, FaultPlan, FaultProxy, Match, S3Op};
use crate::common::mount::{abort_fuse_connection, daemon_log, within};
use crate::common::{Garage, MsfsMount, config_yaml_with, pattern, s3_backend_yaml, wait_until};

const MIB: usize = 1 << 20;
/// Files in the directory read across the kill: more than one getdents buffer (32 KiB) holds.
const DIR_FILES: usize = 1_500;
const HANG_LIMIT: Duration = Duration::from_secs(120);
const LANDING: Duration = Duration::from_secs(180);

fn start(bucket: &str) -> (Garage, MsfsMount) {
    start_with(bucket, "")
}

/// As `start`, with more top-level config lines.
fn start_with(bucket: &str, more_top: &str) -> (Garage, MsfsMount) {
    let garage = Garage::start();
    garage.create_bucket(bucket);
    let top = format!(
        "cache_storage: ram\ncache_line_size: {MIB}\ncache_lines: 32\nmax_write: {MIB}\n\
         fuse_request_stall_warn_secs: 10\n{more_top}"
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

/// Seeds what the application reads: `big` (8 MiB, returned), `small.txt` holding `small`, and
/// `files` names under `many/`.
async fn seed(garage: &Garage, bucket: &str, files: usize, seed: u64, small: &[u8]) -> Vec<u8> {
    let big = pattern(8 * MIB, seed);
    garage.put_object(bucket, "big", big.clone()).await;
    garage.put_object(bucket, "small.txt", small.to_vec()).await;
    for i in 0..files {
        garage
            .put_object(bucket, &format!("many/{}", name_of(i)), b"x".to_vec())
            .await;
    }
    big
}

/// Starts the application over `root`, writing `dir`'s `before` then `after`, and waits until
/// it holds its files.
fn app_started(mount: &MsfsMount, root: &Path, dir: &Path) -> HoldingApp {
    let app = HoldingApp::start(root, &dir.join("before"), &dir.join("after"));
    within(
        mount,
        HANG_LIMIT,
        "the application's first steps",
        move || app.wait_ready(),
    )
}

/// Lets the application finish after the restart (`across` names it) and checks that it saw
/// no error and read `big` and the `files` names of `many/` whole.
fn app_carried_on(mount: &MsfsMount, app: HoldingApp, big: &[u8], files: usize, across: &str) {
    let (status, report) = within(
        mount,
        HANG_LIMIT,
        "the application carrying on",
        move || app.go_on(),
    );
    assert!(
        status.success(),
        "the application failed across the {across}"
    );
    let report = report.expect("the application's report");
    assert_eq!(report.big_md5, md5_hex(big), "big read across the {across}");
    let expected: Vec<String> = (0..files)
        .map(name_of)
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    assert_eq!(
        report.names, expected,
        "the directory listed across the {across}"
    );
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
        crate::common::mount::is_mounted(mount.path()),
        "the mount outlives its daemon"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn open_files_directories_and_waiting_callers_carry_on_across_a_killed_daemon() {
    let (garage, mut mount) = start("take");
    let big = seed(&garage, "take", DIR_FILES, 7, b"small and late\n").await;
    let root = mount.path().join("data");
    let local = tempfile::tempdir().expect("tempdir");
    let (before, after) = (pattern(3 * MIB, 11), pattern(2 * MIB, 12));
    std::fs::write(local.path().join("before"), &before).expect("before");
    std::fs::write(local.path().join("after"), &after).expect("after");

    let app = app_started(&mount, &root, local.path());

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

    app_carried_on(&mount, app, &big, DIR_FILES, "kill");

    let mut expected_new = before;
    expected_new.extend_from_slice(&after);
    wait_until("new.bin lands whole", LANDING, async || {
        garage.try_get_object("take", "new.bin").await.as_deref() == Some(&expected_new[..])
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
    dd_across_a_kill("ddwrite", "").await;
}

/// With the kernel's writeback cache the pages `dd` wrote wait dirty in the kernel while no
/// one serves, and the successor receives them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_writeback_cache_the_pages_a_killed_daemon_was_sent_reach_the_successor() {
    dd_across_a_kill("ddwriteback", "fuse_writeback_cache: true\n").await;
}

async fn dd_across_a_kill(bucket: &str, more_top: &str) {
    // 256 MiB by default; `MSFS_TAKEOVER_DD_MIB=2048` runs the 2 GiB (it needs about
    // 6 GiB of memory for the comparison and a few minutes on 2 cores).
    let size: usize = std::env::var("MSFS_TAKEOVER_DD_MIB")
        .ok()
        .and_then(|mib| mib.parse::<usize>().ok())
        .unwrap_or(256)
        * MIB;
    let (garage, mut mount) = start_with(bucket, more_top);
    let source_dir = tempfile::tempdir().expect("tempdir");
    let source = source_dir.path().join("source");
    OpenOptions::new()
        .create_new(true)
        .write(true)
        .open(&source)
        .and_then(|mut f| f.write_all(&pattern(size, 99)))
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
    while output_position(dd.id()) < (size / 4) as u64 {
        assert!(Instant::now() < deadline, "dd made no progress");
        assert!(dd.try_wait().expect("dd").is_none(), "dd ended early");
        std::thread::sleep(Duration::from_millis(10));
    }

    kill(&mut mount);
    take_over(&mut mount);
    let status = within(&mount, HANG_LIMIT, "dd writing on", move || dd.wait());
    assert!(
        status.expect("dd").success(),
        "dd fails across the takeover\n--- msfs log ---\n{}",
        daemon_log(&mount)
    );

    let expected = file_bytes(&source);
    // dd's close returns before the commit (no flush_on_close): the object may not exist yet.
    wait_until("dd.bin lands", LANDING, async || {
        garage
            .try_get_object(bucket, "dd.bin")
            .await
            .is_some_and(|landed| landed.len() == size)
    })
    .await;
    assert!(
        garage.get_object(bucket, "dd.bin").await == expected,
        "the object differs from what dd wrote"
    );
    assert!(mount.stop_with_umount().success());
}

/// An upgrade: `msfs mount --takeover` started beside the running daemon waits, the running
/// daemon's SIGTERM hands the connection over instead of unmounting, and nothing using the
/// mount notices — not an application holding files and a directory open, not a `dd` writing
/// through the hand-over, not a loop of `cat`s asking all along.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upgrade_hands_the_mount_over_and_nothing_using_it_notices() {
    const FILES: usize = 100;
    const DD_SIZE: usize = 64 * MIB;
    let (garage, mut mount) = start("upgrade");
    let big = seed(&garage, "upgrade", FILES, 21, b"asked all along\n").await;
    let root = mount.path().join("data");
    let local = tempfile::tempdir().expect("tempdir");
    let (before, after) = (pattern(MIB, 22), pattern(MIB, 23));
    std::fs::write(local.path().join("before"), &before).expect("before");
    std::fs::write(local.path().join("after"), &after).expect("after");
    let source = local.path().join("dd-source");
    std::fs::write(&source, pattern(DD_SIZE, 24)).expect("dd source");

    // A plain mount over a served mountpoint is refused, touching nothing.
    let refused = Command::new(env!("CARGO_BIN_EXE_msfs"))
        .arg("mount")
        .arg(mount.config_path())
        .arg(mount.path())
        .arg("--state-dir")
        .arg(mount.state_dir())
        .output()
        .expect("run a second msfs mount");
    let refusal = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success(), "a second plain mount is refused");
    assert!(
        refusal.contains("is served by a running msfs") && refusal.contains("--takeover"),
        "{refusal}"
    );

    let app = app_started(&mount, &root, local.path());
    let mut dd = Command::new("dd")
        .arg(format!("if={}", source.display()))
        .arg(format!("of={}", root.join("dd.bin").display()))
        .args(["bs=64k", "status=none"])
        .stdin(Stdio::null())
        .spawn()
        .expect("spawn dd");
    let cats = Command::new("bash")
        .arg("-c")
        .arg("for i in $(seq 400); do cat \"$1\" > /dev/null || exit 1; done")
        .arg("cats")
        .arg(root.join("small.txt"))
        .spawn()
        .expect("spawn the cat loop");
    let deadline = Instant::now() + HANG_LIMIT;
    while output_position(dd.id()) < (DD_SIZE / 8) as u64 {
        assert!(Instant::now() < deadline, "dd made no progress");
        assert!(dd.try_wait().expect("dd").is_none(), "dd ended early");
        std::thread::sleep(Duration::from_millis(5));
    }

    let (old_status, old_log) = match mount.upgrade() {
        Ok(done) => done,
        Err(e) => panic!("upgrade: {e}\n{}", abort_fuse_connection(mount.path())),
    };
    assert!(
        old_status.success(),
        "the old daemon exits cleanly: {old_log}"
    );
    assert!(old_log.contains("handed the mount over"), "{old_log}");
    assert!(!old_log.contains("unmounting"), "{old_log}");

    let mut cats = cats;
    let cats = within(&mount, HANG_LIMIT, "the cat loop", move || cats.wait());
    assert!(
        cats.expect("cats").success(),
        "a cat failed across the upgrade"
    );
    let dd = within(&mount, HANG_LIMIT, "dd writing on", move || dd.wait());
    assert!(dd.expect("dd").success(), "dd fails across the upgrade");
    app_carried_on(&mount, app, &big, FILES, "upgrade");

    let mut expected_new = before;
    expected_new.extend_from_slice(&after);
    let expected_dd = file_bytes(&source);
    wait_until("new.bin and dd.bin land whole", LANDING, async || {
        garage.try_get_object("upgrade", "new.bin").await.as_deref() == Some(&expected_new[..])
            && garage.try_get_object("upgrade", "dd.bin").await.as_deref() == Some(&expected_dd[..])
    })
    .await;
    assert!(mount.stop_with_umount().success());
}

/// An upgrade while a file is being written and held open, its bytes not yet committed: the
/// old daemon hands over with them in its spill files, and the successor takes them over
/// before it serves (the old one is not reaped yet meanwhile, as under a container runtime),
/// so the file goes on from them; nothing is lost then, nor committed from a stale spill later.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upgrade_carries_the_unsaved_writes_of_a_file_held_open() {
    let (garage, mut mount) = start("unsaved");
    let path = mount.path().join("data/held.bin");
    let (first, second) = (pattern(3 * MIB, 31), pattern(MIB + 17, 32));
    let mut held = File::create(&path).expect("create held.bin");
    held.write_all(&first).expect("write before the upgrade");
    assert_eq!(
        garage.try_get_object("unsaved", "held.bin").await,
        None,
        "nothing is committed while the file is held open"
    );

    let (old_status, old_log) = match mount.upgrade() {
        Ok(done) => done,
        Err(e) => panic!("upgrade: {e}\n{}", abort_fuse_connection(mount.path())),
    };
    assert!(old_status.success(), "the old daemon exits: {old_log}");
    let log = mount.stdout_text();
    assert!(
        log.contains("recovered unsaved writes") && log.contains("key=held.bin"),
        "the successor took the file over: {log}"
    );

    let seen = within(&mount, HANG_LIMIT, "read held.bin after the upgrade", {
        let path = path.clone();
        move || std::fs::read(&path)
    })
    .expect("read held.bin");
    assert!(
        seen == first,
        "after the upgrade the file holds {} bytes, not the {} written before it",
        seen.len(),
        first.len()
    );
    let mut expected = first;
    expected.extend_from_slice(&second);
    within(
        &mount,
        HANG_LIMIT,
        "write on and fsync held.bin",
        move || {
            held.write_all(&second)?;
            held.sync_all()
        },
    )
    .expect("write on after the upgrade");
    assert!(
        garage
            .try_get_object("unsaved", "held.bin")
            .await
            .as_deref()
            == Some(&expected[..]),
        "held.bin in the store is not what was written across the upgrade"
    );

    // A restart finds nothing stale to commit over it.
    kill(&mut mount);
    take_over(&mut mount);
    assert!(
        !mount.stdout_text().contains("recovered unsaved writes"),
        "{}",
        mount.stdout_text()
    );
    assert!(
        garage
            .try_get_object("unsaved", "held.bin")
            .await
            .as_deref()
            == Some(&expected[..])
    );
    assert!(mount.stop_with_umount().success());
}

/// A rename and an unlink the killed daemon carried out but never answered (the store's answer
/// to their DeleteObject held back by a proxy until after the kill): the kernel resends them to
/// the successor, which finds them done and answers success, not ENOENT.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rename_and_an_unlink_that_landed_before_the_kill_succeed_when_resent() {
    let garage = Garage::start();
    garage.create_bucket("replay");
    garage
        .put_object("replay", "a/from.txt", b"renamed once\n".to_vec())
        .await;
    garage
        .put_object("replay", "b/gone.txt", b"unlinked once\n".to_vec())
        .await;
    let proxy = FaultProxy::in_front_of(&garage);
    let backend = format!(
        "{}    readonly: false\n",
        proxy.s3_backend_yaml("data", "replay", "", &garage)
    );
    let mut mount = MsfsMount::start(&config_yaml_with("", &[backend]), "yaml").expect("mount");
    let root = mount.path().join("data");
    proxy.set(
        FaultPlan::always(Fault::StallAnswer { duration: None })
            .only(Match::any().op(S3Op::DeleteObject)),
    );
    let mv = Command::new("mv")
        .arg(root.join("a/from.txt"))
        .arg(root.join("a/to.txt"))
        .spawn()
        .expect("spawn mv");
    let rm = Command::new("rm")
        .arg(root.join("b/gone.txt"))
        .spawn()
        .expect("spawn rm");
    // Both deletes reached the store: the rename's (after its copy) and the unlink's (in
    // another directory: namespace changes in one directory are serialized).
    wait_until("both DeleteObjects are held", HANG_LIMIT, async || {
        proxy.stats().stalled_answers == 2
    })
    .await;
    kill(&mut mount);
    proxy.pass_through();
    take_over(&mut mount);

    let (mut mv, mut rm) = (mv, rm);
    let moved = within(&mount, HANG_LIMIT, "mv", move || mv.wait()).expect("mv");
    let removed = within(&mount, HANG_LIMIT, "rm", move || rm.wait()).expect("rm");
    assert!(
        moved.success(),
        "the resent rename failed:\n{}",
        mount.stdout_text()
    );
    assert!(
        removed.success(),
        "the resent unlink failed:\n{}",
        mount.stdout_text()
    );
    // The rename's source is gone: only the replay rule can answer it. The unlink finds its
    // name in the state the previous server journalled and deletes again (S3 deletes are
    // idempotent), so either way it succeeds.
    assert!(
        mount
            .stdout_text()
            .contains("carried out by the previous server; answered as done op=\"rename\""),
        "{}",
        mount.stdout_text()
    );
    assert_eq!(garage.list_keys("replay", "").await, ["a/to.txt"]);
    assert_eq!(
        std::fs::read(root.join("a/to.txt")).expect("read to.txt"),
        b"renamed once\n"
    );
    assert!(mount.stop_with_umount().success());
}

/// The pid of the fd holder serving `socket`, found as `pidof` would see it: among the
/// processes named msfs.
fn holder_pid(socket: &Path) -> u32 {
    let socket = socket.to_string_lossy().into_owned();
    let pidof = crate::common::run("pidof", &["msfs"]);
    pidof
        .split_whitespace()
        .filter_map(|pid| pid.parse::<u32>().ok())
        .find(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|cmdline| {
                let args: Vec<String> = cmdline
                    .split(|b| *b == 0)
                    .map(|a| String::from_utf8_lossy(a).into_owned())
                    .collect();
                args.iter().any(|a| a == "fd-holder") && args.contains(&socket)
            })
        })
        .unwrap_or_else(|| panic!("pidof msfs ({pidof}) names the fd holder of {socket}"))
}

fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| !stat.contains(") Z "))
}

/// `kill -HUP $(pidof msfs)`, the documented reload, reaches the fd holder too: it must reload
/// the daemon and leave the holder, and the connection it keeps, alive, so that a later
/// SIGKILL of the daemon is still survived.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_sent_to_every_msfs_process_spares_the_holder_and_a_kill_is_survived_after() {
    let (garage, mut mount) = start("hup");
    garage
        .put_object("hup", "before.txt", b"before\n".to_vec())
        .await;
    let holder = holder_pid(&holder_socket(&mount));
    let pids = crate::common::run("pidof", &["msfs"]);
    let pids: Vec<u32> = pids
        .split_whitespace()
        .filter_map(|p| p.parse().ok())
        .collect();
    assert!(pids.contains(&mount.pid()) && pids.contains(&holder));
    // Exactly this mount's processes of those `pidof` names (other tests run beside this one).
    for pid in [mount.pid(), holder] {
        // SAFETY: kill(2) has no memory-safety preconditions; both processes are alive.
        unsafe { libc::kill(pid as libc::pid_t, libc::SIGHUP) };
    }
    wait_until(
        "SIGHUP reloads the daemon",
        Duration::from_secs(30),
        async || daemon_log(&mount).contains("configuration reloaded"),
    )
    .await;
    assert!(alive(holder), "the fd holder survives SIGHUP");
    assert!(
        mount.try_exit_status().is_none(),
        "the daemon survives SIGHUP"
    );
    let root = mount.path().join("data");
    std::fs::write(root.join("written.txt"), b"acknowledged\n").expect("write after the reload");

    kill(&mut mount);
    take_over(&mut mount);
    let read = |name: &str| {
        let path = root.join(name);
        within(&mount, HANG_LIMIT, "a read after the takeover", move || {
            std::fs::read(path).expect("read")
        })
    };
    assert_eq!(read("before.txt"), b"before\n");
    assert_eq!(read("written.txt"), b"acknowledged\n");
    assert!(alive(holder), "the same holder kept the connection");
}

/// After a SIGKILL the refusal of a plain mount advises `umount -l`; once that is done, a plain
/// mount at the same path succeeds on its first try (the connection the holder kept for the
/// detached mount is let go, not waited out).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_kill_and_umount_l_a_plain_mount_succeeds_at_once() {
    let (garage, mut mount) = start("lazy");
    garage
        .put_object("lazy", "f.txt", b"still here\n".to_vec())
        .await;
    kill(&mut mount);
    let status = Command::new("umount")
        .arg("-l")
        .arg(mount.path())
        .status()
        .expect("umount -l");
    assert!(status.success());
    if let Err(e) = mount.mount_again() {
        panic!("a plain mount after umount -l: {e}");
    }
    let path = mount.path().join("data/f.txt");
    let bytes = within(&mount, HANG_LIMIT, "a read of the new mount", move || {
        std::fs::read(path).expect("read")
    });
    assert_eq!(bytes, b"still here\n");
    assert!(
        mount.stdout_text().contains("released it"),
        "the daemon says it let the detached mount's connection go:\n{}",
        mount.stdout_text()
    );
}
