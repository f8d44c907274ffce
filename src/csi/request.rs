//! NodePublishVolume / NodeUnpublishVolume requests → checked arguments, without side effects.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::attributes::{MountOverrides, TOKENS_KEY, VolumeAttributes};
use super::error::CsiError;
use super::proto::volume_capability::AccessType;
use super::proto::volume_capability::access_mode::Mode;
use super::proto::{NodePublishVolumeRequest, VolumeCapability};
use super::state::PublishRecord;

/// Mount options that ask for what msfs does anyway, accepted and ignored.
const HARMLESS_MOUNT_OPTIONS: [&str; 7] = [
    "rw",
    "defaults",
    "noatime",
    "nosuid",
    "nodev",
    "_netdev",
    "allow-other",
];

/// A checked NodePublishVolume.
#[derive(Debug, Clone)]
pub struct PublishArgs {
    pub volume_id: String,
    pub target: PathBuf,
    pub overrides: MountOverrides,
    pub attributes: VolumeAttributes,
    pub mode: Mode,
    /// What is remembered on disk to remount after a plugin restart.
    pub record: PublishRecord,
    /// Everything that defines the publish except secrets and tokens, which may be renewed by a
    /// republish; a second publish at the same target must match it.
    pub fingerprint: String,
}

/// CSI's size limit for string fields; volume ids also become directory names, whose
/// components may not exceed 255 bytes.
const MAX_VOLUME_ID_BYTES: usize = 128;
/// Largest volume attribute value: a `backendsJson` of dozens of backends fits many times over,
/// and a runaway one cannot make the plugin parse megabytes per publish.
const MAX_ATTRIBUTE_BYTES: usize = 64 * 1024;

/// Volume ids become directory and session names: one path component, no `..`.
pub fn check_volume_id(id: &str) -> Result<(), CsiError> {
    if id.is_empty() {
        return Err(CsiError::invalid("volume_id", "required"));
    }
    if id.len() > MAX_VOLUME_ID_BYTES {
        return Err(CsiError::invalid(
            "volume_id",
            format!("{} bytes long; at most {MAX_VOLUME_ID_BYTES}", id.len()),
        ));
    }
    if id.contains('/') || id.contains('\0') || id == "." || id.contains("..") {
        return Err(CsiError::invalid(
            "volume_id",
            format!("{id:?} must not contain \"/\", \"..\" or NUL"),
        ));
    }
    Ok(())
}

/// A target must be an absolute path inside the kubelet's pods directory.
pub fn check_target(field: &str, path: &str, pods_dir: &Path) -> Result<PathBuf, CsiError> {
    if path.is_empty() {
        return Err(CsiError::invalid(field, "required"));
    }
    let target = PathBuf::from(path);
    if !target.is_absolute() {
        return Err(CsiError::invalid(
            field,
            format!("{path:?} is not an absolute path"),
        ));
    }
    if path
        .split('/')
        .any(|segment| segment == ".." || segment == ".")
        || path.contains('\0')
    {
        return Err(CsiError::invalid(
            field,
            format!("{path:?} must not contain \".\" or \"..\" segments"),
        ));
    }
    if !target.starts_with(pods_dir) || target == pods_dir {
        return Err(CsiError::invalid(
            field,
            format!(
                "{path:?} is outside the kubelet's pods directory {} (see --kubelet-dir)",
                pods_dir.display()
            ),
        ));
    }
    Ok(target)
}

pub fn publish_args(
    request: &NodePublishVolumeRequest,
    pods_dir: &Path,
) -> Result<PublishArgs, CsiError> {
    check_volume_id(&request.volume_id)?;
    let target = check_target("target_path", &request.target_path, pods_dir)?;
    let capability = request
        .volume_capability
        .as_ref()
        .ok_or_else(|| CsiError::invalid("volume_capability", "required"))?;
    let (mode, flags, group) = check_capability("volume_capability", capability)?;
    let mut overrides = mount_overrides(flags)?;
    overrides.readonly |=
        request.readonly || matches!(mode, Mode::SingleNodeReaderOnly | Mode::MultiNodeReaderOnly);
    if !group.is_empty() {
        let gid = group.parse::<u32>().map_err(|_| {
            CsiError::invalid(
                "volume_capability.mount.volume_mount_group",
                format!("{group:?} is not a numeric group id"),
            )
        })?;
        overrides.gid = Some(gid);
    }
    if let Some((key, value)) = request
        .volume_context
        .iter()
        .find(|(_, value)| value.len() > MAX_ATTRIBUTE_BYTES)
    {
        return Err(CsiError::invalid(
            key.as_str(),
            format!("{} bytes long; at most {MAX_ATTRIBUTE_BYTES}", value.len()),
        ));
    }
    let attributes = VolumeAttributes::parse(&request.volume_context)?;
    let fingerprint = fingerprint(request, mode, flags, group);
    Ok(PublishArgs {
        volume_id: request.volume_id.clone(),
        target,
        overrides,
        attributes,
        mode,
        record: PublishRecord::from_request(request),
        fingerprint,
    })
}

/// The access mode, mount flags and mount group of a mount capability; errors name `field`
/// (`volume_capability` of a publish, `volume_capabilities` of a controller call).
pub(super) fn check_capability<'c>(
    field: &str,
    capability: &'c VolumeCapability,
) -> Result<(Mode, &'c [String], &'c str), CsiError> {
    let mount = match &capability.access_type {
        Some(AccessType::Mount(mount)) => mount,
        Some(AccessType::Block(_)) => {
            return Err(CsiError::invalid(
                field,
                "block access is not supported: msfs volumes are filesystems (use volumeMode: Filesystem)",
            ));
        }
        None => {
            return Err(CsiError::invalid(
                format!("{field}.access_type"),
                "required (mount)",
            ));
        }
    };
    let mode = capability
        .access_mode
        .and_then(|m| Mode::try_from(m.mode).ok())
        .filter(|m| *m != Mode::Unknown)
        .ok_or_else(|| CsiError::invalid(format!("{field}.access_mode"), "required"))?;
    Ok((mode, &mount.mount_flags, &mount.volume_mount_group))
}

/// `mountOptions` of the PV: `uid=`, `gid=`, `file-mode=`, `dir-mode=`, `read-only`/`ro`, and a
/// few harmless standard ones.
fn mount_overrides(flags: &[String]) -> Result<MountOverrides, CsiError> {
    let mut overrides = MountOverrides::default();
    let field = "mountOptions";
    for flag in flags.iter().flat_map(|f| f.split(',')).map(str::trim) {
        let (name, value) = match flag.split_once('=') {
            Some((n, v)) => (n.trim(), Some(v.trim())),
            None => (flag, None),
        };
        let id = |v: Option<&str>| {
            v.and_then(|v| v.parse::<u32>().ok()).ok_or_else(|| {
                CsiError::invalid(field, format!("{flag:?}: expected {name}=NUMBER"))
            })
        };
        // Permission bits only, as the backends' dir_perm/file_perm take them: a setuid,
        // setgid or sticky bit (`1777`) used to pass here and be refused later, under the
        // attribute name `dirPerm`/`filePerm` that the request never set.
        let mode = |v: Option<&str>| {
            v.filter(|v| (1..=4).contains(&v.len()) && v.chars().all(|c| ('0'..='7').contains(&c)))
                .filter(|v| u16::from_str_radix(v, 8).is_ok_and(|m| m <= 0o777))
                .map(str::to_string)
                .ok_or_else(|| {
                    CsiError::invalid(
                        field,
                        format!("{flag:?}: expected {name}=OCTAL from 000 to 777 (e.g. 0755)"),
                    )
                })
        };
        match name {
            "" => {}
            "uid" => overrides.uid = Some(id(value)?),
            "gid" => overrides.gid = Some(id(value)?),
            "file-mode" => overrides.file_mode = Some(mode(value)?),
            "dir-mode" => overrides.dir_mode = Some(mode(value)?),
            "read-only" | "ro" => overrides.readonly = true,
            "allow_other" => {}
            other if HARMLESS_MOUNT_OPTIONS.contains(&other) => {}
            _ => {
                return Err(CsiError::invalid(
                    field,
                    format!(
                        "unsupported mount option {flag:?}; supported: uid=, gid=, file-mode=, \
                         dir-mode=, read-only, allow-other"
                    ),
                ));
            }
        }
    }
    Ok(overrides)
}

fn fingerprint(
    request: &NodePublishVolumeRequest,
    mode: Mode,
    flags: &[String],
    group: &str,
) -> String {
    let context: BTreeMap<&str, &str> = request
        .volume_context
        .iter()
        .filter(|(k, _)| k.as_str() != TOKENS_KEY)
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    serde_json::json!({
        "volume_id": request.volume_id,
        "readonly": request.readonly,
        "mode": mode.as_str_name(),
        "flags": flags,
        "group": group,
        "context": context,
    })
    .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_must_stay_inside_the_pods_directory() {
        let pods = Path::new("/var/lib/kubelet/pods");
        let ok = "/var/lib/kubelet/pods/u/volumes/kubernetes.io~csi/pv/mount";
        assert!(check_target("t", ok, pods).is_ok());
        for bad in [
            "",
            "relative/mount",
            "/var/lib/kubelet/pods/../../../etc",
            "/var/lib/kubelet/pods/./x",
            "/var/lib/kubelet/podsx/a",
            "/var/lib/kubelet/pods",
            "/etc/passwd",
        ] {
            assert!(check_target("t", bad, pods).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn mount_options_map_onto_the_mount() {
        let flags = vec![
            "uid=1000,gid=2000".to_string(),
            "file-mode=0640".into(),
            "ro".into(),
        ];
        let o = mount_overrides(&flags).expect("flags");
        assert_eq!((o.uid, o.gid), (Some(1000), Some(2000)));
        assert_eq!(o.file_mode.as_deref(), Some("0640"));
        assert!(o.readonly);
        assert!(mount_overrides(&["uid=me".into()]).is_err());
        assert!(mount_overrides(&["dir-mode=999".into()]).is_err());
        assert!(mount_overrides(&["exec".into()]).is_err());
    }
}
