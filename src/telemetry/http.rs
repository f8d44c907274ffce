//! The Prometheus endpoint: `GET /metrics` (Prometheus text format 0.0.4) and `GET /healthz`, on
//! the address of the config's top-level `endpoint` (e.g. `http://0.0.0.0:9100`).

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

use super::Metrics;
use super::prometheus::CONTENT_TYPE;

/// A running endpoint; stops when dropped.
pub struct MetricsServer {
    pub local_addr: SocketAddr,
    task: JoinHandle<()>,
}

impl Drop for MetricsServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// `http://HOST:PORT` (or bare `HOST:PORT`) → `HOST:PORT`.
fn listen_address(endpoint: &str) -> Result<&str, String> {
    let rest = endpoint.strip_prefix("http://").unwrap_or(endpoint);
    let address = rest.trim_end_matches('/');
    if address.is_empty() || address.contains('/') {
        return Err(format!("endpoint {endpoint:?}: expected http://HOST:PORT"));
    }
    Ok(address)
}

pub async fn serve_metrics(endpoint: &str, metrics: Arc<Metrics>) -> Result<MetricsServer, String> {
    let address = listen_address(endpoint)?;
    let listener = TcpListener::bind(address)
        .await
        .map_err(|e| format!("endpoint {endpoint}: cannot listen: {e}"))?;
    let local_addr = listener.local_addr().map_err(|e| e.to_string())?;
    tracing::info!(%local_addr, "serving /metrics and /healthz");
    let task = tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let metrics = metrics.clone();
            tokio::spawn(async move {
                let service = service_fn(move |request| respond(request, metrics.clone()));
                if let Err(e) = http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await
                {
                    tracing::debug!(error = %e, "metrics connection ended");
                }
            });
        }
    });
    Ok(MetricsServer { local_addr, task })
}

async fn respond(
    request: Request<Incoming>,
    metrics: Arc<Metrics>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let (status, content_type, body) = match request.uri().path() {
        "/metrics" => (StatusCode::OK, CONTENT_TYPE, metrics.render()),
        "/healthz" => (StatusCode::OK, "text/plain", "ok\n".to_string()),
        _ => (
            StatusCode::NOT_FOUND,
            "text/plain",
            "not found\n".to_string(),
        ),
    };
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    if let Ok(value) = content_type.parse() {
        response
            .headers_mut()
            .insert(hyper::header::CONTENT_TYPE, value);
    }
    Ok(response)
}

#[cfg(test)]
mod tests {
    use super::listen_address;

    #[test]
    fn endpoints_become_listen_addresses() {
        assert_eq!(listen_address("http://0.0.0.0:9100"), Ok("0.0.0.0:9100"));
        assert_eq!(listen_address("127.0.0.1:9100/"), Ok("127.0.0.1:9100"));
        assert!(listen_address("http://host:1/metrics").is_err());
    }
}
