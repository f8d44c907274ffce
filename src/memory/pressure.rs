//! What the process does when it nears or passes its target (the plan is an estimate: inodes
//! and listings vary in size, the allocator keeps freed pages): a thread reads the process's
//! anonymous resident memory (`RssAnon`: heap, stacks, a RAM cache; not the code or the page
//! cache of the cache and spill files, which the kernel reclaims itself) a few times a second
//! and sets a [`Stage`] every holder reads.
//!
//! Past three quarters of the target read-ahead windows are halved. Over it, the holders give
//! back in order, a stage per reading while the process stays over: first read-ahead stops and
//! the RAM cache gives back clean lines ([`Shed`]), which cost a refetch at worst; then every
//! mount's inode share is halved too, so the evictors drop idle entries and listings hand out
//! bare names sooner; last, new work that would allocate (a fetch of an absent line, a commit's
//! buffer) waits ([`Pressure::admit`]). A wait never ends in an error: it ends when the stage
//! drops, or after two more readings, so that memory nobody can give back (the allocator's
//! slack, the kernel's) slows new work down rather than stopping it. Below seven eighths of the
//! target everything is restored.

use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

use tokio::sync::watch;

use super::InodePool;

/// How often the resident memory is read (a read of `/proc/self/status` costs microseconds).
const EVERY: Duration = Duration::from_millis(250);

/// Readings a waiter waits at most for the stage to drop (see the module doc).
const WAIT_READINGS: u64 = 2;

/// How hard the process is pressed, from least to most; each stage does what the ones below
/// it do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Stage {
    Calm = 0,
    /// Past three quarters of the target: read-ahead windows are halved.
    Near = 1,
    /// Over it: no read-ahead, and the RAM cache gives back clean lines at each reading.
    Shed = 2,
    /// Still over: every mount's inode share is halved.
    Inodes = 3,
    /// Still over: new fetches and commits wait for the stage to drop.
    Wait = 4,
}

impl Stage {
    fn from_u8(v: u8) -> Stage {
        match v {
            0 => Stage::Calm,
            1 => Stage::Near,
            2 => Stage::Shed,
            3 => Stage::Inodes,
            _ => Stage::Wait,
        }
    }
}

/// The stage after reading `anon` bytes against `target` in stage `was`: over the target it
/// climbs one stage per reading; between seven eighths of the target and the target a pressed
/// process stays where it is (so that the holders do not flap around the target); below that,
/// `Near` past three quarters, else `Calm`.
pub fn next(was: Stage, anon: u64, target: u64) -> Stage {
    if anon > target {
        return match was {
            Stage::Calm | Stage::Near => Stage::Shed,
            Stage::Shed => Stage::Inodes,
            Stage::Inodes | Stage::Wait => Stage::Wait,
        };
    }
    if was >= Stage::Shed && anon > target - target / 8 {
        return was;
    }
    if anon > target - target / 4 {
        Stage::Near
    } else {
        Stage::Calm
    }
}

/// The read-ahead window, in lines, of a reader asking for `lines` in `stage`.
pub fn read_ahead_lines(stage: Stage, lines: u64) -> u64 {
    match stage {
        Stage::Calm => lines,
        Stage::Near => lines / 2,
        Stage::Shed | Stage::Inodes | Stage::Wait => 0,
    }
}

/// A holder that can give memory back when asked (the RAM cache's clean lines).
pub trait Shed: Send + Sync {
    /// Gives back some of what it holds and can do without; returns the bytes given back.
    fn shed(&self) -> u64;
}

/// The process's pressure: its stage, and what it cost, shared by the watcher and the holders.
#[derive(Debug)]
pub struct Pressure {
    stage: AtomicU8,
    /// (stage, readings so far), for waiters.
    readings: watch::Sender<(Stage, u64)>,
    /// Times the process went over its target.
    episodes: AtomicU64,
    /// Times new work waited for the stage to drop.
    waits: AtomicU64,
    /// Bytes holders gave back.
    shed: AtomicU64,
    holders: Mutex<Vec<Weak<dyn Shed>>>,
}

impl Default for Pressure {
    fn default() -> Pressure {
        Pressure {
            stage: AtomicU8::new(Stage::Calm as u8),
            readings: watch::Sender::new((Stage::Calm, 0)),
            episodes: AtomicU64::new(0),
            waits: AtomicU64::new(0),
            shed: AtomicU64::new(0),
            holders: Mutex::new(Vec::new()),
        }
    }
}

impl Pressure {
    pub fn stage(&self) -> Stage {
        Stage::from_u8(self.stage.load(Ordering::Relaxed))
    }

    /// Asks `holder` to give memory back when the process is over its target; held weakly.
    pub fn add_holder(&self, holder: Weak<dyn Shed>) {
        self.holders
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(holder);
    }

    /// Before new work that allocates: in [`Stage::Wait`], waits until the stage drops, or at
    /// most [`WAIT_READINGS`] readings (counted as one wait). At once otherwise.
    pub async fn admit(&self) {
        if self.stage() < Stage::Wait {
            return;
        }
        let mut readings = self.readings.subscribe();
        let start = readings.borrow().1;
        self.waits.fetch_add(1, Ordering::Relaxed);
        let _ = readings
            .wait_for(|(stage, n)| *stage < Stage::Wait || *n >= start + WAIT_READINGS)
            .await;
    }

    /// Times the process went over its target.
    pub fn episodes(&self) -> u64 {
        self.episodes.load(Ordering::Relaxed)
    }

    /// Times new work waited in [`Pressure::admit`].
    pub fn waits(&self) -> u64 {
        self.waits.load(Ordering::Relaxed)
    }

    /// Bytes the holders gave back.
    pub fn shed_bytes(&self) -> u64 {
        self.shed.load(Ordering::Relaxed)
    }

    /// One reading of `anon` bytes against `target`: sets the stage and acts on it (see the
    /// module doc); returns the new stage.
    pub fn reading(&self, anon: u64, target: u64, pool: &InodePool) -> Stage {
        let was = self.stage();
        let now = next(was, anon, target);
        self.stage.store(now as u8, Ordering::Relaxed);
        if was < Stage::Shed && now >= Stage::Shed {
            self.episodes.fetch_add(1, Ordering::Relaxed);
        }
        if anon > target {
            // Given back at every reading over the target, not only on entry: what the cache
            // holds again meanwhile is the first to go again.
            let shed: u64 = self.live_holders().iter().map(|h| h.shed()).sum();
            self.shed.fetch_add(shed, Ordering::Relaxed);
            crate::malloc::trim();
        }
        pool.set_pressed(now >= Stage::Inodes);
        self.readings.send_modify(|(stage, n)| {
            *stage = now;
            *n += 1;
        });
        now
    }

    fn live_holders(&self) -> Vec<Arc<dyn Shed>> {
        let mut holders = self.holders.lock().unwrap_or_else(PoisonError::into_inner);
        holders.retain(|h| h.strong_count() > 0);
        holders.iter().filter_map(Weak::upgrade).collect()
    }
}

/// Starts the watcher of a process with `target` bytes; it runs as long as the process.
pub fn watch(target: u64, pool: Arc<InodePool>, pressure: Arc<Pressure>) {
    if target == u64::MAX {
        return;
    }
    let started = std::thread::Builder::new()
        .name("msfs-memory".into())
        .spawn(move || {
            loop {
                std::thread::sleep(EVERY);
                let Some(anon) = anonymous_resident() else {
                    return;
                };
                let was = pressure.stage();
                let now = pressure.reading(anon, target, &pool);
                if now > was && now >= Stage::Shed {
                    tracing::warn!(
                        anon_bytes = anon,
                        target_bytes = target,
                        stage = ?now,
                        "over the memory target: {}",
                        match now {
                            Stage::Shed => "no read-ahead, the RAM cache gives back lines",
                            Stage::Inodes => "inode shares halved",
                            _ => "new fetches and commits wait",
                        }
                    );
                } else if was >= Stage::Shed && now < Stage::Shed {
                    tracing::info!(anon_bytes = anon, "back under the memory target");
                }
            }
        });
    if let Err(e) = started {
        tracing::warn!(error = %e, "no memory watcher: the process is not held to its target");
    }
}

/// `RssAnon` of `/proc/self/status`, in bytes.
fn anonymous_resident() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    parse_rss_anon(&status)
}

fn parse_rss_anon(status: &str) -> Option<u64> {
    super::kib_field(status, "RssAnon")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn over_the_target_the_stages_climb_one_per_reading_cache_then_inodes_then_waits() {
        let target = 800;
        assert_eq!(next(Stage::Calm, 600, target), Stage::Calm);
        assert_eq!(next(Stage::Calm, 601, target), Stage::Near);
        assert_eq!(next(Stage::Near, 800, target), Stage::Near);
        let mut stage = Stage::Near;
        let mut seen = Vec::new();
        for _ in 0..4 {
            stage = next(stage, 801, target);
            seen.push(stage);
        }
        assert_eq!(
            seen,
            [Stage::Shed, Stage::Inodes, Stage::Wait, Stage::Wait],
            "cache lines first, then inodes, then new work waits"
        );
    }

    #[test]
    fn a_pressed_process_stays_pressed_until_seven_eighths_of_the_target() {
        let target = 800;
        assert_eq!(next(Stage::Wait, 701, target), Stage::Wait);
        assert_eq!(next(Stage::Inodes, 800, target), Stage::Inodes);
        assert_eq!(next(Stage::Wait, 700, target), Stage::Near);
        assert_eq!(next(Stage::Shed, 100, target), Stage::Calm);
    }

    #[test]
    fn read_ahead_halves_near_the_target_and_stops_over_it() {
        assert_eq!(read_ahead_lines(Stage::Calm, 16), 16);
        assert_eq!(read_ahead_lines(Stage::Near, 16), 8);
        for stage in [Stage::Shed, Stage::Inodes, Stage::Wait] {
            assert_eq!(read_ahead_lines(stage, 16), 0, "{stage:?}");
        }
    }

    struct Holder(AtomicU64);
    impl Shed for Holder {
        fn shed(&self) -> u64 {
            self.0.fetch_add(1, Ordering::Relaxed);
            10
        }
    }

    #[test]
    fn holders_shed_at_every_reading_over_the_target_and_inodes_halve_from_the_second() {
        let pressure = Pressure::default();
        let pool = InodePool::new(1000);
        let _mount = pool.join(usize::MAX);
        let holder = Arc::new(Holder(AtomicU64::new(0)));
        let weak: Weak<dyn Shed> = Arc::downgrade(&holder) as Weak<dyn Shed>;
        pressure.add_holder(weak);
        assert_eq!(pressure.reading(100, 800, &pool), Stage::Calm);
        assert_eq!(holder.0.load(Ordering::Relaxed), 0, "not asked when calm");
        assert_eq!(pressure.reading(900, 800, &pool), Stage::Shed);
        assert_eq!(holder.0.load(Ordering::Relaxed), 1);
        assert_eq!(pool.share(), 1000, "the cache gives back before the inodes");
        assert_eq!(pressure.reading(900, 800, &pool), Stage::Inodes);
        assert_eq!(pool.share(), 500);
        assert_eq!(pressure.reading(750, 800, &pool), Stage::Inodes);
        assert_eq!(holder.0.load(Ordering::Relaxed), 2, "in the band: kept");
        assert_eq!(pressure.shed_bytes(), 20);
        assert_eq!(pressure.episodes(), 1);
        assert_eq!(pressure.reading(100, 800, &pool), Stage::Calm);
        assert_eq!(pool.share(), 1000, "restored");
        drop(holder);
        pressure.reading(900, 800, &pool);
        assert_eq!(pressure.shed_bytes(), 20, "a dropped holder is not asked");
        assert_eq!(pressure.episodes(), 2);
    }

    #[tokio::test]
    async fn new_work_waits_only_in_the_last_stage_and_until_it_drops() {
        let pressure = Arc::new(Pressure::default());
        let pool = InodePool::new(1000);
        for _ in 0..2 {
            pressure.reading(900, 800, &pool);
        }
        pressure.admit().await;
        assert_eq!(pressure.waits(), 0, "inodes stage: no wait");
        pressure.reading(900, 800, &pool);
        let waiter = tokio::spawn({
            let pressure = pressure.clone();
            async move { pressure.admit().await }
        });
        // The waiter has counted its wait and subscribed once `waits` says so.
        while pressure.waits() == 0 {
            tokio::task::yield_now().await;
        }
        assert!(!waiter.is_finished());
        pressure.reading(100, 800, &pool);
        waiter.await.expect("the waiter ends once the stage drops");
    }

    #[tokio::test]
    async fn a_wait_ends_after_two_readings_even_if_still_over() {
        let pressure = Arc::new(Pressure::default());
        let pool = InodePool::new(1000);
        for _ in 0..3 {
            pressure.reading(900, 800, &pool);
        }
        let waiter = tokio::spawn({
            let pressure = pressure.clone();
            async move { pressure.admit().await }
        });
        while pressure.waits() == 0 {
            tokio::task::yield_now().await;
        }
        pressure.reading(900, 800, &pool);
        tokio::task::yield_now().await;
        assert!(!waiter.is_finished(), "one reading: still waiting");
        pressure.reading(900, 800, &pool);
        waiter
            .await
            .expect("ends after two readings, never an error");
        assert_eq!(pressure.stage(), Stage::Wait);
    }

    #[test]
    fn rss_anon_is_read_from_proc_status() {
        let status = "Name:\tmsfs\nVmRSS:\t  200000 kB\nRssAnon:\t   12345 kB\nRssFile:\t 1 kB\n";
        assert_eq!(parse_rss_anon(status), Some(12345 * 1024));
        assert_eq!(parse_rss_anon("Name:\tx\n"), None);
        assert!(
            anonymous_resident().is_some_and(|b| b > 0),
            "this process's own"
        );
    }
}
