//! The Kubernetes CSI node plugin (`msfs csi`): Identity, Node and a capabilities-only
//! Controller on a unix socket; and the provisioning controller (`msfs csi --controller`):
//! Identity and a Controller that creates and deletes volumes (see [`run_controller`]).
//!
//! One process serves every msfs volume of its node. `NodePublishVolume` turns a volume's
//! attributes, secrets and pod identity into validated backends and starts one in-process FUSE
//! session at the target, on the process-wide [`Engines`] (one line cache, one write engine,
//! one metrics registry), so volumes over the same bucket share cached lines.

pub(crate) mod attributes;

/// The volume attributes the plugin accepts (per backend, and per volume).
pub use attributes::{BACKEND_KEYS as BACKEND_ATTRIBUTES, VOLUME_KEYS as VOLUME_ATTRIBUTES};
/// The StorageClass parameters `msfs csi --controller` accepts.
pub use parameters::STORAGE_CLASS_KEYS as STORAGE_CLASS_PARAMETERS;
mod controller;
mod credentials;
mod error;
#[cfg(test)]
mod fuzz_tests;
mod identity;
mod locks;
mod mounts;
mod node;
mod parameters;
pub mod proto;
mod provisioner;
mod request;
mod service_account;
mod state;
mod takeover;
mod volume_id;
mod volume_store;
mod volumes;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use tokio::net::UnixListener;
use tokio::signal::unix::{SignalKind, signal};
use tokio_stream::wrappers::UnixListenerStream;

pub use error::CsiError;
pub use identity::check_driver_name;

use crate::config::Config;
use crate::daemon::succession::{self, Serving};
use crate::engines::Engines;
use crate::telemetry::serve_metrics;
use volumes::{NodeSettings, Volumes};

/// The driver name when `--driver-name` is not given; the CSIDriver object must match it.
pub const DEFAULT_DRIVER_NAME: &str = "msfs.csi.nvidia.com";

/// How `msfs csi` was started.
#[derive(Debug, Clone)]
pub struct CsiOptions {
    /// `unix:///csi/csi.sock` (or a plain absolute path).
    pub endpoint: String,
    pub node_id: String,
    pub driver_name: String,
    /// The plugin's own directory (staging mounts, remembered publishes, upload journal); keep
    /// it on the host for restarts.
    pub state_dir: PathBuf,
    /// `HOST:PORT` for `/metrics` and `/healthz`.
    pub metrics_address: Option<String>,
    pub kubelet_dir: PathBuf,
    /// Reported in NodeGetInfo and enforced at publish; 0 means no limit.
    pub max_volumes: usize,
    /// An fd holder keeping every volume's FUSE connection across restarts (`None`: none).
    pub fd_holder_socket: Option<PathBuf>,
    /// A provisioning controller (`msfs csi --controller`) serves the same driver: the node
    /// reports CONTROLLER_SERVICE as it does.
    pub with_controller: bool,
    /// Node-wide settings (cache, write engine, telemetry); its backends are ignored.
    pub config: Config,
}

/// The socket path of a CSI endpoint.
fn socket_path(endpoint: &str) -> Result<PathBuf, String> {
    let path = endpoint
        .strip_prefix("unix://")
        .or_else(|| endpoint.strip_prefix("unix:"))
        .unwrap_or(endpoint);
    let path = PathBuf::from(path);
    if path.is_absolute() {
        Ok(path)
    } else {
        Err(format!(
            "--endpoint {endpoint:?}: expected unix:///ABSOLUTE/PATH (e.g. unix:///csi/csi.sock)"
        ))
    }
}

/// Binds the socket, creating its directory and replacing a stale socket file from a previous
/// run; refuses when another plugin still answers on it.
///
/// Whoever can connect can publish volumes: mount buckets on the node, with the plugin's own
/// credentials too. Only the kubelet and the node-driver-registrar (root) may, so the socket is
/// 0660 whatever the umask of the container (bind leaves the mode to the umask, and connecting
/// needs write permission: 0755 under the usual 022 keeps others out, a umask of 0 lets everyone
/// in). And it is never reachable with any other mode: it is bound in a private (0700) directory
/// beside its path, restricted there, and only then renamed onto its path, which also replaces a
/// stale socket in one step.
fn bind_socket(path: &Path) -> Result<UnixListener, String> {
    let (Some(parent), Some(name)) = (path.parent(), path.file_name()) else {
        return Err(format!("{}: not a socket path", path.display()));
    };
    std::fs::create_dir_all(parent)
        .map_err(|e| format!("cannot create {}: {e}", parent.display()))?;
    if std::fs::symlink_metadata(path).is_ok()
        && std::os::unix::net::UnixStream::connect(path).is_ok()
    {
        return Err(format!(
            "{} is in use by a running plugin; stop it first",
            path.display()
        ));
    }
    let mut hidden = std::ffi::OsString::from(".");
    hidden.push(name);
    hidden.push(format!(".{}", std::process::id()));
    let private = parent.join(hidden);
    // Left by a plugin of the same PID killed between bind and rename (PID 1 in a container).
    remove_private_dir(&private);
    std::os::unix::fs::DirBuilderExt::mode(&mut std::fs::DirBuilder::new(), 0o700)
        .create(&private)
        .map_err(|e| format!("cannot create {}: {e}", private.display()))?;
    // A short name inside: the socket path (at most 107 bytes) grows as little as possible.
    let bound_at = private.join("s");
    let bound = bind_restricted(&bound_at, path);
    remove_private_dir(&private);
    bound
}

/// Binds at `bound_at`, sets mode 0660 and renames the socket to `path`.
fn bind_restricted(bound_at: &Path, path: &Path) -> Result<UnixListener, String> {
    let listener = UnixListener::bind(bound_at)
        .map_err(|e| format!("cannot listen on {}: {e}", path.display()))?;
    let owner_and_group_only = std::os::unix::fs::PermissionsExt::from_mode(0o660);
    std::fs::set_permissions(bound_at, owner_and_group_only)
        .map_err(|e| format!("cannot restrict {} to mode 0660: {e}", bound_at.display()))?;
    std::fs::rename(bound_at, path).map_err(|e| {
        format!(
            "cannot move the socket {} to {}: {e}",
            bound_at.display(),
            path.display()
        )
    })?;
    Ok(listener)
}

/// Removes `bind_socket`'s private directory and the socket in it, if any; best effort.
fn remove_private_dir(dir: &Path) {
    let _ = std::fs::remove_file(dir.join("s"));
    let _ = std::fs::remove_dir(dir);
}

/// Runs the plugin until SIGTERM or SIGINT; then commits and unmounts every volume it serves,
/// remembering them for the next run — unless another plugin waits to succeed this one (an
/// upgrade: the new pod starts beside the old), to which a SIGTERM hands every volume over, or
/// the SIGTERM restarts this container alone (see [`container_alone_stops`]).
///
/// A plugin started while another serves the same state directory waits to succeed it,
/// touching nothing (uploads, spills, the socket, the volumes) until that one is gone.
pub fn run(options: CsiOptions) -> Result<(), String> {
    check_driver_name(&options.driver_name)?;
    if options.node_id.is_empty() {
        return Err("--node-id must not be empty".into());
    }
    let socket = socket_path(&options.endpoint)?;
    let plugin_lock = options.state_dir.join("plugin");
    let (serving, _) = Serving::take(&plugin_lock, true, "the CSI plugin of this state directory")
        .map_err(|e| format!("cannot take the plugin's lock: {e}"))?
        .ok_or("the plugin's lock was not taken")?;
    crate::residency::lock_code_as_configured(options.config.lock_code_in_memory);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("msfs-csi")
        .build()
        .map_err(|e| format!("cannot start the runtime: {e}"))?;
    warn_about_ignored_settings(&options.config);
    let state = state::PublishedState::open(&options.state_dir)?;
    // The upload journal lives in the state dir, kept on the host across restarts, so that the
    // next plugin aborts the uploads of one killed mid-write (at each volume's publish).
    let engines = Engines::from_config(&options.config, Some(&options.state_dir))
        .map_err(|e| e.to_string())?;
    let staging_dir = options.state_dir.join("staging");
    std::fs::create_dir_all(&staging_dir)
        .map_err(|e| format!("cannot create {}: {e}", staging_dir.display()))?;
    // This plugin's own holder's volumes, and a replaced plugin pod's holder's.
    let held = options
        .fd_holder_socket
        .as_deref()
        .map(takeover::held_volumes)
        .unwrap_or_default();
    clean_stale_staging(&staging_dir, &takeover::staging_in_use(&held));
    let volumes = Arc::new(Volumes::new(
        engines.clone(),
        runtime.handle().clone(),
        NodeSettings {
            staging_dir,
            fuse_workers: options.config.fuse_workers,
            fuse_writeback_cache: options.config.fuse_writeback_cache,
            fuse_passthrough: options.config.fuse_passthrough,
            fuse_io_uring: options
                .config
                .fuse_io_uring
                .then_some(options.config.fuse_io_uring_poll),
            max_volumes: options.max_volumes,
            fuse_stall_warn: options.config.fuse_request_stall_warn,
            inode_eviction: crate::daemon::inode_eviction(&options.config),
            inode_limit: options.config.evictable_inode_limit,
            fd_holder: options.fd_holder_socket.clone(),
            kernel_state_dir: options.state_dir.join("kernel"),
        },
        state,
    ));
    let stopped = runtime.block_on(serve(
        options,
        socket,
        engines.clone(),
        volumes.clone(),
        held,
    ))?;
    if stopped == Stopped::HandedOver {
        crate::daemon::leave_to_successor(runtime, &engines, serving);
    }
    Ok(())
}

/// Runs the provisioning controller until SIGTERM or SIGINT: Identity and Controller on
/// `endpoint`, for the csi-provisioner sidecar of a controller Deployment. It keeps no state
/// (see `provisioner`), so replicas need no coordination beyond the sidecar's leader election.
pub fn run_controller(endpoint: &str, driver_name: &str) -> Result<(), String> {
    check_driver_name(driver_name)?;
    let socket = socket_path(endpoint)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("msfs-csi-controller")
        .build()
        .map_err(|e| format!("cannot start the runtime: {e}"))?;
    runtime.block_on(async {
        let (Ok(mut term), Ok(mut int)) = (
            signal(SignalKind::terminate()),
            signal(SignalKind::interrupt()),
        ) else {
            return Err("cannot install signal handlers".to_string());
        };
        let listener = bind_socket(&socket)?;
        let identity = identity::IdentityService {
            driver_name: driver_name.to_string(),
            controller_service: true,
        };
        let stop = async move {
            tokio::select! {
                _ = term.recv() => tracing::info!("SIGTERM: stopping"),
                _ = int.recv() => tracing::info!("SIGINT: stopping"),
            }
        };
        tracing::info!(socket = %socket.display(), driver = %driver_name,
            "CSI controller serving");
        let served = tonic::transport::Server::builder()
            .add_service(proto::identity_server::IdentityServer::new(identity))
            .add_service(proto::controller_server::ControllerServer::new(
                provisioner::ProvisionerService::new(),
            ))
            .serve_with_incoming_shutdown(UnixListenerStream::new(listener), stop)
            .await;
        let _ = std::fs::remove_file(&socket);
        served.map_err(|e| format!("gRPC server: {e}"))
    })
}

/// How long a stopping plugin watches its fd holder for a SIGTERM of its own: the kubelet
/// Settings of the node configuration that the plugin has no use for, each warned about when the
/// file sets it otherwise than its default: a volume's mount takes these from its attributes or
/// from fixed values, and the plugin's metrics endpoint is `--metrics-address`.
fn warn_about_ignored_settings(config: &crate::config::Config) {
    let Ok(defaults) = crate::config::parse_str(
        "msfs_version: 1\nbackends: []\n",
        Path::new("defaults.yaml"),
        &|_| None,
    ) else {
        return;
    };
    let d = &defaults.config;
    let ignored = [
        (
            "backends",
            !config.backends.is_empty(),
            "volumes come from PersistentVolumes and inline volumes",
        ),
        (
            "mountname",
            config.mountname != d.mountname,
            "each volume is named after its volume id",
        ),
        (
            "mountpoint",
            config.mountpoint != d.mountpoint,
            "the kubelet names each volume's target",
        ),
        ("uid", config.uid != d.uid, "set a volume's uid attribute"),
        ("gid", config.gid != d.gid, "set a volume's gid attribute"),
        (
            "dir_perm",
            config.dir_perm != d.dir_perm,
            "set a volume's dirPerm attribute",
        ),
        (
            "allow_other",
            config.allow_other != d.allow_other,
            "every volume lets the pod's users in",
        ),
        (
            "max_write",
            config.max_write != d.max_write,
            "volumes are mounted with 1 MiB writes",
        ),
        (
            "entry_attr_ttl",
            config.entry_attr_ttl != d.entry_attr_ttl,
            "volumes keep the kernel's entries 10 s",
        ),
        (
            "auto_sighup_interval",
            config.auto_sighup_interval.is_some(),
            "the plugin reloads nothing",
        ),
        (
            "endpoint",
            config.metrics_endpoint.is_some(),
            "serve metrics with --metrics-address",
        ),
    ];
    for (key, set, why) in ignored {
        if set {
            tracing::warn!(
                "{}: {key}: without effect in the CSI plugin: {why}",
                config.source.display()
            );
        }
    }
}

/// signals a pod's containers at about the same moment when it deletes the pod.
const POD_STOP_WINDOW: std::time::Duration = std::time::Duration::from_secs(1);

/// Whether a SIGTERM stops this plugin's container alone — the kubelet restarting it, after
/// failed liveness probes for instance — rather than its pod: the fd holder, a container of the
/// same pod, is then not told to stop. A restart must not unmount the pods' volumes any more
/// than a crash does; a pod going away (a drain, an uninstall) unmounts them as before. No
/// holder, or one that does not answer: the pod is taken as going away.
async fn container_alone_stops(holder: Option<&Path>) -> bool {
    let Some(holder) = holder else {
        return false;
    };
    let deadline = tokio::time::Instant::now() + POD_STOP_WINDOW;
    loop {
        let socket = holder.to_path_buf();
        let stopping = tokio::task::spawn_blocking(move || {
            crate::holder::HolderClient::connect(&socket).and_then(|mut c| c.stopping())
        })
        .await;
        if !matches!(stopping, Ok(Ok(false))) {
            return false;
        }
        if tokio::time::Instant::now() >= deadline {
            return true;
        }
        tokio::time::sleep(POD_STOP_WINDOW / 10).await;
    }
}

/// How the plugin stopped.
#[derive(Debug, PartialEq, Eq)]
enum Stopped {
    /// Every volume committed and unmounted.
    Unmounted,
    /// Every volume's connection left mounted: to the plugin waiting to succeed this one, or to
    /// the fd holder for the plugin restarted in this container.
    HandedOver,
}

/// Detaches and removes what a previous run of the plugin left in the staging directory (its
/// FUSE sessions died with it). Nothing is published yet, so everything there is stale; the
/// targets themselves are remounted by `Volumes::restore` or at the kubelet's republish, or
/// cleaned when it unpublishes them.
fn clean_stale_staging(staging_dir: &Path, held: &std::collections::HashSet<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(staging_dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        // Still live: its connection is held, and this plugin takes it over.
        if held.contains(&path) {
            continue;
        }
        if matches!(
            crate::daemon::mountpoint::mounted_fstype(&path),
            Ok(Some(_))
        ) {
            match crate::daemon::mountpoint::detach(&path) {
                Ok(()) => tracing::info!(staging = %path.display(),
                    "detached a mount left by a previous run of the plugin"),
                Err(e) => tracing::warn!(staging = %path.display(), error = %e,
                    "cannot detach a mount left by a previous run of the plugin"),
            }
        }
        let _ = std::fs::remove_dir(&path);
    }
}

async fn serve(
    options: CsiOptions,
    socket: PathBuf,
    engines: Engines,
    volumes: Arc<Volumes>,
    held: Vec<takeover::HeldVolume>,
) -> Result<Stopped, String> {
    // Before the socket is bound, so that nobody who can reach the plugin finds these signals
    // still fatal.
    crate::daemon::ignore_signals(
        &[
            (SignalKind::hangup(), "SIGHUP"),
            (SignalKind::user_defined1(), "SIGUSR1"),
            (SignalKind::user_defined2(), "SIGUSR2"),
        ],
        "the CSI plugin reloads nothing (its node settings apply at its next start); \
         SIGTERM and SIGINT stop it",
    );
    let _metrics_server = match &options.metrics_address {
        Some(address) => Some(serve_metrics(address, engines.metrics.clone()).await?),
        None => None,
    };
    let listener = bind_socket(&socket)?;
    let identity = identity::IdentityService {
        driver_name: options.driver_name.clone(),
        controller_service: options.with_controller,
    };
    let node = node::NodeService {
        node_id: options.node_id.clone(),
        max_volumes: i64::try_from(options.max_volumes).unwrap_or(i64::MAX),
        pods_dir: options.kubelet_dir.join("pods"),
        volumes: volumes.clone(),
    };
    // After the socket is bound, so the kubelet's calls are answered meanwhile; calls for a
    // volume being restored wait on its lock.
    let restoring = {
        let volumes = volumes.clone();
        let pods_dir = node.pods_dir.clone();
        tokio::spawn(async move {
            volumes.take_over(held, &pods_dir).await;
            volumes.restore(&pods_dir).await
        })
    };
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        return Err("cannot install signal handlers".into());
    };
    let sigterm = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let stop = {
        let sigterm = sigterm.clone();
        async move {
            tokio::select! {
                _ = term.recv() => {
                    sigterm.store(true, std::sync::atomic::Ordering::SeqCst);
                    tracing::info!("SIGTERM: stopping");
                }
                _ = int.recv() => tracing::info!("SIGINT: stopping"),
            }
        }
    };
    tracing::info!(socket = %socket.display(), driver = %options.driver_name,
        node_id = %options.node_id, "CSI plugin serving");
    // A client that sends the socket's path as `:authority` (grpcio, grpc-java) is answered
    // thanks to the vendored h2 (vendor/h2/MSFS-CHANGES.md).
    let served = tonic::transport::Server::builder()
        .add_service(proto::identity_server::IdentityServer::new(identity))
        .add_service(proto::controller_server::ControllerServer::new(
            controller::ControllerService,
        ))
        .add_service(proto::node_server::NodeServer::new(node))
        .serve_with_incoming_shutdown(UnixListenerStream::new(listener), stop)
        .await;
    restoring.abort();
    let stopped = if succession::successor_waiting(&options.state_dir.join("plugin")) {
        volumes
            .hand_over(
                succession::HAND_OFF_WITHIN,
                "the plugin succeeding this one",
            )
            .await;
        Stopped::HandedOver
    } else if sigterm.load(std::sync::atomic::Ordering::SeqCst)
        && container_alone_stops(options.fd_holder_socket.as_deref()).await
    {
        tracing::info!(
            "SIGTERM for this container alone (its pod's fd holder was not told to stop): \
             every volume stays mounted for the restarted plugin"
        );
        volumes
            .hand_over(
                succession::HAND_OFF_WITHIN,
                "the fd holder, for the restarted plugin",
            )
            .await;
        Stopped::HandedOver
    } else {
        volumes.shut_down().await;
        Stopped::Unmounted
    };
    let _ = std::fs::remove_file(&socket);
    served.map_err(|e| format!("gRPC server: {e}"))?;
    Ok(stopped)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_name_an_absolute_socket() {
        assert_eq!(
            socket_path("unix:///csi/csi.sock").expect("path"),
            PathBuf::from("/csi/csi.sock")
        );
        assert_eq!(
            socket_path("/csi/csi.sock").expect("path"),
            PathBuf::from("/csi/csi.sock")
        );
        assert!(socket_path("unix://csi.sock").is_err());
        assert!(socket_path("tcp://127.0.0.1:1").is_err());
    }

    fn mode(path: &Path) -> u32 {
        use std::os::unix::fs::PermissionsExt;
        std::fs::symlink_metadata(path)
            .expect("stat")
            .permissions()
            .mode()
            & 0o7777
    }

    /// The directory's entries, by name.
    fn entries(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .expect("list")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    #[tokio::test]
    async fn the_socket_appears_at_its_path_already_restricted_and_nothing_else_is_left() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("csi/csi.sock");
        let listener = bind_socket(&path).expect("bind");
        assert_eq!(mode(&path), 0o660);
        assert_eq!(entries(&dir.path().join("csi")), ["csi.sock"]);
        // Bound under another name, it still accepts at its path.
        let client = tokio::net::UnixStream::connect(&path)
            .await
            .expect("connect");
        let (_server, _) = listener.accept().await.expect("accept");
        drop(client);
    }

    #[tokio::test]
    async fn a_stale_socket_is_replaced_and_a_live_one_refused() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("csi.sock");
        let live = bind_socket(&path).expect("bind");
        let refused = bind_socket(&path).expect_err("a second plugin on a live socket");
        assert!(refused.contains("in use by a running plugin"), "{refused}");
        drop(live); // the file stays, as after a killed plugin
        assert!(path.exists());
        let _replaced = bind_socket(&path).expect("bind over a stale socket");
        assert_eq!(mode(&path), 0o660);
        assert!(std::os::unix::net::UnixStream::connect(&path).is_ok());
        assert_eq!(entries(dir.path()), ["csi.sock"]);
    }
}
