//! The daemon: one process, one mountpoint, the configured backends as sibling directories.
//!
//! It opens and checks every backend before mounting (so bad credentials or a missing bucket fail
//! the mount with a clear message instead of surfacing later as EIO), mounts, serves until the
//! mount goes away (`umount`, SIGTERM or SIGINT), and exits cleanly. Killed instead, it leaves
//! the mount to an fd holder, and `msfs mount --takeover` serves it on (see [`survival`]).

mod bootstrap;
pub mod evictor;
pub mod helper;
pub mod mount_options;
pub mod mountpoint;
mod read_ahead;
pub mod reload;
pub mod session;
pub mod succession;
mod survival;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use tokio::signal::unix::{Signal, SignalKind, signal};

use crate::config::{BackendConfig, BackendKind, Config};
use crate::engines::Engines;
use crate::fs::{Backend, BackendSettings, Fs, FsOptions};
use crate::store::{InstrumentedStore, ListRequest, ObjectStore, StoreError, open_store};
use crate::telemetry::serve_metrics;
pub use mount_options::MountFlags;
use session::{MountedSession, SessionOptions};
use survival::MountSurvival;
pub use survival::{Survival, default_state_dir};

#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    #[error("backend {dir_name}: {source}")]
    Backend {
        dir_name: String,
        #[source]
        source: StoreError,
    },
    #[error("backend {dir_name}: {source}")]
    Manifest {
        dir_name: String,
        #[source]
        source: crate::manifest::namespace::ManifestError,
    },
    #[error("{0}")]
    Mountpoint(String),
    #[error("cannot mount at {path}: {source}")]
    Mount {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("metrics: {0}")]
    Metrics(String),
    #[error("{0}")]
    Engines(#[source] crate::engines::EnginesError),
    #[error("cannot start the runtime: {0}")]
    Runtime(#[source] std::io::Error),
    #[error("fd holder: {0}")]
    Holder(String),
}

/// Mounts `config` at `mountpoint` (or takes over the live mount there, as `survival` says) and
/// serves until unmounted or signalled.
pub fn run(config: Config, mountpoint: PathBuf, survival: Survival) -> Result<(), DaemonError> {
    crate::residency::lock_code_as_configured(config.lock_code_in_memory);
    let survival = MountSurvival::new(&survival, &mountpoint);
    // First of all: a successor touches nothing (uploads, spills, the mount) until the process
    // serving now has handed over.
    let serving = survival.serve()?;
    // Before anything touches the mountpoint: a held connection nobody serves makes every
    // access to it wait.
    let held = survival.held()?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("msfs-io")
        .build()
        .map_err(DaemonError::Runtime)?;
    // The upload journal goes beside the cache: the next daemon over the same cache_dir_path
    // aborts the uploads of one killed before.
    let engines = Engines::from_config(&config, None).map_err(DaemonError::Engines)?;
    let metrics = engines.metrics.clone();
    let backends = runtime.block_on(open_backends(&config.backends, &engines))?;
    metrics.set_mounted_backends(backends.len());
    // Held until the daemon exits; the endpoint stops with it.
    let _metrics_server = match &config.metrics_endpoint {
        Some(endpoint) => Some(
            runtime
                .block_on(serve_metrics(endpoint, metrics.clone()))
                .map_err(DaemonError::Metrics)?,
        ),
        None => None,
    };
    if held.is_none() {
        mountpoint::prepare(&mountpoint).map_err(DaemonError::Mountpoint)?;
    }

    let options = FsOptions {
        uid: config.uid,
        gid: config.gid,
        dir_perm: config.dir_perm,
        ttl: config.entry_attr_ttl,
        inode_limit: engines.memory.inodes.join(config.evictable_inode_limit),
    };
    let backend_count = backends.len();
    let resumed = held.is_some();
    let warm_lists = crate::warm::background::lists_of(
        config
            .backends
            .iter()
            .zip(&backends)
            .map(|(config, backend)| (config, backend.settings().store.clone())),
    );
    let engines_cache = engines.cache.clone();
    let writes = engines.writes.clone();
    let mut fs = Fs::new(options, engines.clone(), backends);
    let journal = survival.journal()?;
    if let Some((state, _)) = &journal {
        fs = fs.with_kernel_state(state.clone());
    }
    if let (Some(_), Some((_, restored))) = (&held, &journal) {
        runtime.block_on(fs.restore(restored));
    }
    let fs = Arc::new(fs);
    let fs_for_reload = fs.clone();
    // Before the mount appears: a signal sent as soon as it does (a reload, a stop) must find
    // its handler, not the default action, which would kill the daemon.
    let signals = {
        let _runtime = runtime.enter();
        Signals::install()
    };
    let session = match held {
        Some(held) => MountedSession::resume(
            fs,
            runtime.handle().clone(),
            &mountpoint,
            held.fd,
            held.kernel,
            &session_options(&config),
        ),
        None => MountedSession::start(
            fs,
            runtime.handle().clone(),
            &mountpoint,
            &session_options(&config),
        ),
    };
    let mut session = session.map_err(|source| DaemonError::Mount {
        path: mountpoint.clone(),
        source,
    })?;
    survival.keep(&session);
    let mut reloader = reload::Reloader::new(
        config.clone(),
        fs_for_reload,
        engines.clone(),
        session.notifier(),
    );
    let done_rx = session
        .take_done()
        .ok_or_else(|| DaemonError::Mountpoint("FUSE session lost its completion signal".into()))?;
    tracing::info!(
        mountpoint = %mountpoint.display(),
        backends = backend_count,
        "mounted"
    );
    // `warm` entries: fetched in the background once the mount serves; never waited for (nor
    // again by a process taking the mount over: the one that mounted it warmed it).
    if let (false, Some(cache)) = (resumed, &engines_cache) {
        for list in warm_lists {
            let cache = cache.clone();
            runtime.spawn(async move { crate::warm::background::warm(&list, &cache).await });
        }
    }

    let stop = runtime.block_on(wait_for_stop(signals, done_rx, &mut reloader));
    if stop == Some("SIGTERM") && survival.successor_waiting() {
        let unanswered = runtime.block_on(session.hand_off(succession::HAND_OFF_WITHIN));
        tracing::info!(mountpoint = %mountpoint.display(), unanswered,
            "handed the mount over to the msfs waiting to succeed this one");
        match serving {
            Some(serving) => leave_to_successor(runtime, &engines, serving),
            None => runtime.shutdown_background(),
        }
        return Ok(());
    }
    if let Some(signal) = stop {
        tracing::info!(signal, "unmounting");
        session.unmount().map_err(|source| DaemonError::Mount {
            path: mountpoint.clone(),
            source,
        })?;
    }
    session.join();
    survival.release();
    // Files closed without flush_on_close may still be committing: land them before exiting.
    for (target, error) in runtime.block_on(writes.drain()) {
        tracing::error!(backend = %target.backend, key = %target.key, error = %error,
            "could not commit a written file before exiting; its bytes stay in the spill \
            directory, and the next msfs mounting this bucket over the same cache_dir_path \
            commits them");
    }
    if let Some(cache) = &engines_cache {
        tracing::info!(stats = ?cache.stats(), "cache at unmount");
    }
    runtime.shutdown_timeout(std::time::Duration::from_secs(2));
    tracing::info!(mountpoint = %mountpoint.display(), "unmounted");
    Ok(())
}

/// The end of a process that handed its mounts over: its commits in flight finish (within
/// `COMMITS_WITHIN`), its runtime stops, its spill files, upload journal and cache are left to
/// the successor, and the right to serve goes at exit (see `succession`).
pub(crate) fn leave_to_successor(
    runtime: tokio::runtime::Runtime,
    engines: &Engines,
    serving: succession::Serving,
) {
    runtime.block_on(engines.stop_for_successor(succession::COMMITS_WITHIN));
    runtime.shutdown_timeout(succession::BLOCKING_WITHIN);
    engines.leave_to_successor();
    serving.keep_until_exit();
}

/// Opens every backend's store and checks, with one small LIST, that it answers with the
/// configured credentials. All backends are checked concurrently.
pub(crate) async fn open_backends(
    configs: &[BackendConfig],
    engines: &Engines,
) -> Result<Vec<Arc<Backend>>, DaemonError> {
    let opened = futures::future::join_all(configs.iter().map(|config| async move {
        let settings = open_backend_settings(config, configs, engines).await?;
        Ok(Arc::new(Backend::new(&config.dir_name, settings)))
    }))
    .await;
    opened.into_iter().collect()
}

/// Everything a backend (one of `siblings`, the backends configured with it) needs to be
/// served: its store (checked) and, when it has one, its manifest (generated first if a
/// read-only backend's `manifest_path` holds none).
pub(crate) async fn open_backend_settings(
    config: &BackendConfig,
    siblings: &[BackendConfig],
    engines: &Engines,
) -> Result<BackendSettings, DaemonError> {
    let store = open_store_checked(config, engines).await?;
    // Uploads left by a killed process are aborted through writable backends only: read-only
    // credentials usually may not abort, and would warn at every mount. A store that starts
    // empty in each process (RAM) has nothing of a killed process's.
    let recovers = !config.readonly && store.outlives_process();
    if recovers {
        engines.writes.recover_uploads(store.clone());
    }
    let manifest = bootstrap::manifest_for(config, siblings, &store, engines).await?;
    let settings = BackendSettings::new(config, store, manifest);
    // Files a killed process wrote and never committed: committed now (after the manifest is
    // known, so that the commit reaches its delta log), and found by the opens of a takeover.
    if recovers {
        engines
            .writes
            .recover_spills(settings.store.as_ref(), |key| {
                key.strip_prefix(settings.prefix.as_str())
                    .map(|path| settings.target(&config.dir_name, path))
            })
            .await;
    }
    Ok(settings)
}

/// Opens a backend's store, instrumented into the process's metrics and retrying on its retry
/// budget, and checks with one small LIST that it answers with the configured credentials.
pub(crate) async fn open_store_checked(
    config: &BackendConfig,
    engines: &Engines,
) -> Result<Arc<dyn ObjectStore>, DaemonError> {
    let fail = |source| DaemonError::Backend {
        dir_name: config.dir_name.clone(),
        source,
    };
    let store = InstrumentedStore::wrap(
        open_store(config, &engines.retry_budget)
            .await
            .map_err(fail)?,
        &config.dir_name,
        engines.metrics.clone(),
        config.trace_level,
    );
    // Below the instrumentation's view: the backend's metrics count origin requests only.
    let store = match (&engines.shared_cache, &config.kind) {
        (Some(shared), BackendKind::S3(_)) => shared.wrap(store),
        _ => store,
    };
    store
        .list(&ListRequest::delimited(&config.prefix).max_keys(Some(1)))
        .await
        .map_err(fail)?;
    Ok(store)
}

fn session_options(config: &Config) -> SessionOptions {
    SessionOptions {
        name: config.mountname.clone(),
        allow_other: config.allow_other,
        workers: config.fuse_workers,
        read_only: config.read_only,
        no_exec: config.no_exec,
        max_write: config.max_write,
        writeback_cache: config.fuse_writeback_cache,
        passthrough: config.fuse_passthrough,
        io_uring: config.fuse_io_uring.then_some(config.fuse_io_uring_poll),
        stall_warn: config.fuse_request_stall_warn,
        inode_eviction: inode_eviction(config),
    }
}

/// When a mount of `config` asks the kernel to drop idle file entries.
pub fn inode_eviction(config: &Config) -> evictor::InodeEviction {
    evictor::InodeEviction {
        idle: config.evictable_inode_ttl,
        every: config.ttl_check_interval,
    }
}

/// Logs and otherwise ignores `signals` (each with its name), which tools send to every process
/// of our name (a reload tool, a log rotator) and whose default action would end this one.
/// `why` says what the process does not do for them. Must run within a tokio runtime.
pub fn ignore_signals(signals: &[(SignalKind, &'static str)], why: &'static str) {
    for &(kind, name) in signals {
        match signal(kind) {
            Ok(mut stream) => {
                tokio::spawn(async move {
                    while stream.recv().await.is_some() {
                        tracing::info!(signal = name, "ignored: {why}");
                    }
                });
            }
            Err(e) => tracing::warn!(signal = name, error = %e,
                "cannot install a handler; this signal ends the process"),
        }
    }
}

/// The signals the daemon acts on: SIGTERM and SIGINT stop it, SIGHUP reloads (SIGUSR1 and
/// SIGUSR2 are ignored).
struct Signals {
    term: Signal,
    int: Signal,
    hup: Signal,
}

impl Signals {
    /// `None` when the handlers cannot be installed (then only `umount` stops the daemon).
    fn install() -> Option<Signals> {
        ignore_signals(
            &[
                (SignalKind::user_defined1(), "SIGUSR1"),
                (SignalKind::user_defined2(), "SIGUSR2"),
            ],
            "msfs mount acts on SIGHUP (reload), SIGTERM and SIGINT (unmount) only",
        );
        Some(Signals {
            term: signal(SignalKind::terminate()).ok()?,
            int: signal(SignalKind::interrupt()).ok()?,
            hup: signal(SignalKind::hangup()).ok()?,
        })
    }
}

/// Serves reloads until the FUSE session ends on its own (external `umount`) or a stop signal
/// arrives; returns the signal's name in the latter case.
async fn wait_for_stop(
    signals: Option<Signals>,
    mut session_done: tokio::sync::oneshot::Receiver<()>,
    reloader: &mut reload::Reloader,
) -> Option<&'static str> {
    let Some(Signals {
        mut term,
        mut int,
        mut hup,
    }) = signals
    else {
        tracing::error!("cannot install signal handlers; stop with umount");
        let _ = session_done.await;
        return None;
    };
    loop {
        // Re-armed each time round, so a reload that changes the interval takes effect.
        let period = reloader.interval();
        let tick = async {
            match period {
                Some(period) => tokio::time::sleep(period).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = &mut session_done => return None,
            _ = term.recv() => return Some("SIGTERM"),
            _ = int.recv() => return Some("SIGINT"),
            _ = hup.recv() => reloader.reload(false).await,
            _ = tick => reloader.reload(true).await,
        }
    }
}

/// The mountpoint to use: the command line's, else the configuration's (which already reflects
/// `$MSFS_MOUNTPOINT`).
pub fn choose_mountpoint(cli: Option<&Path>, config: &Config) -> PathBuf {
    cli.map_or_else(|| config.mountpoint.clone(), Path::to_path_buf)
}
