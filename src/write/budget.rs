//! A bound on bytes across every file of the process: dirty bytes awaiting commit, and bytes
//! held in memory by commits in flight ([`Reservation`]).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::Duration;

use tokio::sync::Notify;

use crate::memory::Pressure;

/// How often a waiting writer looks again even without a wake-up (a release that raced its
/// registration is then noticed late, never missed).
const RECHECK: Duration = Duration::from_millis(200);

#[derive(Debug)]
pub struct Budget {
    limit: u64,
    used: Mutex<u64>,
    freed: Notify,
    /// Reservations that did not fit at once and waited (each counted once).
    waits: AtomicU64,
    /// The process's memory pressure, for a budget of memory (commits' buffers): in its last
    /// stage a reservation waits for it first (see `crate::memory::pressure`).
    pressure: OnceLock<Arc<Pressure>>,
}

impl Budget {
    pub fn new(limit: u64) -> Budget {
        Budget {
            limit: limit.max(1),
            used: Mutex::new(0),
            freed: Notify::new(),
            waits: AtomicU64::new(0),
            pressure: OnceLock::new(),
        }
    }

    /// Makes reservations wait for the process's memory `pressure` to ease first.
    pub fn follow(&self, pressure: Arc<Pressure>) {
        let _ = self.pressure.set(pressure);
    }

    /// Takes `n` bytes if they fit. A reservation always fits when nothing is reserved, so one
    /// write larger than the whole bound still proceeds.
    pub fn try_reserve(&self, n: u64) -> bool {
        let mut used = self.used.lock().unwrap_or_else(PoisonError::into_inner);
        if *used == 0 || used.saturating_add(n) <= self.limit {
            *used += n;
            true
        } else {
            false
        }
    }

    /// Takes `n` bytes, waiting for releases until they fit; calls `while_waiting` before each
    /// wait (at least every `RECHECK`), so the caller can keep starting what frees bytes.
    pub async fn reserve(&self, n: u64, mut while_waiting: impl FnMut()) {
        if let Some(pressure) = self.pressure.get() {
            pressure.admit().await;
        }
        let mut counted = false;
        loop {
            let freed = self.freed.notified();
            if self.try_reserve(n) {
                return;
            }
            if !counted {
                self.waits.fetch_add(1, Ordering::Relaxed);
                counted = true;
            }
            while_waiting();
            let _ = tokio::time::timeout(RECHECK, freed).await;
        }
    }

    /// Counts `n` bytes that exist already, even past the bound (a killed process's unsaved
    /// writes, recovered): writers then wait for commits to bring the total back under it.
    pub fn add(&self, n: u64) {
        let mut used = self.used.lock().unwrap_or_else(PoisonError::into_inner);
        *used = used.saturating_add(n);
    }

    pub fn release(&self, n: u64) {
        if n == 0 {
            return;
        }
        {
            let mut used = self.used.lock().unwrap_or_else(PoisonError::into_inner);
            *used = used.saturating_sub(n);
        }
        self.freed.notify_waiters();
    }

    /// Reservations that had to wait for room, since the start.
    pub fn waits(&self) -> u64 {
        self.waits.load(Ordering::Relaxed)
    }

    pub fn used(&self) -> u64 {
        *self.used.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Waits for `n` bytes (at most the whole bound, so a larger request still proceeds once
    /// alone) and holds them until the reservation is dropped.
    pub async fn hold(self: &Arc<Self>, n: u64) -> Reservation {
        let n = n.min(self.limit);
        self.reserve(n, || {}).await;
        Reservation {
            budget: Arc::clone(self),
            bytes: n,
        }
    }
}

/// Bytes of a [`Budget`] held until this is dropped.
#[derive(Debug)]
pub struct Reservation {
    budget: Arc<Budget>,
    bytes: u64,
}

impl Reservation {
    pub fn bytes(&self) -> u64 {
        self.bytes
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        self.budget.release(self.bytes);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reservations_fit_the_limit_but_one_always_proceeds() {
        let budget = Budget::new(100);
        assert!(
            budget.try_reserve(150),
            "alone, even an oversized write proceeds"
        );
        assert!(!budget.try_reserve(1));
        budget.release(150);
        assert!(budget.try_reserve(60));
        assert!(budget.try_reserve(40));
        assert!(!budget.try_reserve(1));
        assert_eq!(budget.used(), 100);
    }

    #[tokio::test]
    async fn a_reservation_holds_its_bytes_until_dropped() {
        let budget = Arc::new(Budget::new(10));
        let first = budget.hold(6).await;
        let waiting = {
            let budget = budget.clone();
            tokio::spawn(async move { budget.hold(6).await })
        };
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished(), "6 + 6 does not fit in 10");
        drop(first);
        let second = waiting.await.expect("join");
        assert_eq!(budget.used(), 6);
        drop(second);
        assert_eq!(budget.used(), 0);
        assert_eq!(budget.hold(50).await.bytes(), 10, "clamped to the bound");
    }

    #[tokio::test]
    async fn over_the_memory_target_a_reservation_waits_for_the_pressure_to_drop() {
        let budget = Arc::new(Budget::new(10));
        let pressure = Arc::new(Pressure::default());
        budget.follow(pressure.clone());
        let pool = crate::memory::InodePool::new(100);
        while pressure.stage() < crate::memory::Stage::Wait {
            pressure.reading(900, 800, &pool);
        }
        let waiter = {
            let budget = budget.clone();
            tokio::spawn(async move { budget.hold(5).await })
        };
        while pressure.waits() == 0 {
            tokio::task::yield_now().await;
        }
        assert_eq!(budget.used(), 0, "nothing reserved while pressed");
        pressure.reading(100, 800, &pool);
        let held = waiter
            .await
            .expect("the reservation proceeds once the pressure drops");
        assert_eq!(held.bytes(), 5);
    }

    #[tokio::test]
    async fn a_waiting_writer_proceeds_after_a_release() {
        let budget = std::sync::Arc::new(Budget::new(10));
        assert!(budget.try_reserve(10));
        let waiter = {
            let budget = budget.clone();
            tokio::spawn(async move { budget.reserve(5, || {}).await })
        };
        tokio::task::yield_now().await;
        assert!(!waiter.is_finished());
        budget.release(10);
        waiter.await.expect("waiter");
        assert_eq!(budget.used(), 5);
    }
}
