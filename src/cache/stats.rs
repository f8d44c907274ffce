//! The line cache's counters: lock-free atomics bumped on the read path, read as one snapshot.

use std::sync::atomic::{AtomicU64, Ordering};

/// A snapshot of the cache's counters since it was created. Counts are per line lookup unless
/// said otherwise; a read spanning three lines makes three lookups.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CacheStats {
    /// Lookups that found the line clean.
    pub hits: u64,
    /// Lookups that found the line absent and started its fetch.
    pub misses: u64,
    /// Lookups that found the line being fetched and waited for that fetch.
    pub waits: u64,
    /// Read-ahead fetches started for sequential streams.
    pub prefetches: u64,
    /// Clean lines dropped to make room for others.
    pub evictions: u64,
    /// Line fetches that failed (each failure reaches every waiter of that line).
    pub fetch_failures: u64,
    /// Line segments served straight from the store, uncached: no slot could be had (every slot
    /// inbound or pinned), the object has no ETag, or a fetch was abandoned.
    pub uncached_reads: u64,
    /// Bytes returned to readers out of cache lines.
    pub bytes_from_cache: u64,
    /// Bytes received from the backend: line fetches plus uncached reads.
    pub bytes_from_backend: u64,
    /// Slots holding a line (clean, being fetched, or draining its last readers); at most the
    /// configured number of lines.
    pub lines_resident: u64,
}

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
}

/// Adds `n` to a counter. Relaxed: counters order nothing, they are only summed.
pub(super) fn bump(counter: &AtomicU64, n: u64) {
    counter.fetch_add(n, Ordering::Relaxed);
}

impl Counters {
    pub fn snapshot(&self, lines_resident: u64) -> CacheStats {
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
            lines_resident,
        }
    }
}
