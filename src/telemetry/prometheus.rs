//! The Prometheus text format (0.0.4) of one collection of the OpenTelemetry registry: what
//! `GET /metrics` returns.
//!
//! Names follow what an OpenTelemetry Collector's Prometheus exporter would make of the same
//! OTLP stream, so dashboards work on either path: `.` and other characters Prometheus does not
//! allow become `_`; the unit is appended unless the name already says it (`s` → `_seconds`,
//! `By` → `_bytes`); monotonic sums are counters with `_total`; non-monotonic sums and gauges are
//! gauges; histograms are `_bucket{le=…}` (cumulative, ending with `+Inf`), `_sum` and `_count`.
//! Resource attributes are not repeated on every series (Prometheus adds its own target labels).
//!
//! Why not the SDK's exporter: `opentelemetry-prometheus` 0.33.1 (over `prometheus` 0.14 and
//! the same 0.33 SDK) was tried on the same instruments (issue #25). Its HELP/TYPE lines, label
//! order and histogram buckets match ours, and the `otel_scope_name="msfs"` label it puts on
//! every series and its `target_info` series can be turned off (`scope_info_enabled(false)`,
//! `without_target_info()`). But it appends the unit even when the name already has it as a
//! word, unlike the Collector: `msfs.io.bytes_read` (unit `By`) becomes
//! `msfs_io_bytes_read_bytes_total`, not `msfs_io_bytes_read_total`, and `msfs.write.dirty_bytes`
//! becomes `msfs_write_dirty_bytes_bytes`. That renames seven of our metrics, three of them on
//! the dashboard and two in `tests/it/metrics_endpoint.rs`. Its `without_units()` fixes those but
//! drops every unit, so `msfs_backend_latency_seconds_bucket` becomes
//! `msfs_backend_latency_bucket`.

use std::fmt::Write;
use std::sync::{Arc, Weak};
use std::time::Duration;

use opentelemetry::KeyValue;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::metrics::data::{
    AggregatedMetrics, Gauge, Histogram, Metric, MetricData, ResourceMetrics, Sum,
};
use opentelemetry_sdk::metrics::reader::MetricReader;
use opentelemetry_sdk::metrics::{InstrumentKind, ManualReader, Pipeline, Temporality};

/// A [`ManualReader`] that can be registered with the meter provider and still be collected
/// from by `/metrics` (the provider takes ownership of the readers it is given).
#[derive(Debug, Clone)]
pub(crate) struct PullReader(Arc<ManualReader>);

impl PullReader {
    pub(crate) fn new() -> PullReader {
        // Cumulative: Prometheus counters and histograms are totals since the start.
        PullReader(Arc::new(
            ManualReader::builder()
                .with_temporality(Temporality::Cumulative)
                .build(),
        ))
    }
}

impl MetricReader for PullReader {
    fn register_pipeline(&self, pipeline: Weak<Pipeline>) {
        self.0.register_pipeline(pipeline)
    }

    fn collect(&self, rm: &mut ResourceMetrics) -> OTelSdkResult {
        self.0.collect(rm)
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.0.force_flush()
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.0.shutdown_with_timeout(timeout)
    }

    fn temporality(&self, kind: InstrumentKind) -> Temporality {
        self.0.temporality(kind)
    }
}

pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// The Prometheus name of the OpenTelemetry metric `name` recorded in `unit`, without the
/// `_total` of counters.
pub fn metric_name(name: &str, unit: &str) -> String {
    let mut out: String = name
        .chars()
        .enumerate()
        .map(|(i, c)| match c {
            'a'..='z' | 'A'..='Z' | '_' | ':' => c,
            '0'..='9' if i > 0 => c,
            _ => '_',
        })
        .collect();
    let suffix = match unit {
        "s" => "seconds",
        "By" => "bytes",
        _ => "",
    };
    if !suffix.is_empty() && !out.split('_').any(|token| token == suffix) {
        out.push('_');
        out.push_str(suffix);
    }
    out
}

/// Every metric of `rm`, sorted by name, in the Prometheus text format.
pub fn encode(rm: &ResourceMetrics) -> String {
    let mut metrics: Vec<&Metric> = rm.scope_metrics().flat_map(|s| s.metrics()).collect();
    metrics.sort_by(|a, b| a.name().cmp(b.name()));
    let mut out = String::new();
    for metric in metrics {
        match metric.data() {
            AggregatedMetrics::U64(data) => encode_metric(&mut out, metric, data),
            AggregatedMetrics::I64(data) => encode_metric(&mut out, metric, data),
            AggregatedMetrics::F64(data) => encode_metric(&mut out, metric, data),
        }
    }
    out
}

/// A sample value in Prometheus notation.
trait Number: Copy {
    fn write_to(self, out: &mut String);
}

impl Number for u64 {
    fn write_to(self, out: &mut String) {
        let _ = write!(out, "{self}");
    }
}

impl Number for i64 {
    fn write_to(self, out: &mut String) {
        let _ = write!(out, "{self}");
    }
}

impl Number for f64 {
    fn write_to(self, out: &mut String) {
        write_float(out, self);
    }
}

fn write_float(out: &mut String, value: f64) {
    if value.is_nan() {
        out.push_str("NaN");
    } else if value == f64::INFINITY {
        out.push_str("+Inf");
    } else if value == f64::NEG_INFINITY {
        out.push_str("-Inf");
    } else {
        let _ = write!(out, "{value}");
    }
}

fn encode_metric<T: Number>(out: &mut String, metric: &Metric, data: &MetricData<T>) {
    let base = metric_name(metric.name(), metric.unit());
    match data {
        MetricData::Sum(sum) if sum.is_monotonic() => {
            let name = if base.ends_with("_total") {
                base
            } else {
                format!("{base}_total")
            };
            header(out, &name, metric.description(), "counter");
            sum_samples(out, &name, sum);
        }
        MetricData::Sum(sum) => {
            header(out, &base, metric.description(), "gauge");
            sum_samples(out, &base, sum);
        }
        MetricData::Gauge(gauge) => {
            header(out, &base, metric.description(), "gauge");
            gauge_samples(out, &base, gauge);
        }
        MetricData::Histogram(histogram) => {
            header(out, &base, metric.description(), "histogram");
            histogram_samples(out, &base, histogram);
        }
        // msfs records no exponential histograms; Prometheus text has no form for them.
        MetricData::ExponentialHistogram(_) => {}
    }
}

fn header(out: &mut String, name: &str, help: &str, kind: &str) {
    if !help.is_empty() {
        let help = help.replace('\\', r"\\").replace('\n', r"\n");
        let _ = writeln!(out, "# HELP {name} {help}");
    }
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

fn sum_samples<T: Number>(out: &mut String, name: &str, sum: &Sum<T>) {
    for point in sum.data_points() {
        sample(out, name, point.attributes(), None, point.value());
    }
}

fn gauge_samples<T: Number>(out: &mut String, name: &str, gauge: &Gauge<T>) {
    for point in gauge.data_points() {
        sample(out, name, point.attributes(), None, point.value());
    }
}

fn histogram_samples<T: Number>(out: &mut String, name: &str, histogram: &Histogram<T>) {
    let bucket = format!("{name}_bucket");
    for point in histogram.data_points() {
        let mut cumulative = 0u64;
        let mut counts = point.bucket_counts();
        for bound in point.bounds() {
            cumulative += counts.next().unwrap_or(0);
            let mut le = String::new();
            write_float(&mut le, bound);
            sample(out, &bucket, point.attributes(), Some(&le), cumulative);
        }
        sample(
            out,
            &bucket,
            point.attributes(),
            Some("+Inf"),
            point.count(),
        );
        sample(
            out,
            &format!("{name}_sum"),
            point.attributes(),
            None,
            point.sum(),
        );
        sample(
            out,
            &format!("{name}_count"),
            point.attributes(),
            None,
            point.count(),
        );
    }
}

/// One line: `name{labels} value`, labels sorted by name, then `le` for a bucket.
fn sample<'a, T: Number>(
    out: &mut String,
    name: &str,
    attributes: impl Iterator<Item = &'a KeyValue>,
    le: Option<&str>,
    value: T,
) {
    let mut labels: Vec<(String, String)> = attributes
        .map(|kv| (label_name(kv.key.as_str()), kv.value.as_str().into_owned()))
        .collect();
    labels.sort();
    if let Some(le) = le {
        labels.push(("le".to_string(), le.to_string()));
    }
    out.push_str(name);
    if !labels.is_empty() {
        out.push('{');
        for (i, (key, value)) in labels.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            out.push_str(key);
            out.push_str("=\"");
            escape_label_value(out, value);
            out.push('"');
        }
        out.push('}');
    }
    out.push(' ');
    value.write_to(out);
    out.push('\n');
}

fn label_name(key: &str) -> String {
    key.chars()
        .enumerate()
        .map(|(i, c)| match c {
            'a'..='z' | 'A'..='Z' | '_' => c,
            '0'..='9' if i > 0 => c,
            _ => '_',
        })
        .collect()
}

fn escape_label_value(out: &mut String, value: &str) {
    for c in value.chars() {
        match c {
            '\\' => out.push_str(r"\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str(r"\n"),
            c => out.push(c),
        }
    }
}

#[cfg(test)]
mod tests {
    use opentelemetry::KeyValue;
    use opentelemetry::metrics::MeterProvider;
    use opentelemetry_sdk::metrics::SdkMeterProvider;

    use super::*;

    /// A registry with one reader, the metrics `record` makes, and their text.
    fn render(record: impl FnOnce(&opentelemetry::metrics::Meter)) -> String {
        let reader = PullReader::new();
        let provider = SdkMeterProvider::builder()
            .with_reader(reader.clone())
            .build();
        record(&provider.meter("test"));
        let mut rm = ResourceMetrics::default();
        reader.collect(&mut rm).expect("collect");
        encode(&rm)
    }

    #[test]
    fn names_get_underscores_and_their_unit_once() {
        assert_eq!(metric_name("msfs.cache.hits", ""), "msfs_cache_hits");
        assert_eq!(
            metric_name("msfs.backend.latency", "s"),
            "msfs_backend_latency_seconds"
        );
        assert_eq!(
            metric_name("msfs.io.bytes_read", "By"),
            "msfs_io_bytes_read"
        );
        assert_eq!(
            metric_name("msfs.cache.line_size", "By"),
            "msfs_cache_line_size_bytes"
        );
        assert_eq!(metric_name("9lives-x/y", "{line}"), "_lives_x_y");
    }

    #[test]
    fn counters_get_total_and_sorted_escaped_labels() {
        let text = render(|meter| {
            let counter = meter
                .u64_counter("msfs.backend.operations")
                .with_description("Requests\nby \\ outcome")
                .build();
            counter.add(
                2,
                &[
                    KeyValue::new("status", "ok"),
                    KeyValue::new("backend", "a \"quoted\" \\ dir\nname"),
                ],
            );
        });
        assert_eq!(
            text,
            concat!(
                "# HELP msfs_backend_operations_total Requests\\nby \\\\ outcome\n",
                "# TYPE msfs_backend_operations_total counter\n",
                "msfs_backend_operations_total{backend=\"a \\\"quoted\\\" \\\\ dir\\nname\",status=\"ok\"} 2\n",
            )
        );
    }

    #[test]
    fn histogram_buckets_are_cumulative_and_end_with_inf() {
        let text = render(|meter| {
            let histogram = meter
                .f64_histogram("msfs.backend.latency")
                .with_unit("s")
                .with_boundaries(vec![0.001, 0.01, 0.1])
                .build();
            let labels = [KeyValue::new("op", "read")];
            // Powers of two: the sum is exact.
            for value in [0.0009765625, 0.00390625, 0.0078125, 0.5] {
                histogram.record(value, &labels);
            }
        });
        let expected = concat!(
            "# TYPE msfs_backend_latency_seconds histogram\n",
            "msfs_backend_latency_seconds_bucket{op=\"read\",le=\"0.001\"} 1\n",
            "msfs_backend_latency_seconds_bucket{op=\"read\",le=\"0.01\"} 3\n",
            "msfs_backend_latency_seconds_bucket{op=\"read\",le=\"0.1\"} 3\n",
            "msfs_backend_latency_seconds_bucket{op=\"read\",le=\"+Inf\"} 4\n",
            "msfs_backend_latency_seconds_sum{op=\"read\"} 0.5126953125\n",
            "msfs_backend_latency_seconds_count{op=\"read\"} 4\n",
        );
        assert_eq!(text, expected);
    }

    #[test]
    fn gauges_and_up_down_counters_are_gauges_without_total() {
        let text = render(|meter| {
            meter
                .u64_gauge("msfs.mounted_backends")
                .build()
                .record(3, &[]);
            let dirty = meter
                .i64_up_down_counter("msfs.write.dirty_bytes")
                .with_unit("By")
                .build();
            dirty.add(10, &[]);
            dirty.add(-4, &[]);
        });
        assert_eq!(
            text,
            concat!(
                "# TYPE msfs_mounted_backends gauge\n",
                "msfs_mounted_backends 3\n",
                "# TYPE msfs_write_dirty_bytes gauge\n",
                "msfs_write_dirty_bytes 6\n",
            )
        );
    }

    #[test]
    fn observable_counters_are_read_at_each_collection() {
        let text = render(|meter| {
            let _ = meter
                .u64_observable_counter("msfs.cache.hits")
                .with_callback(|observer| observer.observe(7, &[]))
                .build();
        });
        assert!(text.contains("msfs_cache_hits_total 7\n"), "{text}");
    }

    #[test]
    fn floats_use_prometheus_spellings() {
        let mut out = String::new();
        for value in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY, 0.25, 3.0] {
            write_float(&mut out, value);
            out.push(' ');
        }
        assert_eq!(out, "NaN +Inf -Inf 0.25 3 ");
    }
}
