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

/// Error codes the AWS SDK takes as throttling, whatever the HTTP status: aws-runtime's
/// `retries::classifiers::THROTTLING_ERRORS` (aws-runtime 1.10).
const THROTTLING_CODES: &[&str] = &[
    "Throttling",
    "ThrottlingException",
    "ThrottledException",
    "RequestThrottledException",
    "TooManyRequestsException",
    "ProvisionedThroughputExceededException",
    "TransactionInProgressException",
    "RequestLimitExceeded",
    "BandwidthLimitExceeded",
    "LimitExceededException",
    "RequestThrottled",
    "SlowDown",
    "PriorRequestNotComplete",
    "EC2ThrottledException",
];

/// Error codes the SDK takes as transient, whatever the HTTP status: aws-runtime's
/// `TRANSIENT_ERRORS` plus `InternalError`, which aws-sdk-s3 adds for every S3 operation (S3
/// may send it in a 200 answer to `CompleteMultipartUpload` or `CopyObject`).
const TRANSIENT_CODES: &[&str] = &["RequestTimeout", "RequestTimeoutException", "InternalError"];

/// HTTP statuses the SDK takes as transient: aws-smithy-runtime's `HttpStatusCodeClassifier`
/// default (`TRANSIENT_ERROR_STATUS_CODES`, aws-smithy-runtime 1.16).
const TRANSIENT_STATUSES: &[u16] = &[500, 502, 503, 504];

/// Why a failure is worth another attempt, which is also what the retry costs (see
/// `RetryBudget`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RetryKind {
    /// The server asks for fewer requests.
    Throttling,
    /// The network, a timeout, or a server error that a later attempt may not meet.
    Transient,
}

impl StoreError {
    /// Whether another attempt may succeed, and why. The list is the AWS SDK's (its retry
    /// classifiers, whose retry loop is off, see `store::retry`):
    ///
    /// - throttling: the codes of `THROTTLING_CODES` (`SlowDown`, `Throttling`,
    ///   `RequestLimitExceeded`, `TooManyRequestsException`…), and HTTP 429 whatever its code,
    ///   which the SDK does not match on but S3-compatible servers send for the same reason;
    /// - transient: network failures, timeouts and responses cut short (the SDK's
    ///   `TransientErrorClassifier`: response, timeout and connector I/O errors, all
    ///   `Unreachable` or `Truncated` here), the codes `RequestTimeout`,
    ///   `RequestTimeoutException` and `InternalError`, and HTTP 500, 502, 503 and 504.
    ///
    /// Anything else, any other 4xx or 5xx (501 `NotImplemented`…) included, would fail the same
    /// way again. (The SDK also retries `RequestTimeTooSkewed` after correcting its clock; msfs
    /// does not correct it, so that stays final.)
    pub fn retry_kind(&self) -> Option<RetryKind> {
        match self {
            StoreError::Unreachable { .. } | StoreError::Truncated { .. } => {
                Some(RetryKind::Transient)
            }
            StoreError::Service { status, code, .. } => {
                if *status == 429 || THROTTLING_CODES.contains(&code.as_str()) {
                    Some(RetryKind::Throttling)
                } else if TRANSIENT_CODES.contains(&code.as_str())
                    || TRANSIENT_STATUSES.contains(status)
                {
                    Some(RetryKind::Transient)
                } else {
                    None
                }
            }
            _ => None,
        }
    }

    /// Whether another attempt may succeed: see [`StoreError::retry_kind`].
    pub fn is_retryable(&self) -> bool {
        self.retry_kind().is_some()
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
