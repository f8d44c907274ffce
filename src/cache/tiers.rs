//! `cache_storage: tiered`: the mover that keeps lines in the right tier.
//!
//! New lines land in the RAM tier (while it has a free slot); the mover keeps a few RAM slots
//! free by moving RAM's least recently used clean lines down to the main (disk) tier —
//! *demotion*, instead of dropping them — and moves a main-tier line that is read again a second
//! or more after it arrived back up to RAM — *promotion*. Only the main tier evicts. Every move
//! is a [`Migration`]: optimistic, never blocking a reader and never serving mixed bytes (see
//! `Table::finish_migration`).
//!
//! The mover is one thread of its own, woken by the read path when there is work
//! (`Table::mover_has_work`); copies of whole lines (a page fault on the disk file may wait for
//! the disk) never run on the async runtime. It ends with the cache.

use std::sync::Weak;
use std::sync::mpsc::{self, Receiver, SyncSender};

use super::line_cache::Shared;
use super::stats::bump;
use super::table::{Migration, Placement, SlotId, Table};

/// The mover's doorbell: a wake-up is one unit in a queue of one, so ringing never blocks and
/// rings while it works fold into one more round.
pub(super) struct Doorbell(SyncSender<()>);

impl Doorbell {
    /// Rings if `table` gives the mover something to do. Called under the table lock.
    pub fn ring_if_needed(&self, table: &Table) {
        if table.mover_has_work() {
            let _ = self.0.try_send(());
        }
    }
}

/// Starts the mover of `shared`'s tiers; it stops once the cache is dropped.
pub(super) fn start(shared: Weak<Shared>, line_size: usize) -> std::io::Result<Doorbell> {
    let (tx, rx) = mpsc::sync_channel(1);
    std::thread::Builder::new()
        .name("msfs-cache-tiers".into())
        .spawn(move || run(shared, rx, line_size))?;
    Ok(Doorbell(tx))
}

fn run(shared: Weak<Shared>, wakes: Receiver<()>, line_size: usize) {
    let mut buf = vec![0u8; line_size];
    // Ends when the cache (and with it the doorbell) is dropped.
    while wakes.recv().is_ok() {
        let Some(shared) = shared.upgrade() else {
            return;
        };
        move_lines(&shared, &mut buf);
    }
}

/// One round: demotions until RAM has its reserve of free slots, then the queued promotions
/// (each demoting one more line first when RAM has no free slot), and again until nothing is
/// queued: promotions may have used up the reserve, and no read may come to ring again.
fn move_lines(shared: &Shared, buf: &mut [u8]) {
    loop {
        demote_to_reserve(shared, buf);
        let queued = shared.table().take_promotions();
        if queued.is_empty() {
            return;
        }
        promote(shared, queued, buf);
    }
}

/// Moves RAM's least recently used clean lines down until RAM has its reserve of free slots.
fn demote_to_reserve(shared: &Shared, buf: &mut [u8]) {
    loop {
        let demotion = {
            let mut table = shared.table();
            match table.demotion_wanted() {
                true => table.begin_demotion(),
                false => None,
            }
        };
        match demotion {
            Some(m) => migrate(shared, m, buf, Move::Down),
            None => return,
        }
    }
}

/// Moves `queued` lines up to RAM, each demoting one more line first when RAM has no free slot.
fn promote(shared: &Shared, queued: Vec<(SlotId, Placement)>, buf: &mut [u8]) {
    for (src, from) in queued {
        let mut m = shared.table().begin_promotion(src, from);
        if m.is_none() && !shared.table().ram_has_room() {
            let demotion = shared.table().begin_demotion();
            if let Some(d) = demotion {
                migrate(shared, d, buf, Move::Down);
            }
            m = shared.table().begin_promotion(src, from);
        }
        match m {
            Some(m) => migrate(shared, m, buf, Move::Up),
            None => bump(&shared.counters.migrations_abandoned, 1),
        }
    }
}

/// Copies the line at `m.from` into `m.to`: straight from the source's memory when its storage
/// has an address (both tiers do), else through `buf`.
fn copy_line(shared: &Shared, m: &Migration, buf: &mut [u8]) -> std::io::Result<()> {
    let storage = &shared.storage;
    match storage.address(&m.from, 0, buf.len()) {
        Some(address) => {
            let ptr = address?;
            // SAFETY: `address` checked the line's bytes are inside the source's mapping, which
            // lives as long as the storage `shared` holds. The migration pinned the source
            // clean, so no fill writes those bytes until `finish_migration`; the destination is
            // another slot, reserved for this migration alone, so the ranges do not overlap.
            let line = unsafe { std::slice::from_raw_parts(ptr, buf.len()) };
            storage.write_at(&m.to, 0, line)
        }
        None => {
            storage.read(&m.from, 0, buf)?;
            storage.write_at(&m.to, 0, buf)
        }
    }
}

#[derive(Clone, Copy)]
enum Move {
    Up,
    Down,
}

/// Copies the line and commits or abandons the move.
fn migrate(shared: &Shared, m: Migration, buf: &mut [u8], direction: Move) {
    if let Some(evicted) = m.evicted {
        bump(&shared.counters.evictions, 1);
        shared.release([evicted]);
    }
    let copied = copy_line(shared, &m, buf);
    if let Err(e) = &copied {
        tracing::debug!(error = %e, "moving a cache line between tiers failed");
    }
    let (committed, released, kept) = {
        let mut table = shared.table();
        let (committed, released) = table.finish_migration(&m, copied.is_ok());
        // A line moved down into the kept file (a persistent cache) is indexed there.
        let kept = committed.then(|| table.kept_line(m.dst)).flatten();
        (committed, released, kept)
    };
    shared.release(released);
    if let (Some(stored), Some(persisted)) = (kept, &shared.persisted) {
        persisted.record(stored);
    }
    let counter = match (committed, direction) {
        (false, _) => &shared.counters.migrations_abandoned,
        (true, Move::Up) => &shared.counters.promotions,
        (true, Move::Down) => &shared.counters.demotions,
    };
    bump(counter, 1);
}
