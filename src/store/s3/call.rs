//! How `S3Store` sends a request: under the store's retry policy, each failure classified into a
//! `StoreError` (whose `is_retryable` the policy asks), a 412 to a conditional request read as the
//! object having changed, a streamed body's own read error put before the transport's.

use std::future::Future;
use std::sync::PoisonError;

use aws_sdk_s3::config::http::HttpResponse;
use aws_sdk_s3::error::{DisplayErrorContext, ProvideErrorMetadata, SdkError};

use super::super::body::ProducerError;
use super::super::{Result, StoreError};
use super::S3Store;

impl S3Store {
    /// One request, sent again under the store's retry policy while it fails retryably, each
    /// failure classified (`classify`) as `op` on `key`: the shape of every call but the
    /// streamed ones (whose body's own read errors come first) and ranged GETs (whose body is
    /// read inside the attempt).
    pub(super) async fn call<T, E, Fut>(
        &self,
        op: &'static str,
        key: &str,
        send: impl Fn() -> Fut,
    ) -> Result<T>
    where
        Fut: Future<Output = std::result::Result<T, SdkError<E, HttpResponse>>>,
        E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
    {
        self.call_refined(op, key, send, |e| e).await
    }

    /// [`S3Store::call`], each classified failure refined by `refine` before the retry policy
    /// judges it (a 412 to a conditional request is a `Changed`, which no retry resolves).
    pub(super) async fn call_refined<T, E, Fut>(
        &self,
        op: &'static str,
        key: &str,
        send: impl Fn() -> Fut,
        refine: impl Fn(StoreError) -> StoreError,
    ) -> Result<T>
    where
        Fut: Future<Output = std::result::Result<T, SdkError<E, HttpResponse>>>,
        E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
    {
        self.retry
            .run(op, key, || async {
                send().await.map_err(|e| refine(self.classify(op, key, e)))
            })
            .await
    }

    pub(super) fn classify<E>(
        &self,
        op: &'static str,
        key: &str,
        err: SdkError<E, HttpResponse>,
    ) -> StoreError
    where
        E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
    {
        let key = key.to_string();
        match &err {
            SdkError::ServiceError(ctx) => {
                let status = ctx.raw().status().as_u16();
                let code = ctx.err().code().unwrap_or_default().to_string();
                let message = ctx.err().message().unwrap_or_default().to_string();
                match (status, code.as_str()) {
                    (_, "NoSuchBucket") => StoreError::NoSuchBucket {
                        bucket: self.bucket.clone(),
                    },
                    (404, _) => StoreError::NotFound { op, key },
                    (401 | 403, _) => StoreError::AccessDenied {
                        op,
                        key,
                        code: if code.is_empty() {
                            format!("HTTP {status}")
                        } else {
                            code
                        },
                    },
                    _ => StoreError::Service {
                        op,
                        key,
                        status,
                        code,
                        message,
                    },
                }
            }
            SdkError::ConstructionFailure(_) => {
                StoreError::Setup(format!("{op} {key}: {}", DisplayErrorContext(&err)))
            }
            // Dispatch failures, timeouts and unreadable responses are all "the network".
            _ => StoreError::Unreachable {
                op,
                key,
                endpoint: self.endpoint.clone(),
                message: DisplayErrorContext(&err).to_string(),
            },
        }
    }
}

/// A streamed request's outcome: a body cut short by a local read error fails with that error,
/// not as the transport saw it (which would look like a network failure worth retrying).
pub(super) fn local_error_first<T, E>(
    sent: std::result::Result<T, SdkError<E, HttpResponse>>,
    producer_error: &ProducerError,
    classify: impl FnOnce(SdkError<E, HttpResponse>) -> StoreError,
) -> Result<T> {
    let local = producer_error
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .take();
    match (sent, local) {
        (Ok(out), _) => Ok(out),
        (Err(_), Some(local)) => Err(local),
        (Err(e), None) => Err(classify(e)),
    }
}

/// A 412 to a request made conditional on `expected` (`If-Match`, `x-amz-copy-source-if-match`):
/// `key` no longer has that ETag.
pub(super) fn precondition_failed(
    error: StoreError,
    op: &'static str,
    key: &str,
    expected: Option<&str>,
) -> StoreError {
    match (error, expected) {
        (StoreError::Service { status: 412, .. }, Some(expected)) => StoreError::Changed {
            op,
            key: key.to_string(),
            expected: expected.to_string(),
        },
        (other, _) => other,
    }
}
