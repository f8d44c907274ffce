//! The `msfs_version: 1` format: process-wide keys, the cache, telemetry and the
//! `backends` list, plus the checks that span several backends.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;

use super::Ids;
use super::backend::{check_absolute, check_url, parse_backend, positive};
use super::defaults as d;
use super::error::ConfigError;
use super::raw;
use super::reader::{Place, Section, WITHOUT_EFFECT, index_path, read};
use super::scalar::{OptScalar, Whole};
use super::shared_cache::parse_shared_cache;

/// The smallest `evictable_inode_limit` accepted.
const MIN_EVICTABLE_INODE_LIMIT: u64 = 4096;
use super::telemetry::parse_telemetry;
use super::types::{
    BackendConfig, BackendKind, CacheConfig, CacheStorage, Config, S3Config, S3Flavor,
};

/// The longest `fuse_io_uring_poll_us` accepted.
const MAX_IO_URING_POLL: Duration = Duration::from_millis(10);

/// Top-level keys of the Go implementation's metadata store (Pebble, B+trees) and
/// dirty-line accounting, which have no counterpart here.
const LEGACY_TOP_LEVEL: &[&str] = &[
    "fuse_fd_per_worker",
    "dirty_cache_lines_flush_trigger",
    "dirty_cache_lines_max",
    "metadata_cache_paging_mode",
    "pebble_cache_size",
    "pebble_l0_compaction_file_threshold",
    "pebble_l0_stop_writes_threshold",
    "pebble_mem_table_size",
    "inode_map_keys_per_page_max",
    "inode_map_page_evict_low_limit",
    "inode_map_page_evict_high_limit",
    "inode_map_page_dirty_flush_trigger",
    "inode_map_flushes_per_gc",
    "inode_eviction_queue_keys_per_page_max",
    "inode_eviction_queue_page_evict_low_limit",
    "inode_eviction_queue_page_evict_high_limit",
    "inode_eviction_queue_page_dirty_flush_trigger",
    "inode_eviction_queue_flushes_per_gc",
    "phys_child_dir_entry_map_keys_per_page_max",
    "phys_child_dir_entry_map_page_evict_low_limit",
    "phys_child_dir_entry_map_page_evict_high_limit",
    "phys_child_dir_entry_map_page_dirty_flush_trigger",
    "phys_child_dir_entry_map_flushes_per_gc",
    "virt_child_dir_entry_map_keys_per_page_max",
    "virt_child_dir_entry_map_page_evict_low_limit",
    "virt_child_dir_entry_map_page_evict_high_limit",
    "virt_child_dir_entry_map_page_dirty_flush_trigger",
    "virt_child_dir_entry_map_flushes_per_gc",
];

/// A configuration with every key at its default and no backends; both formats start here.
pub(super) fn config_defaults(source: &Path, ids: Ids) -> Config {
    Config {
        source: source.to_path_buf(),
        mountname: d::MOUNTNAME.to_string(),
        mountpoint: PathBuf::from(d::MOUNTPOINT),
        fuse_workers: d::FUSE_WORKERS,
        uid: ids.uid,
        gid: ids.gid,
        dir_perm: d::ROOT_DIR_PERM,
        allow_other: d::ALLOW_OTHER,
        lock_code_in_memory: d::LOCK_CODE_IN_MEMORY,
        max_write: d::MAX_WRITE,
        fuse_writeback_cache: d::FUSE_WRITEBACK_CACHE,
        fuse_passthrough: d::FUSE_PASSTHROUGH,
        fuse_io_uring: d::FUSE_IO_URING,
        fuse_io_uring_poll: Duration::from_micros(d::FUSE_IO_URING_POLL_US),
        entry_attr_ttl: Duration::from_millis(d::ENTRY_ATTR_TTL_MS),
        evictable_inode_ttl: Duration::from_millis(d::EVICTABLE_INODE_TTL_MS),
        ttl_check_interval: Duration::from_millis(d::TTL_CHECK_INTERVAL_MS),
        evictable_inode_limit: d::EVICTABLE_INODE_LIMIT as usize,
        cache: CacheConfig {
            storage: CacheStorage::MappedFile,
            line_size: d::CACHE_LINE_SIZE,
            lines: d::CACHE_LINES,
            ram_lines: 0,
            lines_to_prefetch: d::CACHE_LINES_TO_PREFETCH,
            dir_path: None,
            persistent: false,
            write_cache_promotion: d::WRITE_CACHE_PROMOTION,
        },
        multipart_upload_threshold_bytes: d::MULTIPART_UPLOAD_THRESHOLD_BYTES,
        write_commit_workers: d::WRITE_COMMIT_WORKERS,
        write_dirty_limit_bytes: d::WRITE_DIRTY_LIMIT_BYTES,
        write_buffer_limit_bytes: d::WRITE_BUFFER_LIMIT_BYTES,
        process_memory_limit: None,
        auto_sighup_interval: None,
        fuse_request_stall_warn: seconds(d::FUSE_REQUEST_STALL_WARN_SECS),
        metrics_endpoint: None,
        telemetry: None,
        backends: Vec::new(),
        shared_cache: None,
        read_only: false,
        no_exec: false,
    }
}

/// Where keys of older implementations may sit in this format.
pub(super) const LEGACY: &[(&str, &str, &[&str])] = &[
    (
        "",
        "a setting of the Go implementation's metadata store and dirty-line accounting, which \
         msfs does not have",
        LEGACY_TOP_LEVEL,
    ),
    (
        "backends[]",
        "a tuning knob of the Go implementation's write path; msfs sizes parts by \
         multipart_upload_threshold_bytes and uploads with write_commit_workers",
        &[
            "multipart_cache_line_threshold",
            "upload_part_cache_lines",
            "upload_part_concurrency",
        ],
    ),
    (
        "backends[].S3",
        "msfs leaves payload signing to the AWS SDK's defaults",
        &["unsigned_payload"],
    ),
];

/// Reads and checks a `msfs_version: 1` file's tree.
pub(super) fn parse_v1(
    tree: Value,
    s: &Place<'_>,
    ids: Ids,
    warnings: &mut Vec<String>,
) -> Result<Config, ConfigError> {
    let mut raw: raw::V1 = read(tree, s, LEGACY, warnings)?;
    warn_without_effect(s, &raw, warnings);
    let mut c = config_defaults(s.source(), ids);
    c.mountname = s.text_or("mountname", raw.mountname.take(), d::MOUNTNAME)?;
    check_mountname(s, "mountname", &c.mountname)?;
    c.mountpoint = PathBuf::from(s.text_or("mountpoint", raw.mountpoint.take(), d::MOUNTPOINT)?);
    c.fuse_workers = raw.fuse_workers.value_or(d::FUSE_WORKERS);
    c.uid = raw.uid.value_or(ids.uid);
    c.gid = raw.gid.value_or(ids.gid);
    c.dir_perm = raw.dir_perm.value_or(d::ROOT_DIR_PERM);
    c.allow_other = raw.allow_other.value_or(d::ALLOW_OTHER);
    c.lock_code_in_memory = raw.lock_code_in_memory.value_or(d::LOCK_CODE_IN_MEMORY);
    c.max_write = raw.max_write.value_or(d::MAX_WRITE);
    if c.max_write < 4096 {
        return Err(s.invalid("max_write", "must be at least 4096 (one page)"));
    }
    c.fuse_writeback_cache = raw.fuse_writeback_cache.value_or(d::FUSE_WRITEBACK_CACHE);
    c.fuse_passthrough = raw.fuse_passthrough.value_or(d::FUSE_PASSTHROUGH);
    c.fuse_io_uring = raw.fuse_io_uring.value_or(d::FUSE_IO_URING);
    c.fuse_io_uring_poll =
        Duration::from_micros(raw.fuse_io_uring_poll_us.value_or(d::FUSE_IO_URING_POLL_US));
    if c.fuse_io_uring_poll > MAX_IO_URING_POLL {
        return Err(s.invalid(
            "fuse_io_uring_poll_us",
            "must be at most 10000: a thread that polls longer only burns a CPU",
        ));
    }
    parse_ttls(s, &raw, &mut c)?;
    c.cache = parse_cache(s, &mut raw, warnings)?;
    if c.fuse_passthrough && c.fuse_writeback_cache {
        return Err(s.invalid(
            "fuse_passthrough",
            "cannot be on with fuse_writeback_cache: the kernel offers passthrough only \
             without its writeback cache",
        ));
    }
    if c.fuse_passthrough && c.cache.storage != CacheStorage::PerInodeFile {
        return Err(s.invalid(
            "fuse_passthrough",
            "needs cache_storage: per-inode-file (the kernel reads an object from a file that \
             holds it byte for byte)",
        ));
    }
    c.multipart_upload_threshold_bytes = raw
        .multipart_upload_threshold_bytes
        .value_or(d::MULTIPART_UPLOAD_THRESHOLD_BYTES);
    if c.multipart_upload_threshold_bytes > d::MAX_SINGLE_PUT_BYTES {
        return Err(s.invalid(
            "multipart_upload_threshold_bytes",
            "must be at most 5368709120 (5 GiB), the largest object S3 accepts in a single PUT",
        ));
    }
    c.write_commit_workers = raw.write_commit_workers.value_or(d::WRITE_COMMIT_WORKERS);
    if c.write_commit_workers == 0 {
        return Err(s.invalid("write_commit_workers", "must be at least 1"));
    }
    c.write_dirty_limit_bytes = raw
        .write_dirty_limit_bytes
        .value_or(d::WRITE_DIRTY_LIMIT_BYTES);
    if c.write_dirty_limit_bytes < d::MIN_WRITE_DIRTY_LIMIT_BYTES {
        return Err(s.invalid(
            "write_dirty_limit_bytes",
            "must be at least 67108864 (64 MiB)",
        ));
    }
    c.write_buffer_limit_bytes = raw
        .write_buffer_limit_bytes
        .value_or(d::WRITE_BUFFER_LIMIT_BYTES);
    if c.write_buffer_limit_bytes < d::MIN_WRITE_BUFFER_LIMIT_BYTES {
        return Err(s.invalid(
            "write_buffer_limit_bytes",
            "must be at least 2097152 (2 MiB)",
        ));
    }
    // 0, like absent, leaves the target to the cgroup or the machine.
    let memory_limit = raw.process_memory_limit.value_or(0);
    if memory_limit != 0 && memory_limit < d::MIN_PROCESS_MEMORY_LIMIT {
        return Err(s.invalid(
            "process_memory_limit",
            "must be 0 (derived from the cgroup or the machine) or at least 67108864 (64 MiB)",
        ));
    }
    c.process_memory_limit = (memory_limit != 0).then_some(memory_limit);
    c.auto_sighup_interval = seconds(
        raw.auto_sighup_interval
            .value_or(d::AUTO_SIGHUP_INTERVAL_SECS),
    );
    c.fuse_request_stall_warn = seconds(
        raw.fuse_request_stall_warn_secs
            .value_or(d::FUSE_REQUEST_STALL_WARN_SECS),
    );
    let endpoint = s.text_or("endpoint", raw.endpoint.take(), "")?;
    if !endpoint.is_empty() {
        check_url(s, "endpoint", &endpoint)?;
        // The endpoint msfs itself listens on, in plain HTTP (put TLS in front of it).
        if !endpoint.starts_with("http://") {
            return Err(s.invalid(
                "endpoint",
                format!("{endpoint:?}: msfs serves /metrics over plain HTTP: use http://HOST:PORT"),
            ));
        }
        c.metrics_endpoint = Some(endpoint);
    }
    if let Some(Section(otel)) = raw.opentelemetry.take() {
        c.telemetry = parse_telemetry(otel, &s.child("opentelemetry"), warnings)?;
    }

    c.backends = parse_backends(s, raw.backends.take().unwrap_or_default(), ids, warnings)?;
    if let Some(Section(shared)) = raw.shared_cache.take() {
        c.shared_cache = Some(parse_shared_cache(
            shared,
            &s.child("shared_cache"),
            &c.backends,
            c.cache.line_size,
            warnings,
        )?);
    }
    if c.backends.is_empty() {
        warnings.push(s.warning(
            "backends",
            "no backends configured; the mount will be empty",
        ));
    }
    Ok(c)
}

/// Keys of the reference system that msfs reads (as numbers, like every key) but has no use
/// for: each one given is warned about, with why.
fn warn_without_effect(s: &Place<'_>, raw: &raw::V1, warnings: &mut Vec<String>) {
    for (key, given, why) in [
        (
            "virtual_dir_ttl",
            raw.virtual_dir_ttl.is_some(),
            "mkdir stores a directory marker object at once, so no directory is kept only in \
             memory, and none expires",
        ),
        (
            "virtual_file_ttl",
            raw.virtual_file_ttl.is_some(),
            "a created file, written or empty, is kept until it is committed to the store, and \
             never expires before",
        ),
    ] {
        if given {
            warnings.push(s.warning(key, &format!("{WITHOUT_EFFECT}: {why}")));
        }
    }
}

/// Checks each `backends[i]`, then the rules that need all of them.
pub(super) fn parse_backends(
    s: &Place<'_>,
    raw: Vec<Section<raw::Backend>>,
    ids: Ids,
    warnings: &mut Vec<String>,
) -> Result<Vec<BackendConfig>, ConfigError> {
    let mut backends = Vec::with_capacity(raw.len());
    for (i, Section(backend)) in raw.into_iter().enumerate() {
        backends.push(parse_backend(
            backend,
            &s.item("backends", i),
            ids,
            warnings,
        )?);
    }
    check_backends(s, &backends)?;
    Ok(backends)
}

/// 0 means "off" for the periodic reload and the stall watchdog.
pub(super) fn seconds(secs: u64) -> Option<Duration> {
    (secs > 0).then(|| Duration::from_secs(secs))
}

/// The name goes into the `fsname=` mount option, where a comma would start a new option.
pub(super) fn check_mountname(s: &Place<'_>, key: &str, name: &str) -> Result<(), ConfigError> {
    if name.is_empty() || name.contains(',') || name.contains('\0') {
        Err(s.invalid(
            key,
            format!("{name:?} must be non-empty and contain no comma"),
        ))
    } else {
        Ok(())
    }
}

fn parse_ttls(s: &Place<'_>, raw: &raw::V1, c: &mut Config) -> Result<(), ConfigError> {
    let ms = |given: Option<Whole<u64>>, default| Duration::from_millis(given.value_or(default));
    c.entry_attr_ttl = ms(raw.entry_attr_ttl, d::ENTRY_ATTR_TTL_MS);
    c.evictable_inode_ttl = ms(raw.evictable_inode_ttl, d::EVICTABLE_INODE_TTL_MS);
    c.ttl_check_interval = ms(raw.ttl_check_interval, d::TTL_CHECK_INTERVAL_MS);
    // The kernel may still hold an inode number for entry_attr_ttl; forgetting it
    // sooner would let the number be reused under the kernel's feet.
    if c.evictable_inode_ttl < c.entry_attr_ttl {
        return Err(s.invalid(
            "evictable_inode_ttl",
            format!(
                "must be at least entry_attr_ttl ({} ms)",
                c.entry_attr_ttl.as_millis()
            ),
        ));
    }
    if c.ttl_check_interval.is_zero() {
        return Err(s.invalid("ttl_check_interval", "must be greater than 0"));
    }
    let limit = raw.evictable_inode_limit.value_or(d::EVICTABLE_INODE_LIMIT);
    // Below a few thousand, a plain `ls -l` of one directory would drop its own entries.
    if limit < MIN_EVICTABLE_INODE_LIMIT {
        return Err(s.invalid(
            "evictable_inode_limit",
            format!("must be at least {MIN_EVICTABLE_INODE_LIMIT}"),
        ));
    }
    c.evictable_inode_limit = usize::try_from(limit).unwrap_or(usize::MAX);
    Ok(())
}

fn storage_name(storage: CacheStorage) -> &'static str {
    match storage {
        CacheStorage::Ram => "ram",
        CacheStorage::MappedFile => "mapped-file",
        CacheStorage::PerInodeFile => "per-inode-file",
        CacheStorage::Tiered => "tiered",
    }
}

/// `cache_storage`, or the deprecated `cache_backend` / `mapped_cache` pair it replaced.
fn parse_storage(
    s: &Place<'_>,
    raw: &mut raw::V1,
    warnings: &mut Vec<String>,
) -> Result<CacheStorage, ConfigError> {
    let backend = raw.cache_backend.take().value();
    let mapped = raw.mapped_cache.value();
    if let Some(text) = raw.cache_storage.take().value() {
        let storage = [
            CacheStorage::Ram,
            CacheStorage::MappedFile,
            CacheStorage::PerInodeFile,
            CacheStorage::Tiered,
        ]
        .into_iter()
        .find(|st| storage_name(*st) == text.trim())
        .ok_or_else(|| {
            s.invalid(
                "cache_storage",
                format!(
                    "unknown cache_storage {text:?}; expected ram, mapped-file, per-inode-file \
                     or tiered"
                ),
            )
        })?;
        for (key, given) in [
            ("cache_backend", backend.is_some()),
            ("mapped_cache", mapped.is_some()),
        ] {
            if given {
                warnings.push(s.warning(key, "deprecated and ignored, cache_storage is set"));
            }
        }
        return Ok(storage);
    }
    let storage = match backend.as_deref().map(str::trim) {
        Some("disk") => CacheStorage::PerInodeFile,
        Some("memory") | None if mapped == Some(false) => CacheStorage::Ram,
        Some("memory") | None => CacheStorage::MappedFile,
        Some(other) => {
            return Err(s.invalid(
                "cache_backend",
                format!("unknown cache_backend {other:?}; expected disk or memory (better: cache_storage)"),
            ));
        }
    };
    for (key, given) in [
        ("cache_backend", backend.is_some()),
        ("mapped_cache", mapped.is_some()),
    ] {
        if given {
            warnings.push(s.warning(
                key,
                &format!("deprecated; use cache_storage: {}", storage_name(storage)),
            ));
        }
    }
    Ok(storage)
}

fn parse_cache(
    s: &Place<'_>,
    raw: &mut raw::V1,
    warnings: &mut Vec<String>,
) -> Result<CacheConfig, ConfigError> {
    let storage = parse_storage(s, raw, warnings)?;
    let line_size = positive(
        s,
        "cache_line_size",
        raw.cache_line_size,
        d::CACHE_LINE_SIZE,
    )?;
    let lines = raw.cache_lines.value_or(d::CACHE_LINES);
    if lines < d::MIN_CACHE_LINES {
        return Err(s.invalid(
            "cache_lines",
            format!("must be at least {} (got {lines})", d::MIN_CACHE_LINES),
        ));
    }
    if line_size.checked_mul(lines).is_none() {
        return Err(s.invalid(
            "cache_lines",
            "cache_line_size * cache_lines overflows 64 bits",
        ));
    }
    let lines_to_prefetch = raw
        .cache_lines_to_prefetch
        .value_or(d::CACHE_LINES_TO_PREFETCH);
    // Read-ahead that fills the whole cache would evict the line being read.
    if lines_to_prefetch >= lines {
        return Err(s.invalid(
            "cache_lines_to_prefetch",
            format!("must be less than cache_lines ({lines})"),
        ));
    }
    let ram_lines = parse_ram_lines(s, raw, storage, lines, warnings)?;
    let dir_path = s.text_or("cache_dir_path", raw.cache_dir_path.take(), "")?;
    if !dir_path.is_empty() {
        check_absolute(s, "cache_dir_path", &dir_path)?;
    }
    let persistent = raw.cache_persistent.value_or(false);
    if persistent && !matches!(storage, CacheStorage::MappedFile | CacheStorage::Tiered) {
        return Err(s.invalid(
            "cache_persistent",
            format!(
                "needs cache_storage: mapped-file or tiered (lines kept across restarts live in \
                 one file, tiered's disk tier); cache_storage is {}",
                storage_name(storage)
            ),
        ));
    }
    if persistent && dir_path.is_empty() {
        return Err(s.invalid(
            "cache_persistent",
            "needs cache_dir_path: the lines outlive the process there, and the system temp \
             directory is no place to keep them",
        ));
    }
    Ok(CacheConfig {
        storage,
        line_size,
        lines,
        ram_lines,
        lines_to_prefetch,
        dir_path: (!dir_path.is_empty()).then(|| PathBuf::from(dir_path)),
        persistent,
        write_cache_promotion: raw.write_cache_promotion.value_or(d::WRITE_CACHE_PROMOTION),
    })
}

/// `cache_ram_lines`: the RAM tier of `cache_storage: tiered` (default: a quarter of
/// `cache_lines`, at least one line); ignored, with a warning, by the other storage modes.
fn parse_ram_lines(
    s: &Place<'_>,
    raw: &mut raw::V1,
    storage: CacheStorage,
    lines: u64,
    warnings: &mut Vec<String>,
) -> Result<u64, ConfigError> {
    let given = raw.cache_ram_lines.value();
    if storage != CacheStorage::Tiered {
        if given.is_some() {
            warnings.push(s.warning(
                "cache_ram_lines",
                &format!(
                    "ignored: only cache_storage: tiered has a RAM tier (cache_storage is {})",
                    storage_name(storage)
                ),
            ));
        }
        return Ok(0);
    }
    let ram_lines = given.unwrap_or((lines / 4).max(1));
    if ram_lines == 0 {
        return Err(s.invalid(
            "cache_ram_lines",
            "must be at least 1 with cache_storage: tiered",
        ));
    }
    if ram_lines.saturating_add(lines) >= u64::from(u32::MAX - 1) {
        return Err(s.invalid(
            "cache_ram_lines",
            "cache_ram_lines + cache_lines must be below 2^32 - 2",
        ));
    }
    Ok(ram_lines)
}

fn is_aistore(b: &BackendConfig) -> bool {
    matches!(
        &b.kind,
        BackendKind::S3(S3Config {
            flavor: S3Flavor::AIStore,
            ..
        })
    )
}

/// Rules that need every backend at once: unique names and manifest directories,
/// and `manifest_gen_backend` pointing at a real, different, non-AIStore backend.
fn check_backends(s: &Place<'_>, backends: &[BackendConfig]) -> Result<(), ConfigError> {
    let at = |i: usize, key: &str| format!("{}.{key}", index_path("backends", i));
    for (i, b) in backends.iter().enumerate() {
        let earlier = &backends[..i];
        if let Some(j) = earlier.iter().position(|o| o.dir_name == b.dir_name) {
            return Err(s.invalid_at(
                at(i, "dir_name"),
                format!(
                    "{:?} is already used by backends[{j}]; directory names must be unique",
                    b.dir_name
                ),
            ));
        }
        if let Some(path) = &b.manifest.path
            && let Some(j) = earlier
                .iter()
                .position(|o| o.manifest.path.as_ref() == Some(path))
        {
            return Err(s.invalid_at(
                at(i, "manifest_path"),
                format!(
                    "{} is already used by backends[{j}]; each backend needs its own manifest directory",
                    path.display()
                ),
            ));
        }
        if let BackendKind::S3(S3Config {
            aistore: Some(ais), ..
        }) = &b.kind
            && let Some(target) = &ais.manifest_gen_backend
        {
            let key = at(i, "AIStore.manifest_gen_backend");
            if *target == b.dir_name {
                return Err(s.invalid_at(key, "must name another backend, not this one"));
            }
            match backends.iter().find(|o| o.dir_name == *target) {
                None => {
                    return Err(s.invalid_at(key, format!("no backend has dir_name {target:?}")));
                }
                Some(o) if is_aistore(o) => {
                    return Err(s.invalid_at(
                        key,
                        format!("{target:?} is itself an AIStore backend; name one that lists the underlying store"),
                    ));
                }
                Some(_) => {}
            }
        }
    }
    Ok(())
}
