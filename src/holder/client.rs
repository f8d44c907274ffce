//! The serving process's side: hands fds to the holder, fetches them back after a restart, and
//! starts a holder of its own when none runs. Blocking; async callers use `spawn_blocking`.

use std::os::fd::{BorrowedFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use super::HolderError;
use super::wire::{self, Reply, Request};

/// How long a call waits for the holder before failing with [`HolderError::Timeout`].
pub(crate) const TIMEOUT: Duration = Duration::from_secs(10);
/// How long [`spawn_detached`] waits for the new holder to answer.
pub(crate) const SPAWN_WAIT: Duration = Duration::from_secs(5);

/// One fd fetched from the holder: a duplicate, the holder keeps its own.
pub struct HeldFd {
    pub name: String,
    pub meta: Vec<u8>,
    pub fd: OwnedFd,
}

/// Not derived: the metadata may hold credentials.
impl std::fmt::Debug for HeldFd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HeldFd")
            .field("name", &self.name)
            .field("meta", &"***")
            .field("fd", &self.fd)
            .finish()
    }
}

/// A connection to the holder. After a failure other than [`HolderError::Refused`] the
/// connection may be out of step (a late answer still on its way) and every later call fails:
/// connect again.
#[derive(Debug)]
pub struct HolderClient {
    stream: UnixStream,
    broken: bool,
}

impl HolderClient {
    pub fn connect(socket: &Path) -> Result<HolderClient, HolderError> {
        let err = |source| HolderError::Connect {
            socket: socket.to_path_buf(),
            source,
        };
        let stream = UnixStream::connect(socket).map_err(err)?;
        // A stopped or wedged holder must not hang the caller forever.
        stream.set_read_timeout(Some(TIMEOUT)).map_err(err)?;
        stream.set_write_timeout(Some(TIMEOUT)).map_err(err)?;
        Ok(HolderClient {
            stream,
            broken: false,
        })
    }

    /// Hands the holder a duplicate of `fd` (a mounted `/dev/fuse` fd) under `name`, replacing
    /// what it held under that name. `meta` must be UTF-8 (JSON, by convention).
    pub fn keep(&mut self, name: &str, meta: &[u8], fd: BorrowedFd<'_>) -> Result<(), HolderError> {
        let meta = text(name, meta)?;
        self.call(
            &Request::Keep {
                name: name.into(),
                meta,
            },
            Some(fd),
        )
    }

    /// Replaces the metadata held under `name`; [`HolderError::Refused`] if nothing is.
    pub fn update(&mut self, name: &str, meta: &[u8]) -> Result<(), HolderError> {
        let meta = text(name, meta)?;
        self.call(
            &Request::Update {
                name: name.into(),
                meta,
            },
            None,
        )
    }

    /// Everything the holder holds, sorted by name, each with a duplicate of its fd.
    pub fn list(&mut self) -> Result<Vec<HeldFd>, HolderError> {
        self.exchange(|stream| {
            wire::send(stream, &Request::List, None)?;
            let mut held = Vec::new();
            loop {
                match receive(stream)? {
                    (Reply::Entry { name, meta }, Some(fd)) => held.push(HeldFd {
                        name,
                        meta: meta.into_bytes(),
                        fd,
                    }),
                    (Reply::End, None) => return Ok(held),
                    (Reply::Error { error }, None) => return Err(HolderError::Refused(error)),
                    (other, _) => return Err(unexpected("list", &other)),
                }
            }
        })
    }

    /// Makes the holder close its fd for `name` and forget it; fine if it held none.
    pub fn release(&mut self, name: &str) -> Result<(), HolderError> {
        self.call(&Request::Release { name: name.into() }, None)
    }

    /// Whether the holder was told to stop (SIGTERM or SIGINT): it then exits once it holds
    /// nothing.
    pub fn stopping(&mut self) -> Result<bool, HolderError> {
        self.exchange(|stream| {
            wire::send(stream, &Request::Status, None)?;
            match receive(stream)? {
                (Reply::Status { stopping }, None) => Ok(stopping),
                (Reply::Error { error }, None) => Err(HolderError::Refused(error)),
                (other, _) => Err(unexpected("status", &other)),
            }
        })
    }

    /// A request answered by `ok` or an error.
    fn call(&mut self, request: &Request, fd: Option<BorrowedFd<'_>>) -> Result<(), HolderError> {
        self.exchange(|stream| {
            wire::send(stream, request, fd)?;
            match receive(stream)? {
                (Reply::Ok, None) => Ok(()),
                (Reply::Error { error }, None) => Err(HolderError::Refused(error)),
                (other, _) => Err(unexpected("a request", &other)),
            }
        })
    }

    fn exchange<T>(
        &mut self,
        call: impl FnOnce(&mut UnixStream) -> Result<T, HolderError>,
    ) -> Result<T, HolderError> {
        if self.broken {
            return Err(HolderError::Protocol(
                "connection unusable after an earlier failure; connect again".into(),
            ));
        }
        let result = call(&mut self.stream);
        self.broken = matches!(result, Err(ref e) if !matches!(e, HolderError::Refused(_)));
        result
    }
}

fn text(name: &str, meta: &[u8]) -> Result<String, HolderError> {
    String::from_utf8(meta.to_vec()).map_err(|_| HolderError::MetaNotUtf8 {
        name: name.to_string(),
    })
}

fn receive(stream: &UnixStream) -> Result<(Reply, Option<OwnedFd>), HolderError> {
    wire::recv(stream)?
        .ok_or_else(|| HolderError::Protocol("the holder closed the connection".into()))
}

fn unexpected(what: &str, reply: &Reply) -> HolderError {
    HolderError::Protocol(format!("unexpected answer to {what}: {reply:?}"))
}

/// Starts `exe fd-holder --socket SOCKET --exit-when-empty` unless a holder already answers
/// there, and waits until it does. The holder gets a session of its own, so that the caller's
/// terminal (Ctrl-C, hangup) does not reach it, and /dev/null for stdin, stdout and stderr: it
/// would otherwise keep the caller's output pipes open long after the caller exited, and a
/// reader of them waiting for their end would wait as long. A thread waits on it, so that it
/// leaves no zombie while the caller lives. It exits by itself 60 s after starting if it was
/// never handed an fd.
pub fn spawn_detached(exe: &Path, socket: &Path) -> Result<(), HolderError> {
    if HolderClient::connect(socket).is_ok() {
        return Ok(());
    }
    let mut command = Command::new(exe);
    command
        .arg("fd-holder")
        .arg("--socket")
        .arg(socket)
        .arg("--exit-when-empty")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    // SAFETY: setsid is async-signal-safe and touches no memory shared with the parent.
    unsafe {
        command.pre_exec(|| match libc::setsid() {
            -1 => Err(std::io::Error::last_os_error()),
            _ => Ok(()),
        });
    }
    let mut child = command.spawn().map_err(|source| HolderError::Spawn {
        exe: exe.to_path_buf(),
        source,
    })?;
    let (exited, exit) = mpsc::channel();
    let reaper = std::thread::Builder::new()
        .name("fd-holder-reaper".into())
        .spawn(move || {
            let _ = exited.send(child.wait());
        });
    if let Err(e) = reaper {
        tracing::warn!("no thread to wait on the fd holder ({e}); it stays a zombie after exit");
    }
    let deadline = Instant::now() + SPAWN_WAIT;
    loop {
        if HolderClient::connect(socket).is_ok() {
            return Ok(());
        }
        if let Ok(Ok(status)) = exit.try_recv() {
            // It may have lost a race with another holder started at the same moment.
            if HolderClient::connect(socket).is_ok() {
                return Ok(());
            }
            return Err(HolderError::SpawnExited {
                socket: socket.to_path_buf(),
                status,
            });
        }
        if Instant::now() >= deadline {
            return Err(HolderError::SpawnTimeout {
                socket: socket.to_path_buf(),
            });
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}
