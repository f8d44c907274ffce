//! The slot table: the line cache's bookkeeping, kept under its one lock.
//!
//! Which slot holds which line (the catalog), each slot's phase, how many readers pin it, and the
//! LRU order of the clean, unpinned ones. Pure bookkeeping with no I/O and no waiting, so the lock
//! is only ever held for a few map operations. Everything here is O(lines), never O(bytes).
//!
//! A slot's life: `Free` → claimed and installed `Inbound` (its fill is running) → `Ready`, or
//! `Failed` if the fill failed. A slot is *detached* once the catalog no longer points at it
//! (invalidated, failed, or evicted): nobody new can find it, and it returns to the free list as
//! soon as it is neither pinned nor inbound. Only clean, attached, unpinned slots sit in the LRU
//! list, so whatever eviction takes from its tail is something nobody is using or waiting for.

use std::collections::HashMap;
use std::sync::Arc;

use tokio::sync::watch;

use super::persist::{Check, RestoredLine};
use crate::store::StoreError;

pub(super) type SlotId = u32;
const NIL: SlotId = SlotId::MAX;

/// How a line's fill ended, as seen by the readers waiting on it.
#[derive(Debug, Clone)]
pub(super) enum Outcome {
    /// The slot holds the line; waiters (who pinned it) copy out of it.
    Ready,
    /// The fetch failed; every waiter returns this error.
    Failed(Arc<StoreError>),
    /// The fill ended without a result (its task was dropped, or a local write into the cache
    /// failed): waiters read their bytes straight from the store instead.
    Abandoned,
}

/// How far an inbound line's fill has got, as its waiters watch it.
#[derive(Debug, Clone, Default)]
pub(super) struct Progress {
    /// Bytes from the line's start already in storage. A fill writes its line in order, so a
    /// waiter whose part lies below this mark may copy it out before the whole line is in.
    pub filled: usize,
    /// `None` while the fill runs.
    pub outcome: Option<Outcome>,
}

/// What waiters of an inbound line watch.
pub(super) type Flight = watch::Receiver<Progress>;

/// Where a line's bytes live: enough for every storage mode to find them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Placement {
    pub slot: usize,
    /// The cached object version, numbered per catalog entry (per-inode storage keeps one file
    /// per number).
    pub object: u64,
    pub line: u64,
    /// Unique per fill, so storage can tell a stale release from the current occupant.
    pub tenant: u64,
}

#[derive(Debug, Clone)]
enum Phase {
    Free,
    Inbound(Flight),
    Ready,
    Failed,
}

/// The full name of one cached object version.
#[derive(Debug)]
pub(super) struct ObjectName {
    pub store: String,
    pub key: String,
    pub etag: String,
}

#[derive(Debug)]
struct Slot {
    phase: Phase,
    owner: Option<(Arc<ObjectName>, Placement)>,
    pins: u32,
    detached: bool,
    /// A clean line restored from an earlier process's persistent cache whose bytes nobody
    /// has checked yet (see `persist`): a reader checks them before serving them.
    unverified: Option<Check>,
    in_lru: bool,
    /// Towards the most recently used end.
    newer: SlotId,
    /// Towards the least recently used end.
    older: SlotId,
}

/// The lines of one object version: (store, key, ETag) → line index → slot.
#[derive(Debug)]
struct ObjectLines {
    id: u64,
    name: Arc<ObjectName>,
    lines: HashMap<u64, SlotId>,
}

type Versions = HashMap<String, ObjectLines>;

/// What a pinned lookup found.
#[derive(Debug)]
pub(super) enum Pinned {
    Ready(Placement),
    Inbound(Placement, Flight),
    /// Clean, but restored and not yet checked: the reader checks it, then calls
    /// [`Table::verified`] or [`Table::reject`].
    Unverified(Placement, Check),
}

/// A slot claimed for a new line, and the line it evicted to make room, if any.
pub(super) struct Claimed {
    pub slot: SlotId,
    pub evicted: Option<Placement>,
}

#[derive(Debug)]
pub(super) struct Table {
    slots: Vec<Slot>,
    free: Vec<SlotId>,
    /// Most recently used end of the LRU list.
    newest: SlotId,
    /// Least recently used end: the next eviction.
    oldest: SlotId,
    catalog: HashMap<String, HashMap<String, Versions>>,
    next_object: u64,
    next_tenant: u64,
}

impl Table {
    /// A table of `lines` free slots; `lines` must be below `u32::MAX`.
    pub fn new(lines: usize) -> Table {
        let slots = (0..lines)
            .map(|_| Slot {
                phase: Phase::Free,
                owner: None,
                pins: 0,
                detached: false,
                unverified: None,
                in_lru: false,
                newer: NIL,
                older: NIL,
            })
            .collect();
        Table {
            slots,
            // Reversed so that slots are handed out from 0 up.
            free: (0..lines as SlotId).rev().collect(),
            newest: NIL,
            oldest: NIL,
            catalog: HashMap::new(),
            next_object: 0,
            next_tenant: 0,
        }
    }

    /// Slots holding a line in any phase (not on the free list).
    pub fn resident(&self) -> usize {
        self.slots.len() - self.free.len()
    }

    fn find(&self, store: &str, key: &str, etag: &str, line: u64) -> Option<SlotId> {
        let object = self.catalog.get(store)?.get(key)?.get(etag)?;
        object.lines.get(&line).copied()
    }

    /// Whether the line is cached or being fetched.
    pub fn contains(&self, store: &str, key: &str, etag: &str, line: u64) -> bool {
        self.find(store, key, etag, line).is_some()
    }

    /// Pins the line if it is present (clean or inbound), so it can be neither evicted nor reused
    /// until the pin is dropped with [`Table::unpin`].
    pub fn pin(&mut self, store: &str, key: &str, etag: &str, line: u64) -> Option<Pinned> {
        let id = self.find(store, key, etag, line)?;
        let placement = self.placement(id);
        let slot = &self.slots[id as usize];
        let pinned = match &slot.phase {
            Phase::Ready => match slot.unverified {
                Some(check) => Pinned::Unverified(placement, check),
                None => Pinned::Ready(placement),
            },
            Phase::Inbound(flight) => Pinned::Inbound(placement, flight.clone()),
            // The catalog only points at ready or inbound slots.
            Phase::Free | Phase::Failed => return None,
        };
        self.lru_remove(id);
        self.slots[id as usize].pins += 1;
        Some(pinned)
    }

    /// Pins lines `0..lines` of one object version, all of them or none: only if every one is
    /// clean (a reader outside this process will read them without asking, so none may still
    /// be arriving). Each placement comes back pinned, to be dropped with [`Table::unpin`].
    pub fn pin_all_ready(
        &mut self,
        store: &str,
        key: &str,
        etag: &str,
        lines: u64,
    ) -> Option<Vec<Placement>> {
        let object = self.catalog.get(store)?.get(key)?.get(etag)?;
        let ids = (0..lines)
            .map(|line| object.lines.get(&line).copied())
            .collect::<Option<Vec<SlotId>>>()?;
        let clean = |id: SlotId| {
            let slot = &self.slots[id as usize];
            matches!(slot.phase, Phase::Ready) && slot.unverified.is_none()
        };
        if !ids.iter().all(|&id| clean(id)) {
            return None;
        }
        Some(
            ids.into_iter()
                .map(|id| {
                    self.lru_remove(id);
                    self.slots[id as usize].pins += 1;
                    self.placement(id)
                })
                .collect(),
        )
    }

    /// Drops one pin; returns the placement to release when that freed the slot.
    pub fn unpin(&mut self, id: SlotId) -> Option<Placement> {
        let slot = &mut self.slots[id as usize];
        debug_assert!(slot.pins > 0, "unpin of an unpinned slot");
        slot.pins = slot.pins.saturating_sub(1);
        if slot.pins > 0 {
            return None;
        }
        match (&slot.phase, slot.detached) {
            (Phase::Inbound(_), _) => None,
            (Phase::Ready, false) => {
                self.lru_push(id);
                None
            }
            _ => self.free_slot(id),
        }
    }

    /// A slot for a new line: a free one, or else the least recently used clean line, evicted.
    /// `None` when every slot is inbound or pinned.
    pub fn claim(&mut self) -> Option<Claimed> {
        if let Some(slot) = self.free.pop() {
            return Some(Claimed {
                slot,
                evicted: None,
            });
        }
        let victim = self.oldest;
        if victim == NIL {
            return None;
        }
        self.lru_remove(victim);
        self.detach(victim);
        let slot = &mut self.slots[victim as usize];
        slot.phase = Phase::Free;
        let evicted = slot.owner.take().map(|(_, placement)| placement);
        Some(Claimed {
            slot: victim,
            evicted,
        })
    }

    /// Gives a claimed slot to line `line` of (`store`, `key`, `etag`) as inbound, with `pins`
    /// readers already waiting on `flight`.
    pub fn install(
        &mut self,
        id: SlotId,
        (store, key, etag): (&str, &str, &str),
        line: u64,
        flight: Flight,
        pins: u32,
    ) -> Placement {
        let next_object = &mut self.next_object;
        let keys = match self.catalog.get_mut(store) {
            Some(keys) => keys,
            None => self.catalog.entry(store.to_string()).or_default(),
        };
        let versions = match keys.get_mut(key) {
            Some(versions) => versions,
            None => keys.entry(key.to_string()).or_default(),
        };
        let object = match versions.get_mut(etag) {
            Some(object) => object,
            None => {
                let lines = ObjectLines {
                    id: *next_object,
                    name: Arc::new(ObjectName {
                        store: store.to_string(),
                        key: key.to_string(),
                        etag: etag.to_string(),
                    }),
                    lines: HashMap::new(),
                };
                *next_object += 1;
                versions.entry(etag.to_string()).or_insert(lines)
            }
        };
        let previous = object.lines.insert(line, id);
        debug_assert!(previous.is_none(), "installed a line that was present");
        let placement = Placement {
            slot: id as usize,
            object: object.id,
            line,
            tenant: self.next_tenant,
        };
        self.next_tenant += 1;
        let name = Arc::clone(&object.name);
        let slot = &mut self.slots[id as usize];
        debug_assert!(matches!(slot.phase, Phase::Free) && slot.pins == 0);
        slot.phase = Phase::Inbound(flight);
        slot.owner = Some((name, placement));
        slot.pins = pins;
        slot.detached = false;
        slot.unverified = None;
        placement
    }

    /// Puts lines kept by an earlier process back in their slots, clean and unverified, before
    /// anything else uses the table. Skips a slot already taken and a line already present
    /// (an index may name one line in two slots: refetched before the old slot was reused).
    /// Returns how many were restored.
    pub fn restore(&mut self, lines: Vec<RestoredLine>) -> usize {
        let mut restored = 0;
        for line in lines {
            let id = line.slot;
            let name = (line.store.as_str(), line.key.as_str(), line.etag.as_str());
            let taken = self
                .slots
                .get(id as usize)
                .is_none_or(|slot| !matches!(slot.phase, Phase::Free));
            if taken || self.contains(name.0, name.1, name.2, line.line) {
                continue;
            }
            let (_, flight) = watch::channel(Progress::default());
            self.install(id, name, line.line, flight, 0);
            let slot = &mut self.slots[id as usize];
            slot.phase = Phase::Ready;
            slot.unverified = Some(line.check);
            self.lru_push(id);
            restored += 1;
        }
        let slots = &self.slots;
        self.free
            .retain(|&id| matches!(slots[id as usize].phase, Phase::Free));
        restored
    }

    /// A restored line's bytes passed their check: it is an ordinary clean line from now on.
    pub fn verified(&mut self, id: SlotId) {
        self.slots[id as usize].unverified = None;
    }

    /// A restored line's bytes failed their check: it leaves the catalog (the next read fetches
    /// it) and its slot is freed once its readers are gone.
    pub fn reject(&mut self, id: SlotId) {
        if self.slots[id as usize].unverified.take().is_some() {
            self.detach(id);
        }
    }

    /// The name of the object whose line an inbound slot's fill just completed, if the line is
    /// still in the catalog (worth keeping for the next process).
    pub fn attached_name(&self, id: SlotId) -> Option<Arc<ObjectName>> {
        let slot = &self.slots[id as usize];
        if slot.detached {
            return None;
        }
        slot.owner.as_ref().map(|(name, _)| Arc::clone(name))
    }

    /// The fill of an inbound slot stored the whole line. Returns the placement to release if the
    /// line was invalidated meanwhile and nobody is waiting on it.
    pub fn fill_succeeded(&mut self, id: SlotId) -> Option<Placement> {
        let slot = &mut self.slots[id as usize];
        slot.phase = Phase::Ready;
        match (slot.pins, slot.detached) {
            (0, false) => {
                self.lru_push(id);
                None
            }
            (0, true) => self.free_slot(id),
            _ => None,
        }
    }

    /// The fill of an inbound slot failed: the line leaves the catalog (so the next read
    /// retries), and the slot is freed once its waiters have seen the failure.
    pub fn fill_failed(&mut self, id: SlotId) -> Option<Placement> {
        self.detach(id);
        let slot = &mut self.slots[id as usize];
        slot.phase = Phase::Failed;
        if slot.pins == 0 {
            self.free_slot(id)
        } else {
            None
        }
    }

    /// Drops every line of `key` in `store`, whatever its ETag. Lines being read or fetched are
    /// detached (never findable, never made clean) and freed when their readers are done; the
    /// others are freed now and their placements returned for release.
    pub fn invalidate(&mut self, store: &str, key: &str) -> Vec<Placement> {
        let Some(keys) = self.catalog.get_mut(store) else {
            return Vec::new();
        };
        let Some(versions) = keys.remove(key) else {
            return Vec::new();
        };
        if keys.is_empty() {
            self.catalog.remove(store);
        }
        let mut released = Vec::new();
        for id in versions.into_values().flat_map(|o| o.lines.into_values()) {
            let slot = &mut self.slots[id as usize];
            slot.detached = true;
            if slot.pins == 0 && matches!(slot.phase, Phase::Ready) {
                self.lru_remove(id);
                released.extend(self.free_slot(id));
            }
        }
        released
    }

    fn placement(&self, id: SlotId) -> Placement {
        match &self.slots[id as usize].owner {
            Some((_, placement)) => *placement,
            None => unreachable!("catalog points at an unowned slot"),
        }
    }

    /// Removes the slot's line from the catalog, if it is still there.
    fn detach(&mut self, id: SlotId) {
        let slot = &mut self.slots[id as usize];
        if slot.detached {
            return;
        }
        slot.detached = true;
        let Some((name, placement)) = &slot.owner else {
            return;
        };
        let Some(keys) = self.catalog.get_mut(&name.store) else {
            return;
        };
        let Some(versions) = keys.get_mut(&name.key) else {
            return;
        };
        let Some(object) = versions.get_mut(&name.etag) else {
            return;
        };
        object.lines.remove(&placement.line);
        if object.lines.is_empty() {
            versions.remove(&name.etag);
            if versions.is_empty() {
                keys.remove(&name.key);
                if keys.is_empty() {
                    self.catalog.remove(&name.store);
                }
            }
        }
    }

    /// Returns a detached, unpinned, settled slot to the free list.
    fn free_slot(&mut self, id: SlotId) -> Option<Placement> {
        let slot = &mut self.slots[id as usize];
        debug_assert!(slot.detached && slot.pins == 0 && !slot.in_lru);
        slot.phase = Phase::Free;
        slot.detached = false;
        slot.unverified = None;
        let released = slot.owner.take().map(|(_, placement)| placement);
        self.free.push(id);
        released
    }

    fn lru_push(&mut self, id: SlotId) {
        let old_newest = self.newest;
        let slot = &mut self.slots[id as usize];
        debug_assert!(!slot.in_lru);
        slot.in_lru = true;
        slot.older = old_newest;
        slot.newer = NIL;
        if old_newest == NIL {
            self.oldest = id;
        } else {
            self.slots[old_newest as usize].newer = id;
        }
        self.newest = id;
    }

    fn lru_remove(&mut self, id: SlotId) {
        let slot = &mut self.slots[id as usize];
        if !slot.in_lru {
            return;
        }
        slot.in_lru = false;
        let (newer, older) = (slot.newer, slot.older);
        slot.newer = NIL;
        slot.older = NIL;
        if newer == NIL {
            self.newest = older;
        } else {
            self.slots[newer as usize].older = older;
        }
        if older == NIL {
            self.oldest = newer;
        } else {
            self.slots[older as usize].newer = newer;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NAME: (&str, &str, &str) = ("s", "k", "e");

    fn flight() -> Flight {
        watch::channel(Progress::default()).1
    }

    /// Installs line `line` of NAME and completes its fill, leaving it clean and unpinned.
    fn fill(table: &mut Table, line: u64) -> SlotId {
        let claimed = table.claim().expect("a slot");
        table.install(claimed.slot, NAME, line, flight(), 0);
        table.fill_succeeded(claimed.slot);
        claimed.slot
    }

    #[test]
    fn eviction_takes_the_least_recently_used_clean_line() {
        let mut table = Table::new(3);
        for line in 0..3 {
            fill(&mut table, line);
        }
        // Touch line 0: line 1 is now the oldest.
        table.pin("s", "k", "e", 0).expect("present");
        table.unpin(0);
        let claimed = table.claim().expect("an evictable slot");
        assert_eq!(claimed.evicted.map(|p| p.line), Some(1));
        assert!(!table.contains("s", "k", "e", 1));
        assert!(table.contains("s", "k", "e", 0));
    }

    #[test]
    fn pinned_and_inbound_lines_are_never_evicted() {
        let mut table = Table::new(2);
        fill(&mut table, 0);
        let claimed = table.claim().expect("free slot");
        table.install(claimed.slot, NAME, 1, flight(), 0);
        table.pin("s", "k", "e", 0).expect("present");
        assert!(table.claim().is_none());
    }

    #[test]
    fn invalidated_pinned_line_is_freed_by_its_last_reader() {
        let mut table = Table::new(1);
        let id = fill(&mut table, 0);
        table.pin("s", "k", "e", 0).expect("present");
        assert!(table.invalidate("s", "k").is_empty());
        assert!(!table.contains("s", "k", "e", 0));
        assert_eq!(table.resident(), 1);
        assert!(table.unpin(id).is_some());
        assert_eq!(table.resident(), 0);
    }

    #[test]
    fn invalidated_inbound_line_is_freed_not_made_clean() {
        let mut table = Table::new(1);
        let claimed = table.claim().expect("free slot");
        table.install(claimed.slot, NAME, 0, flight(), 0);
        table.invalidate("s", "k");
        assert!(table.fill_succeeded(claimed.slot).is_some());
        assert_eq!(table.resident(), 0);
        assert!(!table.contains("s", "k", "e", 0));
    }
}
