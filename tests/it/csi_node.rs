//! The CSI node plugin over its real unix socket, playing kubelet with a tonic client, against a
//! real garage and real FUSE mounts: identity, publish/read/write/unpublish, read-only volumes,
//! idempotency, malformed requests, volume stats and the shared line cache.

use std::io::Write;
use std::path::Path;

use crate::common::Garage;
use crate::common::csi::{
    CsiPlugin, capability, garage_attributes, garage_secrets, map, mounted, publish_request,
    unpublish_request,
};
use msfs::csi::proto::node_service_capability::rpc::Type as NodeCap;
use msfs::csi::proto::volume_capability::access_mode::Mode;
use msfs::csi::proto::{
    ControllerGetCapabilitiesRequest, GetPluginCapabilitiesRequest, GetPluginInfoRequest,
    NodeGetCapabilitiesRequest, NodeGetInfoRequest, NodeGetVolumeStatsRequest,
    NodePublishVolumeRequest, ProbeRequest, node_service_capability,
};
use tonic::Code;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn identity_answers_name_version_capabilities_and_readiness() {
    let plugin = CsiPlugin::start();
    let mut identity = plugin.identity().await;
    let info = identity
        .get_plugin_info(GetPluginInfoRequest {})
        .await
        .expect("GetPluginInfo")
        .into_inner();
    assert_eq!(info.name, msfs::csi::DEFAULT_DRIVER_NAME);
    assert_eq!(info.vendor_version, env!("CARGO_PKG_VERSION"));
    identity
        .get_plugin_capabilities(GetPluginCapabilitiesRequest {})
        .await
        .expect("GetPluginCapabilities");
    let probe = identity
        .probe(ProbeRequest {})
        .await
        .expect("Probe")
        .into_inner();
    assert_eq!(probe.ready, Some(true));

    let mut controller = plugin.controller().await;
    let caps = controller
        .controller_get_capabilities(ControllerGetCapabilitiesRequest {})
        .await
        .expect("ControllerGetCapabilities")
        .into_inner();
    assert!(caps.capabilities.is_empty());

    let mut node = plugin.node().await;
    let info = node
        .node_get_info(NodeGetInfoRequest {})
        .await
        .expect("NodeGetInfo")
        .into_inner();
    assert_eq!(info.node_id, "test-node");
    let caps: Vec<i32> = node
        .node_get_capabilities(NodeGetCapabilitiesRequest {})
        .await
        .expect("NodeGetCapabilities")
        .into_inner()
        .capabilities
        .into_iter()
        .filter_map(|c| {
            c.r#type
                .map(|node_service_capability::Type::Rpc(rpc)| rpc.r#type)
        })
        .collect();
    assert!(caps.contains(&(NodeCap::GetVolumeStats as i32)));
    assert!(!caps.contains(&(NodeCap::StageUnstageVolume as i32)));
}

/// A reload sent to every process named msfs (`kill -HUP $(pidof msfs)`) reaches the plugin
/// too: it says why it ignores it and serves on. Node settings it has no use for are named at
/// its start.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reload_signals_leave_the_plugin_serving_and_unused_settings_are_named() {
    let plugin = CsiPlugin::start_with(Some("msfs_version: 1\nmax_write: 4096\n"), &[]);
    let pid = plugin.pid().expect("running") as libc::pid_t;
    assert!(
        plugin
            .log_text()
            .contains("max_write: without effect in the CSI plugin"),
        "{}",
        plugin.log_text()
    );
    for signal in [libc::SIGHUP, libc::SIGUSR1, libc::SIGUSR2] {
        // SAFETY: kill(2) has no memory-safety preconditions; the plugin is our child.
        unsafe { libc::kill(pid, signal) };
    }
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while plugin
        .log_text()
        .matches("ignored: the CSI plugin reloads nothing")
        .count()
        < 3
    {
        assert!(
            std::time::Instant::now() < deadline,
            "the plugin logs each signal it ignores:\n{}",
            plugin.log_text()
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let probe = plugin
        .identity()
        .await
        .probe(ProbeRequest {})
        .await
        .expect("Probe after the signals")
        .into_inner();
    assert_eq!(probe.ready, Some(true));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn custom_driver_name_is_reported() {
    let plugin = CsiPlugin::start_with(None, &["--driver-name=example.com.msfs"]);
    let info = plugin
        .identity()
        .await
        .get_plugin_info(GetPluginInfoRequest {})
        .await
        .expect("GetPluginInfo")
        .into_inner();
    assert_eq!(info.name, "example.com.msfs");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn publish_read_write_unpublish_with_secret_credentials() {
    let garage = Garage::start();
    garage.create_bucket("csi-rw");
    garage
        .put_object("csi-rw", "data/hello.txt", "hello from s3")
        .await;
    let plugin = CsiPlugin::start();
    let mut node = plugin.node().await;
    let target = plugin.target("pod-1", "pv-rw");
    let mut context = garage_attributes(&garage, "csi-rw");
    context.insert("prefix".into(), "data/".into());
    node.node_publish_volume(publish_request(
        "pv-rw",
        &target,
        context,
        garage_secrets(&garage),
    ))
    .await
    .unwrap_or_else(|e| panic!("publish: {e}\n{}", plugin.log_text()));
    assert!(mounted(&target), "nothing mounted at the target");
    assert_eq!(
        crate::common::mount::mount_fstype(&target).as_deref(),
        Some("fuse.msfs"),
        "the volume's type, as `mount` and `df -T` in the pod show it"
    );
    // The single backend without dirName is the volume's root.
    assert_eq!(
        std::fs::read_to_string(target.join("hello.txt")).expect("read"),
        "hello from s3"
    );
    let mut file = std::fs::File::create(target.join("new.txt")).expect("create");
    file.write_all(b"written through csi").expect("write");
    drop(file);

    node.node_unpublish_volume(unpublish_request("pv-rw", &target))
        .await
        .expect("unpublish");
    assert!(!target.exists(), "target directory left behind");
    // Unpublish commits what was written.
    assert_eq!(
        garage.get_object("csi-rw", "data/new.txt").await,
        b"written through csi"
    );
    // Unpublishing again is fine.
    node.node_unpublish_volume(unpublish_request("pv-rw", &target))
        .await
        .expect("second unpublish");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn several_backends_appear_as_sibling_directories() {
    let garage = Garage::start();
    garage.create_bucket("csi-a");
    garage.create_bucket("csi-b");
    garage.put_object("csi-a", "a.txt", "A").await;
    garage.put_object("csi-b", "b.txt", "B").await;
    let plugin = CsiPlugin::start();
    let mut node = plugin.node().await;
    let target = plugin.target("pod-m", "pv-multi");
    let backends = serde_json::json!([
        {"dirName": "first", "bucketName": "csi-a", "endpoint": garage.endpoint()},
        {"dirName": "second", "bucketName": "csi-b", "endpoint": garage.endpoint(), "readonly": true},
    ]);
    let context = map(&[
        ("backendsJson", &backends.to_string()),
        ("authenticationSource", "secret"),
    ]);
    node.node_publish_volume(publish_request(
        "pv-multi",
        &target,
        context,
        garage_secrets(&garage),
    ))
    .await
    .unwrap_or_else(|e| panic!("publish: {e}\n{}", plugin.log_text()));
    assert_eq!(
        std::fs::read_to_string(target.join("first/a.txt")).expect("a"),
        "A"
    );
    assert_eq!(
        std::fs::read_to_string(target.join("second/b.txt")).expect("b"),
        "B"
    );
    let err = std::fs::File::create(target.join("second/new")).expect_err("read-only backend");
    assert_eq!(err.raw_os_error(), Some(libc::EROFS));
    node.node_unpublish_volume(unpublish_request("pv-multi", &target))
        .await
        .expect("unpublish");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readonly_publish_refuses_writes() {
    let garage = Garage::start();
    garage.create_bucket("csi-ro");
    garage.put_object("csi-ro", "f", "x").await;
    let plugin = CsiPlugin::start();
    let mut node = plugin.node().await;
    for (i, (readonly, mode)) in [
        (true, Mode::MultiNodeMultiWriter),
        (false, Mode::MultiNodeReaderOnly),
    ]
    .into_iter()
    .enumerate()
    {
        let target = plugin.target("pod-ro", &format!("pv-ro-{i}"));
        let mut request = publish_request(
            "pv-ro",
            &target,
            garage_attributes(&garage, "csi-ro"),
            garage_secrets(&garage),
        );
        request.readonly = readonly;
        request.volume_capability = Some(capability(mode, &[]));
        node.node_publish_volume(request)
            .await
            .unwrap_or_else(|e| panic!("publish: {e}\n{}", plugin.log_text()));
        assert_eq!(std::fs::read(target.join("f")).expect("read"), b"x");
        let err = std::fs::File::create(target.join("g")).expect_err("write refused");
        assert_eq!(err.raw_os_error(), Some(libc::EROFS), "{mode:?}");
        node.node_unpublish_volume(unpublish_request("pv-ro", &target))
            .await
            .expect("unpublish");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn republish_is_idempotent_and_different_arguments_already_exist() {
    let garage = Garage::start();
    garage.create_bucket("csi-idem");
    let plugin = CsiPlugin::start();
    let mut node = plugin.node().await;
    let target = plugin.target("pod-i", "pv-idem");
    let request = publish_request(
        "pv-idem",
        &target,
        garage_attributes(&garage, "csi-idem"),
        garage_secrets(&garage),
    );
    node.node_publish_volume(request.clone())
        .await
        .unwrap_or_else(|e| panic!("publish: {e}\n{}", plugin.log_text()));
    node.node_publish_volume(request.clone())
        .await
        .expect("same publish again");
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").expect("mountinfo");
    let count = mounts
        .lines()
        .filter(|l| l.split(' ').nth(4) == Some(&target.display().to_string()))
        .count();
    assert_eq!(count, 1, "a second mount was stacked on the target");

    let mut different = request.clone();
    different.readonly = true;
    let status = node
        .node_publish_volume(different)
        .await
        .expect_err("different arguments");
    assert_eq!(status.code(), Code::AlreadyExists, "{status:?}");
    node.node_unpublish_volume(unpublish_request("pv-idem", &target))
        .await
        .expect("unpublish");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backend_failures_fail_publish_cleanly() {
    let garage = Garage::start();
    garage.create_bucket("csi-exists");
    let plugin = CsiPlugin::start();
    let mut node = plugin.node().await;
    let target = plugin.target("pod-f", "pv-fail");

    let missing = publish_request(
        "pv-fail",
        &target,
        garage_attributes(&garage, "no-such-bucket"),
        garage_secrets(&garage),
    );
    let status = node
        .node_publish_volume(missing)
        .await
        .expect_err("missing bucket");
    assert_eq!(status.code(), Code::NotFound, "{status:?}");
    assert!(!mounted(&target));

    let wrong_secret = map(&[
        ("access_key_id", garage.access_key()),
        (
            "secret_access_key",
            "0000000000000000000000000000000000000000000000000000000000000000",
        ),
    ]);
    let denied = publish_request(
        "pv-fail",
        &target,
        garage_attributes(&garage, "csi-exists"),
        wrong_secret,
    );
    let status = node
        .node_publish_volume(denied)
        .await
        .expect_err("wrong secret");
    assert_eq!(status.code(), Code::PermissionDenied, "{status:?}");
    assert!(
        !status.message().contains("0000000000"),
        "secret in {status:?}"
    );
    assert!(!mounted(&target));
    assert!(
        !plugin.log_text().contains(garage.secret_key()),
        "secret in the log"
    );
}

/// Drops the single-backend attributes, leaving room for `backendsJson`.
fn only_volume_keys(request: &mut NodePublishVolumeRequest) {
    for key in ["bucketName", "endpoint", "region"] {
        request.volume_context.remove(key);
    }
}

fn malformed_requests(
    plugin: &CsiPlugin,
    garage: &Garage,
) -> Vec<(&'static str, NodePublishVolumeRequest)> {
    let target = plugin.target("pod-bad", "pv-bad");
    let good = || {
        publish_request(
            "pv-bad",
            &target,
            garage_attributes(garage, "csi-bad"),
            garage_secrets(garage),
        )
    };
    let with = |f: &dyn Fn(&mut NodePublishVolumeRequest)| {
        let mut r = good();
        f(&mut r);
        r
    };
    let attr = |k: &'static str, v: &'static str| {
        with(&move |r: &mut NodePublishVolumeRequest| {
            r.volume_context.insert(k.into(), v.into());
        })
    };
    let tokens = r#"{"sts.amazonaws.com":{"token":"t"}}"#;
    vec![
        ("volume_id", with(&|r| r.volume_id.clear())),
        ("volume_id", with(&|r| r.volume_id = "a/b".into())),
        ("volume_id", with(&|r| r.volume_id = "..".into())),
        ("target_path", with(&|r| r.target_path.clear())),
        (
            "target_path",
            with(&|r| r.target_path = "relative/mount".into()),
        ),
        (
            "target_path",
            with(&|r| r.target_path = format!("{}/../../etc", r.target_path)),
        ),
        (
            "target_path",
            with(&|r| r.target_path = "/tmp/outside-kubelet".into()),
        ),
        ("volume_capability", with(&|r| r.volume_capability = None)),
        (
            "volume_capability.access_mode",
            with(&|r| {
                r.volume_capability = Some(capability(Mode::Unknown, &[]));
            }),
        ),
        (
            "mountOptions",
            with(&|r| {
                r.volume_capability = Some(capability(Mode::MultiNodeMultiWriter, &["uid=abc"]));
            }),
        ),
        (
            "bucketName",
            with(&|r| {
                r.volume_context.remove("bucketName");
            }),
        ),
        ("backendType", attr("backendType", "ftp")),
        ("backendType", attr("backendType", "file")),
        ("prefix", attr("prefix", "no-trailing-slash")),
        ("endpoint", attr("endpoint", "htp://x")),
        (
            "backendsJson",
            with(&|r| {
                only_volume_keys(r);
                r.volume_context
                    .insert("backendsJson".into(), "[{not json".into());
            }),
        ),
        (
            "backendsJson",
            with(&|r| {
                only_volume_keys(r);
                r.volume_context.insert("backendsJson".into(), "[]".into());
            }),
        ),
        (
            "backendsJson[0].dirName",
            with(&|r| {
                only_volume_keys(r);
                r.volume_context
                    .insert("backendsJson".into(), r#"[{"bucketName": "b"}]"#.into());
            }),
        ),
        (
            "backendsJson[1].prefix",
            with(&|r| {
                only_volume_keys(r);
                r.volume_context.insert(
                "backendsJson".into(),
                r#"[{"dirName": "a", "bucketName": "b"}, {"dirName": "c", "bucketName": "d", "prefix": "p"}]"#.into(),
            );
            }),
        ),
        (
            "bucketName",
            attr("backendsJson", r#"[{"dirName": "a", "bucketName": "b"}]"#),
        ),
        (
            "authenticationSource",
            attr("authenticationSource", "kerberos"),
        ),
        ("nodePublishSecretRef", with(&|r| r.secrets.clear())),
        (
            "csi.storage.k8s.io/serviceAccount.tokens",
            with(&|r| {
                r.volume_context
                    .insert("authenticationSource".into(), "pod".into());
                r.volume_context
                    .insert("roleArn".into(), "arn:aws:iam::123456789012:role/x".into());
            }),
        ),
        (
            "roleArn",
            with(&move |r| {
                r.volume_context
                    .insert("authenticationSource".into(), "pod".into());
                r.volume_context.insert(
                    "csi.storage.k8s.io/serviceAccount.tokens".into(),
                    tokens.into(),
                );
            }),
        ),
        ("roleArn", attr("roleArn", "not-an-arn")),
        ("volume_id", with(&|r| r.volume_id = "v".repeat(129))),
        (
            "backendsJson",
            with(&|r| {
                only_volume_keys(r);
                r.volume_context
                    .insert("backendsJson".into(), format!("[{}]", " ".repeat(70_000)));
            }),
        ),
        (
            "volume_capability",
            with(&|r| {
                r.volume_capability = Some(msfs::csi::proto::VolumeCapability {
                    access_mode: Some(msfs::csi::proto::volume_capability::AccessMode {
                        mode: Mode::SingleNodeWriter as i32,
                    }),
                    access_type: Some(msfs::csi::proto::volume_capability::AccessType::Block(
                        Default::default(),
                    )),
                });
            }),
        ),
        ("readonly", attr("readonly", "maybe")),
        ("bucketNmae", attr("bucketNmae", "typo")),
        ("uid", attr("uid", "-1")),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_publish_requests_are_invalid_arguments_naming_the_field() {
    let garage = Garage::start();
    garage.create_bucket("csi-bad");
    let plugin = CsiPlugin::start();
    let mut node = plugin.node().await;
    let cases = malformed_requests(&plugin, &garage);
    assert!(cases.len() >= 25, "issue #10 asks for at least 25 cases");
    for (field, request) in cases {
        let target = std::path::PathBuf::from(&request.target_path);
        let status = node
            .node_publish_volume(request)
            .await
            .expect_err(&format!("{field}: accepted"));
        assert_eq!(status.code(), Code::InvalidArgument, "{field}: {status:?}");
        assert!(
            status.message().starts_with(field),
            "{field}: message does not name it: {:?}",
            status.message()
        );
        assert!(!mounted(&target), "{field}: left a mount");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_unpublish_and_stats_requests() {
    let plugin = CsiPlugin::start();
    let mut node = plugin.node().await;
    let target = plugin.target("pod-u", "pv-u");
    for (volume_id, path) in [("", target.display().to_string()), ("pv-u", String::new())] {
        let status = node
            .node_unpublish_volume(msfs::csi::proto::NodeUnpublishVolumeRequest {
                volume_id: volume_id.into(),
                target_path: path,
            })
            .await
            .expect_err("invalid unpublish");
        assert_eq!(status.code(), Code::InvalidArgument);
    }
    let status = node
        .node_get_volume_stats(NodeGetVolumeStatsRequest {
            volume_id: "pv-u".into(),
            volume_path: target.display().to_string(),
            staging_target_path: String::new(),
        })
        .await
        .expect_err("not published");
    assert_eq!(status.code(), Code::NotFound);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn volume_stats_answer_for_a_published_target() {
    let garage = Garage::start();
    garage.create_bucket("csi-stats");
    let plugin = CsiPlugin::start();
    let mut node = plugin.node().await;
    let target = plugin.target("pod-s", "pv-stats");
    node.node_publish_volume(publish_request(
        "pv-stats",
        &target,
        garage_attributes(&garage, "csi-stats"),
        garage_secrets(&garage),
    ))
    .await
    .unwrap_or_else(|e| panic!("publish: {e}\n{}", plugin.log_text()));
    let stats = node
        .node_get_volume_stats(NodeGetVolumeStatsRequest {
            volume_id: "pv-stats".into(),
            volume_path: target.display().to_string(),
            staging_target_path: String::new(),
        })
        .await
        .expect("stats")
        .into_inner();
    assert_eq!(stats.usage.len(), 2);
    assert!(stats.usage[0].total > 0);
    assert_eq!(stats.volume_condition.map(|c| c.abnormal), Some(false));
    // csi-sanity: another volume id at this path, or this volume at another path, is NOT_FOUND.
    let elsewhere = plugin.target("pod-s", "pv-other");
    for (volume_id, path) in [("pv-other", &target), ("pv-stats", &elsewhere)] {
        let status = node
            .node_get_volume_stats(NodeGetVolumeStatsRequest {
                volume_id: volume_id.into(),
                volume_path: path.display().to_string(),
                staging_target_path: String::new(),
            })
            .await
            .expect_err("not published there");
        assert_eq!(
            status.code(),
            Code::NotFound,
            "{volume_id} at {}",
            path.display()
        );
    }
    node.node_unpublish_volume(unpublish_request("pv-stats", &target))
        .await
        .expect("unpublish");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_volumes_on_one_bucket_share_the_line_cache() {
    let garage = Garage::start();
    garage.create_bucket("csi-shared");
    let body: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
    garage.put_object("csi-shared", "blob", body.clone()).await;
    // The plugin's own chain holds the same key, but as another principal (`driver`).
    let plugin = CsiPlugin::start_with_env(
        Some("msfs_version: 1\ncache_storage: ram\ncache_line_size: 1048576\ncache_lines: 16\n"),
        &[],
        &[
            ("AWS_ACCESS_KEY_ID", garage.access_key()),
            ("AWS_SECRET_ACCESS_KEY", garage.secret_key()),
            ("AWS_EC2_METADATA_DISABLED", "true"),
        ],
    );
    let mut node = plugin.node().await;
    let first = plugin.target("pod-a", "pv-a");
    let second = plugin.target("pod-b", "pv-b");
    let other_principal = plugin.target("pod-c", "pv-c");
    for (volume_id, target) in [("pv-a", &first), ("pv-b", &second)] {
        node.node_publish_volume(publish_request(
            volume_id,
            target,
            garage_attributes(&garage, "csi-shared"),
            garage_secrets(&garage),
        ))
        .await
        .unwrap_or_else(|e| panic!("publish {volume_id}: {e}\n{}", plugin.log_text()));
    }
    let before = garage.s3_requests("GetObject");
    assert!(
        crate::common::read_direct(&first.join("blob")) == body,
        "bytes differ (first)"
    );
    assert!(
        crate::common::read_direct(&second.join("blob")) == body,
        "bytes differ (second)"
    );
    let gets = garage.s3_requests("GetObject") - before;
    assert_eq!(gets, 1, "one line, fetched once for both volumes");

    // A volume signing as another principal never reads lines fetched with the first one's
    // permission: it fetches (and is checked by the server) itself.
    let mut context = garage_attributes(&garage, "csi-shared");
    context.insert("authenticationSource".into(), "driver".into());
    node.node_publish_volume(publish_request(
        "pv-c",
        &other_principal,
        context,
        Default::default(),
    ))
    .await
    .unwrap_or_else(|e| panic!("publish pv-c: {e}\n{}", plugin.log_text()));
    assert!(
        crate::common::read_direct(&other_principal.join("blob")) == body,
        "bytes differ (other principal)"
    );
    let gets = garage.s3_requests("GetObject") - before;
    assert_eq!(gets, 2, "the other principal's volume fetched its own line");
    for (volume_id, target) in [
        ("pv-a", &first),
        ("pv-b", &second),
        ("pv-c", &other_principal),
    ] {
        node.node_unpublish_volume(unpublish_request(volume_id, target))
            .await
            .expect("unpublish");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_plugin_recovers_its_volumes_at_the_next_republish() {
    let garage = Garage::start();
    garage.create_bucket("csi-restart");
    garage
        .put_object("csi-restart", "hello.txt", "still here")
        .await;
    let mut plugin = CsiPlugin::start();
    let kept = plugin.target("pod-1", "pv-kept");
    let dropped = plugin.target("pod-2", "pv-dropped");
    let request = |volume: &str, target: &Path| {
        publish_request(
            volume,
            target,
            garage_attributes(&garage, "csi-restart"),
            garage_secrets(&garage),
        )
    };
    let mut node = plugin.node().await;
    for (volume, target) in [("pv-kept", &kept), ("pv-dropped", &dropped)] {
        node.node_publish_volume(request(volume, target))
            .await
            .unwrap_or_else(|e| panic!("publish {volume}: {e}\n{}", plugin.log_text()));
    }
    assert_eq!(
        std::fs::read_to_string(kept.join("hello.txt")).expect("read"),
        "still here"
    );

    plugin.kill_and_restart();
    let dead = std::fs::metadata(kept.join("hello.txt")).expect_err("the session died");
    assert_eq!(dead.raw_os_error(), Some(libc::ENOTCONN), "{dead}");
    let staging = plugin.state_dir().join("staging");
    let leftovers: Vec<_> = std::fs::read_dir(&staging).expect("staging").collect();
    assert!(
        leftovers.is_empty(),
        "stale staging mounts cleaned at start: {leftovers:?}"
    );

    // The kubelet republishes (requiresRepublish) and unpublishes as usual.
    let mut node = plugin.node().await;
    node.node_publish_volume(request("pv-kept", &kept))
        .await
        .unwrap_or_else(|e| panic!("republish after restart: {e}\n{}", plugin.log_text()));
    assert_eq!(
        std::fs::read_to_string(kept.join("hello.txt")).expect("read"),
        "still here"
    );
    node.node_unpublish_volume(unpublish_request("pv-dropped", &dropped))
        .await
        .unwrap_or_else(|e| panic!("unpublish after restart: {e}\n{}", plugin.log_text()));
    assert!(!dropped.exists(), "the dead target is detached and removed");
    node.node_unpublish_volume(unpublish_request("pv-kept", &kept))
        .await
        .expect("unpublish");
    assert!(!mounted(&kept) && !kept.exists());
}

/// Reads `path`, waiting (bounded) for a mount that is coming back to serve it.
fn read_when_served(path: &Path, plugin: &CsiPlugin) -> String {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        match std::fs::read_to_string(path) {
            Ok(text) => return text,
            Err(e) if std::time::Instant::now() < deadline => {
                let _ = e;
                std::thread::sleep(std::time::Duration::from_millis(50));
            }
            Err(e) => panic!(
                "{} not served again: {e}\n{}",
                path.display(),
                plugin.log_text()
            ),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_plugin_remounts_volumes_without_secrets_at_once() {
    let garage = Garage::start();
    garage.create_bucket("csi-restore");
    garage
        .put_object("csi-restore", "hello.txt", "back at once")
        .await;
    // The plugin's own AWS chain (`authenticationSource: driver`) holds garage's key.
    let mut plugin = CsiPlugin::start_with_env(
        None,
        &[],
        &[
            ("AWS_ACCESS_KEY_ID", garage.access_key()),
            ("AWS_SECRET_ACCESS_KEY", garage.secret_key()),
            ("AWS_EC2_METADATA_DISABLED", "true"),
        ],
    );
    let driver = plugin.target("pod-1", "pv-driver");
    let secret = plugin.target("pod-2", "pv-secret");
    let mut driver_context = garage_attributes(&garage, "csi-restore");
    driver_context.remove("authenticationSource");
    let mut node = plugin.node().await;
    node.node_publish_volume(publish_request(
        "pv-driver",
        &driver,
        driver_context,
        Default::default(),
    ))
    .await
    .unwrap_or_else(|e| {
        panic!(
            "publish with the driver's chain: {e}\n{}",
            plugin.log_text()
        )
    });
    node.node_publish_volume(publish_request(
        "pv-secret",
        &secret,
        garage_attributes(&garage, "csi-restore"),
        garage_secrets(&garage),
    ))
    .await
    .expect("publish with a secret");
    assert_eq!(
        read_when_served(&driver.join("hello.txt"), &plugin),
        "back at once"
    );
    let state = std::fs::read_to_string(plugin.state_dir().join("published.json"))
        .expect("published volumes are remembered");
    assert!(
        state.contains("pv-driver") && state.contains("pv-secret"),
        "{state}"
    );
    assert!(
        !state.contains(garage.secret_key()),
        "a secret reached the state file"
    );

    plugin.kill_and_restart();
    // No call from the kubelet: the plugin remounts what needs no secret by itself.
    assert_eq!(
        read_when_served(&driver.join("hello.txt"), &plugin),
        "back at once"
    );
    std::fs::write(driver.join("after-restart.txt"), "written again").expect("write");

    // A graceful stop (an upgrade) commits that write, and the next plugin remounts at once too.
    plugin.restart();
    assert_eq!(
        garage.get_object("csi-restore", "after-restart.txt").await,
        b"written again"
    );
    assert_eq!(
        read_when_served(&driver.join("hello.txt"), &plugin),
        "back at once"
    );

    // The secret volume waits for the kubelet; its unpublish still cleans up and forgets it.
    let mut node = plugin.node().await;
    node.node_unpublish_volume(unpublish_request("pv-secret", &secret))
        .await
        .unwrap_or_else(|e| panic!("unpublish after restart: {e}\n{}", plugin.log_text()));
    assert!(!secret.exists(), "the dead target is detached and removed");
    node.node_unpublish_volume(unpublish_request("pv-driver", &driver))
        .await
        .expect("unpublish");
    assert!(!mounted(&driver) && !driver.exists());
    let state =
        std::fs::read_to_string(plugin.state_dir().join("published.json")).expect("state file");
    assert!(
        !state.contains("pv-"),
        "unpublished volumes are forgotten: {state}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_single_writer_volume_is_published_at_one_target_only() {
    let garage = Garage::start();
    garage.create_bucket("csi-single");
    let plugin = CsiPlugin::start();
    let mut node = plugin.node().await;
    let first = plugin.target("pod-1", "pv-single");
    let second = plugin.target("pod-2", "pv-single");
    let request = |target: &Path, mode: Mode| {
        let mut request = publish_request(
            "pv-single",
            target,
            garage_attributes(&garage, "csi-single"),
            garage_secrets(&garage),
        );
        request.volume_capability = Some(capability(mode, &[]));
        request
    };
    node.node_publish_volume(request(&first, Mode::SingleNodeSingleWriter))
        .await
        .unwrap_or_else(|e| panic!("publish: {e}\n{}", plugin.log_text()));
    for mode in [Mode::SingleNodeSingleWriter, Mode::SingleNodeMultiWriter] {
        let refused = node
            .node_publish_volume(request(&second, mode))
            .await
            .expect_err("a second target for a single-writer volume");
        assert_eq!(refused.code(), Code::FailedPrecondition, "{refused:?}");
        assert!(!mounted(&second), "nothing mounted at the refused target");
    }
    // The same target again is an idempotent republish.
    node.node_publish_volume(request(&first, Mode::SingleNodeSingleWriter))
        .await
        .expect("republish");
    node.node_unpublish_volume(unpublish_request("pv-single", &first))
        .await
        .expect("unpublish");
    // Once it is gone, the other target may have it.
    node.node_publish_volume(request(&second, Mode::SingleNodeSingleWriter))
        .await
        .expect("publish at the second target");
    node.node_unpublish_volume(unpublish_request("pv-single", &second))
        .await
        .expect("unpublish");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mount_options_and_the_pod_fs_group_set_owner_and_modes() {
    let garage = Garage::start();
    garage.create_bucket("csi-owner");
    garage.put_object("csi-owner", "f.txt", "owned").await;
    let plugin = CsiPlugin::start();
    let mut node = plugin.node().await;
    let target = plugin.target("pod-1", "pv-owner");
    let mut request = publish_request(
        "pv-owner",
        &target,
        garage_attributes(&garage, "csi-owner"),
        garage_secrets(&garage),
    );
    let mut cap = capability(
        Mode::MultiNodeMultiWriter,
        &["uid=1234", "file-mode=0640", "dir-mode=0750"],
    );
    if let Some(msfs::csi::proto::volume_capability::AccessType::Mount(mount)) =
        cap.access_type.as_mut()
    {
        // The pod's fsGroup, passed by the kubelet because we announce VOLUME_MOUNT_GROUP.
        mount.volume_mount_group = "4321".into();
    }
    request.volume_capability = Some(cap);
    node.node_publish_volume(request)
        .await
        .unwrap_or_else(|e| panic!("publish: {e}\n{}", plugin.log_text()));
    use std::os::unix::fs::MetadataExt;
    let file = std::fs::metadata(target.join("f.txt")).expect("stat file");
    assert_eq!((file.uid(), file.gid()), (1234, 4321));
    assert_eq!(file.mode() & 0o777, 0o640);
    std::fs::create_dir(target.join("d")).expect("mkdir");
    let dir = std::fs::metadata(target.join("d")).expect("stat dir");
    assert_eq!(
        (dir.uid(), dir.gid(), dir.mode() & 0o777),
        (1234, 4321, 0o750)
    );
    node.node_unpublish_volume(unpublish_request("pv-owner", &target))
        .await
        .expect("unpublish");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn anonymous_volumes_send_unsigned_requests() {
    // garage refuses unsigned requests: the publish fails as denied, leaving nothing behind.
    let garage = Garage::start();
    garage.create_bucket("csi-anon");
    let plugin = CsiPlugin::start();
    let mut node = plugin.node().await;
    let target = plugin.target("pod-1", "pv-anon");
    let mut context = garage_attributes(&garage, "csi-anon");
    context.insert("authenticationSource".into(), "anonymous".into());
    let refused = node
        .node_publish_volume(publish_request(
            "pv-anon",
            &target,
            context,
            garage_secrets(&garage),
        ))
        .await
        .expect_err("garage takes no anonymous requests");
    assert_eq!(refused.code(), Code::PermissionDenied, "{refused:?}");
    assert!(!mounted(&target), "no half-made mount");

    // moto serves anonymous reads of a public object.
    let moto = crate::common::csi::Moto::start();
    let s3 = moto.s3();
    s3.create_bucket()
        .bucket("public")
        .send()
        .await
        .expect("bucket");
    s3.put_object()
        .bucket("public")
        .key("open.txt")
        .acl(aws_sdk_s3::types::ObjectCannedAcl::PublicRead)
        .body(aws_sdk_s3::primitives::ByteStream::from_static(
            b"for anyone",
        ))
        .send()
        .await
        .expect("put");
    let context = map(&[
        ("bucketName", "public"),
        ("endpoint", &moto.endpoint()),
        ("region", "us-east-1"),
        ("authenticationSource", "anonymous"),
        ("readonly", "true"),
    ]);
    node.node_publish_volume(publish_request(
        "pv-anon",
        &target,
        context,
        Default::default(),
    ))
    .await
    .unwrap_or_else(|e| panic!("anonymous publish: {e}\n{}", plugin.log_text()));
    assert_eq!(
        std::fs::read_to_string(target.join("open.txt")).expect("read"),
        "for anyone"
    );
    node.node_unpublish_volume(unpublish_request("pv-anon", &target))
        .await
        .expect("unpublish");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unpublish_keeps_the_volume_until_its_writes_land() {
    let garage = Garage::start();
    garage.create_bucket("csi-pending");
    let proxy = crate::common::fault_proxy::FaultProxy::in_front_of(&garage);
    let plugin = CsiPlugin::start();
    let mut node = plugin.node().await;
    let target = plugin.target("pod-1", "pv-pending");
    let mut context = garage_attributes(&garage, "csi-pending");
    context.insert("endpoint".into(), proxy.endpoint());
    node.node_publish_volume(publish_request(
        "pv-pending",
        &target,
        context,
        garage_secrets(&garage),
    ))
    .await
    .unwrap_or_else(|e| panic!("publish: {e}\n{}", plugin.log_text()));

    let mut file = std::fs::File::create(target.join("unsaved.txt")).expect("create");
    proxy.down();
    // Closed without flush_on_close: acknowledged, committed in the background (and failing).
    file.write_all(b"must not be lost").expect("write");
    drop(file);
    let refused = node
        .node_unpublish_volume(unpublish_request("pv-pending", &target))
        .await
        .expect_err("the write cannot land while the server is down");
    assert_eq!(refused.code(), Code::Unavailable, "{refused:?}");
    assert!(
        mounted(&target),
        "the volume stays mounted over its unsaved write"
    );
    assert_eq!(
        std::fs::read_to_string(target.join("unsaved.txt")).expect("read back"),
        "must not be lost"
    );

    proxy.up();
    // The kubelet retries the unpublish; now the write lands first.
    node.node_unpublish_volume(unpublish_request("pv-pending", &target))
        .await
        .unwrap_or_else(|e| panic!("unpublish: {e}\n{}", plugin.log_text()));
    assert!(!target.exists());
    assert_eq!(
        garage.get_object("csi-pending", "unsaved.txt").await,
        b"must not be lost"
    );
}

/// A Python gRPC client (grpcio: gRPC's C core, as in many CSI tools) calling GetPluginInfo
/// twice on each of two channels to `unix://SOCKET` (argv[1]); prints each answer as hex, one
/// a line. On the first channel the C core sends the socket path, percent-encoded, as
/// `:authority`; the second sends it as it is (`/…/csi.sock`), as grpc-java does. The second
/// call of each channel names the authority by its HPACK table index.
const GRPCIO_GET_PLUGIN_INFO: &str = r#"
import sys
import grpc

socket_path = sys.argv[1][len("unix://"):]
for options in ([], [("grpc.default_authority", socket_path)]):
    with grpc.insecure_channel(sys.argv[1], options=options) as channel:
        get_plugin_info = channel.unary_unary(
            "/csi.v1.Identity/GetPluginInfo",
            request_serializer=lambda _: b"",
            response_deserializer=lambda answer: answer,
        )
        for _ in range(2):
            print(get_plugin_info(None, timeout=20).hex())
"#;

fn from_hex(text: &str) -> Vec<u8> {
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&text[i..i + 2], 16).expect("hex from the client"))
        .collect()
}

#[test]
fn python_grpcio_clients_sending_the_socket_path_as_authority_are_answered() {
    use prost::Message;
    use std::process::Command;

    let grpcio = Command::new("python3").args(["-c", "import grpc"]).output();
    match grpcio {
        Ok(out) if out.status.success() => {}
        Ok(out) => panic!(
            "grpcio is not installed for python3 ({}): run scripts/install-test-deps.sh",
            String::from_utf8_lossy(&out.stderr).trim()
        ),
        Err(e) => panic!("cannot run python3 ({e}): run scripts/install-test-deps.sh"),
    }
    let plugin = CsiPlugin::start();
    let endpoint = format!("unix://{}", plugin.socket().display());
    let out = Command::new("python3")
        .args(["-c", GRPCIO_GET_PLUGIN_INFO, &endpoint])
        .output()
        .expect("run python3");
    assert!(
        out.status.success(),
        "grpcio's GetPluginInfo on {endpoint} failed:\n{}\nplugin log:\n{}",
        String::from_utf8_lossy(&out.stderr),
        plugin.log_text()
    );
    let answers: Vec<msfs::csi::proto::GetPluginInfoResponse> =
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(|line| {
                Message::decode(from_hex(line.trim()).as_slice()).expect("a GetPluginInfoResponse")
            })
            .collect();
    assert_eq!(answers.len(), 4, "{answers:?}");
    for info in answers {
        assert_eq!(info.name, msfs::csi::DEFAULT_DRIVER_NAME);
        assert_eq!(info.vendor_version, env!("CARGO_PKG_VERSION"));
    }
}

/// What the kubelet passes for a pod of `team-a` running as ServiceAccount `plain`, for a
/// volume with `authenticationSource: pod` and no `roleArn`; no store or STS is ever reached.
fn pod_context_without_role() -> std::collections::HashMap<String, String> {
    let tokens = serde_json::json!({"sts.amazonaws.com": {"token": "sa-token",
        "expirationTimestamp": "2099-01-01T00:00:00Z"}});
    map(&[
        ("bucketName", "any"),
        ("endpoint", "http://127.0.0.1:9"),
        ("authenticationSource", "pod"),
        ("stsEndpoint", "http://127.0.0.1:9"),
        ("csi.storage.k8s.io/pod.name", "reader-0"),
        (
            "csi.storage.k8s.io/pod.uid",
            "5d0c6b4e-0000-0000-0000-000000000002",
        ),
        ("csi.storage.k8s.io/pod.namespace", "team-a"),
        ("csi.storage.k8s.io/serviceAccount.name", "plain"),
        (
            "csi.storage.k8s.io/serviceAccount.tokens",
            &tokens.to_string(),
        ),
    ])
}

async fn publish_pod_volume(
    node: &mut msfs::csi::proto::node_client::NodeClient<tonic::transport::Channel>,
    target: &Path,
) -> Result<tonic::Response<msfs::csi::proto::NodePublishVolumeResponse>, tonic::Status> {
    node.node_publish_volume(publish_request(
        "pv-k8s",
        target,
        pod_context_without_role(),
        Default::default(),
    ))
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_kubernetes_client_is_set_up_at_first_need_once_and_again_after_a_failure() {
    let dir = tempfile::tempdir().expect("tempdir");
    let kubeconfig = dir.path().join("kubeconfig");
    let path = kubeconfig.display().to_string();
    // No configuration at all yet (and no in-cluster one, whatever the machine).
    let plugin = CsiPlugin::start_with_env(
        None,
        &[],
        &[
            ("KUBECONFIG", &path),
            ("KUBERNETES_SERVICE_HOST", "127.0.0.1"),
            ("KUBERNETES_SERVICE_PORT", "not-a-port"),
        ],
    );
    let ready = |plugin: &CsiPlugin| {
        plugin
            .log_text()
            .matches("Kubernetes API client ready")
            .count()
    };
    // Volumes that do not need the API do not set it up.
    let mut node = plugin.node().await;
    let target = plugin.target("pod-k8s", "pv-k8s");
    let mut secret_context = pod_context_without_role();
    secret_context.insert("authenticationSource".into(), "secret".into());
    node.node_publish_volume(publish_request(
        "pv-k8s",
        &target,
        secret_context,
        map(&[("access_key_id", "a"), ("secret_access_key", "b")]),
    ))
    .await
    .expect_err("nothing listens on the store's port");
    assert_eq!(ready(&plugin), 0, "{}", plugin.log_text());

    let status = publish_pod_volume(&mut node, &target)
        .await
        .expect_err("no configuration");
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
    assert!(
        status.message().contains("no Kubernetes API configuration"),
        "{status:?}"
    );

    // The failed setup is not kept: a kubeconfig that appears is used by the next publish.
    let api = crate::common::kube_api::KubeApi::start(&[("team-a", "plain", None)]);
    api.write_kubeconfig(&kubeconfig);
    for lookups in 1..=2 {
        let status = publish_pod_volume(&mut node, &target)
            .await
            .expect_err("no role annotation");
        assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");
        assert!(status.message().contains("team-a/plain"), "{status:?}");
        assert_eq!(api.requests().len(), lookups, "{:?}", api.requests());
    }
    // One client for every lookup of the plugin.
    assert_eq!(ready(&plugin), 1, "{}", plugin.log_text());
    assert!(!mounted(&target));
}
