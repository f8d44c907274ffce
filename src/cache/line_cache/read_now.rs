//! A read the cache can answer on the caller's thread: every line it touches is cached, checked
//! and in memory this process addresses (RAM, or a mapped cache file), and a sequential read's
//! window needs nothing fetched ahead. A FUSE worker answers such a read itself, without handing
//! it to the async runtime and back (two thread switches, which cost a 4 KiB cache hit more
//! than everything else it does).

use std::ops::Range;
use std::sync::Arc;

use bytes::{Bytes, BytesMut};

use super::{LineCache, PinGuard, PinnedBytes};
use crate::cache::ObjectVersion;
use crate::cache::error::storage_error;
use crate::cache::stats::bump;
use crate::cache::table::{Pinned, Placement, SlotId};
use crate::store::{ObjectStore, StoreError};

/// A line of the read, pinned ready, and the part of the read it holds.
struct ReadyPart {
    pin: PinGuard,
    placement: Placement,
    /// Where the part starts within the line, and its length.
    offset: usize,
    len: usize,
}

impl LineCache {
    /// [`super::ObjectReader::read`] without waiting: the bytes when every line of `range` is
    /// at hand (see the module), `None` otherwise, having started nothing (the caller then
    /// reads with `read`, which fetches).
    pub(crate) fn read_at_hand(
        &self,
        store: &Arc<dyn ObjectStore>,
        object: &ObjectVersion,
        range: Range<u64>,
        sequential: bool,
    ) -> Option<Result<Bytes, StoreError>> {
        let end = range.end.min(object.size);
        if range.start >= end {
            return Some(Ok(Bytes::new()));
        }
        if object.etag.is_empty() || !*self.shared.restored.borrow() {
            return None;
        }
        let parts = self.pin_ready(store, object, range.start..end, sequential)?;
        let storage = &self.shared.storage;
        // Storage reached only through system calls (`per-inode-file`: its line files are read
        // with `pread`) is read off the runtime by `read`: `None`, and the pins go.
        let addresses = parts
            .iter()
            .map(|part| storage.address(&part.placement, part.offset, part.len))
            .collect::<Option<Vec<_>>>()?;
        let mut bytes = Vec::with_capacity(parts.len());
        for (part, address) in parts.into_iter().zip(addresses) {
            let ptr = match address {
                Ok(ptr) => ptr,
                Err(e) => return Some(Err(storage_error("read from cache", &object.key, e))),
            };
            bump(&self.shared.counters.bytes_from_cache, part.len as u64);
            bytes.push(Bytes::from_owner(PinnedBytes {
                ptr,
                len: part.len,
                _pin: part.pin,
            }));
        }
        bump(&self.shared.counters.hits, bytes.len() as u64);
        if bytes.len() == 1 {
            return Some(Ok(bytes.swap_remove(0)));
        }
        let mut out = BytesMut::with_capacity((end - range.start) as usize);
        for part in bytes {
            out.extend_from_slice(&part);
        }
        Some(Ok(out.freeze()))
    }

    /// Pins every line of `range` if each is ready and checked, and a `sequential` read has
    /// no read-ahead due; `None` (every pin taken dropped) otherwise.
    fn pin_ready(
        &self,
        store: &Arc<dyn ObjectStore>,
        object: &ObjectVersion,
        range: Range<u64>,
        sequential: bool,
    ) -> Option<Vec<ReadyPart>> {
        let shared = &self.shared;
        let ls = shared.line_size;
        let (first, last) = (range.start / ls, (range.end - 1) / ls);
        let name = (
            store.cache_scope(),
            object.key.as_str(),
            object.etag.as_str(),
        );
        let mut parts = Vec::with_capacity((last - first + 1) as usize);
        let mut table = shared.table();
        if sequential
            && !shared
                .read_ahead_due(&table, name, object.size, last)
                .is_empty()
        {
            return None;
        }
        let mut all_ready = true;
        for line in first..=last {
            let Some(pinned) = table.pin(name.0, name.1, name.2, line) else {
                all_ready = false;
                break;
            };
            let (placement, ready) = match pinned {
                Pinned::Ready(placement) => (placement, true),
                Pinned::Inbound(placement, _) | Pinned::Unverified(placement, _) => {
                    (placement, false)
                }
            };
            let line_range = shared.line_range(object.size, line);
            let part = range.start.max(line_range.start)..range.end.min(line_range.end);
            parts.push(ReadyPart {
                pin: PinGuard {
                    shared: Arc::clone(shared),
                    slot: placement.slot as SlotId,
                },
                placement,
                offset: (part.start - line_range.start) as usize,
                len: (part.end - part.start) as usize,
            });
            if !ready {
                all_ready = false;
                break;
            }
        }
        if all_ready && let Some(mover) = &shared.mover {
            mover.ring_if_needed(&table);
        }
        // Unpinning takes the table's lock: the pins of a read given up go after it is let go.
        drop(table);
        all_ready.then_some(parts)
    }
}
