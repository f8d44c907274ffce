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
    },
    /// Parse and validate a configuration file, print what it mounts, and exit.
    CheckConfig {
        /// Configuration file; same search path as `mount`.
        config: Option<PathBuf>,
    },
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

fn mount(config: Option<PathBuf>, mountpoint: Option<PathBuf>) -> Result<(), String> {
    let config = load_config(config)?;
    let mountpoint = daemon::choose_mountpoint(mountpoint.as_deref(), &config);
    daemon::run(config, mountpoint).map_err(|e| e.to_string())
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

fn main() -> ExitCode {
    let invoked_as = std::env::args().next().unwrap_or_default();
    let result = if invoked_as.ends_with("mount.msfs") {
        let args: Vec<String> = std::env::args().skip(1).collect();
        daemon::helper::parse_args(&args).and_then(|a| daemon::helper::run(&a))
    } else {
        let cli = Cli::parse();
        init_logging(cli.log_format);
        match cli.command {
            None => mount(None, None),
            Some(Command::Mount { config, mountpoint }) => mount(config, mountpoint),
            Some(Command::CheckConfig { config }) => check_config(config),
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
