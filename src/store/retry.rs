//! Retries with exponential backoff and random jitter, per the backend's `retry_*` settings, on
//! `backon`; and the node-wide retry budget that bounds how much retrying a process does.
//!
//! The AWS SDK's own retry loop is switched off (see `build.rs`): its backoff cannot follow
//! `retry_next_delay_multiplier`. What it would retry is kept, though: `StoreError::retry_kind`
//! follows the SDK's retry classifiers, and [`RetryBudget`] its standard retry quota.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::{Duration, Instant};

use backon::{BackoffBuilder, ExponentialBuilder, Retryable};

use super::StoreError;
use super::error::RetryKind;

/// How many times one operation is tried before its last error is returned. With the default
/// delays (10 ms doubling up to 2 s) the attempts span about 2.3 to 4.5 s (jitter): long enough
/// to ride out a server restart blip, short enough that an unreachable endpoint fails a mount
/// promptly.
pub const DEFAULT_MAX_ATTEMPTS: u32 = 10;

#[derive(Debug, Clone)]
pub struct RetryPolicy {
    /// The nominal delay before the first retry (`retry_base_delay`).
    pub base_delay: Duration,
    /// How much each nominal delay grows over the one before (`retry_next_delay_multiplier`).
    pub multiplier: f64,
    /// The longest nominal delay (`retry_max_delay`).
    pub max_delay: Duration,
    /// Tries of one operation, the first included.
    pub max_attempts: u32,
    /// What retries draw on: one budget for every store of the process.
    pub budget: Arc<RetryBudget>,
}

impl Default for RetryPolicy {
    /// The default `retry_*` settings, with a budget of its own.
    fn default() -> Self {
        RetryPolicy {
            base_delay: Duration::from_millis(10),
            multiplier: 2.0,
            max_delay: Duration::from_millis(2000),
            max_attempts: DEFAULT_MAX_ATTEMPTS,
            budget: Arc::default(),
        }
    }
}

/// Why `RetryPolicy::run` stopped retrying an operation that failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stop {
    /// The error is final (or the operation never failed).
    Final,
    /// `max_attempts` were made.
    OutOfAttempts,
    /// The retry budget could not pay for another attempt.
    OutOfBudget,
}

impl RetryPolicy {
    /// The nominal delay before retry number `retry` (0-based): `base_delay` times `multiplier`
    /// to the power `retry`, at most `max_delay`. The delay slept is drawn at random between half
    /// of it and it (see [`backoff`]).
    pub fn delay(&self, retry: u32) -> Duration {
        let factor = self.multiplier.powi(retry.min(64) as i32);
        let millis = (self.base_delay.as_secs_f64() * 1000.0 * factor)
            .min(self.max_delay.as_secs_f64() * 1000.0);
        Duration::from_secs_f64(millis.max(0.0) / 1000.0)
    }

    /// Runs `attempt` until it succeeds, fails with a non-retryable error, runs out of
    /// attempts (`RetriesExhausted`, with the last error), or finds the retry budget empty
    /// (then its last error is returned as it is, at once).
    pub async fn run<T, F, Fut>(
        &self,
        op: &'static str,
        key: &str,
        attempt: F,
    ) -> Result<T, StoreError>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, StoreError>>,
    {
        let started = Instant::now();
        let mut retries: u32 = 0;
        // What the retry in progress paid, refunded if it gets the operation through.
        let mut paid: u32 = 0;
        let mut stop = Stop::Final;
        let result = attempt
            .retry(
                jittered(self.base_delay, self.multiplier, self.max_delay)
                    .with_max_times(self.max_attempts.saturating_sub(1) as usize),
            )
            .when(StoreError::is_retryable)
            .adjust(|err: &StoreError, delay| {
                let Some(delay) = delay else {
                    stop = Stop::OutOfAttempts;
                    return None;
                };
                let Some(cost) = err.retry_kind().and_then(|kind| self.budget.withdraw(kind))
                else {
                    stop = Stop::OutOfBudget;
                    tracing::debug!(op, key, attempt = retries + 1, error = %err,
                        "retry budget exhausted: not retrying");
                    return None;
                };
                paid = cost;
                retries += 1;
                tracing::debug!(op, key, attempt = retries, ?delay, error = %err, "retrying");
                Some(delay)
            })
            .await;
        match result {
            Ok(value) => {
                self.budget.succeeded(paid);
                Ok(value)
            }
            Err(err) if stop == Stop::OutOfAttempts => Err(StoreError::RetriesExhausted {
                op,
                key: key.to_string(),
                attempts: retries + 1,
                elapsed: started.elapsed(),
                last: Box::new(err),
            }),
            Err(err) => Err(err),
        }
    }
}

/// Delays that grow from `first` by `factor` up to `last`, each drawn at random between half of
/// its nominal value and that value (so `first / 2` is the shortest delay and `last` the longest),
/// so that many clients retrying at once do not hit a recovering server in lockstep. Endless:
/// for loops that retry until they stop on their own (the write engine's background commits).
pub fn backoff(
    first: Duration,
    factor: f64,
    last: Duration,
) -> impl Iterator<Item = Duration> + Send {
    jittered(first, factor, last).without_max_times().build()
}

/// backon's exponential backoff, set so that its jitter (a random addition of up to the current
/// delay) spreads each delay over [nominal/2, nominal]: it starts from and is capped at half
/// the nominal values.
fn jittered(first: Duration, factor: f64, last: Duration) -> ExponentialBuilder {
    ExponentialBuilder::new()
        .with_min_delay(first / 2)
        .with_max_delay(last / 2)
        .with_factor(factor as f32)
        .with_jitter()
}

/// Tokens the node's budget holds when full: the AWS SDK's `TokenBucket` default capacity.
pub const RETRY_BUDGET_CAPACITY: u32 = 500;
/// What one retry costs after throttling: the SDK's (legacy, default) retry cost.
const RETRY_COST: u32 = 5;
/// What one retry costs after a transient failure (a timeout, the network, HTTP 5xx): the SDK's
/// (legacy, default) timeout retry cost, twice the other.
const TRANSIENT_RETRY_COST: u32 = 2 * RETRY_COST;
/// What an operation that succeeds at its first attempt puts back.
const SUCCESS_REFUND: u32 = 1;

/// How much retrying a process may do: one token bucket shared by every store of the process
/// (every mount of the CSI plugin, every backend of a daemon), after the AWS SDK's standard retry
/// quota (aws-smithy-runtime's `TokenBucket` as `StandardRetryStrategy` uses it, with the
/// legacy default costs). It starts full at [`RETRY_BUDGET_CAPACITY`] tokens; each retry takes 5
/// after throttling and 10 after a transient failure; an operation that succeeds at its first
/// attempt puts 1 back, one that succeeds after retries the cost of its last retry, never past
/// full. A retry it cannot pay for is not made: the operation fails with its last error at once.
/// So when the store browns out (everything fails), the node makes at most 50 to 100 retries
/// before every request gets one attempt only, instead of each mount multiplying its load by
/// `max_attempts`; successes refill the budget as the store recovers.
#[derive(Debug)]
pub struct RetryBudget {
    capacity: u32,
    tokens: AtomicU32,
    /// Set from a refused retry until the next paid one, so that the node logs the exhaustion
    /// once per brown-out rather than once per request.
    exhausted: AtomicBool,
}

impl Default for RetryBudget {
    fn default() -> Self {
        RetryBudget::with_capacity(RETRY_BUDGET_CAPACITY)
    }
}

impl RetryBudget {
    /// A full budget of `capacity` tokens.
    pub fn with_capacity(capacity: u32) -> RetryBudget {
        RetryBudget {
            capacity,
            tokens: AtomicU32::new(capacity),
            exhausted: AtomicBool::new(false),
        }
    }

    /// Tokens left.
    pub fn available(&self) -> u32 {
        self.tokens.load(Ordering::Relaxed)
    }

    /// Pays for one retry after a failure of `kind`: what it cost, or `None` when the budget
    /// cannot pay (then nothing is taken).
    fn withdraw(&self, kind: RetryKind) -> Option<u32> {
        let cost = match kind {
            RetryKind::Throttling => RETRY_COST,
            RetryKind::Transient => TRANSIENT_RETRY_COST,
        };
        let paid = self
            .tokens
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |t| {
                t.checked_sub(cost)
            })
            .is_ok();
        if paid {
            if self.exhausted.swap(false, Ordering::Relaxed) {
                tracing::info!("retry budget refilled: failed store requests are retried again");
            }
            Some(cost)
        } else {
            if !self.exhausted.swap(true, Ordering::Relaxed) {
                tracing::warn!(
                    available = self.available(),
                    "retry budget exhausted: store requests fail at their first error until \
                     successes refill it"
                );
            }
            None
        }
    }

    /// An operation succeeded; `paid` is what its last retry cost (0: it needed none).
    fn succeeded(&self, paid: u32) {
        let refund = if paid == 0 { SUCCESS_REFUND } else { paid };
        let _ = self
            .tokens
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |t| {
                Some(t.saturating_add(refund).min(self.capacity))
            });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::sync::Mutex;

    fn policy() -> RetryPolicy {
        RetryPolicy {
            base_delay: Duration::from_millis(1),
            multiplier: 2.0,
            max_delay: Duration::from_millis(4),
            max_attempts: 4,
            budget: Arc::default(),
        }
    }

    fn service_error(status: u16, code: &str) -> StoreError {
        StoreError::Service {
            op: "get",
            key: "k".into(),
            status,
            code: code.into(),
            message: String::new(),
        }
    }

    fn server_error() -> StoreError {
        service_error(503, "SlowDown")
    }

    /// What `tracing` logs on this thread (at debug and above) while the guard lives.
    fn capture_logs() -> (Arc<Mutex<Vec<u8>>>, tracing::subscriber::DefaultGuard) {
        struct Sink(Arc<Mutex<Vec<u8>>>);
        impl Write for Sink {
            fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
                self.0.lock().unwrap().extend_from_slice(buf);
                Ok(buf.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let logs = Arc::new(Mutex::new(Vec::new()));
        let sink = logs.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::DEBUG)
            .with_ansi(false)
            .with_writer(move || Sink(sink.clone()))
            .finish();
        (logs, tracing::subscriber::set_default(subscriber))
    }

    /// 10 ms, tripling, capped at 100 ms, 5 attempts.
    fn tripling_to_100ms() -> RetryPolicy {
        RetryPolicy {
            base_delay: Duration::from_millis(10),
            multiplier: 3.0,
            max_delay: Duration::from_millis(100),
            max_attempts: 5,
            budget: Arc::default(),
        }
    }

    #[test]
    fn delay_grows_by_multiplier_and_is_capped() {
        let p = tripling_to_100ms();
        assert_eq!(p.delay(0), Duration::from_millis(10));
        assert_eq!(p.delay(1), Duration::from_millis(30));
        assert_eq!(p.delay(2), Duration::from_millis(90));
        assert_eq!(p.delay(3), Duration::from_millis(100));
        assert_eq!(p.delay(60), Duration::from_millis(100));
    }

    #[test]
    fn slept_delays_are_random_between_half_the_nominal_delay_and_it() {
        let p = tripling_to_100ms();
        // backon computes in f32 seconds.
        let slack = Duration::from_micros(10);
        let mut firsts = std::collections::BTreeSet::new();
        for _ in 0..200 {
            let delays: Vec<Duration> = backoff(p.base_delay, p.multiplier, p.max_delay)
                .take(6)
                .collect();
            for (retry, delay) in delays.iter().enumerate() {
                let nominal = p.delay(retry as u32);
                assert!(
                    *delay + slack >= nominal / 2 && *delay <= nominal + slack,
                    "retry {retry}: {delay:?} outside [{:?}, {nominal:?}]",
                    nominal / 2
                );
            }
            firsts.insert(delays[0]);
        }
        assert!(
            firsts.len() > 100,
            "jitter is random: {} distinct",
            firsts.len()
        );
    }

    #[test]
    fn background_backoff_never_ends_and_keeps_its_bounds() {
        let first = Duration::from_secs(1);
        let last = Duration::from_secs(60);
        let delays: Vec<Duration> = backoff(first, 2.0, last).take(1000).collect();
        assert_eq!(delays.len(), 1000);
        assert!(delays[0] >= first / 2 && delays[0] <= first);
        assert!(delays.iter().all(|d| *d <= last + Duration::from_millis(1)));
        assert!(delays[999] >= last / 2);
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
                assert!(
                    e.to_string()
                        .starts_with("get k: gave up after 4 attempts over ")
                );
                assert!(matches!(e.root(), StoreError::Service { status: 503, .. }))
            }
            other => panic!("unexpected {other:?}"),
        }
    }

    #[tokio::test]
    async fn a_zero_base_delay_policy_makes_one_attempt() {
        let calls = AtomicU32::new(0);
        let p = RetryPolicy {
            base_delay: Duration::ZERO,
            max_attempts: 1,
            ..policy()
        };
        let out: Result<(), _> = p
            .run("get", "k", || async {
                calls.fetch_add(1, Ordering::SeqCst);
                Err(server_error())
            })
            .await;
        assert_eq!(calls.load(Ordering::SeqCst), 1);
        assert!(matches!(
            out,
            Err(StoreError::RetriesExhausted { attempts: 1, .. })
        ));
    }

    #[test]
    fn the_sdks_throttling_and_transient_errors_are_retryable_but_other_4xx_and_5xx_are_not() {
        // By status, whatever the code.
        for status in [429, 500, 502, 503, 504] {
            assert!(service_error(status, "").is_retryable(), "{status}");
        }
        for status in [400, 403, 404, 409, 412, 501, 505] {
            assert!(!service_error(status, "").is_retryable(), "{status}");
        }
        // By code, whatever the status.
        for code in [
            "SlowDown",
            "Throttling",
            "ThrottlingException",
            "RequestLimitExceeded",
        ] {
            assert_eq!(
                service_error(400, code).retry_kind(),
                Some(RetryKind::Throttling),
                "{code}"
            );
        }
        for code in ["RequestTimeout", "RequestTimeoutException", "InternalError"] {
            assert_eq!(
                service_error(400, code).retry_kind(),
                Some(RetryKind::Transient),
                "{code}"
            );
        }
        assert_eq!(
            service_error(429, "").retry_kind(),
            Some(RetryKind::Throttling)
        );
        assert_eq!(
            service_error(503, "ServiceUnavailable").retry_kind(),
            Some(RetryKind::Transient)
        );
        for code in ["InvalidArgument", "EntityTooLarge", "RequestTimeTooSkewed"] {
            assert!(!service_error(400, code).is_retryable(), "{code}");
        }
        let unreachable = StoreError::Unreachable {
            op: "get",
            key: "k".into(),
            endpoint: "http://s3".into(),
            message: "timeout".into(),
        };
        assert_eq!(unreachable.retry_kind(), Some(RetryKind::Transient));
        // A 400 RequestTimeout is retried, so it does not stop a background commit.
        assert!(!service_error(400, "RequestTimeout").is_terminal());
        assert!(service_error(400, "InvalidArgument").is_terminal());
    }

    #[test]
    fn the_budget_empties_under_a_brown_out_and_refills_on_successes() {
        let budget = RetryBudget::default();
        assert_eq!(budget.available(), 500);
        // Everything fails: 50 retries after transient failures empty it...
        let transient = (0..).take_while(|_| budget.withdraw(RetryKind::Transient).is_some());
        assert_eq!(transient.count(), 50);
        assert_eq!(budget.available(), 0);
        assert_eq!(budget.withdraw(RetryKind::Throttling), None);
        // ... and successes refill it, one token each.
        for _ in 0..5 {
            budget.succeeded(0);
        }
        assert_eq!(budget.available(), 5);
        assert_eq!(
            budget.withdraw(RetryKind::Transient),
            None,
            "a transient retry costs 10"
        );
        assert_eq!(budget.withdraw(RetryKind::Throttling), Some(5));
        // A success after a retry gives back what that retry cost.
        budget.succeeded(5);
        assert_eq!(budget.available(), 5);
        // Never past full.
        let full = RetryBudget::with_capacity(10);
        full.succeeded(0);
        full.succeeded(10);
        assert_eq!(full.available(), 10);
        // Throttled retries cost half as much.
        let throttled = RetryBudget::default();
        let count = (0..)
            .take_while(|_| throttled.withdraw(RetryKind::Throttling).is_some())
            .count();
        assert_eq!(count, 100);
    }

    #[tokio::test]
    async fn an_exhausted_budget_fails_at_once_with_the_last_error_and_says_so() {
        let (logs, _guard) = capture_logs();
        // Room for one retry after a transient failure, shared by two stores' policies.
        let budget = Arc::new(RetryBudget::with_capacity(10));
        let first = RetryPolicy {
            budget: budget.clone(),
            ..policy()
        };
        let second = RetryPolicy {
            budget: budget.clone(),
            ..policy()
        };
        let calls = AtomicU32::new(0);
        let unavailable = || async {
            calls.fetch_add(1, Ordering::SeqCst);
            Err::<(), _>(service_error(503, "ServiceUnavailable"))
        };
        let out = first.run("get", "k", unavailable).await;
        assert_eq!(
            calls.load(Ordering::SeqCst),
            2,
            "one retry paid, the next refused"
        );
        assert!(
            matches!(out, Err(StoreError::Service { status: 503, .. })),
            "the last error itself: {out:?}"
        );
        assert_eq!(budget.available(), 0);
        // The other store finds the node's budget empty: one attempt, no retry.
        calls.store(0, Ordering::SeqCst);
        let out = second.run("get", "k", unavailable).await;
        assert_eq!(calls.load(Ordering::SeqCst), 1);
        assert!(matches!(out, Err(StoreError::Service { status: 503, .. })));
        let logged = String::from_utf8(logs.lock().unwrap().clone()).unwrap();
        assert!(logged.contains("retry budget exhausted"), "{logged}");
        assert_eq!(
            logged.matches("WARN").count(),
            1,
            "one warning per brown-out: {logged}"
        );
        // A first-attempt success refunds a token; final errors cost nothing.
        second.run("get", "k", || async { Ok(()) }).await.unwrap();
        assert_eq!(budget.available(), 1);
        let denied: Result<(), _> = second
            .run("get", "k", || async {
                Err(service_error(400, "InvalidArgument"))
            })
            .await;
        assert!(matches!(
            denied,
            Err(StoreError::Service { status: 400, .. })
        ));
        assert_eq!(budget.available(), 1);
    }

    #[tokio::test]
    async fn a_retried_success_refunds_its_retry() {
        let p = policy();
        let calls = AtomicU32::new(0);
        p.run("get", "k", || async {
            if calls.fetch_add(1, Ordering::SeqCst) < 2 {
                Err(server_error())
            } else {
                Ok(())
            }
        })
        .await
        .unwrap();
        // Two throttled retries at 5 each; the one that got through comes back.
        assert_eq!(p.budget.available(), 500 - 5);
    }
}
