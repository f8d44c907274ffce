//! Logs kept open between their records, within a bound.
//!
//! A log opened and closed for each record (so that a file being written holds one descriptor,
//! its data) cost a new small file four `open`s and `close`s of its log — its header, its
//! write, its commit's start and its emptying — and a sequential writer one of each per write
//! that grew the file. So a log keeps the descriptor it was opened with while fewer than
//! [`OpenLogs`]' limit are kept by the engine: a sixteenth of the process's descriptor limit, at
//! most [`MAX_KEPT`]. Past it, logs are opened per record as before, and 10,000 files open for
//! writing still take one descriptor each, plus this bounded few.
//!
//! Once the engine leaves its spills to a successor ([`OpenLogs::close`]), no kept descriptor is
//! written again: the successor moves the directories and appends to their logs itself, and a
//! record of this process's arriving after (which the engine's contract rules out) then fails
//! to open the moved log by path, as it always did, instead of landing among the successor's.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

/// The most log descriptors an engine keeps open, whatever its descriptor limit.
const MAX_KEPT: usize = 256;

/// How many of an engine's logs hold their descriptor, and how many may.
#[derive(Debug)]
pub(in crate::write) struct OpenLogs {
    kept: AtomicUsize,
    limit: usize,
    closed: AtomicBool,
}

/// One kept descriptor's place in the bound, given back when dropped (with the descriptor).
#[derive(Debug)]
pub(super) struct Slot(Arc<OpenLogs>);

impl OpenLogs {
    /// The bound for this process: a sixteenth of its descriptor limit, at most [`MAX_KEPT`].
    pub fn for_this_process() -> Arc<OpenLogs> {
        OpenLogs::with_limit((descriptor_limit() / 16).min(MAX_KEPT as u64) as usize)
    }

    pub fn with_limit(limit: usize) -> Arc<OpenLogs> {
        Arc::new(OpenLogs {
            kept: AtomicUsize::new(0),
            limit,
            closed: AtomicBool::new(false),
        })
    }

    /// A place for one more kept descriptor, if the bound has one and the engine still writes.
    pub(super) fn slot(self: &Arc<Self>) -> Option<Slot> {
        if self.is_closed() {
            return None;
        }
        self.kept
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |kept| {
                (kept < self.limit).then_some(kept + 1)
            })
            .ok()
            .map(|_| Slot(Arc::clone(self)))
    }

    /// From now on no kept descriptor is written (the spills are left to a successor).
    pub fn close(&self) {
        self.closed.store(true, Ordering::Release);
    }

    pub(super) fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// How many descriptors are kept now.
    #[cfg(test)]
    pub fn kept(&self) -> usize {
        self.kept.load(Ordering::Acquire)
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.kept.fetch_sub(1, Ordering::AcqRel);
    }
}

/// The soft `RLIMIT_NOFILE` (1024, a common default, if it cannot be read).
fn descriptor_limit() -> u64 {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes the struct it is given and nothing else.
    let read = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } == 0;
    if read { limit.rlim_cur } else { 1024 }
}

#[cfg(test)]
mod tests {
    use std::io;
    use std::path::Path;
    use std::time::{Duration, SystemTime};

    use super::super::{LOG, Record, SpillLog, spare};
    use super::*;

    #[test]
    fn slots_are_bounded_and_given_back() {
        let logs = OpenLogs::with_limit(2);
        let a = logs.slot().expect("first");
        let b = logs.slot().expect("second");
        assert!(logs.slot().is_none(), "a third past the limit of 2");
        drop(a);
        assert_eq!(logs.kept(), 1);
        let c = logs.slot().expect("a slot given back is taken again");
        drop((b, c));
        assert_eq!(logs.kept(), 0);
    }

    #[test]
    fn a_closed_bound_gives_no_slot() {
        let logs = OpenLogs::with_limit(4);
        let kept = logs.slot().expect("open");
        logs.close();
        assert!(logs.slot().is_none());
        assert!(logs.is_closed());
        drop(kept);
        assert_eq!(logs.kept(), 0);
    }

    /// A spill directory `name` under `parent`, its log with no record, bound to `logs`.
    fn log_in(parent: &Path, name: &str, logs: &Arc<OpenLogs>) -> SpillLog {
        let dir = parent.join(name);
        spare::make(&dir).expect("make");
        SpillLog::new(dir, 0, logs)
    }

    fn record(second: u64) -> Record {
        Record::Mtime(SystemTime::UNIX_EPOCH + Duration::from_secs(second))
    }

    fn log_len(log: &SpillLog) -> u64 {
        std::fs::metadata(log.dir().join(LOG)).expect("log").len()
    }

    #[test]
    fn a_log_keeps_its_descriptor_within_the_bound_and_is_emptied_through_it() {
        let parent = tempfile::tempdir().expect("dir");
        let logs = OpenLogs::with_limit(1);
        let mut kept = log_in(parent.path(), "1", &logs);
        let mut opened = log_in(parent.path(), "2", &logs);
        kept.append(&record(1)).expect("append");
        opened.append(&record(1)).expect("append");
        assert!(kept.kept.is_some(), "the first keeps its descriptor");
        assert!(opened.kept.is_none(), "the second is past the bound of 1");
        assert_eq!(logs.kept(), 1);

        kept.append(&record(2))
            .expect("append through the kept descriptor");
        opened.append(&record(2)).expect("append by path");
        let one = record(1).frame().len() as u64;
        for log in [&kept, &opened] {
            assert_eq!(log.len, 2 * one, "both records counted");
            assert_eq!(log_len(log), 2 * one, "and on disk, one after the other");
        }

        kept.empty().expect("empty");
        assert_eq!(log_len(&kept), 0, "emptied through the kept descriptor");
        assert_eq!(logs.kept(), 0, "and its place given back");
        opened.append(&record(3)).expect("append");
        assert!(
            opened.kept.is_some(),
            "the place taken by the next log opened"
        );
    }

    #[test]
    fn once_left_to_a_successor_a_kept_descriptor_is_not_written() {
        let parent = tempfile::tempdir().expect("dir");
        let logs = OpenLogs::with_limit(4);
        let mut log = log_in(parent.path(), "1", &logs);
        log.append(&record(1)).expect("append");
        assert!(log.kept.is_some());

        logs.close();
        // The successor adopts the directory by renaming it.
        let adopted = parent.path().join("adopted");
        std::fs::rename(log.dir(), &adopted).expect("rename");
        let late = log
            .append(&record(2))
            .expect_err("the log is no longer where it was");
        assert_eq!(late.kind(), io::ErrorKind::NotFound);
        assert_eq!(
            std::fs::metadata(adopted.join(LOG)).expect("log").len(),
            record(1).frame().len() as u64,
            "the adopted log holds only what was appended before"
        );
        assert_eq!(logs.kept(), 0);
    }
}
