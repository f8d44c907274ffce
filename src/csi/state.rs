//! The published volumes, kept on disk so that a restarted plugin knows what it served.
//!
//! Without an fd holder (`takeover`), FUSE sessions live only in the plugin's process, so a
//! restart (an upgrade, an OOM kill) kills every mount. The kubelet does not publish again by
//! itself unless the CSIDriver asks for
//! `requiresRepublish`, so the plugin remembers each publish — the request without secrets
//! and without the pod's tokens — in `<state dir>/published.json`, and on start remounts what it
//! can (see `Volumes::restore`).
//!
//! One small file rewritten whole (temporary file, fsync, rename) keeps every update atomic; a
//! node serves at most a few hundred volumes, so the rewrite costs nothing. The directory is
//! private to root (0700) and the file 0600: volume attributes name buckets and roles.

use std::collections::{BTreeMap, HashMap};
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde::{Deserialize, Serialize};

use super::attributes::TOKENS_KEY;
use super::proto::volume_capability::access_mode::Mode;
use super::proto::volume_capability::{AccessMode, AccessType, MountVolume};
use super::proto::{NodePublishVolumeRequest, VolumeCapability};

const FILE_NAME: &str = "published.json";
const FORMAT_VERSION: u32 = 1;

/// A NodePublishVolume as remembered: everything but secrets and tokens.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PublishRecord {
    pub volume_id: String,
    pub target_path: String,
    pub readonly: bool,
    /// The access mode's CSI name (`SINGLE_NODE_WRITER`…), stable across proto changes.
    pub access_mode: String,
    pub mount_flags: Vec<String>,
    pub volume_mount_group: String,
    pub volume_context: BTreeMap<String, String>,
}

impl PublishRecord {
    /// The parts of `request` that may be written to disk. Assumes a checked request (a mount
    /// capability with an access mode).
    pub fn from_request(request: &NodePublishVolumeRequest) -> PublishRecord {
        let capability = request.volume_capability.as_ref();
        let mount = capability.and_then(|c| match &c.access_type {
            Some(AccessType::Mount(mount)) => Some(mount),
            _ => None,
        });
        let mode = capability
            .and_then(|c| c.access_mode)
            .and_then(|m| Mode::try_from(m.mode).ok())
            .unwrap_or(Mode::Unknown);
        PublishRecord {
            volume_id: request.volume_id.clone(),
            target_path: request.target_path.clone(),
            readonly: request.readonly,
            access_mode: mode.as_str_name().to_string(),
            mount_flags: mount.map(|m| m.mount_flags.clone()).unwrap_or_default(),
            volume_mount_group: mount
                .map(|m| m.volume_mount_group.clone())
                .unwrap_or_default(),
            volume_context: request
                .volume_context
                .iter()
                .filter(|(key, _)| key.as_str() != TOKENS_KEY)
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
        }
    }

    /// The request again, without secrets: what a republish after a restart sends.
    pub fn to_request(&self) -> NodePublishVolumeRequest {
        let mode = Mode::from_str_name(&self.access_mode).unwrap_or(Mode::Unknown);
        NodePublishVolumeRequest {
            volume_id: self.volume_id.clone(),
            publish_context: HashMap::new(),
            staging_target_path: String::new(),
            target_path: self.target_path.clone(),
            volume_capability: Some(VolumeCapability {
                access_mode: Some(AccessMode { mode: mode as i32 }),
                access_type: Some(AccessType::Mount(MountVolume {
                    fs_type: String::new(),
                    mount_flags: self.mount_flags.clone(),
                    volume_mount_group: self.volume_mount_group.clone(),
                })),
            }),
            readonly: self.readonly,
            secrets: HashMap::new(),
            volume_context: self.volume_context.clone().into_iter().collect(),
        }
    }
}

#[derive(Serialize, Deserialize)]
struct StateFile {
    version: u32,
    volumes: Vec<PublishRecord>,
}

/// The remembered publishes, by target path.
pub struct PublishedState {
    path: PathBuf,
    records: Mutex<BTreeMap<PathBuf, PublishRecord>>,
}

impl PublishedState {
    /// Opens (creating its directory) the state under `state_dir`. An unreadable file is
    /// reported and set aside as `published.json.bad`: the plugin must start anyway, and the
    /// kubelet's own republish and unpublish calls still work without it.
    pub fn open(state_dir: &Path) -> Result<PublishedState, String> {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(state_dir)
            .and_then(|()| {
                std::fs::set_permissions(state_dir, std::fs::Permissions::from_mode(0o700))
            })
            .map_err(|e| format!("cannot create {}: {e}", state_dir.display()))?;
        let path = state_dir.join(FILE_NAME);
        let records = match std::fs::read(&path) {
            Ok(bytes) => match serde_json::from_slice::<StateFile>(&bytes) {
                Ok(file) if file.version == FORMAT_VERSION => file
                    .volumes
                    .into_iter()
                    .map(|r| (PathBuf::from(&r.target_path), r))
                    .collect(),
                Ok(file) => {
                    set_aside(&path, &format!("unknown format version {}", file.version));
                    BTreeMap::new()
                }
                Err(e) => {
                    set_aside(&path, &e.to_string());
                    BTreeMap::new()
                }
            },
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => BTreeMap::new(),
            Err(e) => return Err(format!("cannot read {}: {e}", path.display())),
        };
        Ok(PublishedState {
            path,
            records: Mutex::new(records),
        })
    }

    pub fn records(&self) -> Vec<PublishRecord> {
        self.lock().values().cloned().collect()
    }

    /// Remembers a publish. A failure to write is logged, not returned: the volume is mounted
    /// and serves; only a restart would not remount it.
    pub fn insert(&self, record: PublishRecord) {
        let mut records = self.lock();
        let target = PathBuf::from(&record.target_path);
        if records.get(&target) == Some(&record) {
            return;
        }
        records.insert(target, record);
        self.save(&records);
    }

    pub fn remove(&self, target: &Path) {
        let mut records = self.lock();
        if records.remove(target).is_some() {
            self.save(&records);
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<PathBuf, PublishRecord>> {
        self.records
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn save(&self, records: &BTreeMap<PathBuf, PublishRecord>) {
        let file = StateFile {
            version: FORMAT_VERSION,
            volumes: records.values().cloned().collect(),
        };
        if let Err(e) = write_atomically(&self.path, &file) {
            tracing::warn!(path = %self.path.display(), error = %e,
                "cannot save the published volumes; a restart will not remount them at once");
        }
    }
}

fn write_atomically(path: &Path, file: &StateFile) -> std::io::Result<()> {
    let temporary = path.with_extension("json.tmp");
    let mut out = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&temporary)?;
    out.write_all(&serde_json::to_vec_pretty(file).map_err(std::io::Error::other)?)?;
    out.sync_all()?;
    std::fs::rename(&temporary, path)?;
    if let Some(dir) = path.parent() {
        std::fs::File::open(dir)?.sync_all()?;
    }
    Ok(())
}

fn set_aside(path: &Path, why: &str) {
    let aside = path.with_extension("json.bad");
    tracing::error!(path = %path.display(), kept_as = %aside.display(), error = why,
        "cannot read the published volumes; mounts of the previous run wait for the kubelet");
    let _ = std::fs::rename(path, aside);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request() -> NodePublishVolumeRequest {
        NodePublishVolumeRequest {
            volume_id: "pv-1".into(),
            publish_context: HashMap::new(),
            staging_target_path: String::new(),
            target_path: "/var/lib/kubelet/pods/u/volumes/kubernetes.io~csi/pv-1/mount".into(),
            volume_capability: Some(VolumeCapability {
                access_mode: Some(AccessMode {
                    mode: Mode::SingleNodeWriter as i32,
                }),
                access_type: Some(AccessType::Mount(MountVolume {
                    fs_type: String::new(),
                    mount_flags: vec!["uid=1000".into()],
                    volume_mount_group: "2000".into(),
                })),
            }),
            readonly: true,
            secrets: [("secret_access_key".to_string(), "s3cr3t".to_string())].into(),
            volume_context: [
                ("bucketName".to_string(), "data".to_string()),
                (
                    TOKENS_KEY.to_string(),
                    r#"{"sts.amazonaws.com":{"token":"t0k"}}"#.into(),
                ),
            ]
            .into(),
        }
    }

    /// The sample (`tests/fixtures/formats/csi-published`): the state directory after one
    /// publish of [`request`].
    #[test]
    fn the_published_volumes_sample_is_read_as_written() {
        let expected = PublishRecord::from_request(&request());
        if crate::format_fixtures::writing() {
            let dir = tempfile::tempdir().expect("temp dir");
            PublishedState::open(dir.path())
                .expect("open")
                .insert(expected.clone());
            crate::format_fixtures::store("csi-published", dir.path());
        }
        let dir = tempfile::tempdir().expect("temp dir");
        crate::format_fixtures::copy_to("csi-published", dir.path());
        let state = PublishedState::open(dir.path()).expect("open the sample");
        assert_eq!(state.records(), vec![expected]);
        assert!(!dir.path().join("published.json.bad").exists());
    }

    #[test]
    fn a_record_keeps_the_request_but_no_secret_or_token() {
        let original = request();
        let again = PublishRecord::from_request(&original).to_request();
        assert!(again.secrets.is_empty());
        assert!(!again.volume_context.contains_key(TOKENS_KEY));
        assert_eq!(again.volume_context.get("bucketName").unwrap(), "data");
        assert_eq!(again.volume_capability, original.volume_capability);
        assert_eq!(
            (again.volume_id, again.target_path, again.readonly),
            (original.volume_id, original.target_path, original.readonly)
        );
    }

    #[test]
    fn records_survive_a_restart_in_a_private_file() {
        let dir = tempfile::tempdir().expect("temp dir");
        let state_dir = dir.path().join("state");
        let record = PublishRecord::from_request(&request());
        {
            let state = PublishedState::open(&state_dir).expect("open");
            state.insert(record.clone());
        }
        let path = state_dir.join(FILE_NAME);
        let text = std::fs::read_to_string(&path).expect("state file");
        assert!(!text.contains("s3cr3t") && !text.contains("t0k"), "{text}");
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&path), 0o600);
        assert_eq!(mode(&state_dir), 0o700);

        let state = PublishedState::open(&state_dir).expect("reopen");
        assert_eq!(state.records(), vec![record.clone()]);
        state.remove(Path::new(&record.target_path));
        assert!(
            PublishedState::open(&state_dir)
                .expect("reopen")
                .records()
                .is_empty()
        );
    }

    #[test]
    fn an_unreadable_state_file_is_set_aside() {
        let dir = tempfile::tempdir().expect("temp dir");
        std::fs::write(dir.path().join(FILE_NAME), "{not json").expect("write");
        let state = PublishedState::open(dir.path()).expect("open");
        assert!(state.records().is_empty());
        assert!(dir.path().join("published.json.bad").exists());
    }
}
