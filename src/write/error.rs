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
    #[error(
        "{key}: the unsaved writes a killed msfs process left cannot be committed: the object \
         they were made over (ETag {base}) was changed by another writer ({}), and the bytes \
         they did not change came from that version. They are kept locally, not committed over \
         the other version; rewrite the whole file to commit it, or delete it",
        describe_current(.current)
    )]
    BaseReplaced {
        key: String,
        base: String,
        /// The object's ETag now; `None` when it is gone.
        current: Option<String>,
    },
    #[error(
        "{key}: another writer replaced the object while msfs was committing changes made over \
         its version {base}. The bytes this file did not change would have come from the other \
         version, so nothing was committed: the changes are kept locally. Rewrite the whole file \
         to commit it, or delete it"
    )]
    Conflict { key: String, base: String },
    #[error("an earlier background commit failed: {message}")]
    EarlierCommitFailed { message: String },
}

impl WriteError {
    /// Whether the commit that failed so would fail the same way however often it is retried
    /// (see `StoreError::is_terminal`): it stops retrying on its own and keeps the data.
    pub fn is_terminal(&self) -> bool {
        match self {
            WriteError::Store { source, .. } => source.is_terminal(),
            WriteError::TooLarge { .. }
            | WriteError::Internal(_)
            | WriteError::BaseReplaced { .. }
            | WriteError::Conflict { .. } => true,
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

fn describe_current(current: &Option<String>) -> String {
    match current {
        Some(etag) => format!("now ETag {etag}"),
        None => "deleted".to_string(),
    }
}
