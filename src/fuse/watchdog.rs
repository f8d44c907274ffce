//! The no-progress watchdog: which FUSE requests are waiting for their answer, and since when.
//!
//! A request that never gets its answer blocks the process that issued it — a `stat` of a file
//! on an unreachable store, a write waiting for dirty-data room that never comes — and nothing
//! else says so. Every request the adapter hands to a task is entered in an [`InFlight`] table
//! and leaves it when answered (or when its task is dropped); one periodic task per session
//! ([`Watchdog`]) sweeps the table and logs, at `warn`, each request unanswered for longer than
//! the bound (`fuse_request_stall_warn_secs`) with its operation, inode, issuing process and age:
//! once when it passes the bound and again after each further bound, so a request stuck for an
//! hour shows up a few dozen times, not thousands. Each stalled request is counted once in
//! `msfs.fuse.requests_stalled` (by operation), which the soak test requires to stay at 0.
//!
//! Cost on the hot path: one short critical section to enter a request and one to remove it;
//! the table is a slab (a vector of slots and a free list), so once it has grown to the peak
//! number of requests in flight neither allocates. Only the sweep, every fraction of the bound,
//! walks it.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tokio::runtime::Handle;
use tokio::task::JoinHandle;

use crate::telemetry::Metrics;

/// The sweep runs this many times per bound (so a warning comes at most a quarter of the bound
/// late), but never more often than every [`MIN_SWEEP`] nor less often than every [`MAX_SWEEP`].
const SWEEPS_PER_BOUND: u32 = 4;
const MIN_SWEEP: Duration = Duration::from_millis(100);
const MAX_SWEEP: Duration = Duration::from_secs(15);

/// One request waiting for its answer.
#[derive(Debug, Clone, Copy)]
struct Entry {
    op: &'static str,
    ino: u64,
    pid: u32,
    started: Instant,
    /// Whole bounds it had been waiting at its last warning (0: never warned about).
    warned: u64,
}

#[derive(Debug, Default)]
struct Slab {
    slots: Vec<Option<Entry>>,
    /// Indices of the `None` slots.
    free: Vec<usize>,
}

/// The requests of one session that are waiting for their answer.
#[derive(Debug, Default)]
pub(super) struct InFlight {
    slab: Mutex<Slab>,
}

/// A request unanswered for longer than the bound, as one sweep found it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Stalled {
    pub op: &'static str,
    pub ino: u64,
    pub pid: u32,
    pub age: Duration,
    /// The first warning about this request (it is counted once, at its first).
    pub first: bool,
}

/// A request's place in the table; dropping it (the answer was sent, or the task was dropped)
/// removes the request.
#[derive(Debug)]
pub(super) struct Pending {
    table: Arc<InFlight>,
    slot: usize,
}

impl Drop for Pending {
    fn drop(&mut self) {
        let mut slab = self.table.lock();
        slab.slots[self.slot] = None;
        slab.free.push(self.slot);
    }
}

impl InFlight {
    pub(super) fn new() -> Arc<InFlight> {
        Arc::new(InFlight::default())
    }

    /// Every critical section leaves the slab consistent, so a poisoned lock is still usable.
    fn lock(&self) -> MutexGuard<'_, Slab> {
        self.slab
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Enters request `op` on inode `ino`, issued by process `pid`, as waiting since `started`.
    pub(super) fn begin(
        self: &Arc<Self>,
        op: &'static str,
        ino: u64,
        pid: u32,
        started: Instant,
    ) -> Pending {
        let entry = Entry {
            op,
            ino,
            pid,
            started,
            warned: 0,
        };
        let mut slab = self.lock();
        let slot = match slab.free.pop() {
            Some(slot) => {
                slab.slots[slot] = Some(entry);
                slot
            }
            None => {
                slab.slots.push(Some(entry));
                slab.slots.len() - 1
            }
        };
        drop(slab);
        Pending {
            table: self.clone(),
            slot,
        }
    }

    /// Requests waiting now.
    #[cfg(test)]
    fn len(&self) -> usize {
        let slab = self.lock();
        slab.slots.len() - slab.free.len()
    }

    /// The requests due a warning at `now`: waiting at least `bound`, and a whole further
    /// `bound` since their last warning. Each is reported at most once per bound, however often
    /// the sweep runs (and once, not many times, after a sweep that came late).
    pub(super) fn sweep(&self, now: Instant, bound: Duration) -> Vec<Stalled> {
        let bound_nanos = bound.as_nanos().max(1);
        let mut due = Vec::new();
        let mut slab = self.lock();
        for entry in slab.slots.iter_mut().flatten() {
            let age = now.saturating_duration_since(entry.started);
            let bounds = u64::try_from(age.as_nanos() / bound_nanos).unwrap_or(u64::MAX);
            if bounds > entry.warned {
                due.push(Stalled {
                    op: entry.op,
                    ino: entry.ino,
                    pid: entry.pid,
                    age,
                    first: entry.warned == 0,
                });
                entry.warned = bounds;
            }
        }
        due
    }
}

/// How often to sweep for a bound.
fn sweep_period(bound: Duration) -> Duration {
    (bound / SWEEPS_PER_BOUND).clamp(MIN_SWEEP, MAX_SWEEP)
}

/// The periodic sweep of one session's table; it stops when dropped (with the adapter, when
/// the session ends).
#[derive(Debug)]
pub(super) struct Watchdog {
    task: JoinHandle<()>,
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Watchdog {
    /// Sweeps `table` on `runtime`, warning about requests unanswered for `bound` and counting
    /// them in `metrics`; `session` names the mount in the warnings.
    pub(super) fn start(
        runtime: &Handle,
        table: Arc<InFlight>,
        bound: Duration,
        session: String,
        metrics: Arc<Metrics>,
    ) -> Watchdog {
        let task = runtime.spawn(async move {
            let mut ticks = tokio::time::interval(sweep_period(bound));
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                ticks.tick().await;
                for stalled in table.sweep(Instant::now(), bound) {
                    if stalled.first {
                        metrics.fuse_request_stalled(stalled.op);
                    }
                    tracing::warn!(
                        session = %session,
                        op = %stalled.op,
                        ino = stalled.ino,
                        pid = stalled.pid,
                        age_secs = stalled.age.as_secs(),
                        "FUSE request unanswered for {} s: the process that issued it is \
                         blocked until msfs answers; look above for a failing or unreachable \
                         store (fuse_request_stall_warn_secs sets when this is reported)",
                        stalled.age.as_secs()
                    );
                }
            }
        });
        Watchdog { task }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BOUND: Duration = Duration::from_secs(10);

    fn at(start: Instant, secs: u64) -> Instant {
        start + Duration::from_secs(secs)
    }

    #[test]
    fn a_request_is_in_the_table_until_its_answer_drops_it() {
        let table = InFlight::new();
        let now = Instant::now();
        let first = table.begin("lookup", 1, 10, now);
        let second = table.begin("read", 2, 10, now);
        assert_eq!(table.len(), 2);
        drop(first);
        assert_eq!(table.len(), 1);
        drop(second);
        assert_eq!(table.len(), 0);
        assert!(table.sweep(at(now, 3600), BOUND).is_empty());
    }

    #[test]
    fn freed_slots_are_reused_so_the_table_stays_as_large_as_its_peak() {
        let table = InFlight::new();
        let now = Instant::now();
        for round in 0..1000 {
            let pending: Vec<Pending> = (0..8)
                .map(|i| table.begin("write", i, round, now))
                .collect();
            assert_eq!(table.len(), 8);
            drop(pending);
        }
        assert_eq!(table.len(), 0);
        assert_eq!(
            table.lock().slots.len(),
            8,
            "one slot per request at the peak"
        );
    }

    #[test]
    fn a_request_is_reported_once_past_the_bound_and_again_each_further_bound() {
        let table = InFlight::new();
        let start = Instant::now();
        let _stuck = table.begin("getattr", 42, 7, start);
        assert!(table.sweep(at(start, 9), BOUND).is_empty(), "not yet");
        let first = table.sweep(at(start, 10), BOUND);
        assert_eq!(
            first,
            vec![Stalled {
                op: "getattr",
                ino: 42,
                pid: 7,
                age: Duration::from_secs(10),
                first: true,
            }]
        );
        assert!(
            table.sweep(at(start, 11), BOUND).is_empty(),
            "once per bound"
        );
        assert!(table.sweep(at(start, 19), BOUND).is_empty());
        let again = table.sweep(at(start, 20), BOUND);
        assert_eq!(again.len(), 1);
        assert!(!again[0].first, "counted only at its first report");
        // A sweep that comes late reports once, not once per bound missed.
        assert_eq!(table.sweep(at(start, 75), BOUND).len(), 1);
        assert!(table.sweep(at(start, 79), BOUND).is_empty());
        assert_eq!(table.sweep(at(start, 80), BOUND).len(), 1);
    }

    #[test]
    fn only_the_requests_past_the_bound_are_reported() {
        let table = InFlight::new();
        let start = Instant::now();
        let _old = table.begin("write", 5, 1, start);
        let _young = table.begin("read", 6, 1, at(start, 8));
        let answered = table.begin("open", 7, 1, start);
        drop(answered);
        let due = table.sweep(at(start, 12), BOUND);
        assert_eq!(due.len(), 1);
        assert_eq!((due[0].op, due[0].ino), ("write", 5));
        let due = table.sweep(at(start, 18), BOUND);
        assert_eq!(due.len(), 1);
        assert_eq!((due[0].op, due[0].ino, due[0].first), ("read", 6, true));
    }

    #[test]
    fn the_sweep_runs_a_few_times_per_bound_within_limits() {
        assert_eq!(
            sweep_period(Duration::from_secs(60)),
            Duration::from_secs(15)
        );
        assert_eq!(
            sweep_period(Duration::from_secs(1)),
            Duration::from_millis(250)
        );
        assert_eq!(sweep_period(Duration::from_millis(10)), MIN_SWEEP);
        assert_eq!(sweep_period(Duration::from_secs(3600)), MAX_SWEEP);
    }

    /// Polls `done` every 10 ms; a hang guard, not a timing assertion.
    async fn eventually(what: &str, mut done: impl FnMut() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(60);
        while !done() {
            assert!(Instant::now() < deadline, "timed out waiting until {what}");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    #[tokio::test]
    async fn the_watchdog_counts_a_stalled_request_and_stops_when_dropped() {
        let table = InFlight::new();
        let metrics = Metrics::new();
        let stuck = table.begin("lookup", 9, 3, Instant::now());
        let watchdog = Watchdog::start(
            &Handle::current(),
            table.clone(),
            Duration::from_millis(20),
            "test".into(),
            metrics.clone(),
        );
        let counted = r#"msfs_fuse_requests_stalled_total{op="lookup"} 1"#;
        eventually("the stalled lookup is counted", || {
            metrics.render().contains(counted)
        })
        .await;
        drop(watchdog);
        eventually("the sweep task lets go of the table", || {
            Arc::strong_count(&table) == 2
        })
        .await;
        drop(stuck);
        assert_eq!(Arc::strong_count(&table), 1);
    }
}
