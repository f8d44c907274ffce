//! The no-progress watchdog through a real mount: a FUSE request held up by a store that stops
//! answering is logged with its operation, inode and age once it passes
//! `fuse_request_stall_warn_secs`, and counted in `msfs_fuse_requests_stalled_total`; once the
//! store answers again the request completes and nothing stays stuck.

use std::os::unix::fs::MetadataExt;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use crate::common::fault_proxy::{Fault, FaultPlan, FaultProxy};
use crate::common::{Garage, MsfsMount, config_yaml_with, free_port, http_get};

/// Longest wait for anything here; a hang guard, never a timing assertion.
const LIMIT: Duration = Duration::from_secs(120);

/// The value of the sample `series` (name and labels exactly as exposed), 0 when absent.
fn sample(text: &str, series: &str) -> u64 {
    text.lines()
        .find_map(|line| line.strip_prefix(series)?.strip_prefix(' '))
        .map_or(0, |value| {
            value.trim().parse::<f64>().expect("number") as u64
        })
}

fn daemon_log(mount: &MsfsMount) -> String {
    mount.stdout_text() + &mount.stderr_text()
}

/// Polls `done` every 100 ms until it holds; fails with `what` and `context()` after [`LIMIT`].
fn eventually(what: &str, mut done: impl FnMut() -> bool, context: impl Fn() -> String) {
    let deadline = Instant::now() + LIMIT;
    while !done() {
        assert!(
            Instant::now() < deadline,
            "timed out after {LIMIT:?} waiting until {what}\n{}",
            context()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_stalled_on_a_silent_store_is_logged_with_its_op_and_inode_and_counted() {
    let garage = Garage::start();
    garage.create_bucket("stalls");
    garage
        .put_object("stalls", "obj", b"answered".to_vec())
        .await;
    let proxy = FaultProxy::in_front_of(&garage);
    let port = free_port();
    let top = format!("fuse_request_stall_warn_secs: 1\nendpoint: http://127.0.0.1:{port}\n");
    let config = config_yaml_with(
        &top,
        &[proxy.s3_backend_yaml("data", "stalls", "", &garage)],
    );
    let mut mount = MsfsMount::start(&config, "yaml").expect("mount");
    let dir = mount.path().join("data");
    let dir_ino = std::fs::metadata(&dir).expect("stat data").ino();

    // The store goes silent; a stat of a file in `data` waits in a FUSE lookup on its inode.
    proxy.set(FaultPlan::always(Fault::stall_forever()));
    let (done_tx, done_rx) = mpsc::channel();
    let file = dir.join("obj");
    let stat = std::thread::spawn(move || {
        let result = std::fs::metadata(file).map(|m| m.len());
        let _ = done_tx.send(());
        result
    });
    let log = || daemon_log(&mount);
    let warning = |log: &str| {
        log.lines()
            .find(|line| {
                line.contains("WARN")
                    && line.contains("FUSE request unanswered")
                    && line.contains("op=lookup")
                    && line.contains(&format!("ino={dir_ino}"))
            })
            .map(str::to_string)
    };
    eventually(
        "the stalled lookup is logged",
        || warning(&log()).is_some(),
        || format!("--- msfs log ---\n{}", log()),
    );
    let line = warning(&log()).expect("the warning");
    assert!(
        line.contains("age_secs="),
        "the warning gives the age: {line}"
    );
    let metrics = || http_get(port, "/metrics").map_or(String::new(), |(_, body)| body);
    let stalled = r#"msfs_fuse_requests_stalled_total{op="lookup"}"#;
    eventually(
        "the stalled lookup is counted",
        || sample(&metrics(), stalled) >= 1,
        metrics,
    );
    assert!(
        done_rx.try_recv().is_err(),
        "the stat was answered while the store was silent: {:?}",
        stat.join()
    );

    // The store answers again: the request completes and the mount stops cleanly.
    proxy.pass_through();
    done_rx
        .recv_timeout(LIMIT)
        .unwrap_or_else(|e| panic!("the stat never completed ({e})\n{}", log()));
    let result = stat.join().expect("the stat thread");
    assert_eq!(result.expect("stat of data/obj"), b"answered".len() as u64);
    let status = mount.stop_with_umount();
    assert!(status.success(), "{status}\n{}", daemon_log(&mount));
}
