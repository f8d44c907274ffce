//! The shared cache tier's instruments (`crate::shared_cache` records into them), and the same
//! counts kept as plain numbers, which `msfs warm`'s summary and tests read back.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

use opentelemetry::KeyValue;
use opentelemetry::metrics::{Counter, Histogram};

use super::{Metrics, latency_buckets, names};

/// Why a read went to the origin without the shared cache having answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fallback {
    /// The shared cache did not answer within `read_timeout_ms`.
    Timeout,
    /// It answered with an error (unreachable, refused, a server error).
    Error,
    /// The circuit breaker is open: the shared cache was not asked.
    Open,
}

impl Fallback {
    fn name(self) -> &'static str {
        match self {
            Fallback::Timeout => "timeout",
            Fallback::Error => "error",
            Fallback::Open => "open",
        }
    }
}

/// The counts since the process started.
#[derive(Debug, Default)]
pub struct SharedCacheCounts {
    pub hits: AtomicU64,
    pub misses: AtomicU64,
    pub fills: AtomicU64,
    pub fill_drops: AtomicU64,
    pub verification_failures: AtomicU64,
    pub fallbacks: AtomicU64,
    pub bytes_read: AtomicU64,
    pub bytes_written: AtomicU64,
    /// Lines copied for a fill and not yet written or dropped.
    pub pending: AtomicU64,
}

pub struct SharedCacheMetrics {
    pub counts: SharedCacheCounts,
    hits: Counter<u64>,
    misses: Counter<u64>,
    fills: Counter<u64>,
    fill_drops: Counter<u64>,
    verification_failures: Counter<u64>,
    fallbacks: Counter<u64>,
    bytes: Counter<u64>,
    latency: Histogram<f64>,
}

impl std::fmt::Debug for SharedCacheMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedCacheMetrics")
            .field("counts", &self.counts)
            .finish()
    }
}

impl SharedCacheMetrics {
    pub fn new(metrics: &Metrics) -> SharedCacheMetrics {
        let meter = &metrics.meter;
        let counter = |name: &'static str, help: &'static str| {
            let counter = meter
                .u64_counter(name)
                .with_description(help)
                .with_unit(names::unit(name))
                .build();
            // Shown as 0 from the start, so a dashboard tells "configured, unused" from absent.
            counter.add(0, &[]);
            counter
        };
        SharedCacheMetrics {
            counts: SharedCacheCounts::default(),
            hits: counter(
                names::SHARED_CACHE_HITS,
                "Lines served from the shared cache",
            ),
            misses: counter(
                names::SHARED_CACHE_MISSES,
                "Lines the shared cache did not hold (or held unverified), read from the origin",
            ),
            fills: counter(
                names::SHARED_CACHE_FILLS,
                "Lines written to the shared cache after an origin read",
            ),
            fill_drops: counter(
                names::SHARED_CACHE_FILL_DROPS,
                "Lines not written to the shared cache, by reason (memory, error)",
            ),
            verification_failures: counter(
                names::SHARED_CACHE_VERIFICATION_FAILURES,
                "Shared objects whose header or checksum did not match: served as misses",
            ),
            fallbacks: counter(
                names::SHARED_CACHE_FALLBACKS,
                "Reads sent to the origin because the shared cache timed out, failed or was skipped by its circuit breaker",
            ),
            bytes: counter(
                names::SHARED_CACHE_BYTES,
                "Bytes of lines read from (read) and written to (written) the shared cache",
            ),
            latency: meter
                .f64_histogram(names::SHARED_CACHE_LATENCY_SECONDS)
                .with_description(
                    "Time to read lines from the shared cache, until served or given up",
                )
                .with_unit(names::unit(names::SHARED_CACHE_LATENCY_SECONDS))
                .with_boundaries(latency_buckets())
                .build(),
        }
    }

    pub fn hits(&self, lines: u64, bytes: u64) {
        self.counts.hits.fetch_add(lines, Relaxed);
        self.counts.bytes_read.fetch_add(bytes, Relaxed);
        self.hits.add(lines, &[]);
        self.bytes.add(bytes, &[KeyValue::new("direction", "read")]);
    }

    pub fn misses(&self, lines: u64) {
        self.counts.misses.fetch_add(lines, Relaxed);
        self.misses.add(lines, &[]);
    }

    /// `lines` copied for a fill; each then ends as [`Self::filled`] or [`Self::fill_dropped`].
    pub fn fill_queued(&self, lines: u64) {
        self.counts.pending.fetch_add(lines, Relaxed);
    }

    /// A queued line written.
    pub fn filled(&self, bytes: u64) {
        self.counts.pending.fetch_sub(1, Relaxed);
        self.counts.fills.fetch_add(1, Relaxed);
        self.counts.bytes_written.fetch_add(bytes, Relaxed);
        self.fills.add(1, &[]);
        self.bytes
            .add(bytes, &[KeyValue::new("direction", "written")]);
    }

    /// `lines` not filled for `reason`: `memory` (never queued) or `error` (a queued line).
    pub fn fill_dropped(&self, lines: u64, reason: &'static str) {
        if reason == "error" {
            self.counts.pending.fetch_sub(lines, Relaxed);
        }
        self.counts.fill_drops.fetch_add(lines, Relaxed);
        self.fill_drops
            .add(lines, &[KeyValue::new("reason", reason)]);
    }

    pub fn verification_failed(&self) {
        self.counts.verification_failures.fetch_add(1, Relaxed);
        self.verification_failures.add(1, &[]);
    }

    pub fn fell_back(&self, why: Fallback) {
        self.counts.fallbacks.fetch_add(1, Relaxed);
        self.fallbacks
            .add(1, &[KeyValue::new("reason", why.name())]);
    }

    pub fn latency(&self, elapsed: Duration) {
        self.latency.record(elapsed.as_secs_f64(), &[]);
    }
}
