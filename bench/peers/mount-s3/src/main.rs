//! `mount-s3` for the msfs benchmark: the engine of AWS's mount-s3 1.24 (the crates.io libraries
//! `mountpoint-s3-fs` 0.11 and `mountpoint-s3-client` 0.22) behind a small command line.
//!
//! It wires the pieces the way mount-s3's own `run.rs` does (CRT client, `Superblock`,
//! `S3Filesystem` with its prefetcher and optional disk data cache, multi-threaded fuser session)
//! and keeps mount-s3's defaults: 8 MiB parts, the default prefetcher, 16 FUSE threads, a memory
//! target of 95% of the machine's memory, 1 MiB cache blocks. What differs is only what a bench
//! run on 127.0.0.1 needs: credentials come from the environment through a static provider, and
//! nothing probes EC2 (instance metadata, region or throughput detection).
//!
//! It always runs in the foreground, until the file system is unmounted or it gets SIGINT/SIGTERM
//! (then it unmounts itself).

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context as _, anyhow, bail};
use clap::Parser;
use mountpoint_s3_client::config::{
    AddressingStyle, Allocator, CredentialsProvider, CredentialsProviderStaticOptions,
    S3ClientAuthConfig,
};
use mountpoint_s3_client::user_agent::UserAgent;
use mountpoint_s3_fs::data_cache::{
    CacheLimit, DataCacheConfig, DiskDataCacheConfig, ManagedCacheDir,
};
use mountpoint_s3_fs::fs::{CacheConfig, TimeToLive};
use mountpoint_s3_fs::fuse::config::{FuseOptions, FuseSessionConfig, MountPoint};
use mountpoint_s3_fs::logging::{LoggingConfig, init_logging, prepare_log_file_name};
use mountpoint_s3_fs::memory::{
    CandidateSize, MINIMUM_MEM_LIMIT, PagedPool, effective_total_memory,
};
use mountpoint_s3_fs::s3::config::{
    ClientConfig, MemoryLimitSetting, PartConfig, Region, TargetThroughputSetting,
};
use mountpoint_s3_fs::s3::{Bucket, Prefix, S3Path, S3Personality};
use mountpoint_s3_fs::{
    MountpointConfig, Runtime, S3FilesystemConfig, Superblock, SuperblockConfig, metrics,
};

/// What this is built on (`--version`, recorded with every bench result, and the user agent):
/// the crate versions Cargo.lock pins.
const ENGINE: &str = "msfs bench peer on mountpoint-s3-fs 0.11.0 (mount-s3 1.24's engine), mountpoint-s3-client 0.22.1";

#[derive(Parser, Debug)]
#[clap(name = "mount-s3", version = ENGINE, about = "mount-s3's engine for the msfs benchmark (foreground only)")]
struct Args {
    /// Bucket to mount (the whole bucket: no prefix).
    bucket: String,

    /// Existing directory to mount it at.
    mount_point: PathBuf,

    /// S3 endpoint URL, e.g. http://127.0.0.1:3900.
    #[clap(long)]
    endpoint_url: String,

    /// Signing region (the server's `s3_region`).
    #[clap(long, default_value = "us-east-1")]
    region: String,

    /// Path-style requests (http://host/bucket/key) rather than virtual-hosted ones.
    #[clap(long)]
    force_path_style: bool,

    /// Mount read-only.
    #[clap(long)]
    read_only: bool,

    /// Allow replacing existing objects (opened with O_TRUNC: mount-s3 never writes in place).
    #[clap(long)]
    allow_overwrite: bool,

    /// Allow unlink and rmdir.
    #[clap(long)]
    allow_delete: bool,

    /// Let users other than the mounting one (the benchmark's tools) use the mount.
    #[clap(long)]
    allow_other: bool,

    /// Cache object content in this directory (mount-s3's `--cache`).
    #[clap(long, value_name = "DIRECTORY")]
    cache: Option<PathBuf>,

    /// Bound of the data cache in MiB [default: keep 5% of the disk free, as mount-s3 does].
    #[clap(long, value_name = "MiB", requires = "cache")]
    max_cache_size: Option<u64>,

    /// Metadata TTL in seconds [default: mount-s3's: 60 with --cache, else minimal].
    #[clap(long, value_name = "SECONDS")]
    metadata_ttl: Option<u64>,

    /// Part size of GETs and multipart PUTs in bytes.
    #[clap(long, default_value_t = 8 * 1024 * 1024)]
    part_size: usize,

    /// Maximum number of FUSE worker threads.
    #[clap(long, default_value_t = 16)]
    max_threads: usize,

    /// Write the log to a file in this directory (else to stdout).
    #[clap(long, short = 'l', value_name = "DIRECTORY")]
    log_directory: Option<PathBuf>,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let _logging = init_logging(logging_config(&args)).context("failed to initialize logging")?;
    // mount-s3 installs its metrics sink in every mount; so do we, so that it costs the same.
    let _metrics =
        metrics::install(None).map_err(|e| anyhow!("failed to initialize metrics: {e}"))?;

    let session = mount(&args)?;
    println!(
        "{} is mounted at {}",
        args.bucket,
        args.mount_point.display()
    );
    session.join().context("failed to join session")
}

fn mount(args: &Args) -> anyhow::Result<mountpoint_s3_fs::fuse::session::FuseSession> {
    let s3_path = S3Path::new(Bucket::new(args.bucket.clone())?, Prefix::empty());

    // mount-s3's default memory target; the part size must fit in its data buffer budget.
    let mem_limit = (0.95 * effective_total_memory() as f64) as usize;
    let mem_limit = mem_limit.max(MINIMUM_MEM_LIMIT);
    let part_config = PartConfig::with_part_size(args.part_size)
        .validate(MemoryLimitSetting::Default(mem_limit))?;
    let pool = PagedPool::config()
        .with_candidate_sizes([
            CandidateSize::new(part_config.read_size_bytes),
            CandidateSize::new(part_config.write_size_bytes),
        ])
        .with_memory_limit(mem_limit)
        .build();

    let client_config = ClientConfig {
        region: Region::new_user_specified(args.region.clone()),
        endpoint_url: Some(args.endpoint_url.clone()),
        addressing_style: if args.force_path_style {
            AddressingStyle::Path
        } else {
            AddressingStyle::Automatic
        },
        dual_stack: false,
        transfer_acceleration: false,
        auth_config: S3ClientAuthConfig::Provider(static_credentials()?),
        requester_pays: false,
        expected_bucket_owner: None,
        // What mount-s3 falls back to when it is not on EC2 (it would first ask the instance
        // metadata service, which a bench run must not contact).
        throughput_target: TargetThroughputSetting::Default,
        bind: None,
        part_config,
        user_agent: UserAgent::new(Some("mountpoint-s3-fs/0.11.0 msfs-bench".to_string())),
        tls_config: None,
    };
    // Like mount-s3: a first ListObjectsV2 checks the bucket before anything is mounted.
    let client = client_config
        .create_client(pool.clone(), Some(&s3_path))
        .context("failed to create S3 client")?;
    let runtime = Runtime::new(client.event_loop_group());
    let personality = S3Personality::infer_from_bucket(&args.bucket, &client.endpoint_config());

    let filesystem_config = filesystem_config(args, personality);
    let superblock = Superblock::new(
        client.clone(),
        s3_path,
        SuperblockConfig {
            cache_config: filesystem_config.cache_config.clone(),
            s3_personality: personality,
        },
    );

    let mut data_cache_config = DataCacheConfig {
        disk_cache_config: disk_cache_config(args)?,
        express_cache_config: None,
    };
    // mount-s3 caches in a fresh sub-directory of --cache, removed at unmount.
    let managed_cache_dir = match &mut data_cache_config.disk_cache_config {
        Some(disk) => {
            let dir =
                ManagedCacheDir::new_from_parent_with_cache_key(&disk.cache_directory, None, true)
                    .context("failed to create cache directory")?;
            disk.cache_directory = dir.as_path_buf();
            Some(dir)
        }
        None => None,
    };

    let fuse_options = FuseOptions {
        read_only: args.read_only,
        allow_other: args.allow_other,
        ..Default::default()
    };
    let mount_point = MountPoint::new(&args.mount_point).context("failed to create mount point")?;
    let fuse_config = FuseSessionConfig::new(mount_point, fuse_options, args.max_threads)?;

    // Also installs the SIGINT/SIGTERM handler that unmounts and ends `join`.
    let mut session = MountpointConfig::new(fuse_config, filesystem_config, data_cache_config)?
        .create_fuse_session(superblock, client, runtime, pool)
        .context("failed to create FUSE session")?;
    if let Some(dir) = managed_cache_dir {
        session.run_on_close(Box::new(move || drop(dir)));
    }
    Ok(session)
}

/// Keys from AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY (and AWS_SESSION_TOKEN if set). A static
/// provider rather than the CRT's default chain: without those variables the chain would go on to
/// profiles, STS and the EC2 metadata service, and a bench run talks to 127.0.0.1 only.
fn static_credentials() -> anyhow::Result<CredentialsProvider> {
    let access_key_id =
        std::env::var("AWS_ACCESS_KEY_ID").context("AWS_ACCESS_KEY_ID is not set")?;
    let secret_access_key =
        std::env::var("AWS_SECRET_ACCESS_KEY").context("AWS_SECRET_ACCESS_KEY is not set")?;
    let session_token = std::env::var("AWS_SESSION_TOKEN").ok();
    let options = CredentialsProviderStaticOptions {
        access_key_id: &access_key_id,
        secret_access_key: &secret_access_key,
        session_token: session_token.as_deref(),
    };
    CredentialsProvider::new_static(&Allocator::default(), options)
        .context("failed to create credentials provider")
}

fn filesystem_config(args: &Args, personality: S3Personality) -> S3FilesystemConfig {
    // mount-s3's TTL rule: 60 s once a data cache is on (cached data is only as fresh as the
    // metadata it was found through), otherwise as little caching as the kernel tolerates.
    let ttl = match (args.metadata_ttl, &args.cache) {
        (Some(seconds), _) => TimeToLive::Duration(Duration::from_secs(seconds)),
        (None, Some(_)) => TimeToLive::Duration(Duration::from_secs(60)),
        (None, None) => TimeToLive::Minimal,
    };
    let mut config = S3FilesystemConfig {
        cache_config: CacheConfig::new(ttl),
        allow_delete: args.allow_delete,
        allow_overwrite: args.allow_overwrite,
        s3_personality: personality,
        read_only: args.read_only,
        ..Default::default()
    };
    // Additional checksums on uploads where the personality supports them (mount-s3's default).
    if !personality.supports_additional_checksums() {
        config.upload_checksum_algorithm = None;
    }
    config
}

fn disk_cache_config(args: &Args) -> anyhow::Result<Option<DiskDataCacheConfig>> {
    let Some(directory) = &args.cache else {
        return Ok(None);
    };
    let limit = match args.max_cache_size {
        Some(0) => bail!("--max-cache-size must be above 0"),
        Some(mib) => CacheLimit::TotalSize {
            max_size: (mib * 1024 * 1024) as usize,
        },
        None => CacheLimit::default(),
    };
    Ok(Some(DiskDataCacheConfig {
        cache_directory: directory.clone(),
        block_size: 1024 * 1024, // mount-s3's cache block size
        limit,
    }))
}

/// mount-s3's default verbosity (warnings, its own info lines, no CRT or metrics lines).
fn logging_config(args: &Args) -> LoggingConfig {
    LoggingConfig {
        log_file: args.log_directory.as_deref().map(prepare_log_file_name),
        log_to_stdout: args.log_directory.is_none(),
        default_filter: format!(
            "warn,mountpoint_s3=info,awscrt=off,{}=off",
            metrics::TARGET_NAME
        ),
    }
}
