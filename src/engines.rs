//! `Engines`: the process-wide parts every mount shares, built once and passed in.
//!
//! A daemon holds one mount and the CSI plugin many; both build one `Engines` and hand it to each
//! `Fs`, so that engines with node-wide limits (the line cache, commit workers, the manifest store)
//! are shared rather than multiplied per volume.

use std::path::Path;
use std::sync::Arc;

use crate::cache::{CacheError, DirectReader, LineCache, ObjectReader};
use crate::config::CacheStorage;
use crate::config::Config;
use crate::manifest::registry::Manifests;
use crate::memory::Memory;
use crate::shared_cache::SharedCache;
use crate::store::RetryBudget;
use crate::telemetry::{CacheStatsSource, MemoryStats, MemoryStatsSource, Metrics, TelemetryError};
use crate::write::{WriteConfig, WriteEngine, WriteError};

#[derive(Clone)]
pub struct Engines {
    /// Where object bytes come from: the line cache in a daemon.
    pub reader: Arc<dyn ObjectReader>,
    /// The same cache, for its counters and the write engine's hooks (`None` when uncached).
    pub cache: Option<Arc<LineCache>>,
    /// Files being written, and their commits.
    pub writes: WriteEngine,
    /// The process's one metrics registry.
    pub metrics: Arc<Metrics>,
    /// Manifests in use, each opened once and shared by every mount of it.
    pub manifests: Manifests,
    /// What every store the process opens draws its retries from (see `RetryBudget`).
    pub retry_budget: Arc<RetryBudget>,
    /// The process's memory target, as divided among the engines, and the inode pool every
    /// mount joins (`crate::memory`).
    pub memory: Arc<Memory>,
    /// The `shared_cache` tier every S3 backend's reads go through, when configured.
    pub shared_cache: Option<Arc<SharedCache>>,
}

#[derive(Debug, thiserror::Error)]
pub enum EnginesError {
    #[error(transparent)]
    Cache(#[from] CacheError),
    #[error(transparent)]
    Write(#[from] WriteError),
    #[error("metrics: {0}")]
    Telemetry(#[from] TelemetryError),
}

impl Engines {
    /// The engines of a process, sized by its configuration, with the upload journal under
    /// `journal_parent` (beside the spill files, under `cache_dir_path`, when `None`).
    pub fn from_config(
        config: &Config,
        journal_parent: Option<&Path>,
    ) -> Result<Engines, EnginesError> {
        // First: the cache and write buffers are sized by the target's division.
        let memory = Arc::new(Memory::for_config(config));
        let cache = LineCache::new(&memory.plan.cache)?;
        // Under pressure the cache shrinks read-ahead, gives back lines, and its fetches wait.
        cache.follow(memory.pressure.clone());
        let shed: std::sync::Weak<dyn crate::memory::Shed> = Arc::downgrade(&cache) as _;
        memory.pressure.add_holder(shed);
        let metrics = match &config.telemetry {
            // OTLP export; the registry's resource (the configured attributes) is fixed here.
            Some(telemetry) => Metrics::with_telemetry(telemetry)?,
            None => Metrics::new(),
        };
        metrics.observe_cache(cache.clone());
        let shared_cache = config
            .shared_cache
            .as_ref()
            .map(|shared| SharedCache::new(shared, config.cache.line_size, &metrics));
        let reader: Arc<dyn ObjectReader> = cache.clone();
        let writes = WriteEngine::new(
            WriteConfig {
                journal_parent: journal_parent.map(Path::to_path_buf),
                buffer_limit: memory.plan.write_buffer_limit,
                ..write_config(config)
            },
            reader.clone(),
            Some(cache.clone()),
            metrics.clone(),
        )?;
        writes.buffer_budget().follow(memory.pressure.clone());
        metrics.observe_memory(Arc::new(ProcessMemory {
            memory: memory.clone(),
            cache: Arc::downgrade(&cache),
            buffers: writes.buffer_budget(),
            metrics: Arc::downgrade(&metrics),
        }));
        Ok(Engines {
            reader,
            cache: Some(cache),
            writes,
            metrics,
            manifests: Manifests::new(),
            retry_budget: Arc::default(),
            memory,
            shared_cache,
        })
    }

    /// What a process handing its mounts over (an upgrade) does once they are handed over and
    /// before it exits: lets the commits in flight finish, for at most `within`, and starts no
    /// more. Whether they all finished.
    pub async fn stop_for_successor(&self, within: std::time::Duration) -> bool {
        let stopped = self.writes.stop_commits(within).await;
        if !stopped {
            tracing::warn!(
                ?within,
                "commits still running at the hand-over are cut short; the \
                successor commits their files again from the spill files"
            );
        }
        stopped
    }

    /// Then, with the runtime stopped: leaves the spill files, the upload journal and the cache
    /// to the successor, which starts once this process is gone and must find them free.
    pub fn leave_to_successor(&self) {
        self.writes.leave_to_successor();
        if let Some(cache) = &self.cache {
            cache.leave_to_successor();
        }
    }

    /// Every read goes straight to the store, and writes are committed with `config`; for tests
    /// of the layers above the engines.
    pub fn uncached(config: WriteConfig) -> Result<Engines, WriteError> {
        let reader: Arc<dyn ObjectReader> = Arc::new(DirectReader);
        let metrics = Metrics::new();
        let writes = WriteEngine::new(config, reader.clone(), None, metrics.clone())?;
        Ok(Engines {
            reader,
            cache: None,
            writes,
            metrics,
            manifests: Manifests::new(),
            retry_budget: Arc::default(),
            memory: Arc::new(Memory::unbounded()),
            shared_cache: None,
        })
    }
}

/// What the `msfs_memory_*` gauges read at each collection: the target and what each holder
/// has in use now.
///
/// The registry keeps its observers for its whole life, so this holds the cache and the registry
/// weakly: a strong reference would make a cycle (registry → observer → registry) that keeps the
/// cache from being dropped at exit, where a persistent cache writes its index.
struct ProcessMemory {
    memory: Arc<Memory>,
    cache: std::sync::Weak<LineCache>,
    buffers: Arc<crate::write::Budget>,
    metrics: std::sync::Weak<Metrics>,
}

impl MemoryStatsSource for ProcessMemory {
    fn memory_stats(&self) -> MemoryStats {
        let cache = self
            .cache
            .upgrade()
            .map(|cache| cache.cache_stats())
            .unwrap_or_default();
        // Only anonymous lines are this process's memory; a file-backed cache is page cache.
        let ram_lines = match self.memory.plan.cache.storage {
            CacheStorage::Ram => cache.lines_resident,
            CacheStorage::Tiered => cache.ram_lines_resident,
            CacheStorage::MappedFile | CacheStorage::PerInodeFile => 0,
        };
        let inodes = self
            .metrics
            .upgrade()
            .map_or(0, |metrics| metrics.fuse_inode_count());
        MemoryStats {
            target: self.memory.target.bytes,
            cache: ram_lines.saturating_mul(cache.line_size),
            write_buffers: self.buffers.used(),
            inodes: inodes.saturating_mul(crate::memory::INODE_BYTES),
            resident: crate::memory::resident_bytes(),
            inode_limit_per_mount: self.memory.inodes.share() as u64,
            waits: self.buffers.waits() + self.memory.pressure.waits(),
            over_target: self.memory.pressure.episodes(),
            stage: self.memory.pressure.stage() as u64,
            shed: self.memory.pressure.shed_bytes(),
        }
    }
}

/// The write engine's settings: spill files (and the upload journal) live beside the cache's,
/// under `cache_dir_path`.
pub fn write_config(config: &Config) -> WriteConfig {
    WriteConfig {
        multipart_threshold: config.multipart_upload_threshold_bytes,
        commit_workers: config.write_commit_workers,
        dirty_limit: config.write_dirty_limit_bytes,
        buffer_limit: config.write_buffer_limit_bytes,
        promote: config.cache.write_cache_promotion,
        spill_parent: config.cache.dir_path.clone(),
        journal_parent: None,
    }
}
