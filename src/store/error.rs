//! Errors of the object-store layer, shaped for the operator: each says which operation on which
//! key failed and why, never a credential.

use std::time::Duration;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("{op} {key}: no such object")]
    NotFound { op: &'static str, key: String },

    #[error("bucket {bucket} does not exist")]
    NoSuchBucket { bucket: String },

    #[error("{op} {key}: access denied ({code}): check the backend's credentials and permissions")]
    AccessDenied {
        op: &'static str,
        key: String,
        code: String,
    },

    #[error("{op} {key}: object changed while being read (expected ETag {expected})")]
    Changed {
        op: &'static str,
        key: String,
        expected: String,
    },

    #[error("{op} {key}: cannot reach {endpoint}: {message}")]
    Unreachable {
        op: &'static str,
        key: String,
        endpoint: String,
        message: String,
    },

    #[error("{op} {key}: got {got} bytes, expected {expected}: the response was cut short")]
    Truncated {
        op: &'static str,
        key: String,
        got: u64,
        expected: u64,
    },

    #[error("{op} {key}: HTTP {status} {code}: {message}")]
    Service {
        op: &'static str,
        key: String,
        status: u16,
        code: String,
        message: String,
    },

    #[error("{op} {key}: gave up after {attempts} attempts over {elapsed:?}: {last}")]
    RetriesExhausted {
        op: &'static str,
        key: String,
        attempts: u32,
        elapsed: Duration,
        last: Box<StoreError>,
    },

    #[error("{op} {key}: {source}")]
    Io {
        op: &'static str,
        key: String,
        #[source]
        source: std::io::Error,
    },

    #[error("backend setup: {0}")]
    Setup(String),
}

impl StoreError {
    /// Network failures, throttling (429), server errors (5xx) and S3's `RequestTimeout` (a 400
    /// for a request body the server waited too long for) are worth another attempt; anything
    /// else would fail the same way again.
    pub fn is_retryable(&self) -> bool {
        match self {
            StoreError::Unreachable { .. } | StoreError::Truncated { .. } => true,
            StoreError::Service { status, code, .. } => {
                *status == 429 || *status >= 500 || code == "RequestTimeout"
            }
            _ => false,
        }
    }

    /// Whether trying the same request again later, however often, must fail the same way:
    /// refused credentials, a missing bucket, a request the server rejects as malformed or too
    /// large. A commit that fails so stops retrying on its own (see the write engine).
    pub fn is_terminal(&self) -> bool {
        match self.root() {
            StoreError::AccessDenied { .. }
            | StoreError::NoSuchBucket { .. }
            | StoreError::Setup(_) => true,
            StoreError::Service { status, .. } => {
                (400..500).contains(status) && !self.root().is_retryable()
            }
            StoreError::Io { source, .. } => matches!(
                source.kind(),
                std::io::ErrorKind::ReadOnlyFilesystem | std::io::ErrorKind::PermissionDenied
            ),
            _ => false,
        }
    }

    /// A short, stable name for the kind of failure, for metric labels.
    pub fn class(&self) -> &'static str {
        match self {
            StoreError::NotFound { .. } => "not_found",
            StoreError::NoSuchBucket { .. } => "no_such_bucket",
            StoreError::AccessDenied { .. } => "access_denied",
            StoreError::Changed { .. } => "changed",
            StoreError::Unreachable { .. } => "unreachable",
            StoreError::Truncated { .. } => "truncated",
            StoreError::Service { status: 429, .. } => "throttled",
            StoreError::Service { status, .. } if *status >= 500 => "server_error",
            StoreError::Service { .. } => "client_error",
            StoreError::RetriesExhausted { last, .. } => last.class(),
            StoreError::Io { .. } => "io",
            StoreError::Setup(_) => "setup",
        }
    }

    /// The error at the root of a retry chain, for classifying what finally went wrong.
    pub fn root(&self) -> &StoreError {
        match self {
            StoreError::RetriesExhausted { last, .. } => last.root(),
            other => other,
        }
    }
}
