//! Starting and stopping mounts: signals, `umount`, `mount.msfs`, `mount -t msfs`, `/etc/fstab`
//! lines, other config formats, and mounts that must fail fast with a clear message.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::common::{Garage, MsfsMount, config_yaml, is_mounted, s3_backend_yaml};

fn seeded_garage() -> Garage {
    let garage = Garage::start();
    garage.create_bucket("life");
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    runtime.block_on(garage.put_object("life", "dir/hello.txt", b"hello\n".to_vec()));
    garage
}

fn read_hello(mountpoint: &Path, dir_name: &str) -> String {
    std::fs::read_to_string(mountpoint.join(dir_name).join("dir/hello.txt")).expect("read hello")
}

#[test]
fn umount_stops_the_daemon_with_exit_zero() {
    let garage = seeded_garage();
    let mut mount = MsfsMount::start(
        &config_yaml(&[s3_backend_yaml("data", "life", "", &garage)]),
        "yaml",
    )
    .expect("mount");
    assert_eq!(read_hello(mount.path(), "data"), "hello\n");
    let status = mount.stop_with_umount();
    assert!(status.success(), "{status}: {}", mount.stderr_text());
    assert!(!is_mounted(mount.path()));
}

#[test]
fn a_mount_is_of_type_fuse_msfs_as_mount_and_df_show_it() {
    let garage = seeded_garage();
    let mut mount = MsfsMount::start(
        &config_yaml(&[s3_backend_yaml("data", "life", "", &garage)]),
        "yaml",
    )
    .expect("mount");
    assert_eq!(
        crate::common::mount::mount_fstype(mount.path()).as_deref(),
        Some("fuse.msfs"),
        "the mount's type in /proc/self/mountinfo"
    );
    let df = Command::new("df")
        .arg("--output=fstype")
        .arg(mount.path())
        .output()
        .expect("df");
    let df = String::from_utf8_lossy(&df.stdout);
    assert_eq!(
        df.lines().nth(1).map(str::trim),
        Some("fuse.msfs"),
        "df: {df}"
    );
    assert!(
        mount.stop_with_umount().success(),
        "{}",
        mount.stderr_text()
    );
}

#[test]
fn sigterm_and_sigint_unmount_cleanly_with_exit_zero() {
    let garage = seeded_garage();
    for signal in [libc::SIGTERM, libc::SIGINT] {
        let config = config_yaml(&[s3_backend_yaml("data", "life", "", &garage)]);
        let mut mount = MsfsMount::start(&config, "yaml").expect("mount");
        assert_eq!(read_hello(mount.path(), "data"), "hello\n");
        let status = mount.stop_with_signal(signal);
        assert!(
            status.success(),
            "signal {signal}: {status}: {}",
            mount.stderr_text()
        );
        assert!(
            !is_mounted(mount.path()),
            "signal {signal} left the mount behind"
        );
    }
}

#[test]
fn a_json_config_mounts_too() {
    let garage = seeded_garage();
    let config = serde_json::json!({
        "msfs_version": 1,
        "backends": [{
            "dir_name": "json",
            "backend_type": "S3",
            "bucket_container_name": "life",
            "S3": {
                "endpoint": garage.endpoint(),
                "region": garage.region(),
                "access_key_id": garage.access_key(),
                "secret_access_key": garage.secret_key(),
            }
        }]
    });
    let mount = MsfsMount::start(&config.to_string(), "json").expect("mount");
    assert_eq!(read_hello(mount.path(), "json"), "hello\n");
}

#[test]
fn an_msc_profile_config_mounts_each_profile_as_a_directory() {
    let garage = seeded_garage();
    let config = format!(
        "profiles:\n  msc-data:\n    storage_provider:\n      type: s3\n      options:\n        base_path: life/dir\n        endpoint_url: {endpoint}\n        region_name: {region}\n    credentials_provider:\n      type: S3Credentials\n      options:\n        access_key: {access}\n        secret_key: {secret}\n",
        endpoint = garage.endpoint(),
        region = garage.region(),
        access = garage.access_key(),
        secret = garage.secret_key(),
    );
    let mount = MsfsMount::start(&config, "yaml").expect("mount");
    assert_eq!(
        std::fs::read_to_string(mount.path().join("msc-data/hello.txt")).expect("read"),
        "hello\n"
    );
}

#[test]
fn wrong_credentials_fail_the_mount_with_a_clear_error() {
    let garage = seeded_garage();
    let config =
        config_yaml(&[s3_backend_yaml("data", "life", "", &garage)
            .replace(garage.secret_key(), &"0".repeat(64))]);
    let err = MsfsMount::start(&config, "yaml")
        .err()
        .expect("mount must fail");
    assert!(
        err.contains("backend data") && err.contains("access denied"),
        "{err}"
    );
    assert!(!err.contains(garage.secret_key()), "secret leaked: {err}");
}

#[test]
fn a_missing_bucket_fails_the_mount_naming_it() {
    let garage = seeded_garage();
    let config = config_yaml(&[s3_backend_yaml("data", "no-such-bucket", "", &garage)]);
    let err = MsfsMount::start(&config, "yaml")
        .err()
        .expect("mount must fail");
    assert!(err.contains("no-such-bucket"), "{err}");
}

#[test]
fn an_unreachable_endpoint_fails_the_mount_instead_of_hanging() {
    let garage = seeded_garage();
    // A port that was free a moment ago: nothing listens there.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free port")
        .port();
    let config = config_yaml(&[s3_backend_yaml("data", "life", "", &garage)
        .replace(&garage.endpoint(), &format!("http://127.0.0.1:{port}"))]);
    let err = MsfsMount::start(&config, "yaml")
        .err()
        .expect("mount must fail");
    assert!(
        err.contains("cannot reach") && err.contains(&port.to_string()),
        "{err}"
    );
}

/// Waits (bounded) until `pid` has exited.
fn wait_gone(pid: u32) -> bool {
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        if !Path::new(&format!("/proc/{pid}")).exists() {
            return true;
        }
        // The daemon is not our child (setsid'd by the helper); zombies are reaped by init.
        if std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| s.contains(") Z ")) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    false
}

struct HelperSetup {
    dir: tempfile::TempDir,
    config: PathBuf,
    mountpoint: PathBuf,
    logs: PathBuf,
}

fn helper_setup(garage: &Garage) -> HelperSetup {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().canonicalize().expect("canonical");
    let config = root.join("msfs.yaml");
    std::fs::write(
        &config,
        config_yaml(&[s3_backend_yaml("data", "life", "", garage)]),
    )
    .expect("config");
    let mountpoint = root.join("mnt");
    std::fs::create_dir(&mountpoint).expect("mountpoint");
    let logs = root.join("logs");
    HelperSetup {
        dir,
        config,
        mountpoint,
        logs,
    }
}

fn daemon_pid(logs: &Path) -> u32 {
    let pid_file = std::fs::read_dir(logs)
        .expect("log dir")
        .map(|e| e.expect("entry").path())
        .find(|p| p.extension().is_some_and(|e| e == "pid"))
        .expect("a pid file");
    let text = std::fs::read_to_string(pid_file).expect("pid file");
    text.lines().next().expect("pid line").parse().expect("pid")
}

fn unmount_and_wait(setup: &HelperSetup) {
    let pid = daemon_pid(&setup.logs);
    let status = Command::new("umount")
        .arg(&setup.mountpoint)
        .status()
        .expect("umount");
    assert!(status.success());
    assert!(wait_gone(pid), "daemon {pid} still running after umount");
}

#[test]
fn mount_helper_daemonizes_logs_and_records_a_pid_file() {
    let garage = seeded_garage();
    let setup = helper_setup(&garage);
    let helper = setup.dir.path().join("mount.msfs");
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_msfs"), &helper).expect("symlink");
    let out = Command::new(&helper)
        .arg(&setup.config)
        .arg(&setup.mountpoint)
        .args(["-o", "defaults,_netdev"])
        .env("MSFS_LOG_DIR", &setup.logs)
        .output()
        .expect("run mount.msfs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(is_mounted(&setup.mountpoint));
    assert_eq!(read_hello(&setup.mountpoint, "data"), "hello\n");
    let pid_text = std::fs::read_dir(&setup.logs)
        .expect("logs")
        .map(|e| e.expect("entry").path())
        .find(|p| p.extension().is_some_and(|e| e == "pid"))
        .map(|p| std::fs::read_to_string(p).expect("pid file"))
        .expect("pid file");
    assert_eq!(
        pid_text.lines().nth(1),
        Some(setup.mountpoint.to_str().expect("utf-8"))
    );
    unmount_and_wait(&setup);
}

#[test]
fn mount_helper_reports_a_daemon_that_fails_to_start() {
    let garage = seeded_garage();
    let setup = helper_setup(&garage);
    std::fs::write(
        &setup.config,
        "msfs_version: 1\nbackends:\n  - dir_name: x\n    backend_type: S3\n",
    )
    .expect("bad config");
    let helper = setup.dir.path().join("mount.msfs");
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_msfs"), &helper).expect("symlink");
    let out = Command::new(&helper)
        .arg(&setup.config)
        .arg(&setup.mountpoint)
        .env("MSFS_LOG_DIR", &setup.logs)
        .output()
        .expect("run mount.msfs");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("bucket_container_name"), "{stderr}");
    assert!(!is_mounted(&setup.mountpoint));
}

/// Installs `/sbin/mount.msfs` (what mount(8) runs for `-t msfs`) pointing at the binary under
/// test, and removes it again — unless a real installation already provides one.
struct SbinHelper {
    installed: bool,
}

impl SbinHelper {
    fn install() -> SbinHelper {
        let path = Path::new("/sbin/mount.msfs");
        if path.exists() {
            return SbinHelper { installed: false };
        }
        std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_msfs"), path)
            .expect("install /sbin/mount.msfs");
        SbinHelper { installed: true }
    }
}

impl Drop for SbinHelper {
    fn drop(&mut self) {
        if self.installed {
            let _ = std::fs::remove_file("/sbin/mount.msfs");
        }
    }
}

#[test]
fn mount_t_msfs_and_an_fstab_line_mount_through_the_helper() {
    let garage = seeded_garage();
    let setup = helper_setup(&garage);
    let _helper = SbinHelper::install();

    let status = Command::new("mount")
        .args(["-t", "msfs"])
        .arg(&setup.config)
        .arg(&setup.mountpoint)
        .env("MSFS_LOG_DIR", &setup.logs)
        .env("MSFS_BINARY", env!("CARGO_BIN_EXE_msfs"))
        .status()
        .expect("mount -t msfs");
    assert!(status.success());
    assert_eq!(read_hello(&setup.mountpoint, "data"), "hello\n");
    unmount_and_wait(&setup);
    std::fs::remove_dir_all(&setup.logs).expect("clear logs");

    let fstab = setup.dir.path().join("fstab");
    std::fs::write(
        &fstab,
        format!(
            "{} {} msfs defaults,_netdev,noauto 0 0\n",
            setup.config.display(),
            setup.mountpoint.display()
        ),
    )
    .expect("fstab");
    let status = Command::new("mount")
        .arg("-T")
        .arg(&fstab)
        .arg(&setup.mountpoint)
        .env("MSFS_LOG_DIR", &setup.logs)
        .env("MSFS_BINARY", env!("CARGO_BIN_EXE_msfs"))
        .status()
        .expect("mount from fstab");
    assert!(status.success());
    assert_eq!(read_hello(&setup.mountpoint, "data"), "hello\n");
    unmount_and_wait(&setup);
}

#[test]
fn a_dead_daemons_mountpoint_can_be_mounted_again() {
    // Without an fd holder the connection dies with its daemon, as with other FUSE
    // filesystems (with one, the next daemon takes it over: tests/it/takeover.rs).
    let garage = seeded_garage();
    let config = config_yaml(&[s3_backend_yaml("data", "life", "", &garage)]);
    let mut first =
        MsfsMount::start_with_args(&config, "yaml", &["--no-fd-holder"]).expect("mount");
    let mountpoint = first.path().to_path_buf();
    let config_path = first.config_path().to_path_buf();
    // The kernel keeps the root's attributes after this, so the dead mount below still `stat`s
    // fine: the restart must not take that for a live mount.
    std::fs::metadata(&mountpoint).expect("stat the live mount");
    first.stop_with_signal(libc::SIGKILL);
    assert!(
        is_mounted(&mountpoint),
        "SIGKILL leaves the dead mount behind"
    );
    let mut again = Command::new(env!("CARGO_BIN_EXE_msfs"))
        .arg("mount")
        .arg(&config_path)
        .arg(&mountpoint)
        .arg("--no-fd-holder")
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("remount");
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut content = None;
    while Instant::now() < deadline && content.is_none() {
        content = std::fs::read_to_string(mountpoint.join("data/dir/hello.txt")).ok();
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(content.as_deref(), Some("hello\n"));
    Command::new("umount")
        .arg(&mountpoint)
        .status()
        .expect("umount");
    assert!(again.wait().expect("wait").success());
}

/// Runs `mount.msfs CONFIG MOUNTPOINT ARGS…` (the binary under that name) with its log and
/// state directories inside the test's own.
fn run_helper(setup: &HelperSetup, args: &[&str]) -> std::process::Output {
    let helper = setup.dir.path().join("mount.msfs");
    if !helper.exists() {
        std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_msfs"), &helper).expect("symlink");
    }
    Command::new(&helper)
        .arg(&setup.config)
        .arg(&setup.mountpoint)
        .args(args)
        .env("MSFS_LOG_DIR", &setup.logs)
        .env("MSFS_STATE_DIR", setup.dir.path().join("state"))
        .output()
        .expect("run mount.msfs")
}

fn writable_config(setup: &HelperSetup, garage: &Garage) {
    let backend = format!(
        "{}    readonly: false\n",
        s3_backend_yaml("data", "life", "", garage)
    );
    std::fs::write(&setup.config, config_yaml(&[backend])).expect("config");
}

fn files_in(dir: &Path, extension: &str) -> Vec<PathBuf> {
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .map(|e| e.expect("entry").path())
                .filter(|p| p.extension().is_some_and(|e| e == extension))
                .collect()
        })
        .unwrap_or_default()
}

/// `-o ro` makes every backend of the mount read-only, whatever the config says: writes fail
/// with EROFS and nothing reaches the bucket. fstab's and systemd's options beside it are left
/// to them. The log and pid files are both named after the daemon.
#[test]
fn mount_helper_ro_mounts_a_writable_config_read_only() {
    let garage = seeded_garage();
    let setup = helper_setup(&garage);
    writable_config(&setup, &garage);
    let out = run_helper(
        &setup,
        &["-o", "ro,_netdev,nofail,x-systemd.automount,noatime"],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(read_hello(&setup.mountpoint, "data"), "hello\n");
    let refused = std::fs::write(setup.mountpoint.join("data/new.txt"), b"x");
    assert_eq!(
        refused.map_err(|e| e.raw_os_error()),
        Err(Some(libc::EROFS)),
        "a write on an -o ro mount"
    );
    let refused = std::fs::create_dir(setup.mountpoint.join("data/newdir"));
    assert_eq!(
        refused.map_err(|e| e.raw_os_error()),
        Err(Some(libc::EROFS))
    );
    let refused = std::fs::remove_file(setup.mountpoint.join("data/dir/hello.txt"));
    assert_eq!(
        refused.map_err(|e| e.raw_os_error()),
        Err(Some(libc::EROFS))
    );
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    assert_eq!(
        runtime.block_on(garage.list_keys("life", "")),
        ["dir/hello.txt"]
    );

    let pid = daemon_pid(&setup.logs);
    let named = |extension: &str| {
        files_in(&setup.logs, extension)
            .iter()
            .map(|p| p.file_stem().expect("stem").to_string_lossy().into_owned())
            .collect::<Vec<_>>()
    };
    let (logs, pids) = (named("log"), named("pid"));
    assert_eq!(logs.len(), 1, "{logs:?}");
    assert_eq!(logs, pids, "log and pid files of one daemon carry one name");
    assert!(
        logs[0].ends_with(&format!("_{pid}")),
        "{logs:?} named after pid {pid}"
    );
    unmount_and_wait(&setup);
}

/// An option another filesystem would honour is refused by name, with the key that does its
/// job, and nothing is started; `-s` (mount's sloppy mode) warns and mounts instead.
#[test]
fn mount_helper_refuses_an_unsupported_option_by_name_and_sloppy_mode_ignores_it() {
    let garage = seeded_garage();
    let setup = helper_setup(&garage);
    let out = run_helper(&setup, &["-o", "rw,uid=1000"]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("mount.msfs: unsupported option \"uid=1000\"") && stderr.contains("`uid`"),
        "{stderr}"
    );
    assert!(!is_mounted(&setup.mountpoint));
    assert!(
        files_in(&setup.logs, "pid").is_empty(),
        "no daemon was started"
    );

    let out = run_helper(&setup, &["-s", "-o", "uid=1000"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("ignoring unsupported option \"uid=1000\""),
        "{stderr}"
    );
    assert_eq!(read_hello(&setup.mountpoint, "data"), "hello\n");
    unmount_and_wait(&setup);
}

/// mount -f (fake): the configuration is checked, nothing is mounted.
#[test]
fn mount_helper_fake_checks_the_config_and_mounts_nothing() {
    let garage = seeded_garage();
    let setup = helper_setup(&garage);
    let out = run_helper(&setup, &["-f", "-o", "ro"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!is_mounted(&setup.mountpoint));
    std::fs::write(&setup.config, "msfs_version: 1\nbackends: 3\n").expect("bad config");
    let out = run_helper(&setup, &["-f"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("backends"));
}
