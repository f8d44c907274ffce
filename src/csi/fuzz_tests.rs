//! Property tests (the CSI request validation's fuzz target): random NodePublishVolume requests
//! through every check a publish makes before it touches the network or the node — request
//! fields (`publish_args`), volume attributes (`VolumeAttributes::parse`), credentials
//! (`check_request`, `resolve` where it needs no STS) and the backends built from them
//! (`backend_configs`).
//!
//! Volume ids and targets are glued from traversal pieces (`/`, `..`, NUL, unicode); attributes
//! mix the real names with junk, values mix good ones with broken ones and JSON fragments.
//! Every secret and token carries a mark, so a leak is a substring search. Cases per property:
//! the `with_cases` count, which `PROPTEST_CASES` overrides (the `proptest!` macro lays the
//! environment over the config). Failures are saved under `proptest-regressions/` and replayed
//! first; inputs that once failed are also kept below as named tests.

use std::collections::HashMap;
use std::path::{Component, Path};

use proptest::prelude::*;
use proptest::test_runner::Config as ProptestConfig;
use serde_json::Value;
use tonic::{Code, Status};

use super::attributes::{
    BACKEND_KEYS, EPHEMERAL_KEY, POD_NAMESPACE_KEY, SERVICE_ACCOUNT_NAME_KEY, TOKENS_KEY,
    VOLUME_KEYS,
};
use super::credentials::{AuthSource, Keys, StaticKeys};
use super::error::CsiError;
use super::proto::NodePublishVolumeRequest;
use super::proto::VolumeCapability;
use super::proto::volume_capability::{AccessMode, AccessType, BlockVolume, MountVolume};
use super::request::publish_args;
use super::service_account::KubeApi;
use crate::config::Secret;

const PODS_DIR: &str = "/var/lib/kubelet/pods";

/// Carried by every secret value and token, and by nothing else the strategies make.
const SECRET_MARK: &str = "S3CR3T";

/// Request fields (not attributes) an error may name.
const REQUEST_FIELDS: &[&str] = &[
    "volume_id",
    "target_path",
    "volume_capability",
    "volume_capability.access_type",
    "volume_capability.access_mode",
    "volume_capability.mount.volume_mount_group",
    "mountOptions",
    "nodePublishSecretRef",
    TOKENS_KEY,
];

fn glue(pieces: &'static [&'static str], max: usize) -> impl Strategy<Value = String> {
    prop::collection::vec(prop::sample::select(pieces), 1..=max).prop_map(|p| p.concat())
}

fn volume_id() -> impl Strategy<Value = String> {
    prop_oneof![
        12 => glue(&["pv", "-", "1", "a.b"], 4),
        2 => glue(&["pv", "/", "..", ".", "\0", "é", "日本", " ", "\n", "%", "~", "-"], 4),
        1 => any::<String>(),
        1 => (100usize..200).prop_map(|n| "v".repeat(n)),
    ]
}

fn target_path() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => "[a-z0-9-]{1,8}".prop_map(|uid| {
            format!("{PODS_DIR}/{uid}/volumes/kubernetes.io~csi/pv/mount")
        }),
        1 => hostile_target_path(),
    ]
}

fn hostile_target_path() -> impl Strategy<Value = String> {
    let start = prop::sample::select(
        &[
            PODS_DIR,
            PODS_DIR,
            PODS_DIR,
            "/var/lib/kubelet/podsx",
            "/var/lib/kubelet",
            "",
            "relative",
            "/",
            "//var/lib/kubelet/pods",
        ][..],
    );
    let segment = prop::sample::select(
        &[
            "uid",
            "volumes",
            "kubernetes.io~csi",
            "pv",
            "mount",
            "..",
            ".",
            "",
            "\0",
            "x/../..",
            "日本",
            "...",
        ][..],
    );
    (start, prop::collection::vec(segment, 0..6), any::<bool>()).prop_map(
        |(start, segments, slash)| {
            let mut path = start.to_string();
            for segment in segments {
                path.push('/');
                path.push_str(segment);
            }
            if slash {
                path.push('/');
            }
            path
        },
    )
}

fn mount_flag() -> impl Strategy<Value = String> {
    prop_oneof![
        12 => prop::sample::select(&[
            "ro",
            "rw",
            "read-only",
            "uid=1000",
            " uid = 5 ",
            "file-mode=0644",
            "file-mode=7777",
            "dir-mode=1777",
            "dir-mode=0755",
            "noatime,nosuid",
            ",,",
            "allow_other",
            "allow-other",
        ][..])
        .prop_map(str::to_string),
        3 => prop::sample::select(&[
            "gid=abc",
            "uid=-1",
            "dir-mode=999",
            "file-mode=",
            "exec",
            "=",
            "uid=4294967296",
        ][..])
        .prop_map(str::to_string),
        1 => any::<String>(),
    ]
}

fn capability() -> impl Strategy<Value = Option<VolumeCapability>> {
    let access_type = prop_oneof![
        1 => Just(None),
        1 => Just(Some(AccessType::Block(BlockVolume {}))),
        30 => (
            prop::collection::vec(mount_flag(), 0..2),
            prop_oneof![
                8 => Just(""),
                2 => Just("1000"),
                1 => prop::sample::select(&["abc", "-1", "99999999999"][..]),
            ],
            prop::sample::select(&["", "ext4"][..]),
        )
            .prop_map(|(mount_flags, group, fs_type)| {
                Some(AccessType::Mount(MountVolume {
                    fs_type: fs_type.into(),
                    mount_flags,
                    volume_mount_group: group.into(),
                }))
            }),
    ];
    let access_mode = prop_oneof![
        1 => Just(None),
        1 => (-1i32..9).prop_map(|mode| Some(AccessMode { mode })),
        30 => (1i32..=7).prop_map(|mode| Some(AccessMode { mode })),
    ];
    prop::option::weighted(0.98, (access_type, access_mode)).prop_map(|c| {
        c.map(|(access_type, access_mode)| VolumeCapability {
            access_type,
            access_mode,
        })
    })
}

fn pick(good: &'static [&'static str], bad: &'static [&'static str]) -> BoxedStrategy<String> {
    prop_oneof![
        6 => prop::sample::select(good).prop_map(str::to_string),
        1 => prop::sample::select(bad).prop_map(str::to_string),
    ]
    .boxed()
}

/// A value for attribute `key`: mostly plausible, sometimes broken, now and then anything.
fn attribute_value(key: &str) -> BoxedStrategy<String> {
    let typed = match key {
        "bucketName" => pick(&["data", "b-1", "a.b"], &["", " ", "$HOME"]),
        "prefix" => pick(&["", "p/", "a/b/"], &["p", "/", "${X}/"]),
        "endpoint" | "stsEndpoint" => pick(
            &["http://127.0.0.1:9000", "https://s3.example.com"],
            &["htp://x", "https://", "", "http://a b", "${AWS_ENDPOINT}"],
        ),
        "region" | "stsRegion" => pick(&["us-east-1", "eu-west-1"], &["", " "]),
        "backendType" => pick(
            &["S3", "s3", "AIStore", "GCS"],
            &["file", "RAM", "PSEUDO", "x"],
        ),
        "readonly" | "flushOnClose" | "posixMetadata" => {
            pick(&["true", "false", "TRUE"], &["yes", "", "1"])
        }
        "dirName" => pick(
            &["a", "b", "data", "é"],
            &[".", "..", "a/b", "", "\0", "$$"],
        ),
        "uid" | "gid" | "traceLevel" => pick(&["0", "1000", "3"], &["-1", "abc", "4294967296"]),
        "dirPerm" | "filePerm" => pick(&["755", "0644", "0777"], &["999", "rwx", "7777", ""]),
        "manifestPath" => pick(&["/var/lib/m"], &["relative", ""]),
        "warm" => pick(
            &["train/", "a/,b.csv", " x , y/ "],
            &["/abs", "../up/", "a//b"],
        ),
        "authenticationSource" => pick(
            &["driver", "secret", "anonymous", "pod", " Secret "],
            &["x", "", "SECRET"],
        ),
        "roleArn" => pick(&["arn:aws:iam::1:role/r"], &["arn: x", "role", ""]),
        "backendsJson" => backends_json(),
        TOKENS_KEY => pick(
            &[
                r#"{"sts.amazonaws.com":{"token":"S3CR3T-tok","expirationTimestamp":"x"}}"#,
                r#"{"sts.amazonaws.com":{"token":"S3CR3T-tok"}}"#,
            ],
            &[
                r#"{"sts.amazonaws.com":{"token":""}}"#,
                r#"{"vault":{"token":"S3CR3T-v"}}"#,
                r#"{"sts.amazonaws.com":"S3CR3T-t"#,
                "[]",
            ],
        ),
        EPHEMERAL_KEY => pick(&["true", "false"], &["TRUE", ""]),
        POD_NAMESPACE_KEY | SERVICE_ACCOUNT_NAME_KEY => {
            pick(&["team-a", "reader"], &["", "Bad_Name", "a/b"])
        }
        _ => pick(&["v", ""], &["x"]),
    };
    prop_oneof![
        12 => typed,
        1 => any::<String>(),
        // Past the 64 KiB bound on one attribute.
        1 => Just("x".repeat(64 * 1024 + 1)),
    ]
    .boxed()
}

/// `backendsJson`: a list of backend objects (keys from the real list and junk, values of
/// every JSON type), or a JSON fragment that is not one.
fn backends_json() -> BoxedStrategy<String> {
    let value = |key: &'static str| {
        prop_oneof![
            8 => attribute_value(key).prop_map(Value::String),
            1 => any::<i64>().prop_map(Value::from),
            1 => any::<bool>().prop_map(Value::from),
            1 => Just(Value::Null),
            1 => Just(serde_json::json!([1, {"a": "b"}])),
        ]
    };
    let key = prop_oneof![
        10 => prop::sample::select(&BACKEND_KEYS[..]),
        1 => prop::sample::select(&["bucket", "roleArn", "", "dir_name"][..]),
    ];
    let item = prop::collection::vec(key.prop_flat_map(move |k| (Just(k), value(k))), 0..5)
        .prop_map(|pairs| {
            let mut map: serde_json::Map<String, Value> =
                pairs.into_iter().map(|(k, v)| (k.to_string(), v)).collect();
            // Most entries name their directory and bucket, so the checks behind them run.
            map.entry("dirName").or_insert_with(|| Value::from("d"));
            map.entry("bucketName").or_insert_with(|| Value::from("b"));
            Value::Object(map)
        });
    prop_oneof![
        8 => prop::collection::vec(
            prop_oneof![10 => item, 1 => Just(Value::from("x")), 1 => Just(Value::Null)],
            0..4,
        )
        .prop_map(|items| Value::Array(items).to_string()),
        1 => prop::sample::select(&[
            "", "[", "[{", "{}", "null", "[1]", "[{}]", "[[]]", "\"x\"", "[{\"dirName\":",
        ][..])
        .prop_map(str::to_string),
        1 => any::<String>(),
    ]
    .boxed()
}

fn volume_context() -> impl Strategy<Value = HashMap<String, String>> {
    let key = prop_oneof![
        6 => prop::sample::select(&BACKEND_KEYS[..]),
        3 => prop::sample::select(&VOLUME_KEYS[..]),
        2 => prop::sample::select(&[
            TOKENS_KEY,
            POD_NAMESPACE_KEY,
            SERVICE_ACCOUNT_NAME_KEY,
            EPHEMERAL_KEY,
            "csi.storage.k8s.io/pod.name",
        ][..]),
        1 => prop::sample::select(&["bucket", "BucketName", "", "dir_name", "secret"][..]),
    ]
    .prop_map(str::to_string);
    let key = prop_oneof![12 => key, 1 => any::<String>()];
    let pairs = prop::collection::vec(
        key.prop_flat_map(|k| {
            let value = attribute_value(&k);
            (Just(k), value)
        }),
        0..6,
    );
    (pairs, prop::bool::weighted(0.8)).prop_map(|(pairs, with_bucket)| {
        let mut context: HashMap<String, String> = pairs.into_iter().collect();
        if with_bucket && !context.contains_key("backendsJson") {
            context
                .entry("bucketName".into())
                .or_insert_with(|| "data".into());
        }
        context
    })
}

fn secrets() -> impl Strategy<Value = HashMap<String, String>> {
    let key = prop::sample::select(
        &[
            "access_key_id",
            "key_id",
            "secret_access_key",
            "access_key",
            "session_token",
            "other",
        ][..],
    );
    let value = prop_oneof![
        4 => "[A-Za-z0-9/+=$]{1,12}",
        1 => Just(String::new()),
        1 => any::<String>(),
    ]
    .prop_map(|v| format!("{SECRET_MARK}{v}"));
    prop::collection::hash_map(key.prop_map(str::to_string), value, 0..4)
}

prop_compose! {
    fn request()(
        volume_id in volume_id(),
        target_path in target_path(),
        volume_capability in capability(),
        readonly in any::<bool>(),
        secrets in secrets(),
        volume_context in volume_context(),
    ) -> NodePublishVolumeRequest {
        NodePublishVolumeRequest {
            volume_id,
            publish_context: HashMap::new(),
            staging_target_path: String::new(),
            target_path,
            volume_capability,
            readonly,
            secrets,
            volume_context,
        }
    }
}

/// The backend attribute an error field names, and whether the request set it: `bucketName`,
/// or `backendsJson[1].prefix` looked up in that entry of `backendsJson`.
fn backend_attribute<'f>(field: &'f str, request: &NodePublishVolumeRequest) -> (&'f str, bool) {
    let context = &request.volume_context;
    let Some(rest) = field.strip_prefix("backendsJson[") else {
        return (field, context.contains_key(field));
    };
    let Some((index, attribute)) = rest.split_once("].") else {
        return (field, true);
    };
    let items: Option<Value> = context
        .get("backendsJson")
        .and_then(|j| serde_json::from_str(j).ok());
    let present = index.parse::<usize>().ok().is_some_and(|i| {
        items
            .as_ref()
            .and_then(|v| v.get(i))
            .and_then(Value::as_object)
            .is_some_and(|item| item.contains_key(attribute))
    });
    (attribute, present)
}

/// What every refusal must be: INVALID_ARGUMENT, led by the request field or attribute at
/// fault (one the request set, unless the message says it is required), and free of secrets.
fn check_refusal(error: CsiError, request: &NodePublishVolumeRequest) -> Result<(), TestCaseError> {
    let text = error.to_string();
    let debug = format!("{error:?}");
    prop_assert!(
        !text.contains(SECRET_MARK) && !debug.contains(SECRET_MARK),
        "leak: {debug}"
    );
    let CsiError::InvalidArgument { field, message } = &error else {
        return Err(TestCaseError::fail(format!(
            "not INVALID_ARGUMENT: {debug}"
        )));
    };
    prop_assert!(text.starts_with(&format!("{field}: ")), "{text:?}");
    let (attribute, present) = backend_attribute(field, request);
    let known = REQUEST_FIELDS.contains(&field.as_str())
        || VOLUME_KEYS.contains(&field.as_str())
        || request.volume_context.contains_key(field)
        || field.starts_with("backendsJson[")
        || BACKEND_KEYS.contains(&attribute);
    prop_assert!(known, "{text:?} names nothing in the request");
    if BACKEND_KEYS.contains(&attribute) && !present {
        prop_assert!(
            message.starts_with("required"),
            "{text:?} blames an attribute the request did not set"
        );
    }
    prop_assert_eq!(Status::from(error).code(), Code::InvalidArgument);
    Ok(())
}

/// Everything a publish checks before it reaches STS, the store or the node, in its order.
fn validate(request: &NodePublishVolumeRequest) -> Result<(), TestCaseError> {
    let pods = Path::new(PODS_DIR);
    let args = match publish_args(request, pods) {
        Ok(args) => args,
        Err(error) => return check_refusal(error, request),
    };
    // An accepted target is strictly inside the pods directory, by plain components.
    let target = Path::new(&request.target_path);
    prop_assert_eq!(&args.target, target);
    prop_assert!(target.starts_with(pods) && target != pods, "{target:?}");
    prop_assert!(
        target
            .components()
            .all(|c| matches!(c, Component::RootDir | Component::Normal(_))),
        "{target:?}"
    );
    prop_assert!(
        !request
            .target_path
            .split('/')
            .any(|s| s == ".." || s == ".")
    );
    // An accepted volume id is one harmless path component.
    let id = &args.volume_id;
    prop_assert!(
        !id.is_empty() && !id.contains(['/', '\0']) && !id.contains(".."),
        "{id:?}"
    );
    prop_assert!(
        !format!("{args:?}").contains(SECRET_MARK),
        "a secret kept in {args:?}"
    );

    let (secrets, context) = (&request.secrets, &request.volume_context);
    let auth = &args.attributes.auth;
    if let Err(error) = auth.check_request(secrets, context) {
        return check_refusal(error, request);
    }
    let keys = match (auth.source, &auth.role_arn) {
        // No STS call on these paths: the real resolution, run to completion here.
        (AuthSource::Driver | AuthSource::Anonymous | AuthSource::Secret, None) => {
            match futures::executor::block_on(auth.resolve(
                id,
                secrets,
                context,
                &KubeApi::default(),
            )) {
                Ok(keys) => keys,
                Err(error) => return check_refusal(error, request),
            }
        }
        // What STS would hand back.
        _ => Keys::Static(StaticKeys {
            access_key_id: "ASIA-sts".into(),
            secret_access_key: Secret::new(format!("{SECRET_MARK}-sts")),
            session_token: Some(Secret::new(format!("{SECRET_MARK}-session"))),
            expires: None,
        }),
    };
    match args.attributes.backend_configs(id, &args.overrides, &keys) {
        Ok(backends) => {
            prop_assert!(!backends.is_empty());
            for backend in &backends {
                let name = &backend.dir_name;
                prop_assert!(
                    !name.is_empty() && name != "." && name != ".." && !name.contains(['/', '\0']),
                    "{name:?}"
                );
            }
        }
        Err(error) => check_refusal(error, request)?,
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Any request is accepted with a safe target and volume id, or refused with
    /// INVALID_ARGUMENT naming what is wrong; never a panic, never a secret in a message.
    #[test]
    fn publish_requests_are_accepted_safely_or_refused_by_name(request in request()) {
        validate(&request)?;
    }

    /// The same, for attribute maps alone: whatever `VolumeAttributes::parse` gets.
    #[test]
    fn volume_attributes_parse_or_name_the_bad_attribute(context in volume_context()) {
        let request = NodePublishVolumeRequest {
            volume_context: context,
            ..NodePublishVolumeRequest::default()
        };
        if let Err(error) = super::attributes::VolumeAttributes::parse(&request.volume_context) {
            check_refusal(error, &request)?;
        }
    }
}

// Regressions: inputs the properties above once failed on, kept as plain tests.

/// `publish_requests_are_accepted_safely_or_refused_by_name`: `file-mode=7777` (or a sticky
/// `dir-mode=1777`) passed the mount-option check and was refused later as `filePerm`, an
/// attribute the request never set.
#[test]
fn a_mount_mode_beyond_777_is_refused_as_a_mount_option() {
    for flag in ["file-mode=7777", "dir-mode=1777", "dir-mode=4755"] {
        let request = NodePublishVolumeRequest {
            volume_id: "pv".into(),
            target_path: format!("{PODS_DIR}/u/volumes/kubernetes.io~csi/pv/mount"),
            volume_capability: Some(VolumeCapability {
                access_mode: Some(AccessMode { mode: 1 }),
                access_type: Some(AccessType::Mount(MountVolume {
                    mount_flags: vec![flag.into()],
                    ..MountVolume::default()
                })),
            }),
            volume_context: [("bucketName".to_string(), "data".to_string())].into(),
            ..NodePublishVolumeRequest::default()
        };
        let error = publish_args(&request, Path::new(PODS_DIR)).expect_err(flag);
        assert!(
            error
                .to_string()
                .starts_with(&format!("mountOptions: \"{flag}\"")),
            "{error}"
        );
        assert_eq!(Status::from(error).code(), Code::InvalidArgument);
    }
}
