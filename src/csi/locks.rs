//! Per-volume locks: calls for one volume id run one at a time, calls for different volumes
//! concurrently, and a volume id holds an entry only while a call holds or waits for its lock.
//!
//! A node sees every volume id its pods ever used: a map that kept one lock per id would grow
//! with each of them for the life of the plugin. So each entry counts its users — the calls
//! holding its lock or waiting for it — counted in and out under the map's lock, and the last
//! to leave removes it. A count of 0 means no call holds that lock (a holder releases it before
//! it leaves) and none waits for it, and a new call can only join through the map: removing the
//! entry cannot let two calls for one volume run at once. A call cancelled while it waits (the
//! kubelet gave up on it) leaves the same way.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::OwnedMutexGuard;

#[derive(Debug, Default)]
struct Entry {
    mutex: Arc<tokio::sync::Mutex<()>>,
    /// Calls holding `mutex` or waiting for it.
    users: usize,
}

#[derive(Debug, Default)]
pub(super) struct VolumeLocks {
    entries: Mutex<HashMap<String, Entry>>,
}

/// A call counted as a user of one volume's entry, from before it waits until after it lets go.
#[derive(Debug)]
struct Claim<'a> {
    locks: &'a VolumeLocks,
    volume_id: String,
}

impl Drop for Claim<'_> {
    fn drop(&mut self) {
        let mut entries = self.locks.entries();
        if let Some(entry) = entries.get_mut(&self.volume_id) {
            entry.users -= 1;
            if entry.users == 0 {
                entries.remove(&self.volume_id);
            }
        }
    }
}

/// Volume `volume_id` is locked until this is dropped.
#[derive(Debug)]
pub(super) struct VolumeGuard<'a> {
    // Fields drop in declaration order: the lock is released before the call stops counting
    // as a user, so an entry is never removed under a holder.
    _guard: OwnedMutexGuard<()>,
    _claim: Claim<'a>,
}

impl VolumeLocks {
    /// Every critical section leaves the map consistent, so a poisoned lock is still usable.
    fn entries(&self) -> MutexGuard<'_, HashMap<String, Entry>> {
        self.entries
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Waits until no other call holds volume `volume_id`, and holds it.
    pub(super) async fn lock(&self, volume_id: &str) -> VolumeGuard<'_> {
        let mutex = {
            let mut entries = self.entries();
            let entry = entries.entry(volume_id.to_string()).or_default();
            entry.users += 1;
            entry.mutex.clone()
        };
        // From here on, dropping `claim` (the call cancelled while it waits) counts it out.
        let claim = Claim {
            locks: self,
            volume_id: volume_id.to_string(),
        };
        let guard = mutex.lock_owned().await;
        VolumeGuard {
            _guard: guard,
            _claim: claim,
        }
    }

    /// Volume ids with an entry: those a call holds or waits for.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.entries().len()
    }

    /// Calls holding or waiting for `volume_id`.
    #[cfg(test)]
    fn users(&self, volume_id: &str) -> usize {
        self.entries().get(volume_id).map_or(0, |e| e.users)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    use super::*;

    #[tokio::test]
    async fn a_hundred_thousand_volumes_that_came_and_went_leave_no_entry() {
        let locks = VolumeLocks::default();
        for i in 0..100_000 {
            let id = format!("pv-{i}");
            let publish = locks.lock(&id).await;
            drop(publish);
            let unpublish = locks.lock(&id).await;
            assert_eq!(locks.len(), 1);
            drop(unpublish);
        }
        assert_eq!(locks.len(), 0);
    }

    #[tokio::test]
    async fn an_entry_stays_while_a_call_waits_for_it() {
        let locks = Arc::new(VolumeLocks::default());
        let held = locks.lock("pv").await;
        let (got_tx, got_rx) = tokio::sync::oneshot::channel();
        let waiter = {
            let locks = locks.clone();
            tokio::spawn(async move {
                let second = locks.lock("pv").await;
                let _ = got_tx.send(());
                // Holds the lock until the test has looked.
                tokio::task::yield_now().await;
                drop(second);
            })
        };
        while locks.users("pv") < 2 {
            tokio::task::yield_now().await;
        }
        drop(held);
        assert_eq!(locks.users("pv"), 1, "the waiter's entry stays");
        got_rx.await.expect("the waiter got the lock");
        waiter.await.expect("the waiter ran");
        assert_eq!(locks.len(), 0);
    }

    #[tokio::test]
    async fn a_cancelled_waiter_gives_its_entry_back() {
        let locks = VolumeLocks::default();
        let held = locks.lock("pv").await;
        let gave_up = tokio::time::timeout(Duration::from_millis(10), locks.lock("pv")).await;
        assert!(gave_up.is_err(), "the lock is held");
        assert_eq!(locks.len(), 1);
        drop(held);
        assert_eq!(locks.len(), 0);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn calls_on_one_volume_never_overlap_while_entries_come_and_go() {
        let locks = Arc::new(VolumeLocks::default());
        let inside: Arc<[AtomicUsize; 3]> = Arc::new(Default::default());
        let mut calls = Vec::new();
        for task in 0..24 {
            let locks = locks.clone();
            let inside = inside.clone();
            calls.push(tokio::spawn(async move {
                for round in 0..300 {
                    let volume = (task + round) % 3;
                    let _held = locks.lock(&format!("pv-{volume}")).await;
                    let before = inside[volume].fetch_add(1, Ordering::SeqCst);
                    assert_eq!(before, 0, "two calls inside volume {volume} at once");
                    tokio::task::yield_now().await;
                    inside[volume].fetch_sub(1, Ordering::SeqCst);
                }
            }));
        }
        for call in calls {
            call.await.expect("no overlap");
        }
        assert_eq!(locks.len(), 0);
    }
}
