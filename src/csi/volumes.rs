//! The published volumes of this node: one in-process FUSE session per target, all on the
//! process-wide engines.
//!
//! Calls for one volume id are serialized by a per-volume lock ([`VolumeLocks`], which forgets
//! a volume once no call holds or waits for it); calls for different volumes run concurrently.
//! A volume whose backend is its root (one backend, no `dirName`) is mounted at a private
//! staging directory and its backend directory bind-mounted onto the target.

use std::collections::HashMap;
use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

use tokio::runtime::Handle;

use super::credentials::{AuthSettings, AuthSource, Keys};
use super::error::CsiError;
use super::locks::VolumeLocks;
use super::mounts;
use super::proto::volume_capability::access_mode::Mode;
use super::request::{PublishArgs, publish_args};
use super::service_account::KubeApi;
use super::state::PublishedState;
use super::takeover::{self, Resume};
use crate::config::BackendConfig;
use crate::daemon::evictor::InodeEviction;
use crate::daemon::mountpoint;
use crate::daemon::session::{MountedSession, SessionOptions};
use crate::daemon::{DaemonError, open_backend_settings, open_store_checked};
use crate::engines::Engines;
use crate::fs::{Backend, BackendSettings, Fs, FsOptions};

/// Temporary credentials are renewed at a republish once they have less than this left.
const RENEW_BEFORE_EXPIRY: Duration = Duration::from_secs(15 * 60);
/// How long the kernel may trust entries and attributes of a CSI volume.
const ENTRY_TTL: Duration = Duration::from_secs(10);
/// Largest write request the kernel sends.
const MAX_WRITE: u32 = 1 << 20;
/// How long an unpublish waits for the volume's pending writes to land before it answers
/// UNAVAILABLE (the commits go on; the kubelet asks again). Well inside the kubelet's own
/// deadline for the call, so a store that does not answer never hangs it.
const UNPUBLISH_COMMIT_WAIT: Duration = Duration::from_secs(30);

/// Settings shared by every volume of the plugin.
#[derive(Debug, Clone)]
pub struct NodeSettings {
    /// Where bind-mounted volumes keep their FUSE mount.
    pub staging_dir: PathBuf,
    /// FUSE reader threads per volume (0: one per CPU).
    pub fuse_workers: usize,
    /// The node config's `fuse_writeback_cache`, for every volume's connection.
    pub fuse_writeback_cache: bool,
    /// The node config's `fuse_passthrough`, for every volume's connection.
    pub fuse_passthrough: bool,
    /// The node config's `fuse_io_uring` (and its poll), for every volume's connection.
    pub fuse_io_uring: Option<Duration>,
    /// At most this many published targets (0: no limit).
    pub max_volumes: usize,
    /// FUSE requests unanswered this long are logged and counted (`None`: no watchdog).
    pub fuse_stall_warn: Option<Duration>,
    /// When each volume asks the kernel to drop idle file entries (the node config's
    /// `evictable_inode_ttl`, `ttl_check_interval`).
    pub inode_eviction: InodeEviction,
    /// Inodes one volume may hold at most (the node config's `evictable_inode_limit`); less
    /// as volumes share the process's inode pool (`crate::memory::inodes`).
    pub inode_limit: usize,
    /// The fd holder keeping each volume's connection (`None`: none; see `takeover`).
    pub fd_holder: Option<PathBuf>,
    /// Where each volume's kernel-state journal lives (with an fd holder).
    pub kernel_state_dir: PathBuf,
}

struct Published {
    volume_id: String,
    mode: Mode,
    fingerprint: String,
    /// Hash of the secrets and token the credentials came from (never the secrets themselves).
    credential_source: u64,
    expires: Option<SystemTime>,
    configs: Vec<BackendConfig>,
    fs: Arc<Fs>,
    session: MountedSession,
    /// The staging directory bind-mounted (in part) onto the target.
    staging: Option<PathBuf>,
    /// The volume's kernel-state journal (with an fd holder).
    kernel_state: Option<PathBuf>,
    /// Its `warm` attribute's background fetches, stopped at unpublish.
    warming: Vec<tokio::task::AbortHandle>,
}

pub struct Volumes {
    engines: Engines,
    runtime: Handle,
    pub(super) settings: NodeSettings,
    published: Mutex<HashMap<PathBuf, Published>>,
    /// What was published, on disk, for a restarted plugin.
    state: PublishedState,
    pub(super) locks: VolumeLocks,
    /// The Kubernetes API, for the role of a pod's ServiceAccount; connected at first use.
    kube: KubeApi,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// What the volume's credentials are derived from: a change means a republish must renew
/// them. The service-account token counts only for volumes that authenticate with it, so that
/// its rotation (every republish, with `requiresRepublish`) does not re-open every volume.
pub(super) fn credential_source(
    auth: &AuthSettings,
    secrets: &HashMap<String, String>,
    context: &HashMap<String, String>,
) -> u64 {
    let mut pairs: Vec<(&String, &String)> = secrets.iter().collect();
    pairs.sort();
    let mut hasher = DefaultHasher::new();
    pairs.hash(&mut hasher);
    if auth.source == AuthSource::Pod {
        context.get(super::attributes::TOKENS_KEY).hash(&mut hasher);
    }
    hasher.finish()
}

/// The volume's backends with credentials resolved from this request (secrets, pod token),
/// and when those credentials expire.
async fn resolve_backends(
    args: &PublishArgs,
    secrets: &HashMap<String, String>,
    context: &HashMap<String, String>,
    kube: &KubeApi,
) -> Result<(Vec<BackendConfig>, Option<SystemTime>), CsiError> {
    let auth = &args.attributes.auth;
    auth.check_request(secrets, context)?;
    let keys = auth
        .resolve(&args.volume_id, secrets, context, kube)
        .await?;
    let expires = match &keys {
        Keys::Static(k) => k.expires,
        _ => None,
    };
    let configs = args
        .attributes
        .backend_configs(&args.volume_id, &args.overrides, &keys)?;
    Ok((configs, expires))
}

fn backend_error(error: DaemonError) -> CsiError {
    match error {
        DaemonError::Backend { dir_name, source } => CsiError::Backend { dir_name, source },
        other => CsiError::Internal(other.to_string()),
    }
}

impl Volumes {
    pub fn new(
        engines: Engines,
        runtime: Handle,
        settings: NodeSettings,
        state: PublishedState,
    ) -> Volumes {
        Volumes {
            engines,
            runtime,
            settings,
            published: Mutex::new(HashMap::new()),
            state,
            locks: VolumeLocks::default(),
            kube: KubeApi::default(),
        }
    }

    /// Whether volume `volume_id` is published at `target`.
    pub fn is_published(&self, volume_id: &str, target: &Path) -> bool {
        lock(&self.published)
            .get(target)
            .is_some_and(|p| p.volume_id == volume_id)
    }

    pub fn count(&self) -> usize {
        lock(&self.published).len()
    }

    /// Publishes `args` at its target; idempotent for identical arguments.
    pub async fn publish(
        &self,
        args: PublishArgs,
        secrets: &HashMap<String, String>,
        context: &HashMap<String, String>,
    ) -> Result<(), CsiError> {
        let _serialized = self.locks.lock(&args.volume_id).await;
        let source = credential_source(&args.attributes.auth, secrets, context);
        let renew = {
            let published = lock(&self.published);
            match published.get(&args.target) {
                Some(existing) if existing.fingerprint != args.fingerprint => {
                    return Err(CsiError::AlreadyExists(format!(
                        "{} is already published (volume {}) with different arguments; \
                         unpublish it first",
                        args.target.display(),
                        existing.volume_id
                    )));
                }
                Some(existing) => Some(
                    existing.credential_source != source
                        || existing.expires.is_some_and(|at| {
                            at.duration_since(SystemTime::now())
                                .map_or(true, |left| left < RENEW_BEFORE_EXPIRY)
                        }),
                ),
                None => {
                    check_single_writer(&published, &args)?;
                    None
                }
            }
        };
        match renew {
            Some(false) => Ok(()),
            Some(true) => {
                self.renew_credentials(&args, secrets, context, source)
                    .await
            }
            None => self.mount(args, secrets, context, source, None).await,
        }
    }

    /// Mounts the volume `args` describes (or, with `resume`, serves again the connection an
    /// fd holder kept: `takeover`) and records it as published.
    pub(super) async fn mount(
        &self,
        args: PublishArgs,
        secrets: &HashMap<String, String>,
        context: &HashMap<String, String>,
        credential_source: u64,
        resume: Option<Resume>,
    ) -> Result<(), CsiError> {
        self.check_capacity()?;
        // Attributes first (cheap, no network), then credentials, then the stores.
        args.attributes
            .backend_configs(&args.volume_id, &args.overrides, &Keys::Anonymous)?;
        let (configs, expires) = resolve_backends(&args, secrets, context, &self.kube).await?;
        let backends = self.open_backends(&configs).await?;
        let warm_lists = crate::warm::background::lists_of(
            configs
                .iter()
                .zip(&backends)
                .map(|(config, backend)| (config, backend.settings().store.clone())),
        );
        let resuming = resume.is_some();
        let (target, staging) = self.mount_points(&args, resuming)?;
        let (fs, kernel_state) = self.new_fs(&args, &configs, backends, resuming).await?;
        let mount_at = staging.as_ref().unwrap_or(&target);
        let options = self.session_options(&args, &configs);
        let mut session = self.start_session(&fs, mount_at, resume, options).await?;
        if let Some(staging) = staging.as_ref().filter(|_| !resuming) {
            session = bind_staging(session, staging, &configs, &target)?;
        }
        tracing::info!(volume_id = %args.volume_id, target = %target.display(),
            backends = configs.len(), "published");
        // `warm` attribute: at the first publish only (a volume taken over after a restart was
        // warmed by the process that published it).
        let warming = if resuming {
            Vec::new()
        } else {
            self.start_warming(warm_lists)
        };
        if let Some(socket) = &self.settings.fd_holder {
            takeover::keep_published(socket, &session, &args.record, secrets, context, &staging);
        }
        self.state.insert(args.record);
        let published = Published {
            volume_id: args.volume_id,
            mode: args.mode,
            fingerprint: args.fingerprint,
            credential_source,
            expires,
            configs,
            fs,
            session,
            staging,
            kernel_state,
            warming,
        };
        lock(&self.published).insert(target, published);
        Ok(())
    }

    fn check_capacity(&self) -> Result<(), CsiError> {
        let max = self.settings.max_volumes;
        if max > 0 && self.count() >= max {
            return Err(CsiError::ResourceExhausted(format!(
                "this node already serves {max} msfs volumes (--max-volumes)"
            )));
        }
        Ok(())
    }

    /// The target and, for a volume whose backend is its root, the staging directory mounted
    /// instead and bind-mounted onto it; made ready unless `resuming` (a connection taken over
    /// is mounted already: touching it would wait for this very process to answer).
    fn mount_points(
        &self,
        args: &PublishArgs,
        resuming: bool,
    ) -> Result<(PathBuf, Option<PathBuf>), CsiError> {
        let target = args.target.clone();
        let staging = args.attributes.backend_is_root.then(|| {
            self.settings
                .staging_dir
                .join(staging_name(&args.volume_id, &target))
        });
        if !resuming {
            prepare_dir(&target)?;
            if let Some(staging) = &staging {
                prepare_dir(staging)?;
            }
        }
        Ok((target, staging))
    }

    /// The volume's `Fs`, with its kernel-state journal when an fd holder keeps its connection
    /// (the state restored from it when `resuming`); and where that journal lives.
    async fn new_fs(
        &self,
        args: &PublishArgs,
        configs: &[BackendConfig],
        backends: Vec<Arc<Backend>>,
        resuming: bool,
    ) -> Result<(Arc<Fs>, Option<PathBuf>), CsiError> {
        let options = FsOptions {
            uid: configs.first().map_or(0, |c| c.uid),
            gid: configs.first().map_or(0, |c| c.gid),
            dir_perm: 0o555,
            ttl: ENTRY_TTL,
            inode_limit: self.engines.memory.inodes.join(self.settings.inode_limit),
        };
        let mut fs = Fs::new(options, self.engines.clone(), backends);
        let journal =
            takeover::kernel_state(&self.settings, &args.volume_id, &args.target, resuming)?;
        let Some((state, restored, dir)) = journal else {
            return Ok((Arc::new(fs), None));
        };
        fs = fs.with_kernel_state(state);
        if resuming {
            fs.restore(&restored).await;
        }
        Ok((Arc::new(fs), Some(dir)))
    }

    fn session_options(&self, args: &PublishArgs, configs: &[BackendConfig]) -> SessionOptions {
        SessionOptions {
            name: format!("msfs:{}", args.volume_id),
            // Pods run as any user; who may do what is decided by uid/gid and modes.
            allow_other: true,
            workers: self.settings.fuse_workers,
            read_only: configs.iter().all(|c| c.readonly),
            no_exec: false,
            max_write: MAX_WRITE,
            writeback_cache: self.settings.fuse_writeback_cache,
            passthrough: self.settings.fuse_passthrough,
            io_uring: self.settings.fuse_io_uring,
            stall_warn: self.settings.fuse_stall_warn,
            inode_eviction: self.settings.inode_eviction,
        }
    }

    /// Mounts FUSE at `mount_at`, or serves the connection `resume` holds, off the runtime.
    async fn start_session(
        &self,
        fs: &Arc<Fs>,
        mount_at: &Path,
        resume: Option<Resume>,
        options: SessionOptions,
    ) -> Result<MountedSession, CsiError> {
        let (fs, runtime, at) = (fs.clone(), self.runtime.clone(), mount_at.to_path_buf());
        tokio::task::spawn_blocking(move || match resume {
            Some(resume) => {
                MountedSession::resume(fs, runtime, &at, resume.fd, resume.kernel, &options)
            }
            None => MountedSession::start(fs, runtime, &at, &options),
        })
        .await
        .map_err(|e| CsiError::Internal(format!("mount task: {e}")))?
        .map_err(|source| CsiError::Io {
            what: "cannot mount FUSE at",
            path: mount_at.to_path_buf(),
            source,
        })
    }

    /// The `warm` attribute's fetches, in the background.
    fn start_warming(
        &self,
        lists: Vec<crate::warm::background::WarmList>,
    ) -> Vec<tokio::task::AbortHandle> {
        let Some(cache) = &self.engines.cache else {
            return Vec::new();
        };
        lists
            .into_iter()
            .map(|list| {
                let cache = cache.clone();
                tokio::spawn(async move { crate::warm::background::warm(&list, &cache).await })
                    .abort_handle()
            })
            .collect()
    }

    /// Opens and checks every backend concurrently; the first failure fails the publish.
    async fn open_backends(
        &self,
        configs: &[BackendConfig],
    ) -> Result<Vec<Arc<Backend>>, CsiError> {
        let engines = &self.engines;
        let opened = futures::future::join_all(configs.iter().map(|config| async move {
            let settings = open_backend_settings(config, configs, engines)
                .await
                .map_err(backend_error)?;
            Ok::<_, CsiError>(Arc::new(Backend::new(&config.dir_name, settings)))
        }))
        .await;
        opened.into_iter().collect()
    }

    /// A republish with new secrets or a fresh token: new credentials, same mount.
    async fn renew_credentials(
        &self,
        args: &PublishArgs,
        secrets: &HashMap<String, String>,
        context: &HashMap<String, String>,
        credential_source: u64,
    ) -> Result<(), CsiError> {
        let (configs, expires) = resolve_backends(args, secrets, context, &self.kube).await?;
        let fs = lock(&self.published)
            .get(&args.target)
            .map(|p| p.fs.clone());
        let Some(fs) = fs else {
            return Err(CsiError::Internal(
                "volume vanished during republish".into(),
            ));
        };
        let mut stores = Vec::with_capacity(configs.len());
        for config in &configs {
            let store = open_store_checked(config, &self.engines)
                .await
                .map_err(backend_error)?;
            stores.push(store);
        }
        for (config, store) in configs.iter().zip(stores) {
            // New credentials may abort what the old ones could not (as at publish).
            if !config.readonly {
                self.engines.writes.recover_uploads(store.clone());
            }
            if let Some(backend) = fs.backend(&config.dir_name) {
                // New credentials, same namespace: the manifest in use stays.
                let manifest = backend.settings().manifest.clone();
                backend.replace(BackendSettings::new(config, store, manifest));
            }
        }
        if let Some(published) = lock(&self.published).get_mut(&args.target) {
            published.credential_source = credential_source;
            published.expires = expires;
            published.configs = configs;
        }
        tracing::info!(volume_id = %args.volume_id, target = %args.target.display(),
            "credentials renewed");
        Ok(())
    }

    /// Unmounts `target` (lazily if busy), commits pending writes and removes the target
    /// directory. An absent or already unmounted target is fine.
    pub async fn unpublish(&self, volume_id: &str, target: &Path) -> Result<(), CsiError> {
        let _serialized = self.locks.lock(volume_id).await;
        let published = lock(&self.published).remove(target);
        match published {
            Some(published) => {
                if let Err(e) = self.commit_pending(&published).await {
                    lock(&self.published).insert(target.to_path_buf(), published);
                    return Err(e);
                }
                self.unmount(published, target).await?;
            }
            None => {
                // Not ours (any more): a mount left by a previous run of the plugin is detached.
                if matches!(mountpoint::mounted_fstype(target), Ok(Some(_))) {
                    mountpoint::detach(target).map_err(|source| CsiError::Io {
                        what: "cannot unmount",
                        path: target.to_path_buf(),
                        source,
                    })?;
                }
            }
        }
        self.state.remove(target);
        match std::fs::remove_dir(target) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(source) => {
                return Err(CsiError::Io {
                    what: "cannot remove the target directory",
                    path: target.to_path_buf(),
                    source,
                });
            }
        }
        Ok(())
    }

    /// Commits what the volume's files hold before its mount goes away. A file that cannot be
    /// committed stays dirty and is retried in the background, and the unpublish fails (the
    /// kubelet calls it again) rather than unmount over an unsaved write. Commits still running
    /// after `UNPUBLISH_COMMIT_WAIT` go on in the background, and the unpublish fails the same.
    async fn commit_pending(&self, published: &Published) -> Result<(), CsiError> {
        let namespaces: Vec<(String, String)> = published
            .fs
            .backends()
            .iter()
            .map(|backend| {
                let settings = backend.settings();
                (settings.store.id().to_string(), settings.prefix.clone())
            })
            .collect();
        let writes = self.engines.writes.clone();
        let drain = tokio::spawn(async move {
            writes
                .drain_matching(|file| {
                    namespaces.iter().any(|(store, prefix)| {
                        file.store.id() == store && file.key.starts_with(prefix)
                    })
                })
                .await
        });
        let pending = |detail: String| CsiError::WritesPending {
            volume_id: published.volume_id.clone(),
            detail,
        };
        let failed = match tokio::time::timeout(UNPUBLISH_COMMIT_WAIT, drain).await {
            Ok(Ok(failed)) => failed,
            Ok(Err(e)) => return Err(pending(format!("the commit task failed: {e}"))),
            Err(_) => {
                tracing::warn!(volume_id = %published.volume_id,
                    waited = ?UNPUBLISH_COMMIT_WAIT,
                    "written files of the volume are still being committed at unpublish");
                return Err(pending(format!(
                    "still being committed after {} s",
                    UNPUBLISH_COMMIT_WAIT.as_secs()
                )));
            }
        };
        let Some((_, first)) = failed.first() else {
            return Ok(());
        };
        for (file, error) in &failed {
            tracing::error!(volume_id = %published.volume_id, backend = %file.backend,
                key = %file.key, error = %error,
                "cannot commit a written file at unpublish; kept dirty and retried");
        }
        Err(pending(format!(
            "{} file(s); the first: {first}",
            failed.len()
        )))
    }

    async fn unmount(&self, mut published: Published, target: &Path) -> Result<(), CsiError> {
        // A volume gone needs nothing warmed: its credentials may be gone with it.
        for task in published.warming.drain(..) {
            task.abort();
        }
        if published.staging.is_some() {
            mounts::unbind(target).map_err(|source| CsiError::Io {
                what: "cannot unmount",
                path: target.to_path_buf(),
                source,
            })?;
        }
        published.session.unmount().map_err(|source| CsiError::Io {
            what: "cannot unmount",
            path: published.session.path().to_path_buf(),
            source,
        })?;
        let session = published.session;
        let staging = published.staging.take();
        // A lazily detached session ends when its last user lets go; do not wait for that.
        let joined = tokio::task::spawn_blocking(move || session.join());
        let _ = tokio::time::timeout(Duration::from_secs(5), joined).await;
        if let Some(staging) = staging {
            let _ = std::fs::remove_dir(&staging);
        }
        if let Some(socket) = &self.settings.fd_holder {
            takeover::release(socket, target);
        }
        if let Some(dir) = published.kernel_state.take() {
            let _ = std::fs::remove_dir_all(dir);
        }
        drop(published.fs);
        tracing::info!(volume_id = %published.volume_id, target = %target.display(),
            backends = published.configs.len(), "unpublished");
        Ok(())
    }

    /// Remounts what a previous run of the plugin published (its FUSE sessions died with it).
    /// Volumes whose credentials need nothing from the request — the plugin's own chain, or
    /// none — are mounted again at once, so pods (with `mountPropagation: HostToContainer`)
    /// see their files again without a restart. Secrets and pod tokens are never kept on disk:
    /// those volumes come back at the kubelet's next republish (`requiresRepublish`).
    pub async fn restore(&self, pods_dir: &Path) {
        for record in self.state.records() {
            let target = PathBuf::from(&record.target_path);
            // Taken over from the fd holder already (`take_over`).
            if self.is_published(&record.volume_id, &target) {
                continue;
            }
            if !target.parent().is_some_and(Path::exists) {
                tracing::info!(volume_id = %record.volume_id, target = %target.display(),
                    "forgetting a volume of a previous run: its pod is gone");
                self.state.remove(&target);
                continue;
            }
            let request = record.to_request();
            let args = match publish_args(&request, pods_dir) {
                Ok(args) => args,
                Err(e) => {
                    tracing::warn!(volume_id = %record.volume_id, error = %e,
                        "forgetting a volume of a previous run that no longer checks");
                    self.state.remove(&target);
                    continue;
                }
            };
            if !matches!(
                args.attributes.auth.source,
                AuthSource::Driver | AuthSource::Anonymous
            ) {
                tracing::info!(volume_id = %record.volume_id, target = %target.display(),
                    "volume of a previous run waits for the kubelet's republish \
                     (its credentials are not kept on disk)");
                continue;
            }
            match self
                .publish(args, &request.secrets, &request.volume_context)
                .await
            {
                Ok(()) => tracing::info!(volume_id = %record.volume_id,
                    target = %target.display(), "remounted a volume of a previous run"),
                Err(e) => tracing::warn!(volume_id = %record.volume_id,
                    target = %target.display(), error = %e,
                    "cannot remount a volume of a previous run; the kubelet's next call decides"),
            }
        }
    }

    /// Plugin shutdown (an upgrade, a node drain): commits every volume's pending writes and
    /// unmounts it, but keeps the targets and the remembered publishes — the pods still want
    /// their volumes, and the next plugin remounts them (`restore`, or the kubelet's
    /// republish). A volume whose writes cannot land is unmounted anyway, its loss logged:
    /// the process is going away and cannot keep them.
    /// The plugin stops for a successor (`to`): every volume stops being served at once, and
    /// its connection stays mounted and held for the successor, which takes it over. Waits at most
    /// `within` for the requests being answered (see `MountedSession::hand_off`).
    pub async fn hand_over(&self, within: Duration, to: &'static str) {
        let published = std::mem::take(&mut *lock(&self.published));
        for volume in published.values() {
            volume.session.begin_hand_off();
        }
        let waits = published.iter().map(|(target, volume)| async move {
            let unanswered = volume.session.answered_within(within).await;
            tracing::info!(volume_id = %volume.volume_id, target = %target.display(),
                unanswered, to, "handed the volume over");
        });
        futures::future::join_all(waits).await;
        // Not dropped: nothing of the sessions may end or unmount before the process does.
        std::mem::forget(published);
    }

    pub async fn shut_down(&self) {
        let targets: Vec<(String, PathBuf)> = lock(&self.published)
            .iter()
            .map(|(t, p)| (p.volume_id.clone(), t.clone()))
            .collect();
        for (volume_id, target) in targets {
            let _serialized = self.locks.lock(&volume_id).await;
            let Some(published) = lock(&self.published).remove(&target) else {
                continue;
            };
            if let Err(e) = self.commit_pending(&published).await {
                tracing::error!(volume_id, target = %target.display(), error = %e,
                    "plugin stopping before written files of this volume landed; their spill \
                     logs in the state dir are committed when the volume is mounted again");
            }
            if let Err(e) = self.unmount(published, &target).await {
                tracing::warn!(volume_id, target = %target.display(), error = %e,
                    "cannot unmount at shutdown");
            }
        }
    }
}

/// Bind-mounts the volume's backend directory in its staging mount onto `target`. On failure
/// the session is unmounted and the staging directory removed.
fn bind_staging(
    mut session: MountedSession,
    staging: &Path,
    configs: &[BackendConfig],
    target: &Path,
) -> Result<MountedSession, CsiError> {
    let dir_name = configs
        .first()
        .map(|c| c.dir_name.clone())
        .unwrap_or_default();
    if let Err(source) = mounts::bind(&staging.join(&dir_name), target) {
        let _ = session.unmount();
        tokio::task::spawn_blocking(move || session.join());
        let _ = std::fs::remove_dir(staging);
        return Err(CsiError::Io {
            what: "cannot bind-mount the volume onto",
            path: target.to_path_buf(),
            source,
        });
    }
    Ok(session)
}

/// CSI's SINGLE_NODE_SINGLE_WRITER: such a volume is published at one target at a time.
fn check_single_writer(
    published: &HashMap<PathBuf, Published>,
    args: &PublishArgs,
) -> Result<(), CsiError> {
    let elsewhere = published.iter().find(|(target, p)| {
        p.volume_id == args.volume_id
            && **target != args.target
            && (p.mode == Mode::SingleNodeSingleWriter || args.mode == Mode::SingleNodeSingleWriter)
    });
    match elsewhere {
        Some((target, _)) => Err(CsiError::FailedPrecondition(format!(
            "volume {} is already published at {} and one of the two asks for \
             SINGLE_NODE_SINGLE_WRITER",
            args.volume_id,
            target.display()
        ))),
        None => Ok(()),
    }
}

/// Creates the directory (and parents). Whatever is mounted there is not ours (a volume this
/// process serves is never mounted again): it is left by a previous run of the plugin, whose
/// sessions died with it, and is detached first. (A dead mount's root may still `stat` fine
/// from cached attributes, so the mount table decides, not an ENOTCONN.)
fn prepare_dir(path: &Path) -> Result<(), CsiError> {
    let io = |source| CsiError::Io {
        what: "cannot prepare mount directory",
        path: path.to_path_buf(),
        source,
    };
    // Mounts may be stacked (a republish that raced a crash); a few rounds clear them.
    for _ in 0..8 {
        let stale = match std::fs::metadata(path) {
            Err(e) if e.raw_os_error() == Some(libc::ENOTCONN) => true,
            _ => matches!(mountpoint::mounted_fstype(path), Ok(Some(_))),
        };
        if !stale {
            break;
        }
        tracing::info!(path = %path.display(), "detaching a mount left by a previous run");
        mountpoint::detach(path).map_err(io)?;
    }
    std::fs::create_dir_all(path).map_err(io)
}

/// A staging directory name unique per (volume, target).
pub(super) fn staging_name(volume_id: &str, target: &Path) -> String {
    let mut hasher = DefaultHasher::new();
    target.hash(&mut hasher);
    format!("{volume_id}-{:016x}", hasher.finish())
}
