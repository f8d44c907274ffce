//! The line cache: one per process, shared by every mount and backend, serving object bytes out
//! of fixed-size lines keyed by (store id, object key, ETag, line index).
//!
//! A read looks its lines up under one short lock. Clean lines are pinned and copied out; lines
//! being fetched are pinned and waited for (single-flight: one fetch per line, however many
//! readers want it) — only until the fetch has stored the part the reader needs, when the
//! storage lets readers in while the rest of the line streams in; absent lines get a slot (a free one, or the least recently used clean line,
//! evicted) and a fetch task of their own, spawned so that it completes and fills the slot even if
//! the reader that started it goes away. A sequential reader also starts read-ahead fetches of
//! the following lines without waiting for them. When every slot is pinned or being fetched the
//! read is served straight from the store rather than waiting or exceeding capacity.
//!
//! The bookkeeping lives in [`super::table`], the bytes in one of the [`super::storage`] modes.

use std::fs::File;
use std::ops::Range;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use async_trait::async_trait;
use bytes::{Bytes, BytesMut};
use futures::future::try_join_all;
use futures::{StreamExt, TryStreamExt};
use tokio::sync::{Semaphore, watch};

use super::error::{CacheError, duplicate, storage_error};
use super::fetch::{Fill, RunLine, exact_length, spawn_fetch};
use super::persist::{self, Check, Persisted, ToRestore};
use super::stats::{Counters, bump};
use super::storage::{self, LineStorage};
use super::table::{Flight, Outcome, Pinned, Placement, Progress, SlotId, Table, Tier};
use super::tiers;
use super::{CacheStats, ObjectReader, ObjectVersion};
use crate::config::{CacheConfig, CacheStorage};
use crate::memory::{Pressure, Stage};
use crate::private_dir::PrivateDir;
use crate::store::{ObjectStore, StoreError};

mod pressure;
mod read_now;

/// Read-ahead in flight across the whole cache is bounded to this many streams' worth of
/// `cache_lines_to_prefetch`, and to half the lines, so that read-ahead can neither hold
/// unbounded fetch buffers nor crowd demand reads out of the cache. A prefetch that finds the
/// budget spent is skipped; the stream's next read asks again.
const PREFETCH_STREAMS: u64 = 8;

/// Read-ahead fetches consecutive lines with one ranged GET of up to this many bytes (and at
/// most a quarter of the window, at least one line). With small lines a GET per line costs the
/// cache and the server more CPU than the bytes do; with runs as big as the window, too few
/// GETs stream at once (measured on a cold 1 GiB read: see `run_lines`).
const READ_AHEAD_RUN_BYTES: u64 = 8 << 20;

/// `warm` reads its range in pieces of this size, this many at once: each piece a demand read
/// of its lines, so a few pieces keep several GETs going without read-ahead's budget.
const WARM_PIECE: u64 = 8 << 20;
const WARM_PIECES_IN_FLIGHT: usize = 4;

/// Lines that objects lent whole to the kernel ([`LineCache::pin_object_file`]) may hold
/// pinned, as a share of all lines: the rest stays free to turn over for every other reader.
const OBJECT_FILE_SHARE_DIVISOR: usize = 2;

/// The node-wide line cache. Build one per process with [`LineCache::new`] and share the `Arc`.
pub struct LineCache {
    shared: Arc<Shared>,
    dir: CacheDir,
}

/// Where the cache's files live.
#[derive(Debug)]
enum CacheDir {
    /// Removed when the cache is dropped, even if a fetch task still holds `shared`: such a task
    /// then fails to write its line and settles it as abandoned.
    Private(PrivateDir),
    /// `cache_persistent`: kept, with its index, for the next process (see `persist`).
    Kept(std::path::PathBuf),
}

impl CacheDir {
    fn path(&self) -> &Path {
        match self {
            CacheDir::Private(dir) => dir.path(),
            CacheDir::Kept(path) => path,
        }
    }
}

/// What the cache's background fetches share with it.
pub(super) struct Shared {
    line_size: u64,
    lines: usize,
    lines_to_prefetch: u64,
    /// Lines per read-ahead GET, and how many lines of a stream's window must be missing before
    /// its read-ahead goes out. A window of at least four runs keeps three or four GETs streaming
    /// while the reader consumes it. Measured with 1 MiB lines and a 32-line window, against
    /// a GET per line: 0.7 of the CPU per byte, and cold reads 0.62 → 0.78 of the server's speed.
    run_lines: u64,
    table: Mutex<Table>,
    pub(super) counters: Counters,
    prefetch_budget: Arc<Semaphore>,
    pub(super) storage: Arc<dyn LineStorage>,
    /// Lines pinned by [`PinnedObjectFile`]s; changed under the table lock.
    object_file_lines: AtomicUsize,
    /// The index of a persistent cache, told of every line filled.
    pub(super) persisted: Option<Persisted>,
    /// `cache_storage: tiered`: the RAM tier's size in lines, and the mover's doorbell.
    ram_lines: usize,
    pub(super) mover: Option<tiers::Doorbell>,
    /// The tier whose lines are this process's anonymous memory (`ram`, or `tiered`'s RAM
    /// tier), which it gives back under memory pressure; `None` for a cache in files.
    anon_tier: Option<Tier>,
    /// The process's memory pressure, once the engines tie the cache to it
    /// ([`LineCache::follow`]): read-ahead shrinks and new fetches wait under it.
    pressure: std::sync::OnceLock<Arc<Pressure>>,
    /// True once the lines an earlier process kept are all back (at once when there are none);
    /// closed if the restore ended without saying so. See [`LineCache::wait_for_kept_lines`].
    restored: watch::Receiver<bool>,
}

impl Shared {
    pub(super) fn table(&self) -> MutexGuard<'_, Table> {
        // The table is consistent between calls (no method panics half-way on valid input), so a
        // panic elsewhere while it was held does not make it unusable.
        self.table.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Drops the bytes of lines that left the table; outside the table lock.
    pub(super) fn release(&self, placements: impl IntoIterator<Item = Placement>) {
        for placement in placements {
            self.storage.release(&placement);
        }
    }

    fn stage(&self) -> Stage {
        self.pressure.get().map_or(Stage::Calm, |p| p.stage())
    }

    /// Bytes `range` of the object of line `line`, clamped to the object's end.
    fn line_range(&self, size: u64, line: u64) -> Range<u64> {
        let start = line.saturating_mul(self.line_size);
        start..start.saturating_add(self.line_size).min(size)
    }

    /// The lines a sequential read ending in line `last` of object `name` (of `size` bytes)
    /// should fetch ahead: the window's missing lines, once enough of them are missing to make
    /// a run (or the window reaches the object's end), so that one GET fetches several lines.
    fn read_ahead_due(
        &self,
        table: &Table,
        name: (&str, &str, &str),
        size: u64,
        last: u64,
    ) -> Vec<u64> {
        // Near the memory target the window is halved, over it there is none.
        let window =
            crate::memory::pressure::read_ahead_lines(self.stage(), self.lines_to_prefetch);
        if window == 0 {
            return Vec::new();
        }
        let object_last = (size - 1) / self.line_size;
        let ahead_last = last.saturating_add(window).min(object_last);
        let absent: Vec<u64> = (last.saturating_add(1)..=ahead_last)
            .filter(|line| !table.contains(name.0, name.1, name.2, *line))
            .collect();
        let enough = absent.len() as u64 >= self.run_lines.min(window)
            || (ahead_last == object_last && !absent.is_empty());
        if enough { absent } else { Vec::new() }
    }
}

/// Puts the lines an earlier process kept back into `shared`'s table in the background, a batch
/// per lock, and says so on `done` at the end (see `persist`).
fn start_restore(
    shared: &Arc<Shared>,
    persisted: &Persisted,
    kept: ToRestore,
    dir: &Path,
    done: watch::Sender<bool>,
) {
    let weak = Arc::downgrade(shared);
    let deliver = move |batch| {
        // Gone: the cache was dropped, nothing is left to restore into.
        let Some(shared) = weak.upgrade() else {
            return false;
        };
        let restored = shared.table().restore(batch);
        bump(&shared.counters.lines_restored, restored as u64);
        true
    };
    let weak = Arc::downgrade(shared);
    let dir = dir.to_path_buf();
    let finished = move |took: std::time::Duration| {
        if let Some(shared) = weak.upgrade() {
            let lines = shared.counters.lines_restored.load(Ordering::Relaxed);
            tracing::info!(dir = %dir.display(), lines, seconds = took.as_secs_f64(),
                "cache lines kept by an earlier process restored (checked at first read)");
        }
        done.send_replace(true);
    };
    persisted.start_restore(kept, deliver, finished);
}

impl LineCache {
    /// Creates the cache and its private directory under `config.dir_path` (the system temp dir
    /// when unset). Storage is reserved, not filled: untouched lines cost no memory or disk.
    pub fn new(config: &CacheConfig) -> Result<Arc<LineCache>, CacheError> {
        let geometry = |reason| CacheError::Geometry {
            line_size: config.line_size,
            lines: config.lines,
            reason,
        };
        let line_size = usize::try_from(config.line_size)
            .ok()
            .filter(|size| *size > 0)
            .ok_or(geometry("cache_line_size must be at least 1 byte"))?;
        let lines = usize::try_from(config.lines)
            .ok()
            .filter(|lines| *lines > 0 && *lines < SlotId::MAX as usize)
            .ok_or(geometry("cache_lines must be between 1 and 2^32 - 2"))?;
        let ram_lines = match config.storage {
            CacheStorage::Tiered => usize::try_from(config.ram_lines)
                .ok()
                .filter(|ram| *ram > 0 && ram.saturating_add(lines) < SlotId::MAX as usize)
                .ok_or(geometry(
                    "cache_ram_lines must be at least 1, and cache_ram_lines + cache_lines below \
                     2^32 - 2",
                ))?,
            _ => 0,
        };
        let parent = config.dir_path.clone().unwrap_or_else(std::env::temp_dir);
        let kept = match config.persistent {
            true => persist::open(&parent, line_size, lines)?,
            false => None,
        };
        let table = Table::tiered(ram_lines, lines);
        let (dir, storage, persisted, to_restore) = match kept {
            Some(opened) => {
                let storage = storage::open_kept(&opened.dir, line_size, lines, ram_lines)?;
                let dir = CacheDir::Kept(opened.dir);
                (dir, storage, Some(opened.persisted), opened.to_restore)
            }
            None => {
                let dir = PrivateDir::create(&parent, "msfs-cache")
                    .map_err(|(path, source)| CacheError::CreateDir { path, source })?;
                let storage =
                    storage::open(config.storage, dir.path(), line_size, lines, ram_lines)?;
                (CacheDir::Private(dir), storage, None, None)
            }
        };
        let counters = Counters::default();
        let (restore_done, restored) = watch::channel(to_restore.is_none());
        let budget = config
            .lines_to_prefetch
            .saturating_mul(PREFETCH_STREAMS)
            .min(lines as u64 / 2);
        tracing::debug!(
            dir = %dir.path().display(),
            line_size,
            lines,
            storage = ?config.storage,
            "line cache ready"
        );
        let mut mover_error = None;
        let shared = Arc::new_cyclic(|weak| Shared {
            mover: match ram_lines {
                0 => None,
                _ => tiers::start(weak.clone(), line_size)
                    .map_err(|e| mover_error = Some(e))
                    .ok(),
            },
            ram_lines,
            anon_tier: match config.storage {
                CacheStorage::Tiered => Some(Tier::Ram),
                CacheStorage::Ram => Some(Tier::Main),
                CacheStorage::MappedFile | CacheStorage::PerInodeFile => None,
            },
            pressure: std::sync::OnceLock::new(),
            line_size: config.line_size,
            lines,
            lines_to_prefetch: config.lines_to_prefetch,
            run_lines: (READ_AHEAD_RUN_BYTES / config.line_size)
                .min(config.lines_to_prefetch / 4)
                .max(1),
            table: Mutex::new(table),
            counters,
            prefetch_budget: Arc::new(Semaphore::new(budget as usize)),
            storage,
            object_file_lines: AtomicUsize::new(0),
            persisted,
            restored,
        });
        if let Some(e) = mover_error {
            return Err(CacheError::Mover(e));
        }
        if let (Some(kept), Some(persisted)) = (to_restore, &shared.persisted) {
            start_restore(&shared, persisted, kept, dir.path(), restore_done);
        }
        Ok(Arc::new(LineCache { shared, dir }))
    }

    /// Before this process exits for a successor (an upgrade's hand-off): the index of a
    /// persistent cache is written and closed, so that the successor opens it and keeps the
    /// lines; a private directory is unlocked, so that the successor reclaims its space at once.
    pub fn leave_to_successor(&self) {
        if let Some(persisted) = &self.shared.persisted {
            persisted.close();
        }
        if let CacheDir::Private(dir) = &self.dir {
            dir.leave();
        }
    }

    /// The directory holding the cache's files: private and removed when the cache is dropped,
    /// or, with `cache_persistent`, kept for the next process.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    pub fn line_size(&self) -> u64 {
        self.shared.line_size
    }

    /// The capacity in lines (with `cache_storage: tiered`, of both tiers).
    pub fn lines(&self) -> usize {
        self.shared.lines + self.shared.ram_lines
    }

    /// The capacity in bytes: `cache_line_size × cache_lines` (`+ cache_ram_lines`).
    pub fn capacity_bytes(&self) -> u64 {
        self.shared.line_size.saturating_mul(self.lines() as u64)
    }

    pub fn stats(&self) -> CacheStats {
        let (resident, (ram_resident, ram_hits)) = {
            let table = self.shared.table();
            (table.resident(), table.ram_usage())
        };
        CacheStats {
            lines_resident: resident as u64,
            lines_capacity: self.lines() as u64,
            line_size: self.line_size(),
            ram_hits,
            ram_lines_resident: ram_resident as u64,
            ram_lines_capacity: self.shared.ram_lines as u64,
            ..self.shared.counters.snapshot()
        }
    }

    /// Main-tier lines move up as soon as they are read again, not a second later (tests).
    #[cfg(test)]
    pub(super) fn promote_at_once(&self) {
        self.shared.table().promote_at_once();
    }

    /// Drops every line of `key` in the store with cache scope `store_id` (its
    /// `ObjectStore::cache_scope`), whatever its ETag. A fetch of
    /// one of its lines that is still running completes for the readers already waiting on it
    /// (their bytes are of the version they asked for) but never becomes a clean line.
    pub fn invalidate(&self, store_id: &str, key: &str) {
        let released = self.shared.table().invalidate(store_id, key);
        self.shared.release(released);
    }

    /// Admits locally written bytes `offset..offset + bytes.len()` of `object` (as committed to
    /// the store with cache scope `store_id`) as clean lines: write-to-read promotion. Only lines the
    /// bytes cover entirely are admitted (the last line of the object counts as covered up to
    /// the object's end); lines already present are left alone. Admission goes in order and stops
    /// at the first line no slot can be had for: it evicts clean lines but never pinned or inbound
    /// ones. Returns how many lines were admitted.
    ///
    /// This writes into the cache's storage on the calling thread (a copy per line, or a
    /// `pwrite` in per-inode-file mode): call it from the write engine's workers or
    /// `spawn_blocking`, not from an async task.
    pub fn admit(
        &self,
        store_id: &str,
        object: &ObjectVersion,
        offset: u64,
        bytes: &[u8],
    ) -> usize {
        let shared = &self.shared;
        let end = offset.saturating_add(bytes.len() as u64).min(object.size);
        if object.etag.is_empty() || offset >= end {
            return 0;
        }
        let name = (store_id, object.key.as_str(), object.etag.as_str());
        let mut fills = Vec::new();
        let mut evicted = Vec::new();
        {
            let mut table = shared.table();
            let mut line = offset.div_ceil(shared.line_size);
            loop {
                let range = shared.line_range(object.size, line);
                if range.start >= range.end || range.end > end {
                    break;
                }
                if !table.contains(name.0, name.1, name.2, line) {
                    let Some(claimed) = table.claim() else {
                        break;
                    };
                    evicted.extend(claimed.evicted);
                    let (tx, rx) = watch::channel(Progress::default());
                    let placement = table.install(claimed.slot, name, line, rx, 0);
                    fills.push((claimed.slot, placement, tx, range));
                }
                line += 1;
            }
        }
        bump(&shared.counters.evictions, evicted.len() as u64);
        shared.release(evicted);
        let mut admitted = 0;
        for (slot, placement, tx, range) in fills {
            let fill = Fill::new(shared, slot, placement, tx, &object.key);
            let data = &bytes[(range.start - offset) as usize..(range.end - offset) as usize];
            if fill.store(data) {
                admitted += 1;
            }
        }
        admitted
    }

    /// Looks up the lines of `range` (non-empty, inside the object) under one lock, claiming and
    /// starting fetches for absent ones (and read-ahead when `sequential`), and returns what each
    /// line's part of the read is to be served from.
    fn plan(
        &self,
        store: &Arc<dyn ObjectStore>,
        object: &ObjectVersion,
        range: Range<u64>,
        sequential: bool,
    ) -> Vec<Segment> {
        let shared = &self.shared;
        let ls = shared.line_size;
        let first = range.start / ls;
        let last = (range.end - 1) / ls;
        let name = (
            store.cache_scope(),
            object.key.as_str(),
            object.etag.as_str(),
        );
        let mut planned = Vec::new();
        let mut fetches = Vec::new();
        let mut evicted = Vec::new();
        let (mut hits, mut waits, mut misses) = (0, 0, 0);
        {
            let mut table = shared.table();
            for line in first..=last {
                let line_range = shared.line_range(object.size, line);
                let part = range.start.max(line_range.start)..range.end.min(line_range.end);
                let found = match table.pin(name.0, name.1, name.2, line) {
                    Some(Pinned::Ready(placement)) => {
                        hits += 1;
                        Some((placement, None, None))
                    }
                    Some(Pinned::Unverified(placement, check)) => {
                        hits += 1;
                        Some((placement, None, Some(check)))
                    }
                    Some(Pinned::Inbound(placement, flight)) => {
                        waits += 1;
                        Some((placement, Some(flight), None))
                    }
                    None => table.claim().map(|claimed| {
                        misses += 1;
                        evicted.extend(claimed.evicted);
                        let (tx, rx) = watch::channel(Progress::default());
                        let placement = table.install(claimed.slot, name, line, rx.clone(), 1);
                        fetches.push((claimed.slot, placement, tx, line_range.clone(), None));
                        (placement, Some(rx), None)
                    }),
                };
                planned.push(match found {
                    Some((placement, flight, check)) => Planned::Line {
                        placement,
                        flight,
                        check,
                        line_len: (line_range.end - line_range.start) as usize,
                        offset: (part.start - line_range.start) as usize,
                        part,
                    },
                    None => Planned::Direct(part),
                });
            }
            if sequential {
                for line in shared.read_ahead_due(&table, name, object.size, last) {
                    let Ok(permit) = Arc::clone(&shared.prefetch_budget).try_acquire_owned() else {
                        break;
                    };
                    let Some(claimed) = table.claim() else {
                        break;
                    };
                    evicted.extend(claimed.evicted);
                    let (tx, rx) = watch::channel(Progress::default());
                    let placement = table.install(claimed.slot, name, line, rx, 0);
                    let line_range = shared.line_range(object.size, line);
                    fetches.push((claimed.slot, placement, tx, line_range, Some(permit)));
                }
            }
            if let Some(mover) = &shared.mover {
                mover.ring_if_needed(&table);
            }
        }
        let counters = &shared.counters;
        bump(&counters.hits, hits);
        bump(&counters.waits, waits);
        bump(&counters.misses, misses);
        bump(&counters.prefetches, fetches.len() as u64 - misses);
        bump(&counters.evictions, evicted.len() as u64);
        shared.release(evicted);
        // Fetches start before anyone waits on them; demanded lines were pushed first, each a
        // run of its own, then read-ahead in order, consecutive lines grouped into runs. The
        // read-ahead goes out once the first demanded line has begun to arrive (`start_after`).
        let demanded = fetches
            .iter()
            .find(|fetch| fetch.4.is_none())
            .map(|fetch| fetch.2.subscribe());
        let mut run: Vec<RunLine> = Vec::new();
        let mut permits = Vec::new();
        for (slot, placement, tx, range, permit) in fetches {
            let joins = permit.is_some()
                && !permits.is_empty()
                && (run.len() as u64) < shared.run_lines
                && run.last().is_some_and(|l| l.range.end == range.start);
            if !joins && !run.is_empty() {
                let run = std::mem::take(&mut run);
                let after = (!permits.is_empty()).then(|| demanded.clone()).flatten();
                spawn_fetch(
                    Arc::clone(store),
                    &object.key,
                    &object.etag,
                    run,
                    std::mem::take(&mut permits),
                    after,
                );
            }
            let fill = Fill::new(shared, slot, placement, tx, &object.key);
            run.push(RunLine { fill, range });
            permits.extend(permit);
        }
        if !run.is_empty() {
            let after = (!permits.is_empty()).then_some(demanded).flatten();
            spawn_fetch(
                Arc::clone(store),
                &object.key,
                &object.etag,
                run,
                permits,
                after,
            );
        }
        planned
            .into_iter()
            .map(|planned| match planned {
                Planned::Line {
                    placement,
                    flight,
                    check,
                    line_len,
                    offset,
                    part,
                } => Segment::Line {
                    pin: PinGuard {
                        shared: Arc::clone(shared),
                        slot: placement.slot as SlotId,
                    },
                    placement,
                    flight,
                    check: check.map(|check| (check, line_len)),
                    offset,
                    part,
                },
                Planned::Direct(part) => Segment::Direct(part),
            })
            .collect()
    }

    /// One line's part of a read.
    async fn serve(
        &self,
        store: &Arc<dyn ObjectStore>,
        object: &ObjectVersion,
        segment: Segment,
    ) -> Result<Bytes, StoreError> {
        let (pin, placement, flight, check, offset, part) = match segment {
            Segment::Direct(part) => return self.direct(store, object, part).await,
            Segment::Line {
                pin,
                placement,
                flight,
                check,
                offset,
                part,
            } => (pin, placement, flight, check, offset, part),
        };
        if let Some((check, line_len)) = check
            && !self.verify(placement, check, line_len, &object.key).await
        {
            // The bad line left the catalog: read again, which fetches it into a fresh slot.
            // (Boxed by `async_trait`, so the recursion has a size; it ends there, as a
            // fetched line is never unverified.)
            drop(pin);
            return ObjectReader::read(self, store, object, part, false).await;
        }
        let len = (part.end - part.start) as usize;
        if let Some(mut flight) = flight {
            // Served as soon as the fill has stored this part, not when the whole line is in:
            // a reader at the start of a line being fetched does not wait for its end.
            let needed = offset + len;
            let progress = flight
                .wait_for(|p| p.filled >= needed || p.outcome.is_some())
                .await
                .map(|progress| progress.clone())
                .unwrap_or_default();
            match progress.outcome {
                _ if progress.filled >= needed => {}
                Some(Outcome::Ready) => {}
                Some(Outcome::Failed(error)) => return Err(duplicate(&error)),
                Some(Outcome::Abandoned) | None => {
                    drop(pin);
                    return self.direct(store, object, part).await;
                }
            }
        }
        self.copy_out(pin, placement, offset, len, &object.key)
            .await
    }

    /// Fetches bytes `range` of `object` into the cache (`msfs warm`) without handing them to
    /// anyone, and returns how many of them were cached, or being fetched, before. Lines that
    /// cannot get a slot (every slot pinned or inbound) are read and dropped, as for a reader.
    pub async fn warm(
        &self,
        store: &Arc<dyn ObjectStore>,
        object: &ObjectVersion,
        range: Range<u64>,
    ) -> Result<u64, StoreError> {
        let end = range.end.min(object.size);
        if range.start >= end || object.etag.is_empty() {
            return Ok(0);
        }
        let shared = &self.shared;
        let cached_before = {
            let table = shared.table();
            (range.start / shared.line_size..=(end - 1) / shared.line_size)
                .filter(|line| {
                    table.contains(store.cache_scope(), &object.key, &object.etag, *line)
                })
                .map(|line| {
                    let lines = shared.line_range(object.size, line);
                    lines.end.min(end) - lines.start.max(range.start)
                })
                .sum()
        };
        let pieces = (range.start..end)
            .step_by(WARM_PIECE as usize)
            .map(|start| start..start.saturating_add(WARM_PIECE).min(end));
        futures::stream::iter(pieces)
            .map(|piece| self.read(store, object, piece, false))
            .buffer_unordered(WARM_PIECES_IN_FLIGHT)
            .try_for_each(|_| futures::future::ready(Ok(())))
            .await?;
        Ok(cached_before)
    }

    /// While the lines an earlier process kept are still going back (`persist`), a read of
    /// `range` that would fetch a line waits for the restore to end first: the line may be
    /// among them, and a restart should cost no GET for what was kept. A read of lines already
    /// present never waits.
    async fn wait_for_kept_lines(&self, scope: &str, object: &ObjectVersion, range: Range<u64>) {
        let ls = self.shared.line_size;
        let missing = {
            let table = self.shared.table();
            (range.start / ls..=(range.end - 1) / ls)
                .any(|line| !table.contains(scope, &object.key, &object.etag, line))
        };
        if missing {
            // An error is the restore gone without a word: nothing more to wait for.
            let _ = self.shared.restored.clone().wait_for(|done| *done).await;
        }
    }

    /// Blocks until the lines an earlier process kept are back (tests).
    #[cfg(test)]
    pub(super) fn wait_restored(&self) {
        let _ = futures::executor::block_on(self.shared.restored.clone().wait_for(|done| *done));
    }

    /// Checks a restored line (pinned by the caller) against the checksum it was indexed with,
    /// and settles it: an ordinary clean line if it holds `line_len` bytes that match, dropped
    /// from the cache (for the caller to fetch it again) if not.
    async fn verify(&self, placement: Placement, check: Check, line_len: usize, key: &str) -> bool {
        let shared = Arc::clone(&self.shared);
        // Reads the whole line, possibly from disk: off the runtime.
        let matches = tokio::task::spawn_blocking(move || {
            let len = check.len as usize;
            if len != line_len {
                return false;
            }
            let crc = match shared.storage.address(&placement, 0, len) {
                // SAFETY: `address` checked that the `len` bytes lie inside the storage's
                // mapping; the caller's pin keeps the clean line from being written meanwhile.
                Some(Ok(ptr)) => crc32fast::hash(unsafe { std::slice::from_raw_parts(ptr, len) }),
                Some(Err(_)) => return false,
                None => {
                    let mut buf = vec![0; len];
                    if shared.storage.read(&placement, 0, &mut buf).is_err() {
                        return false;
                    }
                    crc32fast::hash(&buf)
                }
            };
            crc == check.crc
        })
        .await
        .unwrap_or(false);
        let slot = placement.slot as SlotId;
        if matches {
            self.shared.table().verified(slot);
        } else {
            self.shared.table().reject(slot);
            bump(&self.shared.counters.lines_rejected, 1);
            tracing::warn!(
                key,
                line = placement.line,
                "a cache line kept from an earlier process does not match its checksum; \
                 fetching it again"
            );
        }
        matches
    }

    /// The `len` bytes at `offset` of a pinned clean line. Storage in this process's memory hands
    /// them out in place, the pin travelling with the `Bytes` (no copy: the FUSE reply is the
    /// only one); other storage copies them out, then unpins.
    async fn copy_out(
        &self,
        pin: PinGuard,
        placement: Placement,
        offset: usize,
        len: usize,
        key: &str,
    ) -> Result<Bytes, StoreError> {
        let storage = &self.shared.storage;
        if let Some(address) = storage.address(&placement, offset, len) {
            let ptr = address.map_err(|e| storage_error("read from cache", key, e))?;
            bump(&self.shared.counters.bytes_from_cache, len as u64);
            return Ok(Bytes::from_owner(PinnedBytes {
                ptr,
                len,
                _pin: pin,
            }));
        }
        let copy = move |pin: PinGuard| {
            let mut buf = vec![0; len];
            let read = pin.shared.storage.read(&placement, offset, &mut buf);
            // The pin is dropped only once the copy is done, even when the reader gave up on
            // this future meanwhile: the slot cannot be reused under the copy.
            drop(pin);
            read.map(|()| buf)
        };
        let copied = if len <= storage.inline_limit() {
            copy(pin)
        } else {
            tokio::task::spawn_blocking(move || copy(pin))
                .await
                .unwrap_or_else(|join| Err(std::io::Error::other(join.to_string())))
        };
        match copied {
            Ok(buf) => {
                bump(&self.shared.counters.bytes_from_cache, len as u64);
                Ok(Bytes::from(buf))
            }
            Err(e) => Err(storage_error("read from cache", key, e)),
        }
    }

    /// Serves `part` straight from the store, uncached.
    async fn direct(
        &self,
        store: &Arc<dyn ObjectStore>,
        object: &ObjectVersion,
        part: Range<u64>,
    ) -> Result<Bytes, StoreError> {
        let counters = &self.shared.counters;
        bump(&counters.uncached_reads, 1);
        let etag = (!object.etag.is_empty()).then_some(object.etag.as_str());
        let bytes = store.get_range(&object.key, part.clone(), etag).await?;
        bump(&counters.bytes_from_backend, bytes.len() as u64);
        exact_length(&object.key, bytes, part.end - part.start)
    }

    /// Lends `object` whole, as a file holding it byte for byte, to a reader outside this
    /// process — the kernel, by FUSE passthrough — if every line of it is cached and clean and
    /// the storage keeps one file per object (`per-inode-file`). Its lines stay pinned until the
    /// returned value is dropped, so they are neither evicted nor punched out of the file
    /// while the kernel may read them; at most half the cache's lines are lent this way.
    /// `cache_scope` is the store's [`ObjectStore::cache_scope`], as for reads.
    pub fn pin_object_file(
        &self,
        cache_scope: &str,
        object: &ObjectVersion,
    ) -> Option<PinnedObjectFile> {
        if object.etag.is_empty() || object.size == 0 {
            return None;
        }
        let lines = usize::try_from(object.size.div_ceil(self.shared.line_size)).ok()?;
        let placements = {
            let mut table = self.shared.table();
            let lent = self.shared.object_file_lines.load(Ordering::Relaxed);
            if lent.saturating_add(lines) > self.shared.lines / OBJECT_FILE_SHARE_DIVISOR {
                return None;
            }
            let placements =
                table.pin_all_ready(cache_scope, &object.key, &object.etag, lines as u64)?;
            self.shared
                .object_file_lines
                .store(lent + lines, Ordering::Relaxed);
            placements
        };
        let object_id = placements.first().map(|p| p.object)?;
        let mut pinned = PinnedObjectFile {
            file: None,
            pins: placements
                .iter()
                .map(|placement| PinGuard {
                    shared: Arc::clone(&self.shared),
                    slot: placement.slot as SlotId,
                })
                .collect(),
            shared: Arc::clone(&self.shared),
        };
        match self.shared.storage.object_file(object_id)? {
            Ok(file) => {
                pinned.file = Some(file);
                Some(pinned)
            }
            Err(e) => {
                tracing::debug!(key = %object.key, error = %e, "cannot open a cached object's file");
                None
            }
        }
    }

    /// Holds a clean line pinned, as a reader copying out of it would.
    #[cfg(test)]
    pub(super) fn pin_line(
        &self,
        store_id: &str,
        object: &ObjectVersion,
        line: u64,
    ) -> Option<impl Drop> {
        let pinned = self
            .shared
            .table()
            .pin(store_id, &object.key, &object.etag, line)?;
        let placement = match pinned {
            Pinned::Ready(placement)
            | Pinned::Inbound(placement, _)
            | Pinned::Unverified(placement, _) => placement,
        };
        Some(PinGuard {
            shared: Arc::clone(&self.shared),
            slot: placement.slot as SlotId,
        })
    }
}

impl Drop for LineCache {
    fn drop(&mut self) {
        // What was filled is indexed before the process goes on to exit.
        if let Some(persisted) = &self.shared.persisted {
            persisted.close();
        }
    }
}

impl std::fmt::Debug for LineCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LineCache")
            .field("dir", &self.dir.path())
            .field("line_size", &self.shared.line_size)
            .field("lines", &self.shared.lines)
            .finish_non_exhaustive()
    }
}

#[async_trait]
impl ObjectReader for LineCache {
    async fn read(
        &self,
        store: &Arc<dyn ObjectStore>,
        object: &ObjectVersion,
        range: Range<u64>,
        sequential: bool,
    ) -> Result<Bytes, StoreError> {
        let end = range.end.min(object.size);
        if range.start >= end {
            return Ok(Bytes::new());
        }
        if object.etag.is_empty() {
            // Without an ETag, cached bytes could not be told from a later version's.
            return self.direct(store, object, range.start..end).await;
        }
        if !*self.shared.restored.borrow() {
            self.wait_for_kept_lines(store.cache_scope(), object, range.start..end)
                .await;
        }
        if let Some(pressure) = self.shared.pressure.get()
            && pressure.stage() == Stage::Wait
            && !self.all_present(store, object, range.start..end)
        {
            // Over the memory target after the cache and the inodes gave back: a fetch waits
            // for room before it takes a line (reads of lines already here do not).
            pressure.admit().await;
        }
        let segments = self.plan(store, object, range.start..end, sequential);
        let mut parts =
            try_join_all(segments.into_iter().map(|s| self.serve(store, object, s))).await?;
        if parts.len() == 1 {
            return Ok(parts.swap_remove(0));
        }
        let mut out = BytesMut::with_capacity((end - range.start) as usize);
        for part in parts {
            out.extend_from_slice(&part);
        }
        Ok(out.freeze())
    }

    fn read_now(
        &self,
        store: &Arc<dyn ObjectStore>,
        object: &ObjectVersion,
        range: Range<u64>,
        sequential: bool,
    ) -> Option<Result<Bytes, StoreError>> {
        self.read_at_hand(store, object, range, sequential)
    }
}

/// A line's part of a read, as decided under the lock (no guards yet: nothing that locks on drop
/// may be created while the lock is held).
enum Planned {
    Line {
        placement: Placement,
        flight: Option<Flight>,
        check: Option<Check>,
        /// The whole line's length (shorter than a line at the object's end).
        line_len: usize,
        offset: usize,
        part: Range<u64>,
    },
    Direct(Range<u64>),
}

enum Segment {
    /// Out of a pinned line, once its fetch (if `flight`) has completed.
    Line {
        pin: PinGuard,
        placement: Placement,
        flight: Option<Flight>,
        /// A restored line to check first, and the length it must have.
        check: Option<(Check, usize)>,
        /// Where `part` starts within the line.
        offset: usize,
        part: Range<u64>,
    },
    /// Straight from the store: no slot could be had.
    Direct(Range<u64>),
}

/// An object version lent whole to a reader outside this process (see
/// [`LineCache::pin_object_file`]): its file, and a pin on every one of its lines.
pub struct PinnedObjectFile {
    /// `None` while it is being built, and once taken.
    file: Option<File>,
    pins: Vec<PinGuard>,
    shared: Arc<Shared>,
}

impl PinnedObjectFile {
    /// The file holding the object byte for byte, opened read-only: once (whoever registers it
    /// with the kernel can close it then; the lines stay pinned all the same).
    pub fn take_file(&mut self) -> Option<File> {
        self.file.take()
    }
}

impl Drop for PinnedObjectFile {
    fn drop(&mut self) {
        // The lines' own pins drop after this, each unpinning its slot.
        let _table = self.shared.table();
        self.shared
            .object_file_lines
            .fetch_sub(self.pins.len(), Ordering::Relaxed);
    }
}

impl std::fmt::Debug for PinnedObjectFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PinnedObjectFile")
            .field("lines", &self.pins.len())
            .finish_non_exhaustive()
    }
}

/// One reader's pin on a slot; dropping it unpins (and frees the slot if it was detached).
struct PinGuard {
    shared: Arc<Shared>,
    slot: SlotId,
}

impl Drop for PinGuard {
    fn drop(&mut self) {
        let released = self.shared.table().unpin(self.slot);
        self.shared.release(released);
    }
}

/// A clean line's bytes lent out in place: the pin keeps the slot from being refilled, and the
/// storage (through the pin's `shared`) from being unmapped, until the last `Bytes` clone goes.
struct PinnedBytes {
    ptr: *const u8,
    len: usize,
    _pin: PinGuard,
}

// SAFETY: the bytes behind `ptr` are only read, and nothing writes them while the pin is held
// (storage module doc: a pinned clean slot is never written), so sharing and sending the view
// across threads is as safe as sharing a `&[u8]`.
unsafe impl Send for PinnedBytes {}
// SAFETY: as for `Send`: shared access only ever reads.
unsafe impl Sync for PinnedBytes {}

impl AsRef<[u8]> for PinnedBytes {
    fn as_ref(&self) -> &[u8] {
        // SAFETY: `LineStorage::address` checked that `len` bytes at `ptr` lie inside the
        // storage's mapping, which lives as long as `_pin.shared`; the pinned line is not
        // written while we hold the pin.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
}
