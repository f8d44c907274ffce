//! Telemetry: the process's one metrics registry, its OTLP export and its Prometheus endpoint.
//!
//! Engines and layers record into [`Metrics`] (handed to them through `Engines`, never global).
//! Counters that an engine already keeps itself, like the line cache's, are observed at
//! collection time instead of being counted twice, through an interface defined here
//! ([`CacheStatsSource`]) so that telemetry, which every layer uses, names no engine type.
//!
//! # One registry, two ways out
//!
//! The registry is the OpenTelemetry SDK's meter provider: OTLP export has to go through
//! `opentelemetry-otlp`, which takes the SDK's collected data and nothing else, and a second
//! metrics crate beside it would count everything twice. Two readers hang off the provider:
//!
//! - a manual reader (`prometheus::PullReader`) that `GET /metrics` collects from, rendered as
//!   Prometheus text by our own small encoder ([`prometheus`]); the SDK's Prometheus exporter
//!   would bring in a second registry crate (`prometheus`) and renames seven of our metrics
//!   (the trial is in [`prometheus`]'s doc);
//! - when the config's `opentelemetry.metrics.exporter` is set, a periodic reader that posts
//!   everything over OTLP/HTTP (protobuf) with the configured attributes as resource
//!   attributes (`otlp`), through an HTTP client over the hyper stack the AWS SDK already
//!   brings (`otlp_http`).
//!
//! Both readers are cumulative, so `/metrics` and OTLP show the same totals. (A manual reader
//! needs the SDK's `experimental_metrics_custom_reader` feature, the one pull exporters use;
//! the SDK is a 0.x crate, so an upgrade is a deliberate change either way.) Instrument names
//! are OpenTelemetry names (`msfs.cache.hits`, see [`names`]); `/metrics` shows the Prometheus
//! names a Collector would derive from them (`msfs_cache_hits_total`).
//!
//! The provider's resource is fixed when it is built, so OTLP is configured at construction:
//! [`Metrics::with_telemetry`]. Dropping the last reference (or [`Metrics::shutdown`]) exports
//! one final time.

mod collectors;
mod http;
pub mod names;
mod otlp;
mod otlp_http;
pub mod prometheus;
mod shared_cache;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use opentelemetry::KeyValue;
use opentelemetry::metrics::{Counter, Gauge, Histogram, Meter, MeterProvider, UpDownCounter};
use opentelemetry_sdk::metrics::SdkMeterProvider;
use opentelemetry_sdk::metrics::data::ResourceMetrics;
use opentelemetry_sdk::metrics::reader::MetricReader;

pub use collectors::{CacheStats, CacheStatsSource, MemoryStats, MemoryStatsSource};
pub use http::{MetricsServer, serve_metrics};
pub use shared_cache::{Fallback, SharedCacheMetrics};

use crate::config::TelemetryConfig;

/// Why OTLP export could not be set up. Nothing here carries a credential: endpoints are
/// shown without any `user:password@`.
#[derive(Debug, thiserror::Error)]
pub enum TelemetryError {
    #[error(
        "opentelemetry.metrics.exporter.options.endpoint: {endpoint:?} {reason}; expected a URL like http://collector:4318"
    )]
    Endpoint { endpoint: String, reason: String },
    #[error("OTLP export to {endpoint}: cannot load the system's root certificates: {source}")]
    RootCertificates {
        endpoint: String,
        #[source]
        source: std::io::Error,
    },
    #[error("OTLP exporter: {0}")]
    Exporter(String),
    #[error("cannot start the OTLP export thread: {0}")]
    Runtime(#[source] std::io::Error),
}

/// 100 µs to ~100 s in doublings: FUSE requests served from memory up to slow backend calls.
fn latency_buckets() -> Vec<f64> {
    (0..21).map(|i| 0.0001 * f64::from(1u32 << i)).collect()
}

/// The name the instruments are recorded under (the OTLP instrumentation scope).
const SCOPE: &str = "msfs";

pub struct Metrics {
    provider: SdkMeterProvider,
    meter: Meter,
    /// What `/metrics` collects from.
    pull: prometheus::PullReader,
    /// Observable instruments, kept as long as the registry.
    observed: Mutex<Vec<collectors::Registration>>,
    backend_operations: Counter<u64>,
    backend_errors: Counter<u64>,
    backend_latency: Histogram<f64>,
    bytes_read: Counter<u64>,
    read_operations: Counter<u64>,
    bytes_written: Counter<u64>,
    write_commits: Counter<u64>,
    commit_latency: Histogram<f64>,
    commit_retries: Counter<u64>,
    commits_abandoned: Counter<u64>,
    buffered_bytes: UpDownCounter<i64>,
    dirty_bytes: UpDownCounter<i64>,
    fuse_latency: Histogram<f64>,
    fuse_stalled: Counter<u64>,
    fuse_errors: Counter<u64>,
    fuse_takeovers: Counter<u64>,
    fuse_passthrough_opens: Counter<u64>,
    fuse_inodes_evicted: Counter<u64>,
    fuse_inodes: UpDownCounter<i64>,
    /// The same count, read back by the memory gauges.
    fuse_inode_count: std::sync::atomic::AtomicI64,
    mounted_backends: Gauge<u64>,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Metrics")
    }
}

fn backend(backend: &str) -> KeyValue {
    KeyValue::new("backend", backend.to_string())
}

impl Metrics {
    /// A registry served only at `/metrics`.
    pub fn new() -> Arc<Metrics> {
        Self::build(SdkMeterProvider::builder(), prometheus::PullReader::new())
    }

    /// A registry that also exports over OTLP as `telemetry` says (when it names an exporter),
    /// with its attributes as resource attributes.
    pub fn with_telemetry(telemetry: &TelemetryConfig) -> Result<Arc<Metrics>, TelemetryError> {
        let mut builder = SdkMeterProvider::builder().with_resource(otlp::resource(telemetry));
        if let Some(exporter) = &telemetry.exporter {
            builder = builder.with_reader(otlp::periodic_reader(telemetry, exporter)?);
        }
        Ok(Self::build(builder, prometheus::PullReader::new()))
    }

    fn build(
        builder: opentelemetry_sdk::metrics::MeterProviderBuilder,
        pull: prometheus::PullReader,
    ) -> Arc<Metrics> {
        let provider = builder.with_reader(pull.clone()).build();
        let meter = provider.meter(SCOPE);
        let counter = |name: &'static str, help: &'static str| {
            meter
                .u64_counter(name)
                .with_description(help)
                .with_unit(names::unit(name))
                .build()
        };
        let histogram = |name: &'static str, help: &'static str| {
            meter
                .f64_histogram(name)
                .with_description(help)
                .with_unit(names::unit(name))
                .with_boundaries(latency_buckets())
                .build()
        };
        let metrics = Metrics {
            backend_operations: counter(
                names::BACKEND_OPERATIONS,
                "Object-store requests by backend, operation and outcome",
            ),
            backend_errors: counter(
                names::BACKEND_ERRORS,
                "Failed object-store requests (after retries) by backend, operation and error class",
            ),
            backend_latency: histogram(
                names::BACKEND_LATENCY_SECONDS,
                "Object-store request latency, retries included",
            ),
            bytes_read: counter(
                names::IO_BYTES_READ,
                "Bytes returned to applications by reads",
            ),
            read_operations: counter(
                names::IO_READ_OPERATIONS,
                "Read requests served to applications",
            ),
            bytes_written: counter(
                names::IO_BYTES_WRITTEN,
                "Bytes applications wrote into open files",
            ),
            write_commits: counter(
                names::WRITE_COMMITS,
                "Files committed to their object store, by outcome (ok or error)",
            ),
            commit_latency: histogram(
                names::WRITE_COMMIT_LATENCY_SECONDS,
                "Time to commit a file to its object store (upload and completion), retries included",
            ),
            commit_retries: counter(
                names::WRITE_COMMIT_RETRIES,
                "Commit attempts repeated after a failure",
            ),
            commits_abandoned: counter(
                names::WRITE_COMMITS_ABANDONED,
                "Files whose commit failed for good; their data is kept and no longer retried in the background",
            ),
            buffered_bytes: meter
                .i64_up_down_counter(names::WRITE_BUFFERED_BYTES)
                .with_description("Bytes commits in flight hold in memory, process-wide")
                .with_unit(names::unit(names::WRITE_BUFFERED_BYTES))
                .build(),
            dirty_bytes: meter
                .i64_up_down_counter(names::WRITE_DIRTY_BYTES)
                .with_description("Bytes written but not yet committed, process-wide")
                .with_unit(names::unit(names::WRITE_DIRTY_BYTES))
                .build(),
            fuse_latency: histogram(
                names::FUSE_REQUEST_SECONDS,
                "Time from a FUSE request's arrival to its reply, by operation",
            ),
            fuse_stalled: counter(
                names::FUSE_REQUESTS_STALLED,
                "FUSE requests left unanswered past fuse_request_stall_warn_secs, by operation",
            ),
            fuse_errors: counter(
                names::FUSE_ERRORS,
                "FUSE requests answered with an error, by operation and errno",
            ),
            fuse_takeovers: counter(
                names::FUSE_TAKEOVERS,
                "Live FUSE connections taken over from a previous server, by whether the kernel could resend its unanswered requests",
            ),
            fuse_passthrough_opens: counter(
                names::FUSE_PASSTHROUGH_OPENS,
                "Opens answered with a backing file the kernel reads itself (fuse_passthrough)",
            ),
            fuse_inodes_evicted: counter(
                names::FUSE_INODES_EVICTED,
                "File entries the kernel was asked to drop, idle or beyond evictable_inode_limit, so that their inodes are freed",
            ),
            fuse_inodes: meter
                .i64_up_down_counter(names::FUSE_INODES)
                .with_description(
                    "Inodes the mounts hold for the kernel (until it forgets them), process-wide",
                )
                .build(),
            fuse_inode_count: std::sync::atomic::AtomicI64::new(0),
            mounted_backends: meter
                .u64_gauge(names::MOUNTED_BACKENDS)
                .with_description("Backends currently mounted")
                .build(),
            observed: Mutex::new(Vec::new()),
            meter,
            pull,
            provider,
        };
        // Shown as 0 from the start rather than appearing with the first write.
        metrics.dirty_bytes.add(0, &[]);
        Arc::new(metrics)
    }

    /// Exposes a cache's own counters, read from `cache` at every collection.
    pub fn observe_cache(&self, cache: Arc<dyn CacheStatsSource>) {
        let registrations = collectors::observe_cache(&self.meter, cache);
        self.observed
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .extend(registrations);
    }

    /// The registry in the Prometheus text format (see [`prometheus`]).
    pub fn render(&self) -> String {
        let mut collected = ResourceMetrics::default();
        match self.pull.collect(&mut collected) {
            Ok(()) => prometheus::encode(&collected),
            Err(e) => {
                tracing::warn!(error = %e, "cannot collect metrics");
                String::new()
            }
        }
    }

    /// Exports a last time (when OTLP is configured) and stops every reader; later recordings
    /// are dropped and [`Metrics::render`] returns nothing. Dropping the last reference does
    /// the same.
    pub fn shutdown(&self) {
        if let Err(e) = self.provider.shutdown() {
            tracing::debug!(error = %e, "metrics shutdown");
        }
    }

    pub fn backend_request(
        &self,
        backend_name: &str,
        operation: &'static str,
        elapsed: Duration,
        error_class: Option<&'static str>,
    ) {
        let status = error_class.unwrap_or("ok");
        let labels = [
            backend(backend_name),
            KeyValue::new("operation", operation),
            KeyValue::new("status", status),
        ];
        self.backend_operations.add(1, &labels);
        if error_class.is_some() {
            self.backend_errors.add(1, &labels);
        }
        self.backend_latency
            .record(elapsed.as_secs_f64(), &labels[..2]);
    }

    pub fn read_served(&self, backend_name: &str, bytes: usize) {
        let labels = [backend(backend_name)];
        self.read_operations.add(1, &labels);
        self.bytes_read.add(bytes as u64, &labels);
    }

    /// `bytes` written by an application into an open file of `backend_name`.
    pub fn record_bytes_written(&self, backend_name: &str, bytes: usize) {
        self.bytes_written
            .add(bytes as u64, &[backend(backend_name)]);
    }

    /// A commit of a file to `backend_name` finished, successfully or not, after `latency`
    /// (retries included).
    pub fn record_commit(&self, backend_name: &str, ok: bool, latency: Duration) {
        let status = if ok { "ok" } else { "error" };
        self.write_commits
            .add(1, &[backend(backend_name), KeyValue::new("status", status)]);
        self.commit_latency
            .record(latency.as_secs_f64(), &[backend(backend_name)]);
    }

    /// A commit attempt to `backend_name` failed and is being tried again.
    pub fn record_commit_retry(&self, backend_name: &str) {
        self.commit_retries.add(1, &[backend(backend_name)]);
    }

    /// Bytes held in memory by commits in flight changed by `delta`.
    pub fn add_buffered_bytes(&self, delta: i64) {
        self.buffered_bytes.add(delta, &[]);
    }

    pub fn record_commit_abandoned(&self, backend_name: &str) {
        self.commits_abandoned.add(1, &[backend(backend_name)]);
    }

    /// Dirty (written, not yet committed) bytes changed by `delta`: positive when written,
    /// negative when committed or discarded.
    pub fn add_dirty_bytes(&self, delta: i64) {
        self.dirty_bytes.add(delta, &[]);
    }

    pub fn fuse_request(&self, op: &'static str, elapsed: Duration) {
        self.fuse_latency
            .record(elapsed.as_secs_f64(), &[KeyValue::new("op", op)]);
    }

    /// A FUSE request `op` went unanswered past the watchdog's bound (counted once per request).
    pub fn fuse_request_stalled(&self, op: &'static str) {
        self.fuse_stalled.add(1, &[KeyValue::new("op", op)]);
    }

    /// A FUSE request `op` was answered with an error, `errno` by its symbolic name (`ENOENT`).
    pub fn fuse_error(&self, op: &'static str, errno: &'static str) {
        self.fuse_errors
            .add(1, &[KeyValue::new("op", op), KeyValue::new("errno", errno)]);
    }

    /// A live FUSE connection was taken over; `resend`: the kernel replays what the previous
    /// server read and never answered.
    pub fn record_fuse_takeover(&self, resend: bool) {
        self.fuse_takeovers.add(
            1,
            &[KeyValue::new(
                "resend",
                if resend { "true" } else { "false" },
            )],
        );
    }

    /// The kernel was asked to drop `entries` file entries (`evictable_inode_ttl` / `_limit`).
    pub fn fuse_inodes_evicted(&self, entries: u64) {
        self.fuse_inodes_evicted.add(entries, &[]);
    }

    /// The mounts hold `delta` more inodes for the kernel (fewer when negative).
    pub fn add_fuse_inodes(&self, delta: i64) {
        self.fuse_inodes.add(delta, &[]);
        self.fuse_inode_count
            .fetch_add(delta, std::sync::atomic::Ordering::Relaxed);
    }

    /// Inodes every mount holds now.
    pub fn fuse_inode_count(&self) -> u64 {
        let count = self
            .fuse_inode_count
            .load(std::sync::atomic::Ordering::Relaxed);
        u64::try_from(count).unwrap_or(0)
    }

    /// Publishes the process's memory target and holders (`msfs.memory.*`).
    pub fn observe_memory(&self, source: Arc<dyn MemoryStatsSource>) {
        let registrations = collectors::observe_memory(&self.meter, source);
        self.observed
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .extend(registrations);
    }

    /// An open was answered with a backing file: the kernel reads it without asking msfs.
    pub fn fuse_passthrough_open(&self) {
        self.fuse_passthrough_opens.add(1, &[]);
    }

    pub fn set_mounted_backends(&self, count: usize) {
        self.mounted_backends.record(count as u64, &[]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backend_requests_are_counted_by_outcome() {
        let metrics = Metrics::new();
        metrics.backend_request("data", "get", Duration::from_millis(3), None);
        metrics.backend_request("data", "get", Duration::from_millis(3), None);
        metrics.backend_request("data", "head", Duration::from_millis(1), Some("not_found"));
        let text = metrics.render();
        assert!(
            text.contains(
                r#"msfs_backend_operations_total{backend="data",operation="get",status="ok"} 2"#
            ),
            "{text}"
        );
        assert!(
            text.contains(
                r#"msfs_backend_errors_total{backend="data",operation="head",status="not_found"} 1"#
            ),
            "{text}"
        );
        assert!(
            text.contains(
                r#"msfs_backend_latency_seconds_count{backend="data",operation="get"} 2"#
            ),
            "{text}"
        );
    }

    #[test]
    fn reads_count_operations_and_bytes() {
        let metrics = Metrics::new();
        metrics.read_served("b", 4096);
        metrics.read_served("b", 100);
        let text = metrics.render();
        assert!(
            text.contains(r#"msfs_io_bytes_read_total{backend="b"} 4196"#),
            "{text}"
        );
        assert!(
            text.contains(r#"msfs_io_read_operations_total{backend="b"} 2"#),
            "{text}"
        );
    }

    #[test]
    fn writes_commits_retries_and_dirty_bytes_are_recorded() {
        let metrics = Metrics::new();
        assert!(metrics.render().contains("msfs_write_dirty_bytes 0\n"));
        metrics.record_bytes_written("w", 10);
        metrics.record_bytes_written("w", 5);
        metrics.add_dirty_bytes(15);
        metrics.record_commit_retry("w");
        metrics.record_commit("w", true, Duration::from_millis(20));
        metrics.record_commit("w", false, Duration::from_millis(30));
        metrics.add_dirty_bytes(-10);
        let text = metrics.render();
        for expected in [
            r#"msfs_io_bytes_written_total{backend="w"} 15"#,
            r#"msfs_write_commits_total{backend="w",status="ok"} 1"#,
            r#"msfs_write_commits_total{backend="w",status="error"} 1"#,
            r#"msfs_write_commit_retries_total{backend="w"} 1"#,
            r#"msfs_write_commit_latency_seconds_count{backend="w"} 2"#,
            "msfs_write_dirty_bytes 5\n",
        ] {
            assert!(text.contains(expected), "{expected} missing in\n{text}");
        }
    }

    #[test]
    fn mounted_backends_is_a_gauge_that_follows_the_last_value() {
        let metrics = Metrics::new();
        metrics.set_mounted_backends(3);
        metrics.set_mounted_backends(2);
        let text = metrics.render();
        assert!(
            text.contains("# TYPE msfs_mounted_backends gauge\n"),
            "{text}"
        );
        assert!(text.contains("msfs_mounted_backends 2\n"), "{text}");
    }

    #[test]
    fn fuse_latency_buckets_span_100us_to_100s() {
        let buckets = latency_buckets();
        assert_eq!(buckets.first(), Some(&0.0001));
        assert!(buckets.last().is_some_and(|b| *b > 100.0 && *b < 110.0));
        let metrics = Metrics::new();
        metrics.fuse_request("read", Duration::from_micros(150));
        let text = metrics.render();
        assert!(
            text.contains(r#"msfs_fuse_request_seconds_bucket{op="read",le="0.0001"} 0"#),
            "{text}"
        );
        assert!(
            text.contains(r#"msfs_fuse_request_seconds_bucket{op="read",le="0.0002"} 1"#),
            "{text}"
        );
    }

    #[test]
    fn fuse_errors_are_counted_by_operation_and_errno() {
        let metrics = Metrics::new();
        metrics.fuse_error("lookup", "ENOENT");
        metrics.fuse_error("lookup", "ENOENT");
        metrics.fuse_error("read", "EIO");
        let text = metrics.render();
        assert!(
            text.contains("# TYPE msfs_fuse_errors_total counter\n"),
            "{text}"
        );
        assert!(
            text.contains(r#"msfs_fuse_errors_total{errno="ENOENT",op="lookup"} 2"#),
            "{text}"
        );
        assert!(
            text.contains(r#"msfs_fuse_errors_total{errno="EIO",op="read"} 1"#),
            "{text}"
        );
    }

    /// Fixed numbers: telemetry observes any cache through the interface, no `LineCache` needed.
    struct FixedStats(CacheStats);

    impl CacheStatsSource for FixedStats {
        fn cache_stats(&self) -> CacheStats {
            self.0
        }
    }

    #[test]
    fn a_cache_is_observed_through_its_stats_source() {
        let metrics = Metrics::new();
        metrics.observe_cache(Arc::new(FixedStats(CacheStats {
            hits: 4,
            bytes_from_backend: 2048,
            lines_resident: 3,
            lines_capacity: 16,
            line_size: 1024,
            ..CacheStats::default()
        })));
        let text = metrics.render();
        for expected in [
            "msfs_cache_hits_total 4\n",
            "msfs_cache_misses_total 0\n",
            "msfs_cache_bytes_from_backend_total 2048\n",
            "msfs_cache_lines_resident 3\n",
            "msfs_cache_bytes_resident 3072\n",
            "msfs_cache_lines_capacity 16\n",
            "msfs_cache_line_size_bytes 1024\n",
        ] {
            assert!(text.contains(expected), "{expected} missing in\n{text}");
        }
    }

    #[test]
    fn every_name_has_a_unit_entry_and_a_distinct_prometheus_name() {
        let mut seen = std::collections::BTreeSet::new();
        for (name, unit) in names::UNITS {
            assert!(name.starts_with("msfs."), "{name}");
            assert!(
                seen.insert(prometheus::metric_name(name, unit)),
                "two metrics render as {}",
                prometheus::metric_name(name, unit)
            );
        }
    }
}

#[cfg(test)]
mod dashboard_tests {
    use super::{names, prometheus};

    /// Every metric the shipped Grafana dashboard queries must be one msfs exports.
    #[test]
    fn the_grafana_dashboard_queries_only_exported_metrics() {
        let dashboard = include_str!("../../deploy/grafana/msfs-dashboard.json");
        let known: Vec<String> = names::UNITS
            .iter()
            .map(|(name, unit)| prometheus::metric_name(name, unit))
            .collect();
        let mut queried = 0;
        for (start, _) in dashboard.match_indices("msfs_") {
            let name: String = dashboard[start..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            let base = ["_total", "_bucket", "_count", "_sum"]
                .iter()
                .find_map(|suffix| name.strip_suffix(suffix))
                .unwrap_or(&name);
            assert!(
                known.iter().any(|k| k == base),
                "dashboard queries unknown metric {name}"
            );
            queried += 1;
        }
        assert!(
            queried > 10,
            "the dashboard queries too few metrics: {queried}"
        );
    }
}
