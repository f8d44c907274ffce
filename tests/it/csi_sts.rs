//! CSI credential flows through STS against a local moto server (S3 + STS): the pod's
//! service-account token exchanged by AssumeRoleWithWebIdentity, AssumeRole from a Secret's
//! keys, renewal on republish with a fresh token, and an unreachable STS failing the publish.
//! Without `roleArn`, the role comes from the pod's ServiceAccount annotation, served by a
//! Kubernetes API fixture the plugin reaches through `KUBECONFIG`.

use std::collections::HashMap;
use std::path::Path;

use crate::common::csi::{CsiPlugin, Moto, map, mounted, publish_request, unpublish_request};
use crate::common::kube_api::{self, KubeApi};
use aws_sdk_s3::primitives::ByteStream;
use tonic::Code;

const ROLE: &str = "arn:aws:iam::123456789012:role/msfs-reader";
const TOKENS_KEY: &str = "csi.storage.k8s.io/serviceAccount.tokens";
const POD_NAMESPACE_KEY: &str = "csi.storage.k8s.io/pod.namespace";
const SERVICE_ACCOUNT_KEY: &str = "csi.storage.k8s.io/serviceAccount.name";

fn tokens(token: &str) -> String {
    serde_json::json!({"sts.amazonaws.com": {"token": token, "expirationTimestamp": "2099-01-01T00:00:00Z"}})
        .to_string()
}

async fn bucket_with(moto: &Moto, bucket: &str, key: &str, body: &str) {
    let s3 = moto.s3();
    s3.create_bucket()
        .bucket(bucket)
        .send()
        .await
        .expect("create bucket");
    s3.put_object()
        .bucket(bucket)
        .key(key)
        .body(ByteStream::from(body.as_bytes().to_vec()))
        .send()
        .await
        .expect("put object");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pod_token_is_exchanged_for_role_credentials_and_renewed_on_republish() {
    let moto = Moto::start();
    bucket_with(&moto, "pod-bucket", "f.txt", "pod data").await;
    let plugin = CsiPlugin::start();
    let mut node = plugin.node().await;
    let target = plugin.target("pod-p", "pv-pod");
    let context = |token: &str| {
        let mut c = map(&[
            ("bucketName", "pod-bucket"),
            ("endpoint", &moto.endpoint()),
            ("authenticationSource", "pod"),
            ("roleArn", ROLE),
            ("stsEndpoint", &moto.endpoint()),
            ("csi.storage.k8s.io/pod.name", "reader"),
        ]);
        c.insert(TOKENS_KEY.into(), tokens(token));
        c
    };
    let request = publish_request("pv-pod", &target, context("token-1"), Default::default());
    node.node_publish_volume(request)
        .await
        .unwrap_or_else(|e| panic!("publish: {e}\n{}", plugin.log_text()));
    assert_eq!(
        std::fs::read_to_string(target.join("f.txt")).expect("read"),
        "pod data"
    );

    // kubelet republishes with a fresh token: same mount, new credentials.
    let again = publish_request("pv-pod", &target, context("token-2"), Default::default());
    node.node_publish_volume(again).await.expect("republish");
    assert!(plugin.log_text().contains("credentials renewed"));
    assert!(!plugin.log_text().contains("token-2"), "token in the log");
    assert_eq!(
        std::fs::read_to_string(target.join("f.txt")).expect("read"),
        "pod data"
    );

    node.node_unpublish_volume(unpublish_request("pv-pod", &target))
        .await
        .expect("unpublish");
    assert!(!target.exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secret_keys_with_role_arn_assume_the_role() {
    let moto = Moto::start();
    bucket_with(&moto, "role-bucket", "g.txt", "role data").await;
    let plugin = CsiPlugin::start();
    let mut node = plugin.node().await;
    let target = plugin.target("pod-r", "pv-role");
    let context = map(&[
        ("bucketName", "role-bucket"),
        ("endpoint", &moto.endpoint()),
        ("authenticationSource", "secret"),
        ("roleArn", ROLE),
        ("stsEndpoint", &moto.endpoint()),
    ]);
    let secrets = map(&[("key_id", "AKIDEXAMPLE"), ("access_key", "base-secret")]);
    node.node_publish_volume(publish_request("pv-role", &target, context, secrets))
        .await
        .unwrap_or_else(|e| panic!("publish: {e}\n{}", plugin.log_text()));
    assert_eq!(
        std::fs::read_to_string(target.join("g.txt")).expect("read"),
        "role data"
    );
    node.node_unpublish_volume(unpublish_request("pv-role", &target))
        .await
        .expect("unpublish");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreachable_sts_fails_the_publish_as_unavailable() {
    let plugin = CsiPlugin::start();
    let mut node = plugin.node().await;
    let target = plugin.target("pod-x", "pv-nosts");
    let mut context = map(&[
        ("bucketName", "any"),
        ("endpoint", "http://127.0.0.1:9"),
        ("authenticationSource", "pod"),
        ("roleArn", ROLE),
        // Nothing listens on the discard port.
        ("stsEndpoint", "http://127.0.0.1:9"),
    ]);
    context.insert(TOKENS_KEY.into(), tokens("token-x"));
    let status = node
        .node_publish_volume(publish_request(
            "pv-nosts",
            &target,
            context,
            Default::default(),
        ))
        .await
        .expect_err("no STS");
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
    assert!(status.message().contains(ROLE), "{status:?}");
    assert!(!mounted(&target));
}

/// A plugin whose `KUBECONFIG` points at `api`; the kubeconfig lives in `dir`.
fn plugin_with_kube_api(api: &KubeApi, dir: &Path) -> CsiPlugin {
    let kubeconfig = dir.join("kubeconfig");
    api.write_kubeconfig(&kubeconfig);
    let path = kubeconfig.display().to_string();
    CsiPlugin::start_with_env(None, &[], &[("KUBECONFIG", &path)])
}

/// What the kubelet passes for a pod of `namespace` running as `service_account`, for a volume
/// with `authenticationSource: pod` and no `roleArn`.
fn pod_context(
    bucket: &str,
    endpoint: &str,
    namespace: &str,
    service_account: &str,
) -> HashMap<String, String> {
    let mut c = map(&[
        ("bucketName", bucket),
        ("endpoint", endpoint),
        ("authenticationSource", "pod"),
        ("stsEndpoint", endpoint),
        ("csi.storage.k8s.io/pod.name", "reader-0"),
        (
            "csi.storage.k8s.io/pod.uid",
            "5d0c6b4e-0000-0000-0000-000000000001",
        ),
        (POD_NAMESPACE_KEY, namespace),
        (SERVICE_ACCOUNT_KEY, service_account),
    ]);
    c.insert(TOKENS_KEY.into(), tokens("sa-token"));
    c
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pod_without_role_arn_assumes_the_role_its_service_account_names() {
    let moto = Moto::start();
    bucket_with(&moto, "sa-bucket", "h.txt", "sa data").await;
    let api = KubeApi::start(&[("team-a", "reader", Some(ROLE))]);
    let dir = tempfile::tempdir().expect("tempdir");
    let plugin = plugin_with_kube_api(&api, dir.path());
    let mut node = plugin.node().await;
    let target = plugin.target("pod-sa", "pv-sa");
    let context = pod_context("sa-bucket", &moto.endpoint(), "team-a", "reader");
    node.node_publish_volume(publish_request(
        "pv-sa",
        &target,
        context,
        Default::default(),
    ))
    .await
    .unwrap_or_else(|e| panic!("publish: {e}\n{}", plugin.log_text()));

    let requests = api.requests();
    assert!(
        requests.iter().any(|r| r.method == "GET"
            && r.path == "/api/v1/namespaces/team-a/serviceaccounts/reader"
            && r.authorization.as_deref() == Some(&format!("Bearer {}", kube_api::TOKEN))),
        "the plugin did not get the ServiceAccount with the kubeconfig's token: {requests:?}"
    );
    assert_eq!(
        std::fs::read_to_string(target.join("h.txt")).expect("read"),
        "sa data"
    );
    let log = plugin.log_text();
    assert!(log.contains(ROLE), "the role read is not logged:\n{log}");
    assert!(!log.contains("sa-token"), "pod token in the log");
    assert!(!log.contains(kube_api::TOKEN), "kube token in the log");

    node.node_unpublish_volume(unpublish_request("pv-sa", &target))
        .await
        .expect("unpublish");
    assert!(!target.exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn service_account_without_the_annotation_is_an_invalid_role_arn() {
    let api = KubeApi::start(&[("team-a", "plain", None)]);
    let dir = tempfile::tempdir().expect("tempdir");
    let plugin = plugin_with_kube_api(&api, dir.path());
    let mut node = plugin.node().await;
    let target = plugin.target("pod-plain", "pv-plain");
    // Nothing listens on the discard port: the publish must fail before any S3 or STS call.
    let context = pod_context("any", "http://127.0.0.1:9", "team-a", "plain");
    let status = node
        .node_publish_volume(publish_request(
            "pv-plain",
            &target,
            context,
            Default::default(),
        ))
        .await
        .expect_err("no role to assume");
    assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");
    assert!(status.message().starts_with("roleArn"), "{status:?}");
    assert!(
        status.message().contains(kube_api::ROLE_ARN_ANNOTATION),
        "{status:?}"
    );
    assert!(status.message().contains("team-a/plain"), "{status:?}");
    assert_eq!(api.requests().len(), 1, "{:?}", api.requests());
    assert!(!mounted(&target));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_service_account_is_not_found() {
    let api = KubeApi::start(&[("team-a", "reader", Some(ROLE))]);
    let dir = tempfile::tempdir().expect("tempdir");
    let plugin = plugin_with_kube_api(&api, dir.path());
    let mut node = plugin.node().await;
    let target = plugin.target("pod-ghost", "pv-ghost");
    let context = pod_context("any", "http://127.0.0.1:9", "team-b", "reader");
    let status = node
        .node_publish_volume(publish_request(
            "pv-ghost",
            &target,
            context,
            Default::default(),
        ))
        .await
        .expect_err("no such ServiceAccount");
    assert_eq!(status.code(), Code::NotFound, "{status:?}");
    assert!(status.message().contains("team-b/reader"), "{status:?}");
    assert!(!mounted(&target));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreachable_kube_api_fails_the_publish_as_unavailable() {
    let api = KubeApi::start(&[]);
    let dir = tempfile::tempdir().expect("tempdir");
    let kubeconfig = dir.path().join("kubeconfig");
    api.write_kubeconfig(&kubeconfig);
    drop(api);
    // The kubeconfig now names a port nothing listens on.
    let path = kubeconfig.display().to_string();
    let plugin = CsiPlugin::start_with_env(None, &[], &[("KUBECONFIG", &path)]);
    let mut node = plugin.node().await;
    let target = plugin.target("pod-down", "pv-down");
    let context = pod_context("any", "http://127.0.0.1:9", "team-a", "reader");
    let status = node
        .node_publish_volume(publish_request(
            "pv-down",
            &target,
            context,
            Default::default(),
        ))
        .await
        .expect_err("no API server");
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
    assert!(status.message().contains("Kubernetes API"), "{status:?}");
    assert!(!mounted(&target));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_kube_config_fails_the_publish_as_unavailable() {
    let dir = tempfile::tempdir().expect("tempdir");
    let absent = dir.path().join("no-kubeconfig").display().to_string();
    // Neither a kubeconfig nor an in-cluster configuration (a bad port), whatever the machine.
    let plugin = CsiPlugin::start_with_env(
        None,
        &[],
        &[
            ("KUBECONFIG", &absent),
            ("KUBERNETES_SERVICE_HOST", "127.0.0.1"),
            ("KUBERNETES_SERVICE_PORT", "not-a-port"),
        ],
    );
    let mut node = plugin.node().await;
    let target = plugin.target("pod-nocfg", "pv-nocfg");
    let context = pod_context("any", "http://127.0.0.1:9", "team-a", "reader");
    let status = node
        .node_publish_volume(publish_request(
            "pv-nocfg",
            &target,
            context,
            Default::default(),
        ))
        .await
        .expect_err("no Kubernetes API configuration");
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
    assert!(
        status.message().contains("no Kubernetes API configuration"),
        "{status:?}"
    );
    assert!(!mounted(&target));
}
