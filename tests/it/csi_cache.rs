//! The node's cache across CSI plugin restarts (`cache_persistent`): a plugin restarted beside
//! its fd holder takes its volume over and reads what the last one had cached without a GET,
//! and a kill never makes it serve wrong bytes (real garage, real FUSE, real gRPC on the CSI
//! socket).

use crate::common::csi::{
    CsiPlugin, garage_attributes, garage_secrets, publish_request, unpublish_request,
};
use crate::common::holder::FdHolder;
use crate::common::{Garage, pattern, read_direct};

const MIB: usize = 1 << 20;
const BUCKET: &str = "csi-kept-cache";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_plugin_reads_what_the_last_one_cached_without_a_get() {
    let garage = Garage::start();
    garage.create_bucket(BUCKET);
    let body = pattern(5 * MIB + 3, 31);
    garage.put_object(BUCKET, "obj", body.clone()).await;
    let cache_parent = tempfile::tempdir().expect("cache parent");
    let config = format!(
        "msfs_version: 1\ncache_storage: mapped-file\ncache_line_size: {MIB}\ncache_lines: 64\n\
         cache_lines_to_prefetch: 4\ncache_persistent: true\ncache_dir_path: {}\n",
        cache_parent.path().display()
    );
    let holder = FdHolder::start();
    let mut plugin = CsiPlugin::start_with(
        Some(&config),
        &[&format!("--fd-holder-socket={}", holder.socket().display())],
    );
    let target = plugin.target("pod-1", "pv-kept");
    let mut node = plugin.node().await;
    node.node_publish_volume(publish_request(
        "pv-kept",
        &target,
        garage_attributes(&garage, BUCKET),
        garage_secrets(&garage),
    ))
    .await
    .unwrap_or_else(|e| panic!("publish: {e}\n{}", plugin.log_text()));
    assert!(read_direct(&target.join("obj")) == body);

    // A restart of the plugin's container (SIGTERM, as at a node-agent restart): the volume is
    // left to the restarted plugin, which finds the lines the stopped one indexed.
    plugin.restart();
    let before = garage.s3_requests("GetObject");
    assert!(read_direct(&target.join("obj")) == body);
    assert_eq!(
        garage.s3_requests("GetObject") - before,
        0,
        "the restarted plugin fetched lines the stopped one had cached\n{}",
        plugin.log_text()
    );

    // Killed (an OOM kill) right after reading another object: whatever the index had or had
    // not committed of it, the next plugin serves its bytes right.
    let other = pattern(3 * MIB + 9, 32);
    garage.put_object(BUCKET, "other", other.clone()).await;
    assert!(read_direct(&target.join("other")) == other);
    plugin.kill_and_restart();
    assert!(read_direct(&target.join("other")) == other);
    assert!(read_direct(&target.join("obj")) == body);

    let mut node = plugin.node().await;
    node.node_unpublish_volume(unpublish_request("pv-kept", &target))
        .await
        .unwrap_or_else(|e| panic!("unpublish: {e}\n{}", plugin.log_text()));
}
