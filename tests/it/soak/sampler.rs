//! The daemon's footprint over time: every few seconds its resident memory, open file
//! descriptors and threads, read from `/proc/PID`, next to how much work the soak has done.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::tally::Tally;

/// One point of the curve.
#[derive(Clone, Copy, Debug)]
pub struct Sample {
    /// Since the workload started.
    pub elapsed: Duration,
    /// `VmRSS`: everything resident.
    pub rss_kib: u64,
    /// `RssAnon`: the heap (and a `ram` cache); file-backed pages are the rest.
    pub anon_kib: u64,
    pub fds: u64,
    /// The descriptors that are sockets: mostly pooled connections to the store.
    pub sockets: u64,
    pub threads: u64,
    /// Progress so far, from the tally.
    pub read_mib: u64,
    pub written_mib: u64,
    pub ops: u64,
}

/// The footprint of process `pid` now, with the load's progress if there is a load; `Err` once
/// the process is gone.
pub fn sample(pid: u32, started: Instant, progress: Option<&Tally>) -> Result<Sample, String> {
    let proc_dir = Path::new("/proc").join(pid.to_string());
    let status = std::fs::read_to_string(proc_dir.join("status"))
        .map_err(|e| format!("read /proc/{pid}/status (did the daemon exit?): {e}"))?;
    let field = |name: &str| -> Result<u64, String> {
        status
            .lines()
            .find_map(|line| line.strip_prefix(name))
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|value| value.parse().ok())
            .ok_or_else(|| format!("/proc/{pid}/status has no {name}"))
    };
    let fds: Vec<String> = open_descriptors(pid)?;
    Ok(Sample {
        elapsed: started.elapsed(),
        rss_kib: field("VmRSS:")?,
        anon_kib: field("RssAnon:")?,
        fds: fds.len() as u64,
        sockets: fds.iter().filter(|f| f.starts_with("socket:")).count() as u64,
        threads: field("Threads:")?,
        read_mib: progress.map_or(0, |t| t.bytes_read.load(Ordering::Relaxed) >> 20),
        written_mib: progress.map_or(0, |t| t.bytes_written.load(Ordering::Relaxed) >> 20),
        ops: progress.map_or(0, |t| t.ops.load(Ordering::Relaxed)),
    })
}

/// What each open descriptor of `pid` points at (`socket:[123]`, `/dev/fuse`, a path…).
fn open_descriptors(pid: u32) -> Result<Vec<String>, String> {
    let dir = format!("/proc/{pid}/fd");
    let entries = std::fs::read_dir(&dir).map_err(|e| format!("list {dir}: {e}"))?;
    Ok(entries
        .filter_map(|entry| {
            // A descriptor closed between the listing and the readlink is simply gone.
            let target = std::fs::read_link(entry.ok()?.path()).ok()?;
            Some(target.to_string_lossy().into_owned())
        })
        .collect())
}

/// The open descriptors of `pid` by kind, for a failure message: `32 socket:[N]`, ….
pub fn descriptor_summary(pid: u32) -> String {
    let Ok(targets) = open_descriptors(pid) else {
        return format!("(pid {pid} is gone)");
    };
    let mut kinds = std::collections::BTreeMap::<String, usize>::new();
    for target in targets {
        let kind: String = target
            .chars()
            .map(|c| if c.is_ascii_digit() { 'N' } else { c })
            .collect();
        *kinds.entry(kind).or_default() += 1;
    }
    kinds
        .iter()
        .map(|(kind, n)| format!("{n:>5} {kind}"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// A thread sampling `pid` every `interval` until [`Sampler::finish`].
pub struct Sampler {
    stop: Arc<AtomicBool>,
    thread: JoinHandle<Vec<Sample>>,
}

impl Sampler {
    /// Samples at once, then every `interval`. If the process disappears the whole run stops
    /// (with an error in the tally): a dead daemon is the worst leak of all.
    pub fn start(pid: u32, interval: Duration, started: Instant, tally: Arc<Tally>) -> Sampler {
        let stop = Arc::new(AtomicBool::new(false));
        let stopping = stop.clone();
        let thread = std::thread::Builder::new()
            .name("soak-sampler".into())
            .spawn(move || {
                let mut samples = Vec::new();
                let mut next = Instant::now();
                while !stopping.load(Ordering::Relaxed) {
                    if Instant::now() >= next {
                        match sample(pid, started, Some(&tally)) {
                            Ok(s) => {
                                // Live progress, for whoever watches a long run.
                                eprintln!(
                                    "soak: {:>4} s  rss {} MiB  fds {} ({} sockets)  threads {}  ops {}",
                                    s.elapsed.as_secs(),
                                    s.rss_kib >> 10,
                                    s.fds,
                                    s.sockets,
                                    s.threads,
                                    s.ops
                                );
                                samples.push(s);
                            }
                            Err(e) => {
                                tally.error(e);
                                tally.stop();
                                break;
                            }
                        }
                        next += interval;
                    }
                    std::thread::sleep(Duration::from_millis(100));
                }
                samples
            })
            .expect("spawn the sampler");
        Sampler { stop, thread }
    }

    /// Stops sampling and returns the curve.
    pub fn finish(self) -> Vec<Sample> {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().expect("the sampler panicked")
    }
}

/// The pid of the process whose command line has an argument equal to `argument` (e.g. the
/// CSI plugin's `--endpoint=unix://…` with its unique temporary socket path).
pub fn find_process(argument: &str) -> Option<u32> {
    std::fs::read_dir("/proc").ok()?.find_map(|entry| {
        let entry = entry.ok()?;
        let pid: u32 = entry.file_name().to_str()?.parse().ok()?;
        let cmdline = std::fs::read(entry.path().join("cmdline")).ok()?;
        cmdline
            .split(|&b| b == 0)
            .any(|arg| arg == argument.as_bytes())
            .then_some(pid)
    })
}
