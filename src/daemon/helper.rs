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

use super::mountpoint::mounted_fstype;

const DEFAULT_LOG_DIR: &str = "/var/log/msfs";
/// Long enough for the daemon to exhaust its retries against an unreachable endpoint and report
/// that, rather than the helper giving up first.
const MOUNT_WAIT: Duration = Duration::from_secs(60);
/// mount(8) options that concern mount(8) or fstab, not the filesystem.
const IGNORED_OPTIONS: &[&str] = &[
    "defaults", "_netdev", "noauto", "auto", "user", "nouser", "users", "nofail", "rw", "ro",
];

#[derive(Debug, PartialEq, Eq)]
pub struct HelperArgs {
    pub config: PathBuf,
    pub mountpoint: PathBuf,
    pub options: Vec<String>,
}

/// Parses mount(8)'s helper calling convention: `SPEC DIR [-sfnv] [-o OPTIONS] [-t TYPE]`.
pub fn parse_args(args: &[String]) -> Result<HelperArgs, String> {
    let mut positional = Vec::new();
    let mut options = Vec::new();
    let mut iter = args.iter();
    while let Some(arg) = iter.next() {
        match arg.as_str() {
            "-o" => {
                let list = iter.next().ok_or("-o needs a value")?;
                options.extend(
                    list.split(',')
                        .filter(|o| !o.is_empty())
                        .map(str::to_string),
                );
            }
            "-t" => {
                iter.next().ok_or("-t needs a value")?;
            }
            "-s" | "-f" | "-n" | "-v" => {}
            flag if flag.starts_with('-') => return Err(format!("unknown option {flag}")),
            _ => positional.push(PathBuf::from(arg)),
        }
    }
    match <[PathBuf; 2]>::try_from(positional) {
        Ok([config, mountpoint]) => Ok(HelperArgs {
            config,
            mountpoint,
            options,
        }),
        Err(_) => Err("usage: mount.msfs CONFIG MOUNTPOINT [-o OPTIONS]".into()),
    }
}

/// Starts the daemon detached and waits for its mount. Returns a message for the user on failure.
pub fn run(args: &HelperArgs) -> Result<(), String> {
    for option in &args.options {
        if !IGNORED_OPTIONS.contains(&option.as_str()) {
            eprintln!("mount.msfs: ignoring unsupported option {option:?}");
        }
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
    let log_dir =
        PathBuf::from(std::env::var("MSFS_LOG_DIR").unwrap_or_else(|_| DEFAULT_LOG_DIR.into()));
    std::fs::create_dir_all(&log_dir)
        .map_err(|e| format!("cannot create {}: {e}", log_dir.display()))?;
    remove_stale_pid_files(&log_dir);

    let epoch = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let log_path = log_dir.join(format!("msfs_{epoch}_{}.log", std::process::id()));
    let log = OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log_path)
        .map_err(|e| format!("cannot open {}: {e}", log_path.display()))?;
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
    let mut child = command
        .spawn()
        .map_err(|e| format!("cannot start {}: {e}", binary.display()))?;
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
        ]))
        .expect("valid");
        assert_eq!(parsed.config, PathBuf::from("/etc/msfs.yaml"));
        assert_eq!(parsed.mountpoint, PathBuf::from("/mnt/data"));
        assert_eq!(parsed.options, ["rw", "_netdev"]);
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
