//! `msfs fd-holder --socket PATH` as the chart runs it beside the CSI plugin: a process of its
//! own, started before the plugin and stopped by PID at the end (SIGTERM, which it honours once
//! it holds nothing; SIGKILL if it does not exit).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use msfs::holder::HolderClient;

const START_TIMEOUT: Duration = Duration::from_secs(10);
const STOP_GRACE: Duration = Duration::from_secs(10);

pub struct FdHolder {
    child: Option<Child>,
    socket: PathBuf,
    /// The temporary directory of the socket, when the holder has its own.
    _dir: Option<tempfile::TempDir>,
}

impl FdHolder {
    /// Starts the holder on a socket in a temporary directory; returns once it answers.
    pub fn start() -> FdHolder {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut holder = FdHolder::start_at(dir.path().join("fd-holder.sock"));
        holder._dir = Some(dir);
        holder
    }

    /// Starts the holder at `socket`, as the chart's per-pod holders are
    /// (`fd-holder/POD.sock`); returns once it answers.
    pub fn start_at(socket: PathBuf) -> FdHolder {
        let child = Command::new(env!("CARGO_BIN_EXE_msfs"))
            .arg("fd-holder")
            .arg("--socket")
            .arg(&socket)
            .stdin(Stdio::null())
            .spawn()
            .expect("spawn the fd holder");
        let holder = FdHolder {
            child: Some(child),
            socket,
            _dir: None,
        };
        let deadline = Instant::now() + START_TIMEOUT;
        while HolderClient::connect(&holder.socket).is_err() {
            assert!(
                Instant::now() < deadline,
                "the fd holder did not answer at {} within {START_TIMEOUT:?}",
                holder.socket.display()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        holder
    }

    pub fn socket(&self) -> &Path {
        &self.socket
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, Child::id)
    }

    /// The mountpoints whose connections it holds.
    pub fn held(&self) -> Vec<String> {
        HolderClient::connect(&self.socket)
            .and_then(|mut c| c.list())
            .expect("list the holder")
            .into_iter()
            .map(|held| held.name)
            .collect()
    }

    /// Sends SIGTERM without waiting (the pod going away: it exits once it holds nothing).
    pub fn terminate(&self) {
        if let Some(child) = &self.child {
            // SAFETY: signalling our own child, not reaped yet, by its pid.
            unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
        }
    }

    /// SIGTERM by PID and wait (bounded); returns whether it exited by itself.
    pub fn stop(&mut self) -> bool {
        let Some(child) = self.child.take() else {
            return true;
        };
        super::terminate_child(child, STOP_GRACE)
    }
}

impl Drop for FdHolder {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
