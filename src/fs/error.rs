//! Errors of the filesystem layer and their one mapping to errno.

use crate::manifest::namespace::ManifestError;
use crate::store::StoreError;
use crate::write::WriteError;

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
    #[error(transparent)]
    Write(#[from] WriteError),
    #[error("backend {backend}: {source}")]
    Manifest {
        backend: String,
        #[source]
        source: ManifestError,
    },
    #[error("file exists")]
    Exists,
    #[error("directory not empty")]
    NotEmpty,
    #[error("name longer than 255 bytes")]
    NameTooLong,
    #[error("invalid argument: {0}")]
    Invalid(&'static str),
    #[error("not permitted: {0}")]
    NotPermitted(&'static str),
    /// Moving across backends, or a non-empty directory: tools like `mv` then copy and delete.
    #[error("cannot rename {0}")]
    CrossDevice(&'static str),
    #[error("busy: {0}")]
    Busy(&'static str),
    #[error("not opened for writing")]
    NotWritable,
    /// An open the kernel could not serve beside the inode's passthrough handles (a writer, or
    /// a newer version): the inode's name now leads to a new inode, and the kernel, told the
    /// old one is stale, looks the name up again and opens that (see `passthrough`).
    #[error(
        "inode {0} is read by the kernel from a cache file that this open cannot share; its name \
         now leads to a new inode"
    )]
    Superseded(u64),
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
            FsError::Store { source, .. } => store_errno(source),
            FsError::Write(e) => match e {
                WriteError::Store { source, .. } => store_errno(source),
                WriteError::Spill { source } | WriteError::SpillDir { source, .. }
                    if source.kind() == std::io::ErrorKind::StorageFull =>
                {
                    libc::ENOSPC
                }
                // The local spill filesystem's own limit (ext4: 16 TiB) can be below the store's.
                WriteError::Spill { source }
                    if source.kind() == std::io::ErrorKind::FileTooLarge =>
                {
                    libc::EFBIG
                }
                WriteError::TooLarge { .. } => libc::EFBIG,
                WriteError::Deleted => libc::ENOENT,
                // Includes a failed earlier commit reported to fsync: the data is kept and
                // retried, but the application must learn that it did not land when it should.
                _ => libc::EIO,
            },
            // The manifest's local files are unreadable: nothing the application can fix.
            FsError::Manifest { .. } => libc::EIO,
            FsError::Exists => libc::EEXIST,
            FsError::NotEmpty => libc::ENOTEMPTY,
            FsError::NameTooLong => libc::ENAMETOOLONG,
            FsError::Invalid(_) => libc::EINVAL,
            FsError::NotPermitted(_) => libc::EPERM,
            FsError::CrossDevice(_) => libc::EXDEV,
            FsError::Busy(_) => libc::EBUSY,
            FsError::NotWritable => libc::EBADF,
            FsError::Superseded(_) => libc::ESTALE,
        }
    }

    /// Whether this is a failure of the store, the local disk or msfs itself, which someone
    /// may have to look at (EIO, ESTALE, ETIMEDOUT, ENOSPC, EBADF), rather than the answer to
    /// what the request asked: no such name, it exists, not empty, read-only, refused by the
    /// store's permissions, too long, not supported. Decided by the errno the application
    /// sees, so that one errno is always logged alike.
    pub fn is_failure(&self) -> bool {
        matches!(
            self.errno(),
            libc::EIO | libc::ESTALE | libc::ETIMEDOUT | libc::ENOSPC | libc::EBADF
        )
    }
}

/// The symbolic name of `errno` (`"ENOENT"`), for logs and metric labels: every errno msfs
/// answers with has one; any other is `"other"`.
pub fn errno_name(errno: i32) -> &'static str {
    match errno {
        libc::EPERM => "EPERM",
        libc::ENOENT => "ENOENT",
        libc::EIO => "EIO",
        libc::EBADF => "EBADF",
        libc::EACCES => "EACCES",
        libc::EBUSY => "EBUSY",
        libc::EEXIST => "EEXIST",
        libc::EXDEV => "EXDEV",
        libc::ENOTDIR => "ENOTDIR",
        libc::EISDIR => "EISDIR",
        libc::EINVAL => "EINVAL",
        libc::EFBIG => "EFBIG",
        libc::ENOSPC => "ENOSPC",
        libc::EROFS => "EROFS",
        libc::ENAMETOOLONG => "ENAMETOOLONG",
        libc::ENOSYS => "ENOSYS",
        libc::ENOTEMPTY => "ENOTEMPTY",
        libc::ETIMEDOUT => "ETIMEDOUT",
        libc::ESTALE => "ESTALE",
        _ => "other",
    }
}

fn store_errno(source: &StoreError) -> i32 {
    match source.root() {
        StoreError::NotFound { .. } => libc::ENOENT,
        StoreError::AccessDenied { .. } => libc::EACCES,
        // The object was replaced under an open handle: the handle's version is gone.
        StoreError::Changed { .. } => libc::ESTALE,
        // A full store (a bounded RAM backend, a full disk under a file backend) and a store that
        // refuses writes by nature (PSEUDO, a read-only file backend) say so in the error's kind.
        StoreError::Io { source, .. } => match source.kind() {
            std::io::ErrorKind::StorageFull => libc::ENOSPC,
            std::io::ErrorKind::ReadOnlyFilesystem => libc::EROFS,
            _ => libc::EIO,
        },
        _ => libc::EIO,
    }
}
