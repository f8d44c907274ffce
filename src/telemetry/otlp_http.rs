//! The HTTP client the OTLP exporter posts with: hyper-util's pooled client (already in the
//! build for the AWS SDK, so no second HTTP stack), TLS by rustls with the system's roots.
//!
//! The SDK's periodic reader exports from a plain thread of its own, driving the exporter's
//! future with a minimal executor that has no tokio reactor. So the client owns a one-thread
//! tokio runtime and runs each request there; the exporter's thread only waits for the result.
//! Owning it, rather than borrowing the daemon's, keeps the final export at shutdown working
//! after the daemon's runtime is gone.

use std::sync::Mutex;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::{Request, Response, Uri};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use opentelemetry_http::{HttpClient, HttpError};

use super::TelemetryError;

/// Largest collector response read; an OTLP response is a few bytes.
const MAX_RESPONSE_BYTES: usize = 1 << 20;

type TlsClient = Client<hyper_rustls::HttpsConnector<HttpConnector>, Full<Bytes>>;
type PlainClient = Client<HttpConnector, Full<Bytes>>;

#[derive(Clone)]
enum Transport {
    Plain(PlainClient),
    Tls(TlsClient),
}

pub(crate) struct OtlpHttpClient {
    /// Always `Some` until dropped.
    runtime: Option<tokio::runtime::Runtime>,
    transport: Transport,
    /// Covers connecting, sending and reading the response.
    timeout: Duration,
    /// Where exports go, credentials removed: for log lines.
    shown_endpoint: String,
    /// The last failure logged, so a collector that stays down is reported once, not every
    /// export interval.
    last_failure: Mutex<Option<String>>,
}

impl std::fmt::Debug for OtlpHttpClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OtlpHttpClient")
            .field("endpoint", &self.shown_endpoint)
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

impl OtlpHttpClient {
    /// A client for `endpoint`: TLS when its scheme is `https`.
    pub(crate) fn new(endpoint: &Uri, timeout: Duration) -> Result<OtlpHttpClient, TelemetryError> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("msfs-otlp")
            .enable_all()
            .build()
            .map_err(TelemetryError::Runtime)?;
        let shown_endpoint = super::otlp::redact_uri(endpoint);
        let transport = if endpoint.scheme_str() == Some("https") {
            let connector = hyper_rustls::HttpsConnectorBuilder::new()
                .with_native_roots()
                .map_err(|source| TelemetryError::RootCertificates {
                    endpoint: shown_endpoint.clone(),
                    source,
                })?
                .https_only()
                .enable_http1()
                .build();
            Transport::Tls(Client::builder(TokioExecutor::new()).build(connector))
        } else {
            Transport::Plain(Client::builder(TokioExecutor::new()).build(HttpConnector::new()))
        };
        Ok(OtlpHttpClient {
            runtime: Some(runtime),
            transport,
            timeout,
            shown_endpoint,
            last_failure: Mutex::new(None),
        })
    }

    /// Logs a failure when it differs from the last one, and a recovery once.
    fn note(&self, failure: Option<String>) {
        let mut last = self.last_failure.lock().unwrap_or_else(|p| p.into_inner());
        if *last == failure {
            return;
        }
        match &failure {
            Some(error) => tracing::warn!(
                endpoint = %self.shown_endpoint,
                error = %error,
                "OTLP metrics export failed; retrying at the next interval"
            ),
            None => tracing::info!(endpoint = %self.shown_endpoint, "OTLP metrics export works"),
        }
        *last = failure;
    }
}

impl Drop for OtlpHttpClient {
    fn drop(&mut self) {
        // Dropping a runtime blocks, which tokio forbids inside another runtime's task.
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

async fn exchange(
    transport: Transport,
    request: Request<Full<Bytes>>,
) -> Result<Response<Bytes>, HttpError> {
    let response = match transport {
        Transport::Plain(client) => client.request(request).await?,
        Transport::Tls(client) => client.request(request).await?,
    };
    let (parts, body) = response.into_parts();
    let body = Limited::new(body, MAX_RESPONSE_BYTES)
        .collect()
        .await?
        .to_bytes();
    Ok(Response::from_parts(parts, body))
}

#[async_trait::async_trait]
impl HttpClient for OtlpHttpClient {
    async fn send_bytes(&self, request: Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
        let Some(runtime) = &self.runtime else {
            return Err("the OTLP client is shut down".into());
        };
        let (parts, body) = request.into_parts();
        let request = Request::from_parts(parts, Full::new(body));
        let transport = self.transport.clone();
        let timeout = self.timeout;
        let result = runtime
            .spawn(async move { tokio::time::timeout(timeout, exchange(transport, request)).await })
            .await;
        let result = match result {
            Ok(Ok(result)) => result,
            Ok(Err(_elapsed)) => Err(format!("no answer within {timeout:?}").into()),
            Err(join) => Err(format!("the request task ended: {join}").into()),
        };
        match &result {
            Ok(response) if response.status().is_success() => self.note(None),
            Ok(response) => self.note(Some(format!(
                "the collector answered {}: {}",
                response.status(),
                String::from_utf8_lossy(&response.body()[..response.body().len().min(200)])
            ))),
            Err(e) => self.note(Some(e.to_string())),
        }
        result
    }
}
