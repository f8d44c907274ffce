//! Volumes whose FUSE connections an fd holder keeps (`msfs fd-holder`, its own container of the
//! plugin pod; see `crate::holder`), so that a plugin killed, OOM-killed or restarted is
//! replaced without the pods noticing: their requests wait, the next plugin takes each
//! connection over (`Volumes::take_over`) and answers them.
//!
//! The holder keeps, beside each connection's descriptor, what it takes to serve the volume
//! again: the publish request — with its secrets and the pod's tokens, which never touch the
//! disk (`state` keeps the request without them), but live in the holder's memory as they live
//! in the plugin's — and the INIT parameters the kernel agreed to.
//!
//! The takeover side of [`Volumes`] lives here too: serving the held connections again
//! (`Volumes::take_over`, which mounts each with a [`Resume`]), a volume's kernel-state journal
//! (fresh at a publish, replayed at a takeover), and handing a published volume to the holder.

use std::collections::{HashMap, HashSet};
use std::os::fd::{BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::error::CsiError;
use super::request::publish_args;
use super::state::PublishRecord;
use super::volumes::{NodeSettings, Volumes, credential_source, staging_name};
use crate::daemon::mountpoint;
use crate::daemon::session::MountedSession;
use crate::fs::{KernelState, Restored};
use crate::fuse::KernelInit;
use crate::holder::HolderClient;

const HELD_KIND: &str = "msfs-csi-volume";
const HELD_VERSION: u32 = 1;

/// What the holder keeps beside a volume's descriptor.
#[derive(Serialize, Deserialize)]
struct HeldMeta {
    kind: String,
    version: u32,
    record: PublishRecord,
    secrets: HashMap<String, String>,
    /// The pod's service-account tokens (`csi.storage.k8s.io/serviceAccount.tokens`), if any.
    tokens: Option<String>,
    kernel: KernelInit,
    /// The staging mount bind-mounted onto the target, if the volume has one.
    staging: Option<PathBuf>,
}

/// A volume connection found in a holder at start.
pub struct HeldVolume {
    /// The socket of the holder keeping it: this plugin's, or a replaced plugin pod's.
    pub holder: PathBuf,
    pub record: PublishRecord,
    pub secrets: HashMap<String, String>,
    pub tokens: Option<String>,
    pub kernel: KernelInit,
    pub staging: Option<PathBuf>,
    pub fd: OwnedFd,
}

/// Not derived: the secrets stay out of logs.
impl std::fmt::Debug for HeldVolume {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HeldVolume")
            .field("volume_id", &self.record.volume_id)
            .field("target", &self.record.target_path)
            .finish_non_exhaustive()
    }
}

/// The volume connections kept by the holder at `own` (this plugin's) and by any other holder
/// whose socket is in the same directory: in an upgrade the new plugin pod runs beside the old
/// one, each with its own holder (`fd-holder/POD.sock`), and the new plugin moves the old
/// pod's connections into its own holder (`Volumes::take_over`) so that they outlive the old
/// pod. A connection two holders keep (a move cut short) is served once, from `own`'s entry.
pub fn held_volumes(own: &Path) -> Vec<HeldVolume> {
    let mut held = from_holder(own);
    for socket in other_holders(own) {
        for volume in from_holder(&socket) {
            if held
                .iter()
                .any(|h| h.record.target_path == volume.record.target_path)
            {
                // Already kept by `own`: the other holder lets its duplicate go.
                release(&socket, Path::new(&volume.record.target_path));
            } else {
                held.push(volume);
            }
        }
    }
    held
}

/// The sockets beside `own` that a live holder answers on.
fn other_holders(own: &Path) -> Vec<PathBuf> {
    let Some(dir) = own.parent() else {
        return Vec::new();
    };
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut sockets: Vec<PathBuf> = entries
        .flatten()
        .map(|entry| entry.path())
        .filter(|path| path != own && path.extension().is_some_and(|e| e == "sock"))
        .filter(|path| std::os::unix::net::UnixStream::connect(path).is_ok())
        .collect();
    sockets.sort();
    sockets
}

/// The volume connections the holder at `socket` keeps. A holder that does not answer holds
/// nothing this plugin can serve: logged, and the volumes are remounted as without one.
fn from_holder(socket: &Path) -> Vec<HeldVolume> {
    let entries = match HolderClient::connect(socket).and_then(|mut c| c.list()) {
        Ok(entries) => entries,
        Err(e) => {
            tracing::warn!(socket = %socket.display(), error = %e,
                "the fd holder does not answer; volumes of a previous run are remounted");
            return Vec::new();
        }
    };
    entries
        .into_iter()
        .filter_map(|entry| {
            let meta: HeldMeta = match serde_json::from_slice(&entry.meta) {
                Ok(meta) => meta,
                Err(e) => {
                    tracing::warn!(name = %entry.name, error = %e,
                        "skipping a held connection whose record does not read");
                    return None;
                }
            };
            if meta.kind != HELD_KIND || meta.version != HELD_VERSION {
                tracing::warn!(name = %entry.name, kind = %meta.kind, version = meta.version,
                    "skipping a held connection this plugin cannot serve");
                return None;
            }
            Some(HeldVolume {
                holder: socket.to_path_buf(),
                record: meta.record,
                secrets: meta.secrets,
                tokens: meta.tokens,
                kernel: meta.kernel,
                staging: meta.staging,
                fd: entry.fd,
            })
        })
        .collect()
}

/// The staging mounts of held volumes: live, not left over.
pub fn staging_in_use(held: &[HeldVolume]) -> HashSet<PathBuf> {
    held.iter().filter_map(|v| v.staging.clone()).collect()
}

/// Hands a volume just published (or taken over) to the fd holder at `socket`.
pub(super) fn keep_published(
    socket: &Path,
    session: &MountedSession,
    record: &PublishRecord,
    secrets: &HashMap<String, String>,
    context: &HashMap<String, String>,
    staging: &Option<PathBuf>,
) {
    let keep_it = Keep {
        record: record.clone(),
        secrets,
        tokens: context.get(super::attributes::TOKENS_KEY).cloned(),
        kernel: session.kernel_init(),
        staging: staging.clone(),
    };
    keep(socket, session.fuse_fd(), keep_it);
}

/// What to keep for a published volume.
pub struct Keep<'a> {
    pub record: PublishRecord,
    pub secrets: &'a HashMap<String, String>,
    pub tokens: Option<String>,
    pub kernel: KernelInit,
    pub staging: Option<PathBuf>,
}

/// Hands a published volume's connection to the holder at `socket`, under its target path. A
/// failure is logged: the volume works, it only does not survive the plugin.
pub fn keep(socket: &Path, fd: BorrowedFd<'_>, keep: Keep<'_>) {
    let name = keep.record.target_path.clone();
    let meta = HeldMeta {
        kind: HELD_KIND.into(),
        version: HELD_VERSION,
        record: keep.record,
        secrets: keep.secrets.clone(),
        tokens: keep.tokens,
        kernel: keep.kernel,
        staging: keep.staging,
    };
    let kept = serde_json::to_vec(&meta)
        .map_err(|e| e.to_string())
        .and_then(|meta| {
            HolderClient::connect(socket)
                .and_then(|mut client| client.keep(&name, &meta, fd))
                .map_err(|e| e.to_string())
        });
    if let Err(e) = kept {
        tracing::warn!(target = %name, socket = %socket.display(), error = %e,
            "the fd holder does not keep this volume's connection: it ends with the plugin");
    }
}

/// The volume at `target` is unpublished: the holder lets its connection go.
pub fn release(socket: &Path, target: &Path) {
    let name = target.display().to_string();
    if let Err(e) = HolderClient::connect(socket).and_then(|mut c| c.release(&name)) {
        tracing::warn!(target = %name, error = %e,
            "cannot tell the fd holder a volume went; it lets go once it sees the mount gone");
    }
}

/// A held connection to serve instead of mounting.
pub(super) struct Resume {
    pub fd: OwnedFd,
    pub kernel: KernelInit,
}

impl Volumes {
    /// Serves again the volumes whose connections the fd holder kept (a previous run of the
    /// plugin died or was restarted): their pods' requests waited and are answered now. A
    /// volume that cannot be served is unmounted, so that its pods fail instead of waiting
    /// forever, and the kubelet's next call decides.
    pub async fn take_over(&self, held: Vec<HeldVolume>, pods_dir: &Path) {
        // All at once: every volume's pods wait until theirs is served.
        let each = held
            .into_iter()
            .map(|volume| self.take_over_or_end(volume, pods_dir));
        futures::future::join_all(each).await;
    }

    /// Serves one held volume again, or (if that fails) ends its connection.
    async fn take_over_or_end(&self, volume: HeldVolume, pods_dir: &Path) {
        let target = PathBuf::from(&volume.record.target_path);
        let staging = volume.staging.clone();
        let volume_id = volume.record.volume_id.clone();
        let holder = volume.holder.clone();
        let own = self.settings.fd_holder.as_ref() == Some(&holder);
        match self.take_over_one(volume, pods_dir).await {
            Ok(()) => {
                tracing::info!(volume_id, target = %target.display(),
                    "took over a volume's live connection");
                // Now kept by this plugin's holder (`mount` handed it over): the replaced
                // pod's holder lets go, and exits once it keeps nothing.
                if !own {
                    release(&holder, &target);
                }
            }
            Err(e) => {
                tracing::error!(volume_id, target = %target.display(), error = %e,
                    "cannot serve a volume whose connection was kept; unmounting it");
                for path in [Some(target.clone()), staging].into_iter().flatten() {
                    let _ = mountpoint::detach(&path);
                }
                release(&holder, &target);
            }
        }
    }

    async fn take_over_one(&self, volume: HeldVolume, pods_dir: &Path) -> Result<(), CsiError> {
        let mut request = volume.record.to_request();
        request.secrets = volume.secrets;
        if let Some(tokens) = volume.tokens {
            request
                .volume_context
                .insert(super::attributes::TOKENS_KEY.to_string(), tokens);
        }
        let args = publish_args(&request, pods_dir)?;
        let _serialized = self.locks.lock(&args.volume_id).await;
        let source = credential_source(
            &args.attributes.auth,
            &request.secrets,
            &request.volume_context,
        );
        let resume = Resume {
            fd: volume.fd,
            kernel: volume.kernel,
        };
        self.mount(
            args,
            &request.secrets,
            &request.volume_context,
            source,
            Some(resume),
        )
        .await
    }
}

/// The volume's kernel-state journal: fresh, or (taking a connection over) the previous
/// run's with what it recorded. `None` without an fd holder.
pub(super) fn kernel_state(
    settings: &NodeSettings,
    volume_id: &str,
    target: &Path,
    resuming: bool,
) -> Result<Option<(Arc<KernelState>, Restored, PathBuf)>, CsiError> {
    if settings.fd_holder.is_none() {
        return Ok(None);
    }
    let dir = settings
        .kernel_state_dir
        .join(staging_name(volume_id, target));
    let fail = |source| CsiError::Io {
        what: "cannot keep the kernel-state journal in",
        path: dir.clone(),
        source,
    };
    let (state, restored) = if resuming {
        KernelState::resume(&dir).map_err(fail)?
    } else {
        (
            KernelState::create(&dir).map_err(fail)?,
            Restored::default(),
        )
    };
    Ok(Some((Arc::new(state), restored, dir)))
}
