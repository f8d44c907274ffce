//! One bound on the inodes of every mount of the process. The CSI plugin serves many volumes
//! from one process, and a bound per mount multiplies with them: each mount's limit is the
//! process's pool shared among the mounts alive now (and never more than its own configured
//! `evictable_inode_limit`), so it shrinks as volumes are published and grows back as they go.
//! While the process is over its memory target ([`super::pressure`]) every share is halved:
//! idle and least recently used entries are dropped first, before anything has to wait.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

/// The process's inodes: `total` shared among the mounts that joined.
#[derive(Debug)]
pub struct InodePool {
    total: usize,
    mounts: AtomicUsize,
    /// The process is over its memory target: shares are halved.
    pressed: AtomicBool,
}

impl InodePool {
    pub fn new(total: usize) -> Arc<InodePool> {
        Arc::new(InodePool {
            total,
            mounts: AtomicUsize::new(0),
            pressed: AtomicBool::new(false),
        })
    }

    /// A new mount's limit, at most `per_mount`; it counts as one of the pool's mounts until
    /// its last clone is dropped.
    pub fn join(self: &Arc<Self>, per_mount: usize) -> InodeLimit {
        self.mounts.fetch_add(1, Ordering::Relaxed);
        InodeLimit(Arc::new(Member {
            pool: self.clone(),
            per_mount,
        }))
    }

    /// Mounts sharing the pool now.
    pub fn mounts(&self) -> usize {
        self.mounts.load(Ordering::Relaxed)
    }

    pub fn total(&self) -> usize {
        self.total
    }

    /// Each mount's share now: the pool over the mounts, halved under pressure.
    pub fn share(&self) -> usize {
        let share = self.total / self.mounts().max(1);
        match self.pressed.load(Ordering::Relaxed) {
            true => share / 2,
            false => share,
        }
    }

    /// Halves every share while `pressed`.
    pub fn set_pressed(&self, pressed: bool) {
        self.pressed.store(pressed, Ordering::Relaxed);
    }
}

#[derive(Debug)]
struct Member {
    pool: Arc<InodePool>,
    per_mount: usize,
}

impl Drop for Member {
    fn drop(&mut self) {
        self.pool.mounts.fetch_sub(1, Ordering::Relaxed);
    }
}

/// A mount's inode limit, read again at every use (it changes as mounts come and go).
#[derive(Debug, Clone)]
pub struct InodeLimit(Arc<Member>);

impl InodeLimit {
    /// A limit of its own, shared with no other mount (tests, tools).
    pub fn fixed(limit: usize) -> InodeLimit {
        InodePool::new(usize::MAX).join(limit)
    }

    pub fn get(&self) -> usize {
        self.0.pool.share().min(self.0.per_mount)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mounts_share_the_pool_and_get_it_back_when_one_goes() {
        let pool = InodePool::new(100_000);
        let a = pool.join(65_536);
        assert_eq!(a.get(), 65_536, "alone, its own limit is the smaller");
        let b = pool.join(65_536);
        let c = pool.join(10_000);
        assert_eq!(a.get(), 33_333);
        assert_eq!(c.get(), 10_000);
        let b_again = b.clone();
        drop(b);
        assert_eq!(a.get(), 33_333, "a clone keeps the mount counted");
        drop(b_again);
        assert_eq!(a.get(), 50_000);
        assert_eq!(pool.mounts(), 2);
    }

    #[test]
    fn pressure_halves_every_share_until_it_ends() {
        let pool = InodePool::new(100_000);
        let a = pool.join(usize::MAX);
        let _b = pool.join(usize::MAX);
        pool.set_pressed(true);
        assert_eq!(a.get(), 25_000);
        pool.set_pressed(false);
        assert_eq!(a.get(), 50_000);
    }

    #[test]
    fn a_fixed_limit_is_its_own() {
        assert_eq!(InodeLimit::fixed(4096).get(), 4096);
        assert_eq!(InodeLimit::fixed(usize::MAX).get(), usize::MAX);
    }
}
