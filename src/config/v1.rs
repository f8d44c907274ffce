//! The `msfs_version: 1` format: process-wide keys, the cache, telemetry and the
//! `backends` list, plus the checks that span several backends.

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::Ids;
use super::backend::{check_absolute, check_url, parse_backend};
use super::defaults as d;
use super::error::ConfigError;
use super::reader::{Section, index_path};
use super::telemetry::parse_telemetry;
use super::types::{
    BackendConfig, BackendKind, CacheConfig, CacheStorage, Config, S3Config, S3Flavor,
};

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
        max_write: d::MAX_WRITE,
        entry_attr_ttl: Duration::from_millis(d::ENTRY_ATTR_TTL_MS),
        evictable_inode_ttl: Duration::from_millis(d::EVICTABLE_INODE_TTL_MS),
        virtual_dir_ttl: Duration::from_millis(d::VIRTUAL_DIR_TTL_MS),
        virtual_file_ttl: Duration::from_millis(d::VIRTUAL_FILE_TTL_MS),
        ttl_check_interval: Duration::from_millis(d::TTL_CHECK_INTERVAL_MS),
        cache: CacheConfig {
            storage: CacheStorage::MappedFile,
            line_size: d::CACHE_LINE_SIZE,
            lines: d::CACHE_LINES,
            lines_to_prefetch: d::CACHE_LINES_TO_PREFETCH,
            dir_path: None,
            write_cache_promotion: d::WRITE_CACHE_PROMOTION,
        },
        multipart_upload_threshold_bytes: d::MULTIPART_UPLOAD_THRESHOLD_BYTES,
        write_commit_workers: d::WRITE_COMMIT_WORKERS,
        write_dirty_limit_bytes: d::WRITE_DIRTY_LIMIT_BYTES,
        write_buffer_limit_bytes: d::WRITE_BUFFER_LIMIT_BYTES,
        process_memory_limit: d::PROCESS_MEMORY_LIMIT,
        auto_sighup_interval: None,
        fuse_request_stall_warn: seconds(d::FUSE_REQUEST_STALL_WARN_SECS),
        metrics_endpoint: None,
        telemetry: None,
        backends: Vec::new(),
    }
}

pub(super) fn parse_v1(
    mut s: Section<'_>,
    ids: Ids,
    warnings: &mut Vec<String>,
) -> Result<Config, ConfigError> {
    let mut c = config_defaults(s.source(), ids);
    c.mountname = s.str_or("mountname", d::MOUNTNAME)?;
    check_mountname(&s, "mountname", &c.mountname)?;
    c.mountpoint = PathBuf::from(s.str_or("mountpoint", d::MOUNTPOINT)?);
    c.fuse_workers = s.int_or("fuse_workers", d::FUSE_WORKERS)?;
    c.uid = s.int_or("uid", ids.uid)?;
    c.gid = s.int_or("gid", ids.gid)?;
    c.dir_perm = s.perm_or("dir_perm", d::ROOT_DIR_PERM)?;
    c.allow_other = s.bool_or("allow_other", d::ALLOW_OTHER)?;
    c.max_write = s.int_or("max_write", d::MAX_WRITE)?;
    if c.max_write < 4096 {
        return Err(s.invalid("max_write", "must be at least 4096 (one page)"));
    }
    parse_ttls(&mut s, &mut c)?;
    c.cache = parse_cache(&mut s, warnings)?;
    c.multipart_upload_threshold_bytes = s.int_or(
        "multipart_upload_threshold_bytes",
        d::MULTIPART_UPLOAD_THRESHOLD_BYTES,
    )?;
    if c.multipart_upload_threshold_bytes > d::MAX_SINGLE_PUT_BYTES {
        return Err(s.invalid(
            "multipart_upload_threshold_bytes",
            "must be at most 5368709120 (5 GiB), the largest object S3 accepts in a single PUT",
        ));
    }
    c.write_commit_workers = s.int_or("write_commit_workers", d::WRITE_COMMIT_WORKERS)?;
    if c.write_commit_workers == 0 {
        return Err(s.invalid("write_commit_workers", "must be at least 1"));
    }
    c.write_dirty_limit_bytes = s.int_or("write_dirty_limit_bytes", d::WRITE_DIRTY_LIMIT_BYTES)?;
    if c.write_dirty_limit_bytes < d::MIN_WRITE_DIRTY_LIMIT_BYTES {
        return Err(s.invalid(
            "write_dirty_limit_bytes",
            "must be at least 67108864 (64 MiB)",
        ));
    }
    c.write_buffer_limit_bytes =
        s.int_or("write_buffer_limit_bytes", d::WRITE_BUFFER_LIMIT_BYTES)?;
    if c.write_buffer_limit_bytes < d::MIN_WRITE_BUFFER_LIMIT_BYTES {
        return Err(s.invalid(
            "write_buffer_limit_bytes",
            "must be at least 2097152 (2 MiB)",
        ));
    }
    c.process_memory_limit = s.int_or("process_memory_limit", d::PROCESS_MEMORY_LIMIT)?;
    c.auto_sighup_interval =
        seconds(s.int_or("auto_sighup_interval", d::AUTO_SIGHUP_INTERVAL_SECS)?);
    c.fuse_request_stall_warn = seconds(s.int_or(
        "fuse_request_stall_warn_secs",
        d::FUSE_REQUEST_STALL_WARN_SECS,
    )?);
    let endpoint = s.str_or("endpoint", "")?;
    if !endpoint.is_empty() {
        check_url(&s, "endpoint", &endpoint)?;
        c.metrics_endpoint = Some(endpoint);
    }
    if let Some(otel) = s.opt_section("opentelemetry")? {
        c.telemetry = parse_telemetry(otel, warnings)?;
    }

    for (path, value) in s.opt_list("backends")?.unwrap_or_default() {
        let mut item = s.item(path, value)?;
        c.backends.push(parse_backend(&mut item, ids, warnings)?);
        item.finish(warnings);
    }
    check_backends(&s, &c.backends)?;
    if c.backends.is_empty() {
        warnings.push(s.warning(
            "backends",
            "no backends configured; the mount will be empty",
        ));
    }
    s.legacy(LEGACY_TOP_LEVEL, warnings);
    s.finish(warnings);
    Ok(c)
}

/// 0 means "off" for the periodic reload and the stall watchdog.
pub(super) fn seconds(secs: u64) -> Option<Duration> {
    (secs > 0).then(|| Duration::from_secs(secs))
}

/// The name goes into the `fsname=` mount option, where a comma would start a new option.
pub(super) fn check_mountname(s: &Section<'_>, key: &str, name: &str) -> Result<(), ConfigError> {
    if name.is_empty() || name.contains(',') || name.contains('\0') {
        Err(s.invalid(
            key,
            format!("{name:?} must be non-empty and contain no comma"),
        ))
    } else {
        Ok(())
    }
}

fn parse_ttls(s: &mut Section<'_>, c: &mut Config) -> Result<(), ConfigError> {
    c.entry_attr_ttl = s.ms_or("entry_attr_ttl", d::ENTRY_ATTR_TTL_MS)?;
    c.evictable_inode_ttl = s.ms_or("evictable_inode_ttl", d::EVICTABLE_INODE_TTL_MS)?;
    c.virtual_dir_ttl = s.ms_or("virtual_dir_ttl", d::VIRTUAL_DIR_TTL_MS)?;
    c.virtual_file_ttl = s.ms_or("virtual_file_ttl", d::VIRTUAL_FILE_TTL_MS)?;
    c.ttl_check_interval = s.ms_or("ttl_check_interval", d::TTL_CHECK_INTERVAL_MS)?;
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
    for (key, ttl) in [
        ("virtual_dir_ttl", c.virtual_dir_ttl),
        ("virtual_file_ttl", c.virtual_file_ttl),
    ] {
        if ttl < c.evictable_inode_ttl {
            return Err(s.invalid(
                key,
                format!(
                    "must be at least evictable_inode_ttl ({} ms)",
                    c.evictable_inode_ttl.as_millis()
                ),
            ));
        }
    }
    if c.ttl_check_interval.is_zero() {
        return Err(s.invalid("ttl_check_interval", "must be greater than 0"));
    }
    Ok(())
}

fn storage_name(storage: CacheStorage) -> &'static str {
    match storage {
        CacheStorage::Ram => "ram",
        CacheStorage::MappedFile => "mapped-file",
        CacheStorage::PerInodeFile => "per-inode-file",
    }
}

/// `cache_storage`, or the deprecated `cache_backend` / `mapped_cache` pair it replaced.
fn parse_storage(
    s: &mut Section<'_>,
    warnings: &mut Vec<String>,
) -> Result<CacheStorage, ConfigError> {
    if let Some(text) = s.opt_str("cache_storage")? {
        let storage = [
            CacheStorage::Ram,
            CacheStorage::MappedFile,
            CacheStorage::PerInodeFile,
        ]
        .into_iter()
        .find(|st| storage_name(*st) == text.trim())
        .ok_or_else(|| {
            s.invalid(
                "cache_storage",
                format!(
                    "unknown cache_storage {text:?}; expected ram, mapped-file or per-inode-file"
                ),
            )
        })?;
        for key in ["cache_backend", "mapped_cache"] {
            if s.has(key) {
                s.ignore(key);
                warnings.push(s.warning(key, "deprecated and ignored, cache_storage is set"));
            }
        }
        return Ok(storage);
    }
    let mapped = s.opt_bool("mapped_cache")?;
    let backend = s.opt_str("cache_backend")?;
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
    s: &mut Section<'_>,
    warnings: &mut Vec<String>,
) -> Result<CacheConfig, ConfigError> {
    let storage = parse_storage(s, warnings)?;
    let line_size = s.int_or("cache_line_size", d::CACHE_LINE_SIZE)?;
    if line_size == 0 {
        return Err(s.invalid("cache_line_size", "must be greater than 0"));
    }
    let lines = s.int_or("cache_lines", d::CACHE_LINES)?;
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
    let lines_to_prefetch = s.int_or("cache_lines_to_prefetch", d::CACHE_LINES_TO_PREFETCH)?;
    // Read-ahead that fills the whole cache would evict the line being read.
    if lines_to_prefetch >= lines {
        return Err(s.invalid(
            "cache_lines_to_prefetch",
            format!("must be less than cache_lines ({lines})"),
        ));
    }
    let dir_path = s.str_or("cache_dir_path", "")?;
    if !dir_path.is_empty() {
        check_absolute(s, "cache_dir_path", &dir_path)?;
    }
    Ok(CacheConfig {
        storage,
        line_size,
        lines,
        lines_to_prefetch,
        dir_path: (!dir_path.is_empty()).then(|| PathBuf::from(dir_path)),
        write_cache_promotion: s.bool_or("write_cache_promotion", d::WRITE_CACHE_PROMOTION)?,
    })
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
fn check_backends(s: &Section<'_>, backends: &[BackendConfig]) -> Result<(), ConfigError> {
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
