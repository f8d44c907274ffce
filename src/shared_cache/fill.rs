//! Background fills: lines just read from the origin written to the shared cache, off the
//! reader's path. Bounded twice — bytes held (`fill_buffer_limit_bytes`, reserved before the
//! origin read copies anything) and PUTs at once (`fill_workers`) — and never waited for: a
//! line that finds no room is dropped and counted.

use std::sync::Arc;

use bytes::Bytes;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::object::{LineId, encode};
use crate::store::ObjectStore;
use crate::telemetry::SharedCacheMetrics;

#[derive(Debug)]
pub(super) struct Filler {
    memory: Arc<Semaphore>,
    workers: Arc<Semaphore>,
    metrics: Arc<SharedCacheMetrics>,
}

/// Room for `bytes` of lines, held from the origin read until their PUTs end.
pub(super) struct Room {
    _permit: OwnedSemaphorePermit,
}

impl Filler {
    pub(super) fn new(
        memory_limit: u64,
        workers: usize,
        metrics: Arc<SharedCacheMetrics>,
    ) -> Filler {
        let limit = usize::try_from(memory_limit)
            .unwrap_or(usize::MAX)
            .min(Semaphore::MAX_PERMITS);
        Filler {
            memory: Arc::new(Semaphore::new(limit)),
            workers: Arc::new(Semaphore::new(workers)),
            metrics,
        }
    }

    /// Room for `bytes`, if there is some now; never waits.
    pub(super) fn reserve(&self, bytes: u64) -> Option<Room> {
        let permits = u32::try_from(bytes).ok()?;
        Arc::clone(&self.memory)
            .try_acquire_many_owned(permits)
            .ok()
            .map(|permit| Room { _permit: permit })
    }

    /// Writes `lines` to `store` under `prefix` in the background, within `room`.
    pub(super) fn spawn(
        &self,
        store: Arc<dyn ObjectStore>,
        prefix: String,
        lines: Vec<(LineId, Bytes)>,
        room: Room,
    ) {
        let workers = Arc::clone(&self.workers);
        let metrics = Arc::clone(&self.metrics);
        metrics.fill_queued(lines.len() as u64);
        tokio::spawn(async move {
            let _room = room;
            let Ok(_worker) = workers.acquire_owned().await else {
                metrics.fill_dropped(lines.len() as u64, "error");
                return;
            };
            for (id, payload) in lines {
                let key = id.object_key(&prefix);
                match store.put(&key, encode(&id, &payload)).await {
                    Ok(_) => metrics.filled(payload.len() as u64),
                    Err(e) => {
                        tracing::debug!(key = %id.key, line = id.line, error = %e,
                            "cannot fill the shared cache; the line stays a miss");
                        metrics.fill_dropped(1, "error");
                    }
                }
            }
        });
    }
}
