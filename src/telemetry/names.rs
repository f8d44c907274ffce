//! Metric names, in one place: the OpenTelemetry instrument names (the seed's `msfs.cache.hits`,
//! …), exported as they are over OTLP.
//!
//! `/metrics` shows each under its Prometheus name, derived the way an OpenTelemetry Collector's
//! Prometheus exporter derives it (see [`super::prometheus`]): dots become `_`, a unit not
//! already in the name is appended (`s` → `_seconds`, `By` → `_bytes`), and counters get
//! `_total`. So `msfs.backend.latency` (unit `s`) is `msfs_backend_latency_seconds` and
//! `msfs.cache.hits` is `msfs_cache_hits_total`. [`UNITS`] lists the unit of every name that
//! has one; docs/operations.md's "Metrics" section is the reference.

// Line cache (read from the cache's own counters at collection time).
pub const CACHE_HITS: &str = "msfs.cache.hits";
pub const CACHE_MISSES: &str = "msfs.cache.misses";
pub const CACHE_EVICTIONS: &str = "msfs.cache.evictions";
pub const CACHE_WAITS: &str = "msfs.cache.waits";
pub const CACHE_PREFETCHES: &str = "msfs.cache.prefetches";
pub const CACHE_FETCH_FAILURES: &str = "msfs.cache.fetch_failures";
pub const CACHE_UNCACHED_READS: &str = "msfs.cache.uncached_reads";
pub const CACHE_BYTES_FROM_CACHE: &str = "msfs.cache.bytes_from_cache";
pub const CACHE_BYTES_FROM_BACKEND: &str = "msfs.cache.bytes_from_backend";
pub const CACHE_LINES_RESTORED: &str = "msfs.cache.lines_restored";
pub const CACHE_LINES_REJECTED: &str = "msfs.cache.lines_rejected";
pub const CACHE_BYTES_RESIDENT: &str = "msfs.cache.bytes_resident";
pub const CACHE_LINES_RESIDENT: &str = "msfs.cache.lines_resident";
pub const CACHE_LINES_CAPACITY: &str = "msfs.cache.lines_capacity";
/// Unit `By`: `msfs_cache_line_size_bytes` in Prometheus.
pub const CACHE_LINE_SIZE_BYTES: &str = "msfs.cache.line_size";
// `cache_storage: tiered`.
pub const CACHE_RAM_HITS: &str = "msfs.cache.ram.hits";
pub const CACHE_PROMOTIONS: &str = "msfs.cache.promotions";
pub const CACHE_DEMOTIONS: &str = "msfs.cache.demotions";
pub const CACHE_MIGRATIONS_ABANDONED: &str = "msfs.cache.migrations_abandoned";
pub const CACHE_RAM_LINES_RESIDENT: &str = "msfs.cache.ram.lines_resident";
pub const CACHE_RAM_LINES_CAPACITY: &str = "msfs.cache.ram.lines_capacity";

// What applications read and write.
pub const IO_BYTES_READ: &str = "msfs.io.bytes_read";
pub const IO_READ_OPERATIONS: &str = "msfs.io.read_operations";
pub const IO_BYTES_WRITTEN: &str = "msfs.io.bytes_written";

// Object-store requests.
pub const BACKEND_OPERATIONS: &str = "msfs.backend.operations";
pub const BACKEND_ERRORS: &str = "msfs.backend.errors";
/// Unit `s`: `msfs_backend_latency_seconds` in Prometheus.
pub const BACKEND_LATENCY_SECONDS: &str = "msfs.backend.latency";

// The write engine.
pub const WRITE_COMMITS: &str = "msfs.write.commits";
/// Unit `s`: `msfs_write_commit_latency_seconds` in Prometheus.
pub const WRITE_COMMIT_LATENCY_SECONDS: &str = "msfs.write.commit_latency";
pub const WRITE_COMMIT_RETRIES: &str = "msfs.write.commit_retries";
/// Files whose commit failed for good (refused credentials, missing bucket, rejected request):
/// their data is kept locally and no longer retried in the background.
pub const WRITE_COMMITS_ABANDONED: &str = "msfs.write.commits_abandoned";
pub const WRITE_DIRTY_BYTES: &str = "msfs.write.dirty_bytes";
/// Bytes commits in flight hold in memory (bounded by `write_buffer_limit_bytes`).
pub const WRITE_BUFFERED_BYTES: &str = "msfs.write.buffered_bytes";

// FUSE and mounts.
/// Unit `s`: `msfs_fuse_request_seconds` in Prometheus.
pub const FUSE_REQUEST_SECONDS: &str = "msfs.fuse.request";
/// Requests left unanswered past `fuse_request_stall_warn_secs`, each counted once.
pub const FUSE_REQUESTS_STALLED: &str = "msfs.fuse.requests_stalled";
/// Requests answered with an error, by operation and errno (its symbolic name, `ENOENT`).
pub const FUSE_ERRORS: &str = "msfs.fuse.errors";
/// Live FUSE connections this process took over from a dead or retiring one, by whether the
/// kernel could resend what the previous server left unanswered (`resend`).
pub const FUSE_TAKEOVERS: &str = "msfs.fuse.takeovers";
/// Opens answered with a backing file the kernel reads itself (`fuse_passthrough`).
pub const FUSE_PASSTHROUGH_OPENS: &str = "msfs.fuse.passthrough_opens";
pub const FUSE_INODES_EVICTED: &str = "msfs.fuse.inodes_evicted";
pub const FUSE_INODES: &str = "msfs.fuse.inodes";
pub const MOUNTED_BACKENDS: &str = "msfs.mounted_backends";

// The process's memory target and what holds memory under it (`crate::memory`).
/// Unit `By`: `msfs_memory_target_bytes` in Prometheus.
pub const MEMORY_TARGET: &str = "msfs.memory.target";
/// Unit `By`, by `holder`: `cache` (RAM lines filled), `write_buffers`, `inodes` (estimated),
/// and `process` (the resident set, which includes all of them).
pub const MEMORY_IN_USE: &str = "msfs.memory.in_use";
/// Each mount's inode limit now: the process's inode pool shared among the mounts.
pub const MEMORY_INODE_LIMIT_PER_MOUNT: &str = "msfs.memory.inode_limit_per_mount";
/// Times new work waited for memory: a commit for write-buffer room, or a fetch or commit
/// while the process is over its target after shedding.
pub const MEMORY_WAITS: &str = "msfs.memory.waits";
/// How pressed the process is now (`crate::memory::Stage`, 0 calm to 4 new work waits).
pub const MEMORY_PRESSURE: &str = "msfs.memory.pressure";
/// Unit `By`: `msfs_memory_shed_bytes_total` in Prometheus: RAM cache lines given back under
/// pressure.
pub const MEMORY_SHED: &str = "msfs.memory.shed";
/// Times the process's anonymous memory went over its target.
pub const MEMORY_OVER_TARGET: &str = "msfs.memory.over_target";

// The shared cache tier (`crate::shared_cache`), counted in lines unless a unit says otherwise.
pub const SHARED_CACHE_HITS: &str = "msfs.shared_cache.hits";
pub const SHARED_CACHE_MISSES: &str = "msfs.shared_cache.misses";
/// Lines written to the shared cache after an origin read.
pub const SHARED_CACHE_FILLS: &str = "msfs.shared_cache.fills";
/// Lines not written, by `reason`: `memory` (the fill buffer was full) or `error` (the PUT
/// failed).
pub const SHARED_CACHE_FILL_DROPS: &str = "msfs.shared_cache.fill_drops";
/// Shared objects whose header or checksum did not match what was asked: served as misses.
pub const SHARED_CACHE_VERIFICATION_FAILURES: &str = "msfs.shared_cache.verification_failures";
/// Reads sent to the origin because of the shared cache, not a miss, by `reason`: `timeout`,
/// `error`, `open` (the circuit breaker).
pub const SHARED_CACHE_FALLBACKS: &str = "msfs.shared_cache.fallbacks";
/// Unit `By`, by `direction`: `read` (served from the shared cache) or `written` (fills).
pub const SHARED_CACHE_BYTES: &str = "msfs.shared_cache.bytes";
/// Unit `s`: one read of the shared cache, all its lines, until served or given up.
pub const SHARED_CACHE_LATENCY_SECONDS: &str = "msfs.shared_cache.latency";

/// Seconds, for durations.
pub const UNIT_SECONDS: &str = "s";
/// Bytes.
pub const UNIT_BYTES: &str = "By";

/// Every metric msfs exports, with its unit (`""` for a plain count).
pub const UNITS: &[(&str, &str)] = &[
    (CACHE_HITS, ""),
    (CACHE_MISSES, ""),
    (CACHE_EVICTIONS, ""),
    (CACHE_WAITS, ""),
    (CACHE_PREFETCHES, ""),
    (CACHE_FETCH_FAILURES, ""),
    (CACHE_UNCACHED_READS, ""),
    (CACHE_BYTES_FROM_CACHE, UNIT_BYTES),
    (CACHE_BYTES_FROM_BACKEND, UNIT_BYTES),
    (CACHE_LINES_RESTORED, ""),
    (CACHE_LINES_REJECTED, ""),
    (CACHE_BYTES_RESIDENT, UNIT_BYTES),
    (CACHE_LINES_RESIDENT, ""),
    (CACHE_LINES_CAPACITY, ""),
    (CACHE_LINE_SIZE_BYTES, UNIT_BYTES),
    (CACHE_RAM_HITS, ""),
    (CACHE_PROMOTIONS, ""),
    (CACHE_DEMOTIONS, ""),
    (CACHE_MIGRATIONS_ABANDONED, ""),
    (CACHE_RAM_LINES_RESIDENT, ""),
    (CACHE_RAM_LINES_CAPACITY, ""),
    (IO_BYTES_READ, UNIT_BYTES),
    (IO_READ_OPERATIONS, ""),
    (IO_BYTES_WRITTEN, UNIT_BYTES),
    (BACKEND_OPERATIONS, ""),
    (BACKEND_ERRORS, ""),
    (BACKEND_LATENCY_SECONDS, UNIT_SECONDS),
    (WRITE_COMMITS, ""),
    (WRITE_COMMIT_LATENCY_SECONDS, UNIT_SECONDS),
    (WRITE_COMMIT_RETRIES, ""),
    (WRITE_COMMITS_ABANDONED, ""),
    (WRITE_DIRTY_BYTES, UNIT_BYTES),
    (WRITE_BUFFERED_BYTES, UNIT_BYTES),
    (FUSE_REQUEST_SECONDS, UNIT_SECONDS),
    (FUSE_REQUESTS_STALLED, ""),
    (FUSE_ERRORS, ""),
    (FUSE_TAKEOVERS, ""),
    (FUSE_PASSTHROUGH_OPENS, ""),
    (FUSE_INODES_EVICTED, ""),
    (FUSE_INODES, ""),
    (MOUNTED_BACKENDS, ""),
    (MEMORY_TARGET, UNIT_BYTES),
    (MEMORY_IN_USE, UNIT_BYTES),
    (MEMORY_INODE_LIMIT_PER_MOUNT, ""),
    (MEMORY_WAITS, ""),
    (MEMORY_OVER_TARGET, ""),
    (MEMORY_PRESSURE, ""),
    (MEMORY_SHED, UNIT_BYTES),
    (SHARED_CACHE_HITS, ""),
    (SHARED_CACHE_MISSES, ""),
    (SHARED_CACHE_FILLS, ""),
    (SHARED_CACHE_FILL_DROPS, ""),
    (SHARED_CACHE_VERIFICATION_FAILURES, ""),
    (SHARED_CACHE_FALLBACKS, ""),
    (SHARED_CACHE_BYTES, UNIT_BYTES),
    (SHARED_CACHE_LATENCY_SECONDS, UNIT_SECONDS),
];

/// The unit `name` is recorded in (`""` when it has none or is unknown).
pub fn unit(name: &str) -> &'static str {
    UNITS
        .iter()
        .find(|(n, _)| *n == name)
        .map_or("", |(_, unit)| unit)
}
