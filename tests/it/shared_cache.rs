//! The shared cache tier with real parts: one garage holds an origin bucket, reached through a
//! counting proxy, and a shared-cache bucket; two `msfs mount` processes are two nodes.

use std::time::{Duration, Instant};

use crate::common::fault_proxy::{Fault, FaultPlan, FaultProxy};
use crate::common::{
    Garage, MsfsMount, config_yaml_with, free_port, http_get, pattern, read_direct, wait_until,
    yaml_str,
};

const MIB: usize = 1 << 20;
/// 3 whole lines and a partial one.
const SIZE: usize = 3 * MIB + 123_457;
const LINES: u64 = 4;

/// The second principal: `GK` and 24 hex digits, and 64 hex digits.
const OTHER_ID: &str = "GK0123456789abcdef01234567";
const OTHER_SECRET: &str = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";

fn scrape(port: u16) -> String {
    let (status, body) = http_get(port, "/metrics").expect("scrape /metrics");
    assert_eq!(status, 200, "{body}");
    body
}

/// The value of `series` (name and labels exactly as exposed), 0 when absent.
fn sample(text: &str, series: &str) -> u64 {
    text.lines()
        .find_map(|line| {
            line.strip_prefix(series)
                .and_then(|rest| rest.strip_prefix(' '))
        })
        .map_or(0, |value| {
            value.trim().parse::<f64>().expect("number") as u64
        })
}

/// One node: a mount of the origin bucket (through `origin_endpoint`, signed by `key`) with a
/// shared cache at `shared_endpoint`, and its metrics port.
struct Node {
    mount: MsfsMount,
    port: u16,
}

impl Node {
    fn metric(&self, series: &str) -> u64 {
        sample(&scrape(self.port), series)
    }

    fn file(&self, name: &str) -> std::path::PathBuf {
        self.mount.path().join("data").join(name)
    }
}

struct Setup<'a> {
    garage: &'a Garage,
    origin_endpoint: String,
    shared_endpoint: String,
    key: (&'a str, &'a str),
    read_timeout_ms: u64,
}

impl Setup<'_> {
    fn node(&self) -> Node {
        let port = free_port();
        let top = format!(
            "endpoint: http://127.0.0.1:{port}\ncache_line_size: {MIB}\ncache_lines: 32\n\
             shared_cache:\n  bucket_container_name: shared\n  prefix: lines/\n  \
             read_timeout_ms: {timeout}\n  S3:\n    endpoint: {shared}\n    region: {region}\n    \
             access_key_id: {id}\n    secret_access_key: {secret}\n",
            timeout = self.read_timeout_ms,
            shared = yaml_str(&self.shared_endpoint),
            region = yaml_str(self.garage.region()),
            id = yaml_str(self.garage.access_key()),
            secret = yaml_str(self.garage.secret_key()),
        );
        let backend = format!(
            "  - dir_name: data\n    bucket_container_name: origin\n    backend_type: S3\n    \
             readonly: true\n    S3:\n      endpoint: {endpoint}\n      region: {region}\n      \
             access_key_id: {id}\n      secret_access_key: {secret}\n",
            endpoint = yaml_str(&self.origin_endpoint),
            region = yaml_str(self.garage.region()),
            id = yaml_str(self.key.0),
            secret = yaml_str(self.key.1),
        );
        let mount = MsfsMount::start(&config_yaml_with(&top, &[backend]), "yaml").expect("mount");
        Node { mount, port }
    }
}

fn garage_with_buckets() -> Garage {
    let garage = Garage::start();
    garage.create_bucket("origin");
    garage.create_bucket("shared");
    garage
}

fn setup<'a>(garage: &'a Garage, origin: &FaultProxy) -> Setup<'a> {
    Setup {
        garage,
        origin_endpoint: origin.endpoint(),
        shared_endpoint: garage.endpoint(),
        key: (garage.access_key(), garage.secret_key()),
        // Generous: on two shared cores a loaded garage may take long, and a timeout would
        // send node B to the origin; the stall tests set their own.
        read_timeout_ms: 5000,
    }
}

async fn wait_for_fills(node: &Node, lines: u64) {
    wait_until(
        "node A filled the shared cache",
        Duration::from_secs(60),
        async || node.metric("msfs_shared_cache_fills_total") >= lines,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_b_reads_what_node_a_read_with_no_origin_get() {
    let garage = garage_with_buckets();
    let origin = FaultProxy::in_front_of(&garage);
    let body = pattern(SIZE, 1);
    garage.put_object("origin", "big", body.clone()).await;
    let setup = setup(&garage, &origin);

    let a = setup.node();
    let before_a = origin.stats().gets;
    assert!(read_direct(&a.file("big")) == body);
    assert!(origin.stats().gets > before_a, "node A read the origin");
    wait_for_fills(&a, LINES).await;
    assert_eq!(a.metric("msfs_shared_cache_hits_total"), 0);

    let b = setup.node();
    let before_b = origin.stats().gets;
    assert!(
        read_direct(&b.file("big")) == body,
        "node B read other bytes"
    );
    assert_eq!(
        origin.stats().gets,
        before_b,
        "node B sent GETs to the origin"
    );
    assert_eq!(b.metric("msfs_shared_cache_hits_total"), LINES);
    assert_eq!(
        b.metric(r#"msfs_shared_cache_bytes_total{direction="read"}"#),
        SIZE as u64
    );
    assert_eq!(b.metric("msfs_shared_cache_fills_total"), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_the_origin_object_changes_node_b_reads_the_new_version() {
    let garage = garage_with_buckets();
    let origin = FaultProxy::in_front_of(&garage);
    let old = pattern(SIZE, 2);
    garage.put_object("origin", "big", old.clone()).await;
    let setup = setup(&garage, &origin);
    let a = setup.node();
    assert!(read_direct(&a.file("big")) == old);
    wait_for_fills(&a, LINES).await;

    // Same size, other bytes: only the ETag tells the versions apart.
    let new = pattern(SIZE, 3);
    garage.put_object("origin", "big", new.clone()).await;
    let b = setup.node();
    let before = origin.stats().gets;
    assert!(
        read_direct(&b.file("big")) == new,
        "node B read the old version"
    );
    assert!(origin.stats().gets > before);
    assert_eq!(b.metric("msfs_shared_cache_hits_total"), 0);
    // And the new version's lines are shared from now on.
    wait_for_fills(&b, LINES).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flipped_bytes_in_a_shared_object_are_never_served() {
    let garage = garage_with_buckets();
    let origin = FaultProxy::in_front_of(&garage);
    let body = pattern(SIZE, 4);
    garage.put_object("origin", "big", body.clone()).await;
    let setup = setup(&garage, &origin);
    let a = setup.node();
    assert!(read_direct(&a.file("big")) == body);
    wait_for_fills(&a, LINES).await;

    let shared = garage.list_keys("shared", "lines/").await;
    assert_eq!(shared.len() as u64, LINES, "{shared:?}");
    for key in &shared {
        let mut object = garage.get_object("shared", key).await;
        let last = object.len() - 1;
        object[last] ^= 0x20;
        garage.put_object("shared", key, object).await;
    }

    let b = setup.node();
    let before = origin.stats().gets;
    assert!(
        read_direct(&b.file("big")) == body,
        "node B served flipped bytes"
    );
    assert!(
        origin.stats().gets > before,
        "node B read the origin instead"
    );
    assert_eq!(
        b.metric("msfs_shared_cache_verification_failures_total"),
        LINES
    );
    assert_eq!(b.metric("msfs_shared_cache_hits_total"), 0);
    // The bad lines are written again, right this time.
    wait_for_fills(&b, LINES).await;
    let c = setup.node();
    let before = origin.stats().gets;
    assert!(read_direct(&c.file("big")) == body);
    assert_eq!(origin.stats().gets, before);
    assert_eq!(c.metric("msfs_shared_cache_hits_total"), LINES);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_shared_cache_leaves_reads_correct_and_opens_the_breaker() {
    let garage = garage_with_buckets();
    let origin = FaultProxy::in_front_of(&garage);
    // Eight files of one line each: more reads than it takes to open the breaker.
    let files: Vec<(String, Vec<u8>)> = (0..8)
        .map(|i| (format!("f{i}"), pattern(MIB / 2, 10 + i)))
        .collect();
    for (name, body) in &files {
        garage.put_object("origin", name, body.clone()).await;
    }
    let setup = Setup {
        shared_endpoint: format!("http://127.0.0.1:{}", free_port()),
        ..setup(&garage, &origin)
    };
    let node = setup.node();
    for (name, body) in &files {
        assert!(read_direct(&node.file(name)) == *body, "{name}");
    }
    let text = scrape(node.port);
    let errors = sample(
        &text,
        r#"msfs_shared_cache_fallbacks_total{reason="error"}"#,
    );
    let open = sample(&text, r#"msfs_shared_cache_fallbacks_total{reason="open"}"#);
    assert_eq!(errors, 5, "the breaker opens after five failures: {text}");
    assert_eq!(open, 3, "{text}");
    assert_eq!(sample(&text, "msfs_shared_cache_hits_total"), 0);
    assert_eq!(sample(&text, "msfs_shared_cache_fills_total"), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_shared_cache_is_given_up_for_the_origin() {
    let garage = garage_with_buckets();
    let origin = FaultProxy::in_front_of(&garage);
    let shared = FaultProxy::in_front_of(&garage);
    // Every shared-cache request hangs far longer than any read may wait.
    shared.set(FaultPlan::always(Fault::stall_forever()));
    let body = pattern(SIZE, 5);
    garage.put_object("origin", "big", body.clone()).await;
    let setup = Setup {
        shared_endpoint: shared.endpoint(),
        read_timeout_ms: 300,
        ..setup(&garage, &origin)
    };
    let node = setup.node();
    let started = Instant::now();
    assert!(read_direct(&node.file("big")) == body);
    // Not a timing assertion of the budget: a read that waited for the stall would never end
    // (and garage's own SDK read timeout is 30 s); this one gave up and read the origin.
    assert!(started.elapsed() < Duration::from_secs(60));
    let text = scrape(node.port);
    assert!(
        sample(
            &text,
            r#"msfs_shared_cache_fallbacks_total{reason="timeout"}"#
        ) >= 1,
        "{text}"
    );
    assert_eq!(sample(&text, "msfs_shared_cache_hits_total"), 0);
    assert!(shared.stats().stalls >= 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_principal_is_never_served_lines_it_did_not_read_itself() {
    let garage = garage_with_buckets();
    garage.import_reader("other", OTHER_ID, OTHER_SECRET, &["origin"]);
    let origin = FaultProxy::in_front_of(&garage);
    let one = pattern(SIZE, 6);
    let two = pattern(SIZE, 7);
    garage.put_object("origin", "one", one.clone()).await;
    garage.put_object("origin", "two", two.clone()).await;
    let setup_a = setup(&garage, &origin);
    let a = setup_a.node();
    assert!(read_direct(&a.file("one")) == one);
    assert!(read_direct(&a.file("two")) == two);
    wait_for_fills(&a, 2 * LINES).await;

    // Node B signs the origin as another principal, allowed to read it: it may read the
    // bytes, but through its own lines, never those the first principal's read filled.
    let b = Setup {
        key: (OTHER_ID, OTHER_SECRET),
        ..setup(&garage, &origin)
    }
    .node();
    let before = origin.stats().gets;
    assert!(read_direct(&b.file("one")) == one);
    assert!(origin.stats().gets > before);
    assert_eq!(b.metric("msfs_shared_cache_hits_total"), 0);

    // Its right taken away, it gets an error for the other file: not the shared bytes that
    // the first principal's read left.
    garage.deny_read("origin", OTHER_ID);
    let read = std::fs::read(b.file("two"));
    assert!(
        read.is_err(),
        "a principal without read rights read {:?} bytes",
        read.map(|r| r.len())
    );
    assert_eq!(b.metric("msfs_shared_cache_hits_total"), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trim_deletes_the_oldest_lines_down_to_max_bytes() {
    let garage = garage_with_buckets();
    let origin = FaultProxy::in_front_of(&garage);
    let first = pattern(SIZE, 8);
    let second = pattern(SIZE, 9);
    garage.put_object("origin", "first", first.clone()).await;
    garage.put_object("origin", "second", second.clone()).await;
    let setup = setup(&garage, &origin);
    let a = setup.node();
    assert!(read_direct(&a.file("first")) == first);
    wait_for_fills(&a, LINES).await;
    // Object times have a one-second resolution: the second file's lines are newer.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    assert!(read_direct(&a.file("second")) == second);
    wait_for_fills(&a, 2 * LINES).await;
    let before = garage.list_keys("shared", "lines/").await;
    assert_eq!(before.len() as u64, 2 * LINES);

    // Room for the second file's lines (and their headers), not for the first's.
    let max = (SIZE + LINES as usize * 1024) as u64;
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_msfs"))
        .args(["shared-cache", "trim"])
        .arg(a.mount.config_path())
        .args(["--max-bytes", &max.to_string()])
        .output()
        .expect("run msfs shared-cache trim");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains(&format!("deleted {LINES} line(s)")),
        "{stdout}"
    );
    let after = garage.list_keys("shared", "lines/").await;
    assert_eq!(after.len() as u64, LINES, "{after:?}");

    // What is left is the second file's: a new node reads it with no origin GET.
    let b = setup.node();
    let before = origin.stats().gets;
    assert!(read_direct(&b.file("second")) == second);
    assert_eq!(origin.stats().gets, before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn msfs_warm_on_one_node_warms_the_shared_cache_for_the_others() {
    let garage = garage_with_buckets();
    let origin = FaultProxy::in_front_of(&garage);
    let body = pattern(SIZE, 11);
    garage.put_object("origin", "big", body.clone()).await;
    let setup = setup(&garage, &origin);
    let a = setup.node();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_msfs"))
        .arg("warm")
        .arg(a.file("big"))
        .output()
        .expect("run msfs warm");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The summary waits for the fills: the other nodes can read it once it is printed.
    assert!(
        stdout.contains(&format!(
            "shared cache: 0 line(s) read from it, {LINES} from the origin; {LINES} filled for the other nodes, 0 dropped"
        )),
        "{stdout}"
    );

    let b = setup.node();
    let before = origin.stats().gets;
    assert!(read_direct(&b.file("big")) == body);
    assert_eq!(origin.stats().gets, before);
}
