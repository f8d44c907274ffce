//! OTLP export of a real mount: a collector stand-in on 127.0.0.1 (a small hyper server taking
//! `POST /v1/metrics`, decoding the protobuf with `opentelemetry-proto`) receives the cache and
//! backend metrics of reads done through FUSE, with the configured attributes on the resource.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::common::{Garage, MsfsMount, config_yaml_with, read_direct, s3_backend_yaml};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use opentelemetry_proto::tonic::collector::metrics::v1::{
    ExportMetricsServiceRequest, ExportMetricsServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
use opentelemetry_proto::tonic::metrics::v1::{metric, number_data_point};
use prost::Message;
use tokio::net::TcpListener;

const MIB: usize = 1 << 20;
/// Longest wait for an export that shows the reads; exports run every 200 ms.
const EXPORT_WAIT: Duration = Duration::from_secs(60);

/// What the stand-in collector received: decoded requests, and bodies or paths it refused.
#[derive(Default)]
struct Received {
    exports: Vec<ExportMetricsServiceRequest>,
    refused: Vec<String>,
}

struct Collector {
    address: SocketAddr,
    received: Arc<Mutex<Received>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Collector {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Collector {
    async fn start() -> Collector {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let address = listener.local_addr().expect("local address");
        let received = Arc::new(Mutex::new(Received::default()));
        let shared = received.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let received = shared.clone();
                tokio::spawn(async move {
                    let service = service_fn(move |request| accept(request, received.clone()));
                    let _ = http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        Collector {
            address,
            received,
            task,
        }
    }

    fn latest(&self) -> Option<ExportMetricsServiceRequest> {
        self.received.lock().unwrap().exports.last().cloned()
    }

    fn summary(&self) -> String {
        let received = self.received.lock().unwrap();
        format!(
            "{} exports received, refused: {:?}; last: {:#?}",
            received.exports.len(),
            received.refused,
            received.exports.last().map(metric_names)
        )
    }
}

async fn accept(
    request: Request<Incoming>,
    received: Arc<Mutex<Received>>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let path = request.uri().path().to_string();
    let content_type = request
        .headers()
        .get(hyper::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    let is_export = request.method() == Method::POST && path == "/v1/metrics";
    let body = match request.into_body().collect().await {
        Ok(body) => body.to_bytes(),
        Err(e) => {
            received.lock().unwrap().refused.push(format!("body: {e}"));
            return Ok(status(StatusCode::BAD_REQUEST, Bytes::new()));
        }
    };
    if !is_export || content_type != "application/x-protobuf" {
        received
            .lock()
            .unwrap()
            .refused
            .push(format!("{path} ({content_type})"));
        return Ok(status(StatusCode::NOT_FOUND, Bytes::new()));
    }
    match ExportMetricsServiceRequest::decode(body) {
        Ok(export) => {
            received.lock().unwrap().exports.push(export);
            let reply = ExportMetricsServiceResponse::default().encode_to_vec();
            Ok(status(StatusCode::OK, Bytes::from(reply)))
        }
        Err(e) => {
            received
                .lock()
                .unwrap()
                .refused
                .push(format!("decode: {e}"));
            Ok(status(StatusCode::BAD_REQUEST, Bytes::new()))
        }
    }
}

fn status(code: StatusCode, body: Bytes) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(body));
    *response.status_mut() = code;
    response.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/x-protobuf"),
    );
    response
}

fn string_of(value: &Option<AnyValue>) -> Option<String> {
    match value.as_ref()?.value.as_ref()? {
        any_value::Value::StringValue(s) => Some(s.clone()),
        any_value::Value::IntValue(i) => Some(i.to_string()),
        other => Some(format!("{other:?}")),
    }
}

fn has_labels(attributes: &[KeyValue], labels: &[(&str, &str)]) -> bool {
    labels.iter().all(|(key, value)| {
        attributes
            .iter()
            .any(|kv| kv.key == *key && string_of(&kv.value).as_deref() == Some(*value))
    })
}

fn metric_names(export: &ExportMetricsServiceRequest) -> Vec<String> {
    export
        .resource_metrics
        .iter()
        .flat_map(|r| &r.scope_metrics)
        .flat_map(|s| &s.metrics)
        .map(|m| m.name.clone())
        .collect()
}

/// The total of the sum `name`'s data points carrying `labels`; `None` when it has none.
fn sum(export: &ExportMetricsServiceRequest, name: &str, labels: &[(&str, &str)]) -> Option<u64> {
    let mut total = None;
    for metric in export
        .resource_metrics
        .iter()
        .flat_map(|r| &r.scope_metrics)
        .flat_map(|s| &s.metrics)
        .filter(|m| m.name == name)
    {
        let Some(metric::Data::Sum(data)) = &metric.data else {
            panic!("{name} is not a sum: {:?}", metric.data);
        };
        assert!(data.is_monotonic, "{name} is not monotonic");
        for point in data
            .data_points
            .iter()
            .filter(|p| has_labels(&p.attributes, labels))
        {
            let value = match point.value {
                Some(number_data_point::Value::AsInt(i)) => u64::try_from(i).expect("positive"),
                Some(number_data_point::Value::AsDouble(d)) => d as u64,
                None => 0,
            };
            *total.get_or_insert(0) += value;
        }
    }
    total
}

fn resource_attribute(export: &ExportMetricsServiceRequest, key: &str) -> Option<String> {
    export
        .resource_metrics
        .iter()
        .filter_map(|r| r.resource.as_ref())
        .flat_map(|r| &r.attributes)
        .find(|kv| kv.key == key)
        .and_then(|kv| string_of(&kv.value))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cache_and_backend_metrics_reach_the_collector_with_the_configured_attributes() {
    let garage = Garage::start();
    garage.create_bucket("exported");
    let body: Vec<u8> = (0..2 * MIB).map(|i| (i % 251) as u8).collect();
    garage.put_object("exported", "obj", body.clone()).await;
    let collector = Collector::start().await;
    let top = format!(
        "cache_line_size: {MIB}\n\
         cache_lines: 16\n\
         opentelemetry:\n  \
           metrics:\n    \
             attributes:\n      \
               - type: static\n        \
                 options:\n          \
                   attributes:\n            \
                     cluster: otlp-test\n            \
                     msfs.node: node-7\n      \
               - type: process\n        \
                 options:\n          \
                   attributes:\n            \
                     process.pid: pid\n    \
             reader:\n      \
               type: periodic\n      \
               options:\n        \
                 export_interval_millis: 200\n    \
             exporter:\n      \
               type: otlp\n      \
               options:\n        \
                 endpoint: http://{}\n        \
                 insecure: true\n",
        collector.address
    );
    let config = config_yaml_with(&top, &[s3_backend_yaml("data", "exported", "", &garage)]);
    let mount = MsfsMount::start(&config, "yaml").expect("mount");

    let gets_before = garage.s3_requests("GetObject");
    assert!(read_direct(&mount.path().join("data/obj")) == body);
    let gets = garage.s3_requests("GetObject") - gets_before;
    assert_eq!(gets, 2, "one GET per 1 MiB line");

    // Exports are cumulative: wait for one taken after the reads.
    let get_ok = [("backend", "data"), ("operation", "get"), ("status", "ok")];
    let deadline = Instant::now() + EXPORT_WAIT;
    let export = loop {
        if let Some(export) = collector.latest()
            && sum(&export, "msfs.io.bytes_read", &[("backend", "data")]) == Some(body.len() as u64)
            && sum(&export, "msfs.backend.operations", &get_ok) == Some(gets)
        {
            break export;
        }
        assert!(
            Instant::now() < deadline,
            "no export showed the reads within {EXPORT_WAIT:?}; {}\nmsfs stdout:\n{}",
            collector.summary(),
            mount.stdout_text()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };

    // The cache's counters, observed from the line cache at collection time.
    let fetched = sum(&export, "msfs.cache.misses", &[]).unwrap_or(0)
        + sum(&export, "msfs.cache.prefetches", &[]).unwrap_or(0);
    assert_eq!(fetched, 2, "{:#?}", metric_names(&export));
    assert_eq!(
        sum(&export, "msfs.cache.bytes_from_backend", &[]),
        Some(body.len() as u64)
    );
    assert!(
        sum(&export, "msfs.backend.operations", &[("operation", "list")]).is_some_and(|n| n >= 1),
        "the mount-time LIST check is counted"
    );

    // The configured attributes, on the resource rather than on every series.
    assert_eq!(
        resource_attribute(&export, "cluster").as_deref(),
        Some("otlp-test")
    );
    assert_eq!(
        resource_attribute(&export, "msfs.node").as_deref(),
        Some("node-7")
    );
    assert_eq!(
        resource_attribute(&export, "process.pid"),
        Some(mount.pid().to_string())
    );
    assert_eq!(
        resource_attribute(&export, "service.name").as_deref(),
        Some("msfs")
    );
    assert!(
        collector.received.lock().unwrap().refused.is_empty(),
        "{}",
        collector.summary()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_collector_is_logged_once_and_blocks_nothing() {
    let garage = Garage::start();
    garage.create_bucket("lonely");
    garage
        .put_object("lonely", "f.txt", b"content".to_vec())
        .await;
    // A port nothing listens on: every export is refused at once.
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free port");
    let top = format!(
        "opentelemetry:\n  metrics:\n    reader:\n      options: {{export_interval_millis: 100}}\n    \
         exporter:\n      type: otlp\n      options: {{endpoint: \"http://{closed}\", insecure: true}}\n"
    );
    let config = config_yaml_with(&top, &[s3_backend_yaml("data", "lonely", "", &garage)]);
    let mut mount = MsfsMount::start(&config, "yaml").expect("mount");
    assert_eq!(
        std::fs::read(mount.path().join("data/f.txt")).expect("read"),
        b"content"
    );
    let failed = |log: &str| log.matches("OTLP metrics export failed").count();
    let deadline = Instant::now() + EXPORT_WAIT;
    while failed(&mount.stdout_text()) == 0 {
        assert!(
            Instant::now() < deadline,
            "no export failure logged within {EXPORT_WAIT:?}:\n{}",
            mount.stdout_text()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Several more export intervals: the same failure is not repeated.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(mount.stop_with_umount().success());
    let log = mount.stdout_text();
    assert_eq!(failed(&log), 1, "{log}");
}
