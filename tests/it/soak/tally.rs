//! What the workers found and how far they got: I/O errors and corrupt bytes (counted, the first
//! few described), progress counters for the report, how long the readers' calls took (the
//! longest, and each slow one, to tell a restarted server's stall), and the end of the run they
//! all watch.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Descriptions kept for the failure message; the counts keep going past it.
const KEPT_DETAILS: usize = 40;
/// Past this many problems the run stops early: a broken mount only repeats itself.
const GIVE_UP_AFTER: u64 = 200;
/// Reader calls that took at least this long are kept (when they began, how long they took).
const SLOW_CALL: Duration = Duration::from_millis(100);
/// At most this many of them (a few MiB).
const KEPT_SLOW_CALLS: usize = 100_000;

/// One call of a reader: an open, a read, a listing with its stats.
#[derive(Clone, Debug)]
pub struct ReaderCall {
    pub start: Instant,
    pub took: Duration,
    pub what: String,
}

pub struct Tally {
    deadline: Instant,
    stopped: AtomicBool,
    errors: AtomicU64,
    corrupt_bytes: AtomicU64,
    /// Errors plus corrupt reads: what `GIVE_UP_AFTER` counts.
    problems: AtomicU64,
    details: Mutex<Vec<String>>,
    /// Bytes the readers checked against the seeded pattern.
    pub bytes_read: AtomicU64,
    /// Bytes the writers wrote.
    pub bytes_written: AtomicU64,
    /// Operations finished by every worker.
    pub ops: AtomicU64,
    /// Calls the readers made, timed.
    pub reader_calls: AtomicU64,
    longest_nanos: AtomicU64,
    longest: Mutex<Option<ReaderCall>>,
    slow: Mutex<Vec<(Instant, Duration)>>,
}

impl Tally {
    pub fn new(deadline: Instant) -> Tally {
        Tally {
            deadline,
            stopped: AtomicBool::new(false),
            errors: AtomicU64::new(0),
            corrupt_bytes: AtomicU64::new(0),
            problems: AtomicU64::new(0),
            details: Mutex::new(Vec::new()),
            bytes_read: AtomicU64::new(0),
            bytes_written: AtomicU64::new(0),
            ops: AtomicU64::new(0),
            reader_calls: AtomicU64::new(0),
            longest_nanos: AtomicU64::new(0),
            longest: Mutex::new(None),
            slow: Mutex::new(Vec::new()),
        }
    }

    /// Whether workers should start another operation.
    pub fn running(&self) -> bool {
        !self.stopped.load(Ordering::Relaxed) && Instant::now() < self.deadline
    }

    /// Ends the run for every worker (the sampler lost the daemon, or too much went wrong).
    pub fn stop(&self) {
        self.stopped.store(true, Ordering::Relaxed);
    }

    /// An operation failed (an errno, a short read, a missing or unexpected name).
    pub fn error(&self, what: String) {
        self.errors.fetch_add(1, Ordering::Relaxed);
        self.keep(format!("error: {what}"));
    }

    /// `bytes` bytes came back different from what was written or seeded.
    pub fn corrupt(&self, what: String, bytes: u64) {
        self.corrupt_bytes.fetch_add(bytes, Ordering::Relaxed);
        self.keep(format!("corrupt: {what}: {bytes} bytes differ"));
    }

    pub fn add_ops(&self, n: u64) {
        self.ops.fetch_add(n, Ordering::Relaxed);
    }

    /// Runs one reader call and keeps how long it took; `what` names it, should it be the
    /// longest.
    pub fn reader_call<T>(&self, what: impl FnOnce() -> String, call: impl FnOnce() -> T) -> T {
        let start = Instant::now();
        let out = call();
        let took = start.elapsed();
        self.reader_calls.fetch_add(1, Ordering::Relaxed);
        if took >= SLOW_CALL {
            let mut slow = self.slow.lock().unwrap_or_else(|e| e.into_inner());
            if slow.len() < KEPT_SLOW_CALLS {
                slow.push((start, took));
            }
        }
        let nanos = took.as_nanos() as u64;
        if self.longest_nanos.fetch_max(nanos, Ordering::Relaxed) < nanos {
            let mut longest = self.longest.lock().unwrap_or_else(|e| e.into_inner());
            if longest.as_ref().is_none_or(|l| l.took < took) {
                *longest = Some(ReaderCall {
                    start,
                    took,
                    what: what(),
                });
            }
        }
        out
    }

    /// The longest reader call so far.
    pub fn longest_reader_call(&self) -> Option<ReaderCall> {
        self.longest
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// The reader calls that took at least `SLOW_CALL` (100 ms): when each began, how long it
    /// took.
    pub fn slow_reader_calls(&self) -> Vec<(Instant, Duration)> {
        self.slow.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    pub fn errors(&self) -> u64 {
        self.errors.load(Ordering::Relaxed)
    }

    pub fn corrupt_bytes(&self) -> u64 {
        self.corrupt_bytes.load(Ordering::Relaxed)
    }

    /// Everything found, for a failure message; empty when the run was clean.
    pub fn problems(&self) -> String {
        if self.errors() == 0 && self.corrupt_bytes() == 0 {
            return String::new();
        }
        let details = self.details.lock().unwrap_or_else(|e| e.into_inner());
        format!(
            "{} errors, {} corrupt bytes; first {}:\n  {}",
            self.errors(),
            self.corrupt_bytes(),
            details.len(),
            details.join("\n  ")
        )
    }

    fn keep(&self, line: String) {
        let problems = self.problems.fetch_add(1, Ordering::Relaxed) + 1;
        eprintln!("soak: {line}");
        let mut details = self.details.lock().unwrap_or_else(|e| e.into_inner());
        if details.len() < KEPT_DETAILS {
            details.push(line);
        }
        if problems >= GIVE_UP_AFTER {
            self.stop();
        }
    }
}
