//! The Prometheus endpoint of a real mount: after reads through FUSE, the counters it serves
//! match the requests garage saw and the bytes the application read.

use crate::common::{Garage, MsfsMount, config_yaml_with, http_get, read_direct, s3_backend_yaml};

const MIB: usize = 1 << 20;

fn scrape(port: u16) -> String {
    let (status, body) = http_get(port, "/metrics").expect("scrape /metrics");
    assert_eq!(status, 200, "{body}");
    body
}

/// The value of the sample `series` (name and labels exactly as exposed), 0 when absent.
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn counters_match_the_reads_done_through_the_mount() {
    let garage = Garage::start();
    garage.create_bucket("observed");
    let body: Vec<u8> = (0..3 * MIB).map(|i| (i % 253) as u8).collect();
    garage.put_object("observed", "obj", body.clone()).await;
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free port")
        .port();
    let top =
        format!("endpoint: http://127.0.0.1:{port}\ncache_line_size: {MIB}\ncache_lines: 16\n");
    let config = config_yaml_with(&top, &[s3_backend_yaml("data", "observed", "", &garage)]);
    let mount = MsfsMount::start(&config, "yaml").expect("mount");
    assert_eq!(http_get(port, "/healthz").map(|(s, _)| s), Some(200));

    let gets_before = garage.s3_requests("GetObject");
    assert!(read_direct(&mount.path().join("data/obj")) == body);
    let text = scrape(port);
    let gets = garage.s3_requests("GetObject") - gets_before;
    assert_eq!(gets, 3, "one GET per 1 MiB line");
    let get_ok = r#"msfs_backend_operations_total{backend="data",operation="get",status="ok"}"#;
    assert_eq!(sample(&text, get_ok), gets, "{text}");
    assert_eq!(
        sample(&text, r#"msfs_io_bytes_read_total{backend="data"}"#),
        body.len() as u64
    );
    assert_eq!(
        sample(&text, "msfs_cache_misses_total") + sample(&text, "msfs_cache_prefetches_total"),
        3,
        "{text}"
    );
    assert_eq!(
        sample(&text, "msfs_cache_bytes_from_backend_total"),
        body.len() as u64
    );
    assert_eq!(sample(&text, "msfs_mounted_backends"), 1);
    assert!(
        text.contains("msfs_fuse_request_seconds_count{op=\"read\"}"),
        "{text}"
    );

    // Read again: served by the cache, the backend sees nothing.
    let hits_before = sample(&text, "msfs_cache_hits_total");
    assert!(read_direct(&mount.path().join("data/obj")) == body);
    let text = scrape(port);
    assert_eq!(sample(&text, get_ok), gets, "{text}");
    assert!(
        sample(&text, "msfs_cache_hits_total") >= hits_before + 3,
        "{text}"
    );
    assert_eq!(sample(&text, "msfs_cache_lines_resident"), 3);
}
