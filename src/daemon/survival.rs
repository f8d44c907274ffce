//! A daemon mount that outlives its daemon: the mount's `/dev/fuse` descriptor is kept by an fd
//! holder (`crate::holder`, started on first use), what the kernel holds is journalled
//! (`crate::fs::KernelState`), and `msfs mount --takeover` serves the same connection again.
//!
//! While no daemon serves, the kernel queues the mount's requests and their callers wait; the
//! successor answers them (requests the dead daemon had read are resent where the kernel can,
//! see `session::MountedSession::resume`). A clean stop (unmount, SIGTERM) releases the
//! descriptor, and the holder exits once it keeps nothing — unless a successor waits: an
//! upgrade starts `msfs mount --takeover` beside the running daemon, which waits
//! (`succession`); the running daemon's SIGTERM then hands the connection over instead of
//! unmounting, and the programs using the mount notice nothing.
//!
//! Limits: the INIT options of the first daemon stay (its `max_write`, its mount options); a
//! SIGKILL of the holder itself while no daemon serves ends the connection (`ENOTCONN`, as
//! without a holder); a reboot ends everything, and `/run` starts empty again.

use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::DaemonError;
use super::session::MountedSession;
use super::succession::{self, Serving};
use crate::fs::{KernelState, Restored};
use crate::fuse::KernelInit;
use crate::holder::{self, HolderClient};

/// The holder's socket, under the state directory.
const HOLDER_SOCKET: &str = "fd-holder.sock";
/// What `HeldMount` is, so that a holder shared with the CSI plugin never mixes the two.
const HELD_KIND: &str = "msfs-mount";
const HELD_VERSION: u32 = 1;

/// How a daemon survives its own death (from the command line).
#[derive(Debug, Clone)]
pub struct Survival {
    pub state_dir: PathBuf,
    /// Keep the mount's connection in an fd holder.
    pub fd_holder: bool,
    /// Serve a held connection instead of mounting.
    pub takeover: bool,
}

impl Survival {
    /// A fresh mount kept by an fd holder under the default state directory.
    pub fn defaults() -> Survival {
        Survival {
            state_dir: default_state_dir(),
            fd_holder: true,
            takeover: false,
        }
    }
}

/// `/run/msfs` for root, else `$XDG_RUNTIME_DIR/msfs` or `/tmp/msfs-UID`: memory-backed where
/// it can be, since nothing in it outlives a reboot (nor should it).
pub fn default_state_dir() -> PathBuf {
    // SAFETY: geteuid cannot fail and touches no memory.
    let uid = unsafe { libc::geteuid() };
    if uid == 0 {
        return PathBuf::from("/run/msfs");
    }
    match std::env::var_os("XDG_RUNTIME_DIR") {
        Some(dir) if !dir.is_empty() => PathBuf::from(dir).join("msfs"),
        _ => std::env::temp_dir().join(format!("msfs-{uid}")),
    }
}

/// What the holder keeps beside the descriptor.
#[derive(Debug, Serialize, Deserialize)]
struct HeldMount {
    kind: String,
    version: u32,
    mountpoint: PathBuf,
    kernel: KernelInit,
}

/// A held connection found for the mountpoint.
pub(super) struct Held {
    pub fd: OwnedFd,
    pub kernel: KernelInit,
}

/// One mountpoint's survival: its holder entry and its kernel-state journal.
pub(super) struct MountSurvival {
    survival: Survival,
    mountpoint: PathBuf,
    socket: PathBuf,
    /// The holder's name for the connection: the mountpoint's path.
    name: String,
    journal_dir: PathBuf,
}

impl MountSurvival {
    pub fn new(survival: &Survival, mountpoint: &Path) -> MountSurvival {
        // Not canonicalized as a whole: resolving a mount nobody serves would wait for it. Made
        // absolute first, so that `mnt` and `/here/mnt` name one mount (this stats nothing).
        let mountpoint = std::path::absolute(mountpoint).unwrap_or_else(|_| mountpoint.into());
        let mountpoint = match (mountpoint.parent(), mountpoint.file_name()) {
            (Some(parent), Some(name)) => std::fs::canonicalize(parent)
                .map_or_else(|_| mountpoint.to_path_buf(), |parent| parent.join(name)),
            _ => mountpoint.to_path_buf(),
        };
        let name = mountpoint.to_string_lossy().into_owned();
        let tail = mountpoint
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let journal_dir = survival
            .state_dir
            .join("mounts")
            .join(format!("{:08x}-{tail}", crc32fast::hash(name.as_bytes())));
        MountSurvival {
            socket: survival.state_dir.join(HOLDER_SOCKET),
            survival: survival.clone(),
            mountpoint,
            name,
            journal_dir,
        }
    }

    /// The right to serve this mountpoint: at once, or (with `--takeover`, while another daemon
    /// serves it) once that daemon has handed over at its SIGTERM, or died. `None` without a
    /// holder: nothing could succeed this daemon.
    pub fn serve(&self) -> Result<Option<Serving>, DaemonError> {
        if !self.survival.fd_holder {
            return Ok(None);
        }
        let what = self.mountpoint.display().to_string();
        match Serving::take(&self.journal_dir, self.survival.takeover, &what) {
            Ok(Some((serving, _))) => Ok(Some(serving)),
            Ok(None) => Err(DaemonError::Mountpoint(format!(
                "{what} is served by a running msfs: replace it with `msfs mount --takeover` \
                 (which waits for that msfs to hand over at its SIGTERM), or unmount it first"
            ))),
            Err(source) => Err(DaemonError::Mount {
                path: self.journal_dir.clone(),
                source,
            }),
        }
    }

    /// Whether a daemon waits (`msfs mount --takeover`) to serve this mountpoint next.
    pub fn successor_waiting(&self) -> bool {
        self.survival.fd_holder && succession::successor_waiting(&self.journal_dir)
    }

    /// The connection the holder keeps for this mountpoint, if one is held; checks that a
    /// takeover finds one and that a fresh mount does not (a mount nobody serves would make
    /// the next mount's checks wait forever).
    pub fn held(&self) -> Result<Option<Held>, DaemonError> {
        if !self.survival.fd_holder {
            return if self.survival.takeover {
                Err(DaemonError::Mountpoint(
                    "--takeover needs the fd holder (drop --no-fd-holder)".into(),
                ))
            } else {
                Ok(None)
            };
        }
        let mut held = self.fetch()?;
        if held.is_some() && !self.survival.takeover && !self.still_mounted() {
            // The mount was detached (`umount -l`, as the refusal below advises) while the
            // holder kept its connection: nothing can reach that connection through the
            // mountpoint again, so it is let go now rather than when the kernel ends it.
            self.release_detached();
            held = None;
        }
        match (&held, self.survival.takeover) {
            (None, true) => Err(DaemonError::Mountpoint(format!(
                "--takeover: no live connection for {} is held by the fd holder at {}; mount \
                 without --takeover",
                self.mountpoint.display(),
                self.socket.display()
            ))),
            (Some(_), false) => Err(DaemonError::Mountpoint(format!(
                "{} is a live mount whose connection the fd holder at {} keeps (its daemon \
                 died, or still runs): serve it again with `msfs mount --takeover`, or end it \
                 with `umount -l {}`",
                self.mountpoint.display(),
                self.socket.display(),
                self.mountpoint.display()
            ))),
            _ => Ok(held),
        }
    }

    /// Whether a FUSE filesystem is mounted at the mountpoint. Read from the mount table only:
    /// a stat of a mount nobody serves would wait for it.
    fn still_mounted(&self) -> bool {
        // A table that cannot be read counts as mounted: the refusal is the safe answer.
        super::mountpoint::fstype_in_table(&self.mountpoint)
            .map_or(true, |fstype| fstype.is_some_and(|t| t.starts_with("fuse")))
    }

    /// Tells the holder to let go of the connection of a mount that was detached.
    fn release_detached(&self) {
        let released = HolderClient::connect(&self.socket).and_then(|mut c| c.release(&self.name));
        match released {
            Ok(()) => tracing::info!(mountpoint = %self.mountpoint.display(),
                "the fd holder kept the connection of a mount detached from here; released it"),
            Err(e) => tracing::warn!(mountpoint = %self.mountpoint.display(), error = %e,
                "cannot release the detached mount's connection from the fd holder; it goes \
                 when the kernel ends it"),
        }
    }

    fn fetch(&self) -> Result<Option<Held>, DaemonError> {
        let mut client = match HolderClient::connect(&self.socket) {
            Ok(client) => client,
            // No holder: nothing is held.
            Err(_) => return Ok(None),
        };
        let entries = client
            .list()
            .map_err(|e| DaemonError::Holder(e.to_string()))?;
        for entry in entries {
            if entry.name != self.name {
                continue;
            }
            let meta: HeldMount = serde_json::from_slice(&entry.meta).map_err(|e| {
                DaemonError::Holder(format!("the entry for {} does not read: {e}", self.name))
            })?;
            if meta.kind != HELD_KIND || meta.version != HELD_VERSION {
                return Err(DaemonError::Holder(format!(
                    "the connection held for {} is a {} (version {}), not a daemon mount this \
                     msfs can serve",
                    self.name, meta.kind, meta.version
                )));
            }
            return Ok(Some(Held {
                fd: entry.fd,
                kernel: meta.kernel,
            }));
        }
        Ok(None)
    }

    /// A fresh kernel-state journal, or (on a takeover) the one the previous daemon left,
    /// with what it recorded. `None` without a holder: nothing could take the mount over.
    pub fn journal(&self) -> Result<Option<(Arc<KernelState>, Restored)>, DaemonError> {
        if !self.survival.fd_holder {
            return Ok(None);
        }
        let fail = |source| DaemonError::Mount {
            path: self.journal_dir.clone(),
            source,
        };
        if self.survival.takeover {
            let (state, restored) = KernelState::resume(&self.journal_dir).map_err(fail)?;
            Ok(Some((Arc::new(state), restored)))
        } else {
            let state = KernelState::create(&self.journal_dir).map_err(fail)?;
            Ok(Some((Arc::new(state), Restored::default())))
        }
    }

    /// Hands the mounted session's connection to the holder (started if none runs). A failure
    /// is logged: the mount works, it only ends with this process.
    pub fn keep(&self, session: &MountedSession) {
        if !self.survival.fd_holder {
            return;
        }
        let meta = HeldMount {
            kind: HELD_KIND.into(),
            version: HELD_VERSION,
            mountpoint: self.mountpoint.clone(),
            kernel: session.kernel_init(),
        };
        let kept = std::env::current_exe()
            .map_err(|e| e.to_string())
            .and_then(|exe| holder::spawn_detached(&exe, &self.socket).map_err(|e| e.to_string()))
            .and_then(|()| HolderClient::connect(&self.socket).map_err(|e| e.to_string()))
            .and_then(|mut client| {
                let meta = serde_json::to_vec(&meta).map_err(|e| e.to_string())?;
                client
                    .keep(&self.name, &meta, session.fuse_fd())
                    .map_err(|e| e.to_string())
            });
        match kept {
            Ok(()) => tracing::info!(socket = %self.socket.display(),
                "the fd holder keeps the mount's connection: `msfs mount --takeover` serves it \
                 again if this process dies"),
            Err(e) => tracing::warn!(socket = %self.socket.display(), error = %e,
                "no fd holder keeps the mount's connection: it ends with this process"),
        }
    }

    /// The mount ended cleanly: the holder lets the connection go and the journal goes.
    pub fn release(&self) {
        if !self.survival.fd_holder {
            return;
        }
        if let Ok(mut client) = HolderClient::connect(&self.socket)
            && let Err(e) = client.release(&self.name)
        {
            tracing::warn!(socket = %self.socket.display(), error = %e,
                "cannot tell the fd holder the mount ended; it lets go once it sees so");
        }
        if let Err(e) = std::fs::remove_dir_all(&self.journal_dir)
            && e.kind() != std::io::ErrorKind::NotFound
        {
            tracing::warn!(dir = %self.journal_dir.display(), error = %e,
                "cannot remove the kernel-state journal");
        }
    }
}
