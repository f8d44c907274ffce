//! Telemetry: the process's one metrics registry and its Prometheus endpoint.
//!
//! Engines and layers record into [`Metrics`] (handed to them through `Engines`, never global).
//! Counters that an engine already keeps itself, like the line cache's, are read at scrape time
//! by a collector instead of being counted twice.

mod collectors;
mod http;
pub mod names;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

pub use http::{MetricsServer, serve_metrics};

use crate::cache::LineCache;

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct BackendOpLabels {
    pub backend: String,
    pub operation: &'static str,
    pub status: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct BackendLabels {
    pub backend: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct LatencyLabels {
    pub backend: String,
    pub operation: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct FuseOpLabels {
    pub op: &'static str,
}

/// 100 µs to ~100 s in doublings: FUSE requests served from memory up to slow backend calls.
fn latency_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.0001, 2.0, 21))
}

pub struct Metrics {
    registry: Mutex<Registry>,
    backend_operations: Family<BackendOpLabels, Counter>,
    backend_errors: Family<BackendOpLabels, Counter>,
    backend_latency: Family<LatencyLabels, Histogram>,
    bytes_read: Family<BackendLabels, Counter>,
    read_operations: Family<BackendLabels, Counter>,
    fuse_latency: Family<FuseOpLabels, Histogram>,
    mounted_backends: Gauge,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Metrics")
    }
}

impl Metrics {
    pub fn new() -> Arc<Metrics> {
        let mut registry = Registry::default();
        let metrics = Metrics {
            backend_operations: Family::default(),
            backend_errors: Family::default(),
            backend_latency: Family::new_with_constructor(latency_histogram),
            bytes_read: Family::default(),
            read_operations: Family::default(),
            fuse_latency: Family::new_with_constructor(latency_histogram),
            mounted_backends: Gauge::default(),
            registry: Mutex::new(Registry::default()),
        };
        registry.register(
            names::BACKEND_OPERATIONS,
            "Object-store requests by backend, operation and outcome",
            metrics.backend_operations.clone(),
        );
        registry.register(
            names::BACKEND_ERRORS,
            "Failed object-store requests (after retries) by backend, operation and error class",
            metrics.backend_errors.clone(),
        );
        registry.register(
            names::BACKEND_LATENCY_SECONDS,
            "Object-store request latency, retries included",
            metrics.backend_latency.clone(),
        );
        registry.register(
            names::IO_BYTES_READ,
            "Bytes returned to applications by reads",
            metrics.bytes_read.clone(),
        );
        registry.register(
            names::IO_READ_OPERATIONS,
            "Read requests served to applications",
            metrics.read_operations.clone(),
        );
        registry.register(
            names::FUSE_REQUEST_SECONDS,
            "Time from a FUSE request's arrival to its reply, by operation",
            metrics.fuse_latency.clone(),
        );
        registry.register(
            names::MOUNTED_BACKENDS,
            "Backends currently mounted",
            metrics.mounted_backends.clone(),
        );
        *metrics.registry.lock().unwrap_or_else(|p| p.into_inner()) = registry;
        Arc::new(metrics)
    }

    /// Exposes the line cache's own counters at every scrape.
    pub fn observe_cache(&self, cache: Arc<LineCache>) {
        self.registry()
            .register_collector(Box::new(collectors::CacheCollector(cache)));
    }

    fn registry(&self) -> std::sync::MutexGuard<'_, Registry> {
        self.registry.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The registry in the Prometheus/OpenMetrics text format.
    pub fn render(&self) -> String {
        let mut out = String::new();
        if let Err(e) = prometheus_client::encoding::text::encode(&mut out, &self.registry()) {
            tracing::error!(error = %e, "cannot encode metrics");
        }
        out
    }

    pub fn backend_request(
        &self,
        backend: &str,
        operation: &'static str,
        elapsed: Duration,
        error_class: Option<&'static str>,
    ) {
        let status = error_class.unwrap_or("ok");
        let labels = BackendOpLabels {
            backend: backend.to_string(),
            operation,
            status,
        };
        self.backend_operations.get_or_create(&labels).inc();
        if error_class.is_some() {
            self.backend_errors.get_or_create(&labels).inc();
        }
        self.backend_latency
            .get_or_create(&LatencyLabels {
                backend: backend.to_string(),
                operation,
            })
            .observe(elapsed.as_secs_f64());
    }

    pub fn read_served(&self, backend: &str, bytes: usize) {
        let labels = BackendLabels {
            backend: backend.to_string(),
        };
        self.read_operations.get_or_create(&labels).inc();
        self.bytes_read.get_or_create(&labels).inc_by(bytes as u64);
    }

    pub fn fuse_request(&self, op: &'static str, elapsed: Duration) {
        self.fuse_latency
            .get_or_create(&FuseOpLabels { op })
            .observe(elapsed.as_secs_f64());
    }

    pub fn set_mounted_backends(&self, count: usize) {
        self.mounted_backends.set(count as i64);
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
}

#[cfg(test)]
mod dashboard_tests {
    use super::names;

    /// Every metric the shipped Grafana dashboard queries must be one msfs exports.
    #[test]
    fn the_grafana_dashboard_queries_only_exported_metrics() {
        let dashboard = include_str!("../../deploy/grafana/msfs-dashboard.json");
        let known = [
            names::CACHE_HITS,
            names::CACHE_MISSES,
            names::CACHE_EVICTIONS,
            names::CACHE_WAITS,
            names::CACHE_PREFETCHES,
            names::CACHE_FETCH_FAILURES,
            names::CACHE_UNCACHED_READS,
            names::CACHE_BYTES_FROM_CACHE,
            names::CACHE_BYTES_FROM_BACKEND,
            names::CACHE_LINES_RESIDENT,
            names::CACHE_LINES_CAPACITY,
            names::CACHE_LINE_SIZE_BYTES,
            names::IO_BYTES_READ,
            names::IO_READ_OPERATIONS,
            names::BACKEND_OPERATIONS,
            names::BACKEND_ERRORS,
            names::BACKEND_LATENCY_SECONDS,
            names::FUSE_REQUEST_SECONDS,
            names::MOUNTED_BACKENDS,
        ];
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
                known.contains(&base),
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
