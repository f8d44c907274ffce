//! The CSI module's one error type, and its one mapping to a gRPC status.
//!
//! Messages name the request field, volume attribute or backend at fault and never carry a
//! secret: credentials only ever travel inside `config::Secret`.

use std::path::PathBuf;

use tonic::{Code, Status};

use crate::store::StoreError;

#[derive(Debug, thiserror::Error)]
pub enum CsiError {
    /// A request field or volume attribute is missing or malformed (`field` names it).
    #[error("{field}: {message}")]
    InvalidArgument { field: String, message: String },
    /// The target is already published with different arguments.
    #[error("{0}")]
    AlreadyExists(String),
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    ResourceExhausted(String),
    /// The request conflicts with the node's state (a single-writer volume published elsewhere).
    #[error("{0}")]
    FailedPrecondition(String),
    /// A backend failed its publish-time check (LIST of its bucket and prefix).
    #[error("backend {dir_name}: {source}")]
    Backend {
        dir_name: String,
        #[source]
        source: StoreError,
    },
    /// STS refused or could not be reached while getting the volume's credentials.
    #[error("{action} for role {role_arn}: {message}")]
    Sts {
        action: &'static str,
        role_arn: String,
        message: String,
        denied: bool,
    },
    /// Written files of the volume could not be committed at unpublish.
    #[error(
        "written files of volume {volume_id} could not be committed yet ({detail}); they are \
         kept and retried, and the volume stays mounted until they land"
    )]
    WritesPending { volume_id: String, detail: String },
    /// The Kubernetes API refused (`denied`) or could not answer the lookup of the pod's
    /// ServiceAccount, for `authenticationSource: pod` without `roleArn`.
    #[error("ServiceAccount {namespace}/{name}: {message}")]
    ServiceAccountLookup {
        namespace: String,
        name: String,
        message: String,
        denied: bool,
    },
    #[error("{what} {}: {source}", path.display())]
    Io {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{0}")]
    Internal(String),
}

impl CsiError {
    pub fn invalid(field: impl Into<String>, message: impl Into<String>) -> CsiError {
        CsiError::InvalidArgument {
            field: field.into(),
            message: message.into(),
        }
    }

    fn code(&self) -> Code {
        match self {
            CsiError::InvalidArgument { .. } => Code::InvalidArgument,
            CsiError::AlreadyExists(_) => Code::AlreadyExists,
            CsiError::NotFound(_) => Code::NotFound,
            CsiError::ResourceExhausted(_) => Code::ResourceExhausted,
            CsiError::FailedPrecondition(_) => Code::FailedPrecondition,
            CsiError::WritesPending { .. } => Code::Unavailable,
            CsiError::Backend { source, .. } => store_code(source),
            CsiError::Sts { denied: true, .. } => Code::PermissionDenied,
            CsiError::Sts { .. } => Code::Unavailable,
            CsiError::ServiceAccountLookup { denied: true, .. } => Code::PermissionDenied,
            CsiError::ServiceAccountLookup { .. } => Code::Unavailable,
            CsiError::Io { .. } | CsiError::Internal(_) => Code::Internal,
        }
    }
}

/// A failed backend check, by what the operator has to fix.
fn store_code(error: &StoreError) -> Code {
    match error {
        StoreError::NoSuchBucket { .. } | StoreError::NotFound { .. } => Code::NotFound,
        StoreError::AccessDenied { .. } => Code::PermissionDenied,
        StoreError::Service { status: 403, .. } => Code::PermissionDenied,
        StoreError::Service { status: 400, .. } | StoreError::Setup(_) => Code::InvalidArgument,
        StoreError::RetriesExhausted { last, .. } => store_code(last),
        _ => Code::Unavailable,
    }
}

impl From<CsiError> for Status {
    fn from(error: CsiError) -> Status {
        Status::new(error.code(), error.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backend_failures_map_to_what_the_operator_must_fix() {
        let backend = |source| CsiError::Backend {
            dir_name: "v".into(),
            source,
        };
        let missing = backend(StoreError::NoSuchBucket { bucket: "b".into() });
        assert_eq!(Status::from(missing).code(), Code::NotFound);
        let denied = backend(StoreError::AccessDenied {
            op: "list",
            key: "".into(),
            code: "AccessDenied".into(),
        });
        assert_eq!(Status::from(denied).code(), Code::PermissionDenied);
        let down = backend(StoreError::Unreachable {
            op: "list",
            key: "".into(),
            endpoint: "http://x".into(),
            message: "refused".into(),
        });
        assert_eq!(Status::from(down).code(), Code::Unavailable);
    }
}
