//! Every built-in default in one place, as the Go implementation spells them, so
//! existing config files mean the same thing here. String defaults are env-expanded.

pub(super) const MOUNTNAME: &str = "msfs";
pub(super) const MOUNTPOINT: &str = "/mnt";
pub(super) const FUSE_WORKERS: usize = 0;
pub(super) const ROOT_DIR_PERM: u16 = 0o555;
pub(super) const ALLOW_OTHER: bool = true;
/// Ours: a FUSE server's code paged out stalls every request (see `crate::residency`).
pub(super) const LOCK_CODE_IN_MEMORY: bool = true;
pub(super) const MAX_WRITE: u32 = 131_072;
/// The kernel's writeback cache is off unless asked for (ours): with it, the kernel owns the
/// size and mtime of a cached file, so other writers' changes to it go unseen.
pub(super) const FUSE_WRITEBACK_CACHE: bool = false;
/// FUSE passthrough is off unless asked for (ours): it needs `per-inode-file` cache storage and
/// `CAP_SYS_ADMIN`, and a file read that way is read at the local disk's speed, not msfs's.
pub(super) const FUSE_PASSTHROUGH: bool = false;
/// FUSE over io_uring is off unless asked for (ours): the kernel (6.18) neither resends a
/// request it delivered through a ring nor lets a server withdraw its ring entries, so a
/// restart or upgrade of msfs can leave a request in flight unanswered (docs/configuration.md,
/// `fuse_io_uring`).
pub(super) const FUSE_IO_URING: bool = false;
/// How long a queue's thread polls for the next request before it sleeps (ours).
pub(super) const FUSE_IO_URING_POLL_US: u64 = 50;
pub(super) const ENTRY_ATTR_TTL_MS: u64 = 10_000;
pub(super) const EVICTABLE_INODE_TTL_MS: u64 = 1_000_000;
pub(super) const TTL_CHECK_INTERVAL_MS: u64 = 250;
/// Inodes a mount keeps for the kernel before it asks the kernel to drop idle files' (ours):
/// about 100 MiB of msfs's memory, and as much again of the kernel's (see docs/configuration.md).
pub(super) const EVICTABLE_INODE_LIMIT: u64 = 262_144;
pub(super) const CACHE_LINE_SIZE: u64 = 10_485_760;
pub(super) const CACHE_LINES: u64 = 128;
pub(super) const CACHE_LINES_TO_PREFETCH: u64 = 4;
pub(super) const WRITE_CACHE_PROMOTION: bool = false;
pub(super) const MULTIPART_UPLOAD_THRESHOLD_BYTES: u64 = 67_108_864;
pub(super) const WRITE_COMMIT_WORKERS: usize = 8;
/// Uncommitted written bytes held locally (on disk, under `cache_dir_path`) before writers wait.
pub(super) const WRITE_DIRTY_LIMIT_BYTES: u64 = 4 << 30;
pub(super) const MIN_WRITE_DIRTY_LIMIT_BYTES: u64 = 64 << 20;
/// Memory commits in flight may hold, process-wide (ours): about 32 parts' chunks in flight and
/// whole small bodies. At least 2 MiB, one chunk of a streamed part and its read-ahead.
pub(super) const WRITE_BUFFER_LIMIT_BYTES: u64 = 256 << 20;
pub(super) const MIN_WRITE_BUFFER_LIMIT_BYTES: u64 = 2 << 20;
/// Below this a process cannot hold its runtime, one cache line and a listing page.
pub(super) const MIN_PROCESS_MEMORY_LIMIT: u64 = 64 << 20;
pub(super) const AUTO_SIGHUP_INTERVAL_SECS: u64 = 0;
/// A FUSE request unanswered this long is logged and counted (ours; 0 turns it off). Long
/// enough that a slow store under load never trips it, short enough to be seen in minutes.
pub(super) const FUSE_REQUEST_STALL_WARN_SECS: u64 = 60;

pub(super) const READONLY: bool = true;
pub(super) const FLUSH_ON_CLOSE: bool = false;
pub(super) const POSIX_METADATA: bool = false;
pub(super) const DIR_PERM_READONLY: u16 = 0o555;
pub(super) const DIR_PERM_WRITABLE: u16 = 0o777;
pub(super) const FILE_PERM_READONLY: u16 = 0o444;
pub(super) const FILE_PERM_WRITABLE: u16 = 0o666;
pub(super) const DIRECTORY_PAGE_SIZE: u32 = 0;
pub(super) const TRACE_LEVEL: u8 = 0;
/// S3's longest key; a store that takes longer ones (garage does) may be given more.
pub(super) const MAX_KEY_BYTES: u32 = crate::store::MAX_KEY_LEN as u32;
/// What `max_key_bytes` may be raised to: no store msfs knows keeps longer keys.
pub(super) const MAX_KEY_BYTES_LIMIT: u32 = 65_536;
pub(super) const MANIFEST_GEN_WORKERS: usize = 200;
pub(super) const FLAT_DIR_CONFIRMATION_PAGES: u32 = 5;
pub(super) const FLAT_DIR_KEY_PREFIX_CHARS: &str = "0123456789abcdefghijklmnopqrstuvwxyz";
pub(super) const FLAT_DIR_SPLIT_DEPTH: u32 = 1;

pub(super) const S3_ENDPOINT: &str = "${AWS_ENDPOINT}";
pub(super) const S3_REGION: &str = "${AWS_REGION:-us-east-1}";
/// Signing region when a config-file profile was meant to supply one and the file key is empty.
pub(super) const FALLBACK_REGION: &str = "us-east-1";
pub(super) const S3_ACCESS_KEY_ID: &str = "${AWS_ACCESS_KEY_ID}";
pub(super) const S3_SECRET_ACCESS_KEY: &str = "${AWS_SECRET_ACCESS_KEY}";
pub(super) const S3_SESSION_TOKEN: &str = "${AWS_SESSION_TOKEN}";
pub(super) const S3_CONFIG_FILE: &str = "${AWS_CONFIG_FILE:-${HOME}/.aws/config}";
pub(super) const S3_CREDENTIALS_FILE: &str =
    "${AWS_SHARED_CREDENTIALS_FILE:-${HOME}/.aws/credentials}";
pub(super) const S3_PROFILE: &str = "${AWS_PROFILE:-default}";
pub(super) const RETRY_BASE_DELAY_MS: u64 = 10;
pub(super) const RETRY_NEXT_DELAY_MULTIPLIER: f64 = 2.0;
pub(super) const RETRY_MAX_DELAY_MS: u64 = 2000;

pub(super) const AIS_ENDPOINT: &str = "${AIS_ENDPOINT}";
pub(super) const AIS_AUTHN_TOKEN: &str = "${AIS_AUTHN_TOKEN}";
pub(super) const AIS_AUTHN_TOKEN_FILE: &str =
    "${AIS_AUTHN_TOKEN_FILE:-${HOME}/.config/ais/cli/auth.token}";
pub(super) const AIS_PROVIDER: &str = "s3";
pub(super) const AIS_TIMEOUT_MS: u64 = 30_000;
/// AIStore ignores the signing region, but SigV4 needs one.
pub(super) const AIS_REGION: &str = "us-east-1";

/// GCS's S3-interoperable (XML API) endpoint; the Go version left this empty.
pub(super) const GCS_ENDPOINT: &str = "https://storage.googleapis.com";
/// The region GCS expects in SigV4 signatures.
pub(super) const GCS_REGION: &str = "auto";

pub(super) const RAM_MAX_LIST_PAGE_SIZE: u64 = 1000;
pub(super) const RAM_MAX_TOTAL_OBJECTS: u64 = 10_000;
pub(super) const RAM_MAX_TOTAL_OBJECT_SPACE: u64 = 1 << 30;

pub(super) const PSEUDO_DIR_NAME_FORMAT: &str = "dir_%08X";
pub(super) const PSEUDO_FILE_NAME_FORMAT: &str = "file_%08X";
pub(super) const PSEUDO_MAX_LIST_PAGE_SIZE: u64 = 1000;

pub(super) const OTEL_EXPORT_INTERVAL_MS: u64 = 60_000;
pub(super) const OTEL_EXPORT_TIMEOUT_MS: u64 = 30_000;

/// Limits that are not user defaults but sanity bounds.
pub(super) const MIN_CACHE_LINES: u64 = 16;
/// S3 refuses a single PUT larger than 5 GiB, so anything bigger must go multipart.
pub(super) const MAX_SINGLE_PUT_BYTES: u64 = 5 << 30;
/// A flat-directory hint fans out into `chars^depth` listers; beyond this it is a typo.
pub(super) const MAX_FLAT_DIR_FANOUT: u64 = 65_536;

// `shared_cache`.
/// Well under an origin's first byte across regions (tens to hundreds of ms), well over a
/// store in the same rack or zone (a few ms).
pub(super) const SHARED_CACHE_READ_TIMEOUT_MS: u64 = 200;
pub(super) const SHARED_CACHE_FILL_WORKERS: usize = 4;
pub(super) const SHARED_CACHE_FILL_BUFFER_LIMIT_BYTES: u64 = 64 << 20;
