//! Spill directories made ahead of need. A file's first write used to make its directory
//! itself: a `mkdir` and two file creations, about 0.2 ms of a small file's 1.4 ms
//! create-write-close on this machine (ext4), all of it on the writer's critical path. A
//! thread of the engine's own keeps a few made instead, and the first write takes one.
//!
//! A spare is `<n>/` with an empty `data` and an empty `log`: exactly what a process killed
//! between creating a file's log and appending its header leaves, which recovery already drops
//! as torn. So spares need no rule of their own after a kill or a hand-off (the successor
//! removes them), and they hold no descriptor while they wait.
//!
//! The directory of a file committed clean is emptied and becomes a spare again ([`Recycler`])
//! rather than removed: two truncations instead of two unlinks, a `rmdir` and later a `mkdir`
//! and two creations (freeing and allocating inodes is most of what a small file costs the
//! local disk). A burst of files written at once (100 `echo`s in parallel, a checkpoint's shards)
//! takes more spares than are kept made, and its directories are taken back as spares up to
//! [`KEPT`], so that the next burst reuses them; spares beyond [`READY`] that no write has
//! taken for [`TRIM_AFTER`] are removed, so that a quiet process keeps few. (On this machine's
//! ext4, making those directories and files anew was a quarter of the daemon's CPU while 200
//! files were created at once.)

use std::collections::VecDeque;
use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

use super::{DATA, LOG, SpillLog, at, remove_dir};

/// How many spares are kept made: a burst of new files (`tar x`) takes them faster than one
/// thread makes them, and then writers make their own, as before.
const READY: usize = 8;

/// After a spare could not be made (a full disk, a removed directory), the maker waits this
/// long before trying again rather than spinning; writers meanwhile make their own and report
/// what fails.
const RETRY_AFTER: Duration = Duration::from_secs(1);

/// The spares of one spill directory and the thread making them.
#[derive(Debug)]
pub(in crate::write) struct Spares {
    shared: Arc<Shared>,
    maker: Mutex<Option<JoinHandle<()>>>,
}

/// Takes emptied directories back as spares; a handle for the blocking pool's tasks that let
/// go of files' spills (`Leftover::dispose`).
#[derive(Debug, Clone)]
pub(in crate::write) struct Recycler(Arc<Shared>);

/// At most this many spares are kept, recycled ones included; beyond, a file's directory is
/// removed as before. It bounds what a hand-off or a clean exit removes (three entries each)
/// right after a burst.
const KEPT: usize = 256;

/// Spares beyond [`READY`] are removed once no write has taken one for this long (checked at
/// this interval, so between one and two of it after the last).
const TRIM_AFTER: Duration = Duration::from_secs(60);

#[derive(Debug)]
struct Shared {
    dir: PathBuf,
    /// [`TRIM_AFTER`], but for tests.
    trim_after: Duration,
    /// The spill directories' numbers, shared with the engine (recovered files, deleted files'
    /// spills): unique in the process.
    numbers: Arc<AtomicU64>,
    ready: Mutex<Ready>,
    /// Tells the maker a spare was taken, or that it must stop.
    wake: Condvar,
}

#[derive(Debug, Default)]
struct Ready {
    /// Oldest first: taken in the order made (or taken back).
    spares: VecDeque<PathBuf>,
    stopped: bool,
    /// How many spares writes have taken, ever: the maker trims when it has not moved.
    taken: u64,
}

impl Spares {
    /// Starts the maker for spill directory `dir`. Without a thread (the system refuses one)
    /// there are no spares, and every first write makes its directory itself.
    pub fn start(dir: &Path, numbers: Arc<AtomicU64>) -> Spares {
        Spares::start_trimming_after(dir, numbers, TRIM_AFTER)
    }

    fn start_trimming_after(dir: &Path, numbers: Arc<AtomicU64>, trim_after: Duration) -> Spares {
        let shared = Arc::new(Shared {
            dir: dir.to_path_buf(),
            trim_after,
            numbers,
            ready: Mutex::new(Ready::default()),
            wake: Condvar::new(),
        });
        let maker = {
            let shared = Arc::clone(&shared);
            std::thread::Builder::new()
                .name("msfs-spill-spares".into())
                .spawn(move || shared.make_while_needed())
        };
        let maker = match maker {
            Ok(maker) => Some(maker),
            Err(e) => {
                tracing::warn!(error = %e, "cannot start the thread that makes spill \
                    directories ahead of need; each file's first write makes its own");
                None
            }
        };
        Spares {
            shared,
            maker: Mutex::new(maker),
        }
    }

    /// A made spill directory, if one is ready: it holds an empty `data` and an empty `log`.
    pub fn take(&self) -> Option<PathBuf> {
        let mut ready = self.shared.ready();
        let taken = ready.spares.pop_front();
        if taken.is_some() {
            ready.taken += 1;
            // Only when there is something to make: files written one after the other take
            // back their directories as fast as they take them, and waking the maker for
            // nothing was two of the daemon's 17 thread switches per small file.
            if !ready.stopped && ready.spares.len() < READY {
                self.shared.wake.notify_one();
            }
        }
        taken
    }

    /// Stops the maker and removes the spares left (a clean exit, a hand-off): the spill
    /// directory then holds only files' spills. Later `take`s find none.
    pub fn stop(&self) {
        for spare in self.halt() {
            remove_dir(&spare);
        }
    }

    pub fn recycler(&self) -> Recycler {
        Recycler(Arc::clone(&self.shared))
    }

    /// Stops the maker and leaves the spares where they are, as a SIGKILL would.
    #[cfg(test)]
    pub fn abandon(&self) {
        self.halt();
    }

    /// Stops the maker (waiting for it) and returns the spares it left, no longer ready.
    fn halt(&self) -> Vec<PathBuf> {
        self.shared.ready().stopped = true;
        self.shared.wake.notify_one();
        let maker = self
            .maker
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(maker) = maker {
            let _ = maker.join();
        }
        std::mem::take(&mut self.shared.ready().spares).into()
    }
}

impl Drop for Spares {
    fn drop(&mut self) {
        self.stop();
    }
}

impl Shared {
    fn ready(&self) -> MutexGuard<'_, Ready> {
        self.ready.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The maker's loop: tops the spares up to `READY`, sleeps until one is taken, and trims
    /// the spares beyond `READY` that went untaken for `TRIM_AFTER`.
    fn make_while_needed(&self) {
        let mut taken_at_last_look = 0;
        loop {
            let unneeded = {
                let mut ready = self.ready();
                loop {
                    if ready.stopped {
                        return;
                    }
                    if ready.spares.len() < READY {
                        break Vec::new();
                    }
                    let (woken, waited) = self
                        .wake
                        .wait_timeout(ready, self.trim_after)
                        .unwrap_or_else(PoisonError::into_inner);
                    ready = woken;
                    if !waited.timed_out() {
                        continue;
                    }
                    let untouched = ready.taken == taken_at_last_look;
                    taken_at_last_look = ready.taken;
                    if untouched && ready.spares.len() > READY {
                        // The oldest are taken first: keep those, they are the warmest.
                        break Vec::from(ready.spares.split_off(READY));
                    }
                }
            };
            if !unneeded.is_empty() {
                // Outside the lock: writes keep taking the kept ones meanwhile.
                unneeded.iter().for_each(|spare| remove_dir(spare));
                continue;
            }
            let number = self.numbers.fetch_add(1, Ordering::Relaxed);
            let dir = self.dir.join(number.to_string());
            match make(&dir) {
                Ok(()) => {
                    let mut ready = self.ready();
                    ready.spares.push_back(dir);
                    if ready.stopped {
                        return; // `stop` removes it
                    }
                }
                Err(e) => {
                    tracing::debug!(path = %dir.display(), error = %e,
                        "cannot make a spill directory ahead of need; retrying later");
                    let ready = self.ready();
                    if ready.stopped {
                        return;
                    }
                    let _ = self.wake.wait_timeout(ready, RETRY_AFTER);
                }
            }
        }
    }
}

impl Recycler {
    /// Takes back the spill directory of `log`, a file committed clean whose last descriptor
    /// of the data is `data`, as a spare: emptied, log first (from then on recovery drops it
    /// as torn, whatever `data` still holds). `false`, having changed nothing or only emptied
    /// the log, when not taken (enough spares, the maker stopped, an error): then the caller
    /// removes it.
    pub fn recycle(&self, log: &mut SpillLog, data: File) -> bool {
        let wanted = {
            let ready = self.0.ready();
            !ready.stopped && ready.spares.len() < KEPT
        };
        let emptied = wanted && log.empty().and_then(|()| data.set_len(0)).is_ok();
        if !emptied {
            return false;
        }
        let mut ready = self.0.ready();
        if ready.stopped || ready.spares.len() >= KEPT {
            return false;
        }
        ready.spares.push_back(log.dir().to_path_buf());
        true
    }
}

/// Makes `dir` with an empty `data` and an empty `log`; on failure, leaves nothing.
pub(super) fn make(dir: &Path) -> io::Result<()> {
    std::fs::create_dir(dir).map_err(|e| at(dir, e))?;
    let made = [DATA, LOG].into_iter().try_for_each(|name| {
        let path = dir.join(name);
        File::options()
            .write(true)
            .create_new(true)
            .open(&path)
            .map(drop)
            .map_err(|e| at(&path, e))
    });
    if made.is_err() {
        let _ = std::fs::remove_dir_all(dir);
    }
    made
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::write::durable::OpenLogs;

    /// The directories in `dir`, by number.
    fn made(dir: &Path) -> Vec<u64> {
        let mut numbers: Vec<u64> = std::fs::read_dir(dir)
            .expect("list")
            .flatten()
            .filter_map(|e| e.file_name().to_str()?.parse().ok())
            .collect();
        numbers.sort_unstable();
        numbers
    }

    /// The log of spill directory `dir`, opened per record (no descriptor kept).
    fn log_of(dir: &Path) -> SpillLog {
        SpillLog::new(dir.to_path_buf(), 0, &OpenLogs::with_limit(0))
    }

    fn until(what: &str, done: impl Fn() -> bool) {
        for _ in 0..3000 {
            if done() {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        panic!("timed out waiting until {what}");
    }

    #[test]
    fn spares_are_kept_made_taken_once_each_and_removed_at_stop() {
        let dir = tempfile::tempdir().expect("dir");
        let numbers = Arc::new(AtomicU64::new(1));
        let spares = Spares::start(dir.path(), Arc::clone(&numbers));
        // A directory shows before its files: made means both are there.
        let whole = |number: &u64| {
            let spare = dir.path().join(number.to_string());
            spare.join(DATA).exists() && spare.join(LOG).exists()
        };
        until("the spares are made", || {
            let made = made(dir.path());
            made.len() == READY && made.iter().all(whole)
        });
        for number in made(dir.path()) {
            let spare = dir.path().join(number.to_string());
            for name in [DATA, LOG] {
                let meta = std::fs::metadata(spare.join(name)).expect("spare file");
                assert_eq!(meta.len(), 0, "{name} of a spare is empty");
            }
        }

        let number = |dir: PathBuf| -> u64 {
            dir.file_name()
                .and_then(|n| n.to_str()?.parse().ok())
                .expect("a number")
        };
        let mut taken = vec![number(spares.take().expect("a spare is ready"))];
        until("the taken spare is replaced", || {
            made(dir.path()).len() == READY + 1
        });
        for _ in 0..READY * 2 {
            if let Some(spare) = spares.take() {
                let n = number(spare);
                assert!(!taken.contains(&n), "{n} was taken twice");
                taken.push(n);
            }
        }
        // Numbers come from the engine's counter: none is given out twice.
        let next = numbers.load(Ordering::Relaxed);
        assert!(made(dir.path()).iter().all(|n| *n < next));

        spares.stop();
        taken.sort_unstable();
        assert_eq!(
            made(dir.path()),
            taken,
            "only the taken ones are left after stop"
        );
        assert_eq!(spares.take(), None, "none after stop");
    }

    #[test]
    fn a_committed_files_directory_is_emptied_and_taken_back_until_the_maker_stops() {
        let dir = tempfile::tempdir().expect("dir");
        let spares = Spares::start(dir.path(), Arc::new(AtomicU64::new(1)));
        until("a spare is made", || made(dir.path()).len() == READY);
        let used = spares.take().expect("a spare");
        let fill = |spare: &Path| {
            let data = File::options()
                .read(true)
                .write(true)
                .open(spare.join(DATA))
                .expect("data");
            std::fs::write(spare.join(LOG), b"a header and records").expect("log");
            std::io::Write::write_all(&mut &data, b"a file's bytes").expect("bytes");
            data
        };

        let data = fill(&used);
        assert!(
            spares.recycler().recycle(&mut log_of(&used), data),
            "taken back"
        );
        for name in [DATA, LOG] {
            let len = std::fs::metadata(used.join(name)).expect("kept").len();
            assert_eq!(len, 0, "{name} emptied");
        }
        assert!(
            spares.shared.ready().spares.contains(&used),
            "a spare again"
        );

        spares.stop();
        assert!(!used.exists(), "removed with the other spares at stop");
        let late = dir.path().join("late");
        make(&late).expect("make");
        let data = fill(&late);
        assert!(
            !spares.recycler().recycle(&mut log_of(&late), data),
            "not taken back once stopped (the caller removes it)"
        );
        let log = std::fs::read(late.join(LOG)).expect("log");
        assert_eq!(log, b"a header and records", "and left as it was");
    }

    #[test]
    fn a_bursts_directories_serve_the_next_burst_and_are_trimmed_once_unneeded() {
        let dir = tempfile::tempdir().expect("dir");
        let trim_after = Duration::from_secs(1);
        let spares =
            Spares::start_trimming_after(dir.path(), Arc::new(AtomicU64::new(1)), trim_after);
        until("the spares are made", || made(dir.path()).len() == READY);
        // A burst: more files at once than spares are kept made. Writers make their own when
        // none is ready, as `durable` does.
        let burst = 3 * READY;
        let used: Vec<PathBuf> = (0..burst)
            .map(|i| {
                spares.take().unwrap_or_else(|| {
                    let own = dir.path().join(format!("own-{i}"));
                    make(&own).expect("make");
                    own
                })
            })
            .collect();
        // Their files committed clean: each directory taken back.
        let take_back = |dirs: &[PathBuf]| {
            for dir in dirs {
                let data = File::options()
                    .write(true)
                    .open(dir.join(DATA))
                    .expect("data");
                assert!(
                    spares.recycler().recycle(&mut log_of(dir), data),
                    "taken back"
                );
            }
        };
        take_back(&used);
        let kept = spares.shared.ready().spares.len();
        assert!(kept > READY, "the burst's directories are kept ({kept})");
        // The next burst takes them rather than new ones.
        let again: Vec<PathBuf> = (0..burst).filter_map(|_| spares.take()).collect();
        assert!(
            again.len() > READY,
            "the second burst found {} spares",
            again.len()
        );
        take_back(&again);
        until("the unneeded spares are removed", || {
            spares.shared.ready().spares.len() == READY
        });
        until("and gone from the disk", || {
            std::fs::read_dir(dir.path()).expect("list").count() == READY
        });
        spares.stop();
        assert_eq!(std::fs::read_dir(dir.path()).expect("list").count(), 0);
    }
}
