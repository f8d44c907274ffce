//! The `msfs` command line, and `mount.msfs` when invoked under that name.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use msfs::cli::{Cli, Command, CsiArgs, GenerateManifestArgs, LogFormat, SharedCacheCommand};
use msfs::{config, daemon};

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
    flags: daemon::MountFlags,
    survival: daemon::Survival,
) -> Result<(), String> {
    let mut config = load_config(config)?;
    if flags.read_only {
        config.make_read_only();
    }
    config.no_exec = flags.no_exec;
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
    if let Some(shared) = &config.shared_cache {
        println!(
            "shared cache: {}/{} at {} (reads wait {} ms for it)",
            shared.bucket,
            shared.prefix,
            shared.s3.endpoint.as_deref().unwrap_or("AWS"),
            shared.read_timeout.as_millis()
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

fn trim_shared_cache(config: Option<PathBuf>, max_bytes: u64, dry_run: bool) -> Result<(), String> {
    let config = load_config(config)?;
    let Some(shared) = &config.shared_cache else {
        return Err(format!(
            "{}: no shared_cache section: nothing to trim",
            config.source.display()
        ));
    };
    let runtime = tokio::runtime::Runtime::new().map_err(|e| e.to_string())?;
    runtime.block_on(async {
        let fail = |e: msfs::store::StoreError| format!("shared_cache (bucket {}): {e}", shared.bucket);
        let store = msfs::shared_cache::open(shared, &Default::default())
            .await
            .map_err(fail)?;
        // A dry run trims to "everything": it lists, counts and deletes nothing.
        let limit = if dry_run { u64::MAX } else { max_bytes };
        let report = msfs::shared_cache::trim(&store, &shared.prefix, limit)
            .await
            .map_err(fail)?;
        let over = report.bytes.saturating_sub(max_bytes);
        if dry_run {
            println!(
                "shared cache: {} line(s), {} bytes; {over} bytes over --max-bytes (dry run: nothing deleted)",
                report.objects, report.bytes
            );
        } else {
            println!(
                "shared cache: {} line(s), {} bytes; deleted {} line(s), {} bytes (oldest first)",
                report.objects, report.bytes, report.deleted_objects, report.deleted_bytes
            );
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

fn csi(args: CsiArgs) -> Result<(), String> {
    if args.controller {
        return msfs::csi::run_controller(&args.endpoint, &args.driver_name);
    }
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
        node_id: args.node_id.unwrap_or_default(),
        driver_name: args.driver_name,
        state_dir: args.state_dir,
        metrics_address: args.metrics_address,
        kubelet_dir: args.kubelet_dir,
        max_volumes: args.max_volumes,
        fd_holder_socket: args.fd_holder_socket,
        with_controller: args.with_controller,
        config,
    })
}

fn main() -> ExitCode {
    msfs::malloc::limit_arenas();
    let invoked_as = std::env::args().next().unwrap_or_default();
    let result = if invoked_as.ends_with("mount.msfs") {
        let args: Vec<String> = std::env::args().skip(1).collect();
        match daemon::helper::parse_args(&args) {
            Ok(args) => daemon::helper::run(&args),
            // Usage errors, and --help / --version, which clap prints and exits on.
            Err(e) => e.exit(),
        }
    } else {
        let cli = Cli::parse();
        init_logging(cli.log_format);
        match cli.command {
            None => mount(
                None,
                None,
                daemon::MountFlags::default(),
                daemon::Survival::defaults(),
            ),
            Some(Command::Mount {
                config,
                mountpoint,
                takeover,
                state_dir,
                no_fd_holder,
                read_only,
                no_exec,
            }) => mount(
                config,
                mountpoint,
                daemon::MountFlags { read_only, no_exec },
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
            Some(Command::SharedCache(SharedCacheCommand::Trim {
                config,
                max_bytes,
                dry_run,
            })) => trim_shared_cache(config, max_bytes, dry_run),
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
