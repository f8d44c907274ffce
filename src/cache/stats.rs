//! The line cache's counters: lock-free atomics bumped on the read path, read as one snapshot.
//! The cache publishes them by implementing telemetry's [`CacheStatsSource`]; telemetry owns
//! the snapshot's type, [`CacheStats`], so that it never needs to know [`LineCache`].

use std::sync::atomic::{AtomicU64, Ordering};

use super::LineCache;
use crate::telemetry::{CacheStats, CacheStatsSource};

#[derive(Debug, Default)]
pub(super) struct Counters {
    pub hits: AtomicU64,
    pub misses: AtomicU64,
    pub waits: AtomicU64,
    pub prefetches: AtomicU64,
    pub evictions: AtomicU64,
    pub fetch_failures: AtomicU64,
    pub uncached_reads: AtomicU64,
    pub bytes_from_cache: AtomicU64,
    pub bytes_from_backend: AtomicU64,
    /// Lines kept by an earlier process found at start (`cache_persistent`).
    pub lines_restored: AtomicU64,
    /// Restored lines whose bytes failed their checksum at first read.
    pub lines_rejected: AtomicU64,
    /// `cache_storage: tiered`: lines moved up to RAM, down to disk, and moves abandoned (the
    /// line changed or went meanwhile, or no room).
    pub promotions: AtomicU64,
    pub demotions: AtomicU64,
    pub migrations_abandoned: AtomicU64,
}

/// Adds `n` to a counter. Relaxed: counters order nothing, they are only summed.
pub(super) fn bump(counter: &AtomicU64, n: u64) {
    counter.fetch_add(n, Ordering::Relaxed);
}

impl Counters {
    /// The counters; the occupancy fields are left for the cache to fill.
    pub fn snapshot(&self) -> CacheStats {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        CacheStats {
            hits: get(&self.hits),
            misses: get(&self.misses),
            waits: get(&self.waits),
            prefetches: get(&self.prefetches),
            evictions: get(&self.evictions),
            fetch_failures: get(&self.fetch_failures),
            uncached_reads: get(&self.uncached_reads),
            bytes_from_cache: get(&self.bytes_from_cache),
            bytes_from_backend: get(&self.bytes_from_backend),
            lines_restored: get(&self.lines_restored),
            lines_rejected: get(&self.lines_rejected),
            promotions: get(&self.promotions),
            demotions: get(&self.demotions),
            migrations_abandoned: get(&self.migrations_abandoned),
            ..CacheStats::default()
        }
    }
}

impl CacheStatsSource for LineCache {
    fn cache_stats(&self) -> CacheStats {
        self.stats()
    }
}
