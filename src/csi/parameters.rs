//! A CreateVolume's StorageClass parameters and name → the new volume: its own prefix, the
//! volume context the node plugin publishes it with, and the id DeleteVolume finds it by.
//!
//! The parameters are the node's volume attributes for one S3 backend, plus a base `prefix`
//! and `keepDataOnDelete`. They are checked by the same code as a PersistentVolume's attributes
//! (so errors name the same parameters), and the volume's prefix is the base prefix followed by
//! [`volume_dir`] of the request name.

use std::collections::{BTreeMap, HashMap};

use super::attributes::{MountOverrides, VolumeAttributes};
use super::credentials::Keys;
use super::error::CsiError;
use super::volume_id::VolumeLocation;
use crate::config::{BackendConfig, BackendKind};

/// The StorageClass parameters the controller accepts.
pub const STORAGE_CLASS_KEYS: [&str; 17] = [
    "bucketName",
    "prefix",
    "endpoint",
    "region",
    "backendType",
    "keepDataOnDelete",
    "flushOnClose",
    "posixMetadata",
    "uid",
    "gid",
    "dirPerm",
    "filePerm",
    "traceLevel",
    "authenticationSource",
    "roleArn",
    "stsRegion",
    "stsEndpoint",
];

/// Parameters that only the controller reads; every other one is handed to the node as is.
const CONTROLLER_ONLY: [&str; 2] = ["prefix", "keepDataOnDelete"];

/// Longest request name used verbatim as the volume's directory.
const MAX_VERBATIM_NAME: usize = 63;

/// A volume to create, fully checked.
#[derive(Debug, Clone, PartialEq)]
pub struct NewVolume {
    pub id: String,
    pub location: VolumeLocation,
    /// Exactly the attributes the node plugin needs to publish it.
    pub context: BTreeMap<String, String>,
}

/// The directory (one key component) a request name becomes: the name itself when it is a
/// plain one (`pvc-<uid>`, what Kubernetes sends: letters, digits, `.`, `_`, `-`, starting with
/// a letter or digit, at most 63 bytes, no `..`); anything else becomes its plain characters
/// (at most 40) followed by 16 hex digits of its MD5, so that it is still stable and distinct.
pub fn volume_dir(name: &str) -> String {
    let plain = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-');
    let verbatim = name.len() <= MAX_VERBATIM_NAME
        && name.starts_with(|c: char| c.is_ascii_alphanumeric())
        && name.chars().all(plain)
        && !name.contains("..");
    if verbatim {
        return name.to_string();
    }
    use md5::Digest;
    let digest = md5::Md5::digest(name.as_bytes());
    let hex: String = digest[..8].iter().map(|b| format!("{b:02x}")).collect();
    let kept: String = name
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || *c == '-')
        .take(40)
        .collect();
    if kept.is_empty() {
        format!("vol-{hex}")
    } else {
        format!("{kept}-{hex}")
    }
}

/// Checks the parameters of volume `name` and lays the volume out.
pub fn new_volume(name: &str, parameters: &HashMap<String, String>) -> Result<NewVolume, CsiError> {
    if name.is_empty() {
        return Err(CsiError::invalid("name", "required"));
    }
    let mut context = BTreeMap::new();
    for (key, value) in parameters {
        // Keys with a `/` are Kubernetes' own (`csi.storage.k8s.io/pvc/name`, …).
        if key.contains('/') {
            continue;
        }
        if !STORAGE_CLASS_KEYS.contains(&key.as_str()) {
            return Err(CsiError::invalid(
                key.as_str(),
                format!(
                    "unknown StorageClass parameter; known parameters are {}",
                    STORAGE_CLASS_KEYS.join(", ")
                ),
            ));
        }
        if !CONTROLLER_ONLY.contains(&key.as_str()) {
            context.insert(key.clone(), value.clone());
        }
    }
    if let Some(ty) = parameters.get("backendType")
        && !ty.trim().eq_ignore_ascii_case("S3")
    {
        return Err(CsiError::invalid(
            "backendType",
            format!(
                "{ty:?}: provisioned volumes are written to, so only S3 (and S3-compatible \
                 stores) can hold them; AIStore and GCS volumes are PersistentVolumes"
            ),
        ));
    }
    let keep_data = match parameters.get("keepDataOnDelete").map(|v| v.trim()) {
        None | Some("") => false,
        Some(v) if v.eq_ignore_ascii_case("true") => true,
        Some(v) if v.eq_ignore_ascii_case("false") => false,
        Some(v) => {
            return Err(CsiError::invalid(
                "keepDataOnDelete",
                format!("expected true or false, found {v:?}"),
            ));
        }
    };
    let base = parameters.get("prefix").map_or("", String::as_str);
    if !base.is_empty() && (!base.ends_with('/') || base.starts_with('/')) {
        return Err(CsiError::invalid(
            "prefix",
            format!("{base:?}: a base prefix ends with \"/\" and does not start with one"),
        ));
    }
    let prefix = format!("{base}{}/", volume_dir(name));
    context.insert("prefix".into(), prefix.clone());
    // The same checks as a PersistentVolume's attributes, with the keys left out: the node
    // signs with its own.
    let backend = backend_config(&context, name, &Keys::Anonymous)?;
    let BackendKind::S3(s3) = &backend.kind else {
        return Err(CsiError::Internal("an S3 backend expected".into()));
    };
    // Pinned, so that the node signs for the same region whatever its environment says.
    context.insert("region".into(), s3.region.clone());
    let location = VolumeLocation {
        region: s3.region.clone(),
        endpoint: s3.endpoint.clone(),
        bucket: backend.bucket.clone(),
        prefix,
        keep_data,
    };
    Ok(NewVolume {
        id: location.encode()?,
        location,
        context,
    })
}

/// The backend a volume context describes, signed with `keys`.
fn backend_config(
    context: &BTreeMap<String, String>,
    name: &str,
    keys: &Keys,
) -> Result<BackendConfig, CsiError> {
    let context: HashMap<String, String> = context.clone().into_iter().collect();
    let mut backends = VolumeAttributes::parse(&context)?.backend_configs(
        name,
        &MountOverrides::default(),
        keys,
    )?;
    backends
        .pop()
        .ok_or_else(|| CsiError::Internal("no backend in a volume context".into()))
}

/// The backend the controller opens for the volume at `location`, signed with `keys`: its
/// bucket and prefix, nothing of how the node mounts it.
pub fn location_backend(location: &VolumeLocation, keys: &Keys) -> Result<BackendConfig, CsiError> {
    let mut context = BTreeMap::from([
        ("bucketName".to_string(), location.bucket.clone()),
        ("prefix".to_string(), location.prefix.clone()),
        ("region".to_string(), location.region.clone()),
    ]);
    if let Some(endpoint) = &location.endpoint {
        context.insert("endpoint".into(), endpoint.clone());
    }
    backend_config(&context, "volume", keys)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn kubernetes_names_are_kept_and_others_made_stable_and_distinct() {
        let pvc = "pvc-0b5e2a4c-9d1f-4c57-8a0e-2f6f3f1d9e11";
        assert_eq!(volume_dir(pvc), pvc);
        let odd = volume_dir("Team A/../x");
        assert_eq!(odd, volume_dir("Team A/../x"));
        assert!(odd.starts_with("TeamAx-") && odd.len() == 7 + 16, "{odd}");
        assert_ne!(volume_dir("a b"), volume_dir("a_b"));
        assert!(volume_dir(&"n".repeat(64)).len() < 64);
        assert!(volume_dir("///").starts_with("vol-"));
    }

    #[test]
    fn a_volume_gets_its_own_prefix_a_pinned_region_and_an_id_that_finds_it() {
        let volume = new_volume(
            "pvc-1",
            &params(&[
                ("bucketName", "data"),
                ("prefix", "team/"),
                ("endpoint", "http://127.0.0.1:3900"),
                ("region", "garage"),
                ("posixMetadata", "true"),
                ("csi.storage.k8s.io/pvc/name", "claim"),
            ]),
        )
        .expect("volume");
        assert_eq!(volume.location.prefix, "team/pvc-1/");
        assert_eq!(
            VolumeLocation::decode(&volume.id),
            Some(volume.location.clone())
        );
        let keys: Vec<&str> = volume.context.keys().map(String::as_str).collect();
        assert_eq!(
            keys,
            [
                "bucketName",
                "endpoint",
                "posixMetadata",
                "prefix",
                "region"
            ]
        );
        assert_eq!(volume.context["prefix"], "team/pvc-1/");
    }

    #[test]
    fn bad_parameters_are_named() {
        let refused = |pairs: &[(&str, &str)]| {
            new_volume("pvc-1", &params(pairs))
                .expect_err("refused")
                .to_string()
        };
        for (pairs, field) in [
            (&[("bucketName", "b"), ("bucket", "b")][..], "bucket: "),
            (&[("prefix", "p/")][..], "bucketName: "),
            (&[("bucketName", "b"), ("prefix", "p")][..], "prefix: "),
            (&[("bucketName", "b"), ("prefix", "/p/")][..], "prefix: "),
            (
                &[("bucketName", "b"), ("backendType", "GCS")][..],
                "backendType: ",
            ),
            (
                &[("bucketName", "b"), ("keepDataOnDelete", "yes")][..],
                "keepDataOnDelete: ",
            ),
            (&[("bucketName", "b"), ("uid", "root")][..], "uid: "),
            (
                &[("bucketName", "b"), ("endpoint", "127.0.0.1")][..],
                "endpoint: ",
            ),
            (
                &[("bucketName", "b"), ("manifestPath", "/m")][..],
                "manifestPath: ",
            ),
        ] {
            let error = refused(pairs);
            assert!(error.starts_with(field), "{pairs:?}: {error}");
        }
        assert!(
            new_volume("", &params(&[("bucketName", "b")]))
                .expect_err("no name")
                .to_string()
                .starts_with("name: ")
        );
    }
}
