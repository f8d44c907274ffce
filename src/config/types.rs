//! The typed, validated configuration that the rest of the crate reads.
//!
//! Everything here is plain data: parsing, defaults and validation live in the
//! sibling modules, so a value of these types is always a configuration that
//! passed every check.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use super::secret::Secret;

/// One mount: process-wide settings plus the backends shown as sibling directories.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// The file this was read from (reloads read it again).
    pub source: PathBuf,
    /// The filesystem name shown by `mount` and `df`.
    pub mountname: String,
    /// Where to mount; `$MSFS_MOUNTPOINT` overrides the file.
    pub mountpoint: PathBuf,
    /// FUSE request readers; 0 means one per CPU.
    pub fuse_workers: usize,
    /// Owner of the mount's root directory.
    pub uid: u32,
    pub gid: u32,
    /// Mode bits of the mount's root directory.
    pub dir_perm: u16,
    pub allow_other: bool,
    /// `mlock` the executable's and shared libraries' mappings at start (ours; see
    /// `crate::residency`).
    pub lock_code_in_memory: bool,
    /// Largest write the kernel sends in one request, in bytes.
    pub max_write: u32,
    /// Ask the kernel for its writeback cache (`FUSE_WRITEBACK_CACHE`): `write()` lands in the
    /// page cache and reaches msfs merged, up to `max_write` per request (ours).
    pub fuse_writeback_cache: bool,
    /// Answer read-only opens of objects wholly in the line cache with their cache file, which
    /// the kernel then reads itself (FUSE passthrough; needs `per-inode-file` storage) (ours).
    pub fuse_passthrough: bool,
    /// Serve the connection over FUSE over io_uring when the kernel offers it (Linux 6.14 and
    /// later, `fuse.enable_uring`), `/dev/fuse` otherwise (ours).
    pub fuse_io_uring: bool,
    /// How long an io_uring queue's thread polls for the next request before it sleeps (ours).
    pub fuse_io_uring_poll: Duration,
    /// How long the kernel may cache entries and attributes.
    pub entry_attr_ttl: Duration,
    /// How long an inode the kernel holds may go unused before msfs asks the kernel to drop it
    /// (files only; at least `entry_attr_ttl`).
    pub evictable_inode_ttl: Duration,
    /// Inodes a mount keeps for the kernel beyond which the least recently used files' are
    /// dropped too, idle or not (ours).
    pub evictable_inode_limit: usize,
    /// How often idle inodes are looked for (`evictable_inode_ttl`) and the inode limit checked.
    pub ttl_check_interval: Duration,
    pub cache: CacheConfig,
    /// Files at least this large are uploaded with multipart upload.
    pub multipart_upload_threshold_bytes: u64,
    /// Concurrent object commits (PUT / multipart) across the mount.
    pub write_commit_workers: usize,
    /// Written bytes not yet committed, across all files, beyond which writers wait (ours).
    pub write_dirty_limit_bytes: u64,
    /// Bytes commits in flight may hold in memory, process-wide (ours).
    pub write_buffer_limit_bytes: u64,
    /// The memory the whole process aims to stay under, in bytes; `None`: derived at start from
    /// the process's memory cgroup, else the machine (`crate::memory`).
    pub process_memory_limit: Option<u64>,
    /// Reload the config file this often, as if sent SIGHUP; `None` disables it.
    pub auto_sighup_interval: Option<Duration>,
    /// A FUSE request unanswered this long is logged at `warn` and counted; `None` disables
    /// the watchdog (ours: `fuse_request_stall_warn_secs`).
    pub fuse_request_stall_warn: Option<Duration>,
    /// Address of the HTTP endpoint serving `/metrics` (top-level key `endpoint`).
    pub metrics_endpoint: Option<String>,
    /// The `opentelemetry` section, when it configures metrics.
    pub telemetry: Option<TelemetryConfig>,
    pub backends: Vec<BackendConfig>,
    /// The `shared_cache` section: a second cache tier in a bucket every node shares (ours).
    pub shared_cache: Option<SharedCacheConfig>,
    /// The whole mount read-only (`msfs mount --read-only`, `mount.msfs -o ro`): the kernel
    /// mount and every backend, also those a reload adds. Not a key of the file.
    pub read_only: bool,
    /// Mounted with the kernel's noexec (`msfs mount --no-exec`, `mount.msfs -o noexec`). Not
    /// a key of the file.
    pub no_exec: bool,
}

impl Config {
    /// Makes the whole mount read-only (see [`Config::read_only`]).
    pub fn make_read_only(&mut self) {
        self.read_only = true;
        for backend in &mut self.backends {
            backend.readonly = true;
        }
    }
}

/// The line cache shared by every backend of the mount.
#[derive(Debug, Clone, PartialEq)]
pub struct CacheConfig {
    pub storage: CacheStorage,
    /// Fetch and residency granularity in bytes.
    pub line_size: u64,
    /// Number of lines; capacity is `line_size * lines` (with `Tiered`: the disk tier's).
    pub lines: u64,
    /// With `Tiered`: lines of the RAM tier, above `lines` on disk; 0 otherwise.
    pub ram_lines: u64,
    /// Lines read ahead after a miss.
    pub lines_to_prefetch: u64,
    /// Parent of the mount's private cache directory; `None` means the system temp dir.
    pub dir_path: Option<PathBuf>,
    /// Keep lines on disk across restarts (a fixed directory under `dir_path`, indexed; see
    /// `cache::persist`). Only with `MappedFile` storage and an explicit `dir_path`.
    pub persistent: bool,
    /// After a commit that uploaded a file whole in one PutObject of at most 8 MiB (the bodies
    /// built in memory), keep its bytes in the cache so they read back without a download.
    /// Larger files, and files committed in parts over an earlier version, are read back from
    /// the store.
    pub write_cache_promotion: bool,
}

/// Where cache lines live.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CacheStorage {
    /// Anonymous memory only.
    Ram,
    /// One shared memory-mapped file under the cache directory.
    MappedFile,
    /// One sparse file per inode, read with `pread`.
    PerInodeFile,
    /// A RAM tier (`ram_lines`, anonymous memory) over a disk tier (`lines`, one mapped file):
    /// new lines land on disk, a line read again moves up to RAM, and a line RAM evicts moves
    /// down to disk (`cache::tiers`).
    Tiered,
}

/// One bucket (or bucket prefix, or local directory) shown as a directory under the mountpoint.
#[derive(Debug, Clone, PartialEq)]
pub struct BackendConfig {
    /// Name of the directory under the mountpoint; unique, no `/`.
    pub dir_name: String,
    /// Bucket name; for [`BackendKind::File`] the absolute root directory; may be
    /// empty for RAM and PSEUDO.
    pub bucket: String,
    /// Key prefix shown as the directory's root: empty or ending in `/`.
    pub prefix: String,
    pub readonly: bool,
    /// Commit a modified file before `close` returns instead of in the background.
    pub flush_on_close: bool,
    /// Each object's own mode, owner and times, kept in its user metadata (s3fs's names);
    /// `uid`, `gid`, `dir_perm` and `file_perm` are then the defaults of objects without any.
    pub posix_metadata: bool,
    pub uid: u32,
    pub gid: u32,
    pub dir_perm: u16,
    pub file_perm: u16,
    /// Keys per LIST page; 0 lets the store choose.
    pub directory_page_size: u32,
    /// 0 none, 1 errors, 2 successes, 3+ details.
    pub trace_level: u8,
    /// The longest object key (bytes of UTF-8) a name may make: S3's 1,024 by default; a path
    /// past it is refused with `ENAMETOOLONG` before any request.
    pub max_key_bytes: u32,
    pub manifest: ManifestConfig,
    /// Files and directories (ending in `/`), relative to the backend's root, fetched into the
    /// cache in the background at mount (`crate::warm::background`).
    pub warm: Vec<String>,
    pub kind: BackendKind,
}

/// Manifest bootstrap for large namespaces.
#[derive(Debug, Clone, PartialEq)]
pub struct ManifestConfig {
    /// Directory holding the manifest and its delta log; `None` disables manifests.
    pub path: Option<PathBuf>,
    /// Parallel listers used to generate a manifest.
    pub gen_workers: usize,
    /// LIST pages without a sub-directory before a directory counts as flat.
    pub flat_dir_confirmation_pages: u32,
    pub flat_dir_hints: Vec<FlatDirHint>,
}

/// A directory known to be flat and how to split its listing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FlatDirHint {
    /// Directory relative to the backend prefix, ending in `/`.
    pub path: String,
    /// Characters that start the object names in it.
    pub key_prefix_chars: String,
    /// Leading characters per sub-prefix (`key_prefix_chars.len() ^ split_depth` listers).
    pub split_depth: u32,
}

/// The object store behind a backend.
#[derive(Debug, Clone, PartialEq)]
pub enum BackendKind {
    /// S3 or an S3-compatible API (AWS, MinIO, AIStore, GCS interoperability).
    S3(S3Config),
    /// A local directory used as the object store; the root is [`BackendConfig::bucket`].
    File,
    /// An in-memory store, for tests and demos.
    Ram(RamConfig),
    /// A generated, read-only tree whose files hold a verifiable pattern, for scale tests.
    Pseudo(PseudoConfig),
}

/// Which S3 dialect the endpoint speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum S3Flavor {
    Aws,
    AIStore,
    Gcs,
}

/// How to reach and authenticate to an S3-compatible store.
#[derive(Debug, Clone, PartialEq)]
pub struct S3Config {
    pub flavor: S3Flavor,
    /// Endpoint URL; `None` means AWS itself.
    pub endpoint: Option<String>,
    /// Signing region. When [`S3Config::config_profile`] is set, the profile's region
    /// (and endpoint) win and this is the fallback.
    pub region: String,
    pub credentials: S3Credentials,
    /// `use_config_env`: take region and endpoint from this profile of the AWS config file.
    pub config_profile: Option<AwsProfile>,
    /// Bucket in the host name instead of the path.
    pub virtual_hosted_style: bool,
    pub retry: RetryConfig,
    /// AIStore-only settings (`flavor == AIStore`).
    pub aistore: Option<AIStoreOptions>,
}

/// Where request-signing credentials come from.
#[derive(Debug, Clone, PartialEq)]
pub enum S3Credentials {
    /// Keys written in the config file or its environment.
    Static {
        access_key_id: String,
        secret_access_key: Secret,
        session_token: Option<Secret>,
    },
    /// A profile of the AWS shared config / credentials files (`use_config_env`,
    /// `use_credentials_env`); a `None` file is not consulted.
    Files {
        config_file: Option<PathBuf>,
        credentials_file: Option<PathBuf>,
        profile: String,
    },
    /// Unsigned requests (public buckets, AIStore without auth).
    Anonymous,
    /// Nothing configured: the SDK's default chain (environment, shared files, web
    /// identity, container and instance metadata).
    DefaultChain,
}

/// A named profile in an AWS config file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AwsProfile {
    pub config_file: PathBuf,
    pub name: String,
}

/// Retries on network errors, HTTP 429 and 5xx, with exponential backoff.
#[derive(Debug, Clone, PartialEq)]
pub struct RetryConfig {
    /// Delay before the first retry; zero disables retries.
    pub base_delay: Duration,
    /// Each delay is the previous one times this (at least 1).
    pub multiplier: f64,
    /// Retrying stops once the next delay would exceed this.
    pub max_delay: Duration,
}

/// Settings only AIStore needs.
#[derive(Debug, Clone, PartialEq)]
pub struct AIStoreOptions {
    pub authn_token: Option<Secret>,
    /// Token file, re-read when it changes.
    pub authn_token_file: Option<PathBuf>,
    /// How long one request may wait for its answer to start, or its answer may pause, before
    /// it is abandoned and retried.
    pub timeout: Duration,
    /// `dir_name` of another, non-AIStore backend that lists this bucket directly.
    pub manifest_gen_backend: Option<String>,
}

/// Limits of the in-memory store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RamConfig {
    pub max_list_page_size: u64,
    pub max_total_objects: u64,
    pub max_total_object_space: u64,
}

/// Shape of the generated PSEUDO tree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PseudoConfig {
    /// printf-style name of sub-directories, one integer conversion (`dir_%08X`);
    /// generated names sort before file names.
    pub dir_name_format: String,
    pub file_name_format: String,
    pub dir_starting_number: u64,
    pub file_starting_number: u64,
    /// Size of every file in bytes (contents: `store::pseudo_fill`, a pattern of key and offset).
    pub file_size: u64,
    /// Files per directory at depth 0 (the backend root) to 3.
    pub files_at_depth: [u32; 4],
    /// Sub-directories per directory at depth 0 to 2.
    pub subdirectories_at_depth: [u32; 3],
    pub max_list_page_size: u64,
    pub min_latency: PseudoLatencies,
}

/// Minimum time each PSEUDO operation takes, to imitate a remote store.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PseudoLatencies {
    pub delete_file: Duration,
    pub list_directory: Duration,
    pub list_objects: Duration,
    pub read_file: Duration,
    pub stat_directory: Duration,
    pub stat_file: Duration,
}

/// OpenTelemetry metrics export (`opentelemetry.metrics`).
#[derive(Debug, Clone, PartialEq)]
pub struct TelemetryConfig {
    /// Sources of attributes added to every metric; later ones win on a clash.
    pub attributes: Vec<AttributeProvider>,
    pub reader: MetricsReaderConfig,
    /// `None` when no supported exporter is configured.
    pub exporter: Option<OtlpExporterConfig>,
}

/// One `attributes` entry: a source and its `options.attributes` mapping.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttributeProvider {
    pub source: AttributeSource,
    /// Attribute name to value (`static`), host property (`host`: `name`), process
    /// property (`process`: `pid`) or environment variable (`environment_variables`).
    pub attributes: BTreeMap<String, String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttributeSource {
    Static,
    Host,
    Process,
    EnvironmentVariables,
}

/// The periodic reader: it collects the instruments and exports them every `export_interval`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetricsReaderConfig {
    pub export_interval: Duration,
    pub export_timeout: Duration,
}

/// OTLP over HTTP.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OtlpExporterConfig {
    pub endpoint: String,
    /// Plain HTTP instead of TLS.
    pub insecure: bool,
}

/// The `shared_cache` section: a bucket of an S3-compatible store near the nodes that holds
/// lines of origin objects for every node (see `crate::shared_cache`).
#[derive(Debug, Clone, PartialEq)]
pub struct SharedCacheConfig {
    pub bucket: String,
    /// Key prefix of every shared line (empty or ending in `/`).
    pub prefix: String,
    pub s3: S3Config,
    /// How long a read waits for the shared cache before it goes to the origin.
    pub read_timeout: std::time::Duration,
    /// Fills (PUTs of lines read from the origin) running at once.
    pub fill_workers: usize,
    /// Bytes of lines waiting to be filled or being filled, process-wide; a line past it is
    /// dropped (counted), never waited for.
    pub fill_buffer_limit_bytes: u64,
}
