//! Errors of the write engine.

use std::path::PathBuf;

use crate::store::StoreError;

use super::file::Target;

#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    #[error(
        "cannot create the write spill directory {path}: {source}; check cache_dir_path (or the \
         CSI plugin's --state-dir)"
    )]
    SpillDir {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "cannot create the upload journal directory {path}: {source}; check cache_dir_path (or \
         the CSI plugin's --state-dir)"
    )]
    JournalDir {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The source names the file (the spill file or its log).
    #[error(
        "local spill file: {source}; check free space under cache_dir_path (or the CSI \
         plugin's --state-dir)"
    )]
    Spill {
        #[source]
        source: std::io::Error,
    },
    #[error("the spill file of a file being written is gone")]
    SpillGone,
    #[error(
        "a file of {size} bytes is past the largest object this backend can hold ({max} bytes)"
    )]
    TooLarge { size: u64, max: u64 },
    #[error("backend {backend}: {source}")]
    Store {
        backend: String,
        #[source]
        source: StoreError,
    },
    #[error("the file was deleted while being committed")]
    Deleted,
    #[error("internal error in the write engine: {0}")]
    Internal(&'static str),
    #[error("an earlier background commit failed: {message}")]
    EarlierCommitFailed { message: String },
}

impl WriteError {
    /// Whether the commit that failed so would fail the same way however often it is retried
    /// (see `StoreError::is_terminal`): it stops retrying on its own and keeps the data.
    pub fn is_terminal(&self) -> bool {
        match self {
            WriteError::Store { source, .. } => source.is_terminal(),
            WriteError::TooLarge { .. } | WriteError::Internal(_) => true,
            _ => false,
        }
    }

    pub(super) fn store(target: &Target, source: StoreError) -> WriteError {
        WriteError::Store {
            backend: target.backend.clone(),
            source,
        }
    }
}
