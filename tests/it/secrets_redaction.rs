//! Credentials never reach msfs's output: a mount with static keys at `trace_level: 3` and
//! `RUST_LOG=trace` does lookups, reads, a failing lookup, a `/metrics` scrape and a reload to
//! a wrong secret key with a session token (refused, logged); then `msfs check-config` and a
//! mount that fails on the wrong key run too. Every byte any of them printed or served is
//! searched for the secret values: zero hits.
//!
//! The access key id is an identifier, not a secret (it travels in clear in every signed
//! request and is a plain string in our config), so it may appear; the secret access key and
//! the session token never may.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::{
    Garage, MsfsMount, config_yaml_with, free_port, http_get, s3_backend_yaml, yaml_str,
};

/// Longest wait for the reload to be refused, and for the failing mount to exit.
const WAIT: Duration = Duration::from_secs(60);
const WRONG_SECRET: &str = "wrong-SECRET-5f9c1e2a7b3d4c6e8f0a1b2c3d4e5f60";
const SESSION_TOKEN: &str = "SESSION-token-0d1e2f3a4b5c6d7e8f9a0b1c2d3e4f5a";

/// `backend` with its secret key replaced and a session token added.
fn with_wrong_secret(backend: &str, garage: &Garage) -> String {
    let wrong = backend.replace(
        &format!("secret_access_key: {}\n", yaml_str(garage.secret_key())),
        &format!(
            "secret_access_key: {}\n      session_token: {}\n",
            yaml_str(WRONG_SECRET),
            yaml_str(SESSION_TOKEN)
        ),
    );
    assert_ne!(wrong, backend, "the secret key line was not found");
    wrong
}

/// Runs msfs with `args` to completion (killing it after [`WAIT`]); (status, stdout, stderr).
fn run_msfs(args: &[&std::ffi::OsStr], dir: &Path) -> (Option<i32>, String, String) {
    let stdout_path = dir.join("run.stdout");
    let stderr_path = dir.join("run.stderr");
    let mut child = Command::new(env!("CARGO_BIN_EXE_msfs"))
        .args(args)
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&stdout_path).expect("stdout file"))
        .stderr(std::fs::File::create(&stderr_path).expect("stderr file"))
        .spawn()
        .expect("spawn msfs");
    let deadline = Instant::now() + WAIT;
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for msfs") {
            break status.code();
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let read =
        |p: &Path| String::from_utf8_lossy(&std::fs::read(p).unwrap_or_default()).into_owned();
    (status, read(&stdout_path), read(&stderr_path))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_secret_reaches_logs_errors_or_metrics_at_full_verbosity() {
    let garage = Garage::start();
    garage.create_bucket("guarded");
    garage
        .put_object("guarded", "f.txt", b"content".to_vec())
        .await;
    garage
        .put_object("guarded", "dir/g.txt", b"nested".to_vec())
        .await;
    // SAFETY: nextest runs each test in its own process; nothing else reads the environment here.
    unsafe {
        std::env::set_var("RUST_LOG", "trace");
        std::env::set_var("MSFS_LOG_FORMAT", "text");
    }
    let port = free_port();
    let top = format!("endpoint: http://127.0.0.1:{port}\n");
    let backend = format!(
        "{}    trace_level: 3\n",
        s3_backend_yaml("data", "guarded", "", &garage)
    );
    let config = config_yaml_with(&top, std::slice::from_ref(&backend));
    let mut mount = MsfsMount::start(&config, "yaml").expect("mount");
    let data = mount.path().join("data");

    // Lookups, listings and reads, a failing lookup, a scrape.
    let names: Vec<_> = std::fs::read_dir(&data)
        .expect("list data")
        .map(|e| e.expect("entry").file_name())
        .collect();
    assert_eq!(names.len(), 2, "{names:?}");
    assert_eq!(std::fs::read(data.join("f.txt")).expect("read"), b"content");
    assert_eq!(
        std::fs::read(data.join("dir/g.txt")).expect("read"),
        b"nested"
    );
    assert_eq!(
        std::fs::metadata(data.join("missing"))
            .map(|_| ())
            .map_err(|e| e.kind()),
        Err(std::io::ErrorKind::NotFound)
    );
    let (status, metrics) = http_get(port, "/metrics").expect("scrape");
    assert_eq!(status, 200);
    assert!(
        metrics.contains("msfs_backend_operations_total"),
        "{metrics}"
    );

    // A reload to a wrong secret key and a session token: refused, and said so in the log.
    let wrong_config = config_yaml_with(&top, &[with_wrong_secret(&backend, &garage)]);
    std::fs::write(mount.config_path(), &wrong_config).expect("write the new config");
    mount.signal(libc::SIGHUP);
    let deadline = Instant::now() + WAIT;
    let refused = |log: &str| {
        log.lines()
            .any(|l| l.contains("reload refused") && l.contains("data"))
    };
    while !refused(&mount.stdout_text()) {
        assert!(
            Instant::now() < deadline,
            "no refused reload logged within {WAIT:?}:\n{}",
            mount.stdout_text()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(std::fs::read(data.join("f.txt")).expect("read"), b"content");
    assert!(mount.stop_with_umount().success());

    // The same config checked, and mounted with the wrong key: an error naming the backend.
    let dir = tempfile::tempdir().expect("temporary directory");
    let good_path = dir.path().join("good.yaml");
    let wrong_path = dir.path().join("wrong.yaml");
    let mountpoint = dir.path().join("mnt");
    std::fs::write(&good_path, &config).expect("write config");
    std::fs::write(&wrong_path, &wrong_config).expect("write config");
    std::fs::create_dir(&mountpoint).expect("mountpoint");
    let (checked, check_out, check_err) = run_msfs(
        &["check-config".as_ref(), good_path.as_os_str()],
        dir.path(),
    );
    assert_eq!(checked, Some(0), "{check_out}{check_err}");
    let (failed, fail_out, fail_err) = run_msfs(
        &[
            "mount".as_ref(),
            wrong_path.as_os_str(),
            mountpoint.as_os_str(),
        ],
        dir.path(),
    );
    assert!(
        failed.is_some_and(|code| code != 0),
        "mounting with a wrong secret key must fail ({failed:?}):\n{fail_out}{fail_err}"
    );
    assert!(
        fail_err.contains("data") || fail_out.contains("data"),
        "the failure names the backend:\n{fail_out}{fail_err}"
    );

    let stdout = mount.stdout_text();
    assert!(
        stdout.lines().count() > 50,
        "expected a verbose log:\n{stdout}"
    );
    assert!(
        stdout.contains("backend request"),
        "trace_level 3 logs requests"
    );
    let outputs = [
        ("mount stdout", stdout),
        ("mount stderr", mount.stderr_text()),
        ("/metrics", metrics),
        ("check-config stdout", check_out),
        ("check-config stderr", check_err),
        ("failed mount stdout", fail_out),
        ("failed mount stderr", fail_err),
    ];
    for (what, output) in &outputs {
        for (secret_name, secret) in [
            ("the secret key", garage.secret_key()),
            ("the wrong secret key", WRONG_SECRET),
            ("the session token", SESSION_TOKEN),
        ] {
            let hits = output.matches(secret).count();
            assert_eq!(hits, 0, "{secret_name} appears {hits} times in the {what}");
        }
    }
}
