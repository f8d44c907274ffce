//! The `msfs` command line, and `mount.msfs` when invoked under that name.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use msfs::{config, daemon};

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
struct Cli {
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
    log_format: LogFormat,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

#[derive(Subcommand)]
enum Command {
    /// Mount the configured backends and serve them in the foreground until unmounted
    /// (`umount MOUNTPOINT`), SIGTERM or SIGINT.
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
struct GenerateManifestArgs {
    /// Configuration file; same search path as `mount`.
    config: Option<PathBuf>,
    /// The backend (`dir_name`) whose namespace to list.
    #[arg(long)]
    backend: String,
    /// Directory to write the manifest into (usually the backend's `manifest_path`).
    #[arg(long)]
    output: PathBuf,
    /// Concurrent listers. Default: the backend's `manifest_gen_workers`.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    workers: Option<u32>,
    /// Where to build the manifest before moving it into place. Default: beside --output.
    #[arg(long)]
    temp_dir: Option<PathBuf>,
    /// Replace a manifest (or anything else) already in --output.
    #[arg(long)]
    force: bool,
    /// Read each object's and directory marker's owner and mode (s3fs's `mode`, `uid`, `gid`
    /// metadata) into the manifest's owner columns: one HEAD per entry.
    #[arg(long)]
    posix_metadata: bool,
}

fn init_logging(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        // fuser warns when it cannot unmount a mount that `umount` already removed: not news.
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,fuser::session=error"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        // Colours only for a person at a terminal, never into log files.
        .with_ansi(std::io::stdout().is_terminal())
        .with_writer(std::io::stdout);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}

fn load_config(explicit: Option<PathBuf>) -> Result<config::Config, String> {
    let path = config::locate(explicit.as_deref()).map_err(|e| e.to_string())?;
    let loaded = config::load(&path).map_err(|e| e.to_string())?;
    for warning in &loaded.warnings {
        tracing::warn!("{warning}");
    }
    Ok(loaded.config)
}

fn mount(
    config: Option<PathBuf>,
    mountpoint: Option<PathBuf>,
    survival: daemon::Survival,
) -> Result<(), String> {
    let config = load_config(config)?;
    let mountpoint = daemon::choose_mountpoint(mountpoint.as_deref(), &config);
    daemon::run(config, mountpoint, survival).map_err(|e| e.to_string())
}

/// `msfs warm`: the summary on stdout, each file that failed on stderr; fails when any did or
/// when cancelled.
fn warm(options: msfs::warm::client::Options) -> Result<(), String> {
    let summary = msfs::warm::client::run(&options)?;
    // Each reason names its file.
    for (_, why) in &summary.failed {
        eprintln!("msfs warm: {why}");
    }
    println!("{summary}");
    match (summary.failed.len(), summary.cancelled) {
        (0, false) => Ok(()),
        (0, true) => Err("warm: cancelled".into()),
        (n, _) => Err(format!("warm: {n} file(s) could not be warmed")),
    }
}

fn check_config(config: Option<PathBuf>) -> Result<(), String> {
    let config = load_config(config)?;
    println!("{}: ok", config.source.display());
    println!("mountpoint: {}", config.mountpoint.display());
    for backend in &config.backends {
        println!(
            "  {}/ <- {}{} ({})",
            backend.dir_name,
            backend.bucket,
            if backend.prefix.is_empty() {
                String::new()
            } else {
                format!("/{}", backend.prefix)
            },
            if backend.readonly {
                "read-only"
            } else {
                "read-write"
            }
        );
    }
    Ok(())
}

fn abort_uploads(
    config: Option<PathBuf>,
    only: Option<String>,
    older_than_hours: u64,
    dry_run: bool,
) -> Result<(), String> {
    let config = load_config(config)?;
    let backends: Vec<_> = config
        .backends
        .iter()
        .filter(|b| only.as_ref().is_none_or(|name| *name == b.dir_name))
        .collect();
    if backends.is_empty() {
        return Err(format!(
            "{}: no backend named {}",
            config.source.display(),
            only.unwrap_or_default()
        ));
    }
    let older_than = std::time::Duration::from_secs(older_than_hours.saturating_mul(3600));
    let runtime = tokio::runtime::Runtime::new().map_err(|e| e.to_string())?;
    runtime.block_on(async {
        // One retry budget for the command, as for a daemon.
        let retry_budget = Default::default();
        for backend in backends {
            let store = msfs::store::open_store(backend, &retry_budget)
                .await
                .map_err(|e| format!("backend {}: {e}", backend.dir_name))?;
            let uploads = msfs::write::abort_stale_uploads(
                store.as_ref(),
                &backend.prefix,
                older_than,
                dry_run,
            )
            .await
            .map_err(|e| format!("backend {}: {e}", backend.dir_name))?;
            let verb = if dry_run { "would abort" } else { "aborted" };
            for upload in &uploads {
                println!(
                    "{}: {verb} {} ({})",
                    backend.dir_name, upload.key, upload.upload_id
                );
            }
            println!("{}: {} upload(s) {verb}", backend.dir_name, uploads.len());
        }
        Ok(())
    })
}

fn generate_manifest(args: GenerateManifestArgs) -> Result<(), String> {
    use msfs::manifest::generate::{GenerateOptions, generate, listing_backend};
    use msfs::manifest::progress::rate;

    let config = load_config(args.config)?;
    let Some(backend) = config.backends.iter().find(|b| b.dir_name == args.backend) else {
        let names: Vec<&str> = config
            .backends
            .iter()
            .map(|b| b.dir_name.as_str())
            .collect();
        return Err(format!(
            "{}: no backend named {:?} (backends: {})",
            config.source.display(),
            args.backend,
            if names.is_empty() {
                "none".to_string()
            } else {
                names.join(", ")
            }
        ));
    };
    let listing = listing_backend(&config.backends, backend).map_err(|e| e.to_string())?;
    let mut options = GenerateOptions::from_backend(backend);
    options.page_size = (listing.directory_page_size > 0).then_some(listing.directory_page_size);
    if let Some(workers) = args.workers {
        options.workers = workers as usize;
    }
    options.temp_dir = args.temp_dir;
    options.overwrite = args.force;
    options.posix_metadata = args.posix_metadata;
    let through = if listing.dir_name == backend.dir_name {
        String::new()
    } else {
        format!(" through backend {}", listing.dir_name)
    };
    let runtime = tokio::runtime::Runtime::new().map_err(|e| e.to_string())?;
    runtime.block_on(async {
        let store = msfs::store::open_store(listing, &Default::default())
            .await
            .map_err(|e| format!("backend {}: {e}", listing.dir_name))?;
        let started = std::time::Instant::now();
        let info = generate(store, &listing.bucket, &listing.prefix, &args.output, &options)
            .await
            .map_err(|e| format!("backend {}{through}: {e}", backend.dir_name))?;
        let elapsed = started.elapsed();
        println!(
            "{}: manifest of backend {}{through}: {} objects, {} directories, {} bytes in {:.1}s ({} objects/s)",
            args.output.display(),
            backend.dir_name,
            info.totals.objects,
            info.totals.directories,
            info.totals.bytes,
            elapsed.as_secs_f64(),
            rate(info.totals.objects, elapsed),
        );
        Ok(())
    })
}

#[derive(clap::Args)]
struct CsiArgs {
    /// The gRPC endpoint kubelet and the registrar use: unix:///ABSOLUTE/PATH. Its directory is
    /// created; a stale socket from a previous run is replaced.
    #[arg(long, env = "CSI_ENDPOINT", default_value = "unix:///csi/csi.sock")]
    endpoint: String,
    /// This node's id, reported by NodeGetInfo (usually the Kubernetes node name).
    #[arg(long, env = "KUBE_NODE_NAME")]
    node_id: String,
    /// The CSI driver name; the CSIDriver object and the registrar's path must use the same.
    #[arg(long, env = "CSI_DRIVER_NAME", default_value = msfs::csi::DEFAULT_DRIVER_NAME)]
    driver_name: String,
    /// The plugin's own state (staging mounts, remembered publishes, upload journal); a
    /// hostPath so it outlives the container.
    #[arg(long, default_value = "/var/lib/msfs-csi")]
    state_dir: PathBuf,
    /// Serve Prometheus /metrics and /healthz on HOST:PORT.
    #[arg(long)]
    metrics_address: Option<String>,
    /// The kubelet's root directory; targets must lie under its pods/ directory.
    #[arg(long, default_value = "/var/lib/kubelet")]
    kubelet_dir: PathBuf,
    /// Most volumes this node serves (reported to the scheduler); 0 means no limit.
    #[arg(long, default_value_t = 0)]
    max_volumes: usize,
    /// The socket of an `msfs fd-holder` (its own container of the plugin pod) that keeps each
    /// volume's FUSE connection: a killed or restarted plugin then takes its volumes over and
    /// pods see no error. Volumes kept by other holders whose sockets are in the same
    /// directory (a replaced plugin pod's) are moved into this one. Without it, a restart
    /// remounts the volumes.
    #[arg(long, env = "MSFS_FD_HOLDER_SOCKET")]
    fd_holder_socket: Option<PathBuf>,
    /// Node-wide settings in the `msfs_version: 1` format (cache_*, write_*, fuse_workers,
    /// opentelemetry); backends are ignored. Default: built-in defaults.
    #[arg(env = "MSFS_CSI_CONFIG")]
    config: Option<PathBuf>,
}

fn csi(args: CsiArgs) -> Result<(), String> {
    let config = match args.config {
        Some(path) => load_config(Some(path))?,
        None => {
            config::parse_str(
                "msfs_version: 1\nbackends: []\n",
                std::path::Path::new("csi-defaults.yaml"),
                &|_| None,
            )
            .map_err(|e| e.to_string())?
            .config
        }
    };
    msfs::csi::run(msfs::csi::CsiOptions {
        endpoint: args.endpoint,
        node_id: args.node_id,
        driver_name: args.driver_name,
        state_dir: args.state_dir,
        metrics_address: args.metrics_address,
        kubelet_dir: args.kubelet_dir,
        max_volumes: args.max_volumes,
        fd_holder_socket: args.fd_holder_socket,
        config,
    })
}

fn main() -> ExitCode {
    msfs::malloc::limit_arenas();
    let invoked_as = std::env::args().next().unwrap_or_default();
    let result = if invoked_as.ends_with("mount.msfs") {
        let args: Vec<String> = std::env::args().skip(1).collect();
        daemon::helper::parse_args(&args).and_then(|a| daemon::helper::run(&a))
    } else {
        let cli = Cli::parse();
        init_logging(cli.log_format);
        match cli.command {
            None => mount(None, None, daemon::Survival::defaults()),
            Some(Command::Mount {
                config,
                mountpoint,
                takeover,
                state_dir,
                no_fd_holder,
            }) => mount(
                config,
                mountpoint,
                daemon::Survival {
                    state_dir: state_dir.unwrap_or_else(daemon::default_state_dir),
                    fd_holder: !no_fd_holder,
                    takeover,
                },
            ),
            Some(Command::CheckConfig { config }) => check_config(config),
            Some(Command::Csi(args)) => csi(args),
            Some(Command::AbortUploads {
                config,
                backend,
                older_than_hours,
                dry_run,
            }) => abort_uploads(config, backend, older_than_hours, dry_run),
            Some(Command::GenerateManifest(args)) => generate_manifest(args),
            Some(Command::Warm {
                paths,
                recursive,
                jobs,
            }) => warm(msfs::warm::client::Options {
                paths,
                recursive,
                jobs: jobs as usize,
            }),
            Some(Command::FdHolder {
                socket,
                exit_when_empty,
            }) => msfs::holder::serve(&socket, msfs::holder::ServeOptions { exit_when_empty })
                .map_err(|e| e.to_string()),
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            let name = if invoked_as.ends_with("mount.msfs") {
                "mount.msfs"
            } else {
                "msfs"
            };
            eprintln!("{name}: {message}");
            ExitCode::FAILURE
        }
    }
}
