//! The shared cache in the CSI plugin: two plugin processes as two nodes, the `shared_cache`
//! section in their node file, the origin bucket behind a counting proxy: a volume published on
//! the second node reads what the first node's volume read with no origin GET.

use crate::common::csi::{
    CsiPlugin, garage_attributes, garage_secrets, publish_request, unpublish_request,
};
use crate::common::fault_proxy::FaultProxy;
use crate::common::{Garage, pattern, read_direct, wait_until, yaml_str};

const MIB: usize = 1 << 20;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_node_plugin_reads_through_the_shared_cache() {
    let garage = Garage::start();
    garage.create_bucket("origin");
    garage.create_bucket("shared");
    let origin = FaultProxy::in_front_of(&garage);
    let body = pattern(3 * MIB + 4321, 41);
    garage.put_object("origin", "obj", body.clone()).await;
    let config = format!(
        "msfs_version: 1\ncache_line_size: {MIB}\ncache_lines: 32\nshared_cache:\n  \
         bucket_container_name: shared\n  prefix: nodes/\n  read_timeout_ms: 5000\n  S3:\n    \
         endpoint: {endpoint}\n    region: {region}\n    access_key_id: {id}\n    \
         secret_access_key: {secret}\n",
        endpoint = yaml_str(&garage.endpoint()),
        region = yaml_str(garage.region()),
        id = yaml_str(garage.access_key()),
        secret = yaml_str(garage.secret_key()),
    );
    let mut attributes = garage_attributes(&garage, "origin");
    attributes.insert("endpoint".into(), origin.endpoint());

    let mut targets = Vec::new();
    let mut plugins = Vec::new();
    for node in ["a", "b"] {
        let plugin = CsiPlugin::start_with(Some(&config), &[]);
        let target = plugin.target(&format!("pod-{node}"), "pv-shared");
        let mut client = plugin.node().await;
        client
            .node_publish_volume(publish_request(
                "pv-shared",
                &target,
                attributes.clone(),
                garage_secrets(&garage),
            ))
            .await
            .unwrap_or_else(|e| panic!("publish on {node}: {e}\n{}", plugin.log_text()));
        targets.push(target);
        plugins.push(plugin);
    }

    assert!(read_direct(&targets[0].join("obj")) == body);
    // Node A's fills land in the shared bucket in the background.
    wait_until(
        "node A filled 4 lines",
        std::time::Duration::from_secs(60),
        async || garage.list_keys("shared", "nodes/").await.len() == 4,
    )
    .await;

    let before = origin.stats().gets;
    assert!(
        read_direct(&targets[1].join("obj")) == body,
        "node B read other bytes"
    );
    assert_eq!(
        origin.stats().gets,
        before,
        "node B's plugin read the origin\n{}",
        plugins[1].log_text()
    );

    for (plugin, target) in plugins.iter().zip(&targets) {
        let mut client = plugin.node().await;
        client
            .node_unpublish_volume(unpublish_request("pv-shared", target))
            .await
            .unwrap_or_else(|e| panic!("unpublish: {e}\n{}", plugin.log_text()));
    }
}
