//! What msfs logs: each backend's requests as its `trace_level` asks, JSON on request, and never
//! a secret — checked on the output of real mounts.

use crate::common::{Garage, MsfsMount, config_yaml, s3_backend_yaml};

async fn garage_with(bucket: &str) -> Garage {
    let garage = Garage::start();
    garage.create_bucket(bucket);
    garage
        .put_object(bucket, "f.txt", b"content".to_vec())
        .await;
    garage
}

fn request_lines<'a>(log: &'a str, backend: &str) -> Vec<&'a str> {
    log.lines()
        .filter(|l| l.contains("backend request") && l.contains(&format!("backend=\"{backend}\"")))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_backend_logs_requests_at_its_own_trace_level() {
    let garage = garage_with("traced").await;
    // A second object: both backends share the bucket and so the cache, and a read of the same
    // object through the second would be a cache hit with no request to log.
    garage
        .put_object("traced", "g.txt", b"other".to_vec())
        .await;
    let config = config_yaml(&[
        format!(
            "{}    trace_level: 0\n",
            s3_backend_yaml("quiet", "traced", "", &garage)
        ),
        format!(
            "{}    trace_level: 2\n",
            s3_backend_yaml("chatty", "traced", "", &garage)
        ),
    ]);
    let mut mount = MsfsMount::start(&config, "yaml").expect("mount");
    assert_eq!(
        std::fs::read(mount.path().join("quiet/f.txt")).expect("read"),
        b"content"
    );
    assert_eq!(
        std::fs::read(mount.path().join("chatty/g.txt")).expect("read"),
        b"other"
    );
    assert!(mount.stop_with_umount().success());
    let log = mount.stdout_text();
    assert!(request_lines(&log, "quiet").is_empty(), "{log}");
    let chatty = request_lines(&log, "chatty");
    assert!(
        chatty
            .iter()
            .any(|l| l.contains("operation=\"get\"") && l.contains("key=\"g.txt\"")),
        "{log}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secrets_never_reach_the_output_even_at_full_verbosity() {
    let garage = garage_with("secret").await;
    // SAFETY: nextest runs each test in its own process; nothing else reads the environment here.
    unsafe {
        std::env::set_var("RUST_LOG", "trace");
        std::env::set_var("MSFS_LOG_FORMAT", "json");
    }
    let config = config_yaml(&[format!(
        "{}    trace_level: 3\n",
        s3_backend_yaml("data", "secret", "", &garage)
    )]);
    let mut mount = MsfsMount::start(&config, "yaml").expect("mount");
    assert_eq!(
        std::fs::read(mount.path().join("data/f.txt")).expect("read"),
        b"content"
    );
    let _ = std::fs::read(mount.path().join("data/missing"));
    assert!(mount.stop_with_umount().success());
    let (stdout, stderr) = (mount.stdout_text(), mount.stderr_text());
    assert!(
        stdout.lines().count() > 10,
        "expected a verbose log:\n{stdout}"
    );
    for line in stdout.lines() {
        assert!(
            serde_json::from_str::<serde_json::Value>(line).is_ok(),
            "not JSON: {line}"
        );
    }
    for output in [&stdout, &stderr] {
        assert!(
            !output.contains(garage.secret_key()),
            "the secret key leaked"
        );
    }
}
