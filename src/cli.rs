//! The command line: `msfs` and its subcommands, and `mount.msfs` (what mount(8) runs for
//! `-t msfs`). One definition serves the parser in `main.rs` and the man pages (`docs/man/`,
//! rendered from these by `tests/it/man_pages.rs`), so the two cannot drift apart.

use std::path::PathBuf;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "msfs",
    version,
    about = "Mount S3 and S3-compatible buckets as a filesystem",
    long_about = "Mount S3 and S3-compatible buckets (and local directories) as a FUSE filesystem. \
                  Each configured backend appears as a directory under the mountpoint.\n\n\
                  Without a subcommand, runs `msfs mount` with the configuration found on the \
                  search path ($MSC_CONFIG first)."
)]
pub struct Cli {
    /// Log line format on stdout: `text` for people, `json` (one object per line) for log
    /// collectors. Verbosity follows RUST_LOG (default `info`); each backend's `trace_level`
    /// decides which of its requests are logged.
    #[arg(
        long,
        global = true,
        value_enum,
        default_value = "text",
        env = "MSFS_LOG_FORMAT"
    )]
    pub log_format: LogFormat,
    #[command(subcommand)]
    pub command: Option<Command>,
}

#[derive(Clone, Copy, clap::ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

#[derive(Subcommand)]
pub enum Command {
    /// Mount the configured backends and serve them in the foreground until unmounted
    /// (`umount MOUNTPOINT`), SIGTERM or SIGINT. SIGHUP reloads the configuration file's
    /// `backends`; SIGUSR1 and SIGUSR2 are ignored.
    Mount {
        /// Configuration file (YAML or JSON). Default: the first of $MSC_CONFIG,
        /// $XDG_CONFIG_HOME/msc/config.{yaml,yml,json}, ~/.msc_config.*, ~/.config/msc/config.*,
        /// $XDG_CONFIG_DIRS/msc/config.*, /etc/msc_config.*.
        config: Option<PathBuf>,
        /// Where to mount. Default: $MSFS_MOUNTPOINT, else the configuration's `mountpoint`.
        mountpoint: Option<PathBuf>,
        /// Take over the live mount at MOUNTPOINT from a daemon that died or was killed, or, if
        /// that daemon still runs, wait for it to hand over at its SIGTERM (an upgrade): its
        /// FUSE connection, kept open by the fd holder, is served again; open files, written
        /// bytes and waiting requests carry on. Fails when no connection is held there.
        #[arg(long)]
        takeover: bool,
        /// Where the daemon keeps what a successor needs (the fd holder's socket, the kernel
        /// state journal). Default: /run/msfs for root, else $XDG_RUNTIME_DIR/msfs or
        /// /tmp/msfs-UID.
        #[arg(long, env = "MSFS_STATE_DIR")]
        state_dir: Option<PathBuf>,
        /// Serve without an fd holder: the mount then ends with the process, as with other
        /// FUSE filesystems. `MSFS_NO_FD_HOLDER=1` does the same for `mount.msfs` and fstab
        /// mounts, which pass no flags through.
        #[arg(long, env = "MSFS_NO_FD_HOLDER", value_parser = clap::builder::FalseyValueParser::new())]
        no_fd_holder: bool,
        /// Mount read-only: every backend answers writes with EROFS, and the kernel mount is
        /// read-only too (what `mount.msfs -o ro` passes).
        #[arg(long)]
        read_only: bool,
        /// Mount with the kernel's noexec: no program on the mount can be executed (what
        /// `mount.msfs -o noexec` passes).
        #[arg(long)]
        no_exec: bool,
    },
    /// Parse and validate a configuration file, print what it mounts, and exit.
    CheckConfig {
        /// Configuration file; same search path as `mount`.
        config: Option<PathBuf>,
    },
    /// Serve as the Kubernetes CSI node plugin: publish msfs volumes into pods, each as its own
    /// FUSE session in this process, all sharing one cache and write engine. Started while
    /// another plugin serves the same state directory, it waits to succeed it; a SIGTERM then
    /// hands every volume over to the waiting plugin (an upgrade). Without one, SIGTERM or
    /// SIGINT commits each volume's pending writes and unmounts it, but remembers what it
    /// published, so that the next plugin process brings the volumes back: at once, or at the
    /// kubelet's next publish for volumes whose credentials come with it.
    Csi(CsiArgs),
    /// Abort multipart uploads left behind by a killed msfs (invisible in the bucket, but stored
    /// and billed until aborted). Uploads of live writers look the same: keep --older-than-hours
    /// above how long any writer holds a file open. A bucket lifecycle rule
    /// (AbortIncompleteMultipartUpload) does the same job on AWS.
    AbortUploads {
        /// Configuration file; same search path as `mount`.
        config: Option<PathBuf>,
        /// Only this backend (`dir_name`); default: every backend.
        #[arg(long)]
        backend: Option<String>,
        /// Only uploads started at least this many hours ago.
        #[arg(long, default_value_t = 24)]
        older_than_hours: u64,
        /// List what would be aborted, abort nothing.
        #[arg(long)]
        dry_run: bool,
    },
    /// List a backend's whole namespace once, in parallel, into a manifest directory that a
    /// mount with `manifest_path` serves lookups and listings from without LIST requests.
    /// Needed before mounting a writable backend with a manifest (mounts generate one
    /// themselves only for read-only backends). Lists through the backend named by its
    /// AIStore `manifest_gen_backend`, when set.
    GenerateManifest(GenerateManifestArgs),
    /// Fetch files of a running msfs mount into its cache before they are read, so that the
    /// first pass over them is served from the cache. Refused when they would not fit in the
    /// cache. Progress on a terminal; Ctrl-C stops it, keeping what is warm.
    Warm {
        /// Files (and, with --recursive, directories) on an msfs mount.
        #[arg(required = true)]
        paths: Vec<PathBuf>,
        /// Warm every file under the directories given.
        #[arg(short, long)]
        recursive: bool,
        /// Files warmed at once.
        #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..=256))]
        jobs: u32,
    },
    /// Manage the bucket of the configuration's `shared_cache` section.
    #[command(subcommand)]
    SharedCache(SharedCacheCommand),
    /// Keep mounts' /dev/fuse descriptors open across restarts of the process serving them, so
    /// that their FUSE connections survive it. Stops on SIGTERM or SIGINT only once it holds
    /// no descriptor.
    FdHolder {
        /// The unix socket to serve; its directory is created (mode 0700), a stale socket from
        /// a dead holder is replaced.
        #[arg(long)]
        socket: PathBuf,
        /// Exit once the last held descriptor is gone and no client is connected, or 60 s after
        /// starting if none was ever handed over.
        #[arg(long)]
        exit_when_empty: bool,
    },
}

#[derive(clap::Args)]
pub struct GenerateManifestArgs {
    /// Configuration file; same search path as `mount`.
    pub config: Option<PathBuf>,
    /// The backend (`dir_name`) whose namespace to list.
    #[arg(long)]
    pub backend: String,
    /// Directory to write the manifest into (usually the backend's `manifest_path`).
    #[arg(long)]
    pub output: PathBuf,
    /// Concurrent listers. Default: the backend's `manifest_gen_workers`.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub workers: Option<u32>,
    /// Where to build the manifest before moving it into place. Default: beside --output.
    #[arg(long)]
    pub temp_dir: Option<PathBuf>,
    /// Replace a manifest (or anything else) already in --output.
    #[arg(long)]
    pub force: bool,
    /// Read each object's and directory marker's owner and mode (s3fs's `mode`, `uid`, `gid`
    /// metadata) into the manifest's owner columns: one HEAD per entry.
    #[arg(long)]
    pub posix_metadata: bool,
}

#[derive(clap::Args)]
pub struct CsiArgs {
    /// The gRPC endpoint kubelet and the registrar use: unix:///ABSOLUTE/PATH. Its directory is
    /// created; a stale socket from a previous run is replaced.
    #[arg(long, env = "CSI_ENDPOINT", default_value = "unix:///csi/csi.sock")]
    pub endpoint: String,
    /// This node's id, reported by NodeGetInfo (usually the Kubernetes node name). Required
    /// unless --controller.
    #[arg(long, env = "KUBE_NODE_NAME", required_unless_present = "controller")]
    pub node_id: Option<String>,
    /// Serve the provisioning controller instead of the node plugin: CSI Identity and
    /// Controller (CreateVolume gives each claim its own prefix of the StorageClass's bucket,
    /// DeleteVolume empties it), for the csi-provisioner sidecar of a Deployment. It mounts
    /// nothing and keeps no state; the node's options are ignored.
    #[arg(long)]
    pub controller: bool,
    /// For the node plugin of a deployment that also runs `msfs csi --controller`: report the
    /// controller service in GetPluginCapabilities, as the controller does (this process
    /// still provisions nothing).
    #[arg(long, conflicts_with = "controller")]
    pub with_controller: bool,
    /// The CSI driver name; the CSIDriver object and the registrar's path must use the same.
    #[arg(long, env = "CSI_DRIVER_NAME", default_value = crate::csi::DEFAULT_DRIVER_NAME)]
    pub driver_name: String,
    /// The plugin's own state (staging mounts, remembered publishes, upload journal); a
    /// hostPath so it outlives the container.
    #[arg(long, default_value = "/var/lib/msfs-csi")]
    pub state_dir: PathBuf,
    /// Serve Prometheus /metrics and /healthz on HOST:PORT.
    #[arg(long)]
    pub metrics_address: Option<String>,
    /// The kubelet's root directory; targets must lie under its pods/ directory.
    #[arg(long, default_value = "/var/lib/kubelet")]
    pub kubelet_dir: PathBuf,
    /// Most volumes this node serves (reported to the scheduler); 0 means no limit.
    #[arg(long, default_value_t = 0)]
    pub max_volumes: usize,
    /// The socket of an `msfs fd-holder` (its own container of the plugin pod) that keeps each
    /// volume's FUSE connection: a killed or restarted plugin then takes its volumes over and
    /// pods see no error. Volumes kept by other holders whose sockets are in the same
    /// directory (a replaced plugin pod's) are moved into this one. Without it, a restart
    /// remounts the volumes.
    #[arg(long, env = "MSFS_FD_HOLDER_SOCKET")]
    pub fd_holder_socket: Option<PathBuf>,
    /// Node-wide settings in the `msfs_version: 1` format (cache_*, write_*, fuse_workers,
    /// opentelemetry); backends are ignored. Default: built-in defaults.
    #[arg(env = "MSFS_CSI_CONFIG")]
    pub config: Option<PathBuf>,
}

/// `mount.msfs`: what mount(8) runs for `mount -t msfs CONFIG MOUNTPOINT` and an `/etc/fstab`
/// line of type `msfs`, with mount(8)'s helper calling convention.
#[derive(Parser, Debug)]
#[command(
    name = "mount.msfs",
    version,
    about = "Mount an msfs configuration from mount(8) or /etc/fstab",
    long_about = "Mount the backends of an msfs configuration file at MOUNTPOINT, as \
                  `mount -t msfs CONFIG MOUNTPOINT` and /etc/fstab lines of type msfs do. \
                  Starts `msfs mount` in its own session, with its output in \
                  $MSFS_LOG_DIR/msfs_EPOCH_PID.log (default /var/log/msfs; a pid file of the \
                  same name beside it), and returns once the mount is live, or fails with the \
                  daemon's last log lines.\n\n\
                  Options (-o, comma-separated): ro mounts read-only (writes fail with EROFS); \
                  rw is the default; noexec forbids executing programs from the mount, exec \
                  is the default; nosuid, nodev and noatime are accepted and always in \
                  effect; defaults, auto, noauto, nofail, _netdev, user, users, nouser, owner, \
                  group, user=..., uhelper=..., helper=..., comment=... and x-... belong to \
                  mount(8), fstab and systemd and are \
                  left to them. Any other option is refused by name (warned and ignored with -s): \
                  msfs takes its settings from the configuration file.\n\n\
                  Environment: MSFS_LOG_DIR (log and pid files), MSFS_NO_FD_HOLDER=1 (the \
                  mount ends with its daemon, as other FUSE filesystems do), MSFS_STATE_DIR \
                  (the fd holder's socket and the kernel-state journal)."
)]
pub struct MountHelper {
    /// The msfs configuration file (YAML or JSON): fstab's first field.
    pub config: PathBuf,
    /// Where to mount: fstab's second field.
    pub mountpoint: PathBuf,
    /// Mount options, comma-separated (see above); may be given more than once.
    #[arg(short = 'o', value_name = "OPTIONS")]
    pub options: Vec<String>,
    /// The filesystem type mount(8) passes (msfs); ignored.
    #[arg(short = 't', value_name = "TYPE")]
    pub fs_type: Option<String>,
    /// Sloppy (mount -s): an unsupported option is warned about and ignored instead of
    /// refused.
    #[arg(short = 's')]
    pub sloppy: bool,
    /// Fake (mount -f): check the configuration file and the options, mount nothing.
    #[arg(short = 'f')]
    pub fake: bool,
    /// Do not write /etc/mtab: msfs never does.
    #[arg(short = 'n')]
    pub no_mtab: bool,
    /// Verbose; ignored.
    #[arg(short = 'v')]
    pub verbose: bool,
}

#[derive(Subcommand)]
pub enum SharedCacheCommand {
    /// Delete the oldest shared lines (by last write) until those left under the shared
    /// cache's prefix take at most --max-bytes. Safe while nodes read and fill it: a deleted
    /// line is a miss, filled again at its next read.
    Trim {
        /// Configuration file with a `shared_cache` section; same search path as `mount`.
        config: Option<PathBuf>,
        /// Bytes the shared lines may take after the trim.
        #[arg(long)]
        max_bytes: u64,
        /// Print how many lines and bytes there are and how far over --max-bytes, delete nothing.
        #[arg(long)]
        dry_run: bool,
    },
}
