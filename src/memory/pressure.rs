//! What the process does when it is over its target anyway (the plan is an estimate: inodes and
//! listings vary in size, the allocator keeps freed pages): a thread reads the process's
//! anonymous resident memory (`RssAnon`: heap, stacks, a RAM cache; not the code or the page
//! cache of the cache and spill files, which the kernel reclaims itself) a few times a second.
//! Over the target, every mount's inode share is halved, so the evictors drop idle and least
//! recently used entries and listings hand out bare names sooner, and the allocator gives
//! freed pages back; below seven eighths of it, the shares are restored. New work that needs
//! memory meanwhile waits where it always does (commits for write-buffer room).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use super::InodePool;

/// How often the resident memory is read (a read of `/proc/self/status` costs microseconds).
const EVERY: Duration = Duration::from_millis(250);

/// Whether the process is under pressure after reading `anon` bytes, given whether it was:
/// over `target` it is; it stays so until it is back under seven eighths of it, so that the
/// shares do not flap around the target.
pub fn pressed(anon: u64, target: u64, was: bool) -> bool {
    match was {
        false => anon > target,
        true => anon > target - target / 8,
    }
}

/// Episodes of pressure since the start, for the gauges.
#[derive(Debug, Default)]
pub struct Episodes(AtomicU64);

impl Episodes {
    pub fn count(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// Starts the watcher of a process with `target` bytes; it runs as long as the process.
pub fn watch(target: u64, pool: Arc<InodePool>, episodes: Arc<Episodes>) {
    if target == u64::MAX {
        return;
    }
    let started = std::thread::Builder::new()
        .name("msfs-memory".into())
        .spawn(move || {
            let mut was = false;
            loop {
                std::thread::sleep(EVERY);
                let Some(anon) = anonymous_resident() else {
                    return;
                };
                let now = pressed(anon, target, was);
                if now != was {
                    pool.set_pressed(now);
                    if now {
                        episodes.0.fetch_add(1, Ordering::Relaxed);
                        crate::malloc::trim();
                        tracing::warn!(
                            anon_bytes = anon,
                            target_bytes = target,
                            "over the memory target: inode shares halved until back under it"
                        );
                    } else {
                        tracing::info!(anon_bytes = anon, "back under the memory target");
                    }
                }
                was = now;
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
    fn pressure_starts_over_the_target_and_ends_well_under_it() {
        let target = 800;
        assert!(!pressed(800, target, false));
        assert!(pressed(801, target, false));
        assert!(pressed(701, target, true), "still over seven eighths");
        assert!(!pressed(700, target, true));
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
