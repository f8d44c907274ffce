//! Observable instruments over counters an engine already keeps itself, read at each collection
//! instead of being counted twice.

use std::sync::Arc;

use opentelemetry::KeyValue;
use opentelemetry::metrics::Meter;

use super::names;

/// Instruments kept alive for as long as the registry (dropping one may unregister its
/// callback, depending on the SDK version).
pub(crate) type Registration = Box<dyn std::any::Any + Send + Sync>;

/// How a cache publishes its numbers: the line cache implements it, so telemetry, the layer
/// below every engine, never names the cache's type.
pub trait CacheStatsSource: Send + Sync {
    /// The numbers now; called at every collection.
    fn cache_stats(&self) -> CacheStats;
}

/// A snapshot of a cache's counters since it was created, and of its occupancy. Counts are per
/// line lookup unless said otherwise; a read spanning three lines makes three lookups.
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
    /// Lines kept by an earlier process (`cache_persistent`) put back at start.
    pub lines_restored: u64,
    /// Restored lines whose bytes failed their checksum at first read, and were fetched again.
    pub lines_rejected: u64,
    /// `cache_storage: tiered`: lookups that found their line clean in the RAM tier (the main
    /// tier's hits are `hits` minus these).
    pub ram_hits: u64,
    /// Lines moved up to the RAM tier, down to the disk tier, and moves abandoned.
    pub promotions: u64,
    pub demotions: u64,
    pub migrations_abandoned: u64,
    /// RAM-tier slots holding a line, and the RAM tier's size in lines (0 untiered); of
    /// `lines_resident` and `lines_capacity`, the rest is the disk tier's.
    pub ram_lines_resident: u64,
    pub ram_lines_capacity: u64,
    /// Slots holding a line (clean, being fetched, or draining its last readers); at most
    /// `lines_capacity`.
    pub lines_resident: u64,
    /// The configured number of lines.
    pub lines_capacity: u64,
    /// Bytes per line.
    pub line_size: u64,
}

/// A cache's counters and occupancy, from [`CacheStatsSource::cache_stats`] at every collection.
pub(crate) fn observe_cache(meter: &Meter, cache: Arc<dyn CacheStatsSource>) -> Vec<Registration> {
    type Stat = fn(&CacheStats) -> u64;
    let counters: [(&'static str, &'static str, Stat); 15] = [
        (names::CACHE_HITS, "Cache lines found clean", |s| s.hits),
        (
            names::CACHE_MISSES,
            "Cache lines that had to be fetched",
            |s| s.misses,
        ),
        (
            names::CACHE_WAITS,
            "Reads that waited for a line already being fetched",
            |s| s.waits,
        ),
        (names::CACHE_PREFETCHES, "Read-ahead fetches started", |s| {
            s.prefetches
        }),
        (
            names::CACHE_EVICTIONS,
            "Clean lines evicted to make room",
            |s| s.evictions,
        ),
        (
            names::CACHE_FETCH_FAILURES,
            "Line fetches that failed",
            |s| s.fetch_failures,
        ),
        (
            names::CACHE_UNCACHED_READS,
            "Reads served straight from the store because no line could be used",
            |s| s.uncached_reads,
        ),
        (
            names::CACHE_BYTES_FROM_CACHE,
            "Bytes served from cached lines",
            |s| s.bytes_from_cache,
        ),
        (
            names::CACHE_BYTES_FROM_BACKEND,
            "Bytes fetched from object stores into the cache",
            |s| s.bytes_from_backend,
        ),
        (
            names::CACHE_LINES_RESTORED,
            "Cache lines kept by an earlier process, found at start",
            |s| s.lines_restored,
        ),
        (
            names::CACHE_LINES_REJECTED,
            "Restored cache lines that failed their checksum and were fetched again",
            |s| s.lines_rejected,
        ),
        (
            names::CACHE_RAM_HITS,
            "Cache lines found clean in the RAM tier (cache_storage: tiered)",
            |s| s.ram_hits,
        ),
        (
            names::CACHE_PROMOTIONS,
            "Cache lines moved up from the disk tier to the RAM tier",
            |s| s.promotions,
        ),
        (
            names::CACHE_DEMOTIONS,
            "Cache lines moved down from the RAM tier to the disk tier instead of dropped",
            |s| s.demotions,
        ),
        (
            names::CACHE_MIGRATIONS_ABANDONED,
            "Moves between cache tiers given up (the line changed or went, or no room)",
            |s| s.migrations_abandoned,
        ),
    ];
    let gauges: [(&'static str, &'static str, Stat); 6] = [
        (
            names::CACHE_LINES_RESIDENT,
            "Lines holding data (clean, being fetched or draining)",
            |s| s.lines_resident,
        ),
        (
            names::CACHE_BYTES_RESIDENT,
            "Bytes of cache capacity in use: resident lines times the line size",
            |s| s.lines_resident.saturating_mul(s.line_size),
        ),
        (
            names::CACHE_LINES_CAPACITY,
            "Lines the cache may hold",
            |s| s.lines_capacity,
        ),
        (names::CACHE_LINE_SIZE_BYTES, "Bytes per cache line", |s| {
            s.line_size
        }),
        (
            names::CACHE_RAM_LINES_RESIDENT,
            "Lines held by the RAM tier (of msfs.cache.lines_resident)",
            |s| s.ram_lines_resident,
        ),
        (
            names::CACHE_RAM_LINES_CAPACITY,
            "Lines the RAM tier may hold (of msfs.cache.lines_capacity; 0 untiered)",
            |s| s.ram_lines_capacity,
        ),
    ];
    let mut kept: Vec<Registration> = Vec::new();
    for (name, help, read) in counters {
        let cache = cache.clone();
        kept.push(Box::new(
            meter
                .u64_observable_counter(name)
                .with_description(help)
                .with_unit(names::unit(name))
                .with_callback(move |observer| observer.observe(read(&cache.cache_stats()), &[]))
                .build(),
        ));
    }
    for (name, help, read) in gauges {
        let cache = cache.clone();
        kept.push(Box::new(
            meter
                .u64_observable_gauge(name)
                .with_description(help)
                .with_unit(names::unit(name))
                .with_callback(move |observer| observer.observe(read(&cache.cache_stats()), &[]))
                .build(),
        ));
    }
    kept
}

/// How the process publishes its memory target and holders (see [`MemoryStats`]).
pub trait MemoryStatsSource: Send + Sync {
    fn memory_stats(&self) -> MemoryStats;
}

/// The memory target and what holds memory under it, in bytes unless said otherwise.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MemoryStats {
    pub target: u64,
    /// Anonymous memory filled by the line cache (a file-backed cache's is page cache: 0).
    pub cache: u64,
    /// Bytes commits in flight hold.
    pub write_buffers: u64,
    /// Inodes of every mount, at their estimated size.
    pub inodes: u64,
    /// The process's resident set.
    pub resident: u64,
    /// Inodes each mount may hold now (a count).
    pub inode_limit_per_mount: u64,
    /// Times new work waited for memory (a count, since start).
    pub waits: u64,
    /// Times the process went over its target (a count, since start).
    pub over_target: u64,
    /// How pressed the process is now: 0 calm, 1 near the target, 2 over it (read-ahead
    /// stopped, cache lines given back), 3 inode shares halved too, 4 new work waits.
    pub stage: u64,
    /// Bytes of cache lines given back under pressure (since start).
    pub shed: u64,
}

/// The `msfs.memory.*` instruments over `source`.
pub(crate) fn observe_memory(
    meter: &Meter,
    source: Arc<dyn MemoryStatsSource>,
) -> Vec<Registration> {
    let mut kept: Vec<Registration> = Vec::new();
    let read = source.clone();
    kept.push(Box::new(
        meter
            .u64_observable_gauge(names::MEMORY_TARGET)
            .with_description("The memory the process aims to stay under")
            .with_unit(names::unit(names::MEMORY_TARGET))
            .with_callback(move |observer| observer.observe(read.memory_stats().target, &[]))
            .build(),
    ));
    let read = source.clone();
    kept.push(Box::new(
        meter
            .u64_observable_gauge(names::MEMORY_IN_USE)
            .with_description(
                "Memory in use by holder: cache (RAM lines), write_buffers, inodes (estimated), \
                 process (resident set, all of them included)",
            )
            .with_unit(names::unit(names::MEMORY_IN_USE))
            .with_callback(move |observer| {
                let stats = read.memory_stats();
                for (holder, bytes) in [
                    ("cache", stats.cache),
                    ("write_buffers", stats.write_buffers),
                    ("inodes", stats.inodes),
                    ("process", stats.resident),
                ] {
                    observer.observe(bytes, &[KeyValue::new("holder", holder)]);
                }
            })
            .build(),
    ));
    let read = source.clone();
    kept.push(Box::new(
        meter
            .u64_observable_gauge(names::MEMORY_INODE_LIMIT_PER_MOUNT)
            .with_description("Inodes each mount may hold now: the process's pool over its mounts")
            .with_callback(move |observer| {
                observer.observe(read.memory_stats().inode_limit_per_mount, &[])
            })
            .build(),
    ));
    let read = source.clone();
    kept.push(Box::new(
        meter
            .u64_observable_counter(names::MEMORY_OVER_TARGET)
            .with_description(
                "Times the process went over its memory target (read-ahead stopped, cache lines \
                 given back, then inode shares halved, then new work waiting, until back)",
            )
            .with_callback(move |observer| observer.observe(read.memory_stats().over_target, &[]))
            .build(),
    ));
    let read = source.clone();
    kept.push(Box::new(
        meter
            .u64_observable_gauge(names::MEMORY_PRESSURE)
            .with_description(
                "How pressed the process is: 0 calm, 1 near the target (read-ahead halved), 2 over \
                 it (no read-ahead, cache lines given back), 3 inode shares halved, 4 new work waits",
            )
            .with_callback(move |observer| observer.observe(read.memory_stats().stage, &[]))
            .build(),
    ));
    let read = source.clone();
    kept.push(Box::new(
        meter
            .u64_observable_counter(names::MEMORY_SHED)
            .with_description("Bytes of RAM cache lines given back under memory pressure")
            .with_unit(names::unit(names::MEMORY_SHED))
            .with_callback(move |observer| observer.observe(read.memory_stats().shed, &[]))
            .build(),
    ));
    kept.push(Box::new(
        meter
            .u64_observable_counter(names::MEMORY_WAITS)
            .with_description(
                "Times new work waited for memory: commits for write-buffer room, fetches and \
                 commits while the process is over its target after shedding",
            )
            .with_callback(move |observer| observer.observe(source.memory_stats().waits, &[]))
            .build(),
    ));
    kept
}
