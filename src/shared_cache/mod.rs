//! The shared cache: a second cache tier below every node's line cache, in a bucket of an
//! S3-compatible store near the nodes, that every node reads and fills.
//!
//! It sits between the line cache and an origin store as a store wrapper
//! ([`SharedCache::wrap`]): a line-cache miss asks the shared cache for the run's lines
//! (`object.rs` names and verifies them), within `read_timeout_ms`; a miss, a failure or a
//! timeout reads from the origin instead, and the lines the shared cache lacked are then written
//! to it in the background (`fill.rs`). Repeated failures open a circuit breaker
//! (`breaker.rs`). Nothing about the shared cache ever fails a read: its errors are counted and
//! logged, and the origin answers. `trim.rs` is `msfs shared-cache trim`.
//!
//! Lines are keyed by the origin store's cache scope — its endpoint, bucket and signing
//! principal —, so a line one principal read is served only to reads signed by the same
//! principal, exactly as in the node's own cache (docs/shared-cache.md says why).

mod breaker;
mod fill;
mod object;
mod store;
#[cfg(test)]
mod tests;
mod trim;

pub use trim::{TrimReport, trim};

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use tokio::sync::OnceCell;

use crate::config::SharedCacheConfig;
use crate::store::{ObjectStore, RetryBudget, StoreError, open_s3_store};
use crate::telemetry::{Fallback, Metrics, SharedCacheMetrics};
use breaker::Breaker;
use fill::{Filler, Room};
use object::{LineId, MAX_HEADER, decode};
use store::SharedCachedStore;

/// The process's one shared cache client, handed to every origin store it wraps.
#[derive(Debug)]
pub struct SharedCache {
    config: SharedCacheConfig,
    /// The node cache's line size: shared lines are the same lines (and nodes share only
    /// with nodes of the same line size, which is part of every line's name).
    line_size: u64,
    /// Opened on first use: building an S3 client is async, `Engines` is not.
    store: OnceCell<Arc<dyn ObjectStore>>,
    /// Its own, so that a failing shared cache never drains the origins' retry budget.
    retry_budget: Arc<RetryBudget>,
    breaker: Breaker,
    filler: Filler,
    metrics: Arc<SharedCacheMetrics>,
}

impl SharedCache {
    pub fn new(config: &SharedCacheConfig, line_size: u64, metrics: &Metrics) -> Arc<SharedCache> {
        let metrics = Arc::new(SharedCacheMetrics::new(metrics));
        Arc::new(SharedCache {
            config: config.clone(),
            line_size,
            store: OnceCell::new(),
            retry_budget: Arc::default(),
            breaker: Breaker::default(),
            filler: Filler::new(
                config.fill_buffer_limit_bytes,
                config.fill_workers,
                Arc::clone(&metrics),
            ),
            metrics,
        })
    }

    /// `origin` with reads of one version going through the shared cache.
    pub fn wrap(self: &Arc<Self>, origin: Arc<dyn ObjectStore>) -> Arc<dyn ObjectStore> {
        Arc::new(SharedCachedStore {
            origin,
            shared: Arc::clone(self),
        })
    }

    /// The counts since the process started (for `msfs warm`'s summary, and tests).
    pub fn metrics(&self) -> &SharedCacheMetrics {
        &self.metrics
    }

    async fn store(&self) -> Result<&Arc<dyn ObjectStore>, StoreError> {
        self.store
            .get_or_try_init(|| open(&self.config, &self.retry_budget))
            .await
    }

    /// The payloads of lines `ids` the shared cache holds (`None` for a line it lacks or holds
    /// unverified); `None` when it was not asked (breaker open) or did not answer in time.
    async fn look_up(&self, ids: &[LineId]) -> Option<Vec<Option<Bytes>>> {
        if !self.breaker.allow(Instant::now()) {
            self.metrics.fell_back(Fallback::Open);
            return None;
        }
        let started = Instant::now();
        let asked = tokio::time::timeout(self.config.read_timeout, self.get_all(ids)).await;
        self.metrics.latency(started.elapsed());
        let objects = match asked {
            Ok(Ok(objects)) => objects,
            Ok(Err(error)) => {
                self.failed(Fallback::Error, &error.to_string());
                return None;
            }
            Err(_) => {
                self.failed(Fallback::Timeout, "no answer within read_timeout_ms");
                return None;
            }
        };
        self.breaker.succeeded();
        Some(
            ids.iter()
                .zip(objects)
                .map(|(id, object)| {
                    decode(id, object?)
                        .inspect_err(|mismatch| {
                            self.metrics.verification_failed();
                            tracing::warn!(key = %id.key, line = id.line,
                                object = %id.object_key(&self.config.prefix), %mismatch,
                                "shared cache object failed verification; reading the origin");
                        })
                        .ok()
                })
                .collect(),
        )
    }

    /// Every object of `ids`, `None` for those absent.
    async fn get_all(&self, ids: &[LineId]) -> Result<Vec<Option<Bytes>>, StoreError> {
        let store = self.store().await?;
        let gets = ids.iter().map(|id| {
            let key = id.object_key(&self.config.prefix);
            async move {
                match store
                    .get_range(&key, 0..self.line_size + MAX_HEADER, None)
                    .await
                {
                    Ok(object) => Ok(Some(object)),
                    Err(StoreError::NotFound { .. }) => Ok(None),
                    Err(error) => Err(error),
                }
            }
        });
        futures::future::try_join_all(gets).await
    }

    fn failed(&self, why: Fallback, error: &str) {
        self.metrics.fell_back(why);
        if self.breaker.failed(Instant::now()) {
            tracing::warn!(error, pause = ?breaker::OPEN_FOR,
                "the shared cache keeps failing; reads go to the origin without asking it for a while");
        } else {
            tracing::debug!(error, "shared cache read failed; reading the origin");
        }
    }

    /// Writes `lines` in the background, within `room`.
    fn fill(&self, lines: Vec<(LineId, Bytes)>, room: Room) {
        let Some(store) = self.store.get() else {
            return;
        };
        if !lines.is_empty() {
            self.filler
                .spawn(Arc::clone(store), self.config.prefix.clone(), lines, room);
        }
    }

    /// How long a read waits for the shared cache.
    pub fn read_timeout(&self) -> Duration {
        self.config.read_timeout
    }
}

/// The shared cache's bucket client, as configured.
pub async fn open(
    config: &SharedCacheConfig,
    retry_budget: &Arc<RetryBudget>,
) -> Result<Arc<dyn ObjectStore>, StoreError> {
    open_s3_store(&config.bucket, &config.s3, retry_budget).await
}
