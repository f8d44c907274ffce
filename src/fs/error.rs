//! Errors of the filesystem layer and their one mapping to errno.

use crate::store::StoreError;

#[derive(Debug, thiserror::Error)]
pub enum FsError {
    #[error("no such file or directory")]
    NotFound,
    #[error("not a directory")]
    NotADirectory,
    #[error("is a directory")]
    IsADirectory,
    #[error("backend {backend} is read-only")]
    ReadOnly { backend: String },
    #[error("operation not supported by msfs yet: {0}")]
    Unsupported(&'static str),
    #[error("unknown handle {0}")]
    BadHandle(u64),
    #[error("unknown inode {0}")]
    UnknownInode(u64),
    #[error("backend {backend}: {source}")]
    Store {
        backend: String,
        #[source]
        source: StoreError,
    },
}

impl FsError {
    /// The errno the kernel hands to the application. The only place errors become numbers.
    pub fn errno(&self) -> i32 {
        match self {
            FsError::NotFound => libc::ENOENT,
            FsError::NotADirectory => libc::ENOTDIR,
            FsError::IsADirectory => libc::EISDIR,
            FsError::ReadOnly { .. } => libc::EROFS,
            FsError::Unsupported(_) => libc::ENOSYS,
            FsError::BadHandle(_) => libc::EBADF,
            FsError::UnknownInode(_) => libc::ESTALE,
            FsError::Store { source, .. } => match source.root() {
                StoreError::NotFound { .. } => libc::ENOENT,
                StoreError::AccessDenied { .. } => libc::EACCES,
                // The object was replaced under an open handle: the handle's version is gone.
                StoreError::Changed { .. } => libc::ESTALE,
                StoreError::Unreachable { .. } => libc::EIO,
                _ => libc::EIO,
            },
        }
    }
}
