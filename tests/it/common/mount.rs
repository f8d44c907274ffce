//! A real `msfs mount` process and its FUSE mount, one per test.
//!
//! `MsfsMount::start` writes the config into a fresh temporary directory,
//! creates the mountpoint beside it, runs the `msfs` binary of this crate in
//! the foreground and returns once the kernel lists a `fuse*` mount at the
//! mountpoint. Whatever happens in the test, `Drop` leaves no mount and no
//! process behind: a mount still present is lazily unmounted, the child is
//! killed by its PID and always reaped.
//!
//! Each mount gets a state directory of its own (`--state-dir`), so its fd holder is its own
//! too: the holder exits by itself once the mount is gone.
//!
//! Calls here block (they wait on processes and poll `/proc/self/mountinfo`);
//! from an async test on a multi-thread runtime that costs one worker thread
//! for a moment, which is acceptable in tests.

use std::ffi::OsString;
use std::os::unix::ffi::OsStringExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Longest wait for the mount to appear after spawning msfs.
const MOUNT_TIMEOUT: Duration = Duration::from_secs(30);
/// Longest wait for msfs to exit after `umount` or a signal.
const STOP_TIMEOUT: Duration = Duration::from_secs(30);
/// How long `Drop` lets msfs exit by itself after a lazy unmount before killing it.
const DROP_GRACE: Duration = Duration::from_secs(2);
const POLL_INTERVAL: Duration = Duration::from_millis(20);

/// A running `msfs mount CONFIG MOUNTPOINT`; see the module docs.
pub struct MsfsMount {
    /// `None` once the process has been reaped.
    child: Option<Child>,
    pid: u32,
    exit_status: Option<ExitStatus>,
    mountpoint: PathBuf,
    config_path: PathBuf,
    stdout_path: PathBuf,
    stderr_path: PathBuf,
    state_dir: PathBuf,
    /// The process's `TMPDIR`. Without `cache_dir_path` msfs keeps its spill files and upload
    /// journal under the system temp directory, and a process a test kills leaves them there
    /// for a successor over the same directory; inside the test's own directory they go with it
    /// instead of piling up in `/tmp`.
    tmp_dir: PathBuf,
    /// Arguments given to `msfs mount` besides the config, mountpoint and state directory.
    extra_args: Vec<String>,
    /// The memory cgroup (its `cgroup.procs`) each msfs process joins before it runs.
    cgroup: Option<PathBuf>,
    // Last field: removed after `Drop::drop` has unmounted and reaped.
    dir: Option<tempfile::TempDir>,
}

impl MsfsMount {
    /// Writes `config_text` to `config.<ext>` (`ext` is `"yaml"` or `"json"`),
    /// starts msfs on a new mountpoint and waits for the FUSE mount.
    ///
    /// Returns `Err` with msfs's stderr if it exits first or the mount does
    /// not appear within 30 s (the process is stopped in both cases).
    pub fn start(config_text: &str, ext: &str) -> Result<MsfsMount, String> {
        MsfsMount::start_with_args(config_text, ext, &[])
    }

    /// As [`MsfsMount::start`], with more arguments for `msfs mount` (`--no-fd-holder`).
    pub fn start_with_args(
        config_text: &str,
        ext: &str,
        extra_args: &[&str],
    ) -> Result<MsfsMount, String> {
        MsfsMount::start_in_cgroup(config_text, ext, extra_args, None)
    }

    /// As [`MsfsMount::start_with_args`], with msfs in the memory cgroup whose `cgroup.procs`
    /// is `cgroup` from its first instruction (see `cgroup::enter_on_spawn`).
    pub fn start_in_cgroup(
        config_text: &str,
        ext: &str,
        extra_args: &[&str],
        cgroup: Option<&Path>,
    ) -> Result<MsfsMount, String> {
        assert!(
            ext == "yaml" || ext == "json",
            "config extension must be \"yaml\" or \"json\", got {ext:?}"
        );
        let dir = tempfile::Builder::new()
            .prefix("msfs-mount-")
            .tempdir()
            .map_err(|e| format!("create a temporary directory: {e}"))?;
        // The kernel reports canonical paths in mountinfo; resolve the
        // directory now, while nothing is mounted inside it.
        let root = dir
            .path()
            .canonicalize()
            .map_err(|e| format!("canonicalize {}: {e}", dir.path().display()))?;
        let mountpoint = root.join("mnt");
        let config_path = root.join(format!("config.{ext}"));
        let stdout_path = root.join("msfs.stdout");
        let stderr_path = root.join("msfs.stderr");
        let state_dir = root.join("state");
        let tmp_dir = root.join("tmp");
        for made in [&mountpoint, &tmp_dir] {
            std::fs::create_dir(made).map_err(|e| format!("create {}: {e}", made.display()))?;
        }
        std::fs::write(&config_path, config_text)
            .map_err(|e| format!("write {}: {e}", config_path.display()))?;
        let mut mount = MsfsMount {
            pid: 0,
            child: None,
            exit_status: None,
            mountpoint,
            config_path,
            stdout_path,
            stderr_path,
            state_dir,
            tmp_dir,
            extra_args: extra_args.iter().map(|a| a.to_string()).collect(),
            cgroup: cgroup.map(Path::to_path_buf),
            dir: Some(dir),
        };
        mount.spawn(&[])?;
        mount.wait_for_mount()?;
        Ok(mount)
    }

    /// Starts `msfs mount` (with `more` arguments) as this mount's process; its output
    /// replaces the previous process's.
    fn spawn(&mut self, more: &[&str]) -> Result<(), String> {
        let stdout = std::fs::File::create(&self.stdout_path)
            .map_err(|e| format!("create {}: {e}", self.stdout_path.display()))?;
        let stderr = std::fs::File::create(&self.stderr_path)
            .map_err(|e| format!("create {}: {e}", self.stderr_path.display()))?;
        let mut command = Command::new(env!("CARGO_BIN_EXE_msfs"));
        if let Some(procs) = &self.cgroup {
            super::cgroup::enter_on_spawn(&mut command, procs);
        }
        let child = command
            .arg("mount")
            .arg(&self.config_path)
            .arg(&self.mountpoint)
            .arg("--state-dir")
            .arg(&self.state_dir)
            .args(&self.extra_args)
            .args(more)
            .env("TMPDIR", &self.tmp_dir)
            .stdin(Stdio::null())
            .stdout(stdout)
            .stderr(stderr)
            .spawn()
            .map_err(|e| format!("spawn {}: {e}", env!("CARGO_BIN_EXE_msfs")))?;
        self.pid = child.id();
        self.child = Some(child);
        self.exit_status = None;
        Ok(())
    }

    /// After the process died (`stop_with_signal(SIGKILL)`): starts `msfs mount --takeover`
    /// on the same mountpoint and state directory, and waits until it serves.
    pub fn take_over(&mut self) -> Result<(), String> {
        assert!(
            self.try_reap().is_some(),
            "take_over needs the previous process gone"
        );
        self.spawn(&["--takeover"])?;
        // The daemon's "mounted" line (text logs: `msfs::daemon: mounted mountpoint=…`).
        self.wait_for_line(": mounted", "serve the mount again")
    }

    /// After the process died and its mount went (`umount -l`): starts a plain `msfs mount` on
    /// the same mountpoint and state directory, once, and waits for the mount.
    pub fn mount_again(&mut self) -> Result<(), String> {
        assert!(
            self.try_reap().is_some(),
            "mount_again needs the previous process gone"
        );
        self.spawn(&[])?;
        self.wait_for_mount()
    }

    /// An upgrade while msfs serves: starts `msfs mount --takeover` beside it, waits until that
    /// one waits to succeed it, sends the running one SIGTERM and waits until the successor
    /// serves. Returns the old process's exit status and its output (stdout: the text logs).
    /// The old process's output files are renamed aside first (it writes on into them).
    pub fn upgrade(&mut self) -> Result<(ExitStatus, String), String> {
        let mut old = self.child.take().ok_or("upgrade needs a running msfs")?;
        let old_pid = self.pid;
        let old_stdout = self.stdout_path.with_extension(format!("stdout.{old_pid}"));
        let old_stderr = self.stderr_path.with_extension(format!("stderr.{old_pid}"));
        std::fs::rename(&self.stdout_path, &old_stdout).map_err(|e| format!("rename: {e}"))?;
        std::fs::rename(&self.stderr_path, &old_stderr).map_err(|e| format!("rename: {e}"))?;
        let old_output = || format!("{}{}", read_lossy(&old_stdout), read_lossy(&old_stderr));
        self.spawn(&["--takeover"])?;
        self.wait_for_line("waiting to succeed", "wait to succeed the running msfs")?;
        // SAFETY: kill(2) has no memory-safety preconditions; `old` is not reaped yet.
        unsafe { libc::kill(old_pid as libc::pid_t, libc::SIGTERM) };
        // Reaped only once the successor serves: until then the old msfs is a zombie, its PID
        // still taken, as under a container runtime that reaps at its own pace. The successor
        // must not wait for that (nor mistake what it left for a live process's).
        if let Err(e) = self.wait_for_line(": mounted", "serve after the hand-over") {
            let _ = old.kill();
            let _ = old.wait();
            return Err(format!("{e}\nthe old msfs:\n{}", old_output()));
        }
        let deadline = Instant::now() + STOP_TIMEOUT;
        let status = loop {
            if let Some(status) = old.try_wait().map_err(|e| format!("wait: {e}"))? {
                break status;
            }
            if Instant::now() >= deadline {
                let _ = old.kill();
                let _ = old.wait();
                return Err(format!(
                    "the old msfs did not exit within {STOP_TIMEOUT:?} of SIGTERM:\n{}",
                    old_output()
                ));
            }
            std::thread::sleep(POLL_INTERVAL);
        };
        Ok((status, old_output()))
    }

    /// Waits until this mount's msfs logs a line containing `text`.
    fn wait_for_line(&mut self, text: &str, what: &str) -> Result<(), String> {
        let deadline = Instant::now() + MOUNT_TIMEOUT;
        while !self.stdout_text().contains(text) {
            if let Some(status) = self.try_reap() {
                return Err(format!(
                    "msfs exited ({status}) before it could {what}; stderr:\n{}\nstdout:\n{}",
                    self.stderr_text(),
                    self.stdout_text()
                ));
            }
            if Instant::now() >= deadline {
                return Err(format!(
                    "msfs did not {what} within {MOUNT_TIMEOUT:?}; stdout:\n{}",
                    self.stdout_text()
                ));
            }
            std::thread::sleep(POLL_INTERVAL);
        }
        Ok(())
    }

    /// The state directory (`--state-dir`): the fd holder's socket, the kernel-state journal.
    pub fn state_dir(&self) -> &Path {
        &self.state_dir
    }

    /// On error the caller drops `self`, which stops the process.
    fn wait_for_mount(&mut self) -> Result<(), String> {
        let deadline = Instant::now() + MOUNT_TIMEOUT;
        loop {
            if mount_fstype(&self.mountpoint).is_some_and(|t| t.starts_with("fuse")) {
                return Ok(());
            }
            if let Some(status) = self.try_reap() {
                return Err(format!(
                    "msfs exited ({status}) before mounting {}; stderr:\n{}",
                    self.mountpoint.display(),
                    self.stderr_text()
                ));
            }
            if Instant::now() >= deadline {
                return Err(format!(
                    "no FUSE mount at {} within {MOUNT_TIMEOUT:?}; msfs stderr:\n{}",
                    self.mountpoint.display(),
                    self.stderr_text()
                ));
            }
            std::thread::sleep(POLL_INTERVAL);
        }
    }

    /// The mountpoint (canonical path).
    pub fn path(&self) -> &Path {
        &self.mountpoint
    }

    /// The msfs process id.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Where the config was written.
    pub fn config_path(&self) -> &Path {
        &self.config_path
    }

    /// Everything msfs wrote to stderr so far.
    pub fn stderr_text(&self) -> String {
        read_lossy(&self.stderr_path)
    }

    /// Everything msfs wrote to stdout so far.
    pub fn stdout_text(&self) -> String {
        read_lossy(&self.stdout_path)
    }

    /// Runs `umount MOUNTPOINT` and waits (30 s at most) for msfs to exit.
    /// Panics if `umount` fails or msfs does not exit.
    pub fn stop_with_umount(&mut self) -> ExitStatus {
        if let Some(status) = self.exit_status {
            return status;
        }
        let out = Command::new("umount")
            .arg(&self.mountpoint)
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|e| panic!("run umount: {e}"));
        assert!(
            out.status.success(),
            "umount {} failed ({}): {}\nmsfs stderr:\n{}",
            self.mountpoint.display(),
            out.status,
            String::from_utf8_lossy(&out.stderr),
            self.stderr_text()
        );
        self.wait_for_exit("umount")
    }

    /// Sends `signal` (e.g. `libc::SIGTERM`) to msfs and waits (30 s at most)
    /// for it to exit. Panics if it does not exit.
    pub fn stop_with_signal(&mut self, signal: libc::c_int) -> ExitStatus {
        if let Some(status) = self.exit_status {
            return status;
        }
        self.signal(signal);
        self.wait_for_exit(&format!("signal {signal}"))
    }

    /// Sends `signal` without waiting; a no-op once msfs has been reaped.
    pub fn signal(&self, signal: libc::c_int) {
        if self.child.is_some() {
            // The child is not reaped yet, so its PID cannot have been reused.
            let pid = libc::pid_t::try_from(self.pid).expect("pid fits pid_t");
            // SAFETY: kill(2) has no memory-safety preconditions.
            unsafe { libc::kill(pid, signal) };
        }
    }

    /// The exit status if msfs has exited (reaping it), `None` while it runs.
    pub fn try_exit_status(&mut self) -> Option<ExitStatus> {
        self.try_reap()
    }

    fn wait_for_exit(&mut self, after: &str) -> ExitStatus {
        let deadline = Instant::now() + STOP_TIMEOUT;
        loop {
            if let Some(status) = self.try_reap() {
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "msfs (pid {}) did not exit within {STOP_TIMEOUT:?} after {after}; stderr:\n{}",
                self.pid,
                self.stderr_text()
            );
            std::thread::sleep(POLL_INTERVAL);
        }
    }

    fn try_reap(&mut self) -> Option<ExitStatus> {
        if let Some(child) = self.child.as_mut()
            && let Ok(Some(status)) = child.try_wait()
        {
            self.child = None;
            self.exit_status = Some(status);
        }
        self.exit_status
    }
}

impl Drop for MsfsMount {
    fn drop(&mut self) {
        // Nobody serves a mount whose msfs is gone but whose connection an fd holder keeps (a
        // test that failed between a kill and a takeover): whatever waits in it would wait
        // forever, detached or not. Aborted, its callers fail and the holder lets go.
        if self.try_reap().is_some() && is_mounted(&self.mountpoint) {
            let _ = abort_fuse_connection(&self.mountpoint);
        }
        if is_mounted(&self.mountpoint) {
            lazy_umount(&self.mountpoint);
            let deadline = Instant::now() + DROP_GRACE;
            while self.try_reap().is_none() && Instant::now() < deadline {
                std::thread::sleep(POLL_INTERVAL);
            }
        }
        if let Some(mut child) = self.child.take() {
            // SIGKILL to this one child, then reap it.
            let _ = child.kill();
            if let Ok(status) = child.wait() {
                self.exit_status = Some(status);
            }
        }
        // A mount made just before the kill outlives its server: detach it too.
        if is_mounted(&self.mountpoint) {
            lazy_umount(&self.mountpoint);
        }
        // Never let the directory cleanup walk into a mount that is still there.
        if is_mounted(&self.mountpoint)
            && let Some(dir) = self.dir.take()
        {
            let kept = dir.keep();
            eprintln!(
                "msfs test fixture: {} is still mounted; leaving {}",
                self.mountpoint.display(),
                kept.display()
            );
        }
    }
}

/// Whether anything is mounted at `path`, per `/proc/self/mountinfo`.
/// Does not touch `path` itself, so it is safe on a hung FUSE mount.
pub fn is_mounted(path: &Path) -> bool {
    mount_fstype(path).is_some()
}

/// The filesystem type of the topmost mount at `path` (`"fuse"`,
/// `"fuse.msfs"`, `"tmpfs"`, …), or `None` if nothing is mounted there.
pub fn mount_fstype(path: &Path) -> Option<String> {
    let mountinfo = std::fs::read("/proc/self/mountinfo").ok()?;
    let candidates = path_candidates(path);
    let mut found = None;
    for line in mountinfo.split(|&b| b == b'\n') {
        // ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS [OPTIONAL…] - FSTYPE SOURCE SUPER
        let fields: Vec<&[u8]> = line.split(|&b| b == b' ').collect();
        let (Some(mount_point), Some(sep)) =
            (fields.get(4), fields.iter().position(|f| *f == b"-"))
        else {
            continue;
        };
        let Some(fstype) = fields.get(sep + 1) else {
            continue;
        };
        let mount_point = PathBuf::from(OsString::from_vec(unescape_octal(mount_point)));
        if candidates.contains(&mount_point) {
            // Later lines are mounted on top of earlier ones.
            found = Some(String::from_utf8_lossy(fstype).into_owned());
        }
    }
    found
}

/// The device number (`MAJOR:MINOR`) of the topmost mount at `path`, per
/// `/proc/self/mountinfo`; like [`is_mounted`], it never touches `path`.
pub fn mount_device(path: &Path) -> Option<(u32, u32)> {
    let mountinfo = std::fs::read("/proc/self/mountinfo").ok()?;
    let candidates = path_candidates(path);
    let mut found = None;
    for line in mountinfo.split(|&b| b == b'\n') {
        let fields: Vec<&[u8]> = line.split(|&b| b == b' ').collect();
        let (Some(device), Some(mount_point)) = (fields.get(2), fields.get(4)) else {
            continue;
        };
        let mount_point = PathBuf::from(OsString::from_vec(unescape_octal(mount_point)));
        if candidates.contains(&mount_point) {
            let device = String::from_utf8_lossy(device);
            found = device
                .split_once(':')
                .and_then(|(major, minor)| Some((major.parse().ok()?, minor.parse().ok()?)));
        }
    }
    found
}

/// Where the kernel's FUSE control filesystem lists connections.
const FUSECTL: &str = "/sys/fs/fuse/connections";

/// Aborts the FUSE connection of the mount at `path` through fusectl (mounting fusectl first
/// when nothing is there): every request in flight and every later one fails with `ENOTCONN`,
/// so whatever is blocked in the mount comes back, whatever its server does. For hang guards:
/// returns what it did, for the failure message.
pub fn abort_fuse_connection(path: &Path) -> String {
    let Some((_, minor)) = mount_device(path) else {
        return format!("nothing mounted at {} to abort", path.display());
    };
    let connections = Path::new(FUSECTL);
    let empty = std::fs::read_dir(connections).map_or(true, |mut d| d.next().is_none());
    if empty {
        let _ = Command::new("mount")
            .args(["-t", "fusectl", "none", FUSECTL])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
    let abort = connections.join(minor.to_string()).join("abort");
    match std::fs::write(&abort, "1") {
        Ok(()) => format!("aborted the FUSE connection through {}", abort.display()),
        Err(e) => format!(
            "could not abort the FUSE connection ({}: {e})",
            abort.display()
        ),
    }
}

/// `path` as given, and with its parent canonicalized (the kernel lists
/// resolved paths). The last component is never resolved: stat'ing a mount
/// point can hang on a dead FUSE server.
fn path_candidates(path: &Path) -> Vec<PathBuf> {
    let mut candidates = vec![path.to_path_buf()];
    if let (Some(parent), Some(name)) = (path.parent(), path.file_name())
        && let Ok(parent) = parent.canonicalize()
    {
        candidates.push(parent.join(name));
    }
    candidates
}

/// Decodes mountinfo's `\NNN` octal escapes (space, tab, newline, backslash).
fn unescape_octal(field: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(field.len());
    let mut i = 0;
    while i < field.len() {
        let digits = field.get(i + 1..i + 4);
        if field[i] == b'\\'
            && let Some(d) = digits
            && d.iter().all(|c| (b'0'..=b'7').contains(c))
        {
            let value = d.iter().fold(0u32, |acc, c| acc * 8 + u32::from(c - b'0'));
            if let Ok(byte) = u8::try_from(value) {
                out.push(byte);
                i += 4;
                continue;
            }
        }
        out.push(field[i]);
        i += 1;
    }
    out
}

/// `umount -l PATH`, best effort.
fn lazy_umount(path: &Path) {
    let _ = Command::new("umount")
        .arg("-l")
        .arg(path)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
}

fn read_lossy(path: &Path) -> String {
    match std::fs::read(path) {
        Ok(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
        Err(e) => format!("(cannot read {}: {e})", path.display()),
    }
}

/// The last lines of the daemon's log (stdout and stderr).
pub fn daemon_log(mount: &MsfsMount) -> String {
    let log = mount.stdout_text() + &mount.stderr_text();
    let lines: Vec<&str> = log.lines().collect();
    lines[lines.len().saturating_sub(40)..].join("\n")
}

/// Runs `step` on a thread of its own and returns its result; if it has not finished within
/// `limit`, aborts the mount's FUSE connection and fails the test, saying it hung doing `what`.
pub fn within<T: Send + 'static>(
    mount: &MsfsMount,
    limit: Duration,
    what: &str,
    step: impl FnOnce() -> T + Send + 'static,
) -> T {
    guarded(
        limit,
        what,
        || {
            let aborted = abort_fuse_connection(mount.path());
            format!(
                "(msfs pid {}); {aborted}\n--- msfs log (tail) ---\n{}",
                mount.pid(),
                daemon_log(mount)
            )
        },
        step,
    )
}

/// Runs `step` on a thread of its own and returns its result; if it has not finished within
/// `limit`, fails the test saying it hung doing `what`, with what `on_hang` did and says
/// (which should unblock the step: abort the FUSE connections it waits on).
pub fn guarded<T: Send + 'static>(
    limit: Duration,
    what: &str,
    on_hang: impl FnOnce() -> String,
    step: impl FnOnce() -> T + Send + 'static,
) -> T {
    let (done_tx, done_rx) = mpsc::channel();
    let thread = std::thread::spawn(move || {
        let out = step();
        let _ = done_tx.send(());
        out
    });
    match done_rx.recv_timeout(limit) {
        // Disconnected: the step panicked; join hands its panic on.
        Ok(()) | Err(mpsc::RecvTimeoutError::Disconnected) => thread
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic)),
        Err(mpsc::RecvTimeoutError::Timeout) => {
            panic!("HUNG: {what}: no answer within {limit:?} {}", on_hang())
        }
    }
}
