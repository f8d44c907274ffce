//! A fault-injecting HTTP/1.1 proxy on 127.0.0.1 in front of the test S3 server.
//!
//! Tests point msfs (or an SDK client, see [`FaultProxy::client`]) at
//! [`FaultProxy::endpoint`] instead of garage's. Without a plan the proxy forwards every byte
//! unchanged, so SigV4 signatures stay valid: the Host header names the proxy, but garage
//! checks the signature against the Host it receives, which is the one the client signed.
//! A [`FaultPlan`] set at runtime makes chosen requests fail: an S3 error answered by the
//! proxy itself, a reset before the answer or mid-body, a stall, a truncated body. A plan
//! picks requests by schedule or with a seeded probability, optionally only for some methods,
//! S3 operations or keys. [`FaultProxy::down`] and [`FaultProxy::up`] make the whole server
//! vanish and come back on the same port.
//!
//! Why HTTP by hand over plain threads rather than hyper on a runtime: the faults live below
//! HTTP (cut a body after exactly N bytes, close with RST, hold a socket silent), which a
//! byte-level copy loop gives for free and an HTTP library hides. Threads (one per client
//! connection, plus one accepting) keep the fixture independent of whichever runtime, if
//! any, the test runs on. Bodies are copied in 256 KiB chunks, never buffered whole, so
//! pass-through runs at close to loopback speed.
//!
//! Scope: path-style requests (what clients pointed at `http://127.0.0.1:PORT` send), no
//! pipelining (a client sends its next request after the previous answer, as hyper does),
//! no protocol upgrades. `Content-Length` and chunked bodies pass in both directions;
//! `Expect: 100-continue` is honoured by relaying the server's interim answer.
//!
//! Dropping the proxy closes its listener, shuts down every open socket, releases every
//! stall and joins every thread it started.

use std::collections::HashMap;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use aws_sdk_s3::Client;
use aws_sdk_s3::config::retry::RetryConfig;
use aws_sdk_s3::config::timeout::TimeoutConfig;
use aws_sdk_s3::config::{BehaviorVersion, Credentials, Region};

use super::garage::Garage;

/// Chunk size of every body copy: large enough for loopback speed, small enough to never
/// hold a body.
const COPY_CHUNK: usize = 256 * 1024;
/// Read buffer of each socket's reader; heads and chunk-size lines are parsed from it.
const READ_BUFFER: usize = 64 * 1024;
/// Longest request or response head accepted.
const MAX_HEAD: usize = 64 * 1024;
/// Longest chunk-size or trailer line accepted.
const MAX_LINE: usize = 8 * 1024;
/// How long a request with `Expect: 100-continue` waits for the server's interim answer
/// before its body is sent anyway (what curl does).
const EXPECT_WAIT: Duration = Duration::from_secs(1);
/// Longest wait for the client to acknowledge what was sent before a mid-body reset, so the
/// client receives the first N bytes before the RST discards what is still queued.
const RESET_DRAIN: Duration = Duration::from_secs(2);
/// Environment variable that fixes the seed of [`seed_from_env`].
pub const SEED_ENV: &str = "MSFS_TEST_FAULT_SEED";

/// One way a request goes wrong.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// The proxy answers `status` with an S3 XML error body carrying `code`, without
    /// forwarding. The request body is read and discarded first, so the connection stays
    /// usable (unless the client waits for `100 Continue`; then it is closed).
    Error { status: u16, code: &'static str },
    /// The connection is closed with RST (SO_LINGER 0) right after the request head,
    /// without forwarding anything.
    Reset,
    /// Forwarded; the client gets the response head and `after` bytes of the body (best
    /// effort: what it acknowledged within 2 s), then RST. Bodies of at most `after` bytes
    /// pass intact and are not counted as faults.
    ResetMidBody { after: u64 },
    /// Nothing is forwarded or sent for `duration` (`None`: until the plan changes), then
    /// the request is forwarded, if the client is still there. Any plan change releases it
    /// early; [`FaultProxy::down`] and drop end it without forwarding.
    Stall { duration: Option<Duration> },
    /// Forwarded; the client gets the response head and `after` body bytes, then silence
    /// for `duration` (`None`: until the plan changes), then the rest.
    StallMidBody {
        after: u64,
        duration: Option<Duration>,
    },
    /// Forwarded; the client gets the response head (with the server's `Content-Length`)
    /// and `after` body bytes, then a clean close (FIN). Bodies of at most `after` bytes
    /// pass intact and are not counted as faults.
    Truncate { after: u64 },
    /// Forwarded, so the server carries the request out; its answer is held from the client
    /// for `duration` (`None`: until the plan changes), then sent. A client killed meanwhile
    /// never learns that its request landed.
    StallAnswer { duration: Option<Duration> },
}

impl Fault {
    /// HTTP 500 `InternalError`.
    pub const fn internal_error() -> Fault {
        Fault::Error {
            status: 500,
            code: "InternalError",
        }
    }

    /// HTTP 503 `ServiceUnavailable`.
    pub const fn service_unavailable() -> Fault {
        Fault::Error {
            status: 503,
            code: "ServiceUnavailable",
        }
    }

    /// HTTP 503 `SlowDown`, S3's throttling answer.
    pub const fn slow_down() -> Fault {
        Fault::Error {
            status: 503,
            code: "SlowDown",
        }
    }

    /// A stall that ends only when the plan changes.
    pub const fn stall_forever() -> Fault {
        Fault::Stall { duration: None }
    }

    /// Index into the per-kind counters.
    fn counter(&self) -> usize {
        match self {
            Fault::Error { .. } => 0,
            Fault::Reset => 1,
            Fault::ResetMidBody { .. } => 2,
            Fault::Stall { .. } => 3,
            Fault::StallMidBody { .. } => 4,
            Fault::Truncate { .. } => 5,
            Fault::StallAnswer { .. } => 6,
        }
    }
}

/// The S3 operation of a path-style request, as far as the proxy needs to tell them apart.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum S3Op {
    GetObject,
    HeadObject,
    PutObject,
    CopyObject,
    DeleteObject,
    CreateMultipartUpload,
    UploadPart,
    UploadPartCopy,
    CompleteMultipartUpload,
    AbortMultipartUpload,
    ListParts,
    ListObjects,
    ListMultipartUploads,
    DeleteObjects,
    HeadBucket,
    Other,
}

/// Which requests a plan applies to; every set condition must hold. Requests that do not
/// match pass through and do not advance the plan's schedule.
#[derive(Clone, Debug, Default)]
pub struct Match {
    method: Option<String>,
    ops: Vec<S3Op>,
    ranged: Option<bool>,
    key_prefix: Option<String>,
}

impl Match {
    /// Every request.
    pub fn any() -> Match {
        Match::default()
    }

    /// Only requests with this HTTP method (`"GET"`, `"PUT"`, …).
    pub fn method(mut self, method: &str) -> Match {
        self.method = Some(method.to_ascii_uppercase());
        self
    }

    /// Only these S3 operations (call again to allow several).
    pub fn op(mut self, op: S3Op) -> Match {
        self.ops.push(op);
        self
    }

    /// Only requests with (`true`) or without (`false`) a `Range` header.
    pub fn ranged(mut self, ranged: bool) -> Match {
        self.ranged = Some(ranged);
        self
    }

    /// Only requests whose (decoded) object key starts with `prefix`.
    pub fn key_prefix(mut self, prefix: &str) -> Match {
        self.key_prefix = Some(prefix.to_string());
        self
    }

    fn matches(&self, req: &Request) -> bool {
        self.method.as_ref().is_none_or(|m| *m == req.method)
            && (self.ops.is_empty() || self.ops.contains(&req.op))
            && self.ranged.is_none_or(|r| r == req.ranged)
            && self
                .key_prefix
                .as_ref()
                .is_none_or(|p| req.key.starts_with(p))
    }
}

/// What the proxy does to the requests that match its filter. Setting a plan restarts its
/// schedule (and its random sequence) from the beginning.
#[derive(Clone, Debug)]
pub struct FaultPlan {
    filter: Match,
    schedule: Schedule,
}

#[derive(Clone, Debug)]
enum Schedule {
    /// Entry i applies to the i-th matching request (`None` passes it); `then` to the rest.
    Script {
        faults: Vec<Option<Fault>>,
        then: Option<Fault>,
    },
    /// Each matching request independently with probability `p`, the fault picked uniformly.
    Random {
        p: f64,
        seed: u64,
        faults: Vec<Fault>,
    },
}

impl FaultPlan {
    /// Forward everything unchanged (the initial plan).
    pub fn pass_through() -> FaultPlan {
        FaultPlan::script(Vec::new())
    }

    /// Every matching request.
    pub fn always(fault: Fault) -> FaultPlan {
        FaultPlan::with(Schedule::Script {
            faults: Vec::new(),
            then: Some(fault),
        })
    }

    /// The next matching request only.
    pub fn once(fault: Fault) -> FaultPlan {
        FaultPlan::first(1, fault)
    }

    /// The next `n` matching requests.
    pub fn first(n: usize, fault: Fault) -> FaultPlan {
        FaultPlan::script(vec![Some(fault); n])
    }

    /// Entry i for the i-th matching request (`None` passes it); everything after passes.
    pub fn script(faults: Vec<Option<Fault>>) -> FaultPlan {
        FaultPlan::with(Schedule::Script { faults, then: None })
    }

    /// Each matching request independently with probability `p`, with a fault chosen
    /// uniformly from `faults`; the choices are a function of `seed` and request order.
    pub fn random(p: f64, seed: u64, faults: Vec<Fault>) -> FaultPlan {
        assert!((0.0..=1.0).contains(&p), "FaultPlan::random: p={p}");
        assert!(!faults.is_empty(), "FaultPlan::random: no faults to choose");
        FaultPlan::with(Schedule::Random { p, seed, faults })
    }

    /// Restricts the plan to requests matching `filter`.
    pub fn only(mut self, filter: Match) -> FaultPlan {
        self.filter = filter;
        self
    }

    fn with(schedule: Schedule) -> FaultPlan {
        FaultPlan {
            filter: Match::any(),
            schedule,
        }
    }
}

/// A seed for [`FaultPlan::random`]: `$MSFS_TEST_FAULT_SEED` if set, else a fresh one.
/// Printed either way, so a failing run can be repeated.
pub fn seed_from_env() -> u64 {
    let seed = match std::env::var(SEED_ENV) {
        Ok(text) => text
            .parse()
            .unwrap_or_else(|_| panic!("{SEED_ENV}={text:?} is not a u64")),
        Err(_) => std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64),
    };
    eprintln!("fault proxy seed: {seed} (repeat with {SEED_ENV}={seed})");
    seed
}

/// What the proxy has seen since it started, each fault counted when it is applied.
/// Every request head read counts in `requests`, and then in `forwarded` unless it was
/// answered by an `errors` or `resets` fault, or by a stall that `down` or drop ended.
/// Stalls that end in forwarding, and mid-body faults, count in `forwarded` too.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ProxyStats {
    pub connections: u64,
    pub requests: u64,
    pub forwarded: u64,
    pub errors: u64,
    pub resets: u64,
    pub resets_mid_body: u64,
    pub stalls: u64,
    pub stalls_mid_body: u64,
    pub truncations: u64,
    pub stalled_answers: u64,
    /// GetObject requests read (forwarded or not): what an origin is billed for.
    pub gets: u64,
}

impl ProxyStats {
    /// Faults of every kind.
    pub fn faults(&self) -> u64 {
        self.errors
            + self.resets
            + self.resets_mid_body
            + self.stalls
            + self.stalls_mid_body
            + self.truncations
            + self.stalled_answers
    }
}

/// The proxy; see the module docs.
pub struct FaultProxy {
    shared: Arc<Shared>,
    acceptor: Option<JoinHandle<()>>,
}

impl FaultProxy {
    /// A proxy in front of `garage`'s S3 API.
    pub fn in_front_of(garage: &Garage) -> FaultProxy {
        FaultProxy::start(&garage.endpoint())
    }

    /// A proxy in front of `upstream` (`http://HOST:PORT`), listening on a 127.0.0.1 port
    /// below the ephemeral range ([`listen_off_the_ephemeral_range`]), passing everything
    /// through.
    pub fn start(upstream: &str) -> FaultProxy {
        let authority = upstream
            .strip_prefix("http://")
            .unwrap_or_else(|| panic!("fault proxy upstream {upstream:?}: only http:// works"))
            .trim_end_matches('/');
        let upstream = authority
            .to_socket_addrs()
            .ok()
            .and_then(|mut addrs| addrs.next())
            .unwrap_or_else(|| panic!("fault proxy upstream {authority:?}: not host:port"));
        let listener = listen_off_the_ephemeral_range();
        let addr = listener.local_addr().expect("fault proxy local_addr");
        let shared = Arc::new(Shared {
            upstream,
            addr,
            state: Mutex::new(State {
                plan: FaultPlan::pass_through(),
                matched: 0,
                rng: 0,
                generation: 0,
                down: false,
                listening: true,
                shutdown: false,
                bind_error: None,
            }),
            changed: Condvar::new(),
            counters: Counters::default(),
            sockets: Mutex::new(Sockets::default()),
            threads: Mutex::new(Vec::new()),
        });
        let for_acceptor = Arc::clone(&shared);
        let acceptor = std::thread::Builder::new()
            .name("fault-proxy-accept".into())
            .spawn(move || accept_loop(&for_acceptor, listener))
            .expect("spawn the fault proxy's accept thread");
        FaultProxy {
            shared,
            acceptor: Some(acceptor),
        }
    }

    /// `http://127.0.0.1:PORT` of the proxy: give this to clients instead of the server's.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.shared.addr)
    }

    pub fn addr(&self) -> SocketAddr {
        self.shared.addr
    }

    /// Replaces the plan (restarting its schedule) and releases every stall in progress.
    pub fn set(&self, plan: FaultPlan) {
        let seed = match plan.schedule {
            Schedule::Random { seed, .. } => seed,
            _ => 0,
        };
        let mut state = self.shared.state();
        state.rng = splitmix64(seed);
        state.plan = plan;
        state.matched = 0;
        state.generation += 1;
        self.shared.changed.notify_all();
    }

    /// Back to forwarding everything; releases every stall in progress.
    pub fn pass_through(&self) {
        self.set(FaultPlan::pass_through());
    }

    /// The server is gone: the listener is closed (connects are refused) and every open
    /// connection is shut down; stalled requests end without being forwarded. Returns once
    /// the port refuses connections.
    pub fn down(&self) {
        {
            let mut state = self.shared.state();
            if state.down {
                return;
            }
            state.down = true;
            state.generation += 1;
            self.shared.changed.notify_all();
        }
        self.shared.wake_acceptor();
        let state = self.shared.state();
        let _state = self
            .shared
            .changed
            .wait_while(state, |s| s.listening)
            .unwrap_or_else(PoisonError::into_inner);
        self.shared.shut_all_sockets(false);
    }

    /// Listens again on the same port after [`FaultProxy::down`]; returns once it accepts.
    /// Panics if the port was taken meanwhile.
    pub fn up(&self) {
        let mut state = self.shared.state();
        state.down = false;
        state.bind_error = None;
        self.shared.changed.notify_all();
        state = self
            .shared
            .changed
            .wait_while(state, |s| !s.listening && s.bind_error.is_none())
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(e) = &state.bind_error {
            panic!(
                "fault proxy: cannot listen on {} again: {e}",
                self.shared.addr
            );
        }
    }

    pub fn stats(&self) -> ProxyStats {
        let c = &self.shared.counters;
        let get = |a: &AtomicU64| a.load(Ordering::SeqCst);
        ProxyStats {
            connections: get(&c.connections),
            requests: get(&c.requests),
            forwarded: get(&c.forwarded),
            errors: get(&c.faults[0]),
            resets: get(&c.faults[1]),
            resets_mid_body: get(&c.faults[2]),
            stalls: get(&c.faults[3]),
            stalls_mid_body: get(&c.faults[4]),
            truncations: get(&c.faults[5]),
            stalled_answers: get(&c.faults[6]),
            gets: get(&c.gets),
        }
    }

    /// A path-style client with `garage`'s key, pointed at the proxy, with SDK retries
    /// disabled (every fault reaches the caller) and the SDK's default timeouts.
    pub fn client(&self, garage: &Garage) -> Client {
        Client::from_conf(self.client_config(garage).build())
    }

    /// Like [`FaultProxy::client`], with `timeouts` (e.g. a short `read_timeout` to see a
    /// stall end in a timeout).
    pub fn client_with_timeouts(&self, garage: &Garage, timeouts: TimeoutConfig) -> Client {
        Client::from_conf(self.client_config(garage).timeout_config(timeouts).build())
    }

    fn client_config(&self, garage: &Garage) -> aws_sdk_s3::config::Builder {
        aws_sdk_s3::Config::builder()
            .behavior_version(BehaviorVersion::latest())
            .region(Region::new(garage.region().to_string()))
            .endpoint_url(self.endpoint())
            .force_path_style(true)
            .credentials_provider(Credentials::new(
                garage.access_key(),
                garage.secret_key(),
                None,
                None,
                "msfs-tests",
            ))
            .retry_config(RetryConfig::disabled())
    }

    /// [`super::s3_backend_yaml`] with the endpoint pointing at this proxy, for mount tests.
    pub fn s3_backend_yaml(
        &self,
        dir_name: &str,
        bucket: &str,
        prefix: &str,
        garage: &Garage,
    ) -> String {
        super::s3_backend_yaml(dir_name, bucket, prefix, garage).replace(
            &super::yaml_str(&garage.endpoint()),
            &super::yaml_str(&self.endpoint()),
        )
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        {
            let mut state = self.shared.state();
            state.shutdown = true;
            state.generation += 1;
            self.shared.changed.notify_all();
        }
        self.shared.wake_acceptor();
        if let Some(acceptor) = self.acceptor.take() {
            let _ = acceptor.join();
        }
        // No connection starts after the acceptor ended; end the ones that run.
        self.shared.shut_all_sockets(true);
        let threads = std::mem::take(&mut *lock(&self.shared.threads));
        for thread in threads {
            let _ = thread.join();
        }
    }
}

/// State shared by the handle, the acceptor and the connection threads.
struct Shared {
    upstream: SocketAddr,
    addr: SocketAddr,
    state: Mutex<State>,
    /// Notified on every change of `state`: plan, down/up, listening, shutdown.
    changed: Condvar,
    counters: Counters,
    sockets: Mutex<Sockets>,
    threads: Mutex<Vec<JoinHandle<()>>>,
}

struct State {
    plan: FaultPlan,
    /// Matching requests seen under the current plan.
    matched: u64,
    /// xorshift64* state of a `Random` plan.
    rng: u64,
    /// Bumped by every plan change, `down` and shutdown; ends stalls.
    generation: u64,
    down: bool,
    listening: bool,
    shutdown: bool,
    bind_error: Option<String>,
}

#[derive(Default)]
struct Counters {
    connections: AtomicU64,
    requests: AtomicU64,
    forwarded: AtomicU64,
    faults: [AtomicU64; 7],
    gets: AtomicU64,
}

/// Clones of every open socket, so `down` and drop can shut them from outside.
#[derive(Default)]
struct Sockets {
    next_id: u64,
    open: HashMap<u64, TcpStream>,
    /// Set on drop: sockets registered from now on are shut at once.
    closing: bool,
}

impl Shared {
    fn state(&self) -> MutexGuard<'_, State> {
        lock(&self.state)
    }

    /// Decides the fault for one request under the current plan.
    fn decide(&self, req: &Request) -> Option<Fault> {
        let mut state = self.state();
        if !state.plan.filter.matches(req) {
            return None;
        }
        let index = state.matched;
        state.matched += 1;
        let State { plan, rng, .. } = &mut *state;
        match &plan.schedule {
            Schedule::Script { faults, then } => usize::try_from(index)
                .ok()
                .and_then(|i| faults.get(i))
                .copied()
                .unwrap_or(*then),
            Schedule::Random { p, faults, .. } => {
                let roll = xorshift(rng);
                let pick = xorshift(rng);
                let unit = (roll >> 11) as f64 / (1u64 << 53) as f64;
                (unit < *p).then(|| faults[(pick % faults.len() as u64) as usize])
            }
        }
    }

    fn count(&self, fault: &Fault) {
        self.counters.faults[fault.counter()].fetch_add(1, Ordering::SeqCst);
    }

    /// Holds a stalled request. `true`: go on with it (time is up or the plan changed);
    /// `false`: drop it (the proxy is down or stopping).
    fn hold(&self, duration: Option<Duration>) -> bool {
        let deadline = duration.map(|d| Instant::now() + d);
        let mut state = self.state();
        let generation = state.generation;
        loop {
            if state.shutdown || state.down {
                return false;
            }
            if state.generation != generation {
                return true;
            }
            state = match deadline {
                None => self
                    .changed
                    .wait(state)
                    .unwrap_or_else(PoisonError::into_inner),
                Some(deadline) => {
                    let now = Instant::now();
                    if now >= deadline {
                        return true;
                    }
                    self.changed
                        .wait_timeout(state, deadline - now)
                        .unwrap_or_else(PoisonError::into_inner)
                        .0
                }
            };
        }
    }

    /// Unblocks the acceptor's `accept` so it sees a state change.
    fn wake_acceptor(&self) {
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_secs(1));
    }

    /// Registers a socket so `down` and drop can shut it; it is removed when `Tracked` drops.
    fn track(self: &Arc<Self>, stream: TcpStream) -> io::Result<Tracked> {
        let clone = stream.try_clone()?;
        let mut sockets = lock(&self.sockets);
        if sockets.closing {
            let _ = stream.shutdown(Shutdown::Both);
        }
        let id = sockets.next_id;
        sockets.next_id += 1;
        sockets.open.insert(id, clone);
        Ok(Tracked {
            stream,
            id,
            shared: Arc::clone(self),
        })
    }

    fn shut_all_sockets(&self, closing: bool) {
        let mut sockets = lock(&self.sockets);
        sockets.closing |= closing;
        for stream in sockets.open.values() {
            let _ = stream.shutdown(Shutdown::Both);
        }
    }
}

/// A socket registered in [`Shared::sockets`].
struct Tracked {
    stream: TcpStream,
    id: u64,
    shared: Arc<Shared>,
}

impl Drop for Tracked {
    fn drop(&mut self) {
        lock(&self.shared.sockets).open.remove(&self.id);
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Accepts connections and starts one thread per connection; closes and reopens the
/// listener for `down`/`up`; ends on shutdown.
fn accept_loop(shared: &Arc<Shared>, listener: TcpListener) {
    let mut listener = Some(listener);
    loop {
        let Some(current) = &listener else {
            let mut state = shared
                .changed
                .wait_while(shared.state(), |s| s.down && !s.shutdown)
                .unwrap_or_else(PoisonError::into_inner);
            if state.shutdown {
                return;
            }
            match TcpListener::bind(shared.addr) {
                Ok(reopened) => {
                    listener = Some(reopened);
                    state.listening = true;
                }
                Err(e) => {
                    state.bind_error = Some(e.to_string());
                    state.down = true;
                }
            }
            shared.changed.notify_all();
            continue;
        };
        let accepted = current.accept();
        {
            let mut state = shared.state();
            if state.shutdown {
                return;
            }
            if state.down {
                // Dropping the listener refuses every later connect.
                listener = None;
                state.listening = false;
                shared.changed.notify_all();
                continue;
            }
        }
        let Ok((stream, _)) = accepted else {
            // E.g. out of file descriptors: do not spin.
            std::thread::sleep(Duration::from_millis(10));
            continue;
        };
        shared.counters.connections.fetch_add(1, Ordering::SeqCst);
        let Ok(client) = shared.track(stream) else {
            continue;
        };
        let for_thread = Arc::clone(shared);
        let spawned = std::thread::Builder::new()
            .name("fault-proxy-conn".into())
            .spawn(move || serve(&for_thread, client));
        let mut threads = lock(&shared.threads);
        threads.retain(|t| !t.is_finished());
        if let Ok(thread) = spawned {
            threads.push(thread);
        }
    }
}

/// Serves one client connection: request after request until either side closes.
fn serve(shared: &Arc<Shared>, client: Tracked) {
    let _ = client.stream.set_nodelay(true);
    let Ok(read_half) = client.stream.try_clone() else {
        return;
    };
    let mut conn = Conn {
        shared,
        client,
        client_in: BufReader::with_capacity(READ_BUFFER, read_half),
        upstream: None,
        chunk: vec![0; COPY_CHUNK],
    };
    while let Ok(Next::KeepAlive) = conn.exchange() {}
}

/// Whether a connection can carry another request.
#[derive(PartialEq, Eq)]
enum Next {
    KeepAlive,
    Close,
}

/// One client connection and its (lazily opened, reused) connection to the server.
struct Conn<'a> {
    shared: &'a Arc<Shared>,
    client: Tracked,
    client_in: BufReader<TcpStream>,
    upstream: Option<Upstream>,
    chunk: Vec<u8>,
}

struct Upstream {
    out: Tracked,
    input: BufReader<TcpStream>,
}

impl Upstream {
    fn connect(shared: &Arc<Shared>) -> io::Result<Upstream> {
        let stream = TcpStream::connect(shared.upstream)?;
        stream.set_nodelay(true)?;
        let input = BufReader::with_capacity(READ_BUFFER, stream.try_clone()?);
        Ok(Upstream {
            out: shared.track(stream)?,
            input,
        })
    }

    /// Whether an idle connection is still open: the server may have closed it meanwhile
    /// (as pools check before reuse).
    fn is_alive(&self) -> bool {
        if !self.input.buffer().is_empty() {
            return false;
        }
        let stream = self.input.get_ref();
        if stream.set_nonblocking(true).is_err() {
            return false;
        }
        let peeked = stream.peek(&mut [0u8; 1]);
        stream.set_nonblocking(false).is_ok()
            && matches!(peeked, Err(e) if e.kind() == io::ErrorKind::WouldBlock)
    }
}

impl Conn<'_> {
    /// Reads one request and answers it, by a fault or by forwarding.
    fn exchange(&mut self) -> io::Result<Next> {
        let Some(head) = read_head(&mut self.client_in)? else {
            return Ok(Next::Close);
        };
        self.shared.counters.requests.fetch_add(1, Ordering::SeqCst);
        let Some(req) = Request::parse(head) else {
            self.client.stream.write_all(
                b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
            )?;
            return Ok(Next::Close);
        };
        if req.op == S3Op::GetObject {
            self.shared.counters.gets.fetch_add(1, Ordering::SeqCst);
        }
        let fault = self.shared.decide(&req);
        match fault {
            None => self.forward(&req, None),
            Some(Fault::Error { status, code }) => {
                self.shared.count(&Fault::Error { status, code });
                self.answer_error(&req, status, code)
            }
            Some(Fault::Reset) => {
                self.shared.count(&Fault::Reset);
                set_linger_zero(&self.client.stream);
                Ok(Next::Close)
            }
            Some(stall @ Fault::Stall { duration }) => {
                self.shared.count(&stall);
                if self.shared.hold(duration) {
                    self.forward(&req, None)
                } else {
                    Ok(Next::Close)
                }
            }
            Some(mid_body) => self.forward(&req, Some(mid_body)),
        }
    }

    /// Answers with an S3 error document, forwarding nothing.
    fn answer_error(&mut self, req: &Request, status: u16, code: &str) -> io::Result<Next> {
        // A client waiting for `100 Continue` may or may not send its body now: the
        // connection cannot stay in step, so it closes.
        let close = req.close || req.expect_continue;
        if !req.expect_continue {
            copy_body(
                &mut self.client_in,
                &mut io::sink(),
                req.framing,
                &mut self.chunk,
            )?;
        }
        let id = self.shared.counters.requests.load(Ordering::SeqCst);
        let request_id = format!("msfs-fault-proxy-{id}");
        let body = format!(
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>{code}</Code><Message>injected by the msfs test fault proxy</Message><Resource>{}</Resource><RequestId>{request_id}</RequestId></Error>",
            xml_escape(&req.path)
        );
        let head = format!(
            "HTTP/1.1 {status} {}\r\nContent-Type: application/xml\r\nContent-Length: {}\r\nx-amz-request-id: {request_id}\r\nServer: msfs-fault-proxy\r\n{}\r\n",
            reason(status),
            body.len(),
            if close { "Connection: close\r\n" } else { "" },
        );
        let mut answer = head.into_bytes();
        if req.method != "HEAD" {
            answer.extend_from_slice(body.as_bytes());
        }
        self.client.stream.write_all(&answer)?;
        Ok(if close { Next::Close } else { Next::KeepAlive })
    }

    /// Sends the request to the server and its answer back, applying a mid-body fault.
    fn forward(&mut self, req: &Request, mid_body: Option<Fault>) -> io::Result<Next> {
        let Conn {
            shared,
            client,
            client_in,
            upstream,
            chunk,
        } = self;
        if !upstream.as_ref().is_some_and(Upstream::is_alive) {
            *upstream = None;
            *upstream = Some(Upstream::connect(shared)?);
        }
        let Some(up) = upstream.as_mut() else {
            unreachable!("connected just above")
        };
        up.out.stream.write_all(&req.head.raw)?;
        shared.counters.forwarded.fetch_add(1, Ordering::SeqCst);

        // With `Expect: 100-continue` the server speaks first: `100` asks for the body,
        // a final status refuses it.
        let mut early = None;
        if req.expect_continue {
            early = await_interim(&mut up.input)?;
            if let Some(interim) = early.take_if(|h| h.status() == Some(100)) {
                client.stream.write_all(&interim.raw)?;
            }
        }
        let body_sent = early.is_none();
        if body_sent {
            copy_body(client_in, &mut &up.out.stream, req.framing, chunk)?;
        }
        let response = loop {
            let head = match early.take() {
                Some(head) => head,
                None => read_head(&mut up.input)?
                    .ok_or_else(|| io::Error::from(io::ErrorKind::UnexpectedEof))?,
            };
            match head.status() {
                Some(status) if (100..200).contains(&status) && status != 101 => {
                    client.stream.write_all(&head.raw)?;
                }
                Some(_) => break head,
                None => return Err(io::Error::other("bad status line from the server")),
            }
        };
        if let Some(held @ Fault::StallAnswer { duration }) = mid_body {
            shared.count(&held);
            if !shared.hold(duration) {
                *upstream = None;
                return Ok(Next::Close);
            }
        }
        client.stream.write_all(&response.raw)?;
        let framing = response_framing(req, &response);

        let mut out = Tripwire {
            inner: &client.stream,
            left: match mid_body {
                Some(
                    Fault::ResetMidBody { after }
                    | Fault::StallMidBody { after, .. }
                    | Fault::Truncate { after },
                ) => Some(after),
                _ => None,
            },
            trip: || {
                let fault = mid_body.expect("a tripwire is armed only with a fault");
                shared.count(&fault);
                match fault {
                    Fault::StallMidBody { duration, .. } if shared.hold(duration) => Ok(()),
                    _ => Err(io::Error::other(Tripped)),
                }
            },
        };
        match copy_body(&mut up.input, &mut out, framing, chunk) {
            Ok(()) => {}
            Err(e) if e.get_ref().is_some_and(|inner| inner.is::<Tripped>()) => {
                if let Some(Fault::ResetMidBody { .. }) = mid_body {
                    wait_until_acknowledged(&client.stream, RESET_DRAIN);
                    set_linger_zero(&client.stream);
                }
                // The server's connection has an unread body: it cannot be reused.
                *upstream = None;
                return Ok(Next::Close);
            }
            Err(e) => return Err(e),
        }
        let server_closes = response.has_token("connection", "close") || framing == Framing::ToEof;
        if server_closes {
            *upstream = None;
        }
        Ok(if server_closes || req.close || !body_sent {
            Next::Close
        } else {
            Next::KeepAlive
        })
    }
}

/// With `Expect: 100-continue`: the server's first answer, or `None` if it says nothing
/// within [`EXPECT_WAIT`] (then the body goes anyway).
fn await_interim(input: &mut BufReader<TcpStream>) -> io::Result<Option<Head>> {
    if input.buffer().is_empty() {
        let stream = input.get_ref();
        stream.set_read_timeout(Some(EXPECT_WAIT))?;
        let peeked = stream.peek(&mut [0u8; 1]);
        stream.set_read_timeout(None)?;
        match peeked {
            Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
            Ok(_) => {}
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                return Ok(None);
            }
            Err(e) => return Err(e),
        }
    }
    read_head(input)?
        .map(Some)
        .ok_or_else(|| io::ErrorKind::UnexpectedEof.into())
}

/// Marks the error a [`Tripwire`] returns when its fault cuts the body.
#[derive(Debug)]
struct Tripped;

impl std::fmt::Display for Tripped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("body cut by an injected fault")
    }
}

impl std::error::Error for Tripped {}

/// A writer that passes `left` bytes, then calls `trip` once: an error from it ends the
/// copy there (reset, truncate); `Ok` lets the rest through (after a stall).
struct Tripwire<W, F> {
    inner: W,
    left: Option<u64>,
    trip: F,
}

impl<W: Write, F: FnMut() -> io::Result<()>> Write for Tripwire<W, F> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if self.left == Some(0) {
            self.left = None;
            (self.trip)()?;
        }
        let n = match self.left {
            Some(left) => buf.len().min(usize::try_from(left).unwrap_or(usize::MAX)),
            None => buf.len(),
        };
        let written = self.inner.write(&buf[..n])?;
        if let Some(left) = &mut self.left {
            *left -= written as u64;
        }
        Ok(written)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

/// How a message's body is delimited.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Framing {
    Empty,
    Length(u64),
    Chunked,
    /// A response without length: the body ends when the server closes.
    ToEof,
}

/// A request or response head: the raw bytes (forwarded as they are) and parsed fields.
struct Head {
    raw: Vec<u8>,
    start_line: String,
    /// Lower-cased names, trimmed values.
    headers: Vec<(String, String)>,
}

impl Head {
    fn parse(raw: Vec<u8>) -> Option<Head> {
        let text = String::from_utf8_lossy(&raw).into_owned();
        let mut lines = text.lines();
        let start_line = lines.next()?.trim_end().to_string();
        let mut headers = Vec::new();
        for line in lines {
            let line = line.trim_end_matches('\r');
            if line.is_empty() {
                break;
            }
            let (name, value) = line.split_once(':')?;
            headers.push((name.trim().to_ascii_lowercase(), value.trim().to_string()));
        }
        Some(Head {
            raw,
            start_line,
            headers,
        })
    }

    fn values<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a str> {
        self.headers
            .iter()
            .filter(move |(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// Whether a comma-separated header (`Connection`, `Transfer-Encoding`) lists `token`.
    fn has_token(&self, name: &str, token: &str) -> bool {
        self.values(name)
            .flat_map(|v| v.split(','))
            .any(|t| t.trim().eq_ignore_ascii_case(token))
    }

    /// The status of a response head.
    fn status(&self) -> Option<u16> {
        self.start_line.split_whitespace().nth(1)?.parse().ok()
    }

    /// `Transfer-Encoding: chunked`, else `Content-Length`, else `None`; `Err` if malformed.
    fn body_length(&self) -> Result<Option<Framing>, ()> {
        if self.values("transfer-encoding").next().is_some() {
            return if self.has_token("transfer-encoding", "chunked") {
                Ok(Some(Framing::Chunked))
            } else {
                Err(())
            };
        }
        let mut lengths = self.values("content-length").map(str::parse::<u64>);
        match (lengths.next(), lengths.next()) {
            (None, _) => Ok(None),
            (Some(Ok(n)), None) => Ok(Some(Framing::Length(n))),
            _ => Err(()),
        }
    }
}

/// A parsed request head.
struct Request {
    head: Head,
    method: String,
    /// The path part of the target, still percent-encoded.
    path: String,
    /// The object key, decoded; empty for bucket-level requests.
    key: String,
    op: S3Op,
    ranged: bool,
    expect_continue: bool,
    /// The client closes after this exchange (`Connection: close` or HTTP/1.0).
    close: bool,
    framing: Framing,
}

impl Request {
    fn parse(head: Head) -> Option<Request> {
        let mut parts = head.start_line.split_whitespace();
        let (method, target, version) = (parts.next()?, parts.next()?, parts.next()?);
        // An absolute-form target (`http://host/path`) names the path after the authority.
        let target = match target.strip_prefix("http://") {
            Some(rest) => rest.find('/').map_or("/", |i| &rest[i..]),
            None => target,
        };
        let (path, query) = target.split_once('?').unwrap_or((target, ""));
        let params: Vec<&str> = query
            .split('&')
            .map(|p| p.split_once('=').map_or(p, |(name, _)| name))
            .collect();
        let has = |name: &str| params.contains(&name);
        let (bucket, key) = path
            .trim_start_matches('/')
            .split_once('/')
            .unwrap_or((path.trim_start_matches('/'), ""));
        let copy = head.values("x-amz-copy-source").next().is_some();
        let op = match (method, !key.is_empty()) {
            ("GET", true) if has("uploadId") => S3Op::ListParts,
            ("GET", true) => S3Op::GetObject,
            ("GET", false) if has("uploads") => S3Op::ListMultipartUploads,
            ("GET", false) if !bucket.is_empty() => S3Op::ListObjects,
            ("HEAD", true) => S3Op::HeadObject,
            ("HEAD", false) => S3Op::HeadBucket,
            ("PUT", true) if has("partNumber") && has("uploadId") && copy => S3Op::UploadPartCopy,
            ("PUT", true) if has("partNumber") && has("uploadId") => S3Op::UploadPart,
            ("PUT", true) if copy => S3Op::CopyObject,
            ("PUT", true) => S3Op::PutObject,
            ("POST", true) if has("uploads") => S3Op::CreateMultipartUpload,
            ("POST", true) if has("uploadId") => S3Op::CompleteMultipartUpload,
            ("POST", false) if has("delete") => S3Op::DeleteObjects,
            ("DELETE", true) if has("uploadId") => S3Op::AbortMultipartUpload,
            ("DELETE", true) => S3Op::DeleteObject,
            _ => S3Op::Other,
        };
        let framing = head.body_length().ok()?.unwrap_or(Framing::Empty);
        let ranged = head.values("range").next().is_some();
        let expect_continue = head.has_token("expect", "100-continue");
        let close = head.has_token("connection", "close")
            || (version == "HTTP/1.0" && !head.has_token("connection", "keep-alive"));
        let (method, path, key) = (method.to_string(), path.to_string(), percent_decode(key));
        Some(Request {
            head,
            method,
            path,
            key,
            op,
            ranged,
            expect_continue,
            close,
            framing,
        })
    }
}

fn response_framing(req: &Request, response: &Head) -> Framing {
    let status = response.status().unwrap_or(0);
    if req.method == "HEAD" || (100..200).contains(&status) || status == 204 || status == 304 {
        return Framing::Empty;
    }
    match response.body_length() {
        Ok(Some(framing)) => framing,
        Ok(None) | Err(()) => Framing::ToEof,
    }
}

/// Reads one message head. `None` if the peer closed before sending a byte of it.
fn read_head(input: &mut BufReader<TcpStream>) -> io::Result<Option<Head>> {
    let mut raw = Vec::new();
    loop {
        let start = raw.len();
        let limit = (MAX_HEAD + 1 - start) as u64;
        let n = Read::take(&mut *input, limit).read_until(b'\n', &mut raw)?;
        if n == 0 {
            return if raw.is_empty() {
                Ok(None)
            } else {
                Err(io::ErrorKind::UnexpectedEof.into())
            };
        }
        if raw.len() > MAX_HEAD || !raw.ends_with(b"\n") {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "message head too long or cut",
            ));
        }
        let line = &raw[start..];
        if line == b"\r\n" || line == b"\n" {
            if start == 0 {
                // A stray CRLF between messages is allowed and ignored.
                raw.clear();
                continue;
            }
            return Head::parse(raw)
                .map(Some)
                .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "bad message head"));
        }
    }
}

/// Copies one body from `input` to `out` exactly as framed on the wire (chunk sizes,
/// extensions and trailers included), `chunk` bytes at a time.
fn copy_body(
    input: &mut BufReader<TcpStream>,
    out: &mut dyn Write,
    framing: Framing,
    chunk: &mut [u8],
) -> io::Result<()> {
    match framing {
        Framing::Empty => Ok(()),
        Framing::Length(n) => copy_exact(input, out, n, chunk),
        Framing::ToEof => loop {
            let n = input.read(chunk)?;
            if n == 0 {
                return Ok(());
            }
            out.write_all(&chunk[..n])?;
        },
        Framing::Chunked => loop {
            let line = read_line(input)?;
            out.write_all(&line)?;
            let size_text = String::from_utf8_lossy(&line);
            let size_text = size_text.split(';').next().unwrap_or("").trim();
            let size = u64::from_str_radix(size_text, 16)
                .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "bad chunk size line"))?;
            if size == 0 {
                // Trailers, then the empty line that ends the body.
                loop {
                    let line = read_line(input)?;
                    out.write_all(&line)?;
                    if line == b"\r\n" || line == b"\n" {
                        return Ok(());
                    }
                }
            }
            copy_exact(input, out, size, chunk)?;
            out.write_all(&read_line(input)?)?;
        },
    }
}

fn copy_exact(
    input: &mut BufReader<TcpStream>,
    out: &mut dyn Write,
    mut left: u64,
    chunk: &mut [u8],
) -> io::Result<()> {
    while left > 0 {
        let want = chunk.len().min(usize::try_from(left).unwrap_or(usize::MAX));
        let n = input.read(&mut chunk[..want])?;
        if n == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        out.write_all(&chunk[..n])?;
        left -= n as u64;
    }
    Ok(())
}

/// One CRLF-terminated line of a chunked body.
fn read_line(input: &mut BufReader<TcpStream>) -> io::Result<Vec<u8>> {
    let mut line = Vec::new();
    Read::take(&mut *input, MAX_LINE as u64).read_until(b'\n', &mut line)?;
    if line.ends_with(b"\n") {
        Ok(line)
    } else {
        Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "chunk line too long or cut",
        ))
    }
}

/// SO_LINGER 0: closing the socket sends RST instead of FIN.
fn set_linger_zero(stream: &TcpStream) {
    let linger = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    // SAFETY: a valid socket descriptor and a properly sized, initialised option value.
    unsafe {
        libc::setsockopt(
            stream.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            (&raw const linger).cast(),
            std::mem::size_of::<libc::linger>() as libc::socklen_t,
        );
    }
}

/// Waits (at most `limit`) until the peer has acknowledged everything sent.
fn wait_until_acknowledged(stream: &TcpStream, limit: Duration) {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        let mut unacknowledged: libc::c_int = 0;
        // SAFETY: TIOCOUTQ (SIOCOUTQ) writes one int for a valid socket descriptor.
        let rc = unsafe { libc::ioctl(stream.as_raw_fd(), libc::TIOCOUTQ, &mut unacknowledged) };
        if rc != 0 || unacknowledged == 0 {
            return;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

fn reason(status: u16) -> &'static str {
    match status {
        400 => "Bad Request",
        403 => "Forbidden",
        404 => "Not Found",
        500 => "Internal Server Error",
        501 => "Not Implemented",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        _ => "Injected Fault",
    }
}

fn xml_escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (bytes[i], hex) {
            (b'%', Some(byte)) => {
                out.push(byte);
                i += 3;
            }
            (byte, _) => {
                out.push(byte);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Spreads a seed over all 64 bits (and never yields xorshift's stuck state 0).
fn splitmix64(seed: u64) -> u64 {
    let mut z = seed.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    (z ^ (z >> 31)) | 1
}

/// xorshift64*: small, seedable, good enough to pick faults.
fn xorshift(state: &mut u64) -> u64 {
    let mut x = *state;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *state = x;
    x.wrapping_mul(0x2545_f491_4f6c_dd1d)
}

/// A listener on a free 127.0.0.1 port below the kernel's ephemeral range. The proxy listens
/// on its port again after [`FaultProxy::down`], and while it is down the kernel may hand an
/// ephemeral port to any client connection on the machine (CI saw another test's connection
/// take it: `EADDRINUSE` at `up`). Ports below the range are only ever taken by a bind that asks
/// for them. Falls back to an ephemeral port when none is found there.
fn listen_off_the_ephemeral_range() -> TcpListener {
    use std::hash::{BuildHasher, RandomState};
    let range_start = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|range| range.split_whitespace().next()?.parse::<u32>().ok())
        .unwrap_or(32768);
    // Above the ports of well-known services; chosen at random so that parallel tests rarely
    // try the same one.
    let low = 10_000.min(range_start);
    let span = range_start.saturating_sub(low).max(1);
    let seed = RandomState::new();
    for attempt in 0..64u32 {
        let port = low + (seed.hash_one(attempt) % u64::from(span)) as u32;
        if let Ok(port) = u16::try_from(port)
            && let Ok(listener) = TcpListener::bind(("127.0.0.1", port))
        {
            return listener;
        }
    }
    TcpListener::bind("127.0.0.1:0").expect("bind the fault proxy")
}
