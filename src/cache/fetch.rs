//! Fetching lines from the store into the cache's storage, and settling them for their waiters.
//!
//! One fetch task fills a *run* of consecutive lines of one object with one ranged GET: a demand
//! miss is a run of one line; a sequential stream's read-ahead goes out in runs of several, so
//! that small lines do not cost a request each (per-request work on both ends dominated cold
//! sequential reads with 1 MiB lines). Storage with an address is filled chunk by chunk as the
//! body arrives, each line announcing its progress and settling as soon as its last byte is in,
//! so a reader waits for neither the rest of its line nor the rest of the run.

use std::ops::Range;
use std::sync::Arc;

use bytes::Bytes;
use tokio::sync::{OwnedSemaphorePermit, watch};

use super::line_cache::Shared;
use super::persist::Check;
use super::stats::bump;
use super::table::{Flight, Outcome, Placement, Progress, SlotId};
use crate::store::{ObjectStore, StoreError};

/// The right to fill one inbound slot, and the duty to settle it: a `Fill` dropped unsettled
/// (its task cancelled) frees the slot and sends its waiters to the store.
pub(super) struct Fill {
    shared: Arc<Shared>,
    slot: SlotId,
    placement: Placement,
    key: String,
    tx: Option<watch::Sender<Progress>>,
    /// With a persistent cache: the checksum of the bytes stored so far (always from the line's
    /// start, in order), and how many; `None` otherwise, or once the order was broken.
    checksum: Option<(crc32fast::Hasher, usize)>,
}

impl Fill {
    pub(super) fn new(
        shared: &Arc<Shared>,
        slot: SlotId,
        placement: Placement,
        tx: watch::Sender<Progress>,
        key: &str,
    ) -> Fill {
        Fill {
            shared: Arc::clone(shared),
            slot,
            placement,
            key: key.to_string(),
            tx: Some(tx),
            checksum: shared
                .persisted
                .is_some()
                .then(|| (crc32fast::Hasher::new(), 0)),
        }
    }

    /// Adds bytes stored at `offset` within the line to the checksum.
    fn sum(&mut self, offset: usize, data: &[u8]) {
        match &mut self.checksum {
            Some((hasher, summed)) if *summed == offset => {
                hasher.update(data);
                *summed += data.len();
            }
            // Not in order (never so today): the line is then simply not kept.
            _ => self.checksum = None,
        }
    }

    /// Writes the whole line into storage and marks it clean. A failed local write is counted
    /// and abandons the line (waiters read from the store). Returns whether the line is clean.
    pub(super) fn store(mut self, data: &[u8]) -> bool {
        let written = self.shared.storage.write_at(&self.placement, 0, data);
        if written.is_ok() {
            self.sum(0, data);
        }
        self.finish(written)
    }

    /// Settles the line after its bytes were written into storage, or failed to be.
    fn finish(mut self, written: std::io::Result<()>) -> bool {
        match written {
            Ok(()) => {
                self.settle(Outcome::Ready);
                true
            }
            Err(e) => {
                tracing::warn!(key = %self.key, line = self.placement.line, error = %e,
                    "cannot write a line into the cache; serving it uncached");
                bump(&self.shared.counters.fetch_failures, 1);
                self.settle(Outcome::Abandoned);
                false
            }
        }
    }

    /// Whether the line's storage lives in this process's memory, where it can be filled as
    /// the body streams in and read before it is complete.
    fn streams(&self) -> bool {
        self.shared.storage.address(&self.placement, 0, 0).is_some()
    }

    /// Stores `data` at `offset` within the line.
    fn write(&mut self, offset: usize, data: &[u8]) -> std::io::Result<()> {
        self.shared
            .storage
            .write_at(&self.placement, offset, data)?;
        self.sum(offset, data);
        Ok(())
    }

    /// Tells the waiters that the line's first `filled` bytes are in storage.
    fn advance(&self, filled: usize) {
        if let Some(tx) = &self.tx {
            tx.send_modify(|progress| progress.filled = filled);
        }
    }

    fn fail(mut self, error: Arc<StoreError>) {
        tracing::debug!(key = %self.key, line = self.placement.line, error = %error,
            "line fetch failed");
        bump(&self.shared.counters.fetch_failures, 1);
        self.settle(Outcome::Failed(error));
    }

    /// Updates the table first, then tells the waiters, so a waiter woken with `Ready` finds the
    /// slot clean (and still pinned by itself).
    fn settle(&mut self, outcome: Outcome) {
        let Some(tx) = self.tx.take() else {
            return;
        };
        // With a persistent cache, what the index records of the line (if it was stored in order).
        let check = self.checksum.take().and_then(|(hasher, len)| {
            Some(Check {
                len: u32::try_from(len).ok()?,
                crc: hasher.finalize(),
            })
        });
        let (released, keep) = {
            let mut table = self.shared.table();
            match outcome {
                Outcome::Ready => {
                    // Before the slot can be freed (were the line invalidated meanwhile).
                    let keep = check.and_then(|check| table.keep_check(self.slot, check));
                    let released = table.fill_succeeded(self.slot);
                    // A clean RAM line can now be moved down, should RAM be short of room.
                    if let Some(mover) = &self.shared.mover {
                        mover.ring_if_needed(&table);
                    }
                    (released, keep)
                }
                Outcome::Failed(_) | Outcome::Abandoned => (table.fill_failed(self.slot), None),
            }
        };
        self.shared.release(released);
        if let (Some(stored), Some(persisted)) = (keep, &self.shared.persisted) {
            persisted.record(stored);
        }
        tx.send_modify(|progress| progress.outcome = Some(outcome));
    }
}

impl Drop for Fill {
    fn drop(&mut self) {
        self.settle(Outcome::Abandoned);
    }
}

/// One line of a run: its fill, and where its bytes lie in the object.
pub(super) struct RunLine {
    pub fill: Fill,
    pub range: Range<u64>,
}

/// Fetches `run` (consecutive lines of `key` at `etag`, in order) in its own task, so that it
/// completes and fills the lines whoever waits for them. `permits` (read-ahead budget) are held
/// until the run ends. With `after`, the GET goes out only once that line's fetch has stored its
/// first bytes (or ended): see [`start_after`].
pub(super) fn spawn_fetch(
    store: Arc<dyn ObjectStore>,
    key: &str,
    etag: &str,
    run: Vec<RunLine>,
    permits: Vec<OwnedSemaphorePermit>,
    after: Option<Flight>,
) {
    let (Some(first), Some(last)) = (run.first(), run.last()) else {
        return;
    };
    let range = first.range.start..last.range.end;
    let streams = first.fill.streams();
    let key = key.to_string();
    let etag = etag.to_string();
    tokio::spawn(async move {
        let _permits = permits;
        if let Some(demanded) = after {
            start_after(demanded).await;
        }
        if streams {
            stream_into_lines(store, &key, &etag, range, run).await;
        } else {
            gather_then_store(store, &key, &etag, range, run).await;
        }
    });
}

/// Waits until the fetch behind `demanded` has stored its first bytes, or ended.
///
/// Read-ahead started by a read that also missed waits for this, so that the server answers the
/// line the reader is blocked on first: started together, the demanded GET and the read-ahead
/// GETs share the server, and the demanded line's first byte came ~5x later (garage on loopback,
/// cold 1 GiB object, a demanded 1 MiB line and four 8 MiB read-ahead runs: the demanded body
/// began 43 ms after its request, behind the block reads of the other four; alone, 4-6 ms).
/// Once the server has started on that body, read-ahead costs the reader nothing.
async fn start_after(mut demanded: Flight) {
    // An error means the fill was settled and dropped: nothing to wait for either way.
    let _ = demanded
        .wait_for(|progress| progress.filled > 0 || progress.outcome.is_some())
        .await;
}

/// A line of a run being streamed into storage.
struct Streaming {
    /// `None` once settled.
    fill: Option<Fill>,
    /// Where the line starts in the run's body.
    start: u64,
    len: usize,
    /// Bytes from the line's start in storage. Waiters may already be reading below this mark,
    /// so nothing below it is ever written again: a retried attempt resends the body from its
    /// start (the same bytes: the fetch is conditional on the ETag), and only what lies past
    /// the mark is stored.
    filled: usize,
    written: std::io::Result<()>,
}

impl Streaming {
    /// Stores the part of `chunk` (at `offset` in the run's body) that falls in this line.
    fn accept(&mut self, offset: u64, chunk: &[u8]) {
        let Some(fill) = self.fill.as_mut() else {
            return;
        };
        let end = offset + chunk.len() as u64;
        let line_end = self.start + self.len as u64;
        if self.written.is_err() || end <= self.start || offset >= line_end {
            return;
        }
        // The chunk's bytes inside this line, as offsets within the line.
        let from = offset.max(self.start);
        let to = end.min(line_end);
        let (lo, hi) = ((from - self.start) as usize, (to - self.start) as usize);
        if hi <= self.filled {
            return;
        }
        if lo > self.filled {
            self.written = Err(std::io::Error::other(
                "a fetched chunk skipped bytes of the line",
            ));
            return;
        }
        let part = &chunk[(from - offset) as usize + (self.filled - lo)..(to - offset) as usize];
        self.written = fill.write(self.filled, part);
        if self.written.is_err() {
            return;
        }
        self.filled = hi;
        if self.filled < self.len {
            fill.advance(hi);
        } else if let Some(fill) = self.fill.take() {
            // Settled rather than advanced: its waiters wake once the line is clean (and, in a
            // persistent cache, queued for the index), never before.
            fill.finish(Ok(()));
        }
    }
}

/// Fills lines of in-memory storage chunk by chunk as the body arrives: one copy from the
/// network buffers into the lines, and no run-sized buffer in between.
async fn stream_into_lines(
    store: Arc<dyn ObjectStore>,
    key: &str,
    etag: &str,
    range: Range<u64>,
    run: Vec<RunLine>,
) {
    let expected = range.end - range.start;
    let counters_of = Arc::clone(&run[0].fill.shared);
    let mut lines: Vec<Streaming> = run
        .into_iter()
        .map(|line| Streaming {
            start: line.range.start - range.start,
            len: (line.range.end - line.range.start) as usize,
            fill: Some(line.fill),
            filled: 0,
            written: Ok(()),
        })
        .collect();
    let mut sink = |offset: u64, chunk: &[u8]| {
        for line in lines.iter_mut() {
            line.accept(offset, chunk);
        }
    };
    let fetched = store
        .get_range_into(key, range, Some(etag), &mut sink)
        .await;
    if let Ok(received) = &fetched {
        bump(&counters_of.counters.bytes_from_backend, *received);
    }
    let outcome = fetched.and_then(|received| exact(key, received, expected));
    // Lines not settled yet: cut short by the failure, or (with a complete body) a local write
    // into storage failed.
    let error = outcome.err().map(Arc::new);
    for line in lines {
        let Some(fill) = line.fill else { continue };
        match &error {
            Some(error) => fill.fail(Arc::clone(error)),
            None => {
                fill.finish(line.written);
            }
        }
    }
}

/// Fetches a run into one buffer, then writes its lines into storage that needs system calls,
/// off the async runtime.
async fn gather_then_store(
    store: Arc<dyn ObjectStore>,
    key: &str,
    etag: &str,
    range: Range<u64>,
    run: Vec<RunLine>,
) {
    let expected = range.end - range.start;
    let start = range.start;
    let fetched = store.get_range(key, range, Some(etag)).await;
    if let Ok(bytes) = &fetched {
        bump(
            &run[0].fill.shared.counters.bytes_from_backend,
            bytes.len() as u64,
        );
    }
    let bytes = match fetched.and_then(|bytes| exact_length(key, bytes, expected)) {
        Ok(bytes) => bytes,
        Err(error) => {
            let error = Arc::new(error);
            for line in run {
                line.fill.fail(Arc::clone(&error));
            }
            return;
        }
    };
    let inline_limit = run[0].fill.shared.storage.inline_limit();
    let store_all = move || {
        for line in run {
            let part = (line.range.start - start) as usize..(line.range.end - start) as usize;
            line.fill.store(&bytes[part]);
        }
    };
    if expected as usize <= inline_limit {
        store_all();
    } else {
        // Up to a run of disk writes. If the blocking task never runs, dropping it drops the
        // fills, which settles their slots.
        let _ = tokio::task::spawn_blocking(store_all).await;
    }
}

/// `bytes` if it is exactly `expected` long (see [`exact`]).
pub(super) fn exact_length(key: &str, bytes: Bytes, expected: u64) -> Result<Bytes, StoreError> {
    exact(key, bytes.len() as u64, expected).map(|()| bytes)
}

/// Whether `got` bytes are exactly the `expected`: the range asked for was already clamped to
/// the object's size, so anything shorter was cut short and must not be cached as whole lines
/// (and anything longer is not the object we asked for).
fn exact(key: &str, got: u64, expected: u64) -> Result<(), StoreError> {
    if got == expected {
        Ok(())
    } else {
        Err(StoreError::Truncated {
            op: "get",
            key: key.to_string(),
            got,
            expected,
        })
    }
}
