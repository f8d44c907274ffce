//! `Engines`: the process-wide parts every mount shares, built once and passed in.
//!
//! A daemon holds one mount and the CSI plugin many; both build one `Engines` and hand it to each
//! `Fs`, so that engines with node-wide limits (the line cache, commit workers, the manifest store)
//! are shared rather than multiplied per volume.

use std::sync::Arc;

use crate::cache::{CacheError, DirectReader, LineCache, ObjectReader};
use crate::config::CacheConfig;
use crate::telemetry::Metrics;

#[derive(Clone)]
pub struct Engines {
    /// Where object bytes come from: the line cache in a daemon.
    pub reader: Arc<dyn ObjectReader>,
    /// The same cache, for its counters and the write engine's hooks (`None` when uncached).
    pub cache: Option<Arc<LineCache>>,
    /// The process's one metrics registry.
    pub metrics: Arc<Metrics>,
}

impl Engines {
    /// The engines of a process, sized by its configuration.
    pub fn from_config(cache: &CacheConfig) -> Result<Engines, CacheError> {
        let cache = LineCache::new(cache)?;
        let metrics = Metrics::new();
        metrics.observe_cache(cache.clone());
        Ok(Engines {
            reader: cache.clone(),
            cache: Some(cache),
            metrics,
        })
    }

    /// Every read goes straight to the store; for tests of the layers above the cache.
    pub fn uncached() -> Engines {
        Engines {
            reader: Arc::new(DirectReader),
            cache: None,
            metrics: Metrics::new(),
        }
    }
}
