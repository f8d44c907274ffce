//! Metric names, in one place. The seed's OpenTelemetry names (`msfs.cache.hits`, …) are written
//! with `_` for Prometheus; counters get the `_total` suffix when exposed.

pub const CACHE_HITS: &str = "msfs_cache_hits";
pub const CACHE_MISSES: &str = "msfs_cache_misses";
pub const CACHE_EVICTIONS: &str = "msfs_cache_evictions";
pub const CACHE_WAITS: &str = "msfs_cache_waits";
pub const CACHE_PREFETCHES: &str = "msfs_cache_prefetches";
pub const CACHE_FETCH_FAILURES: &str = "msfs_cache_fetch_failures";
pub const CACHE_UNCACHED_READS: &str = "msfs_cache_uncached_reads";
pub const CACHE_BYTES_FROM_CACHE: &str = "msfs_cache_bytes_from_cache";
pub const CACHE_BYTES_FROM_BACKEND: &str = "msfs_cache_bytes_from_backend";
pub const CACHE_LINES_RESIDENT: &str = "msfs_cache_lines_resident";
pub const CACHE_LINES_CAPACITY: &str = "msfs_cache_lines_capacity";
pub const CACHE_LINE_SIZE_BYTES: &str = "msfs_cache_line_size_bytes";

pub const IO_BYTES_READ: &str = "msfs_io_bytes_read";
pub const IO_READ_OPERATIONS: &str = "msfs_io_read_operations";

pub const BACKEND_OPERATIONS: &str = "msfs_backend_operations";
pub const BACKEND_ERRORS: &str = "msfs_backend_errors";
pub const BACKEND_LATENCY_SECONDS: &str = "msfs_backend_latency_seconds";

pub const FUSE_REQUEST_SECONDS: &str = "msfs_fuse_request_seconds";
pub const MOUNTED_BACKENDS: &str = "msfs_mounted_backends";
