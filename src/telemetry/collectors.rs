//! Observable instruments over counters an engine already keeps itself, read at each collection
//! instead of being counted twice.

use std::sync::Arc;

use opentelemetry::metrics::Meter;

use super::names;
use crate::cache::LineCache;

/// Instruments kept alive for as long as the registry (dropping one may unregister its
/// callback, depending on the SDK version).
pub(crate) type Registration = Box<dyn std::any::Any + Send + Sync>;

/// The line cache's counters and occupancy, from [`LineCache::stats`] at every collection.
pub(crate) fn observe_cache(meter: &Meter, cache: Arc<LineCache>) -> Vec<Registration> {
    type Stat = fn(&LineCache) -> u64;
    let counters: [(&'static str, &'static str, Stat); 9] = [
        (names::CACHE_HITS, "Cache lines found clean", |c| {
            c.stats().hits
        }),
        (
            names::CACHE_MISSES,
            "Cache lines that had to be fetched",
            |c| c.stats().misses,
        ),
        (
            names::CACHE_WAITS,
            "Reads that waited for a line already being fetched",
            |c| c.stats().waits,
        ),
        (names::CACHE_PREFETCHES, "Read-ahead fetches started", |c| {
            c.stats().prefetches
        }),
        (
            names::CACHE_EVICTIONS,
            "Clean lines evicted to make room",
            |c| c.stats().evictions,
        ),
        (
            names::CACHE_FETCH_FAILURES,
            "Line fetches that failed",
            |c| c.stats().fetch_failures,
        ),
        (
            names::CACHE_UNCACHED_READS,
            "Reads served straight from the store because no line could be used",
            |c| c.stats().uncached_reads,
        ),
        (
            names::CACHE_BYTES_FROM_CACHE,
            "Bytes served from cached lines",
            |c| c.stats().bytes_from_cache,
        ),
        (
            names::CACHE_BYTES_FROM_BACKEND,
            "Bytes fetched from object stores into the cache",
            |c| c.stats().bytes_from_backend,
        ),
    ];
    let gauges: [(&'static str, &'static str, Stat); 4] = [
        (
            names::CACHE_LINES_RESIDENT,
            "Lines holding data (clean, being fetched or draining)",
            |c| c.stats().lines_resident,
        ),
        (
            names::CACHE_BYTES_RESIDENT,
            "Bytes of cache capacity in use: resident lines times the line size",
            |c| c.stats().lines_resident.saturating_mul(c.line_size()),
        ),
        (
            names::CACHE_LINES_CAPACITY,
            "Lines the cache may hold",
            |c| c.lines() as u64,
        ),
        (names::CACHE_LINE_SIZE_BYTES, "Bytes per cache line", |c| {
            c.line_size()
        }),
    ];
    let mut kept: Vec<Registration> = Vec::new();
    for (name, help, read) in counters {
        let cache = cache.clone();
        kept.push(Box::new(
            meter
                .u64_observable_counter(name)
                .with_description(help)
                .with_unit(names::unit(name))
                .with_callback(move |observer| observer.observe(read(&cache), &[]))
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
                .with_callback(move |observer| observer.observe(read(&cache), &[]))
                .build(),
        ));
    }
    kept
}
