//! `mount.msfs CONFIG MOUNTPOINT [-o OPTIONS]`: what `mount -t msfs` and `/etc/fstab` run.
//!
//! mount(8) waits for its helper, so the helper starts the daemon in its own session (`setsid`),
//! with output in a log file under `$MSFS_LOG_DIR`, records a pid file, and returns only once the
//! mount is live — or fails with the daemon's last log lines if it died first.

use std::fs::OpenOptions;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use super::mount_options;
use super::mountpoint::mounted_fstype;
use clap::Parser;

use crate::cli::MountHelper;

const DEFAULT_LOG_DIR: &str = "/var/log/msfs";
/// Long enough for the daemon to exhaust its retries against an unreachable endpoint and report
/// that, rather than the helper giving up first.
const MOUNT_WAIT: Duration = Duration::from_secs(60);
/// Parses mount(8)'s helper calling convention: `SPEC DIR [-sfnv] [-o OPTIONS] [-t TYPE]`.
/// `Err` is clap's message (usage, or `--help` / `--version` text to print as it is).
pub fn parse_args(args: &[String]) -> Result<MountHelper, clap::Error> {
    MountHelper::try_parse_from(
        std::iter::once("mount.msfs".to_string()).chain(args.iter().cloned()),
    )
}

/// The `-o` lists, split at their commas.
fn option_list(args: &MountHelper) -> Vec<String> {
    args.options
        .iter()
        .flat_map(|list| list.split(','))
        .filter(|o| !o.is_empty())
        .map(str::to_string)
        .collect()
}

/// Starts the daemon detached and waits for its mount. Returns a message for the user on failure.
pub fn run(args: &MountHelper) -> Result<(), String> {
    let (flags, ignored) = mount_options::parse(&option_list(args), args.sloppy)?;
    for option in ignored {
        eprintln!(
            "mount.msfs: ignoring {} (-s)",
            mount_options::refusal(&option)
        );
    }
    let config = absolute(&args.config)?;
    let mountpoint = absolute(&args.mountpoint)?;
    if !config.is_file() {
        return Err(format!("config file {} does not exist", config.display()));
    }
    if !mountpoint.is_dir() {
        return Err(format!(
            "mountpoint {} is not a directory",
            mountpoint.display()
        ));
    }
    if args.fake {
        // mount -f: everything but the mount.
        return crate::config::load(&config)
            .map(|_| ())
            .map_err(|e| e.to_string());
    }
    let log_dir =
        PathBuf::from(std::env::var("MSFS_LOG_DIR").unwrap_or_else(|_| DEFAULT_LOG_DIR.into()));
    std::fs::create_dir_all(&log_dir)
        .map_err(|e| format!("cannot create {}: {e}", log_dir.display()))?;
    remove_stale_pid_files(&log_dir);

    let epoch = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    // Opened before the daemon exists, so named after it (its pid, like the pid file's) once it
    // does; the daemon writes on into the renamed file.
    let starting_log = log_dir.join(format!("msfs_{epoch}_starting-{}.log", std::process::id()));
    let log = OpenOptions::new()
        .create(true)
        .append(true)
        .open(&starting_log)
        .map_err(|e| format!("cannot open {}: {e}", starting_log.display()))?;
    let log_err = log.try_clone().map_err(|e| e.to_string())?;
    let binary = match std::env::var_os("MSFS_BINARY") {
        Some(path) => PathBuf::from(path),
        None => std::env::current_exe().map_err(|e| format!("cannot find the msfs binary: {e}"))?,
    };

    let mut command = Command::new(&binary);
    command
        .arg("mount")
        .arg(&config)
        .arg(&mountpoint)
        .args(flags.read_only.then_some("--read-only"))
        .args(flags.no_exec.then_some("--no-exec"))
        .env("MSC_CONFIG", &config)
        .env("MSFS_MOUNTPOINT", &mountpoint)
        .stdin(Stdio::null())
        .stdout(log)
        .stderr(log_err);
    // SAFETY: setsid is async-signal-safe and touches no memory of the parent.
    unsafe {
        command.pre_exec(|| {
            if libc::setsid() < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let spawned = command.spawn();
    let mut child = match spawned {
        Ok(child) => child,
        Err(e) => {
            let _ = std::fs::remove_file(&starting_log);
            return Err(format!("cannot start {}: {e}", binary.display()));
        }
    };
    let log_path = log_dir.join(format!("msfs_{epoch}_{}.log", child.id()));
    let log_path = match std::fs::rename(&starting_log, &log_path) {
        Ok(()) => log_path,
        Err(_) => starting_log,
    };
    let pid_path = log_dir.join(format!("msfs_{epoch}_{}.pid", child.id()));
    std::fs::write(
        &pid_path,
        format!("{}\n{}\n", child.id(), mountpoint.display()),
    )
    .map_err(|e| format!("cannot write {}: {e}", pid_path.display()))?;

    let started = Instant::now();
    loop {
        if matches!(mounted_fstype(&mountpoint), Ok(Some(t)) if t.starts_with("fuse")) {
            return Ok(());
        }
        if let Ok(Some(status)) = child.try_wait() {
            let _ = std::fs::remove_file(&pid_path);
            return Err(format!(
                "msfs exited ({status}) before mounting; log {}:\n{}",
                log_path.display(),
                tail(&log_path, 20)
            ));
        }
        if started.elapsed() > MOUNT_WAIT {
            return Err(format!(
                "msfs did not mount within {MOUNT_WAIT:?}; it is still running (pid {}); log {}",
                child.id(),
                log_path.display()
            ));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn absolute(path: &Path) -> Result<PathBuf, String> {
    std::path::absolute(path).map_err(|e| format!("{}: {e}", path.display()))
}

fn tail(path: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// Removes pid files whose daemon is gone, so the directory lists only live mounts.
fn remove_stale_pid_files(log_dir: &Path) {
    let Ok(entries) = std::fs::read_dir(log_dir) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if !(name.starts_with("msfs_") && name.ends_with(".pid")) {
            continue;
        }
        let pid = std::fs::read_to_string(entry.path()).ok().and_then(|text| {
            text.lines()
                .next()
                .and_then(|l| l.trim().parse::<i32>().ok())
        });
        let alive = pid.is_some_and(|pid| Path::new(&format!("/proc/{pid}")).exists());
        if !alive {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn mount_passes_spec_dir_and_options() {
        let parsed = parse_args(&args(&[
            "/etc/msfs.yaml",
            "/mnt/data",
            "-o",
            "rw,_netdev",
            "-n",
            "-o",
            "ro",
        ]))
        .expect("valid");
        assert_eq!(parsed.config, PathBuf::from("/etc/msfs.yaml"));
        assert_eq!(parsed.mountpoint, PathBuf::from("/mnt/data"));
        assert_eq!(option_list(&parsed), ["rw", "_netdev", "ro"]);
        assert!(parsed.no_mtab);
    }

    #[test]
    fn combined_short_flags_and_the_type_are_read() {
        let parsed = parse_args(&args(&["c.yaml", "/mnt", "-sfnv", "-t", "msfs"])).expect("valid");
        assert!(parsed.sloppy && parsed.fake && parsed.no_mtab && parsed.verbose);
        assert_eq!(parsed.fs_type.as_deref(), Some("msfs"));
    }

    #[test]
    fn missing_arguments_and_unknown_flags_are_errors() {
        assert!(parse_args(&args(&["/etc/msfs.yaml"])).is_err());
        assert!(parse_args(&args(&["a", "b", "-x"])).is_err());
        assert!(parse_args(&args(&["a", "b", "-o"])).is_err());
    }

    #[test]
    fn pid_files_of_dead_daemons_are_removed() {
        let dir = tempfile::tempdir().expect("tempdir");
        let dead = dir.path().join("msfs_1_999999999.pid");
        let live = dir
            .path()
            .join(format!("msfs_1_{}.pid", std::process::id()));
        std::fs::write(&dead, "999999999\n/mnt\n").expect("write");
        std::fs::write(&live, format!("{}\n/mnt\n", std::process::id())).expect("write");
        remove_stale_pid_files(dir.path());
        assert!(!dead.exists());
        assert!(live.exists());
    }
}
