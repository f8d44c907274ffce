//! Errors of the line cache.
//!
//! Setting the cache up can fail ([`CacheError`], naming the path or size at fault); reading
//! through it fails only with the store's own [`StoreError`], so `fs` maps read errors to errno
//! in one place whether or not a cache sits in between.

use std::io;
use std::path::PathBuf;

use crate::store::StoreError;

#[derive(Debug, thiserror::Error)]
pub enum CacheError {
    #[error(
        "cache geometry: {lines} lines of {line_size} bytes: {reason}: lower cache_lines or cache_line_size"
    )]
    Geometry {
        line_size: u64,
        lines: u64,
        reason: &'static str,
    },

    #[error(
        "cache directory {path}: {source}: check cache_dir_path exists and is writable by msfs"
    )]
    CreateDir {
        path: PathBuf,
        #[source]
        source: io::Error,
    },

    #[error("cache file {path}: {source}: check free space and permissions under cache_dir_path")]
    CreateFile {
        path: PathBuf,
        #[source]
        source: io::Error,
    },

    #[error(
        "cache index {path}: {source}: remove the directory to start the persistent cache anew"
    )]
    Index {
        path: PathBuf,
        #[source]
        source: Box<redb::Error>,
    },

    #[error("cannot start the cache's tier mover thread: {0}")]
    Mover(#[source] io::Error),

    #[error(
        "cache memory of {bytes} bytes ({what}): {source}: lower cache_lines or cache_line_size"
    )]
    Map {
        what: String,
        bytes: usize,
        #[source]
        source: io::Error,
    },
}

/// A copy of `error` for another waiter of the same failed fetch.
///
/// `StoreError` is not `Clone` (it may hold an `io::Error`); every variant is rebuilt so that the
/// copy maps to the same errno and reads the same to the operator.
pub(super) fn duplicate(error: &StoreError) -> StoreError {
    match error {
        StoreError::NotFound { op, key } => StoreError::NotFound {
            op,
            key: key.clone(),
        },
        StoreError::NoSuchBucket { bucket } => StoreError::NoSuchBucket {
            bucket: bucket.clone(),
        },
        StoreError::AccessDenied { op, key, code } => StoreError::AccessDenied {
            op,
            key: key.clone(),
            code: code.clone(),
        },
        StoreError::Changed { op, key, expected } => StoreError::Changed {
            op,
            key: key.clone(),
            expected: expected.clone(),
        },
        StoreError::Unreachable {
            op,
            key,
            endpoint,
            message,
        } => StoreError::Unreachable {
            op,
            key: key.clone(),
            endpoint: endpoint.clone(),
            message: message.clone(),
        },
        StoreError::Truncated {
            op,
            key,
            got,
            expected,
        } => StoreError::Truncated {
            op,
            key: key.clone(),
            got: *got,
            expected: *expected,
        },
        StoreError::Service {
            op,
            key,
            status,
            code,
            message,
        } => StoreError::Service {
            op,
            key: key.clone(),
            status: *status,
            code: code.clone(),
            message: message.clone(),
        },
        StoreError::RetriesExhausted {
            op,
            key,
            attempts,
            elapsed,
            last,
        } => StoreError::RetriesExhausted {
            op,
            key: key.clone(),
            attempts: *attempts,
            elapsed: *elapsed,
            last: Box::new(duplicate(last)),
        },
        StoreError::Io { op, key, source } => StoreError::Io {
            op,
            key: key.clone(),
            source: duplicate_io(source),
        },
        StoreError::Setup(message) => StoreError::Setup(message.clone()),
    }
}

fn duplicate_io(error: &io::Error) -> io::Error {
    match error.raw_os_error() {
        Some(code) => io::Error::from_raw_os_error(code),
        None => io::Error::new(error.kind(), error.to_string()),
    }
}

/// The error for a cache-side I/O failure on `key`'s bytes (a failed write into, or read out of,
/// the cache's own storage).
pub(super) fn storage_error(op: &'static str, key: &str, source: io::Error) -> StoreError {
    StoreError::Io {
        op,
        key: key.to_string(),
        source,
    }
}
