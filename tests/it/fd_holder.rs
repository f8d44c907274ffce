//! The real `msfs fd-holder` process: serves several clients, exits by itself once empty, and
//! outlives a SIGTERM while it holds an fd.

use std::os::fd::AsFd;
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus};
use std::time::{Duration, Instant};

use msfs::holder::HolderClient;

/// A holder process, killed (by its PID) if a test ends before it exits.
struct Holder {
    child: Child,
    socket: PathBuf,
    _dir: tempfile::TempDir,
}

impl Drop for Holder {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Holder {
    fn start(exit_when_empty: bool) -> Holder {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("holder.sock");
        let mut command = Command::new(env!("CARGO_BIN_EXE_msfs"));
        command.arg("fd-holder").arg("--socket").arg(&socket);
        if exit_when_empty {
            command.arg("--exit-when-empty");
        }
        let holder = Holder {
            child: command.spawn().unwrap(),
            socket,
            _dir: dir,
        };
        holder.connect();
        holder
    }

    fn connect(&self) -> HolderClient {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            match HolderClient::connect(&self.socket) {
                Ok(client) => return client,
                Err(e) if Instant::now() >= deadline => panic!("holder does not answer: {e}"),
                Err(_) => std::thread::sleep(Duration::from_millis(20)),
            }
        }
    }

    fn wait_for_exit(&mut self) -> ExitStatus {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(Instant::now() < deadline, "holder still running after 10 s");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

#[test]
fn holder_serves_a_second_client_and_exits_once_empty() {
    let mut holder = Holder::start(true);
    let (reader, _writer) = std::io::pipe().unwrap();
    let mut first = holder.connect();
    first.keep("vol", br#"{"v":1}"#, reader.as_fd()).unwrap();
    let mut second = holder.connect();
    let held = second.list().unwrap();
    assert_eq!(held.len(), 1);
    assert_eq!(
        (held[0].name.as_str(), held[0].meta.as_slice()),
        ("vol", &br#"{"v":1}"#[..])
    );
    second.release("vol").unwrap();
    drop((first, second));
    assert!(holder.wait_for_exit().success());
    assert!(!holder.socket.exists(), "socket left behind");
}

#[test]
fn sigterm_while_holding_does_not_stop_the_holder() {
    let mut holder = Holder::start(false);
    let (reader, _writer) = std::io::pipe().unwrap();
    let mut client = holder.connect();
    client.keep("vol", b"{}", reader.as_fd()).unwrap();
    assert!(!client.stopping().unwrap(), "not told to stop yet");
    let pid = libc::pid_t::try_from(holder.child.id()).unwrap();
    // SAFETY: kill(2) on the PID of our own child, which `Holder` has not reaped yet.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0);
    // Time for the holder's once-a-second loop to see the signal.
    std::thread::sleep(Duration::from_secs(2));
    assert!(
        holder.child.try_wait().unwrap().is_none(),
        "SIGTERM stopped a holder holding an fd"
    );
    assert_eq!(holder.connect().list().unwrap().len(), 1);
    // What a plugin stopping asks: is this its container alone, or the whole pod?
    assert!(holder.connect().stopping().unwrap(), "told to stop");
    // Still connected, but holding nothing: the SIGTERM now takes effect.
    client.release("vol").unwrap();
    assert!(holder.wait_for_exit().success());
    assert!(!holder.socket.exists(), "socket left behind");
}
