//! Per-handle detection of sequential reading, so that only streaming readers trigger read-ahead.

use std::sync::atomic::{AtomicU64, Ordering};

/// How far a read may land from where the previous one ended and still count as the same stream.
/// The kernel issues read-ahead requests concurrently, so a streaming reader's requests can
/// arrive slightly out of order; a window of a few maximal FUSE requests absorbs that.
const STREAM_WINDOW: u64 = 4 * 1024 * 1024;

/// `u64::MAX` marks "nothing read yet".
#[derive(Debug)]
pub struct SequentialDetector {
    last_end: AtomicU64,
}

impl Default for SequentialDetector {
    fn default() -> Self {
        SequentialDetector {
            last_end: AtomicU64::new(u64::MAX),
        }
    }
}

impl SequentialDetector {
    /// Records a read of `len` bytes at `offset`; true when it continues the handle's stream. A
    /// first read counts as sequential when it starts at the beginning of the file (`cat`, `cp`).
    pub fn observe(&self, offset: u64, len: u64) -> bool {
        let previous = self
            .last_end
            .swap(offset.saturating_add(len), Ordering::Relaxed);
        if previous == u64::MAX {
            return offset == 0;
        }
        offset.abs_diff(previous) <= STREAM_WINDOW
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KIB: u64 = 1024;

    #[test]
    fn reading_from_the_start_in_order_is_sequential() {
        let d = SequentialDetector::default();
        assert!(d.observe(0, 128 * KIB));
        assert!(d.observe(128 * KIB, 128 * KIB));
        assert!(d.observe(256 * KIB, 128 * KIB));
    }

    #[test]
    fn slightly_reordered_read_ahead_stays_sequential() {
        let d = SequentialDetector::default();
        assert!(d.observe(0, 128 * KIB));
        assert!(d.observe(256 * KIB, 128 * KIB));
        assert!(d.observe(128 * KIB, 128 * KIB));
    }

    #[test]
    fn random_offsets_are_not_sequential() {
        let d = SequentialDetector::default();
        assert!(!d.observe(700 * 1024 * KIB, 4 * KIB));
        assert!(!d.observe(5 * 1024 * KIB, 4 * KIB));
        assert!(!d.observe(900 * 1024 * KIB, 4 * KIB));
    }

    #[test]
    fn a_stream_resumes_after_a_seek() {
        let d = SequentialDetector::default();
        assert!(d.observe(0, 4 * KIB));
        assert!(!d.observe(512 * 1024 * KIB, 4 * KIB));
        assert!(d.observe(512 * 1024 * KIB + 4 * KIB, 4 * KIB));
    }
}
