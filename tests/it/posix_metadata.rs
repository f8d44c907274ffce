//! `posix_metadata: true` on a real garage bucket through a real mount: modes, owners, times
//! and symbolic links are kept in each object's user metadata under s3fs's names, survive a
//! remount, read back what an s3fs-written object carries, and the kernel enforces them per
//! user (`default_permissions` with `allow_other`).

use std::collections::HashMap;
use std::os::unix::fs::{MetadataExt, PermissionsExt, chown, symlink};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, UNIX_EPOCH};

use crate::common::{Garage, MsfsMount, config_yaml, config_yaml_with, s3_backend_yaml, yaml_str};

/// `nobody` and a uid that has no account: neither needs to exist for the kernel's checks.
const NOBODY: u32 = 65534;
const STRANGER: u32 = 4321;

fn config(garage: &Garage, bucket: &str) -> String {
    config_yaml_with(
        "allow_other: true\n",
        &[format!(
            "{}    readonly: false\n    flush_on_close: true\n    posix_metadata: true\n",
            s3_backend_yaml("data", bucket, "", garage)
        )],
    )
}

/// The object's user metadata, as S3 returns it.
async fn metadata_of(garage: &Garage, bucket: &str, key: &str) -> HashMap<String, String> {
    let head = garage
        .client()
        .head_object()
        .bucket(bucket)
        .key(key)
        .send()
        .await
        .unwrap_or_else(|e| panic!("HEAD {key}: {e}"));
    head.metadata().cloned().unwrap_or_default()
}

/// (mode with type bits, uid, gid, mtime in seconds) of `path`, not following a link.
fn stat(path: &Path) -> (u32, u32, u32, i64) {
    let meta = std::fs::symlink_metadata(path).unwrap_or_else(|e| panic!("lstat {path:?}: {e}"));
    (meta.mode(), meta.uid(), meta.gid(), meta.mtime())
}

/// Runs `program args…` as `uid` (group the same, no supplementary groups) in the C locale.
fn as_user(uid: u32, program: &str, args: &[&str]) -> Result<String, String> {
    let out = Command::new(program)
        .args(args)
        .uid(uid)
        .gid(uid)
        .env("LC_ALL", "C")
        .current_dir("/")
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("run {program} as {uid}: {e}"));
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

/// The mount fixture keeps its mountpoint in a private (0700) directory: open the way to it.
fn open_the_way_to(m: &MsfsMount) {
    let parent = m.path().parent().expect("the mountpoint has a parent");
    std::fs::set_permissions(parent, std::fs::Permissions::from_mode(0o755))
        .expect("open the mountpoint's parent");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn modes_owners_times_and_links_are_kept_in_the_objects_and_survive_a_remount() {
    let garage = Garage::start();
    garage.create_bucket("posix");
    let config = config(&garage, "posix");
    let mut m = MsfsMount::start(&config, "yaml").expect("mount");
    let data = m.path().join("data");
    let when = UNIX_EPOCH + Duration::from_secs(1_500_000_000);

    std::fs::write(data.join("script.sh"), "#!/bin/sh\necho hi\n").expect("write");
    std::fs::set_permissions(
        data.join("script.sh"),
        std::fs::Permissions::from_mode(0o750),
    )
    .expect("chmod");
    chown(data.join("script.sh"), Some(1234), Some(5678)).expect("chown");
    std::fs::File::options()
        .write(true)
        .open(data.join("script.sh"))
        .and_then(|f| f.set_modified(when))
        .expect("set the modification time");
    std::fs::DirBuilder::new()
        .create(data.join("dir"))
        .expect("mkdir");
    std::fs::set_permissions(data.join("dir"), std::fs::Permissions::from_mode(0o711))
        .expect("chmod dir");
    symlink("script.sh", data.join("link")).expect("symlink");
    let fifo = std::ffi::CString::new(data.join("pipe").into_os_string().into_encoded_bytes())
        .expect("a path without NUL");
    // SAFETY: a valid NUL-terminated path; mkfifo reads it and keeps nothing.
    assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o640) }, 0, "mkfifo");

    let file = (libc::S_IFREG | 0o750, 1234, 5678, 1_500_000_000);
    let dir_mode = libc::S_IFDIR | 0o711;
    assert_eq!(stat(&data.join("script.sh")), file);
    assert_eq!(stat(&data.join("dir")).0, dir_mode);
    assert_eq!(stat(&data.join("link")).0, libc::S_IFLNK | 0o777);
    assert_eq!(
        std::fs::read_link(data.join("link")).expect("readlink"),
        Path::new("script.sh")
    );

    // In the objects, as s3fs writes them: the mode in decimal with its type bits.
    let meta = metadata_of(&garage, "posix", "script.sh").await;
    assert_eq!(
        meta.get("mode").map(String::as_str),
        Some("33256"),
        "{meta:?}"
    );
    assert_eq!(meta.get("uid").map(String::as_str), Some("1234"));
    assert_eq!(meta.get("gid").map(String::as_str), Some("5678"));
    assert_eq!(meta.get("mtime").map(String::as_str), Some("1500000000"));
    let marker = metadata_of(&garage, "posix", "dir/").await;
    assert_eq!(
        marker.get("mode"),
        Some(&dir_mode.to_string()),
        "{marker:?}"
    );
    assert_eq!(garage.get_object("posix", "link").await, b"script.sh");
    let link = metadata_of(&garage, "posix", "link").await;
    assert_eq!(link.get("mode"), Some(&(libc::S_IFLNK | 0o777).to_string()));
    // A FIFO is an empty object whose mode says so; the kernel carries its data.
    assert_eq!(stat(&data.join("pipe")).0, libc::S_IFIFO | 0o640);
    assert_eq!(garage.get_object("posix", "pipe").await, b"");
    let pipe = data.join("pipe");
    let writer = std::thread::spawn(move || std::fs::write(pipe, b"through the pipe"));
    assert_eq!(
        std::fs::read(data.join("pipe")).expect("read the FIFO"),
        b"through the pipe"
    );
    writer.join().expect("writer").expect("write the FIFO");

    // A rename keeps them; an append moves the modification time, not the mode.
    std::fs::rename(data.join("script.sh"), data.join("run.sh")).expect("rename");
    std::fs::rename(data.join("dir"), data.join("moved")).expect("rename dir");
    std::fs::OpenOptions::new()
        .append(true)
        .open(data.join("run.sh"))
        .and_then(|mut f| std::io::Write::write_all(&mut f, b"echo again\n"))
        .expect("append");
    let (mode, uid, gid, mtime) = stat(&data.join("run.sh"));
    assert_eq!((mode, uid, gid), (file.0, file.1, file.2));
    assert!(mtime > 1_500_000_000, "a write moves the modification time");
    assert_eq!(stat(&data.join("moved")).0, dir_mode);

    // A new process reads them from the store.
    m.stop_with_umount();
    let m = MsfsMount::start(&config, "yaml").expect("mount again");
    let data = m.path().join("data");
    let (mode, uid, gid, _) = stat(&data.join("run.sh"));
    assert_eq!((mode, uid, gid), (file.0, file.1, file.2));
    assert_eq!(stat(&data.join("moved")).0, dir_mode);
    assert_eq!(stat(&data.join("link")).0, libc::S_IFLNK | 0o777);
    assert_eq!(stat(&data.join("pipe")).0, libc::S_IFIFO | 0o640);
    assert_eq!(
        std::fs::read_link(data.join("link")).expect("readlink"),
        Path::new("script.sh")
    );
    let listed = Command::new("ls")
        .arg("-ln")
        .arg(&data)
        .env("LC_ALL", "C")
        .output()
        .expect("ls -ln");
    let listed = String::from_utf8_lossy(&listed.stdout);
    assert!(
        listed.contains("-rwxr-x--- 1 1234 5678"),
        "ls -l shows each object's own mode and owner:\n{listed}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_s3fs_writes_shows_the_same_and_changing_it_copies_no_bytes() {
    let garage = Garage::start();
    garage.create_bucket("s3fs-made");
    // An object and a link as s3fs 1.9x stores them (`chmod 750; chown 1234:1234; ln -s`).
    let client = garage.client();
    for (key, body, mode) in [
        ("tool", "binary", libc::S_IFREG | 0o750),
        ("latest", "tool", libc::S_IFLNK | 0o777),
    ] {
        client
            .put_object()
            .bucket("s3fs-made")
            .key(key)
            .body(body.as_bytes().to_vec().into())
            .metadata("mode", mode.to_string())
            .metadata("uid", "1234")
            .metadata("gid", "1234")
            .metadata("mtime", "1600000000")
            .metadata("team", "vision")
            .send()
            .await
            .expect("put as s3fs would");
    }
    let m = MsfsMount::start(&config(&garage, "s3fs-made"), "yaml").expect("mount");
    let data = m.path().join("data");
    assert_eq!(
        stat(&data.join("tool")),
        (libc::S_IFREG | 0o750, 1234, 1234, 1_600_000_000)
    );
    assert_eq!(
        std::fs::read_link(data.join("latest")).expect("readlink"),
        Path::new("tool")
    );
    assert_eq!(
        std::fs::read(data.join("latest")).expect("follow"),
        b"binary"
    );

    let puts = garage.s3_requests("PutObject");
    std::fs::set_permissions(data.join("tool"), std::fs::Permissions::from_mode(0o755))
        .expect("chmod");
    assert_eq!(
        garage.s3_requests("PutObject"),
        puts,
        "a chmod is a CopyObject of the object onto itself, not a new upload"
    );
    let meta = metadata_of(&garage, "s3fs-made", "tool").await;
    assert_eq!(meta.get("mode"), Some(&(libc::S_IFREG | 0o755).to_string()));
    assert_eq!(meta.get("uid").map(String::as_str), Some("1234"));
    assert_eq!(
        meta.get("team").map(String::as_str),
        Some("vision"),
        "metadata msfs does not know is kept"
    );
    assert_eq!(garage.get_object("s3fs-made", "tool").await, b"binary");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_users_private_file_is_refused_to_another_user_on_the_same_mount() {
    let garage = Garage::start();
    garage.create_bucket("shared");
    let m = MsfsMount::start(&config(&garage, "shared"), "yaml").expect("mount");
    open_the_way_to(&m);
    let shared = m.path().join("data/shared");
    std::fs::DirBuilder::new().create(&shared).expect("mkdir");
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o777)).expect("chmod");
    let mine = shared.join("mine");
    let mine_text = mine.to_str().expect("utf-8 path");

    // nobody creates a file and closes it to everyone else.
    as_user(
        NOBODY,
        "sh",
        &[
            "-c",
            r#"echo secret > "$1" && chmod 600 "$1""#,
            "sh",
            mine_text,
        ],
    )
    .expect("nobody writes its own file");
    let (mode, uid, gid, _) = stat(&mine);
    assert_eq!(
        (mode & 0o7777, uid, gid),
        (0o600, NOBODY, NOBODY),
        "the creator owns it"
    );
    assert_eq!(
        as_user(NOBODY, "cat", &[mine_text]).expect("owner reads"),
        "secret\n"
    );
    let refused = as_user(STRANGER, "cat", &[mine_text]).expect_err("another user reads");
    assert!(refused.contains("Permission denied"), "{refused}");
    let refused = as_user(STRANGER, "chmod", &["644", mine_text]).expect_err("another chmods");
    assert!(refused.contains("Operation not permitted"), "{refused}");
    let refused = as_user(NOBODY, "chown", &["4321", mine_text]).expect_err("owner gives away");
    assert!(refused.contains("Operation not permitted"), "{refused}");
    // Root is not bound by modes.
    assert_eq!(
        std::fs::read_to_string(&mine).expect("root reads"),
        "secret\n"
    );
    // And it sticks: the owner and mode are the object's.
    let meta = metadata_of(&garage, "shared", "shared/mine").await;
    assert_eq!(meta.get("uid"), Some(&NOBODY.to_string()), "{meta:?}");
    assert_eq!(meta.get("mode"), Some(&(libc::S_IFREG | 0o600).to_string()));
}

/// s3fs-fuse (Debian's) mounted on a bucket of `garage`, stopped and unmounted when dropped.
struct S3fs {
    child: Option<std::process::Child>,
    mountpoint: tempfile::TempDir,
    _work: tempfile::TempDir,
}

impl S3fs {
    fn mount(garage: &Garage, bucket: &str) -> S3fs {
        let work = tempfile::tempdir().expect("work dir");
        let passwd = work.path().join("passwd");
        std::fs::write(
            &passwd,
            format!("{}:{}\n", garage.access_key(), garage.secret_key()),
        )
        .expect("passwd file");
        std::fs::set_permissions(&passwd, std::fs::Permissions::from_mode(0o600)).expect("0600");
        let mountpoint = tempfile::tempdir().expect("mountpoint");
        // stat_cache_expire=1: what msfs changed shows after a second, not after s3fs's 900 s.
        let options = format!(
            "passwd_file={},url={},use_path_request_style,endpoint={},stat_cache_expire=1",
            passwd.display(),
            garage.endpoint(),
            garage.region()
        );
        let child = Command::new("s3fs")
            .arg(bucket)
            .arg(mountpoint.path())
            .args(["-f", "-o", &options])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start s3fs (scripts/install-test-deps.sh installs it)");
        let s3fs = S3fs {
            child: Some(child),
            mountpoint,
            _work: work,
        };
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while !crate::common::is_mounted(s3fs.path()) {
            assert!(
                std::time::Instant::now() < deadline,
                "s3fs did not mount within 30 s"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        s3fs
    }

    fn path(&self) -> &Path {
        self.mountpoint.path()
    }
}

impl Drop for S3fs {
    fn drop(&mut self) {
        // Lazily: a hung s3fs must not hang the test's end.
        let _ = Command::new("umount").arg("-l").arg(self.path()).status();
        if let Some(child) = self.child.take() {
            crate::common::terminate_child(child, Duration::from_secs(10));
        }
    }
}

/// Runs a shell script with `$1` = `dir` and `$2` = `name`, bounded: a FUSE call that never
/// returns fails the test after 60 s instead of holding it. Returns its stdout.
fn sh_in(dir: &Path, name: &str, script: &str) -> String {
    let out = Command::new("timeout")
        .args(["60", "sh", "-c", script, "sh"])
        .arg(dir)
        .arg(name)
        .env("LC_ALL", "C")
        .stdin(Stdio::null())
        .output()
        .expect("run sh");
    assert!(
        out.status.success(),
        "{script}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s3fs_and_msfs_read_each_others_modes_owners_links_and_fifos() {
    let garage = Garage::start();
    garage.create_bucket("both");
    let s3fs = S3fs::mount(&garage, "both");
    let m = MsfsMount::start(&config(&garage, "both"), "yaml").expect("mount");
    let (by_s3fs, by_msfs) = (s3fs.path().to_path_buf(), m.path().join("data"));
    // What each tool writes, the same way. The FIFO's mode is one the umask leaves whole, so it
    // is made with it: s3fs 1.90 now and then loses the chmod that `mkfifo -m` sends after the
    // mknod (its object kept 0600 for a `-m 620` in 2 of 15 runs).
    let make = r#"umask 022 && cd "$1" && mkdir "$2" && cd "$2" && echo data > f && chmod 750 f &&
        chown 1234:5678 f && touch -m -d @1600000000 f && ln -s f link && mkdir -m 705 d &&
        mkfifo -m 640 fifo"#;
    // What each shows: type, mode, owner, mtime of the file, and the link's target.
    let show = r#"cd "$1/$2" && stat -c '%n %F %a %u %g' f link d fifo && stat -c %Y f &&
        readlink link && cat link"#;
    let expected = "f regular file 750 1234 5678\nlink symbolic link 777 0 0\n\
                    d directory 705 0 0\nfifo fifo 640 0 0\n1600000000\nf\ndata\n";

    sh_in(&by_s3fs, "s3fs", make);
    sh_in(&by_msfs, "msfs", make);
    // s3fs caches what it stats for a second.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    // s3fs 1.90 does not keep a time set on a file it has just written (it shows the upload's),
    // so of its own file only the mtime is left out; whatever it stored, msfs must show alike.
    let without_mtime = |shown: &str| {
        let mut lines: Vec<&str> = shown.lines().collect();
        lines.remove(4);
        lines.join("\n")
    };
    for writer in ["s3fs", "msfs"] {
        let via_s3fs = sh_in(&by_s3fs, writer, show);
        let via_msfs = sh_in(&by_msfs, writer, show);
        assert_eq!(
            via_msfs, via_s3fs,
            "{writer}'s objects through msfs and s3fs"
        );
        assert_eq!(
            without_mtime(&via_msfs),
            without_mtime(expected),
            "{writer}'s objects"
        );
    }
    assert_eq!(
        sh_in(&by_s3fs, "msfs", show),
        expected,
        "msfs's times, read by s3fs"
    );
}

/// `msfs generate-manifest --posix-metadata` reads owners and modes into the manifest's owner
/// columns (a HEAD per entry); the manifest mount then shows them with no HEAD at all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_manifest_generated_with_posix_metadata_shows_the_objects_owners_and_modes() {
    let garage = Garage::start();
    garage.create_bucket("owned");
    let client = garage.client();
    // As s3fs (or a posix_metadata mount) stores them; `plain` has no metadata.
    for (key, body, mode, owner) in [
        ("tool", "binary", libc::S_IFREG | 0o750, "1234"),
        ("private/", "", libc::S_IFDIR | 0o700, "5"),
        ("private/notes", "n", libc::S_IFREG | 0o600, "5"),
        ("plain", "p", 0, ""),
    ] {
        let mut put = client
            .put_object()
            .bucket("owned")
            .key(key)
            .body(body.as_bytes().to_vec().into());
        if !owner.is_empty() {
            put = put
                .metadata("mode", mode.to_string())
                .metadata("uid", owner)
                .metadata("gid", "100");
        }
        put.send().await.expect("put");
    }
    let state = tempfile::tempdir().expect("tempdir");
    let manifest = state.path().join("manifest");
    let yaml = config_yaml(&[format!(
        "{}    manifest_path: {}\n",
        s3_backend_yaml("data", "owned", "", &garage),
        yaml_str(manifest.to_str().expect("utf-8 path"))
    )]);
    let config = state.path().join("config.yaml");
    std::fs::write(&config, &yaml).expect("write config");
    let heads = garage.s3_requests("HeadObject");
    let out = Command::new(env!("CARGO_BIN_EXE_msfs"))
        .args(["generate-manifest", "--posix-metadata", "--backend", "data"])
        .arg("--output")
        .arg(&manifest)
        .arg(&config)
        .output()
        .expect("run generate-manifest");
    assert!(
        out.status.success(),
        "generate-manifest: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    // tool, private/ (the marker), plain, private/notes.
    assert_eq!(garage.s3_requests("HeadObject") - heads, 4);

    let m = MsfsMount::start(&yaml, "yaml").expect("manifest mount");
    let heads = garage.s3_requests("HeadObject");
    let data = m.path().join("data");
    let mode_owner = |name: &str| {
        let (mode, uid, gid, _) = stat(&data.join(name));
        (mode, uid, gid)
    };
    assert_eq!(mode_owner("tool"), (libc::S_IFREG | 0o750, 1234, 100));
    assert_eq!(mode_owner("private"), (libc::S_IFDIR | 0o700, 5, 100));
    assert_eq!(mode_owner("private/notes"), (libc::S_IFREG | 0o600, 5, 100));
    let (plain_mode, ..) = mode_owner("plain");
    assert_eq!(plain_mode & 0o7777, 0o444, "a read-only backend's default");
    assert_eq!(
        garage.s3_requests("HeadObject"),
        heads,
        "the owners come from the manifest, not the objects"
    );
}

/// A program being run from the mount cannot be opened for writing (ETXTBSY), and an open that
/// fails so changes nothing: `O_RDONLY | O_TRUNC` used to be truncated by msfs in the open,
/// before the kernel's check, and the running program died of SIGBUS (pjdfstest
/// `open::etxtbsy`, now and then in CI). Once the program has ended, the same open truncates.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_open_refused_with_etxtbsy_leaves_the_running_program_whole() {
    use std::os::unix::fs::OpenOptionsExt;

    let garage = Garage::start();
    garage.create_bucket("exec");
    let mut m = MsfsMount::start(&config(&garage, "exec"), "yaml").expect("mount");
    let program = m.path().join("data").join("sleep");
    let original = std::fs::read("/bin/sleep").expect("read /bin/sleep");
    std::fs::write(&program, &original).expect("copy sleep onto the mount");
    std::fs::set_permissions(&program, std::fs::Permissions::from_mode(0o755)).expect("chmod");

    /// Killed and reaped however the test ends.
    struct Running(std::process::Child);
    impl Drop for Running {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    // spawn returns once the exec has succeeded: from then on the kernel denies writers.
    let running = Running(
        Command::new(&program)
            .arg("60")
            .spawn()
            .expect("run the copy"),
    );
    let refused = |options: &mut std::fs::OpenOptions| {
        let err = options
            .open(&program)
            .expect_err("opened a running program for writing");
        assert_eq!(err.raw_os_error(), Some(libc::ETXTBSY), "{err}");
    };
    refused(std::fs::OpenOptions::new().write(true));
    refused(std::fs::OpenOptions::new().read(true).write(true));
    refused(
        std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_TRUNC),
    );
    let mut running = running;
    assert_eq!(
        running.0.try_wait().expect("wait"),
        None,
        "the program still runs"
    );
    assert_eq!(std::fs::read(&program).expect("read"), original);
    drop(running);
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_TRUNC)
        .open(&program)
        .expect("O_RDONLY | O_TRUNC once nothing runs it");
    assert_eq!(std::fs::metadata(&program).expect("stat").len(), 0);
    assert!(m.stop_with_umount().success(), "{}", m.stderr_text());
    let stored = garage.get_object("exec", "sleep").await;
    assert!(stored.is_empty(), "the store has {} bytes", stored.len());
}
