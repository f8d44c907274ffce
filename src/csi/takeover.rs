//! Volumes whose FUSE connections an fd holder keeps (`msfs fd-holder`, its own container of the
//! plugin pod; see `crate::holder`), so that a plugin killed, OOM-killed or restarted is
//! replaced without the pods noticing: their requests wait, the next plugin takes each
//! connection over (`Volumes::take_over`) and answers them.
//!
//! The holder keeps, beside each connection's descriptor, what it takes to serve the volume
//! again: the publish request — with its secrets and the pod's tokens, which never touch the
//! disk (`state` keeps the request without them), but live in the holder's memory as they live
//! in the plugin's — and the INIT parameters the kernel agreed to.

use std::collections::{HashMap, HashSet};
use std::os::fd::{BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::state::PublishRecord;
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
