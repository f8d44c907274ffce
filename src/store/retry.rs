//! Retries with exponential backoff, per the backend's `retry_*` settings.
//!
//! The AWS SDK's own retry loop is switched off: its backoff cannot follow
//! `retry_next_delay_multiplier`, and it retries error classes (e.g. some 4xx) that the
//! configuration says are final. Only network errors, HTTP 429 and 5xx are retried here.

use std::future::Future;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use super::StoreError;

/// How many times one operation is tried before its last error is returned. With the default
/// delays (10 ms doubling up to 2 s) the attempts span about 4.5 s: long enough to ride out a
/// server restart blip, short enough that an unreachable endpoint fails a mount promptly.
pub const DEFAULT_MAX_ATTEMPTS: u32 = 10;

#[derive(Debug, Clone)]
pub struct RetryPolicy {
    pub base_delay: Duration,
    pub multiplier: f64,
    pub max_delay: Duration,
    pub max_attempts: u32,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            base_delay: Duration::from_millis(10),
            multiplier: 2.0,
            max_delay: Duration::from_millis(2000),
            max_attempts: DEFAULT_MAX_ATTEMPTS,
        }
    }
}

impl RetryPolicy {
    /// Delay before retry number `retry` (0-based), without jitter.
    pub fn delay(&self, retry: u32) -> Duration {
        let factor = self.multiplier.powi(retry.min(64) as i32);
        let millis = (self.base_delay.as_secs_f64() * 1000.0 * factor)
            .min(self.max_delay.as_secs_f64() * 1000.0);
        Duration::from_secs_f64(millis.max(0.0) / 1000.0)
    }

    /// Runs `attempt` until it succeeds, fails with a non-retryable error, or runs out of
    /// attempts.
    pub async fn run<T, F, Fut>(
        &self,
        op: &'static str,
        key: &str,
        mut attempt: F,
    ) -> Result<T, StoreError>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, StoreError>>,
    {
        let started = Instant::now();
        let mut tries = 0;
        loop {
            tries += 1;
            match attempt().await {
                Ok(value) => return Ok(value),
                Err(err) if !err.is_retryable() => return Err(err),
                Err(err) if tries >= self.max_attempts => {
                    return Err(StoreError::RetriesExhausted {
                        op,
                        key: key.to_string(),
                        attempts: tries,
                        elapsed: started.elapsed(),
                        last: Box::new(err),
                    });
                }
                Err(err) => {
                    let delay = jittered(self.delay(tries - 1));
                    tracing::debug!(op, key, attempt = tries, ?delay, error = %err, "retrying");
                    tokio::time::sleep(delay).await;
                }
            }
        }
    }
}

/// Spreads retries of many clients over [delay/2, delay] so that they do not hit a recovering
/// server in lockstep.
fn jittered(delay: Duration) -> Duration {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    let fraction = 0.5 + f64::from(nanos % 1000) / 2000.0;
    delay.mul_f64(fraction)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};

    fn policy() -> RetryPolicy {
        RetryPolicy {
            base_delay: Duration::from_millis(1),
            multiplier: 2.0,
            max_delay: Duration::from_millis(4),
            max_attempts: 4,
        }
    }

    fn server_error() -> StoreError {
        StoreError::Service {
            op: "get",
            key: "k".into(),
            status: 503,
            code: "SlowDown".into(),
            message: String::new(),
        }
    }

    #[test]
    fn delay_grows_by_multiplier_and_is_capped() {
        let p = RetryPolicy {
            base_delay: Duration::from_millis(10),
            multiplier: 3.0,
            max_delay: Duration::from_millis(100),
            max_attempts: 5,
        };
        assert_eq!(p.delay(0), Duration::from_millis(10));
        assert_eq!(p.delay(1), Duration::from_millis(30));
        assert_eq!(p.delay(2), Duration::from_millis(90));
        assert_eq!(p.delay(3), Duration::from_millis(100));
        assert_eq!(p.delay(60), Duration::from_millis(100));
    }

    #[tokio::test]
    async fn server_errors_are_retried_until_success() {
        let calls = AtomicU32::new(0);
        let out = policy()
            .run("get", "k", || async {
                if calls.fetch_add(1, Ordering::SeqCst) < 2 {
                    Err(server_error())
                } else {
                    Ok(7)
                }
            })
            .await;
        assert_eq!(out.ok(), Some(7));
        assert_eq!(calls.load(Ordering::SeqCst), 3);
    }

    #[tokio::test]
    async fn client_errors_are_not_retried() {
        let calls = AtomicU32::new(0);
        let out: Result<(), _> = policy()
            .run("get", "k", || async {
                calls.fetch_add(1, Ordering::SeqCst);
                Err(StoreError::AccessDenied {
                    op: "get",
                    key: "k".into(),
                    code: "AccessDenied".into(),
                })
            })
            .await;
        assert!(matches!(out, Err(StoreError::AccessDenied { .. })));
        assert_eq!(calls.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn attempts_are_bounded_and_last_error_kept() {
        let calls = AtomicU32::new(0);
        let out: Result<(), _> = policy()
            .run("get", "k", || async {
                calls.fetch_add(1, Ordering::SeqCst);
                Err(server_error())
            })
            .await;
        assert_eq!(calls.load(Ordering::SeqCst), 4);
        match out {
            Err(e @ StoreError::RetriesExhausted { .. }) => {
                assert!(matches!(e.root(), StoreError::Service { status: 503, .. }))
            }
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn throttling_and_5xx_are_retryable_but_4xx_are_not() {
        let with_status = |status| StoreError::Service {
            op: "get",
            key: "k".into(),
            status,
            code: String::new(),
            message: String::new(),
        };
        assert!(with_status(429).is_retryable());
        assert!(with_status(500).is_retryable());
        assert!(with_status(503).is_retryable());
        assert!(!with_status(400).is_retryable());
        assert!(!with_status(404).is_retryable());
    }
}
