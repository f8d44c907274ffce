//! The circuit breaker in front of the shared cache: after repeated failures (errors or
//! timeouts, not misses) reads stop asking it for a while and go straight to the origin, so a
//! dead shared cache costs each read nothing rather than a time budget; then one read probes it.

use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Consecutive failures that open the breaker.
pub(super) const FAILURES_TO_OPEN: u32 = 5;
/// How long an open breaker keeps reads away before one probes again.
pub(super) const OPEN_FOR: Duration = Duration::from_secs(30);

#[derive(Debug, Default)]
struct State {
    failures: u32,
    /// Set while open: when the next probe may go.
    open_until: Option<Instant>,
    /// A probe is out: other reads keep away until it answers.
    probing: bool,
}

#[derive(Debug, Default)]
pub(super) struct Breaker {
    state: Mutex<State>,
}

impl Breaker {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether a read may ask the shared cache now.
    pub(super) fn allow(&self, now: Instant) -> bool {
        let mut state = self.state();
        match state.open_until {
            None => true,
            Some(until) if now < until || state.probing => false,
            Some(_) => {
                state.probing = true;
                true
            }
        }
    }

    /// The shared cache answered (a hit or a miss).
    pub(super) fn succeeded(&self) {
        let mut state = self.state();
        if state.open_until.is_some() {
            tracing::info!("shared cache answers again; reads use it");
        }
        *state = State::default();
    }

    /// It failed or did not answer in time. Returns whether this opened the breaker.
    pub(super) fn failed(&self, now: Instant) -> bool {
        let mut state = self.state();
        state.failures = state.failures.saturating_add(1);
        let reopen = state.probing;
        if reopen || (state.open_until.is_none() && state.failures >= FAILURES_TO_OPEN) {
            state.open_until = Some(now + OPEN_FOR);
            state.probing = false;
            return !reopen;
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn opens_after_repeated_failures_and_probes_once_after_the_pause() {
        let breaker = Breaker::default();
        let t0 = Instant::now();
        for _ in 1..FAILURES_TO_OPEN {
            assert!(!breaker.failed(t0));
            assert!(breaker.allow(t0));
        }
        assert!(breaker.failed(t0), "the last failure opens it");
        assert!(!breaker.allow(t0 + OPEN_FOR / 2));
        let later = t0 + OPEN_FOR;
        assert!(breaker.allow(later), "one probe");
        assert!(!breaker.allow(later), "and only one");
        // The probe fails: open again for a whole pause.
        assert!(!breaker.failed(later));
        assert!(!breaker.allow(later + OPEN_FOR / 2));
        assert!(breaker.allow(later + OPEN_FOR));
        breaker.succeeded();
        assert!(breaker.allow(later + OPEN_FOR));
        assert!(breaker.allow(later + OPEN_FOR));
    }

    #[test]
    fn a_success_resets_the_count() {
        let breaker = Breaker::default();
        let t0 = Instant::now();
        for _ in 0..FAILURES_TO_OPEN * 3 {
            assert!(!breaker.failed(t0));
            breaker.succeeded();
        }
        assert!(breaker.allow(t0));
    }
}
