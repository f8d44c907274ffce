//! A real `msfs csi` plugin process on a temporary unix socket, the tonic clients that play
//! kubelet against it, and a moto server for STS flows.
//!
//! `CsiPlugin::start` lays out a temporary "kubelet dir" (`kubelet/pods/…`), a state dir and a
//! socket path, runs this crate's `msfs csi` and returns once Probe answers. `Drop` stops the
//! plugin (SIGTERM, then SIGKILL), lazily unmounts anything still mounted under its directory
//! and reaps the process.

use std::collections::HashMap;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use hyper_util::rt::TokioIo;
use msfs::csi::proto::controller_client::ControllerClient;
use msfs::csi::proto::identity_client::IdentityClient;
use msfs::csi::proto::node_client::NodeClient;
use msfs::csi::proto::volume_capability::access_mode::Mode;
use msfs::csi::proto::volume_capability::{AccessMode, AccessType, MountVolume};
use msfs::csi::proto::{NodePublishVolumeRequest, NodeUnpublishVolumeRequest, VolumeCapability};
use tonic::transport::{Channel, Endpoint, Uri};

use super::garage::Garage;
use super::launcher::Launcher;
use super::mount::is_mounted;

/// Longest wait for the plugin to answer Probe after spawning it.
const START_TIMEOUT: Duration = Duration::from_secs(30);
/// How long `Drop` lets the plugin unpublish and exit after SIGTERM before killing it.
const STOP_GRACE: Duration = Duration::from_secs(10);
const POLL_INTERVAL: Duration = Duration::from_millis(20);

/// A running `msfs csi`; see the module docs.
pub struct CsiPlugin {
    child: Option<Child>,
    /// With [`CsiPlugin::start_launched`]: what starts and stops the plugin, and the pid of the
    /// one running (instead of `child`).
    launcher: Option<Launcher>,
    launched: Option<u32>,
    /// How the plugin was started, to start it again over the same directories.
    command: Vec<std::ffi::OsString>,
    /// Extra environment of the plugin process (its own AWS chain, a kubeconfig…).
    env: Vec<(String, String)>,
    socket: PathBuf,
    kubelet: PathBuf,
    state: PathBuf,
    log: PathBuf,
    /// The memory cgroup (its `cgroup.procs`) each plugin process joins before it runs.
    cgroup: Option<PathBuf>,
    // Last field: removed after `Drop::drop` has stopped the plugin.
    dir: Option<tempfile::TempDir>,
}

impl CsiPlugin {
    /// Starts the plugin with built-in node settings.
    pub fn start() -> CsiPlugin {
        Self::start_with(None, &[])
    }

    /// Starts the plugin with `config` (node-wide `msfs_version: 1` YAML, if any) and extra
    /// command-line arguments.
    pub fn start_with(config: Option<&str>, extra_args: &[&str]) -> CsiPlugin {
        Self::start_with_env(config, extra_args, &[])
    }

    /// As [`CsiPlugin::start_with`], with `env` added to the plugin's environment (kept across
    /// [`CsiPlugin::kill_and_restart`]).
    pub fn start_with_env(
        config: Option<&str>,
        extra_args: &[&str],
        env: &[(&str, &str)],
    ) -> CsiPlugin {
        Self::start_inner(config, extra_args, env, None)
    }

    /// As [`CsiPlugin::start_with`], with the plugin in the memory cgroup whose `cgroup.procs`
    /// is `cgroup` from its first instruction (see `cgroup::enter_on_spawn`).
    pub fn start_in_cgroup(config: Option<&str>, extra_args: &[&str], cgroup: &Path) -> CsiPlugin {
        let mut plugin = Self::prepare(config, extra_args, &[], None);
        plugin.cgroup = Some(cgroup.to_path_buf());
        plugin.spawn();
        plugin
    }

    /// As [`CsiPlugin::start_with`], but the plugin (and each one after a restart) is started
    /// by a [`Launcher`] started first: the test may then restart it while its own threads hold
    /// files open in the plugin's volumes (see `launcher.rs`).
    pub fn start_launched(config: Option<&str>, extra_args: &[&str]) -> CsiPlugin {
        Self::start_inner(config, extra_args, &[], Some(Launcher::start()))
    }

    fn start_inner(
        config: Option<&str>,
        extra_args: &[&str],
        env: &[(&str, &str)],
        launcher: Option<Launcher>,
    ) -> CsiPlugin {
        let mut plugin = Self::prepare(config, extra_args, env, launcher);
        plugin.spawn();
        plugin
    }

    /// The plugin's directories and command, not started yet.
    fn prepare(
        config: Option<&str>,
        extra_args: &[&str],
        env: &[(&str, &str)],
        launcher: Option<Launcher>,
    ) -> CsiPlugin {
        let dir = tempfile::Builder::new()
            .prefix("msfs-csi-")
            .tempdir()
            .expect("temporary directory");
        let root = dir.path().canonicalize().expect("canonical temp dir");
        let socket = root.join("plugin/csi.sock");
        let kubelet = root.join("kubelet");
        let state = root.join("state");
        let log = root.join("plugin.log");
        std::fs::create_dir_all(kubelet.join("pods")).expect("create kubelet dir");
        let log_file = std::fs::File::create(&log).expect("create plugin log");
        let mut command = Command::new(env!("CARGO_BIN_EXE_msfs"));
        command
            .arg("csi")
            .arg(format!("--endpoint=unix://{}", socket.display()))
            .arg("--node-id=test-node")
            .arg(format!("--state-dir={}", state.display()))
            .arg(format!("--kubelet-dir={}", kubelet.display()))
            .args(extra_args);
        if let Some(text) = config {
            let path = root.join("node.yaml");
            std::fs::write(&path, text).expect("write node config");
            command.arg(&path);
        }
        drop(log_file);
        CsiPlugin {
            child: None,
            launcher,
            launched: None,
            command: command.get_args().map(|a| a.to_os_string()).collect(),
            env: env
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            socket,
            kubelet,
            state,
            log,
            cgroup: None,
            dir: Some(dir),
        }
    }

    /// Starts the plugin process (appending to its log) and waits until it serves.
    fn spawn(&mut self) {
        if let Some(launcher) = self.launcher.as_mut() {
            let mut env = vec![("RUST_LOG".to_string(), "info,msfs=debug".to_string())];
            env.extend(self.env.iter().cloned());
            let program = Path::new(env!("CARGO_BIN_EXE_msfs"));
            self.launched = Some(launcher.spawn(program, &self.command, &env, &self.log));
            self.wait_until_serving();
            return;
        }
        let log_file = std::fs::OpenOptions::new()
            .append(true)
            .open(&self.log)
            .expect("open plugin log");
        let mut command = Command::new(env!("CARGO_BIN_EXE_msfs"));
        if let Some(procs) = &self.cgroup {
            super::cgroup::enter_on_spawn(&mut command, procs);
        }
        let child = command
            .args(&self.command)
            .env("RUST_LOG", "info,msfs=debug")
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(log_file.try_clone().expect("log fd"))
            .stderr(log_file)
            .spawn()
            .expect("spawn msfs csi");
        self.child = Some(child);
        self.wait_until_serving();
    }

    /// An upgrade, as the chart's `maxSurge` does it (needs [`CsiPlugin::start_launched`]):
    /// starts the next plugin beside this one, waits until it waits to succeed it, SIGTERMs
    /// this one (which hands every volume over) and waits until the successor serves.
    pub fn upgrade(&mut self) {
        let waiting = |log: &str| log.matches("waiting to succeed").count();
        let before = waiting(&self.log_text());
        let old = self
            .launched
            .take()
            .expect("upgrade needs a launched plugin");
        let launcher = self.launcher.as_mut().expect("upgrade needs a launcher");
        let mut env = vec![("RUST_LOG".to_string(), "info,msfs=debug".to_string())];
        env.extend(self.env.iter().cloned());
        let program = Path::new(env!("CARGO_BIN_EXE_msfs"));
        let new = launcher.spawn(program, &self.command, &env, &self.log);
        let deadline = Instant::now() + START_TIMEOUT;
        while waiting(&self.log_text()) == before {
            let launcher = self.launcher.as_mut().expect("launcher");
            if let Some(status) = launcher.exited(new) {
                panic!(
                    "the successor exited (status {status}):\n{}",
                    self.log_text()
                );
            }
            assert!(
                Instant::now() < deadline,
                "the successor did not wait to succeed the plugin within {START_TIMEOUT:?}"
            );
            std::thread::sleep(POLL_INTERVAL);
        }
        let launcher = self.launcher.as_mut().expect("launcher");
        assert!(
            launcher.terminate(old, STOP_GRACE),
            "the old plugin did not hand over and exit within {STOP_GRACE:?}"
        );
        self.launched = Some(new);
        self.wait_until_serving();
    }

    /// SIGKILLs the plugin (its mounts die with it, as in an OOM kill or a node-agent crash)
    /// and starts it again over the same socket, state and kubelet directories.
    pub fn kill_and_restart(&mut self) {
        if let (Some(launcher), Some(pid)) = (self.launcher.as_mut(), self.launched.take()) {
            launcher.kill(pid);
        }
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        self.spawn();
    }

    /// Stops the plugin gracefully (SIGTERM, as at an upgrade) and starts it again over the
    /// same directories.
    pub fn restart(&mut self) {
        assert!(self.stop(), "the plugin did not stop within {STOP_GRACE:?}");
        self.spawn();
    }

    fn wait_until_serving(&mut self) {
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if std::os::unix::net::UnixStream::connect(&self.socket).is_ok() {
                return;
            }
            if let Some(child) = self.child.as_mut()
                && let Ok(Some(status)) = child.try_wait()
            {
                panic!(
                    "msfs csi exited ({status}) before serving:\n{}",
                    self.log_text()
                );
            }
            if let (Some(launcher), Some(pid)) = (self.launcher.as_mut(), self.launched)
                && let Some(status) = launcher.exited(pid)
            {
                panic!(
                    "msfs csi exited (status {status}) before serving:\n{}",
                    self.log_text()
                );
            }
            assert!(
                Instant::now() < deadline,
                "msfs csi did not listen on {} within {START_TIMEOUT:?}:\n{}",
                self.socket.display(),
                self.log_text()
            );
            std::thread::sleep(POLL_INTERVAL);
        }
    }

    /// The pid of the plugin running now.
    pub fn pid(&self) -> Option<u32> {
        self.launched.or(self.child.as_ref().map(Child::id))
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub fn socket(&self) -> &Path {
        &self.socket
    }

    pub fn kubelet_dir(&self) -> &Path {
        &self.kubelet
    }

    pub fn state_dir(&self) -> &Path {
        &self.state
    }

    /// Where kubelet would ask for volume `name` of pod `pod`:
    /// `<kubelet>/pods/<pod>/volumes/kubernetes.io~csi/<name>/mount` (its parent exists).
    pub fn target(&self, pod: &str, name: &str) -> PathBuf {
        let dir = self
            .kubelet
            .join("pods")
            .join(pod)
            .join("volumes/kubernetes.io~csi")
            .join(name);
        std::fs::create_dir_all(&dir).expect("create the target's parent");
        dir.join("mount")
    }

    pub async fn channel(&self) -> Channel {
        let socket = self.socket.clone();
        Endpoint::try_from("http://csi.invalid")
            .expect("endpoint")
            .connect_with_connector(tower::service_fn(move |_: Uri| {
                let socket = socket.clone();
                async move {
                    let stream = tokio::net::UnixStream::connect(socket).await?;
                    Ok::<_, std::io::Error>(TokioIo::new(stream))
                }
            }))
            .await
            .expect("connect to the plugin socket")
    }

    pub async fn identity(&self) -> IdentityClient<Channel> {
        IdentityClient::new(self.channel().await)
    }

    pub async fn node(&self) -> NodeClient<Channel> {
        NodeClient::new(self.channel().await)
    }

    pub async fn controller(&self) -> ControllerClient<Channel> {
        ControllerClient::new(self.channel().await)
    }

    /// Sends SIGTERM and returns: the plugin, once it exits, stays a zombie (its PID taken)
    /// until [`CsiPlugin::stop`] reaps it, as under a container runtime that reaps at its own
    /// pace. A successor must not wait for that, nor mistake what it left for a live process's.
    pub fn signal_stop(&self) {
        let pid = self
            .launched
            .or_else(|| self.child.as_ref().map(std::process::Child::id))
            .expect("a running plugin");
        // SAFETY: kill(2) on our own (or our launcher's) child, not reaped yet, so its PID
        // cannot have been reused.
        unsafe { libc::kill(pid as libc::pid_t, libc::SIGTERM) };
    }

    /// Sends SIGTERM and waits (bounded) for the plugin to exit; returns whether it did.
    pub fn stop(&mut self) -> bool {
        if let (Some(launcher), Some(pid)) = (self.launcher.as_mut(), self.launched.take()) {
            return launcher.terminate(pid, STOP_GRACE);
        }
        let Some(child) = self.child.take() else {
            return true;
        };
        super::terminate_child(child, STOP_GRACE)
    }

    /// Every mount below the plugin's temporary directory, deepest first.
    fn mounts_below(&self) -> Vec<PathBuf> {
        let Some(dir) = &self.dir else {
            return Vec::new();
        };
        let root = dir
            .path()
            .canonicalize()
            .unwrap_or_else(|_| dir.path().into());
        let table = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
        let mut found: Vec<PathBuf> = table
            .lines()
            .filter_map(|line| line.split(' ').nth(4))
            .map(|p| PathBuf::from(p.replace("\\040", " ")))
            .filter(|p| p.starts_with(&root))
            .collect();
        found.sort_by_key(|p| std::cmp::Reverse(p.components().count()));
        found
    }
}

impl Drop for CsiPlugin {
    fn drop(&mut self) {
        self.stop();
        for path in self.mounts_below() {
            let _ = Command::new("umount").arg("-l").arg(&path).status();
        }
        if !self.mounts_below().is_empty()
            && let Some(dir) = self.dir.take()
        {
            let kept = dir.keep();
            eprintln!("csi fixture: mounts remain; leaving {}", kept.display());
        }
    }
}

/// A mount capability with `mode` and `flags`.
pub fn capability(mode: Mode, flags: &[&str]) -> VolumeCapability {
    VolumeCapability {
        access_mode: Some(AccessMode { mode: mode as i32 }),
        access_type: Some(AccessType::Mount(MountVolume {
            fs_type: String::new(),
            mount_flags: flags.iter().map(|f| f.to_string()).collect(),
            volume_mount_group: String::new(),
        })),
    }
}

pub fn map(pairs: &[(&str, &str)]) -> HashMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// Volume attributes for `bucket` on `garage`, signed with the keys of [`garage_secrets`].
pub fn garage_attributes(garage: &Garage, bucket: &str) -> HashMap<String, String> {
    map(&[
        ("bucketName", bucket),
        ("endpoint", &garage.endpoint()),
        ("region", garage.region()),
        ("authenticationSource", "secret"),
    ])
}

/// What a `nodePublishSecretRef` Secret holding garage's key passes.
pub fn garage_secrets(garage: &Garage) -> HashMap<String, String> {
    map(&[
        ("access_key_id", garage.access_key()),
        ("secret_access_key", garage.secret_key()),
    ])
}

/// A writable (MULTI_NODE_MULTI_WRITER) publish of `volume_id` at `target`.
pub fn publish_request(
    volume_id: &str,
    target: &Path,
    context: HashMap<String, String>,
    secrets: HashMap<String, String>,
) -> NodePublishVolumeRequest {
    NodePublishVolumeRequest {
        volume_id: volume_id.to_string(),
        publish_context: HashMap::new(),
        staging_target_path: String::new(),
        target_path: target.display().to_string(),
        volume_capability: Some(capability(Mode::MultiNodeMultiWriter, &[])),
        readonly: false,
        secrets,
        volume_context: context,
    }
}

pub fn unpublish_request(volume_id: &str, target: &Path) -> NodeUnpublishVolumeRequest {
    NodeUnpublishVolumeRequest {
        volume_id: volume_id.to_string(),
        target_path: target.display().to_string(),
    }
}

pub fn mounted(path: &Path) -> bool {
    is_mounted(path)
}

/// A moto server (S3 + STS, accepts any signature) on a random loopback port.
pub struct Moto {
    child: Child,
    port: u16,
}

impl Moto {
    /// Starts `moto_server` and waits until it answers. Panics if it is not installed
    /// (`pip install 'moto[server]'`; scripts/install-test-deps.sh installs it).
    pub fn start() -> Moto {
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("free port")
            .port();
        let child = Command::new("moto_server")
            .args(["-H", "127.0.0.1", "-p", &port.to_string()])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn moto_server (pip install 'moto[server]')");
        let moto = Moto { child, port };
        let deadline = Instant::now() + START_TIMEOUT;
        while super::http_get(port, "/moto-api/").is_none() {
            assert!(Instant::now() < deadline, "moto_server did not start");
            std::thread::sleep(POLL_INTERVAL);
        }
        moto
    }

    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// An S3 client for moto (any keys work).
    pub fn s3(&self) -> aws_sdk_s3::Client {
        let config = aws_sdk_s3::config::Builder::new()
            .behavior_version(aws_sdk_s3::config::BehaviorVersion::latest())
            .region(aws_sdk_s3::config::Region::new("us-east-1"))
            .endpoint_url(self.endpoint())
            .force_path_style(true)
            .credentials_provider(aws_sdk_s3::config::Credentials::new(
                "testing", "testing", None, None, "test",
            ))
            .build();
        aws_sdk_s3::Client::from_conf(config)
    }
}

impl Drop for Moto {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
