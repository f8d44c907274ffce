//! A memory cgroup of its own for a process under test (v1 here; v2 where the unified hierarchy
//! has the memory controller): its limit, its peak, and whether the OOM killer fired in it.
//! The process is put in it before it runs a line of msfs (`pre_exec`), so that what msfs reads
//! at start is the limit. `Drop` moves whatever is left back to the root and removes the cgroup.

use std::ffi::CString;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

const V1_ROOT: &str = "/sys/fs/cgroup/memory";
const V2_ROOT: &str = "/sys/fs/cgroup";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Version {
    V1,
    V2,
}

pub struct MemoryCgroup {
    dir: PathBuf,
    root: PathBuf,
    version: Version,
}

impl MemoryCgroup {
    /// The cgroup versions with a memory controller on this machine.
    pub fn available() -> Vec<Version> {
        let mut versions = Vec::new();
        if std::fs::read_to_string(Path::new(V2_ROOT).join("cgroup.controllers"))
            .is_ok_and(|c| c.split_whitespace().any(|c| c == "memory"))
        {
            versions.push(Version::V2);
        }
        if Path::new(V1_ROOT).join("memory.limit_in_bytes").exists() {
            versions.push(Version::V1);
        }
        versions
    }

    /// A new cgroup `name` limited to `limit` bytes, swap included (a process that may swap
    /// is never OOM-killed, and the test would prove nothing).
    pub fn create(version: Version, name: &str, limit: u64) -> MemoryCgroup {
        let root = PathBuf::from(match version {
            Version::V1 => V1_ROOT,
            Version::V2 => V2_ROOT,
        });
        let dir = root.join(format!("{name}-{}", std::process::id()));
        std::fs::create_dir(&dir).unwrap_or_else(|e| panic!("mkdir {}: {e}", dir.display()));
        let cgroup = MemoryCgroup { dir, root, version };
        match version {
            Version::V1 => {
                cgroup.write("memory.limit_in_bytes", &limit.to_string());
                // Absent without swap accounting; then there is no swap to hide in either.
                let _ = std::fs::write(
                    cgroup.dir.join("memory.memsw.limit_in_bytes"),
                    limit.to_string(),
                );
                cgroup.write("memory.swappiness", "0");
            }
            Version::V2 => {
                cgroup.write("memory.max", &limit.to_string());
                let _ = std::fs::write(cgroup.dir.join("memory.swap.max"), "0");
            }
        }
        cgroup
    }

    fn write(&self, file: &str, value: &str) {
        let path = self.dir.join(file);
        std::fs::write(&path, value).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
    }

    fn read(&self, file: &str) -> String {
        std::fs::read_to_string(self.dir.join(file)).unwrap_or_default()
    }

    /// The cgroup's `cgroup.procs`, for [`enter_on_spawn`].
    pub fn procs(&self) -> PathBuf {
        self.dir.join("cgroup.procs")
    }

    /// The most memory the cgroup was charged at once, in bytes.
    pub fn peak(&self) -> u64 {
        let file = match self.version {
            Version::V1 => "memory.max_usage_in_bytes",
            Version::V2 => "memory.peak",
        };
        self.read(file).trim().parse().unwrap_or(0)
    }

    /// Anonymous memory charged to the cgroup now (heap, stacks, a RAM cache), without the
    /// page cache the kernel reclaims on its own.
    pub fn anon(&self) -> u64 {
        let key = match self.version {
            Version::V1 => "rss ",
            Version::V2 => "anon ",
        };
        self.read("memory.stat")
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|n| n.trim().parse().ok())
            .unwrap_or(0)
    }

    /// Samples [`MemoryCgroup::anon`] every 50 ms until the sampler is stopped: the cgroup
    /// keeps no peak of it.
    pub fn sample_anon(&self) -> AnonSampler {
        let stat = self.dir.join("memory.stat");
        let key = match self.version {
            Version::V1 => "rss ",
            Version::V2 => "anon ",
        };
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut peak = 0;
            while !stopped.load(Ordering::Relaxed) {
                let anon = std::fs::read_to_string(&stat)
                    .unwrap_or_default()
                    .lines()
                    .find_map(|l| l.strip_prefix(key).and_then(|n| n.trim().parse().ok()))
                    .unwrap_or(0);
                peak = peak.max(anon);
                std::thread::sleep(Duration::from_millis(50));
            }
            peak
        });
        AnonSampler { stop, thread }
    }

    /// Processes the OOM killer killed in the cgroup.
    pub fn oom_kills(&self) -> u64 {
        let (file, key) = match self.version {
            Version::V1 => ("memory.oom_control", "oom_kill "),
            Version::V2 => ("memory.events", "oom_kill "),
        };
        self.read(file)
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|n| n.trim().parse().ok())
            .unwrap_or(0)
    }

    /// The v1 `under_oom` flag or the v2 `oom` count: the limit was hit and reclaim failed.
    pub fn limit_hit(&self) -> u64 {
        match self.version {
            Version::V1 => self.read("memory.failcnt").trim().parse().unwrap_or(0),
            Version::V2 => self
                .read("memory.events")
                .lines()
                .find_map(|l| l.strip_prefix("max "))
                .and_then(|n| n.trim().parse().ok())
                .unwrap_or(0),
        }
    }
}

/// See [`MemoryCgroup::sample_anon`].
pub struct AnonSampler {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<u64>,
}

impl AnonSampler {
    /// The most anonymous memory seen, in bytes.
    pub fn peak(self) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().unwrap_or(0)
    }
}

impl Drop for MemoryCgroup {
    fn drop(&mut self) {
        let procs = self.read("cgroup.procs");
        for pid in procs.lines() {
            let _ = std::fs::write(self.root.join("cgroup.procs"), pid);
        }
        if let Err(e) = std::fs::remove_dir(&self.dir) {
            eprintln!("cgroup {} left behind: {e}", self.dir.display());
        }
    }
}

/// The peak resident set of `pid` (`VmHWM`), in bytes.
pub fn peak_rss(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        })
        .map_or(0, |kib| kib * 1024)
}

/// Makes `command`'s process join the cgroup of `procs` (its `cgroup.procs`) before it executes.
pub fn enter_on_spawn(command: &mut Command, procs: &Path) {
    let procs = CString::new(procs.as_os_str().as_encoded_bytes().to_vec())
        .expect("no NUL in a cgroup path");
    // SAFETY: between fork and exec the closure only calls open, write and close (async-signal-
    // safe) on memory prepared before the fork.
    unsafe {
        command.pre_exec(move || {
            let fd = libc::open(procs.as_ptr(), libc::O_WRONLY);
            if fd < 0 {
                return Err(std::io::Error::last_os_error());
            }
            // "0": the writing process itself.
            let written = libc::write(fd, b"0".as_ptr().cast(), 1);
            libc::close(fd);
            if written != 1 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}
