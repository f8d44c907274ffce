//! Shared fixtures for the integration tests: a real garage S3 server
//! ([`garage::Garage`]), a real `msfs mount` process ([`mount::MsfsMount`]),
//! and renderers for the `msfs_version: 1` YAML config that ties them together.
//!
//! The modules of the integration test binary take what they need from `crate::common`.

pub mod app;
pub mod cgroup;
pub mod csi;
pub mod fault_proxy;
pub mod garage;
pub mod holder;
pub mod kube_api;
pub mod launcher;
pub mod mount;

pub use garage::{Garage, http_get};
pub use mount::{MsfsMount, is_mounted};

/// One entry of the `backends:` list: an S3 backend named `dir_name` (the
/// directory it appears as under the mount root) over `bucket`/`prefix` of
/// `garage`, signed with garage's imported key.
///
/// The block ends inside the backend mapping, so more backend keys can be
/// appended as lines indented by four spaces, e.g.
/// `format!("{}    readonly: true\n", s3_backend_yaml(…))`.
pub fn s3_backend_yaml(dir_name: &str, bucket: &str, prefix: &str, garage: &Garage) -> String {
    format!(
        "  - dir_name: {dir_name}\n    bucket_container_name: {bucket}\n    prefix: {prefix}\n    backend_type: S3\n    S3:\n      endpoint: {endpoint}\n      region: {region}\n      access_key_id: {access}\n      secret_access_key: {secret}\n",
        dir_name = yaml_str(dir_name),
        bucket = yaml_str(bucket),
        prefix = yaml_str(prefix),
        endpoint = yaml_str(&garage.endpoint()),
        region = yaml_str(garage.region()),
        access = yaml_str(garage.access_key()),
        secret = yaml_str(garage.secret_key()),
    )
}

/// A complete v1 config over `backends` (blocks from [`s3_backend_yaml`]).
/// It names no mountpoint: `msfs mount CONFIG MOUNTPOINT` takes it on the command line.
pub fn config_yaml(backends: &[String]) -> String {
    config_yaml_with("", backends)
}

/// Like [`config_yaml`], with `top_level` (complete `key: value` lines, no
/// indentation, e.g. `"cache_lines: 64\n"`) placed before `backends:`.
/// A TCP port on 127.0.0.1 that nothing listens on right now (for a metrics endpoint).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

pub fn config_yaml_with(top_level: &str, backends: &[String]) -> String {
    let mut text = String::from("msfs_version: 1\n");
    text.push_str(top_level);
    if !top_level.is_empty() && !top_level.ends_with('\n') {
        text.push('\n');
    }
    if backends.is_empty() {
        text.push_str("backends: []\n");
    } else {
        text.push_str("backends:\n");
        for backend in backends {
            text.push_str(backend);
        }
    }
    text
}

/// `len` deterministic bytes, different for each `seed` and never repeating with a period a
/// cache line or part could align with: a misplaced, shifted or stale block never matches.
pub fn pattern(len: usize, seed: u64) -> Vec<u8> {
    let mut out = Vec::with_capacity(len + 8);
    let mut i = 0u64;
    while out.len() < len {
        out.extend_from_slice(&(i.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ seed).to_le_bytes());
        i += 1;
    }
    out.truncate(len);
    out
}

/// Polls `done` until it holds, failing the test after `limit`: for effects that land in the
/// background (a commit after close), never as a timing assertion.
pub async fn wait_until(
    what: &str,
    limit: std::time::Duration,
    mut done: impl AsyncFnMut() -> bool,
) {
    let deadline = std::time::Instant::now() + limit;
    while !done().await {
        assert!(
            std::time::Instant::now() < deadline,
            "timed out after {limit:?} waiting until {what}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

/// `s` as a YAML double-quoted scalar, so any bucket, prefix or secret survives.
pub fn yaml_str(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() => out.push_str(&format!("\\u{:04x}", u32::from(c))),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// Runs `cmd args…`, fails the test with its stderr unless it succeeds, and returns its stdout.
pub fn run(cmd: &str, args: &[&str]) -> String {
    let out = std::process::Command::new(cmd)
        .args(args)
        .output()
        .expect("run command");
    assert!(
        out.status.success(),
        "{cmd} {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8 output")
}

/// Reads a whole file with O_DIRECT (`dd iflag=direct`), so that the kernel page cache cannot
/// answer for msfs: every byte comes through a FUSE read.
pub fn read_direct(path: &std::path::Path) -> Vec<u8> {
    let out = std::process::Command::new("dd")
        .arg(format!("if={}", path.display()))
        .args(["bs=1M", "iflag=direct", "status=none"])
        .output()
        .expect("run dd");
    assert!(
        out.status.success(),
        "dd {}: {}",
        path.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

/// The upload journal directories msfs processes keep under `parent` (`cache_dir_path`, or
/// the CSI plugin's state dir), one per process alive or killed with uploads open.
pub fn journal_dirs(parent: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut dirs: Vec<_> = std::fs::read_dir(parent)
        .unwrap_or_else(|e| panic!("list {}: {e}", parent.display()))
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("msfs-uploads-"))
        .map(|e| e.path())
        .collect();
    dirs.sort();
    dirs
}

/// Rewrites `path` with 256 MiB of [`pattern`] on a thread of its own, 1 MiB per write, until
/// done or until the mount dies under it (a crash test kills msfs while it writes).
/// Whether `bytes` is what [`spawn_endless_writer`] wrote up to some point (not empty): what a
/// killed server's successor commits of the writes it acknowledged.
pub fn is_endless_writer_prefix(bytes: &[u8]) -> bool {
    !bytes.is_empty()
        && bytes
            .chunks(1 << 20)
            .enumerate()
            .all(|(i, chunk)| chunk == &pattern(1 << 20, i as u64)[..chunk.len()])
}

pub fn spawn_endless_writer(path: std::path::PathBuf) -> std::thread::JoinHandle<()> {
    use std::io::Write;
    std::thread::spawn(move || {
        let Ok(mut file) = std::fs::OpenOptions::new()
            .write(true)
            .truncate(true)
            .open(&path)
        else {
            return;
        };
        for i in 0..256 {
            if file.write_all(&pattern(1 << 20, i)).is_err() {
                return;
            }
        }
    })
}

/// Sends `child` SIGTERM by its PID and waits up to `grace` for it to exit; SIGKILLs and reaps
/// it if it does not. Returns whether it exited by itself.
pub fn terminate_child(mut child: std::process::Child, grace: std::time::Duration) -> bool {
    // SAFETY: kill(2) on our own child, not reaped yet, so its PID cannot have been reused.
    unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
    let deadline = std::time::Instant::now() + grace;
    while std::time::Instant::now() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            return true;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let _ = child.kill();
    let _ = child.wait();
    false
}
