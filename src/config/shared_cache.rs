//! The `shared_cache` section: the bucket every node's msfs reads lines from and fills, shaped
//! like a backend's S3 part (`bucket_container_name`, `prefix`, `S3:`), plus its time budget
//! and fill bounds.

use std::time::Duration;

use super::backend::{check_prefix, parse_s3, positive};
use super::defaults as d;
use super::error::ConfigError;
use super::raw;
use super::reader::Place;
use super::scalar::OptScalar;
use super::types::{BackendConfig, BackendKind, SharedCacheConfig};

/// Beyond this a slow shared cache costs a reader more than most origins would.
const MAX_READ_TIMEOUT_MS: u64 = 10_000;

pub(super) fn parse_shared_cache(
    raw: raw::SharedCache,
    s: &Place<'_>,
    backends: &[BackendConfig],
    line_size: u64,
    warnings: &mut Vec<String>,
) -> Result<SharedCacheConfig, ConfigError> {
    let bucket = s.required("bucket_container_name", raw.bucket_container_name)?;
    if bucket.len() < 3 {
        return Err(s.invalid(
            "bucket_container_name",
            format!("{bucket:?}: an S3 bucket name has at least 3 characters"),
        ));
    }
    let prefix = s.text_or("prefix", raw.prefix, "")?;
    check_prefix(s, "prefix", &prefix)?;
    let raw_s3 = raw.s3.value().unwrap_or_default();
    for (key, given) in [
        ("retry_base_delay", raw_s3.retry_base_delay.is_some()),
        (
            "retry_next_delay_multiplier",
            raw_s3.retry_next_delay_multiplier.is_some(),
        ),
        ("retry_max_delay", raw_s3.retry_max_delay.is_some()),
    ] {
        if given {
            return Err(s.child("S3").invalid(
                key,
                "the shared cache never retries: a failed read goes to the origin at once and \
                 a failed fill is dropped; remove the key",
            ));
        }
    }
    let mut s3 = parse_s3(raw_s3, &s.child("S3"), warnings)?;
    // One attempt (see above).
    s3.retry.base_delay = Duration::ZERO;
    let read_timeout_ms = positive(
        s,
        "read_timeout_ms",
        raw.read_timeout_ms,
        d::SHARED_CACHE_READ_TIMEOUT_MS,
    )?;
    if read_timeout_ms > MAX_READ_TIMEOUT_MS {
        return Err(s.invalid(
            "read_timeout_ms",
            format!(
                "must be at most {MAX_READ_TIMEOUT_MS}: the shared cache must answer well \
                 before the origin would"
            ),
        ));
    }
    let fill_workers = positive(
        s,
        "fill_workers",
        raw.fill_workers,
        d::SHARED_CACHE_FILL_WORKERS,
    )?;
    let fill_buffer_limit_bytes = raw
        .fill_buffer_limit_bytes
        .value_or(d::SHARED_CACHE_FILL_BUFFER_LIMIT_BYTES);
    // Smaller than one line, every fill would be dropped: a shared cache that is never filled.
    if fill_buffer_limit_bytes < line_size {
        return Err(s.invalid(
            "fill_buffer_limit_bytes",
            format!("must be at least cache_line_size ({line_size}): no line would ever be filled"),
        ));
    }
    // Shared lines inside a backend's prefix would show up in the mount as files.
    for backend in backends {
        if let BackendKind::S3(origin) = &backend.kind
            && origin.endpoint == s3.endpoint
            && backend.bucket == bucket
            && (prefix.starts_with(&backend.prefix) || backend.prefix.starts_with(&prefix))
        {
            return Err(s.invalid(
                "prefix",
                format!(
                    "{prefix:?} in bucket {bucket:?} overlaps backend {:?} (prefix {:?}): the \
                     shared lines would appear in the mount; give the shared cache its own \
                     bucket or a prefix outside every backend's",
                    backend.dir_name, backend.prefix
                ),
            ));
        }
    }
    Ok(SharedCacheConfig {
        bucket,
        prefix,
        s3,
        read_timeout: Duration::from_millis(read_timeout_ms),
        fill_workers,
        fill_buffer_limit_bytes,
    })
}
