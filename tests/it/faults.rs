//! Reliability under store faults and crashes: a fault-injecting proxy between msfs and garage
//! fails, resets, truncates and delays a tenth of all requests while gigabytes go through the
//! mount; a daemon killed mid-write leaves no partial object, the next daemon aborts the upload
//! it left (and nobody else's) and commits what the killed one acknowledged (its spill logs), and `msfs abort-uploads` still cleans uploads by age. Set
//! `MSFS_TEST_FAULT_SEED` to replay a run's fault schedule.

use std::io::Write;
use std::time::Duration;

use crate::common::fault_proxy::{Fault, FaultPlan, FaultProxy, seed_from_env};
use crate::common::{Garage, MsfsMount, config_yaml_with, pattern, read_direct, wait_until};

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
async fn a_daemon_killed_mid_write_leaves_no_partial_object_and_the_next_one_aborts_its_upload() {
    let garage = Garage::start();
    garage.create_bucket("crash");
    garage
        .put_object("crash", "big", b"the committed version".to_vec())
        .await;
    let backend = format!(
        "{}    readonly: false\n",
        crate::common::s3_backend_yaml("data", "crash", "", &garage)
    );
    // The upload journal lives beside the cache: a directory of this test's own.
    let cache_dir = tempfile::tempdir().expect("cache dir");
    let config = config_yaml_with(
        &format!(
            "multipart_upload_threshold_bytes: 8388608\ncache_dir_path: {}\n",
            cache_dir.path().display()
        ),
        &[backend],
    );
    // No fd holder: the killed daemon's mount dies with it, and its upload is left to the next
    // daemon's journal recovery (with a holder, the next daemon would take the write over).
    let mut m = MsfsMount::start_with_args(&config, "yaml", &["--no-fd-holder"]).expect("mount");
    let path = m.path().join("data/big");
    let parts_before = garage.s3_requests("UploadPart");
    let writer = crate::common::spawn_endless_writer(path);
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
    let killed = garage.pending_uploads("crash").await;
    assert!(
        killed.iter().any(|(key, _)| key == "big"),
        "the killed write left an upload: {killed:?}"
    );
    let journals = crate::common::journal_dirs(cache_dir.path());
    assert_eq!(
        journals.len(),
        1,
        "the killed daemon's journal: {journals:?}"
    );
    // A live writer elsewhere (another node, another tool) has an upload open in the bucket.
    let live = garage.create_upload("crash", "live").await;

    // The next daemon over the same configuration aborts the killed one's upload, and only it.
    let next = MsfsMount::start(&config, "yaml").expect("mount again");
    wait_until(
        "the killed daemon's upload is aborted",
        LANDING,
        async || garage.pending_uploads("crash").await == [("live".to_string(), live.clone())],
    )
    .await;
    wait_until("its journal is removed", LANDING, async || {
        !crate::common::journal_dirs(cache_dir.path()).contains(&journals[0])
    })
    .await;
    // What the killed daemon acknowledged is not lost: the next one commits it from the spill
    // files and their extent logs.
    wait_until(
        "the killed daemon's acknowledged writes land",
        LANDING,
        async || crate::common::is_endless_writer_prefix(&garage.get_object("crash", "big").await),
    )
    .await;
    assert!(
        next.stdout_text()
            .contains("aborted a multipart upload a killed msfs process left"),
        "{}",
        next.stdout_text()
    );

    // `msfs abort-uploads` still lists and aborts uploads nobody journalled (its age filter
    // is what keeps live writers safe there).
    garage.create_upload("crash", "stale").await;
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_msfs"))
        .arg("abort-uploads")
        .arg("--older-than-hours")
        .arg("0")
        .arg(next.config_path())
        .output()
        .expect("run abort-uploads");
    assert!(
        out.status.success(),
        "abort-uploads failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("aborted stale"), "{stdout}");
    assert!(
        garage.pending_uploads("crash").await.is_empty(),
        "uploads left after abort-uploads"
    );
    assert!(
        crate::common::is_endless_writer_prefix(&garage.get_object("crash", "big").await),
        "abort-uploads changed what the next daemon committed"
    );
}
