//! Volume attributes (a PV's `volumeAttributes`, or an inline volume's) → the validated backends
//! of one volume.
//!
//! Attributes are camelCase (`bucketName`, `prefix`, …). Rather than validate them a second way,
//! they are translated to a `msfs_version: 1` backend entry and checked by the same code as a
//! config file ([`config::parse_backends`]); its errors are translated back so they name the
//! attribute (`backendsJson[1].prefix: must end with "/"`). The volume's credentials are handed
//! over as values, never written into the entry. Values are taken literally: no `$VAR`
//! expansion reaches the plugin's environment.

use std::collections::HashMap;
use std::path::Path;

use serde_json::{Map, Value};

use super::credentials::{AuthSettings, Keys};
use super::error::CsiError;
use crate::config::{self, BackendConfig, ConfigError, S3Credentials};

/// The service-account tokens kubelet passes when the CSIDriver asks for them.
pub const TOKENS_KEY: &str = "csi.storage.k8s.io/serviceAccount.tokens";
/// The pod's namespace, passed by the kubelet when the CSIDriver sets `podInfoOnMount: true`.
pub const POD_NAMESPACE_KEY: &str = "csi.storage.k8s.io/pod.namespace";
/// The pod's ServiceAccount name, passed with [`POD_NAMESPACE_KEY`].
pub const SERVICE_ACCOUNT_NAME_KEY: &str = "csi.storage.k8s.io/serviceAccount.name";
/// Set by the kubelet to "true" on inline volumes declared in a pod spec.
pub const EPHEMERAL_KEY: &str = "csi.storage.k8s.io/ephemeral";

/// Attributes that describe one backend; also the keys of each `backendsJson` entry.
pub const BACKEND_KEYS: [&str; 16] = [
    "bucketName",
    "prefix",
    "endpoint",
    "region",
    "backendType",
    "readonly",
    "dirName",
    "uid",
    "gid",
    "dirPerm",
    "filePerm",
    "flushOnClose",
    "posixMetadata",
    "manifestPath",
    "traceLevel",
    "warm",
];

/// Attributes that apply to the whole volume.
pub const VOLUME_KEYS: [&str; 5] = [
    "backendsJson",
    "authenticationSource",
    "roleArn",
    "stsRegion",
    "stsEndpoint",
];

/// The object stores reachable through CSI. `file` (a directory of the node), `RAM` and `PSEUDO`
/// are left out on purpose: a PV must not expose the plugin's own filesystem.
const CSI_BACKEND_TYPES: [(&str, &str); 3] = [("S3", "S3"), ("AIStore", "AIStore"), ("GCS", "GCS")];

/// What the request itself says about the mount, which wins over the attributes.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct MountOverrides {
    pub readonly: bool,
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    /// Octal digits, already checked.
    pub file_mode: Option<String>,
    pub dir_mode: Option<String>,
}

/// One backend's attributes, as strings, and how errors should name them.
#[derive(Debug, Clone)]
struct BackendAttributes {
    /// `""` for plain attributes, `backendsJson[i].` for an entry of `backendsJson`.
    label: String,
    values: HashMap<String, String>,
}

/// A volume's parsed attributes: its backends and how to authenticate them.
#[derive(Debug, Clone)]
pub struct VolumeAttributes {
    backends: Vec<BackendAttributes>,
    /// A single backend without `dirName`: the backend itself is the volume's root.
    pub backend_is_root: bool,
    pub auth: AuthSettings,
}

impl VolumeAttributes {
    pub fn parse(context: &HashMap<String, String>) -> Result<VolumeAttributes, CsiError> {
        for key in context.keys() {
            // Keys with a `/` belong to Kubernetes (`csi.storage.k8s.io/pod.name`, …).
            if !key.contains('/')
                && !BACKEND_KEYS.contains(&key.as_str())
                && !VOLUME_KEYS.contains(&key.as_str())
            {
                return Err(CsiError::invalid(
                    key.as_str(),
                    format!(
                        "unknown volume attribute; known attributes are {}, {}",
                        BACKEND_KEYS.join(", "),
                        VOLUME_KEYS.join(", ")
                    ),
                ));
            }
        }
        let auth = AuthSettings::parse(context)?;
        let (backends, backend_is_root) = match context.get("backendsJson") {
            Some(json) => {
                if let Some(key) = BACKEND_KEYS.iter().find(|k| context.contains_key(**k)) {
                    return Err(CsiError::invalid(
                        *key,
                        "cannot be combined with backendsJson; set it inside each backend of backendsJson",
                    ));
                }
                (parse_backends_json(json)?, false)
            }
            None => {
                let values: HashMap<String, String> = context
                    .iter()
                    .filter(|(k, _)| BACKEND_KEYS.contains(&k.as_str()))
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect();
                let root = !values.contains_key("dirName");
                let backend = BackendAttributes {
                    label: String::new(),
                    values,
                };
                (vec![backend], root)
            }
        };
        // An inline volume is written by whoever writes the pod; `manifestPath` is a directory
        // of the (privileged) plugin's node filesystem, which only an administrator may pick.
        if context.get(EPHEMERAL_KEY).map(String::as_str) == Some("true")
            && let Some(backend) = backends
                .iter()
                .find(|b| b.values.contains_key("manifestPath"))
        {
            return Err(CsiError::invalid(
                format!("{}manifestPath", backend.label),
                "not allowed on an inline (ephemeral) volume: it names a directory on the node; \
                 use a PersistentVolume",
            ));
        }
        Ok(VolumeAttributes {
            backends,
            backend_is_root,
            auth,
        })
    }

    /// The volume's backends, validated, with `keys` as their credentials.
    pub fn backend_configs(
        &self,
        volume_id: &str,
        overrides: &MountOverrides,
        keys: &Keys,
    ) -> Result<Vec<BackendConfig>, CsiError> {
        let mut entries = Vec::with_capacity(self.backends.len());
        for backend in &self.backends {
            entries.push(Value::Object(v1_entry(backend, volume_id, overrides)?));
        }
        let keys = match keys {
            Keys::DefaultChain => S3Credentials::DefaultChain,
            Keys::Anonymous => S3Credentials::Anonymous,
            Keys::Static(k) => S3Credentials::Static {
                access_key_id: k.access_key_id.clone(),
                secret_access_key: k.secret_access_key.clone(),
                session_token: k.session_token.clone(),
            },
        };
        let (backends, warnings) =
            config::parse_backends(entries, &keys, Path::new("volume.json"), &plugin_env)
                .map_err(|e| self.translate(e))?;
        for warning in &warnings {
            tracing::warn!(volume_id, "volume attributes: {warning}");
        }
        Ok(backends)
    }

    /// A config-parser error, re-addressed to the attribute it came from.
    fn translate(&self, error: ConfigError) -> CsiError {
        match error {
            ConfigError::Invalid { key, message, .. } => {
                let (index, rest) = split_backend_key(&key);
                let label = index
                    .and_then(|i| self.backends.get(i))
                    .map_or("", |b| b.label.as_str());
                let field = match rest {
                    None if self.backends.len() > 1 => "backendsJson".to_string(),
                    None => key,
                    Some(rest) => format!("{label}{}", attribute_name(rest)),
                };
                CsiError::InvalidArgument { field, message }
            }
            other => CsiError::Internal(format!("volume attributes: {other}")),
        }
    }
}

/// The only environment variable a volume's attributes may default from: the region.
fn plugin_env(name: &str) -> Option<String> {
    (name == "AWS_REGION")
        .then(|| std::env::var(name).ok())
        .flatten()
}

/// `backends[2].S3.endpoint` → (Some(2), Some("S3.endpoint")).
fn split_backend_key(key: &str) -> (Option<usize>, Option<&str>) {
    let Some(rest) = key.strip_prefix("backends[") else {
        return (None, None);
    };
    let Some((index, rest)) = rest.split_once(']') else {
        return (None, None);
    };
    (index.parse().ok(), rest.strip_prefix('.'))
}

/// The attribute a `msfs_version: 1` backend key came from.
fn attribute_name(v1_key: &str) -> String {
    let last = v1_key.rsplit('.').next().unwrap_or(v1_key);
    // A list's item (`warm[1]`) is named by its attribute; the message quotes the item.
    let last = last.split('[').next().unwrap_or(last);
    match last {
        "dir_name" => "dirName",
        "backend_type" => "backendType",
        "bucket_container_name" => "bucketName",
        "flush_on_close" => "flushOnClose",
        "posix_metadata" => "posixMetadata",
        "dir_perm" => "dirPerm",
        "file_perm" => "filePerm",
        "trace_level" => "traceLevel",
        "manifest_path" => "manifestPath",
        "access_key_id" | "secret_access_key" | "session_token" => "nodePublishSecretRef",
        other => other,
    }
    .to_string()
}

fn parse_backends_json(json: &str) -> Result<Vec<BackendAttributes>, CsiError> {
    let invalid = |message: String| CsiError::invalid("backendsJson", message);
    let value: Value =
        serde_json::from_str(json).map_err(|e| invalid(format!("not valid JSON: {e}")))?;
    let Value::Array(items) = value else {
        return Err(invalid(
            "expected a JSON list of backends, e.g. [{\"dirName\": \"a\", \"bucketName\": \"b\"}]"
                .into(),
        ));
    };
    if items.is_empty() {
        return Err(invalid("must list at least one backend".into()));
    }
    let mut backends = Vec::with_capacity(items.len());
    for (i, item) in items.into_iter().enumerate() {
        let label = format!("backendsJson[{i}].");
        let Value::Object(map) = item else {
            return Err(CsiError::invalid(
                format!("backendsJson[{i}]"),
                "expected an object of backend attributes",
            ));
        };
        let mut values = HashMap::new();
        for (key, value) in map {
            if !BACKEND_KEYS.contains(&key.as_str()) {
                return Err(CsiError::invalid(
                    format!("{label}{key}"),
                    format!(
                        "unknown backend attribute; known: {}",
                        BACKEND_KEYS.join(", ")
                    ),
                ));
            }
            let text = match value {
                Value::String(s) => s,
                Value::Number(n) => n.to_string(),
                Value::Bool(b) => b.to_string(),
                _ => {
                    return Err(CsiError::invalid(
                        format!("{label}{key}"),
                        "expected a string, number or boolean",
                    ));
                }
            };
            values.insert(key, text);
        }
        if values.get("dirName").is_none_or(String::is_empty) {
            return Err(CsiError::invalid(
                format!("{label}dirName"),
                "required: each backend of backendsJson is a directory of the volume",
            ));
        }
        backends.push(BackendAttributes { label, values });
    }
    Ok(backends)
}

fn parse_bool(field: &str, text: &str) -> Result<bool, CsiError> {
    match text.trim().to_ascii_lowercase().as_str() {
        "true" => Ok(true),
        "false" => Ok(false),
        _ => Err(CsiError::invalid(
            field,
            format!("expected true or false, found {text:?}"),
        )),
    }
}

/// One backend's `msfs_version: 1` entry.
fn v1_entry(
    backend: &BackendAttributes,
    volume_id: &str,
    overrides: &MountOverrides,
) -> Result<Map<String, Value>, CsiError> {
    let label = &backend.label;
    let get = |key: &str| backend.values.get(key).map(String::as_str);
    let type_text = get("backendType").unwrap_or("S3");
    let (_, ty) = CSI_BACKEND_TYPES
        .iter()
        .find(|(name, _)| name.eq_ignore_ascii_case(type_text.trim()))
        .ok_or_else(|| {
            CsiError::invalid(
                format!("{label}backendType"),
                format!(
                    "unknown backendType {type_text:?}; expected S3, AIStore or GCS \
                     (file, RAM and PSEUDO are not available through CSI)"
                ),
            )
        })?;
    let bucket = get("bucketName").unwrap_or("");
    if bucket.is_empty() {
        return Err(CsiError::invalid(format!("{label}bucketName"), "required"));
    }
    let mut entry = Map::new();
    entry.insert(
        "dir_name".into(),
        Value::from(get("dirName").unwrap_or(volume_id)),
    );
    entry.insert("backend_type".into(), Value::from(*ty));
    entry.insert("bucket_container_name".into(), Value::from(bucket));
    for (attribute, key) in [
        ("prefix", "prefix"),
        ("flushOnClose", "flush_on_close"),
        ("posixMetadata", "posix_metadata"),
        ("uid", "uid"),
        ("gid", "gid"),
        ("dirPerm", "dir_perm"),
        ("filePerm", "file_perm"),
        ("traceLevel", "trace_level"),
        ("manifestPath", "manifest_path"),
    ] {
        if let Some(value) = get(attribute) {
            entry.insert(key.into(), Value::from(value));
        }
    }
    // A list in one string: `train/,labels.csv`.
    if let Some(list) = get("warm") {
        let paths = list.split(',').map(str::trim).filter(|p| !p.is_empty());
        entry.insert("warm".into(), Value::from_iter(paths));
    }
    // Read-only when anything says so; AIStore and GCS backends are read-only by nature.
    let attribute = get("readonly")
        .map(|t| parse_bool(&format!("{label}readonly"), t))
        .transpose()?;
    let readonly = match attribute {
        Some(explicit) => explicit || overrides.readonly,
        None => overrides.readonly || *ty != "S3",
    };
    entry.insert("readonly".into(), Value::Bool(readonly));
    let from_request = [
        ("uid", overrides.uid.map(|n| n.to_string())),
        ("gid", overrides.gid.map(|n| n.to_string())),
        ("file_perm", overrides.file_mode.clone()),
        ("dir_perm", overrides.dir_mode.clone()),
    ];
    for (key, value) in from_request {
        if let Some(value) = value {
            entry.insert(key.into(), Value::from(value));
        }
    }

    // The store section: its keys come from the credentials, given as values.
    let mut store = Map::new();
    if let Some(endpoint) = get("endpoint") {
        store.insert("endpoint".into(), endpoint.into());
    }
    if *ty == "S3"
        && let Some(region) = get("region")
    {
        store.insert("region".into(), region.into());
    }
    entry.insert((*ty).to_string(), Value::Object(store));
    Ok(entry)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::csi::credentials::tests::context;

    #[test]
    fn an_inline_volume_may_not_name_a_manifest_directory_on_the_node() {
        let persistent = context(&[("bucketName", "b"), ("manifestPath", "/var/lib/m")]);
        assert!(VolumeAttributes::parse(&persistent).is_ok());
        let mut inline = persistent.clone();
        inline.insert(EPHEMERAL_KEY.into(), "true".into());
        let error = VolumeAttributes::parse(&inline)
            .expect_err("refused")
            .to_string();
        assert!(
            error.contains("manifestPath") && error.contains("inline"),
            "{error}"
        );
        let inline_json = context(&[
            (EPHEMERAL_KEY, "true"),
            (
                "backendsJson",
                r#"[{"dirName":"a","bucketName":"b","manifestPath":"/etc"}]"#,
            ),
        ]);
        let error = VolumeAttributes::parse(&inline_json)
            .expect_err("refused")
            .to_string();
        assert!(error.contains("manifestPath"), "{error}");
    }

    #[test]
    fn warm_is_a_comma_separated_list_checked_like_the_config_key() {
        let volume = |warm: &str| {
            VolumeAttributes::parse(&context(&[("bucketName", "b"), ("warm", warm)]))
                .expect("attributes")
                .backend_configs("vol", &MountOverrides::default(), &Keys::Anonymous)
        };
        let backends = volume(" train/, labels.csv ,").expect("backends");
        assert_eq!(backends[0].warm, ["train/", "labels.csv"]);
        let error = volume("ok/,../up/").expect_err("refused").to_string();
        assert!(
            error.starts_with("warm: ") && error.contains("\"../up/\""),
            "{error}"
        );
    }
}
