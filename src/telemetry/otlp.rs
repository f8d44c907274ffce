//! OTLP export of the registry, as the config's `opentelemetry.metrics` section asks: the
//! attribute providers become the resource's attributes, and a periodic reader sends every
//! metric over HTTP/protobuf to the exporter's endpoint at `export_interval_millis`.
//!
//! The endpoint is a URL (`http://collector:4318`), or `HOST:PORT` with the scheme chosen by
//! `insecure` (`http` when true, `https` otherwise). A URL without a path gets the standard
//! `/v1/metrics`; one with a path is used as given.

use std::collections::BTreeMap;

use hyper::Uri;
use opentelemetry::KeyValue;
use opentelemetry_otlp::{MetricExporter, WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::metrics::{PeriodicReader, Temporality};

use super::TelemetryError;
use super::otlp_http::OtlpHttpClient;
use crate::config::{AttributeProvider, AttributeSource, OtlpExporterConfig, TelemetryConfig};

/// The `service.name` of msfs's resource, unless an attribute provider sets another.
const SERVICE_NAME: &str = "msfs";

/// The resource every exported metric carries: `service.name` and the SDK's own attributes,
/// then the configured providers in order (a later one wins on a clash).
pub(crate) fn resource(config: &TelemetryConfig) -> Resource {
    let mut attributes = BTreeMap::new();
    for provider in &config.attributes {
        attributes.extend(provider_attributes(provider));
    }
    Resource::builder()
        .with_service_name(SERVICE_NAME)
        .with_attributes(
            attributes
                .into_iter()
                .map(|(key, value)| KeyValue::new(key, value)),
        )
        .build()
}

/// One provider's attributes: `static` values as given; `host` and `process` properties
/// (`name`; `pid`) and `environment_variables` read now. What cannot be read is left out with
/// a warning: attributes are an add-on, never a reason to refuse the mount.
fn provider_attributes(provider: &AttributeProvider) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for (attribute, property) in &provider.attributes {
        let value = match provider.source {
            AttributeSource::Static => Some(property.clone()),
            AttributeSource::Host => match property.as_str() {
                "name" | "hostname" => hostname(),
                _ => None,
            },
            AttributeSource::Process => match property.as_str() {
                "pid" => Some(std::process::id().to_string()),
                _ => None,
            },
            AttributeSource::EnvironmentVariables => std::env::var(property).ok(),
        };
        match value {
            Some(value) => out.push((attribute.clone(), value)),
            None => tracing::warn!(
                attribute = %attribute,
                property = %property,
                source = ?provider.source,
                "metrics attribute has no value here (host: name; process: pid; \
                 environment_variables: a set variable); left out"
            ),
        }
    }
    out
}

fn hostname() -> Option<String> {
    let mut buffer = [0u8; 256];
    // SAFETY: the pointer and length describe `buffer`, which outlives the call.
    let rc = unsafe { libc::gethostname(buffer.as_mut_ptr().cast(), buffer.len()) };
    if rc != 0 {
        return None;
    }
    let end = buffer.iter().position(|&b| b == 0).unwrap_or(buffer.len());
    String::from_utf8(buffer[..end].to_vec())
        .ok()
        .filter(|h| !h.is_empty())
}

/// The URL exports are posted to; see the module docs.
pub(crate) fn endpoint_url(config: &OtlpExporterConfig) -> Result<Uri, TelemetryError> {
    let given = config.endpoint.trim();
    let with_scheme = if given.contains("://") {
        given.to_string()
    } else if config.insecure {
        format!("http://{given}")
    } else {
        format!("https://{given}")
    };
    let invalid = |reason: String| TelemetryError::Endpoint {
        endpoint: redact(given),
        reason,
    };
    let uri: Uri = with_scheme.parse().map_err(|e| invalid(format!("{e}")))?;
    match uri.scheme_str() {
        Some("http" | "https") => {}
        _ => return Err(invalid("expected an http:// or https:// URL".into())),
    }
    if uri.host().is_none_or(str::is_empty) {
        return Err(invalid("no host".into()));
    }
    if uri.path_and_query().is_none_or(|p| p.as_str() == "/") {
        let base = with_scheme.trim_end_matches('/');
        return format!("{base}/v1/metrics")
            .parse()
            .map_err(|e| invalid(format!("{e}")));
    }
    Ok(uri)
}

/// `uri` without any `user:password@`, for messages.
pub(crate) fn redact_uri(uri: &Uri) -> String {
    redact(&uri.to_string())
}

fn redact(endpoint: &str) -> String {
    let (scheme, rest) = match endpoint.split_once("://") {
        Some((scheme, rest)) => (format!("{scheme}://"), rest),
        None => (String::new(), endpoint),
    };
    let authority_end = rest.find('/').unwrap_or(rest.len());
    match rest[..authority_end].rfind('@') {
        Some(at) => format!("{scheme}***@{}", &rest[at + 1..]),
        None => endpoint.to_string(),
    }
}

/// The reader that exports to `exporter` every `export_interval`.
pub(crate) fn periodic_reader(
    config: &TelemetryConfig,
    exporter: &OtlpExporterConfig,
) -> Result<PeriodicReader<MetricExporter>, TelemetryError> {
    let endpoint = endpoint_url(exporter)?;
    let timeout = config.reader.export_timeout;
    let client = OtlpHttpClient::new(&endpoint, timeout)?;
    let exporter = MetricExporter::builder()
        .with_http()
        .with_http_client(client)
        .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
        .with_endpoint(endpoint.to_string())
        .with_timeout(timeout)
        .with_temporality(Temporality::Cumulative)
        .build()
        .map_err(|e| TelemetryError::Exporter(e.to_string()))?;
    tracing::info!(
        endpoint = %redact_uri(&endpoint),
        interval = ?config.reader.export_interval,
        "exporting metrics over OTLP/HTTP"
    );
    Ok(PeriodicReader::builder(exporter)
        .with_interval(config.reader.export_interval)
        .build())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::MetricsReaderConfig;
    use std::time::Duration;

    fn exporter(endpoint: &str, insecure: bool) -> OtlpExporterConfig {
        OtlpExporterConfig {
            endpoint: endpoint.into(),
            insecure,
        }
    }

    fn url(endpoint: &str, insecure: bool) -> String {
        endpoint_url(&exporter(endpoint, insecure))
            .map(|u| u.to_string())
            .unwrap_or_else(|e| format!("error: {e}"))
    }

    #[test]
    fn endpoints_become_metrics_urls() {
        assert_eq!(
            url("http://collector:4318", false),
            "http://collector:4318/v1/metrics"
        );
        assert_eq!(
            url("http://collector:4318/", true),
            "http://collector:4318/v1/metrics"
        );
        assert_eq!(
            url("https://c.example/otlp/v1/metrics", false),
            "https://c.example/otlp/v1/metrics"
        );
        assert_eq!(
            url("127.0.0.1:4318", true),
            "http://127.0.0.1:4318/v1/metrics"
        );
        assert_eq!(
            url("collector:4318", false),
            "https://collector:4318/v1/metrics"
        );
        assert!(url("ftp://collector", true).starts_with("error"));
        assert!(url("http://", true).starts_with("error"));
    }

    #[test]
    fn endpoint_credentials_never_reach_messages() {
        let message = url("http://user:hunter2@collector:4318 x", true);
        assert!(message.starts_with("error"), "{message}");
        assert!(!message.contains("hunter2"), "{message}");
        assert_eq!(
            redact("https://user:hunter2@c.example/v1/metrics"),
            "https://***@c.example/v1/metrics"
        );
        assert_eq!(redact("http://c.example/a@b"), "http://c.example/a@b");
    }

    #[test]
    fn providers_become_resource_attributes() {
        // SAFETY: a variable no other test reads.
        unsafe { std::env::set_var("MSFS_TEST_OTLP_ZONE", "zone-a") };
        let config = TelemetryConfig {
            attributes: vec![
                AttributeProvider {
                    source: AttributeSource::Static,
                    attributes: BTreeMap::from([
                        ("cluster".to_string(), "c1".to_string()),
                        ("service.name".to_string(), "msfs-test".to_string()),
                    ]),
                },
                AttributeProvider {
                    source: AttributeSource::Process,
                    attributes: BTreeMap::from([
                        ("pid".to_string(), "pid".to_string()),
                        ("nope".to_string(), "uid".to_string()),
                    ]),
                },
                AttributeProvider {
                    source: AttributeSource::EnvironmentVariables,
                    attributes: BTreeMap::from([
                        ("zone".to_string(), "MSFS_TEST_OTLP_ZONE".to_string()),
                        ("unset".to_string(), "MSFS_TEST_OTLP_UNSET".to_string()),
                    ]),
                },
                AttributeProvider {
                    source: AttributeSource::Static,
                    attributes: BTreeMap::from([("cluster".to_string(), "c2".to_string())]),
                },
            ],
            reader: MetricsReaderConfig {
                export_interval: Duration::from_secs(1),
                export_timeout: Duration::from_secs(1),
            },
            exporter: None,
        };
        let resource = resource(&config);
        let get = |key: &str| {
            resource
                .get(&opentelemetry::Key::from(key.to_string()))
                .map(|v| v.to_string())
        };
        assert_eq!(get("cluster").as_deref(), Some("c2"));
        assert_eq!(get("service.name").as_deref(), Some("msfs-test"));
        assert_eq!(get("pid"), Some(std::process::id().to_string()));
        assert_eq!(get("zone").as_deref(), Some("zone-a"));
        assert_eq!(get("nope"), None);
        assert_eq!(get("unset"), None);
    }
}
