//! The load itself: readers over the seeded volumes and writers in their own directories (and,
//! if asked, workers that hold their descriptors for the whole run), all running until the
//! deadline while the sampler watches the daemon — with a watchdog, because a hung mount would
//! otherwise hang the test instead of failing it.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::time::{Duration, Instant};

use super::content::Volume;
use super::rng::Rng;
use super::sampler::{self, Sample, Sampler};
use super::tally::Tally;
use super::writer::Model;
use super::{held, reader, writer};

const READERS: usize = 8;
/// How long after the deadline the workers may take to finish their last operation (a 40 MiB
/// file waiting for the dirty budget, say) and their final check. Generous: it only exists to
/// turn a hang into a failure.
const GRACE: Duration = Duration::from_secs(300);
/// The longest time between samples; short runs sample more often to get a curve at all.
const MAX_SAMPLE_INTERVAL: Duration = Duration::from_secs(5);

pub struct Load {
    /// What the readers read.
    pub volumes: Vec<Volume>,
    /// One writer per directory (which must not exist yet; the writer creates it). The readers
    /// list them too.
    pub writer_dirs: Vec<PathBuf>,
    /// How many held readers (`held.rs`) read all the volumes through descriptors opened once.
    pub held_readers: usize,
    /// One held writer per directory (created by it, as for `writer_dirs`).
    pub held_writer_dirs: Vec<PathBuf>,
    /// The process to sample.
    pub pid: u32,
    pub duration: Duration,
    pub seed: u64,
}

pub struct Outcome {
    /// The process sampled.
    pub pid: u32,
    /// When the load began (samples count from here), and for how long it ran.
    pub started: Instant,
    pub duration: Duration,
    /// The process just before the load began.
    pub before: Sample,
    pub tally: Arc<Tally>,
    /// What each writer's directory must hold, in `writer_dirs` order.
    pub models: Vec<Model>,
    /// What each held writer's directory must hold, in `held_writer_dirs` order.
    pub held_models: Vec<Model>,
    pub samples: Vec<Sample>,
}

enum Done {
    Reader,
    Writer(usize, Model),
    HeldWriter(usize, Model),
}

pub fn run(load: Load) -> Outcome {
    let started = Instant::now();
    let tally = Arc::new(Tally::new(started + load.duration));
    let before = sampler::sample(load.pid, started, None).expect("sample the daemon");
    let interval = (load.duration / 12).clamp(Duration::from_secs(1), MAX_SAMPLE_INTERVAL);
    let sampler = Sampler::start(load.pid, interval, started, tally.clone());
    let volumes = Arc::new(load.volumes);
    let (done, finished) = mpsc::channel();
    let mut running = Vec::new();
    let mut busy_dirs = load.writer_dirs.clone();
    busy_dirs.extend(load.held_writer_dirs.iter().cloned());
    let busy_dirs = Arc::new(busy_dirs);
    for r in 0..READERS {
        let (volumes, busy_dirs) = (volumes.clone(), busy_dirs.clone());
        let (tally, done) = (tally.clone(), done.clone());
        let rng = Rng::for_worker(load.seed, r as u64);
        running.push(spawn(format!("soak-reader-{r}"), move || {
            reader::run(&volumes, &busy_dirs, &tally, rng);
            let _ = done.send(Done::Reader);
        }));
    }
    for (w, dir) in load.writer_dirs.into_iter().enumerate() {
        let (tally, done) = (tally.clone(), done.clone());
        let rng = Rng::for_worker(load.seed, 1000 + w as u64);
        running.push(spawn(format!("soak-writer-{w}"), move || {
            let model = writer::run(dir, &tally, rng);
            let _ = done.send(Done::Writer(w, model));
        }));
    }
    for r in 0..load.held_readers {
        let volumes = volumes.clone();
        let (tally, done) = (tally.clone(), done.clone());
        let rng = Rng::for_worker(load.seed, 2000 + r as u64);
        running.push(spawn(format!("soak-held-reader-{r}"), move || {
            held::reader(&volumes, &tally, rng);
            let _ = done.send(Done::Reader);
        }));
    }
    for (w, dir) in load.held_writer_dirs.into_iter().enumerate() {
        let (tally, done) = (tally.clone(), done.clone());
        let rng = Rng::for_worker(load.seed, 3000 + w as u64);
        running.push(spawn(format!("soak-held-writer-{w}"), move || {
            let model = held::writer(dir, &tally, rng);
            let _ = done.send(Done::HeldWriter(w, model));
        }));
    }
    drop(done);

    let mut models = Vec::new();
    let mut held_models = Vec::new();
    let deadline = started + load.duration + GRACE;
    for _ in 0..running.len() {
        match finished.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            Ok(Done::Reader) => {}
            Ok(Done::Writer(w, model)) => models.push((w, model)),
            Ok(Done::HeldWriter(w, model)) => held_models.push((w, model)),
            Err(e) => {
                tally.stop();
                let why = match e {
                    RecvTimeoutError::Timeout => {
                        let stuck: Vec<&str> = running
                            .iter()
                            .filter(|t| !t.is_finished())
                            .filter_map(|t| t.thread().name())
                            .collect();
                        format!("soak workers {stuck:?} still running {GRACE:?} after the end")
                    }
                    RecvTimeoutError::Disconnected => {
                        "a soak worker panicked (its message is above)".to_string()
                    }
                };
                panic!("{why}\n{}", tally.problems());
            }
        }
    }
    for thread in running {
        thread.join().expect("a worker panicked after reporting");
    }
    models.sort_by_key(|(w, _)| *w);
    held_models.sort_by_key(|(w, _)| *w);
    Outcome {
        pid: load.pid,
        started,
        duration: load.duration,
        before,
        tally,
        models: models.into_iter().map(|(_, m)| m).collect(),
        held_models: held_models.into_iter().map(|(_, m)| m).collect(),
        samples: sampler.finish(),
    }
}

fn spawn(name: String, work: impl FnOnce() + Send + 'static) -> std::thread::JoinHandle<()> {
    std::thread::Builder::new()
        .name(name)
        .spawn(work)
        .expect("spawn a soak worker")
}
