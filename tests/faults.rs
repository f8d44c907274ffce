//! Reliability under store faults and crashes: a fault-injecting proxy between msfs and garage
//! fails, resets, truncates and delays a tenth of all requests while gigabytes go through the
//! mount; a daemon killed mid-write leaves no partial object, and `msfs abort-uploads` cleans
//! the uploads it left. Set `MSFS_TEST_FAULT_SEED` to replay a run's fault schedule.

mod common;

use std::io::Write;
use std::time::Duration;

use common::fault_proxy::{Fault, FaultPlan, FaultProxy, seed_from_env};
use common::{Garage, MsfsMount, config_yaml_with, pattern, read_direct, wait_until};

const MIB: usize = 1 << 20;
/// How long background commits under faults may take to land.
const LANDING: Duration = Duration::from_secs(300);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_and_writes_are_correct_under_ten_percent_injected_faults() {
    let garage = Garage::start();
    garage.create_bucket("faults");
    let proxy = FaultProxy::in_front_of(&garage);
    let backend = format!(
        "{}      retry_base_delay: 5\n      retry_max_delay: 100\n    readonly: false\n",
        proxy.s3_backend_yaml("data", "faults", "", &garage)
    );
    let m = MsfsMount::start(&config_yaml_with("", &[backend]), "yaml").expect("mount");
    let root = m.path().join("data");
    proxy.set(FaultPlan::random(
        0.1,
        seed_from_env(),
        vec![
            Fault::service_unavailable(),
            Fault::slow_down(),
            Fault::internal_error(),
            Fault::Reset,
            Fault::ResetMidBody { after: 64 << 10 },
            Fault::Truncate { after: 100_000 },
            Fault::Stall {
                duration: Some(Duration::from_millis(300)),
            },
        ],
    ));

    // 1 GiB written sequentially (streamed multipart), acknowledged by fsync.
    let big = pattern(1024 * MIB, 1);
    {
        let mut file = std::fs::File::create(root.join("big")).expect("create");
        for chunk in big.chunks(MIB) {
            file.write_all(chunk).expect("write");
        }
        file.sync_all().expect("fsync under faults");
    }
    // 1 GiB read back through the mount: every line fetched through the faulty proxy.
    assert!(read_direct(&root.join("big")) == big, "1 GiB read differs");

    // 1,000 small files, committed in the background after each close.
    let small: Vec<Vec<u8>> = (0..1000).map(|i| pattern(4096 + i, i as u64)).collect();
    std::fs::create_dir(root.join("small")).expect("mkdir");
    for (i, body) in small.iter().enumerate() {
        std::fs::write(root.join(format!("small/f{i:04}")), body).expect("write small");
    }
    for (i, body) in small.iter().enumerate() {
        assert!(
            std::fs::read(root.join(format!("small/f{i:04}"))).expect("read small") == *body,
            "small/f{i:04} differs through the mount"
        );
    }
    let stats = proxy.stats();
    assert!(stats.faults() > 0, "faults were injected: {stats:?}");

    proxy.pass_through();
    wait_until("every small file landed", LANDING, async || {
        let keys = garage.list_keys("faults", "small/").await;
        // The directory's own marker ("small/") is listed too.
        keys.iter().filter(|k| k.as_str() != "small/").count() == 1000
    })
    .await;
    for (i, body) in small.iter().enumerate() {
        let stored = garage.get_object("faults", &format!("small/f{i:04}")).await;
        assert!(stored == *body, "small/f{i:04} differs in the store");
    }
    assert!(
        garage.get_object("faults", "big").await == big,
        "the 1 GiB object differs in the store"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_daemon_killed_mid_write_leaves_no_partial_object_and_its_uploads_can_be_aborted() {
    let garage = Garage::start();
    garage.create_bucket("crash");
    garage
        .put_object("crash", "big", b"the committed version".to_vec())
        .await;
    let backend = format!(
        "{}    readonly: false\n",
        common::s3_backend_yaml("data", "crash", "", &garage)
    );
    let config = config_yaml_with("multipart_upload_threshold_bytes: 8388608\n", &[backend]);
    let mut m = MsfsMount::start(&config, "yaml").expect("mount");
    let path = m.path().join("data/big");
    let parts_before = garage.s3_requests("UploadPart");
    let writer = std::thread::spawn(move || {
        // Keeps writing until the mount dies under it.
        let Ok(mut file) = std::fs::OpenOptions::new()
            .write(true)
            .truncate(true)
            .open(&path)
        else {
            return;
        };
        for i in 0..256 {
            if file.write_all(&pattern(MIB, i)).is_err() {
                return;
            }
        }
    });
    wait_until("parts were streamed", LANDING, async || {
        garage.s3_requests("UploadPart") >= parts_before + 2
    })
    .await;
    m.signal(libc::SIGKILL);
    let _ = m.stop_with_signal(libc::SIGKILL);
    let _ = writer.join();

    assert_eq!(
        garage.get_object("crash", "big").await,
        b"the committed version",
        "the object is the last committed version, not a partial one"
    );
    let client = garage.client();
    let pending = client
        .list_multipart_uploads()
        .bucket("crash")
        .send()
        .await
        .expect("list uploads");
    assert!(
        !pending.uploads().is_empty(),
        "the killed write left an upload"
    );

    let out = std::process::Command::new(env!("CARGO_BIN_EXE_msfs"))
        .arg("abort-uploads")
        .arg("--older-than-hours")
        .arg("0")
        .arg(m.config_path())
        .output()
        .expect("run abort-uploads");
    assert!(
        out.status.success(),
        "abort-uploads failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let pending = client
        .list_multipart_uploads()
        .bucket("crash")
        .send()
        .await
        .expect("list uploads");
    assert!(
        pending.uploads().is_empty(),
        "uploads left after abort-uploads"
    );
    assert_eq!(
        garage.get_object("crash", "big").await,
        b"the committed version"
    );
}
