//! The line cache under the process's memory pressure (`crate::memory::pressure`): it follows
//! the pressure's stage (read-ahead shrinks in `Shared::read_ahead_due`, fetches wait in
//! `read`), and its RAM lines are the first memory the process gives back.

use std::ops::Range;
use std::sync::Arc;

use super::LineCache;
use crate::cache::ObjectVersion;
use crate::cache::stats::bump;
use crate::memory::{Pressure, Shed};
use crate::store::ObjectStore;

impl LineCache {
    /// Follows the process's memory `pressure`: read-ahead shrinks and stops as it rises, and
    /// in its last stage a read that must fetch waits first (see `crate::memory::pressure`).
    pub fn follow(&self, pressure: Arc<Pressure>) {
        let _ = self.shared.pressure.set(pressure);
    }

    /// Whether every line of `range` of `object` is in the cache (clean or arriving).
    pub(super) fn all_present(
        &self,
        store: &Arc<dyn ObjectStore>,
        object: &ObjectVersion,
        range: Range<u64>,
    ) -> bool {
        let ls = self.shared.line_size;
        let table = self.shared.table();
        (range.start / ls..=(range.end - 1) / ls).all(|line| {
            table.contains(
                store.cache_scope(),
                object.key.as_str(),
                object.etag.as_str(),
                line,
            )
        })
    }
}

/// Under memory pressure the RAM cache gives back half of its clean lines at each reading
/// (the least recently used first, never the last one left: a reader between two reads of it
/// would have to fetch it again at once); lines being read or fetched stay.
impl Shed for LineCache {
    fn shed(&self) -> u64 {
        let shared = &self.shared;
        let Some(tier) = shared.anon_tier else {
            return 0;
        };
        let shed = {
            let mut table = shared.table();
            let n = table.clean_in(tier) / 2;
            let shed = table.shed(tier, n);
            // Under the lock: the slots are free, and nobody may install a line in one before
            // its memory is given back.
            for placement in &shed {
                shared.storage.give_back(placement);
            }
            shed
        };
        bump(&shared.counters.evictions, shed.len() as u64);
        let bytes = shed.len() as u64 * shared.line_size;
        shared.release(shed);
        bytes
    }
}
