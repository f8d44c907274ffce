//! `msfs csi --controller` against a real garage, driven over its CSI socket as the
//! csi-provisioner drives it, with a node plugin publishing what it provisions.

use std::collections::HashMap;

use crate::common::csi::{
    CsiPlugin, capability, garage_secrets, map, mounted, publish_request, unpublish_request,
};
use crate::common::fault_proxy::{Fault, FaultPlan, FaultProxy, Match, S3Op};
use crate::common::garage::Garage;
use msfs::csi::proto::volume_capability::access_mode::Mode;
use msfs::csi::proto::{
    CapacityRange, CreateVolumeRequest, DeleteVolumeRequest, GetPluginCapabilitiesRequest,
    ValidateVolumeCapabilitiesRequest, Volume,
};
use tonic::Code;

/// A StorageClass's parameters for `bucket` on `endpoint` (garage's, or a proxy's in front of
/// it), with the node signing with its publish secret.
fn storage_class(garage: &Garage, endpoint: &str, bucket: &str) -> HashMap<String, String> {
    map(&[
        ("bucketName", bucket),
        ("prefix", "claims/"),
        ("endpoint", endpoint),
        ("region", garage.region()),
        ("authenticationSource", "secret"),
        ("csi.storage.k8s.io/pvc/name", "data"),
    ])
}

fn create_request(
    name: &str,
    parameters: HashMap<String, String>,
    secrets: HashMap<String, String>,
    required_bytes: i64,
) -> CreateVolumeRequest {
    CreateVolumeRequest {
        name: name.into(),
        capacity_range: Some(CapacityRange {
            required_bytes,
            limit_bytes: 0,
        }),
        volume_capabilities: vec![capability(Mode::MultiNodeMultiWriter, &[])],
        parameters,
        secrets,
        ..Default::default()
    }
}

fn delete_request(volume_id: &str, secrets: HashMap<String, String>) -> DeleteVolumeRequest {
    DeleteVolumeRequest {
        volume_id: volume_id.into(),
        secrets,
    }
}

async fn create(controller: &CsiPlugin, request: CreateVolumeRequest) -> Volume {
    controller
        .controller()
        .await
        .create_volume(request)
        .await
        .unwrap_or_else(|e| panic!("create: {e}\n{}", controller.log_text()))
        .into_inner()
        .volume
        .expect("a volume")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_is_created_published_written_and_deleted_leaving_its_neighbours() {
    let garage = Garage::start();
    garage.create_bucket("claims");
    let controller = CsiPlugin::start_with(None, &["--controller"]);
    let capabilities = controller
        .identity()
        .await
        .get_plugin_capabilities(GetPluginCapabilitiesRequest {})
        .await
        .expect("capabilities")
        .into_inner();
    assert_eq!(capabilities.capabilities.len(), 1, "{capabilities:?}");

    let parameters = storage_class(&garage, &garage.endpoint(), "claims");
    let name = "pvc-7d1c0e8a-2b44-4d0e-9f1a-0c3e5b6a7d88";
    let request = create_request(name, parameters.clone(), garage_secrets(&garage), 5 << 30);
    let volume = create(&controller, request.clone()).await;
    assert_eq!(volume.capacity_bytes, 5 << 30);
    assert_eq!(volume.volume_context["prefix"], format!("claims/{name}/"));
    assert_eq!(volume.volume_context["region"], garage.region());
    assert!(
        !volume
            .volume_context
            .contains_key("csi.storage.k8s.io/pvc/name")
    );
    // The same request again: the same volume. Another capacity for the name: ALREADY_EXISTS.
    assert_eq!(create(&controller, request.clone()).await, volume);
    let mut other = request.clone();
    other.capacity_range = Some(CapacityRange {
        required_bytes: 1 << 30,
        limit_bytes: 0,
    });
    let conflict = controller
        .controller()
        .await
        .create_volume(other)
        .await
        .expect_err("another capacity");
    assert_eq!(conflict.code(), Code::AlreadyExists, "{conflict:?}");

    // Neighbours: a volume whose name extends this one's, an object named like the prefix,
    // and another base prefix; and their open uploads.
    let neighbours = [
        format!("claims/{name}0/kept"),
        format!("claims/{name}"),
        format!("other/{name}/kept"),
    ];
    for key in &neighbours {
        garage.put_object("claims", key, b"kept".to_vec()).await;
    }
    let neighbour_upload = garage
        .create_upload("claims", &format!("claims/{name}0/big"))
        .await;
    let own_upload = garage
        .create_upload("claims", &format!("claims/{name}/big"))
        .await;

    // The node publishes it as it would a PersistentVolume.
    let node = CsiPlugin::start();
    let target = node.target("pod-1", "data");
    node.node()
        .await
        .node_publish_volume(publish_request(
            &volume.volume_id,
            &target,
            volume.volume_context.clone(),
            garage_secrets(&garage),
        ))
        .await
        .unwrap_or_else(|e| panic!("publish: {e}\n{}", node.log_text()));
    std::fs::create_dir(target.join("dir")).expect("mkdir");
    std::fs::write(target.join("dir/file"), b"written through the claim").expect("write");
    assert_eq!(
        std::fs::read(target.join("dir/file")).expect("read"),
        b"written through the claim"
    );
    node.node()
        .await
        .node_unpublish_volume(unpublish_request(&volume.volume_id, &target))
        .await
        .expect("unpublish");
    assert!(!mounted(&target));
    assert_eq!(
        garage
            .get_object("claims", &format!("claims/{name}/dir/file"))
            .await,
        b"written through the claim"
    );

    let validate = ValidateVolumeCapabilitiesRequest {
        volume_id: volume.volume_id.clone(),
        volume_context: volume.volume_context.clone(),
        volume_capabilities: request.volume_capabilities.clone(),
        secrets: garage_secrets(&garage),
        ..Default::default()
    };
    let confirmed = controller
        .controller()
        .await
        .validate_volume_capabilities(validate.clone())
        .await
        .expect("validate")
        .into_inner();
    assert!(confirmed.confirmed.is_some(), "{confirmed:?}");

    for round in ["delete", "delete again"] {
        controller
            .controller()
            .await
            .delete_volume(delete_request(&volume.volume_id, garage_secrets(&garage)))
            .await
            .unwrap_or_else(|e| panic!("{round}: {e}\n{}", controller.log_text()));
    }
    assert_eq!(
        garage.list_keys("claims", &format!("claims/{name}/")).await,
        Vec::<String>::new()
    );
    let mut left = garage.list_keys("claims", "").await;
    left.sort();
    let mut kept = neighbours.to_vec();
    kept.sort();
    assert_eq!(
        left, kept,
        "only the neighbours are left (the record too is gone)"
    );
    let uploads = garage.pending_uploads("claims").await;
    assert!(
        uploads.iter().any(|(_, id)| *id == neighbour_upload),
        "{uploads:?}"
    );
    assert!(
        !uploads.iter().any(|(_, id)| *id == own_upload),
        "{uploads:?}"
    );
    let gone = controller
        .controller()
        .await
        .validate_volume_capabilities(validate)
        .await
        .expect_err("deleted");
    assert_eq!(gone.code(), Code::NotFound, "{gone:?}");
    // Not one of ours: deleting it succeeds, and so does deleting it without secrets.
    controller
        .controller()
        .await
        .delete_volume(delete_request("pv-static", HashMap::new()))
        .await
        .expect("an unknown volume");
    assert!(
        !controller.log_text().contains(garage.secret_key()),
        "a secret in the log"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keep_data_on_delete_leaves_the_objects_and_the_controller_own_chain_signs() {
    let garage = Garage::start();
    garage.create_bucket("kept");
    // No secret in the requests: the controller signs with its own chain.
    let controller = CsiPlugin::start_with_env(
        None,
        &["--controller"],
        &[
            ("AWS_ACCESS_KEY_ID", garage.access_key()),
            ("AWS_SECRET_ACCESS_KEY", garage.secret_key()),
            ("AWS_EC2_METADATA_DISABLED", "true"),
        ],
    );
    let mut parameters = storage_class(&garage, &garage.endpoint(), "kept");
    parameters.insert("keepDataOnDelete".into(), "true".into());
    let volume = create(
        &controller,
        create_request("pvc-kept", parameters, HashMap::new(), 0),
    )
    .await;
    assert_eq!(volume.capacity_bytes, 0);
    garage
        .put_object("kept", "claims/pvc-kept/result", b"precious".to_vec())
        .await;
    controller
        .controller()
        .await
        .delete_volume(delete_request(&volume.volume_id, HashMap::new()))
        .await
        .unwrap_or_else(|e| panic!("delete: {e}\n{}", controller.log_text()));
    assert_eq!(
        garage.list_keys("kept", "").await,
        ["claims/pvc-kept/result"],
        "the data stays, the record goes"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_parameters_are_named_and_unreachable_or_refusing_stores_told_apart() {
    let garage = Garage::start();
    garage.create_bucket("checked");
    let controller = CsiPlugin::start_with(None, &["--controller"]);
    let refused = |parameters: HashMap<String, String>, secrets: HashMap<String, String>| {
        let controller = &controller;
        async move {
            controller
                .controller()
                .await
                .create_volume(create_request("pvc-bad", parameters, secrets, 1))
                .await
                .expect_err("refused")
        }
    };
    let good = storage_class(&garage, &garage.endpoint(), "checked");
    let with = |key: &str, value: &str| {
        let mut p = good.clone();
        p.insert(key.into(), value.into());
        p
    };
    let without = |key: &str| {
        let mut p = good.clone();
        p.remove(key);
        p
    };
    for (parameters, field) in [
        (without("bucketName"), "bucketName"),
        (with("bucket", "checked"), "bucket"),
        (with("prefix", "claims"), "prefix"),
        (with("backendType", "GCS"), "backendType"),
        (with("keepDataOnDelete", "maybe"), "keepDataOnDelete"),
        (with("posixMetadata", "sometimes"), "posixMetadata"),
        (with("bucketName", "no-such-bucket"), "bucketName"),
    ] {
        let status = refused(parameters, garage_secrets(&garage)).await;
        assert_eq!(status.code(), Code::InvalidArgument, "{field}: {status:?}");
        assert!(
            status.message().starts_with(&format!("{field}: ")),
            "{field}: {status:?}"
        );
    }
    let mut no_capabilities = create_request("pvc-bad", good.clone(), garage_secrets(&garage), 1);
    no_capabilities.volume_capabilities.clear();
    let status = controller
        .controller()
        .await
        .create_volume(no_capabilities)
        .await
        .expect_err("no capabilities");
    assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");

    let closed = format!("http://127.0.0.1:{}", crate::common::free_port());
    let status = refused(
        storage_class(&garage, &closed, "checked"),
        garage_secrets(&garage),
    )
    .await;
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
    let wrong_key = "0000000000000000000000000000000000000000000000000000000000000000";
    let status = refused(
        good.clone(),
        map(&[
            ("access_key_id", garage.access_key()),
            ("secret_access_key", wrong_key),
        ]),
    )
    .await;
    assert_eq!(status.code(), Code::PermissionDenied, "{status:?}");
    assert!(!status.message().contains(wrong_key), "{status:?}");
    let log = controller.log_text();
    assert!(
        !log.contains(wrong_key) && !log.contains(garage.secret_key()),
        "a secret in the log"
    );
    assert_eq!(garage.list_keys("checked", "").await, Vec::<String>::new());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delete_killed_midway_and_repeated_empties_the_prefix() {
    let garage = Garage::start();
    garage.create_bucket("killed");
    let proxy = FaultProxy::in_front_of(&garage);
    let mut controller = CsiPlugin::start_with(None, &["--controller"]);
    let parameters = storage_class(&garage, &proxy.endpoint(), "killed");
    let volume = create(
        &controller,
        create_request("pvc-big", parameters, garage_secrets(&garage), 1),
    )
    .await;
    let client = garage.client();
    let puts = (0..1200).map(|i| {
        let client = client.clone();
        async move {
            client
                .put_object()
                .bucket("killed")
                .key(format!("claims/pvc-big/d{}/f{i}", i % 10))
                .body(b"x".to_vec().into())
                .send()
                .await
                .expect("put")
        }
    });
    futures::future::join_all(puts).await;
    garage
        .put_object("killed", "claims/pvc-bigger/kept", b"k".to_vec())
        .await;
    // The first DeleteObjects lands; the next ones hang until the controller is killed.
    let mut script = vec![None];
    script.extend((0..16).map(|_| Some(Fault::Stall { duration: None })));
    proxy.set(FaultPlan::script(script).only(Match::any().op(S3Op::DeleteObjects)));
    let deleting = {
        let mut client = controller.controller().await;
        let request = delete_request(&volume.volume_id, garage_secrets(&garage));
        tokio::spawn(async move { client.delete_volume(request).await })
    };
    crate::common::wait_until(
        "a DeleteObjects stalls",
        std::time::Duration::from_secs(30),
        async || proxy.stats().faults() >= 1,
    )
    .await;
    controller.kill_and_restart();
    let _ = deleting.await;
    let left = garage.list_keys("killed", "claims/pvc-big/").await.len();
    assert!(
        left > 0 && left < 1200,
        "{left} objects left after the kill"
    );

    proxy.pass_through();
    controller
        .controller()
        .await
        .delete_volume(delete_request(&volume.volume_id, garage_secrets(&garage)))
        .await
        .unwrap_or_else(|e| panic!("repeated delete: {e}\n{}", controller.log_text()));
    assert_eq!(
        garage.list_keys("killed", "").await,
        ["claims/pvc-bigger/kept"]
    );
}
