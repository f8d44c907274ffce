//! A real single-node garage S3 server on 127.0.0.1, one per test.
//!
//! `Garage::start()` writes a config into its own temporary directory, starts
//! `garage server` on random loopback ports, assigns and applies a one-node
//! layout, imports an access key whose id and secret are chosen here (so a
//! config file can be written before anything runs), and returns only when
//! the S3 API answers. Dropping the value kills that one garage process and
//! removes the directory.
//!
//! Setup is synchronous (plain `std::process` and `std::net`) so it works both
//! inside and outside a tokio runtime; the object helpers are `async` and go
//! through `aws-sdk-s3`, the same client family msfs itself uses.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use aws_sdk_s3::Client;
use aws_sdk_s3::config::{BehaviorVersion, Credentials, Region};
use aws_sdk_s3::primitives::ByteStream;

/// Region garage is configured with and the clients sign for.
pub const REGION: &str = "us-east-1";
/// The imported access key id: `GK` and 24 hex digits, the shape garage itself generates.
pub const ACCESS_KEY_ID: &str = "GK6d7366732d746573742d6b31";
/// The imported secret: 64 hex digits, the shape garage itself generates.
pub const SECRET_ACCESS_KEY: &str =
    "6d7366732d746573742d7365637265742d6e6f742d666f722d70726f6475637e";

/// Longest wait for garage to come up before the test panics.
const STARTUP_TIMEOUT: Duration = Duration::from_secs(60);
/// Longest wait for one `garage` CLI invocation.
const CLI_TIMEOUT: Duration = Duration::from_secs(30);
/// Pause between readiness probes.
const POLL_INTERVAL: Duration = Duration::from_millis(20);
/// Startup attempts; a retry happens only when a picked port was taken meanwhile.
const START_ATTEMPTS: usize = 3;
/// Lines of garage's log shown when something goes wrong.
const LOG_TAIL_LINES: usize = 60;
/// Log filter for the server; override with `MSFS_TEST_GARAGE_LOG`.
const DEFAULT_LOG_FILTER: &str = "warn,garage=info";

/// A running single-node garage; see the module docs.
pub struct Garage {
    child: Child,
    bin: PathBuf,
    config_path: PathBuf,
    log_path: PathBuf,
    s3_port: u16,
    admin_port: u16,
    // Last field: removed after `Drop::drop` has stopped the server.
    dir: tempfile::TempDir,
}

/// Why one startup attempt failed.
struct StartFailure {
    message: String,
    log_tail: String,
    port_taken: bool,
}

impl Garage {
    /// Starts garage and waits until its S3 API answers. Panics with garage's
    /// log if it does not come up within a minute.
    pub fn start() -> Garage {
        let bin = garage_bin();
        let mut last = None;
        for _ in 0..START_ATTEMPTS {
            match Self::try_start(&bin) {
                Ok(garage) => return garage,
                Err(failure) if failure.port_taken => last = Some(failure),
                Err(failure) => panic_with(&failure),
            }
        }
        panic_with(&last.expect("at least one attempt ran"))
    }

    fn try_start(bin: &Path) -> Result<Garage, StartFailure> {
        let dir = tempfile::Builder::new()
            .prefix("msfs-garage-")
            .tempdir()
            .expect("create a temporary directory for garage");
        let [rpc_port, s3_port, admin_port] = free_ports();
        let config_path = dir.path().join("garage.toml");
        let log_path = dir.path().join("garage.log");
        std::fs::write(
            &config_path,
            config_toml(dir.path(), rpc_port, s3_port, admin_port),
        )
        .expect("write garage.toml");

        let log = std::fs::File::create(&log_path).expect("create garage.log");
        let log_err = log.try_clone().expect("clone garage.log handle");
        let mut server = command(bin, &config_path);
        server
            .arg("server")
            .env(
                "RUST_LOG",
                std::env::var("MSFS_TEST_GARAGE_LOG").unwrap_or(DEFAULT_LOG_FILTER.into()),
            )
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log_err);
        let child = server
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {} server: {e}", bin.display()));

        let mut garage = Garage {
            child,
            bin: bin.to_path_buf(),
            config_path,
            log_path,
            s3_port,
            admin_port,
            dir,
        };
        // On error `garage` is dropped here, which kills the server.
        match garage.bootstrap(rpc_port) {
            Ok(()) => Ok(garage),
            Err(message) => {
                let log_tail = garage.log_tail();
                let port_taken = garage.log_shows_port_taken();
                Err(StartFailure {
                    message,
                    log_tail,
                    port_taken,
                })
            }
        }
    }

    /// Layout, key and readiness: everything between `garage server` and a usable S3 API.
    fn bootstrap(&mut self, rpc_port: u16) -> Result<(), String> {
        let deadline = Instant::now() + STARTUP_TIMEOUT;
        let node_key = self.dir.path().join("meta").join("node_key.pub");

        self.wait_until(deadline, "the node key and the RPC port", || {
            std::fs::read(&node_key).is_ok_and(|k| k.len() == 32)
                && TcpStream::connect(("127.0.0.1", rpc_port)).is_ok()
        })?;
        let node_id = hex(&std::fs::read(&node_key).map_err(|e| format!("read node key: {e}"))?);

        self.cli_retrying(
            deadline,
            &["layout", "assign", "-z", "dc1", "-c", "1G", &node_id],
        )?;
        self.cli(&["layout", "apply", "--version", "1"])?;
        let admin_port = self.admin_port;
        self.wait_until(deadline, "the admin /health endpoint to report 200", || {
            http_status(admin_port, "/health") == Some(200)
        })?;

        self.cli(&[
            "key",
            "import",
            "--yes",
            "-n",
            "msfs-test",
            ACCESS_KEY_ID,
            SECRET_ACCESS_KEY,
        ])?;

        // An anonymous ListBuckets is refused (403): proof the S3 router is serving.
        let s3_port = self.s3_port;
        self.wait_until(deadline, "the S3 API to answer", || {
            http_status(s3_port, "/").is_some()
        })
    }

    /// Polls `ready` until it holds, garage exits, or the deadline passes.
    fn wait_until(
        &mut self,
        deadline: Instant,
        what: &str,
        mut ready: impl FnMut() -> bool,
    ) -> Result<(), String> {
        loop {
            if ready() {
                return Ok(());
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                return Err(format!("garage exited ({status}) while waiting for {what}"));
            }
            // A listener that cannot bind is logged, but garage keeps running.
            if self.log_shows_port_taken() {
                return Err(format!("a port was taken while waiting for {what}"));
            }
            if Instant::now() >= deadline {
                return Err(format!(
                    "garage did not become ready within {STARTUP_TIMEOUT:?}: waited for {what}"
                ));
            }
            std::thread::sleep(POLL_INTERVAL);
        }
    }

    /// Whether garage logged a failed bind (another process took a picked port).
    fn log_shows_port_taken(&self) -> bool {
        std::fs::read(&self.log_path)
            .is_ok_and(|log| String::from_utf8_lossy(&log).contains("Address already in use"))
    }

    /// Runs a CLI command until it succeeds: right after boot the CLI's RPC
    /// connection can be refused while the node finishes starting.
    fn cli_retrying(&mut self, deadline: Instant, args: &[&str]) -> Result<String, String> {
        loop {
            match self.cli(args) {
                Ok(out) => return Ok(out),
                Err(e) if Instant::now() >= deadline => return Err(e),
                Err(_) => {
                    if let Ok(Some(status)) = self.child.try_wait() {
                        return Err(format!(
                            "garage exited ({status}) during `{}`",
                            args.join(" ")
                        ));
                    }
                    if self.log_shows_port_taken() {
                        return Err(format!("a port was taken during `{}`", args.join(" ")));
                    }
                    std::thread::sleep(POLL_INTERVAL * 5);
                }
            }
        }
    }

    /// Runs `garage -c CONFIG ARGS…` and returns its stdout, or a message with both streams.
    fn cli(&self, args: &[&str]) -> Result<String, String> {
        let mut cmd = command(&self.bin, &self.config_path);
        cmd.args(args).env("RUST_LOG", "warn");
        let shown = format!("garage {}", args.join(" "));
        let out = run_bounded(cmd, CLI_TIMEOUT).map_err(|e| format!("`{shown}`: {e}"))?;
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).into_owned())
        } else {
            Err(format!(
                "`{shown}` failed ({}):\n{}{}",
                out.status,
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ))
        }
    }

    /// Creates `name` and grants read, write and owner on it to the imported key.
    /// Panics (with garage's log) if either step fails.
    pub fn create_bucket(&self, name: &str) {
        let result = self.cli(&["bucket", "create", name]).and_then(|_| {
            self.cli(&[
                "bucket",
                "allow",
                "--read",
                "--write",
                "--owner",
                name,
                "--key",
                ACCESS_KEY_ID,
            ])
        });
        if let Err(e) = result {
            panic!(
                "create bucket {name:?}: {e}\n--- garage log (tail) ---\n{}",
                self.log_tail()
            );
        }
    }

    /// Imports another principal (`id`: `GK` and 24 hex digits; `secret`: 64 hex digits),
    /// allowed to read `readable` buckets and nothing else.
    pub fn import_reader(&self, name: &str, id: &str, secret: &str, readable: &[&str]) {
        let mut result = self.cli(&["key", "import", "--yes", "-n", name, id, secret]);
        for bucket in readable {
            result =
                result.and_then(|_| self.cli(&["bucket", "allow", "--read", bucket, "--key", id]));
        }
        if let Err(e) = result {
            panic!(
                "import key {name:?}: {e}\n--- garage log (tail) ---\n{}",
                self.log_tail()
            );
        }
    }

    /// Takes read (and with it list) on `bucket` back from key `id`.
    pub fn deny_read(&self, bucket: &str, id: &str) {
        if let Err(e) = self.cli(&["bucket", "deny", "--read", bucket, "--key", id]) {
            panic!("deny read on {bucket:?}: {e}");
        }
    }

    /// `http://127.0.0.1:PORT` of the S3 API.
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.s3_port)
    }

    pub fn access_key(&self) -> &str {
        ACCESS_KEY_ID
    }

    pub fn secret_key(&self) -> &str {
        SECRET_ACCESS_KEY
    }

    pub fn region(&self) -> &str {
        REGION
    }

    /// How many requests of one S3 API (e.g. `"GetObject"`) garage has served so far, from its
    /// own metrics: what the backend really saw, whatever msfs believes it sent.
    pub fn s3_requests(&self, api: &str) -> u64 {
        let (status, body) = http_get(self.admin_port, "/metrics").expect("garage /metrics");
        assert_eq!(status, 200, "garage /metrics: {body}");
        let series = format!("api_s3_request_counter{{api_endpoint=\"{api}\"}}");
        body.lines()
            .find_map(|line| line.strip_prefix(&series))
            .and_then(|value| value.trim().parse().ok())
            .unwrap_or(0)
    }

    /// The last lines of garage's log, for failure messages.
    pub fn log_tail(&self) -> String {
        tail(&self.log_path, LOG_TAIL_LINES)
    }

    /// A path-style S3 client with the imported key, pointed at this garage.
    pub fn client(&self) -> Client {
        self.client_with_credentials(ACCESS_KEY_ID, SECRET_ACCESS_KEY)
    }

    /// Like [`Garage::client`] but signing with other credentials (e.g. a wrong secret).
    pub fn client_with_credentials(&self, access_key: &str, secret_key: &str) -> Client {
        let config = aws_sdk_s3::Config::builder()
            .behavior_version(BehaviorVersion::latest())
            .region(Region::new(REGION))
            .endpoint_url(self.endpoint())
            .force_path_style(true)
            .credentials_provider(Credentials::new(
                access_key,
                secret_key,
                None,
                None,
                "msfs-tests",
            ))
            .build();
        Client::from_conf(config)
    }

    /// PUTs `body` at `bucket/key`; panics on failure.
    pub async fn put_object(&self, bucket: &str, key: &str, body: impl Into<Vec<u8>>) {
        let body: Vec<u8> = body.into();
        if let Err(e) = self
            .client()
            .put_object()
            .bucket(bucket)
            .key(key)
            .body(ByteStream::from(body))
            .send()
            .await
        {
            panic!("put s3://{bucket}/{key}: {}", error_text(&e));
        }
    }

    /// GETs the whole object; panics if it is missing or the request fails.
    pub async fn get_object(&self, bucket: &str, key: &str) -> Vec<u8> {
        match self.try_get_object(bucket, key).await {
            Some(bytes) => bytes,
            None => panic!("get s3://{bucket}/{key}: no such key"),
        }
    }

    /// GETs the whole object, `None` if there is no such key; panics on any other failure.
    /// A body cut off midway is asked for again (twice at most): tests poll objects that msfs
    /// is replacing, and garage ends the stream of a version replaced under the read (CI saw
    /// "streaming error" while a takeover's successor committed the object being polled).
    pub async fn try_get_object(&self, bucket: &str, key: &str) -> Option<Vec<u8>> {
        let mut attempt = 1;
        loop {
            let resp = match self
                .client()
                .get_object()
                .bucket(bucket)
                .key(key)
                .send()
                .await
            {
                Ok(resp) => resp,
                Err(e) if e.as_service_error().is_some_and(|s| s.is_no_such_key()) => return None,
                Err(e) => panic!("get s3://{bucket}/{key}: {}", error_text(&e)),
            };
            match resp.body.collect().await {
                Ok(data) => return Some(data.into_bytes().to_vec()),
                Err(_) if attempt < 3 => attempt += 1,
                Err(e) => panic!("read body of s3://{bucket}/{key} ({attempt} tries): {e}"),
            }
        }
    }

    /// Every key under `prefix`, in listing order (all pages); panics on failure.
    pub async fn list_keys(&self, bucket: &str, prefix: &str) -> Vec<String> {
        let client = self.client();
        let mut keys = Vec::new();
        let mut token: Option<String> = None;
        loop {
            let resp = client
                .list_objects_v2()
                .bucket(bucket)
                .prefix(prefix)
                .set_continuation_token(token.take())
                .encoding_type(aws_sdk_s3::types::EncodingType::Url)
                .send()
                .await
                .unwrap_or_else(|e| panic!("list s3://{bucket}/{prefix}: {}", error_text(&e)));
            keys.extend(
                resp.contents()
                    .iter()
                    .filter_map(|o| o.key().and_then(msfs::store::decode_listed_key)),
            );
            match resp.next_continuation_token() {
                Some(next) if resp.is_truncated() == Some(true) => token = Some(next.to_string()),
                _ => return keys,
            }
        }
    }

    /// The bucket's multipart uploads in progress, as (key, upload id), sorted (one page: the
    /// tests keep only a few open); panics on failure.
    pub async fn pending_uploads(&self, bucket: &str) -> Vec<(String, String)> {
        let resp = self
            .client()
            .list_multipart_uploads()
            .bucket(bucket)
            .send()
            .await
            .unwrap_or_else(|e| panic!("list uploads of s3://{bucket}: {}", error_text(&e)));
        let mut uploads: Vec<(String, String)> = resp
            .uploads()
            .iter()
            .map(|u| {
                (
                    u.key().unwrap_or_default().to_string(),
                    u.upload_id().unwrap_or_default().to_string(),
                )
            })
            .collect();
        uploads.sort();
        uploads
    }

    /// Starts a multipart upload of `key` as another writer would, and returns its id.
    pub async fn create_upload(&self, bucket: &str, key: &str) -> String {
        let resp = self
            .client()
            .create_multipart_upload()
            .bucket(bucket)
            .key(key)
            .send()
            .await
            .unwrap_or_else(|e| {
                panic!(
                    "create an upload of s3://{bucket}/{key}: {}",
                    error_text(&e)
                )
            });
        resp.upload_id().unwrap_or_default().to_string()
    }
}

impl Drop for Garage {
    fn drop(&mut self) {
        // SIGKILL to this one child; `wait` reaps it so the PID is never reused under us.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// An SDK error with its HTTP status and service code, which `Display` alone hides.
pub fn error_text<E, R>(e: &aws_sdk_s3::error::SdkError<E, R>) -> String
where
    E: std::error::Error + 'static,
    R: std::fmt::Debug,
{
    use aws_sdk_s3::error::DisplayErrorContext;
    format!("{}", DisplayErrorContext(e))
}

fn panic_with(failure: &StartFailure) -> ! {
    panic!(
        "garage did not start: {}\n--- garage log (tail) ---\n{}",
        failure.message, failure.log_tail
    )
}

/// The garage binary: `$GARAGE_BIN`, else `garage` on `PATH`, else `$CARGO_HOME/bin`
/// or `$HOME/.cargo/bin`.
fn garage_bin() -> PathBuf {
    if let Some(bin) = std::env::var_os("GARAGE_BIN") {
        let bin = PathBuf::from(bin);
        assert!(bin.is_file(), "GARAGE_BIN={} is not a file", bin.display());
        return bin;
    }
    let path_dirs = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .unwrap_or_default();
    let cargo_dirs = [
        std::env::var_os("CARGO_HOME").map(|h| PathBuf::from(h).join("bin")),
        std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cargo").join("bin")),
    ];
    path_dirs
        .into_iter()
        .chain(cargo_dirs.into_iter().flatten())
        .map(|dir| dir.join("garage"))
        .find(|candidate| candidate.is_file())
        .unwrap_or_else(|| {
            panic!("garage not found: run .ci/run or `cargo install garage@2.5.0 --locked`")
        })
}

/// `garage -c CONFIG` with every `GARAGE_*` variable of ours removed, so that
/// nothing in the caller's environment redirects it to another cluster, and
/// with colours off (its log goes to a file).
fn command(bin: &Path, config_path: &Path) -> Command {
    let mut cmd = Command::new(bin);
    for (name, _) in std::env::vars_os() {
        if name.to_string_lossy().starts_with("GARAGE_") {
            cmd.env_remove(name);
        }
    }
    cmd.env("NO_COLOR", "1").arg("-c").arg(config_path);
    cmd
}

fn config_toml(dir: &Path, rpc_port: u16, s3_port: u16, admin_port: u16) -> String {
    let dir = dir.display();
    let rpc_secret = hex(&random_bytes::<32>());
    let admin_token = hex(&random_bytes::<32>());
    format!(
        r#"metadata_dir = "{dir}/meta"
data_dir = "{dir}/data"
db_engine = "lmdb"
replication_factor = 1
compression_level = "none"

rpc_bind_addr = "127.0.0.1:{rpc_port}"
rpc_public_addr = "127.0.0.1:{rpc_port}"
rpc_secret = "{rpc_secret}"

[s3_api]
s3_region = "{REGION}"
api_bind_addr = "127.0.0.1:{s3_port}"
root_domain = ".s3.garage.localhost"

[admin]
api_bind_addr = "127.0.0.1:{admin_port}"
admin_token = "{admin_token}"
"#
    )
}

/// Three distinct loopback ports that were free a moment ago. A port can
/// still be taken before garage binds it; `Garage::start` retries then.
fn free_ports() -> [u16; 3] {
    let listeners: Vec<TcpListener> = (0..3)
        .map(|_| TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0"))
        .collect();
    let port = |i: usize| listeners[i].local_addr().expect("local_addr").port();
    [port(0), port(1), port(2)]
}

/// The status code of `GET path` on a loopback port, or `None` if nothing answers.
fn http_status(port: u16, path: &str) -> Option<u16> {
    http_get(port, path).map(|(status, _)| status)
}

/// A plain HTTP/1.1 GET on 127.0.0.1: the status and the body.
pub fn http_get(port: u16, path: &str) -> Option<(u16, String)> {
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_millis(500)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    stream
        .set_write_timeout(Some(Duration::from_secs(2)))
        .ok()?;
    let request =
        format!("GET {path} HTTP/1.0\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).ok()?;
    // HTTP/1.0: the body comes unchunked, so metric lines arrive whole.
    let mut response = Vec::new();
    // A server that closes early still gave us its status line.
    let _ = stream.read_to_end(&mut response);
    let text = String::from_utf8_lossy(&response).into_owned();
    // "HTTP/1.1 403 Forbidden"
    let status = text.split_whitespace().nth(1)?.parse().ok()?;
    let body = text
        .split_once("\r\n\r\n")
        .map_or(String::new(), |(_, b)| b.to_string());
    Some((status, body))
}

/// Runs `cmd` with captured output, killing it (by its PID) after `timeout`.
/// Only for commands whose output fits in a pipe buffer.
fn run_bounded(mut cmd: Command, timeout: Duration) -> Result<Output, String> {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("spawn: {e}"))?;
    let deadline = Instant::now() + timeout;
    loop {
        match child.try_wait() {
            Ok(Some(_)) => return child.wait_with_output().map_err(|e| e.to_string()),
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(5)),
            Ok(None) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!("no exit within {timeout:?}"));
            }
            Err(e) => return Err(format!("wait: {e}")),
        }
    }
}

fn tail(path: &Path, lines: usize) -> String {
    match std::fs::read(path) {
        Ok(bytes) => {
            let text = String::from_utf8_lossy(&bytes);
            let all: Vec<&str> = text.lines().collect();
            all[all.len().saturating_sub(lines)..].join("\n")
        }
        Err(e) => format!("(cannot read {}: {e})", path.display()),
    }
}

fn random_bytes<const N: usize>() -> [u8; N] {
    let mut buf = [0u8; N];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut buf))
        .expect("read /dev/urandom");
    buf
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
