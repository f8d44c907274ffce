//! Collectors that read an engine's own counters at scrape time.

use std::sync::Arc;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;

use super::names;
use crate::cache::LineCache;

#[derive(Debug)]
pub struct CacheCollector(pub Arc<LineCache>);

fn counter(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    value: u64,
) -> std::fmt::Result {
    let metric = ConstCounter::new(value);
    metric.encode(encoder.encode_descriptor(name, help, None, metric.metric_type())?)
}

fn gauge(encoder: &mut DescriptorEncoder, name: &str, help: &str, value: u64) -> std::fmt::Result {
    let metric = ConstGauge::new(i64::try_from(value).unwrap_or(i64::MAX));
    metric.encode(encoder.encode_descriptor(name, help, None, metric.metric_type())?)
}

impl Collector for CacheCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> std::fmt::Result {
        let s = self.0.stats();
        let e = &mut encoder;
        counter(e, names::CACHE_HITS, "Cache lines found clean", s.hits)?;
        counter(
            e,
            names::CACHE_MISSES,
            "Cache lines that had to be fetched",
            s.misses,
        )?;
        counter(
            e,
            names::CACHE_WAITS,
            "Reads that waited for a line already being fetched",
            s.waits,
        )?;
        counter(
            e,
            names::CACHE_PREFETCHES,
            "Read-ahead fetches started",
            s.prefetches,
        )?;
        counter(
            e,
            names::CACHE_EVICTIONS,
            "Clean lines evicted to make room",
            s.evictions,
        )?;
        counter(
            e,
            names::CACHE_FETCH_FAILURES,
            "Line fetches that failed",
            s.fetch_failures,
        )?;
        counter(
            e,
            names::CACHE_UNCACHED_READS,
            "Reads served straight from the store because every line was busy",
            s.uncached_reads,
        )?;
        counter(
            e,
            names::CACHE_BYTES_FROM_CACHE,
            "Bytes served from cached lines",
            s.bytes_from_cache,
        )?;
        counter(
            e,
            names::CACHE_BYTES_FROM_BACKEND,
            "Bytes fetched from object stores into the cache",
            s.bytes_from_backend,
        )?;
        gauge(
            e,
            names::CACHE_LINES_RESIDENT,
            "Lines holding data",
            s.lines_resident,
        )?;
        gauge(
            e,
            names::CACHE_LINES_CAPACITY,
            "Lines the cache may hold",
            self.0.lines() as u64,
        )?;
        gauge(
            e,
            names::CACHE_LINE_SIZE_BYTES,
            "Bytes per cache line",
            self.0.line_size(),
        )?;
        Ok(())
    }
}
