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
use std::time::{Duration, Instant};

use tokio::sync::watch;

use super::persist::{Check, RestoredLine, Stored};
use crate::store::StoreError;

mod shed;

pub(super) type SlotId = u32;
const NIL: SlotId = SlotId::MAX;

/// A main-tier line read again at least this long after it arrived moves up to RAM: the reads
/// that follow a fetch (the stream that asked for it) are not a second use.
const PROMOTE_AFTER: Duration = Duration::from_secs(1);
/// The mover keeps at least this share (1/N, at least one slot) of the RAM tier free, so that
/// new lines land in RAM without waiting for a demotion.
const RAM_RESERVE_DIVISOR: usize = 8;

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
    /// The destination of a line moving between tiers (`begin_migration`): written by that
    /// migration alone, found by nobody until it commits.
    Reserved,
}

/// With `cache_storage: tiered`, slots `0..ram_slots` are the RAM tier and the rest the main
/// (disk) tier; without, every slot is main. Indexes the per-tier lists.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Tier {
    Main = 0,
    Ram = 1,
}

/// A line moving between tiers: optimistic, in the Mux paper's spirit. The source stays
/// readable (pinned, so neither evicted nor reused) while its bytes are copied into a reserved
/// destination; the move commits only if the source still holds the same line then
/// ([`Table::finish_migration`]), and is abandoned otherwise. Readers that pinned the source
/// before the commit keep reading it; nobody ever sees a half-copied destination.
#[derive(Debug)]
pub(super) struct Migration {
    pub src: SlotId,
    pub from: Placement,
    pub dst: SlotId,
    pub to: Placement,
    /// A main-tier line dropped to make room for a demotion.
    pub evicted: Option<Placement>,
    /// The line's check, which goes with it (see `Slot::check`).
    check: Option<Check>,
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
    /// With a persistent cache, the line's length and checksum: what the index records for it
    /// when it lies in a slot of the kept file (the main tier), kept with the line so that a
    /// line moving down from RAM is recorded there too.
    check: Option<Check>,
    /// No line has been installed here by this process: the only slots a restore (which may
    /// run while the cache serves, see `persist`) puts an earlier process's line back into.
    untouched: bool,
    in_lru: bool,
    /// When the line became clean in this slot (fetched, restored or moved here).
    ready_at: Instant,
    /// Queued to move up to RAM (`take_promotions`).
    queued: bool,
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
    /// Free slots, per tier.
    free: [Vec<SlotId>; 2],
    /// Most recently used end of each tier's LRU list.
    newest: [SlotId; 2],
    /// Least recently used end: the tier's next eviction (or, in RAM, demotion).
    oldest: [SlotId; 2],
    /// Slots `0..ram_slots` are the RAM tier.
    ram_slots: usize,
    /// Main-tier lines read again at least `promote_after` after they got there, to move up.
    promotions: Vec<(SlotId, Placement)>,
    promote_after: Duration,
    /// Lookups that found their line clean in the RAM tier.
    ram_hits: u64,
    catalog: HashMap<String, HashMap<String, Versions>>,
    next_object: u64,
    next_tenant: u64,
}

impl Table {
    /// A table of `lines` free slots; `lines` must be below `u32::MAX`.
    #[cfg(test)]
    pub fn new(lines: usize) -> Table {
        Table::tiered(0, lines)
    }

    /// A table of `ram` RAM-tier slots (`0..ram`) over `main` main-tier ones; `ram + main`
    /// must be below `u32::MAX`.
    pub fn tiered(ram: usize, main: usize) -> Table {
        let lines = ram + main;
        let slots = (0..lines)
            .map(|_| Slot {
                phase: Phase::Free,
                owner: None,
                pins: 0,
                detached: false,
                unverified: None,
                check: None,
                untouched: true,
                in_lru: false,
                ready_at: Instant::now(),
                queued: false,
                newer: NIL,
                older: NIL,
            })
            .collect();
        Table {
            slots,
            // Reversed so that slots are handed out from the lowest up.
            free: [
                (ram as SlotId..lines as SlotId).rev().collect(),
                (0..ram as SlotId).rev().collect(),
            ],
            newest: [NIL; 2],
            oldest: [NIL; 2],
            ram_slots: ram,
            promotions: Vec::new(),
            promote_after: PROMOTE_AFTER,
            ram_hits: 0,
            catalog: HashMap::new(),
            next_object: 0,
            next_tenant: 0,
        }
    }

    fn tier(&self, id: SlotId) -> Tier {
        if (id as usize) < self.ram_slots {
            Tier::Ram
        } else {
            Tier::Main
        }
    }

    /// Slots holding a line in any phase (not on the free list).
    pub fn resident(&self) -> usize {
        self.slots.len() - self.free[0].len() - self.free[1].len()
    }

    /// RAM-tier slots holding a line, and lookups that found their line clean there.
    pub fn ram_usage(&self) -> (usize, u64) {
        (
            self.ram_slots - self.free[Tier::Ram as usize].len(),
            self.ram_hits,
        )
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
            Phase::Free | Phase::Failed | Phase::Reserved => return None,
        };
        if matches!(pinned, Pinned::Ready(_)) && self.ram_slots > 0 {
            self.note_reuse(id, placement);
        }
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

    /// A slot for a new line: a free RAM-tier one (new lines land in RAM; the mover keeps a
    /// few free, see `demotion_wanted`), else a free main-tier one, or else the main tier's
    /// least recently used clean line, evicted. `None` when every main slot is inbound or
    /// pinned.
    pub fn claim(&mut self) -> Option<Claimed> {
        if let Some(slot) = self.free[Tier::Ram as usize].pop() {
            return Some(Claimed {
                slot,
                evicted: None,
            });
        }
        self.claim_in(Tier::Main)
    }

    fn claim_in(&mut self, tier: Tier) -> Option<Claimed> {
        if let Some(slot) = self.free[tier as usize].pop() {
            return Some(Claimed {
                slot,
                evicted: None,
            });
        }
        let victim = self.oldest[tier as usize];
        if victim == NIL {
            return None;
        }
        self.lru_remove(victim);
        self.detach(victim);
        let slot = &mut self.slots[victim as usize];
        slot.phase = Phase::Free;
        slot.queued = false;
        let evicted = slot.owner.take().map(|(_, placement)| placement);
        Some(Claimed {
            slot: victim,
            evicted,
        })
    }

    /// A pin found `id` clean: a hit in RAM, or, in the main tier, a line read again
    /// `promote_after` after it arrived, queued to move up.
    fn note_reuse(&mut self, id: SlotId, placement: Placement) {
        if self.tier(id) == Tier::Ram {
            self.ram_hits += 1;
            return;
        }
        let slot = &mut self.slots[id as usize];
        if !slot.queued
            && slot.unverified.is_none()
            && slot.ready_at.elapsed() >= self.promote_after
        {
            slot.queued = true;
            self.promotions.push((id, placement));
        }
    }

    /// The lines queued to move up to RAM, oldest request first.
    pub fn take_promotions(&mut self) -> Vec<(SlotId, Placement)> {
        std::mem::take(&mut self.promotions)
    }

    /// Lines move up as soon as they are read again (tests).
    #[cfg(test)]
    pub fn promote_at_once(&mut self) {
        self.promote_after = Duration::ZERO;
    }

    /// Whether the RAM tier is short of free slots for new lines and has a clean line to move
    /// down.
    pub fn demotion_wanted(&self) -> bool {
        let reserve = (self.ram_slots / RAM_RESERVE_DIVISOR).max(1);
        self.ram_slots > 0
            && self.free[Tier::Ram as usize].len() < reserve
            && self.oldest[Tier::Ram as usize] != NIL
    }

    /// Whether the mover has anything to do.
    pub fn mover_has_work(&self) -> bool {
        !self.promotions.is_empty() || self.demotion_wanted()
    }

    /// Whether the RAM tier has a free slot.
    pub fn ram_has_room(&self) -> bool {
        !self.free[Tier::Ram as usize].is_empty()
    }

    /// Starts moving the RAM tier's least recently used clean line down to the main tier
    /// (evicting the main tier's least recently used line if it has no free slot).
    pub fn begin_demotion(&mut self) -> Option<Migration> {
        let victim = self.oldest[Tier::Ram as usize];
        if victim == NIL {
            return None;
        }
        let from = self.placement(victim);
        self.begin_migration(victim, from, Tier::Main)
    }

    /// Starts moving queued line `src` (if it still holds `from`) up to a free RAM slot.
    pub fn begin_promotion(&mut self, src: SlotId, from: Placement) -> Option<Migration> {
        let slot = &mut self.slots[src as usize];
        if slot.owner.as_ref().map(|(_, p)| *p) != Some(from) {
            return None; // evicted, and perhaps reused, since it was queued
        }
        slot.queued = false;
        self.begin_migration(src, from, Tier::Ram)
    }

    fn begin_migration(&mut self, src: SlotId, from: Placement, to: Tier) -> Option<Migration> {
        let slot = &self.slots[src as usize];
        let movable = !slot.detached
            && matches!(slot.phase, Phase::Ready)
            && slot.unverified.is_none()
            && slot.owner.as_ref().map(|(_, p)| *p) == Some(from)
            && self.tier(src) != to;
        if !movable {
            return None;
        }
        let claimed = match to {
            Tier::Main => self.claim_in(Tier::Main)?,
            // RAM is never evicted to make room: its lines are moved down first.
            Tier::Ram => Claimed {
                slot: self.free[Tier::Ram as usize].pop()?,
                evicted: None,
            },
        };
        self.lru_remove(src);
        self.slots[src as usize].pins += 1;
        let to_placement = Placement {
            slot: claimed.slot as usize,
            tenant: self.next_tenant,
            ..from
        };
        self.next_tenant += 1;
        let dst = &mut self.slots[claimed.slot as usize];
        dst.phase = Phase::Reserved;
        dst.untouched = false;
        Some(Migration {
            src,
            from,
            dst: claimed.slot,
            to: to_placement,
            evicted: claimed.evicted,
            check: self.slots[src as usize].check,
        })
    }

    /// Ends a migration whose copy succeeded (`copied`) or not. It commits only if the source
    /// still holds the same line (not invalidated meanwhile): the catalog then points at the
    /// destination, and the source is freed once its last reader is gone. Returns whether it
    /// committed, and placements to release.
    pub fn finish_migration(&mut self, m: &Migration, copied: bool) -> (bool, Vec<Placement>) {
        let src = &self.slots[m.src as usize];
        let name = match &src.owner {
            Some((name, placement)) if copied && !src.detached && *placement == m.from => {
                Some(Arc::clone(name))
            }
            _ => None,
        };
        let mut released = Vec::new();
        let Some(name) = name else {
            let dst = &mut self.slots[m.dst as usize];
            dst.phase = Phase::Free;
            let tier = self.tier(m.dst);
            self.free[tier as usize].push(m.dst);
            released.push(m.to);
            released.extend(self.unpin(m.src));
            return (false, released);
        };
        if let Some(object) = self
            .catalog
            .get_mut(&name.store)
            .and_then(|keys| keys.get_mut(&name.key))
            .and_then(|versions| versions.get_mut(&name.etag))
        {
            object.lines.insert(m.from.line, m.dst);
        }
        let dst = &mut self.slots[m.dst as usize];
        dst.phase = Phase::Ready;
        dst.owner = Some((name, m.to));
        dst.pins = 0;
        dst.detached = false;
        dst.unverified = None;
        dst.check = m.check;
        dst.queued = false;
        dst.ready_at = Instant::now();
        self.lru_push(m.dst);
        // Out of the catalog already (it points at the destination): not `detach`.
        self.slots[m.src as usize].detached = true;
        released.extend(self.unpin(m.src));
        (true, released)
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
        slot.check = None;
        slot.untouched = false;
        placement
    }

    /// Puts lines kept by an earlier process back in their slots, clean and unverified. Skips a
    /// slot this process has used (its index record may be newer than `lines`) and a line
    /// already present (fetched meanwhile, or named twice by an index: refetched before the old
    /// slot was reused). Returns how many were restored.
    pub fn restore(&mut self, lines: Vec<RestoredLine>) -> usize {
        let mut restored = 0;
        for line in lines {
            // The kept file is the main tier, whose slots follow RAM's.
            let Some(id) = (line.slot as usize)
                .checked_add(self.ram_slots)
                .and_then(|id| SlotId::try_from(id).ok())
            else {
                continue;
            };
            let name = (line.store.as_str(), line.key.as_str(), line.etag.as_str());
            let taken = self
                .slots
                .get(id as usize)
                .is_none_or(|slot| !slot.untouched || !matches!(slot.phase, Phase::Free));
            if taken || self.contains(name.0, name.1, name.2, line.line) {
                continue;
            }
            let (_, flight) = watch::channel(Progress::default());
            self.install(id, name, line.line, flight, 0);
            let slot = &mut self.slots[id as usize];
            slot.phase = Phase::Ready;
            slot.unverified = Some(line.check);
            slot.check = Some(line.check);
            self.lru_push(id);
            restored += 1;
        }
        // Restored lines lie in the main tier only. One pass over its free list per batch:
        // about a millisecond per million slots.
        let slots = &self.slots;
        if restored > 0 {
            self.free[Tier::Main as usize]
                .retain(|&id| matches!(slots[id as usize].phase, Phase::Free));
        }
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

    /// A persistent cache's line just filled into `id` (or moved there) has `check`: kept with
    /// the line, and returned as the index's record if the slot lies in the kept file (the main
    /// tier) and the line is still in the catalog (worth keeping for the next process).
    pub fn keep_check(&mut self, id: SlotId, check: Check) -> Option<Stored> {
        self.slots[id as usize].check = Some(check);
        self.kept_line(id)
    }

    /// The index's record of the clean line in `id`, if it lies in the kept file (the main
    /// tier), is still in the catalog and has a check.
    pub fn kept_line(&self, id: SlotId) -> Option<Stored> {
        let slot = &self.slots[id as usize];
        let kept_slot = (id as usize).checked_sub(self.ram_slots)?;
        let (name, placement) = slot.owner.as_ref().filter(|_| !slot.detached)?;
        Some(Stored {
            slot: u32::try_from(kept_slot).ok()?,
            name: Arc::clone(name),
            line: placement.line,
            check: slot.check?,
        })
    }

    /// The fill of an inbound slot stored the whole line. Returns the placement to release if the
    /// line was invalidated meanwhile and nobody is waiting on it.
    pub fn fill_succeeded(&mut self, id: SlotId) -> Option<Placement> {
        let slot = &mut self.slots[id as usize];
        slot.phase = Phase::Ready;
        slot.ready_at = Instant::now();
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
        slot.check = None;
        slot.queued = false;
        let released = slot.owner.take().map(|(_, placement)| placement);
        let tier = self.tier(id);
        self.free[tier as usize].push(id);
        released
    }

    fn lru_push(&mut self, id: SlotId) {
        let tier = self.tier(id) as usize;
        let old_newest = self.newest[tier];
        let slot = &mut self.slots[id as usize];
        debug_assert!(!slot.in_lru);
        slot.in_lru = true;
        slot.older = old_newest;
        slot.newer = NIL;
        if old_newest == NIL {
            self.oldest[tier] = id;
        } else {
            self.slots[old_newest as usize].newer = id;
        }
        self.newest[tier] = id;
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
        let tier = self.tier(id) as usize;
        if newer == NIL {
            self.newest[tier] = older;
        } else {
            self.slots[newer as usize].older = older;
        }
        if older == NIL {
            self.oldest[tier] = newer;
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

    fn kept(slot: u32, line: u64) -> RestoredLine {
        RestoredLine {
            slot,
            store: NAME.0.into(),
            key: NAME.1.into(),
            etag: NAME.2.into(),
            line,
            check: Check { len: 1, crc: 0 },
        }
    }

    /// The restore runs while the cache serves: it fills only slots this process never used,
    /// and never a line present already, and what it restored is resident, not free.
    #[test]
    fn a_restore_fills_only_slots_this_process_never_used() {
        let mut table = Table::new(4);
        // Line 1 fetched meanwhile, into slot 0: the restore must not put it in slot 2 too.
        assert_eq!(fill(&mut table, 1), 0);
        // Slot 1 used for another object and freed again: its kept record is older than that.
        let other = table.claim().expect("a slot").slot;
        assert_eq!(other, 1);
        table.install(other, ("s", "other", "e"), 0, flight(), 0);
        table.fill_succeeded(other);
        table.invalidate("s", "other");
        assert_eq!(table.resident(), 1);
        let restored = table.restore(vec![kept(1, 0), kept(2, 1), kept(3, 3), kept(7, 4)]);
        assert_eq!(restored, 1, "only line 3, in slot 3");
        assert!(!table.contains("s", "k", "e", 0));
        assert!(matches!(
            table.pin("s", "k", "e", 3),
            Some(Pinned::Unverified(p, _)) if p.slot == 3
        ));
        assert_eq!(table.resident(), 2);
        // The free list lost slot 3: the next claims get slots 1 and 2.
        let mut claimed: Vec<_> = (0..2).map(|_| table.claim().expect("free").slot).collect();
        claimed.sort();
        assert_eq!(claimed, [1, 2]);
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
    fn a_move_commits_only_if_its_line_stayed_and_readers_of_the_old_slot_keep_it() {
        let mut table = Table::tiered(1, 2);
        let id = fill(&mut table, 0);
        assert_eq!(table.tier(id), Tier::Ram, "new lines land in RAM");
        assert!(table.demotion_wanted(), "RAM has no free slot left");
        let m = table.begin_demotion().expect("a clean RAM line");
        assert_eq!(table.tier(m.dst), Tier::Main);
        // A reader during the copy finds the source.
        let Some(Pinned::Ready(during)) = table.pin("s", "k", "e", 0) else {
            panic!("clean");
        };
        assert_eq!(during.slot, id as usize);
        let (committed, released) = table.finish_migration(&m, true);
        assert!(
            committed && released.is_empty(),
            "the reader still holds the source"
        );
        let Some(Pinned::Ready(after)) = table.pin("s", "k", "e", 0) else {
            panic!("clean");
        };
        assert_eq!(after.slot, m.dst as usize, "found at its new place");
        assert_eq!(
            table.unpin(id).map(|p| p.slot),
            Some(id as usize),
            "freed by its reader"
        );
        assert!(table.ram_has_room());
        table.unpin(m.dst);

        // Read again: queued to move up; invalidated during the copy: abandoned, both freed.
        table.promote_at_once();
        table.pin("s", "k", "e", 0).expect("present");
        table.unpin(m.dst);
        let (src, from) = table.take_promotions().pop().expect("queued");
        let up = table.begin_promotion(src, from).expect("room in RAM");
        table.invalidate("s", "k");
        let (committed, released) = table.finish_migration(&up, true);
        assert!(!committed);
        assert_eq!(released.len(), 2, "the destination and the source");
        assert_eq!(table.resident(), 0);
        assert!(!table.contains("s", "k", "e", 0));
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
