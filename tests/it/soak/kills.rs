//! The serving process killed under the load: a thread that SIGKILLs the CSI plugin every
//! period and starts the next one over the same directories and fd holder, then waits until
//! that one has taken every volume over (its `msfs_fuse_takeovers_total` reaches the number of
//! volumes). What each kill cost the readers is worked out afterwards from the tally's slow
//! calls.
//!
//! Should a successor fail to start or to take the volumes over, nobody would ever answer the
//! workers' requests: the thread then aborts the volumes' FUSE connections, so that they fail
//! (and the test with them) instead of hanging.

use std::panic::AssertUnwindSafe;
use std::path::PathBuf;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::common::csi::CsiPlugin;
use crate::common::http_get;
use crate::common::mount::abort_fuse_connection;

/// How long a successor may take to take every volume over. Generous: it only turns a hang
/// into a failure.
const TAKEOVER_LIMIT: Duration = Duration::from_secs(120);
const POLL: Duration = Duration::from_millis(20);
/// Polls between two looks at the plugin's log for a volume it gave up.
const LOG_EVERY: u64 = 50;

/// One kill and the takeover after it.
#[derive(Clone, Copy, Debug)]
pub struct Kill {
    /// Just before the SIGKILL.
    pub at: Instant,
    /// When the successor answered on the CSI socket.
    pub serving: Instant,
    /// When it had taken every volume over.
    pub taken_over: Instant,
    /// An upgrade (SIGTERM with the successor waiting) rather than a SIGKILL.
    pub upgrade: bool,
}

pub struct Killer {
    stop: mpsc::Sender<()>,
    thread: JoinHandle<(CsiPlugin, Result<Vec<Kill>, String>)>,
}

/// Kills `plugin` every `period` from now until `run` is over (not at its end), restarting it
/// each time; its metrics endpoint is on `metrics_port`, its volumes mounted at `targets`.
pub fn start(
    mut plugin: CsiPlugin,
    period: Duration,
    run: Duration,
    metrics_port: u16,
    targets: Vec<PathBuf>,
) -> Killer {
    let (stop, stopped) = mpsc::channel::<()>();
    let thread = std::thread::Builder::new()
        .name("soak-killer".into())
        .spawn(move || {
            let result = kill_loop(&mut plugin, period, run, metrics_port, &targets, &stopped);
            if result.is_err() {
                for target in &targets {
                    eprintln!("soak-killer: {}", abort_fuse_connection(target));
                }
            }
            (plugin, result)
        })
        .expect("spawn the killer");
    Killer { stop, thread }
}

impl Killer {
    /// Stops killing (the load is over) and hands back the plugin running now, with the kills.
    pub fn finish(self) -> (CsiPlugin, Result<Vec<Kill>, String>) {
        let _ = self.stop.send(());
        self.thread.join().expect("the killer panicked")
    }
}

fn kill_loop(
    plugin: &mut CsiPlugin,
    period: Duration,
    run: Duration,
    metrics_port: u16,
    targets: &[PathBuf],
    stopped: &mpsc::Receiver<()>,
) -> Result<Vec<Kill>, String> {
    let started = Instant::now();
    let mut kills = Vec::new();
    for k in 1u32.. {
        let due = started + period * k;
        if due >= started + run {
            break;
        }
        match stopped.recv_timeout(due.saturating_duration_since(Instant::now())) {
            Err(RecvTimeoutError::Timeout) => {}
            // The load ended early (it failed): no more kills.
            Ok(()) | Err(RecvTimeoutError::Disconnected) => break,
        }
        let old = plugin.pid();
        let at = Instant::now();
        // Every other time an upgrade: the successor started beside it, then SIGTERM.
        let upgrade = k % 2 == 0;
        // The fixture panics when the successor does not serve: that is this kill's failure.
        std::panic::catch_unwind(AssertUnwindSafe(|| {
            if upgrade {
                plugin.upgrade()
            } else {
                plugin.kill_and_restart()
            }
        }))
        .map_err(|panic| {
            let why = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            format!("kill {k}: the successor of pid {old:?} did not serve: {why}")
        })?;
        let serving = Instant::now();
        eprintln!(
            "soak-killer: {} {k} at {:.1} s: pid {old:?} → {:?}, serving after {} ms",
            if upgrade { "upgrade" } else { "kill" },
            (at - started).as_secs_f64(),
            plugin.pid(),
            (serving - at).as_millis()
        );
        wait_for_takeovers(plugin, metrics_port, targets.len(), k)?;
        kills.push(Kill {
            at,
            serving,
            taken_over: Instant::now(),
            upgrade,
        });
    }
    Ok(kills)
}

/// Waits until the plugin running now reports a takeover of every volume, all of them with the
/// kernel resending what the dead one left unanswered.
fn wait_for_takeovers(
    plugin: &CsiPlugin,
    metrics_port: u16,
    volumes: usize,
    k: u32,
) -> Result<(), String> {
    let deadline = Instant::now() + TAKEOVER_LIMIT;
    let mut polls = 0u64;
    loop {
        polls += 1;
        let metrics = http_get(metrics_port, "/metrics").map_or(String::new(), |(_, b)| b);
        let takeovers = crate::soak::metric_sum(&metrics, "msfs_fuse_takeovers_total") as usize;
        let without_resend: f64 = metrics
            .lines()
            .filter(|l| l.starts_with("msfs_fuse_takeovers_total{") && l.contains("\"false\""))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum();
        if without_resend > 0.0 {
            return Err(format!(
                "kill {k}: {without_resend} takeovers without FUSE_NOTIFY_RESEND"
            ));
        }
        if takeovers >= volumes {
            return Ok(());
        }
        // The log (every run's) grows large: read now and then.
        if !polls.is_multiple_of(LOG_EVERY) && Instant::now() < deadline {
            std::thread::sleep(POLL);
            continue;
        }
        let log = plugin.log_text();
        if log.contains("cannot serve a volume whose connection was kept") {
            return Err(format!(
                "kill {k}: the successor gave a volume up:\n{}",
                crate::soak::log_tail(&log)
            ));
        }
        if Instant::now() >= deadline {
            return Err(format!(
                "kill {k}: {takeovers} of {volumes} volumes taken over after {TAKEOVER_LIMIT:?}:\n{}",
                crate::soak::log_tail(&log)
            ));
        }
        std::thread::sleep(POLL);
    }
}

/// What one kill cost the readers, from the reader calls under way at some instant between
/// the kill and the end of the takeover that took 100 ms or more (`None`: there were none).
#[derive(Clone, Copy, Debug, Default)]
pub struct Stall {
    /// The longest of those calls, from its start (which may precede the kill) to its answer.
    pub longest: Option<Duration>,
    /// How long after the kill the last of them was answered.
    pub answered_after: Option<Duration>,
}

/// Each kill's [`Stall`], given the tally's slow reader calls (when each began, how long it
/// took).
pub fn stalls(kills: &[Kill], slow: &[(Instant, Duration)]) -> Vec<Stall> {
    kills
        .iter()
        .map(|kill| {
            let under_way = || {
                slow.iter()
                    .filter(|(start, took)| *start <= kill.taken_over && *start + *took >= kill.at)
            };
            Stall {
                longest: under_way().map(|(_, took)| *took).max(),
                answered_after: under_way()
                    .map(|(start, took)| *start + *took - kill.at)
                    .max(),
            }
        })
        .collect()
}
