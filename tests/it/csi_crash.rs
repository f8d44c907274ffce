//! The CSI plugin killed (SIGKILL, as by the OOM killer), without an fd holder, while a published
//! volume writes a large file and a small one: no partial object appears, objects committed
//! before stay intact, and once the kubelet's republish brings the volume's credentials back the
//! multipart upload the killed plugin left is aborted (another writer's is left alone) and what
//! it acknowledged is committed from its spill logs.

use std::io::Write;
use std::time::Duration;

use crate::common::csi::{
    CsiPlugin, garage_attributes, garage_secrets, publish_request, unpublish_request,
};
use crate::common::{Garage, journal_dirs, wait_until};

/// How long background work (a commit after close, an abort after a publish) may take.
const LANDING: Duration = Duration::from_secs(120);
const BUCKET: &str = "csi-crash";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_killed_mid_write_leaves_no_partial_object_and_aborts_its_upload_at_the_republish()
{
    let garage = Garage::start();
    garage.create_bucket(BUCKET);
    garage.put_object(BUCKET, "big", "big: committed").await;
    garage
        .put_object(BUCKET, "small.txt", "small: committed")
        .await;
    let mut plugin = CsiPlugin::start_with(
        Some("msfs_version: 1\nmultipart_upload_threshold_bytes: 8388608\n"),
        &[],
    );
    let target = plugin.target("pod-1", "pv-crash");
    let request = || {
        publish_request(
            "pv-crash",
            &target,
            garage_attributes(&garage, BUCKET),
            garage_secrets(&garage),
        )
    };
    let mut node = plugin.node().await;
    node.node_publish_volume(request())
        .await
        .unwrap_or_else(|e| panic!("publish: {e}\n{}", plugin.log_text()));
    // A write through the volume that lands before the crash.
    std::fs::write(target.join("landed.txt"), "landed before the crash").expect("write");
    wait_until("the first write lands", LANDING, async || {
        garage.try_get_object(BUCKET, "landed.txt").await.as_deref()
            == Some(&b"landed before the crash"[..])
    })
    .await;

    // In flight at the kill: a large file streaming its parts, a small one rewritten and still
    // open, a new one written and still open.
    let parts_before = garage.s3_requests("UploadPart");
    let writer = crate::common::spawn_endless_writer(target.join("big"));
    let mut small = std::fs::OpenOptions::new()
        .write(true)
        .truncate(true)
        .open(target.join("small.txt"))
        .expect("open small.txt");
    small
        .write_all(b"small: half-wri")
        .expect("write small.txt");
    let mut fresh = std::fs::File::create(target.join("fresh.txt")).expect("create fresh.txt");
    fresh
        .write_all(b"fresh: half-wri")
        .expect("write fresh.txt");
    wait_until("parts were streamed", LANDING, async || {
        garage.s3_requests("UploadPart") >= parts_before + 2
    })
    .await;
    let live = garage.create_upload(BUCKET, "another-writer").await;

    plugin.kill_and_restart();
    let _ = writer.join();
    drop((small, fresh));

    let intact = async || {
        assert_eq!(garage.get_object(BUCKET, "big").await, b"big: committed");
        assert_eq!(
            garage.get_object(BUCKET, "small.txt").await,
            b"small: committed"
        );
        assert_eq!(
            garage.get_object(BUCKET, "landed.txt").await,
            b"landed before the crash"
        );
        let fresh = garage.try_get_object(BUCKET, "fresh.txt").await;
        assert!(
            fresh.as_ref().is_none_or(|bytes| bytes.is_empty()),
            "a partial new object: {fresh:?}"
        );
    };
    intact().await;
    // The volume's credentials come only with the republish: until then its store is not
    // built, and the killed plugin's upload and journal wait.
    let pending = garage.pending_uploads(BUCKET).await;
    assert!(
        pending.iter().any(|(key, _)| key == "big"),
        "the killed write left its upload: {pending:?}"
    );
    let journals = journal_dirs(plugin.state_dir());
    assert_eq!(
        journals.len(),
        2,
        "the killed plugin's journal and the new one's: {journals:?}"
    );

    // The kubelet republishes (requiresRepublish), with the secrets.
    let mut node = plugin.node().await;
    node.node_publish_volume(request())
        .await
        .unwrap_or_else(|e| panic!("republish after the kill: {e}\n{}", plugin.log_text()));
    wait_until(
        "the killed plugin's upload is aborted",
        LANDING,
        async || {
            garage.pending_uploads(BUCKET).await == [("another-writer".to_string(), live.clone())]
        },
    )
    .await;
    wait_until(
        "the killed plugin's journal is removed",
        LANDING,
        async || journal_dirs(plugin.state_dir()).len() == 1,
    )
    .await;
    // What the killed plugin acknowledged is not lost: the republish commits it from the spill
    // files and their extent logs in the state dir.
    wait_until(
        "the killed plugin's acknowledged writes land",
        LANDING,
        async || {
            crate::common::is_endless_writer_prefix(&garage.get_object(BUCKET, "big").await)
                && garage.try_get_object(BUCKET, "small.txt").await.as_deref()
                    == Some(&b"small: half-wri"[..])
                && garage.try_get_object(BUCKET, "fresh.txt").await.as_deref()
                    == Some(&b"fresh: half-wri"[..])
        },
    )
    .await;
    assert_eq!(
        garage.get_object(BUCKET, "landed.txt").await,
        b"landed before the crash"
    );

    // The volume works again.
    std::fs::write(target.join("after.txt"), "written after the restart").expect("write");
    assert!(crate::common::is_endless_writer_prefix(
        &std::fs::read(target.join("big")).expect("read big")
    ));
    wait_until("the new write lands", LANDING, async || {
        garage.try_get_object(BUCKET, "after.txt").await.as_deref()
            == Some(&b"written after the restart"[..])
    })
    .await;
    node.node_unpublish_volume(unpublish_request("pv-crash", &target))
        .await
        .unwrap_or_else(|e| panic!("unpublish: {e}\n{}", plugin.log_text()));
    assert_eq!(
        garage.pending_uploads(BUCKET).await,
        [("another-writer".to_string(), live)],
        "another writer's upload is never aborted"
    );
}
