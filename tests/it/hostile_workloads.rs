//! Hostile workloads against one real daemon (garage, a real FUSE mount): ordinary POSIX calls
//! that an application may make on purpose or by mistake. None may hang the daemon, kill it or
//! leave the bucket holding something POSIX says is not there. Afterwards each test checks that
//! the daemon still answers, that its RSS stays below [`RSS_BOUND_KIB`], that SIGTERM stops it
//! cleanly, and what the bucket holds.
//!
//! Every step that goes through the mount runs under a hang guard ([`within`]): a step that
//! makes no progress for its limit fails the test with what it was doing, after aborting the
//! mount's FUSE connection through fusectl so that nothing stays blocked in the kernel.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::fd::IntoRawFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::time::{Duration, Instant};

use crate::common::mount::{daemon_log, within};
use crate::common::{Garage, MsfsMount, config_yaml_with, pattern, s3_backend_yaml, wait_until};

const MIB: usize = 1 << 20;
/// `write_dirty_limit_bytes` of the mount: the smallest value the configuration accepts.
const DIRTY_LIMIT: usize = 64 * MIB;
/// Written through one descriptor in the unlink and rename cases: well past the dirty limit.
const PAST_THE_LIMIT: usize = 2 * DIRTY_LIMIT + 32 * MIB;
/// The largest object S3 stores: 10,000 parts of at most 5 GiB.
const S3_MAX_OBJECT: u64 = 10_000 * (5 << 30);
/// The daemon's resident memory after each workload stays below this (KiB): generous for a
/// debug build with a 32 MiB cache in RAM, far below what a buffer sized by a file would take.
const RSS_BOUND_KIB: u64 = 512 * 1024;
/// How long one guarded step may go without finishing before it counts as a hang.
const HANG_LIMIT: Duration = Duration::from_secs(120);
/// How long background commits may take to land in the bucket.
const LANDING: Duration = Duration::from_secs(180);

/// Garage, a bucket and a writable mount of it as `data`, with a 32 MiB cache in RAM, 1 MiB
/// FUSE requests, the smallest dirty budget, and stalled requests reported after 10 s (their
/// warnings then appear in the daemon's log that a failure prints).
fn start(bucket: &str) -> (Garage, MsfsMount) {
    start_with(bucket, &[])
}

/// Like [`start`], with more writable backends over the same bucket: (`dir_name`, `prefix`).
fn start_with(bucket: &str, more: &[(&str, &str)]) -> (Garage, MsfsMount) {
    let garage = Garage::start();
    garage.create_bucket(bucket);
    let top = format!(
        "cache_storage: ram\ncache_line_size: {MIB}\ncache_lines: 32\nmax_write: {MIB}\n\
         write_dirty_limit_bytes: {DIRTY_LIMIT}\nfuse_request_stall_warn_secs: 10\n"
    );
    let backends: Vec<String> = [("data", "")]
        .iter()
        .chain(more)
        .map(|(dir_name, prefix)| {
            format!(
                "{}    readonly: false\n",
                s3_backend_yaml(dir_name, bucket, prefix, &garage)
            )
        })
        .collect();
    let mount = MsfsMount::start(&config_yaml_with(&top, &backends), "yaml").expect("mount");
    (garage, mount)
}

/// The errno of a failed call.
fn errno<T: std::fmt::Debug>(result: io::Result<T>, what: &str) -> i32 {
    match result {
        Ok(value) => panic!("{what}: succeeded ({value:?}); expected an error"),
        Err(e) => e
            .raw_os_error()
            .unwrap_or_else(|| panic!("{what}: {e}, without an errno")),
    }
}

fn assert_errno<T: std::fmt::Debug>(result: io::Result<T>, expected: i32, what: &str) {
    let got = errno(result, what);
    assert_eq!(
        got,
        expected,
        "{what}: got {} ({got}), expected {} ({expected})",
        io::Error::from_raw_os_error(got),
        io::Error::from_raw_os_error(expected)
    );
}

/// `stat` of the mount root answers (under the hang guard) and msfs is still running.
fn assert_daemon_answers(mount: &mut MsfsMount, after: &str) {
    let root = mount.path().to_path_buf();
    let stat = within(
        mount,
        HANG_LIMIT,
        &format!("stat of the mount root {after}"),
        move || std::fs::metadata(root),
    );
    assert!(
        stat.as_ref().is_ok_and(std::fs::Metadata::is_dir),
        "stat of the mount root {after}: {stat:?}\n{}",
        daemon_log(mount)
    );
    assert!(
        mount.try_exit_status().is_none(),
        "msfs exited {after}: {:?}\n{}",
        mount.try_exit_status(),
        daemon_log(mount)
    );
}

/// A `/proc/PID/status` field in KiB.
fn status_kib(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_else(|e| panic!("read /proc/{pid}/status: {e}"));
    status
        .lines()
        .find_map(|line| line.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|value| value.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("no {field} in /proc/{pid}/status"))
}

fn assert_rss_within_bound(mount: &MsfsMount, after: &str) {
    let rss = status_kib(mount.pid(), "VmRSS");
    assert!(
        rss < RSS_BOUND_KIB,
        "msfs RSS {after}: {rss} KiB, above the bound of {RSS_BOUND_KIB} KiB"
    );
}

/// SIGTERM: msfs commits what is pending, unmounts and exits 0 (within 30 s, or the fixture
/// fails the test).
fn stop_cleanly(mount: &mut MsfsMount) {
    let status = mount.stop_with_signal(libc::SIGTERM);
    assert!(
        status.success(),
        "msfs after SIGTERM: {status}\n{}",
        daemon_log(mount)
    );
    assert!(
        !crate::common::is_mounted(mount.path()),
        "SIGTERM left the mount"
    );
}

/// Writes `len` bytes of `pattern(…, seed)` through `file` in 1 MiB writes.
fn write_chunks(file: &mut File, len: usize, seed: u64) -> io::Result<()> {
    let chunk = pattern(MIB, seed);
    for _ in 0..len / MIB {
        file.write_all(&chunk)?;
    }
    Ok(())
}

/// Closes `file` and returns what close(2) said (dropping a `File` ignores it).
fn close(file: File) -> io::Result<()> {
    let fd = file.into_raw_fd();
    // SAFETY: `fd` was just released by its `File`, so nothing else closes it.
    match unsafe { libc::close(fd) } {
        0 => Ok(()),
        _ => Err(io::Error::last_os_error()),
    }
}

/// Writes 8 MiB into another file `name` of the mount and closes it, while the test still holds
/// a descriptor written past the dirty limit: the rest of the mount must keep writing. Returns
/// the bytes written.
fn write_unrelated_file(mount: &MsfsMount, name: &str) -> Vec<u8> {
    let path = mount.path().join("data").join(name);
    let body = pattern(8 * MIB, 99);
    let written = body.clone();
    within(
        mount,
        HANG_LIMIT,
        &format!("an unrelated writer of 8 MiB into data/{name}"),
        move || {
            let mut file = File::create(&path)?;
            file.write_all(&written)?;
            close(file)
        },
    )
    .unwrap_or_else(|e| panic!("unrelated writer of data/{name}: {e}"));
    body
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_unlinked_while_open_and_written_past_the_dirty_limit_blocks_no_writer() {
    let (garage, mut mount) = start("unlinked-open");
    let scratch = mount.path().join("data/scratch");
    let mut file = OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(&scratch)
        .expect("create data/scratch");
    std::fs::remove_file(&scratch).expect("unlink data/scratch while open");

    let file = within(
        &mount,
        HANG_LIMIT,
        "writing 160 MiB through the descriptor of an unlinked file (dirty limit 64 MiB)",
        move || write_chunks(&mut file, PAST_THE_LIMIT, 1).map(|()| file),
    )
    .expect("write through the unlinked file's descriptor");
    let other = write_unrelated_file(&mount, "other");
    within(&mount, HANG_LIMIT, "closing the unlinked file", move || {
        close(file)
    })
    .expect("close the unlinked file");

    assert_daemon_answers(&mut mount, "after the unlinked file was closed");
    assert_rss_within_bound(&mount, "after the unlinked file was closed");
    stop_cleanly(&mut mount);
    assert_eq!(
        garage.list_keys("unlinked-open", "").await,
        ["other"],
        "the bucket holds the unrelated file only, never the unlinked name"
    );
    assert!(garage.get_object("unlinked-open", "other").await == other);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_unlinked_while_open_reads_back_what_was_written_through_it() {
    let (garage, mut mount) = start("unlinked-read");
    let scratch = mount.path().join("data/scratch");
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(&scratch)
        .expect("create data/scratch");
    std::fs::remove_file(&scratch).expect("unlink data/scratch while open");
    let body = pattern(4 * MIB + 17, 7);
    let written = body.clone();
    let read = within(
        &mount,
        HANG_LIMIT,
        "writing and reading an unlinked file",
        move || {
            let failed =
                |what: &'static str| move |e: io::Error| format!("{what} the unlinked file: {e}");
            file.write_all_at(&written, 0)
                .map_err(failed("write through"))?;
            let mut back = vec![0; written.len()];
            file.read_exact_at(&mut back, 0)
                .map_err(failed("read back"))?;
            close(file).map_err(failed("close"))?;
            Ok::<_, String>(back)
        },
    );
    assert!(
        read.unwrap_or_else(|e| panic!("{e}")) == body,
        "the unlinked file reads back what was written through its descriptor"
    );

    assert_daemon_answers(&mut mount, "after the unlinked file was closed");
    stop_cleanly(&mut mount);
    assert_eq!(
        garage.list_keys("unlinked-read", "").await,
        Vec::<String>::new(),
        "the unlinked name never reaches the bucket"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_renamed_over_while_open_and_written_past_the_dirty_limit_blocks_no_writer() {
    let (garage, mut mount) = start("renamed-over");
    let data = mount.path().join("data");
    let victim = data.join("victim");
    let mut file = File::create(&victim).expect("create data/victim");
    let replacement = data.join("replacement");
    let mut other = File::create(&replacement).expect("create data/replacement");
    other
        .write_all(b"the replacement\n")
        .expect("write data/replacement");
    other.sync_all().expect("fsync data/replacement");
    close(other).expect("close data/replacement");
    let (from, to) = (replacement.clone(), victim.clone());
    within(
        &mount,
        HANG_LIMIT,
        "renaming a file over one open for writing",
        move || std::fs::rename(from, to),
    )
    .expect("rename data/replacement over the open data/victim");

    let file = within(
        &mount,
        HANG_LIMIT,
        "writing 160 MiB through the descriptor of a file renamed over (dirty limit 64 MiB)",
        move || write_chunks(&mut file, PAST_THE_LIMIT, 3).map(|()| file),
    )
    .expect("write through the replaced file's descriptor");
    let other = write_unrelated_file(&mount, "other");
    within(&mount, HANG_LIMIT, "closing the replaced file", move || {
        close(file)
    })
    .expect("close the replaced file");
    let victim_now = within(&mount, HANG_LIMIT, "reading data/victim", {
        let victim = victim.clone();
        move || std::fs::read(victim)
    });
    assert_eq!(
        victim_now.expect("read data/victim").as_slice(),
        b"the replacement\n",
        "the name shows the file renamed onto it"
    );

    assert_daemon_answers(&mut mount, "after the replaced file was closed");
    assert_rss_within_bound(&mount, "after the replaced file was closed");
    stop_cleanly(&mut mount);
    assert_eq!(
        garage.list_keys("renamed-over", "").await,
        ["other", "victim"]
    );
    assert_eq!(
        garage.get_object("renamed-over", "victim").await,
        b"the replacement\n",
        "the replaced file's writes never land under its old name"
    );
    assert!(garage.get_object("renamed-over", "other").await == other);
}

/// `truncate(2)` by path (a setattr without a file handle).
fn truncate_path(path: &Path, size: u64) -> io::Result<()> {
    let path = std::ffi::CString::new(path.as_os_str().as_bytes()).expect("no NUL in path");
    let size = libc::off_t::try_from(size).expect("size fits off_t");
    // SAFETY: `path` is a NUL-terminated string that outlives the call.
    match unsafe { libc::truncate(path.as_ptr(), size) } {
        0 => Ok(()),
        _ => Err(io::Error::last_os_error()),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sizes_past_the_store_limit_get_efbig_at_once_and_the_daemon_stays_up() {
    let (garage, mut mount) = start("huge-sizes");
    let path = mount.path().join("data/huge");
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(&path)
        .expect("create data/huge");
    let file = std::sync::Arc::new(file);
    let size_of = |mount: &MsfsMount| {
        let path = path.clone();
        within(mount, HANG_LIMIT, "stat of data/huge", move || {
            std::fs::metadata(path).map(|m| m.len())
        })
        .expect("stat data/huge")
    };

    for size in [999_999_999_999_999, S3_MAX_OBJECT + 1] {
        let f = file.clone();
        let result = within(
            &mount,
            HANG_LIMIT,
            &format!("ftruncate to {size}"),
            move || f.set_len(size),
        );
        assert_errno(
            result,
            libc::EFBIG,
            &format!("ftruncate of data/huge to {size}"),
        );
        let p = path.clone();
        let result = within(
            &mount,
            HANG_LIMIT,
            &format!("truncate to {size}"),
            move || truncate_path(&p, size),
        );
        assert_errno(
            result,
            libc::EFBIG,
            &format!("truncate of data/huge to {size}"),
        );
        assert_eq!(size_of(&mount), 0, "a refused size changes nothing");
        assert_daemon_answers(&mut mount, &format!("after a truncate to {size}"));
    }
    for offset in [1_000_000_000_000_000, S3_MAX_OBJECT] {
        let f = file.clone();
        let result = within(
            &mount,
            HANG_LIMIT,
            &format!("pwrite at {offset}"),
            move || f.write_at(b"x", offset),
        );
        assert_errno(
            result,
            libc::EFBIG,
            &format!("1-byte pwrite at {offset} (ends past the store's limit)"),
        );
        assert_eq!(size_of(&mount), 0, "a refused write changes nothing");
        assert_daemon_answers(&mut mount, &format!("after a pwrite at {offset}"));
    }
    let body = pattern(4096, 5);
    let (f, written) = (file.clone(), body.clone());
    let result = within(&mount, HANG_LIMIT, "pwrite at 1 MiB", move || {
        f.write_at(&written, MIB as u64)
    });
    assert_eq!(result.expect("pwrite at 1 MiB"), body.len());
    assert_eq!(size_of(&mount), (MIB + body.len()) as u64);
    let file = std::sync::Arc::into_inner(file).expect("the only handle left");
    within(&mount, HANG_LIMIT, "closing data/huge", move || close(file)).expect("close data/huge");

    assert_daemon_answers(&mut mount, "after the huge sizes");
    assert_rss_within_bound(&mount, "after the huge sizes");
    stop_cleanly(&mut mount);
    let stored = garage.get_object("huge-sizes", "huge").await;
    assert_eq!(
        stored.len(),
        MIB + body.len(),
        "the size the file was given"
    );
    assert!(
        stored[..MIB].iter().all(|&b| b == 0),
        "the hole reads as zeros"
    );
    assert!(stored[MIB..] == body);
}

/// Five directories of 199-byte names, as a backend prefix: 1,000 bytes of key before a name.
///
/// Nested directories made with `mkdir` would do the same, but garage (its LMDB metadata) cannot
/// store keys of more than about 450 bytes, so the directories' markers never land; as a prefix
/// they need no object, and the names below only ever reach the store in a HEAD or a LIST,
/// which garage answers for any length.
fn deep_prefix() -> String {
    (0..5)
        .map(|level| format!("{level}").repeat(199) + "/")
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn names_over_255_bytes_and_keys_over_1024_bytes_get_enametoolong() {
    let prefix = deep_prefix();
    assert_eq!(prefix.len(), 1000);
    let (garage, mut mount) = start_with("long-names", &[("deep", &prefix)]);
    let (data, deep) = (mount.path().join("data"), mount.path().join("deep"));
    let too_long = data.join("n".repeat(256));
    let longest = data.join("n".repeat(255));
    // Under `deep`: a 24-byte name makes a key of exactly 1,024 bytes, a 25-byte one 1,025.
    let (key_1024, key_1025) = (deep.join("k".repeat(24)), deep.join("k".repeat(25)));

    let outcomes = within(&mount, HANG_LIMIT, "long names", {
        let (too_long, longest) = (too_long.clone(), longest.clone());
        let (key_1024, key_1025) = (key_1024.clone(), key_1025.clone());
        move || {
            let create = |path: &Path| {
                OpenOptions::new()
                    .write(true)
                    .create(true)
                    .truncate(true)
                    .open(path)
                    .and_then(|mut f| f.write_all(b"x").and_then(|()| close(f)))
            };
            let stat = |path: &Path| std::fs::metadata(path).map(|m| m.len());
            [
                ("open(O_CREAT) of a 256-byte name", create(&too_long)),
                ("mkdir of a 256-byte name", std::fs::create_dir(&too_long)),
                ("stat of a 256-byte name", stat(&too_long).map(drop)),
                ("create of a 255-byte name", create(&longest)),
                ("stat of a 255-byte name", stat(&longest).map(drop)),
                (
                    "stat of an absent 1,024-byte key",
                    stat(&key_1024).map(drop),
                ),
                ("stat of a 1,025-byte key", stat(&key_1025).map(drop)),
                ("create of a 1,025-byte key", create(&key_1025)),
                ("mkdir of a 1,025-byte key", std::fs::create_dir(&key_1025)),
            ]
        }
    });
    let expected = [
        Some(libc::ENAMETOOLONG),
        Some(libc::ENAMETOOLONG),
        Some(libc::ENAMETOOLONG),
        None,
        None,
        // Not too long: simply not there.
        Some(libc::ENOENT),
        Some(libc::ENAMETOOLONG),
        Some(libc::ENAMETOOLONG),
        Some(libc::ENAMETOOLONG),
    ];
    let wrong: Vec<String> = outcomes
        .into_iter()
        .zip(expected)
        .filter_map(|((what, outcome), expected)| {
            let got = outcome.err().and_then(|e| e.raw_os_error());
            (got != expected).then(|| {
                let show = |errno: Option<i32>| {
                    errno.map_or("success".to_string(), |n| {
                        io::Error::from_raw_os_error(n).to_string()
                    })
                };
                format!("{what}: {}, expected {}", show(got), show(expected))
            })
        })
        .collect();
    assert!(wrong.is_empty(), "{wrong:#?}");

    assert_daemon_answers(&mut mount, "after the long names");
    assert_rss_within_bound(&mount, "after the long names");
    stop_cleanly(&mut mount);
    assert_eq!(
        garage.list_keys("long-names", "").await,
        ["n".repeat(255)],
        "the bucket holds the 255-byte name and nothing longer"
    );
}

/// The open descriptors of process `pid`.
fn fd_count(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap_or_else(|e| panic!("list /proc/{pid}/fd: {e}"))
        .count()
}

/// Raises this process's RLIMIT_NOFILE to at least `wanted` (msfs, spawned after, inherits it).
fn raise_nofile(wanted: u64) {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit and setrlimit only read and write the struct passed.
    unsafe {
        assert_eq!(libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit), 0);
        if limit.rlim_cur < wanted {
            limit.rlim_cur = wanted;
            limit.rlim_max = limit.rlim_max.max(wanted);
            assert_eq!(
                libc::setrlimit(libc::RLIMIT_NOFILE, &limit),
                0,
                "raise RLIMIT_NOFILE to {wanted}: {}",
                io::Error::last_os_error()
            );
        }
    }
}

const OPEN_AT_ONCE: usize = 10_000;
/// Descriptors msfs may hold after the load beyond those it held before (pooled connections
/// to the store, the runtime's own).
const FD_SLACK: usize = 64;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_files_open_at_once_all_land_and_the_descriptors_come_back() {
    raise_nofile((OPEN_AT_ONCE + 2048) as u64);
    let (garage, mut mount) = start("many-open");
    let pid = mount.pid();
    let fds_before = fd_count(pid);
    let dir = mount.path().join("data/many");
    std::fs::create_dir(&dir).expect("mkdir data/many");
    let body = |i: usize| format!("file {i} of {OPEN_AT_ONCE}\n").into_bytes();

    let held = within(
        &mount,
        Duration::from_secs(600),
        "creating 10,000 files and writing to each, all held open",
        move || {
            let mut files = Vec::with_capacity(OPEN_AT_ONCE);
            for i in 0..OPEN_AT_ONCE {
                let mut file = File::create(dir.join(format!("f{i:05}")))
                    .map_err(|e| format!("create f{i:05}: {e}"))?;
                file.write_all(&body(i))
                    .map_err(|e| format!("write f{i:05}: {e}"))?;
                files.push(file);
            }
            let open_in_msfs = fd_count(pid);
            for (i, file) in files.into_iter().enumerate() {
                close(file).map_err(|e| format!("close f{i:05}: {e}"))?;
            }
            Ok::<_, String>(open_in_msfs)
        },
    );
    let peak = held.unwrap_or_else(|e| panic!("{e}"));
    eprintln!("msfs descriptors: {fds_before} before, {peak} with {OPEN_AT_ONCE} files open");

    let deadline = Instant::now() + LANDING;
    loop {
        let landed = garage.list_keys("many-open", "many/f").await.len();
        if landed == OPEN_AT_ONCE {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "only {landed} of the 10,000 files reached the bucket within {LANDING:?} of their \
             close\n--- msfs log (tail) ---\n{}",
            daemon_log(&mount)
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    for i in (0..OPEN_AT_ONCE).step_by(97) {
        let key = format!("many/f{i:05}");
        assert_eq!(garage.get_object("many-open", &key).await, body(i), "{key}");
    }
    let deadline = Instant::now() + HANG_LIMIT;
    while fd_count(pid) > fds_before + FD_SLACK {
        assert!(
            Instant::now() < deadline,
            "msfs still holds {} descriptors {HANG_LIMIT:?} after the files landed ({fds_before} \
             before them)",
            fd_count(pid)
        );
        std::thread::sleep(Duration::from_millis(200));
    }

    assert_daemon_answers(&mut mount, "after 10,000 files");
    assert_rss_within_bound(&mount, "after 10,000 files");
    stop_cleanly(&mut mount);
    assert_eq!(
        garage.list_keys("many-open", "many/f").await.len(),
        OPEN_AT_ONCE
    );
}

const RACE_ROUNDS: usize = 200;

/// A writer (create/truncate, write, close) and an unlinker race on `path` for
/// [`RACE_ROUNDS`] rounds each. Returns every error other than `ENOENT`.
fn race_writer_and_unlinker(path: &Path) -> Vec<String> {
    let writer = {
        let path = path.to_path_buf();
        std::thread::spawn(move || {
            let mut errors = Vec::new();
            for round in 0..RACE_ROUNDS {
                let written = OpenOptions::new()
                    .write(true)
                    .create(true)
                    .truncate(true)
                    .open(&path)
                    .and_then(|mut file| {
                        file.write_all(format!("round {round}\n").as_bytes())?;
                        close(file)
                    });
                match written {
                    Err(e) if e.raw_os_error() != Some(libc::ENOENT) => {
                        errors.push(format!("writer, round {round}: {e}"));
                    }
                    _ => {}
                }
            }
            errors
        })
    };
    let unlinker = {
        let path = path.to_path_buf();
        std::thread::spawn(move || {
            let mut errors = Vec::new();
            for round in 0..RACE_ROUNDS {
                match std::fs::remove_file(&path) {
                    Err(e) if e.raw_os_error() != Some(libc::ENOENT) => {
                        errors.push(format!("unlinker, round {round}: {e}"));
                    }
                    _ => {}
                }
                std::thread::yield_now();
            }
            errors
        })
    };
    let mut errors = writer.join().expect("the writer thread");
    errors.extend(unlinker.join().expect("the unlinker thread"));
    errors
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writer_and_an_unlinker_racing_on_one_name_leave_exactly_the_last_operation() {
    let (garage, mut mount) = start("write-unlink-race");
    let data = mount.path().join("data");
    // Race on `gone`, then unlink it; race on `kept`, then write it.
    let (gone, kept) = (data.join("gone"), data.join("kept"));
    let (errors, final_ops) = within(&mount, HANG_LIMIT * 2, "the write/unlink races", {
        let (gone, kept) = (gone.clone(), kept.clone());
        move || {
            let mut errors = race_writer_and_unlinker(&gone);
            let unlinked = match std::fs::remove_file(&gone) {
                Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(()),
                other => other,
            };
            errors.extend(race_writer_and_unlinker(&kept));
            let written = File::create(&kept)
                .and_then(|mut f| f.write_all(b"the last write\n").and_then(|()| close(f)));
            (errors, (unlinked, written))
        }
    });
    assert!(errors.is_empty(), "errors other than ENOENT: {errors:#?}");
    final_ops.0.expect("the final unlink");
    final_ops.1.expect("the final write");

    let seen = within(&mount, HANG_LIMIT, "reading the raced names", {
        let (gone, kept) = (gone.clone(), kept.clone());
        move || {
            (
                std::fs::metadata(gone).map(|m| m.len()),
                std::fs::read(kept),
            )
        }
    });
    assert_errno(seen.0, libc::ENOENT, "stat of the name unlinked last");
    assert_eq!(
        seen.1.expect("read the name written last"),
        b"the last write\n"
    );
    wait_until(
        "the bucket holds exactly the name written last",
        LANDING,
        async || garage.list_keys("write-unlink-race", "").await == ["kept"],
    )
    .await;

    assert_daemon_answers(&mut mount, "after the races");
    assert_rss_within_bound(&mount, "after the races");
    stop_cleanly(&mut mount);
    assert_eq!(
        garage.list_keys("write-unlink-race", "").await,
        ["kept"],
        "after every commit: the name written last, and not the one unlinked last"
    );
    assert_eq!(
        garage.get_object("write-unlink-race", "kept").await,
        b"the last write\n"
    );
}
