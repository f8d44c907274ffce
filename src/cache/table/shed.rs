//! What the RAM tier gives back under memory pressure: its least recently used clean lines.

use super::{NIL, Placement, Table, Tier};

impl Table {
    /// Evicts up to `n` of `tier`'s least recently used clean lines (never pinned or inbound
    /// ones) for the memory they hold, and returns their placements, their slots free now.
    pub fn shed(&mut self, tier: Tier, n: usize) -> Vec<Placement> {
        let mut shed = Vec::new();
        while shed.len() < n {
            let victim = self.oldest[tier as usize];
            if victim == NIL {
                break;
            }
            self.lru_remove(victim);
            self.detach(victim);
            shed.extend(self.free_slot(victim));
        }
        shed
    }

    /// `tier`'s clean lines nobody reads now (on its LRU list).
    pub fn clean_in(&self, tier: Tier) -> usize {
        let mut n = 0;
        let mut at = self.oldest[tier as usize];
        while at != NIL {
            n += 1;
            at = self.slots[at as usize].newer;
        }
        n
    }
}
