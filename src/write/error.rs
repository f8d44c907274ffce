//! Errors of the write engine.

use std::path::PathBuf;

use crate::store::StoreError;

use super::file::Target;

#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    #[error("cannot create the write spill directory {path}: {source}; check cache_dir_path")]
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
    #[error("local spill file: {source}; check free space under cache_dir_path")]
    Spill {
        #[source]
        source: std::io::Error,
    },
    #[error("the spill file of a file being written is gone")]
    SpillGone,
    #[error("a write of {len} bytes at {offset} is past the largest file size")]
    TooLarge { offset: u64, len: u64 },
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
    pub(super) fn store(target: &Target, source: StoreError) -> WriteError {
        WriteError::Store {
            backend: target.backend.clone(),
            source,
        }
    }
}
