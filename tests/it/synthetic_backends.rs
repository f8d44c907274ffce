//! The synthetic backends end to end, through a real `msfs mount` and real FUSE: a PSEUDO tree
//! browsed with `find`, `ls` and `stat` and read byte for byte against its pattern, and a RAM
//! backend written with `cp`, renamed, deleted and filled to its bounds.

use std::collections::BTreeSet;
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::process::Command;

use crate::common::{MsfsMount, config_yaml_with, pattern, read_direct, run};
use msfs::store::pseudo_fill;

const MIB: usize = 1 << 20;

/// A backend entry of `backend_type` with `keys` for its sub-section (each line indented by six
/// spaces) and `extra` backend keys (indented by four).
fn backend(dir_name: &str, backend_type: &str, extra: &str, keys: &[&str]) -> String {
    let mut out = format!("  - dir_name: {dir_name}\n    backend_type: {backend_type}\n{extra}");
    out.push_str(&format!("    {backend_type}:\n"));
    for key in keys {
        out.push_str(&format!("      {key}\n"));
    }
    out
}

/// The bytes a PSEUDO file `key` of `size` bytes holds.
fn expected(key: &str, size: usize) -> Vec<u8> {
    let mut out = vec![0; size];
    pseudo_fill(key, 0, &mut out);
    out
}

fn relative_lines(root: &Path, output: &str) -> BTreeSet<String> {
    output
        .lines()
        .map(|l| {
            l.strip_prefix(&format!("{}/", root.display()))
                .unwrap_or_else(|| panic!("{l} is not under {}", root.display()))
                .to_string()
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pseudo_tree_is_browsed_and_read_exactly_as_generated() {
    const SIZE: usize = 3 * MIB + 5;
    let config = config_yaml_with(
        "cache_line_size: 1048576\n",
        &[backend(
            "tree",
            "PSEUDO",
            "",
            &[
                "files_at_depth_0: 3",
                "subdirectories_at_depth_0: 2",
                "files_at_depth_1: 4",
                "subdirectories_at_depth_1: 3",
                "files_at_depth_2: 5",
                &format!("file_size: {SIZE}"),
                "max_list_page_size: 2",
            ],
        )],
    );
    let m = MsfsMount::start(&config, "yaml").expect("mount");
    let root = m.path().join("tree");

    let mut want_files = BTreeSet::new();
    let mut want_dirs = BTreeSet::new();
    for f in 0..3 {
        want_files.insert(format!("file_{f:08X}"));
    }
    for d in 0..2 {
        let d1 = format!("dir_{d:08X}");
        want_dirs.insert(d1.clone());
        for f in 0..4 {
            want_files.insert(format!("{d1}/file_{f:08X}"));
        }
        for e in 0..3 {
            let d2 = format!("{d1}/dir_{e:08X}");
            want_dirs.insert(d2.clone());
            for f in 0..5 {
                want_files.insert(format!("{d2}/file_{f:08X}"));
            }
        }
    }
    let path = root.to_str().expect("utf-8 path");
    let files = relative_lines(&root, &run("find", &[path, "-type", "f"]));
    let dirs = relative_lines(&root, &run("find", &[path, "-mindepth", "1", "-type", "d"]));
    assert_eq!(files.len(), 41);
    assert_eq!(files, want_files);
    assert_eq!(dirs, want_dirs);

    for key in &want_files {
        assert_eq!(
            std::fs::metadata(root.join(key)).expect("stat").len(),
            SIZE as u64,
            "{key}"
        );
    }
    for key in ["file_00000000", "dir_00000001/dir_00000002/file_00000004"] {
        let want = expected(key, SIZE);
        assert!(
            std::fs::read(root.join(key)).expect("read") == want,
            "{key}"
        );
        assert!(read_direct(&root.join(key)) == want, "{key} (O_DIRECT)");
        let file = std::fs::File::open(root.join(key)).expect("open");
        let mut buf = vec![0; 4096];
        for offset in [1, MIB - 100, 2 * MIB + 1, SIZE - 4096] {
            file.read_exact_at(&mut buf, offset as u64).expect("pread");
            assert!(buf[..] == want[offset..offset + 4096], "{key} at {offset}");
        }
    }
    let err = std::fs::metadata(root.join("file_00000003")).expect_err("not generated");
    assert_eq!(err.raw_os_error(), Some(libc::ENOENT));
    let err = std::fs::write(root.join("new"), b"x").expect_err("read-only");
    assert_eq!(err.raw_os_error(), Some(libc::EROFS));
    let err = std::fs::remove_file(root.join("file_00000000")).expect_err("read-only");
    assert_eq!(err.raw_os_error(), Some(libc::EROFS));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_flat_pseudo_directory_with_unpadded_names_lists_completely() {
    let config = config_yaml_with(
        "",
        &[backend(
            "flat",
            "PSEUDO",
            "",
            &[
                "file_name_format: \"f%d.bin\"",
                "file_starting_number: 7",
                "files_at_depth_0: 2500",
                "file_size: 10",
                "max_list_page_size: 100",
            ],
        )],
    );
    let m = MsfsMount::start(&config, "yaml").expect("mount");
    let root = m.path().join("flat");
    let names: BTreeSet<String> = std::fs::read_dir(&root)
        .expect("ls")
        .map(|e| e.expect("entry").file_name().into_string().expect("utf-8"))
        .collect();
    let want: BTreeSet<String> = (7..2507).map(|n| format!("f{n}.bin")).collect();
    assert_eq!(names, want);
    let listed = run("ls", &[root.to_str().expect("path")]);
    assert_eq!(listed.lines().count(), 2500);
    assert_eq!(
        std::fs::read(root.join("f2506.bin")).expect("read"),
        expected("f2506.bin", 10)
    );
    let err = std::fs::metadata(root.join("f2507.bin")).expect_err("past the last");
    assert_eq!(err.raw_os_error(), Some(libc::ENOENT));
}

/// A writable RAM backend `mem` with `ram` keys, multipart uploads from 1 MiB on.
fn ram_mount(ram: &[&str]) -> MsfsMount {
    ram_mount_with(ram, &[])
}

/// [`ram_mount`], with more arguments for `msfs mount`.
fn ram_mount_with(ram: &[&str], args: &[&str]) -> MsfsMount {
    let config = config_yaml_with(
        "multipart_upload_threshold_bytes: 1048576\n",
        &[backend(
            "mem",
            "RAM",
            "    readonly: false\n    flush_on_close: true\n",
            ram,
        )],
    );
    MsfsMount::start_with_args(&config, "yaml", args).expect("mount")
}

/// A RAM backend starts empty in every process: what a killed process wrote to its RAM backend
/// and never committed is not recovered into the next process's (which would fill it with a
/// file nobody wrote there).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_ram_mounts_unsaved_writes_stay_out_of_the_next_ram_mount() {
    const LIMITS: [&str; 1] = ["max_total_object_space: 12582912"];
    let mut first = ram_mount_with(&LIMITS, &["--no-fd-holder"]);
    let unsaved = first.path().join("mem/unsaved");
    let mut writer = Command::new("python3")
        .arg("-c")
        .arg(
            "import sys, time\n\
             f = open(sys.argv[1], 'wb', buffering=0)\n\
             f.write(b'x' * (8 << 20))\n\
             print('ready', flush=True)\n\
             time.sleep(120)\n",
        )
        .arg(&unsaved)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("spawn the writer");
    let mut ready = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(writer.stdout.as_mut().expect("stdout")),
        &mut ready,
    )
    .expect("the writer's ready");
    assert_eq!(ready.trim(), "ready");
    first.stop_with_signal(libc::SIGKILL);
    let _ = writer.kill();
    let _ = writer.wait();
    drop(first);

    let second = ram_mount(&LIMITS);
    let root = second.path().join("mem");
    assert!(
        !root.join("unsaved").exists(),
        "another process's file appeared"
    );
    // All 12 MiB are free: 8 MiB of that file would leave no room for these.
    write_synced(&root.join("a"), &pattern(6 * MIB, 7)).expect("a fits");
    write_synced(&root.join("b"), &pattern(6 * MIB, 8)).expect("b fits");
}

fn cp(from: &Path, to: &Path) -> std::process::Output {
    Command::new("cp")
        .arg(from)
        .arg(to)
        .output()
        .expect("run cp")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ram_backend_keeps_what_cp_writes_through_renames_and_deletes() {
    let m = ram_mount(&["max_total_object_space: 268435456"]);
    let root = m.path().join("mem");
    let local = tempfile::tempdir().expect("tempdir");
    let small = pattern(1000, 1);
    let big = pattern(20 * MIB + 3, 2); // three parts
    std::fs::write(local.path().join("small"), &small).expect("write local");
    std::fs::write(local.path().join("big"), &big).expect("write local");

    for name in ["small", "big"] {
        let out = cp(&local.path().join(name), &root.join(name));
        assert!(out.status.success(), "cp {name}: {out:?}");
    }
    assert!(std::fs::read(root.join("small")).expect("read") == small);
    assert!(read_direct(&root.join("big")) == big);

    std::fs::create_dir(root.join("sub")).expect("mkdir");
    std::fs::rename(root.join("small"), root.join("sub/small2")).expect("rename small");
    std::fs::rename(root.join("big"), root.join("big2")).expect("rename big");
    assert!(!root.join("small").exists() && !root.join("big").exists());
    assert!(std::fs::read(root.join("sub/small2")).expect("read") == small);
    assert!(read_direct(&root.join("big2")) == big);

    // Overwrite in place, then delete.
    std::fs::write(root.join("sub/small2"), b"replaced").expect("overwrite");
    assert_eq!(
        std::fs::read(root.join("sub/small2")).expect("read"),
        b"replaced"
    );
    std::fs::remove_file(root.join("big2")).expect("rm");
    std::fs::remove_file(root.join("sub/small2")).expect("rm");
    std::fs::remove_dir(root.join("sub")).expect("rmdir");
    assert_eq!(std::fs::read_dir(&root).expect("ls").count(), 0);
}

/// Writes `body` to `path` and fsyncs it: Ok means the store acknowledged the bytes.
fn write_synced(path: &Path, body: &[u8]) -> std::io::Result<()> {
    let mut file = std::fs::File::create(path)?;
    file.write_all(body)?;
    file.sync_all()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_ram_backend_fails_writes_with_enospc_and_loses_nothing_acknowledged() {
    // 12 MiB and 5 objects.
    let m = ram_mount(&["max_total_object_space: 12582912", "max_total_objects: 5"]);
    let root = m.path().join("mem");
    let a = pattern(4 * MIB, 3);
    let b = pattern(4 * MIB + 1, 4);
    write_synced(&root.join("a"), &a).expect("a fits");
    write_synced(&root.join("b"), &b).expect("b fits");

    // Out of space: 4 + 4 + 6 MiB > 12 MiB.
    let err = write_synced(&root.join("c"), &pattern(6 * MIB, 5)).expect_err("no room for c");
    assert_eq!(err.raw_os_error(), Some(libc::ENOSPC), "{err}");
    let local = tempfile::tempdir().expect("tempdir");
    std::fs::write(local.path().join("d"), pattern(5 * MIB, 6)).expect("write local");
    let out = cp(&local.path().join("d"), &root.join("d"));
    assert!(!out.status.success(), "cp past the bound succeeded");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("No space left on device"),
        "{out:?}"
    );
    assert!(read_direct(&root.join("a")) == a, "a intact");
    assert!(read_direct(&root.join("b")) == b, "b intact");
    std::fs::remove_file(root.join("c")).expect("rm c");
    std::fs::remove_file(root.join("d")).expect("rm d");

    // Out of objects: a, b and a directory marker leave room for two more.
    std::fs::create_dir(root.join("dir")).expect("mkdir");
    write_synced(&root.join("dir/e"), b"e").expect("e fits");
    write_synced(&root.join("f"), b"f").expect("f fits");
    let err = write_synced(&root.join("g"), b"g").expect_err("no object left for g");
    assert_eq!(err.raw_os_error(), Some(libc::ENOSPC), "{err}");
    std::fs::remove_file(root.join("g")).expect("rm g");

    assert!(read_direct(&root.join("a")) == a, "a intact");
    assert!(read_direct(&root.join("b")) == b, "b intact");
    assert_eq!(std::fs::read(root.join("dir/e")).expect("read e"), b"e");
    assert_eq!(std::fs::read(root.join("f")).expect("read f"), b"f");
    // Deleting makes room again.
    std::fs::remove_file(root.join("b")).expect("rm b");
    write_synced(&root.join("g"), &pattern(6 * MIB, 7)).expect("g fits now");
}

/// The value of the Prometheus sample `series` (name and labels exactly as exposed), 0 when
/// absent.
fn sample(port: u16, series: &str) -> u64 {
    let (status, text) = crate::common::http_get(port, "/metrics").expect("scrape /metrics");
    assert_eq!(status, 200, "{text}");
    text.lines()
        .find_map(|line| line.strip_prefix(series)?.strip_prefix(' '))
        .map_or(0, |value| {
            value.trim().parse::<f64>().expect("number") as u64
        })
}

/// Polls `done` for up to a minute (a bound on a hang, not a timing assertion).
fn eventually(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !done() {
        assert!(
            std::time::Instant::now() < deadline,
            "never happened: {what}"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// A mount whose backend `flat` is a PSEUDO directory of `files` 100-byte files, with
/// `evictable_inode_limit` at `limit`, the limit checked every `check_ms`, metrics on the port
/// returned.
fn flat_pseudo_mount(files: usize, limit: u64, check_ms: u64) -> (MsfsMount, u16) {
    let port = crate::common::free_port();
    let config = config_yaml_with(
        &format!(
            "endpoint: http://127.0.0.1:{port}\nevictable_inode_limit: {limit}\n\
             ttl_check_interval: {check_ms}\n"
        ),
        &[backend(
            "flat",
            "PSEUDO",
            "",
            &[&format!("files_at_depth_0: {files}"), "file_size: 100"],
        )],
    );
    (MsfsMount::start(&config, "yaml").expect("mount"), port)
}

/// `ls -l` of a directory of 10,000 files, with `evictable_inode_limit` at its smallest: the
/// listing is whole, and the mount then holds no more inodes than the limit (the kernel was
/// asked to drop the least recently used files' entries), every file still there when asked for.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listing_bigger_than_the_inode_limit_leaves_at_most_the_limit_held() {
    const FILES: usize = 10_000;
    const LIMIT: u64 = 4096;
    let (m, port) = flat_pseudo_mount(FILES, LIMIT, 50);
    let root = m.path().join("flat");
    let listing = run("ls", &["-l", root.to_str().expect("utf-8 path")]);
    let files = listing.lines().filter(|l| l.starts_with('-')).count();
    assert_eq!(files, FILES, "every file listed once");
    assert!(
        listing
            .lines()
            .filter(|l| l.starts_with('-'))
            .all(|l| l.contains(" 100 "))
    );
    eventually("the mount holds at most the limit", || {
        sample(port, "msfs_fuse_inodes") <= LIMIT
    });
    let asked = sample(port, "msfs_fuse_inodes_evicted_total");
    assert!(
        asked >= (FILES as u64) - LIMIT,
        "asked the kernel to drop {asked}"
    );
    // Dropped entries are looked up again when used.
    let first = root.join("file_00000000");
    assert_eq!(std::fs::metadata(&first).expect("stat").len(), 100);
    assert!(std::fs::read(&first).expect("read") == expected("file_00000000", 100));
    assert_eq!(
        run("ls", &[root.to_str().expect("utf-8 path")])
            .lines()
            .count(),
        FILES
    );
}

/// A listing that outruns the evictor (here it never runs: checks an hour apart) stops taking
/// inodes at twice `evictable_inode_limit`: the names past it are listed without inodes (node
/// ID 0, which the kernel shows without keeping), and are looked up when used. Before, every
/// name `readdirplus` returned was an inode until the next eviction round.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listing_past_twice_the_inode_limit_lists_the_rest_without_inodes() {
    const FILES: usize = 20_000;
    const LIMIT: u64 = 4096;
    let (m, port) = flat_pseudo_mount(FILES, LIMIT, 3_600_000);
    let root = m.path().join("flat");
    // Names only (`-f`: unsorted, no stat): every page is a readdirplus.
    let names: BTreeSet<String> = run("ls", &["-f", root.to_str().expect("utf-8 path")])
        .lines()
        .filter(|name| *name != "." && *name != "..")
        .map(str::to_string)
        .collect();
    assert_eq!(names.len(), FILES, "every name listed once");
    let held = sample(port, "msfs_fuse_inodes");
    assert!(
        (2 * LIMIT - 2..=2 * LIMIT).contains(&held),
        "inodes held after the listing: {held} (the cap is {})",
        2 * LIMIT
    );
    assert_eq!(sample(port, "msfs_fuse_inodes_evicted_total"), 0);
    // A name listed without an inode is looked up when used: the last ones were.
    let last = names.last().expect("names");
    let path = root.join(last);
    assert_eq!(std::fs::metadata(&path).expect("stat").len(), 100);
    assert!(std::fs::read(&path).expect("read") == expected(last, 100));
    assert_eq!(sample(port, "msfs_fuse_inodes"), held + 1);
}

/// Top-level keys: metrics on `port`, and files' entries dropped after 0.4 s idle.
fn short_inode_ttl(port: u16) -> String {
    format!(
        "endpoint: http://127.0.0.1:{port}\nentry_attr_ttl: 200\nevictable_inode_ttl: 400\n\
         ttl_check_interval: 50\n"
    )
}

/// With a short `evictable_inode_ttl`, idle files' entries are dropped; an open file's never
/// is (its `/proc` link stays whole), nor a directory that is a process's working directory
/// (it can still tell its own path).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_files_are_dropped_but_open_files_and_working_directories_stay() {
    let port = crate::common::free_port();
    let config = config_yaml_with(
        &short_inode_ttl(port),
        &[backend(
            "tree",
            "PSEUDO",
            "",
            &[
                "files_at_depth_0: 20",
                "subdirectories_at_depth_0: 1",
                "files_at_depth_1: 3",
                "file_size: 10",
            ],
        )],
    );
    let m = MsfsMount::start(&config, "yaml").expect("mount");
    let root = m.path().join("tree");
    let sub = root.join("dir_00000000");
    // A shell whose working directory is in the mount, asked for its path after the idle
    // entries have gone.
    let shell = std::process::Command::new("sh")
        .args(["-c", "cd \"$1\" && { read _; pwd -P; }", "sh"])
        .arg(&sub)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("sh");
    let open = std::fs::File::open(root.join("file_00000000")).expect("open");
    for f in 0..20 {
        std::fs::metadata(root.join(format!("file_{f:08X}"))).expect("stat");
    }
    eventually("the idle files were dropped", || {
        sample(port, "msfs_fuse_inodes_evicted_total") >= 19
    });
    eventually("their inodes were freed", || {
        // The mount root, the backend's directory, the sub-directory and the open file.
        sample(port, "msfs_fuse_inodes") <= 4
    });
    let link = std::fs::read_link(format!(
        "/proc/self/fd/{}",
        std::os::fd::AsRawFd::as_raw_fd(&open)
    ))
    .expect("readlink");
    assert_eq!(
        link,
        root.join("file_00000000"),
        "the open file's entry stays"
    );
    let mut shell = shell;
    drop(shell.stdin.take());
    let out = shell.wait_with_output().expect("sh");
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        sub.to_str().expect("utf-8 path"),
        "the working directory still tells its path"
    );
    // A dropped entry is found again.
    assert_eq!(
        std::fs::metadata(root.join("file_00000013"))
            .expect("stat")
            .len(),
        10
    );
}

/// Files written, renamed and left idle on a writable backend: once their entries are dropped
/// and their inodes freed, every name is found again with what was written, the renamed one at
/// its new name only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn written_files_whose_entries_were_dropped_read_back_what_was_written() {
    let port = crate::common::free_port();
    let config = config_yaml_with(
        &short_inode_ttl(port),
        &[backend(
            "mem",
            "RAM",
            "    readonly: false\n",
            &["max_total_objects: 100", "max_total_object_space: 10485760"],
        )],
    );
    let m = MsfsMount::start(&config, "yaml").expect("mount");
    let root = m.path().join("mem");
    let body = |i: usize| pattern(1000 + i, i as u64);
    for i in 0..30 {
        std::fs::write(root.join(format!("w{i}")), body(i)).expect("write");
    }
    std::fs::rename(root.join("w7"), root.join("renamed")).expect("rename");
    eventually("the idle files were dropped", || {
        sample(port, "msfs_fuse_inodes_evicted_total") >= 30
    });
    eventually("their inodes were freed", || {
        sample(port, "msfs_fuse_inodes") <= 3
    });
    for i in (0..30).filter(|i| *i != 7) {
        assert!(
            std::fs::read(root.join(format!("w{i}"))).expect("read") == body(i),
            "w{i}"
        );
    }
    assert!(std::fs::read(root.join("renamed")).expect("read") == body(7));
    let gone = std::fs::metadata(root.join("w7")).expect_err("renamed away");
    assert_eq!(gone.raw_os_error(), Some(libc::ENOENT));
}
