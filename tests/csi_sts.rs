//! CSI credential flows through STS against a local moto server (S3 + STS): the pod's
//! service-account token exchanged by AssumeRoleWithWebIdentity, AssumeRole from a Secret's
//! keys, renewal on republish with a fresh token, and an unreachable STS failing the publish.

mod common;

use aws_sdk_s3::primitives::ByteStream;
use common::csi::{CsiPlugin, Moto, map, mounted, publish_request, unpublish_request};
use tonic::Code;

const ROLE: &str = "arn:aws:iam::123456789012:role/msfs-reader";
const TOKENS_KEY: &str = "csi.storage.k8s.io/serviceAccount.tokens";

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
