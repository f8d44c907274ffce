//! Progress of a manifest generation: shared counters the listers bump, and a reporter that
//! shows them — a live status line when a person watches stderr on a terminal, a plain log
//! line every few seconds otherwise (a daemon's log, CI).
//!
//! The reporter runs on its own thread, so writing to a slow terminal or log never stalls a
//! runtime thread, and sleeps between reports, so it costs nothing measurable.

use std::io::{IsTerminal, Write};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, mpsc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How often the terminal status line is redrawn.
const TERMINAL_INTERVAL: Duration = Duration::from_millis(250);
/// How often a progress line is logged when nobody watches a terminal.
const LOG_INTERVAL: Duration = Duration::from_secs(5);

/// How a generation reports its progress while it runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ProgressMode {
    /// A live status line when stderr is a terminal, else periodic log lines.
    #[default]
    Auto,
    /// Periodic `tracing::info!` lines only (a daemon generating at mount time).
    Log,
    /// Nothing while running.
    Off,
}

/// What has been listed so far; the listers add to it, the reporter reads it.
#[derive(Debug, Default)]
pub struct Counters {
    pub objects: AtomicU64,
    pub directories: AtomicU64,
    pub bytes: AtomicU64,
    /// LIST requests sent (probes included).
    pub lists: AtomicU64,
}

impl Counters {
    pub(super) fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }

    pub fn objects(&self) -> u64 {
        self.objects.load(Ordering::Relaxed)
    }

    pub fn directories(&self) -> u64 {
        self.directories.load(Ordering::Relaxed)
    }

    pub fn bytes(&self) -> u64 {
        self.bytes.load(Ordering::Relaxed)
    }

    pub fn lists(&self) -> u64 {
        self.lists.load(Ordering::Relaxed)
    }
}

/// Objects per second over `elapsed`, for people (0 for an instant run).
pub fn rate(objects: u64, elapsed: Duration) -> u64 {
    let secs = elapsed.as_secs_f64();
    if secs <= 0.0 {
        0
    } else {
        (objects as f64 / secs) as u64
    }
}

/// Reports until dropped (or [`Reporter::stop`]ped), then clears its status line.
pub(super) struct Reporter {
    stop: Option<mpsc::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl Reporter {
    pub fn start(mode: ProgressMode, label: String, counters: Arc<Counters>) -> Reporter {
        let terminal = match mode {
            ProgressMode::Off => {
                return Reporter {
                    stop: None,
                    thread: None,
                };
            }
            ProgressMode::Auto => std::io::stderr().is_terminal(),
            ProgressMode::Log => false,
        };
        let (stop, stopped) = mpsc::channel::<()>();
        let started = Instant::now();
        let thread = std::thread::Builder::new()
            .name("msfs-manifest-progress".into())
            .spawn(move || {
                let interval = if terminal {
                    TERMINAL_INTERVAL
                } else {
                    LOG_INTERVAL
                };
                // Waits one interval; a message or a dropped sender both mean "stop".
                while let Err(mpsc::RecvTimeoutError::Timeout) = stopped.recv_timeout(interval) {
                    let line = status_line(&counters, started.elapsed());
                    if terminal {
                        let mut err = std::io::stderr().lock();
                        // Carriage return and "erase line": redraw in place.
                        let _ = write!(err, "\r\x1b[2K{label}: {line}");
                        let _ = err.flush();
                    } else {
                        tracing::info!("{label}: {line}");
                    }
                }
                if terminal {
                    let mut err = std::io::stderr().lock();
                    let _ = write!(err, "\r\x1b[2K");
                    let _ = err.flush();
                }
            });
        match thread {
            Ok(thread) => Reporter {
                stop: Some(stop),
                thread: Some(thread),
            },
            Err(e) => {
                // Progress is a nicety: generate without it rather than fail.
                tracing::warn!("manifest generation: no progress reports ({e})");
                Reporter {
                    stop: None,
                    thread: None,
                }
            }
        }
    }

    pub fn stop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Drop for Reporter {
    fn drop(&mut self) {
        self.stop();
    }
}

fn status_line(counters: &Counters, elapsed: Duration) -> String {
    let objects = counters.objects();
    format!(
        "{} objects, {} directories, {} objects/s, {:.0}s",
        objects,
        counters.directories(),
        rate(objects, elapsed),
        elapsed.as_secs_f64()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_line_shows_objects_directories_and_rate() {
        let counters = Counters::default();
        Counters::add(&counters.objects, 5000);
        Counters::add(&counters.directories, 12);
        let line = status_line(&counters, Duration::from_secs(2));
        assert_eq!(line, "5000 objects, 12 directories, 2500 objects/s, 2s");
        assert_eq!(rate(10, Duration::ZERO), 0);
    }

    #[test]
    fn a_reporter_stops_promptly() {
        let mut reporter = Reporter::start(
            ProgressMode::Log,
            "test".into(),
            Arc::new(Counters::default()),
        );
        reporter.stop();
        assert!(reporter.thread.is_none());
    }
}
