//! A stand-in for the Kubernetes API server that serves ServiceAccounts over plain HTTP on
//! 127.0.0.1, for the plugin's lookup of a pod's `eks.amazonaws.com/role-arn` annotation
//! (`authenticationSource: pod` without `roleArn`).
//!
//! Why a fixture: no API server can be installed on the test machines, and the plugin needs
//! exactly one call of the API: `GET /api/v1/namespaces/{ns}/serviceaccounts/{name}`. The
//! fixture answers it with the ServiceAccount's JSON, answers anything else with the `Status`
//! JSON of a 404 (what the API server sends for an unknown object), and records every request
//! so a test can tell that the plugin asked, and with which credentials.
//! [`KubeApi::write_kubeconfig`] points a client at it through a kubeconfig with a dummy token.
//!
//! hyper runs on the fixture's own thread and runtime, so it does not depend on whichever
//! runtime, if any, the test uses. Dropping the fixture stops it and joins the thread.

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::TcpListener;
use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::sync::oneshot;

/// The bearer token of the kubeconfig user [`KubeApi::write_kubeconfig`] writes.
pub const TOKEN: &str = "kube-fixture-token";
/// The annotation the plugin reads.
pub const ROLE_ARN_ANNOTATION: &str = "eks.amazonaws.com/role-arn";

/// One request the fixture answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seen {
    pub method: String,
    pub path: String,
    /// The `Authorization` header, if any.
    pub authorization: Option<String>,
}

/// A running fixture; see the module docs.
pub struct KubeApi {
    port: u16,
    seen: Arc<Mutex<Vec<Seen>>>,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

/// What the fixture serves: the JSON of each ServiceAccount, by (namespace, name).
type Accounts = HashMap<(String, String), String>;

impl KubeApi {
    /// Serves `accounts`, each `(namespace, name, role-arn annotation)`; `None` for a
    /// ServiceAccount without the annotation.
    pub fn start(accounts: &[(&str, &str, Option<&str>)]) -> KubeApi {
        let accounts: Accounts = accounts
            .iter()
            .map(|(namespace, name, role)| {
                let key = (namespace.to_string(), name.to_string());
                (key, service_account_json(namespace, name, *role))
            })
            .collect();
        let accounts = Arc::new(accounts);
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the kube API fixture");
        listener.set_nonblocking(true).expect("nonblocking");
        let port = listener.local_addr().expect("local addr").port();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let (stop, stopped) = oneshot::channel();
        let thread = {
            let seen = seen.clone();
            std::thread::Builder::new()
                .name("kube-api-fixture".into())
                .spawn(move || serve(listener, accounts, seen, stopped))
                .expect("spawn the kube API fixture")
        };
        KubeApi {
            port,
            seen,
            stop: Some(stop),
            thread: Some(thread),
        }
    }

    /// `http://127.0.0.1:PORT`.
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Every request answered so far, in order.
    pub fn requests(&self) -> Vec<Seen> {
        self.seen
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Writes a kubeconfig at `path` whose current context is this fixture, with a user
    /// authenticating by the bearer token [`TOKEN`].
    pub fn write_kubeconfig(&self, path: &Path) {
        let text = format!(
            "apiVersion: v1\n\
             kind: Config\n\
             clusters:\n\
             - name: fixture\n  cluster:\n    server: {endpoint}\n\
             users:\n\
             - name: fixture\n  user:\n    token: {TOKEN}\n\
             contexts:\n\
             - name: fixture\n  context:\n    cluster: fixture\n    user: fixture\n    namespace: default\n\
             current-context: fixture\n",
            endpoint = self.endpoint()
        );
        std::fs::write(path, text).expect("write kubeconfig");
    }
}

impl Drop for KubeApi {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// The fixture's thread: accepts connections until `stopped`, then drops the runtime, which
/// ends every connection still open.
fn serve(
    listener: TcpListener,
    accounts: Arc<Accounts>,
    seen: Arc<Mutex<Vec<Seen>>>,
    mut stopped: oneshot::Receiver<()>,
) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("fixture runtime");
    runtime.block_on(async move {
        let listener = tokio::net::TcpListener::from_std(listener).expect("tokio listener");
        loop {
            let stream = tokio::select! {
                _ = &mut stopped => return,
                accepted = listener.accept() => match accepted {
                    Ok((stream, _)) => stream,
                    Err(_) => continue,
                },
            };
            let accounts = accounts.clone();
            let seen = seen.clone();
            tokio::spawn(async move {
                let service = service_fn(move |request| {
                    let response = answer(&request, &accounts, &seen);
                    async move { Ok::<_, Infallible>(response) }
                });
                let _ = http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
}

fn answer(
    request: &Request<Incoming>,
    accounts: &Accounts,
    seen: &Mutex<Vec<Seen>>,
) -> Response<Full<Bytes>> {
    let path = request.uri().path().to_string();
    seen.lock()
        .unwrap_or_else(PoisonError::into_inner)
        .push(Seen {
            method: request.method().to_string(),
            path: path.clone(),
            authorization: request
                .headers()
                .get(hyper::header::AUTHORIZATION)
                .and_then(|v| v.to_str().ok())
                .map(str::to_string),
        });
    let wanted = path
        .strip_prefix("/api/v1/namespaces/")
        .and_then(|rest| rest.split_once("/serviceaccounts/"))
        .filter(|_| request.method() == hyper::Method::GET);
    match wanted.and_then(|(ns, name)| accounts.get(&(ns.to_string(), name.to_string()))) {
        Some(json) => json_response(StatusCode::OK, json.clone()),
        None => {
            let name = wanted.map_or("", |(_, name)| name);
            json_response(StatusCode::NOT_FOUND, not_found_json(name))
        }
    }
}

fn json_response(status: StatusCode, body: String) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    response.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/json"),
    );
    response
}

fn service_account_json(namespace: &str, name: &str, role: Option<&str>) -> String {
    let mut metadata = serde_json::json!({
        "name": name,
        "namespace": namespace,
        "uid": "00000000-0000-0000-0000-000000000001",
        "resourceVersion": "1",
    });
    if let Some(role) = role {
        metadata["annotations"] = serde_json::json!({ ROLE_ARN_ANNOTATION: role });
    }
    serde_json::json!({
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": metadata,
    })
    .to_string()
}

/// The API server's answer for an object that does not exist.
fn not_found_json(name: &str) -> String {
    serde_json::json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": format!("serviceaccounts \"{name}\" not found"),
        "reason": "NotFound",
        "details": {"name": name, "kind": "serviceaccounts"},
        "code": 404,
    })
    .to_string()
}
