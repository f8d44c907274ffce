//! The work queue of a manifest generation: directories still to list and key ranges of split
//! flat directories, shared by the lister tasks.
//!
//! **Bound.** Listers both take and add work, so a queue that blocks its producers when full
//! could deadlock (every lister waiting to add a sub-directory, none left to take one).
//! Instead, pending directories beyond [`MAX_PENDING_DIRS_IN_MEMORY`] spill to files in the
//! build directory, one escaped path per line, in chunks of at most that many, and are read
//! back a chunk at a time when memory runs dry (a chunk is read only into an empty memory
//! queue, so memory never holds more than that many paths). The spill uses disk in proportion
//! to the directory count, as the manifest itself does; its file I/O happens under the queue's
//! lock but only once per chunk of that many directories.
//!
//! Range jobs are taken before directories, so a new directory (which might be split in turn)
//! is started only when no split is waiting for listers: pending ranges never exceed the
//! ranges of the splits started by the listers in flight (at most `workers` × the ranges of
//! one split, plus a hinted directory's configured fan-out).

use std::collections::VecDeque;
use std::fs;
use std::io::{self, BufRead, BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use tokio::sync::Notify;

use super::format::{escape, unescape};

/// Directory paths held in memory before pending directories spill to disk.
pub const MAX_PENDING_DIRS_IN_MEMORY: usize = 65_536;

/// Pending directories: in memory up to a bound, then in spill files.
#[derive(Debug)]
pub(super) struct Frontier {
    memory: VecDeque<String>,
    capacity: usize,
    spill_dir: PathBuf,
    /// The chunk being filled: its writer, path and number of paths.
    filling: Option<(BufWriter<fs::File>, PathBuf, usize)>,
    /// Full chunks waiting to be read back.
    spilled: VecDeque<PathBuf>,
    next_file: u64,
    len: u64,
}

impl Frontier {
    pub fn new(spill_dir: PathBuf, capacity: usize) -> Frontier {
        Frontier {
            memory: VecDeque::new(),
            capacity: capacity.max(1),
            spill_dir,
            filling: None,
            spilled: VecDeque::new(),
            next_file: 0,
            len: 0,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn push(&mut self, dir: String) -> io::Result<()> {
        self.len += 1;
        if self.memory.len() < self.capacity {
            self.memory.push_back(dir);
            return Ok(());
        }
        if self.filling.is_none() {
            fs::create_dir_all(&self.spill_dir)?;
            let path = self.spill_dir.join(format!("{}.txt", self.next_file));
            self.next_file += 1;
            let file = BufWriter::new(fs::File::create(&path)?);
            self.filling = Some((file, path, 0));
        }
        let Some((file, _, count)) = self.filling.as_mut() else {
            unreachable!("created above");
        };
        // Escaped so a path holding a newline stays on its line.
        writeln!(file, "{}", escape(&dir))?;
        *count += 1;
        if *count >= self.capacity {
            self.seal()?;
        }
        Ok(())
    }

    pub fn pop(&mut self) -> io::Result<Option<String>> {
        if self.memory.is_empty() {
            if self.spilled.is_empty() {
                self.seal()?;
            }
            if let Some(path) = self.spilled.pop_front() {
                self.read_back(&path)?;
            }
        }
        let dir = self.memory.pop_front();
        if dir.is_some() {
            self.len -= 1;
        }
        Ok(dir)
    }

    /// Closes the chunk being filled, if any, and queues it for reading back.
    fn seal(&mut self) -> io::Result<()> {
        if let Some((mut file, path, _)) = self.filling.take() {
            file.flush()?;
            self.spilled.push_back(path);
        }
        Ok(())
    }

    fn read_back(&mut self, path: &Path) -> io::Result<()> {
        let reader = BufReader::new(fs::File::open(path)?);
        for line in reader.lines() {
            let line = line?;
            let dir = unescape(&line).map_err(io::Error::other)?.into_owned();
            self.memory.push_back(dir);
        }
        fs::remove_file(path)
    }
}

/// One unit of work for a lister.
#[derive(Debug)]
pub(super) enum Job<R> {
    /// List this directory ("" for the root, else "a/b").
    Dir(String),
    /// List one key range of a split directory.
    Range(R),
}

#[derive(Debug)]
struct State<R> {
    ranges: VecDeque<R>,
    dirs: Frontier,
    /// Jobs taken and not yet finished.
    active: usize,
    stopped: bool,
}

/// Hands jobs to the listers and tells them when everything is done: when no job is queued
/// and none is running (a running job may still add more).
#[derive(Debug)]
pub(super) struct Scheduler<R> {
    state: Mutex<State<R>>,
    wake: Notify,
}

impl<R> Scheduler<R> {
    pub fn new(dirs: Frontier) -> Scheduler<R> {
        Scheduler {
            state: Mutex::new(State {
                ranges: VecDeque::new(),
                dirs,
                active: 0,
                stopped: false,
            }),
            wake: Notify::new(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State<R>> {
        // A panicking lister cannot leave the queue half-updated: every change is one call.
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    pub fn push_dir(&self, dir: String) -> io::Result<()> {
        self.lock().dirs.push(dir)?;
        self.wake.notify_one();
        Ok(())
    }

    pub fn push_ranges(&self, ranges: impl IntoIterator<Item = R>) {
        let mut state = self.lock();
        let before = state.ranges.len();
        state.ranges.extend(ranges);
        let added = state.ranges.len() - before;
        drop(state);
        for _ in 0..added {
            self.wake.notify_one();
        }
    }

    /// How many of `workers` listers wait with nothing to do (0 while any job is queued).
    pub fn idle(&self, workers: usize) -> usize {
        let state = self.lock();
        if state.ranges.is_empty() && state.dirs.is_empty() {
            workers.saturating_sub(state.active)
        } else {
            0
        }
    }

    /// The next job, waiting while others run; `None` once all work is done or
    /// [`Scheduler::stop`] was called. Every job returned must be followed by
    /// [`Scheduler::finished`].
    pub async fn next(&self) -> io::Result<Option<Job<R>>> {
        loop {
            let notified = self.wake.notified();
            tokio::pin!(notified);
            // Registered before looking, so a wake-up between the look and the wait is kept.
            notified.as_mut().enable();
            {
                let mut state = self.lock();
                if state.stopped {
                    return Ok(None);
                }
                if let Some(range) = state.ranges.pop_front() {
                    state.active += 1;
                    return Ok(Some(Job::Range(range)));
                }
                if let Some(dir) = state.dirs.pop()? {
                    state.active += 1;
                    return Ok(Some(Job::Dir(dir)));
                }
                if state.active == 0 {
                    state.stopped = true;
                    drop(state);
                    self.wake.notify_waiters();
                    return Ok(None);
                }
            }
            notified.await;
        }
    }

    pub fn finished(&self) {
        let mut state = self.lock();
        state.active -= 1;
        let done = state.active == 0 && state.ranges.is_empty() && state.dirs.is_empty();
        drop(state);
        if done {
            self.wake.notify_waiters();
        }
    }

    /// Makes every lister's next call to [`Scheduler::next`] return `None` (after an error).
    pub fn stop(&self) {
        self.lock().stopped = true;
        self.wake.notify_waiters();
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;
    use std::sync::Arc;

    use super::*;

    #[test]
    fn a_frontier_spills_past_its_bound_and_loses_nothing() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut frontier = Frontier::new(dir.path().join("spill"), 4);
        let mut expected = BTreeSet::new();
        for i in 0..23 {
            let name = format!("d{i}\nline\\{i}");
            expected.insert(name.clone());
            frontier.push(name).expect("push");
            assert!(frontier.memory.len() <= 4);
        }
        assert_eq!(frontier.len, 23);
        let mut seen = BTreeSet::new();
        // Interleave pushes and pops as listers do.
        for i in 0..5 {
            seen.insert(frontier.pop().expect("pop").expect("one"));
            let name = format!("late{i}");
            expected.insert(name.clone());
            frontier.push(name).expect("push");
        }
        while let Some(dir) = frontier.pop().expect("pop") {
            assert!(frontier.memory.len() <= 4);
            assert!(seen.insert(dir.clone()), "{dir:?} popped twice");
        }
        assert_eq!(seen, expected);
        assert!(frontier.is_empty());
        let left: Vec<_> = fs::read_dir(dir.path().join("spill"))
            .expect("spill dir")
            .collect();
        assert!(left.is_empty(), "spill files left: {left:?}");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn listers_finish_when_no_job_is_queued_or_running() {
        let dir = tempfile::tempdir().expect("tempdir");
        let scheduler: Arc<Scheduler<u32>> =
            Arc::new(Scheduler::new(Frontier::new(dir.path().join("q"), 8)));
        scheduler.push_dir(String::new()).expect("push");
        let taken = Arc::new(Mutex::new(Vec::new()));
        let mut tasks = tokio::task::JoinSet::new();
        for _ in 0..6 {
            let scheduler = scheduler.clone();
            let taken = taken.clone();
            tasks.spawn(async move {
                while let Some(job) = scheduler.next().await.expect("next") {
                    match job {
                        // Each directory up to depth 3 has three sub-directories and one range.
                        Job::Dir(path) => {
                            let depth = path.matches('/').count() + usize::from(!path.is_empty());
                            if depth < 3 {
                                for i in 0..3 {
                                    let child = if path.is_empty() {
                                        format!("{i}")
                                    } else {
                                        format!("{path}/{i}")
                                    };
                                    scheduler.push_dir(child).expect("push");
                                }
                                scheduler.push_ranges([depth as u32]);
                            }
                            taken.lock().expect("taken").push(path);
                        }
                        Job::Range(_) => tokio::task::yield_now().await,
                    }
                    scheduler.finished();
                }
            });
        }
        while let Some(result) = tasks.join_next().await {
            result.expect("lister");
        }
        // 1 + 3 + 9 + 27 directories, each taken once.
        let taken = taken.lock().expect("taken");
        assert_eq!(taken.len(), 40);
        assert_eq!(taken.iter().collect::<BTreeSet<_>>().len(), 40);
    }
}
