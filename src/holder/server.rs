//! The holder process: binds its socket without races or a moment of loose permissions, serves
//! each client on a thread of its own, drops fds whose connection is gone, and decides when to
//! exit.

use std::collections::HashMap;
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::fs::{DirBuilderExt, FileTypeExt, MetadataExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sys::socket::{getsockopt, sockopt::PeerCredentials};

use super::HolderError;
use super::wire::{self, Reply, Request};

#[derive(Debug, Clone, Copy, Default)]
pub struct ServeOptions {
    /// Return (removing the socket) once the holder has held an fd, holds none any more and no
    /// client is connected; or when no fd arrived within [`IDLE_EXIT`]. For a holder spawned by
    /// the process it serves, which must not outlive its use.
    pub exit_when_empty: bool,
}

/// How often held fds are checked for a connection that is gone.
const PRUNE_EVERY: Duration = Duration::from_secs(1);
/// How long an `exit_when_empty` holder waits for its first fd.
const IDLE_EXIT: Duration = Duration::from_secs(60);
/// Most fds held at once: far above the mounts of one node, well below the usual fd limit.
const MAX_ENTRIES: usize = 10_000;
/// How long the holder waits for a client to take an answer before giving up on it.
const WRITE_TIMEOUT: Duration = Duration::from_secs(10);

/// Set by SIGTERM and SIGINT. A static because a signal handler can reach nothing else.
static TERMINATE: AtomicBool = AtomicBool::new(false);

struct Entry {
    meta: String,
    fd: OwnedFd,
}

#[derive(Default)]
struct State {
    entries: Mutex<HashMap<String, Entry>>,
    clients: AtomicUsize,
    ever_held: AtomicBool,
}

impl State {
    fn entries(&self) -> MutexGuard<'_, HashMap<String, Entry>> {
        // Every change is a single insert or remove, so a panicked holder of the lock left the
        // map whole.
        self.entries.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Serves `socket` until told to stop (see the module docs of [`super`] and [`ServeOptions`]).
/// Takes over the process's SIGTERM and SIGINT handling, ignores SIGHUP, SIGUSR1, SIGUSR2 and
/// SIGALRM, and makes the process non-dumpable.
pub fn serve(socket: &Path, options: ServeOptions) -> Result<(), HolderError> {
    // SAFETY: prctl(PR_SET_DUMPABLE) only changes a flag of this process. No core file may carry
    // the metadata's credentials; failing leaves the default, which is no worse than before.
    unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 0) };
    install_signal_handlers().map_err(|e| bind_error(socket, "handle SIGTERM", e))?;
    let (listener, identity) = bind(socket)?;
    listener
        .set_nonblocking(true)
        .map_err(|e| bind_error(socket, "make it non-blocking", e))?;
    tracing::info!(socket = %socket.display(), "fd holder listening");
    let state = Arc::new(State::default());
    let started = Instant::now();
    let mut last_prune = Instant::now();
    let mut told_to_stop = false;
    loop {
        let mut listening = [PollFd::new(listener.as_fd(), PollFlags::POLLIN)];
        match poll(&mut listening, PollTimeout::from(1000u16)) {
            Ok(_) | Err(Errno::EINTR) => {}
            Err(e) => return Err(HolderError::Io(e.into())),
        }
        accept_all(&listener, &state);
        if last_prune.elapsed() >= PRUNE_EVERY {
            prune(&state);
            last_prune = Instant::now();
        }
        let held = state.entries().len();
        let terminate = TERMINATE.load(Ordering::Relaxed);
        let idle = held == 0 && state.clients.load(Ordering::SeqCst) == 0;
        let why = if terminate && held == 0 {
            Some("SIGTERM or SIGINT, and no fd held")
        } else if options.exit_when_empty && idle && state.ever_held.load(Ordering::SeqCst) {
            Some("the last held fd is gone")
        } else if options.exit_when_empty && idle && started.elapsed() >= IDLE_EXIT {
            Some("no fd kept since start")
        } else {
            None
        };
        if let Some(why) = why {
            // A client connecting right now sees its connection closed: the same as a holder
            // that died, which callers handle by spawning a new one.
            if std::fs::metadata(socket).is_ok_and(|m| (m.dev(), m.ino()) == identity) {
                let _ = std::fs::remove_file(socket);
            }
            tracing::info!(socket = %socket.display(), "fd holder exiting: {why}");
            return Ok(());
        }
        if terminate && !told_to_stop {
            told_to_stop = true;
            tracing::warn!(
                held,
                "SIGTERM or SIGINT: staying until every held fd is released or gone, since \
                 exiting would abort the mounts whose serving process is also gone"
            );
        }
    }
}

/// Binds `socket`, refusing if a live holder answers there and replacing a dead one's socket.
/// Returns the listener and the socket file's (device, inode), so that exiting removes only
/// its own socket.
fn bind(socket: &Path) -> Result<(UnixListener, (u64, u64)), HolderError> {
    let err = |step| move |e| bind_error(socket, step, e);
    let parent = socket
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(parent)
        .map_err(err("create its directory"))?;
    // Two holders starting at once take turns: the second then finds the first answering,
    // instead of both removing a "stale" socket and one of them serving a file nobody sees.
    let dir = File::open(parent).map_err(err("open its directory"))?;
    // SAFETY: flock on an fd we own; the lock goes when `dir` is dropped at the end.
    while unsafe { libc::flock(dir.as_raw_fd(), libc::LOCK_EX) } != 0 {
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(err("lock its directory")(e));
        }
    }
    match UnixStream::connect(socket) {
        Ok(_) => return Err(HolderError::AlreadyRunning(socket.to_path_buf())),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) if e.raw_os_error() == Some(libc::ECONNREFUSED) => {
            let kind = std::fs::symlink_metadata(socket).map_err(err("inspect it"))?;
            if !kind.file_type().is_socket() {
                return Err(err("replace it")(io::Error::other(
                    "it exists and is no socket",
                )));
            }
            std::fs::remove_file(socket).map_err(err("remove the stale socket"))?;
            tracing::info!(socket = %socket.display(), "replaced a stale fd holder socket");
        }
        Err(e) => return Err(err("probe it")(e)),
    }
    // Bound under a temporary name and made private before it appears under its real one, so
    // that the socket never exists with the umask's mode.
    let temp = parent.join(format!(".fd-holder-{}.tmp", std::process::id()));
    let _ = std::fs::remove_file(&temp); // a killed holder's, of the same pid (PID 1 in a pod)
    let listener = UnixListener::bind(&temp).map_err(err("bind"))?;
    let placed = std::fs::set_permissions(&temp, std::fs::Permissions::from_mode(0o600))
        .and_then(|()| std::fs::rename(&temp, socket))
        .and_then(|()| std::fs::metadata(socket));
    match placed {
        Ok(meta) => Ok((listener, (meta.dev(), meta.ino()))),
        Err(e) => {
            let _ = std::fs::remove_file(&temp);
            Err(err("put it in place")(e))
        }
    }
}

fn bind_error(socket: &Path, step: &'static str, source: io::Error) -> HolderError {
    HolderError::Bind {
        socket: socket.to_path_buf(),
        step,
        source,
    }
}

extern "C" fn on_terminate(_signal: libc::c_int) {
    TERMINATE.store(true, Ordering::Relaxed);
}

/// Signals that ask a process to reload, reopen its logs or wake up. The holder has nothing of
/// the kind to do, and their default action would end it, and with it every connection whose
/// serving process is gone: `kill -HUP $(pidof msfs)`, meant for the daemons, reaches it too.
const IGNORED_SIGNALS: [libc::c_int; 4] =
    [libc::SIGHUP, libc::SIGUSR1, libc::SIGUSR2, libc::SIGALRM];

fn install_signal_handlers() -> io::Result<()> {
    for signal in IGNORED_SIGNALS {
        // SAFETY: setting a signal's disposition to SIG_IGN touches no memory of ours.
        if unsafe { libc::signal(signal, libc::SIG_IGN) } == libc::SIG_ERR {
            return Err(io::Error::last_os_error());
        }
    }
    for signal in [libc::SIGTERM, libc::SIGINT] {
        // SAFETY: the handler only stores to an atomic (async-signal-safe), and `action` is
        // fully initialized before use. SA_RESTART keeps the client threads' reads going.
        let failed = unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = on_terminate as *const () as libc::sighandler_t;
            action.sa_flags = libc::SA_RESTART;
            libc::sigemptyset(&mut action.sa_mask);
            libc::sigaction(signal, &action, std::ptr::null_mut()) != 0
        };
        if failed {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

fn accept_all(listener: &UnixListener, state: &Arc<State>) {
    loop {
        match listener.accept() {
            Ok((stream, _)) => start_client(stream, state),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => {
                // Out of fds or memory: the connection stays queued; retry at the next tick
                // rather than spinning on a listener that stays readable.
                tracing::warn!("fd holder cannot accept a connection: {e}");
                std::thread::sleep(Duration::from_millis(100));
                return;
            }
        }
    }
}

/// Only the holder's own user (or root) may hand over or fetch fds and their credentials.
pub(super) fn check_peer(stream: &UnixStream) -> Result<(), String> {
    let peer = getsockopt(stream, PeerCredentials).map_err(|e| format!("SO_PEERCRED: {e}"))?;
    // SAFETY: geteuid cannot fail and touches no memory.
    let own = unsafe { libc::geteuid() };
    if peer.uid() == own || peer.uid() == 0 {
        Ok(())
    } else {
        Err(format!(
            "uid {} (pid {}) is not uid {own} or root",
            peer.uid(),
            peer.pid()
        ))
    }
}

/// Counts a client for as long as its thread runs.
struct Connected(Arc<State>);

impl Drop for Connected {
    fn drop(&mut self) {
        self.0.clients.fetch_sub(1, Ordering::SeqCst);
    }
}

fn start_client(stream: UnixStream, state: &Arc<State>) {
    if let Err(why) = check_peer(&stream) {
        tracing::warn!("fd holder refused a connection: {why}");
        return;
    }
    // Counted here, on the thread that decides to exit, so no accepted client goes unseen.
    state.clients.fetch_add(1, Ordering::SeqCst);
    let connected = Connected(Arc::clone(state));
    let spawned = std::thread::Builder::new()
        .name("fd-holder-client".into())
        .spawn(move || serve_client(stream, connected));
    if let Err(e) = spawned {
        tracing::warn!("fd holder cannot serve a connection: {e}");
    }
}

fn serve_client(mut stream: UnixStream, connected: Connected) {
    let state = &connected.0;
    // Accepted sockets do not inherit the listener's O_NONBLOCK; this only makes it explicit.
    let _ = stream.set_nonblocking(false);
    let _ = stream.set_write_timeout(Some(WRITE_TIMEOUT));
    loop {
        let (request, fd) = match wire::recv::<Request>(&stream) {
            Ok(Some(got)) => got,
            Ok(None) => return,
            Err(e) => {
                // The stream may be out of step: answer once, then hang up.
                tracing::warn!("fd holder dropped a client: {e}");
                let error = e.to_string();
                let _ = wire::send(&mut stream, &Reply::Error { error }, None);
                return;
            }
        };
        if let Err(e) = answer(&mut stream, state, request, fd) {
            tracing::debug!("fd holder client went away: {e}");
            return;
        }
    }
}

fn answer(
    stream: &mut UnixStream,
    state: &State,
    request: Request,
    fd: Option<OwnedFd>,
) -> Result<(), HolderError> {
    let error = |error: String| Reply::Error { error };
    let reply = match (request, fd) {
        (Request::Keep { name, meta }, Some(fd)) => keep(state, name, meta, fd),
        (Request::Keep { .. }, None) => error("keep needs the fd attached".into()),
        (_, Some(_)) => error("only keep carries an fd; the one attached was closed".into()),
        (Request::Update { name, meta }, None) => match state.entries().get_mut(&name) {
            Some(entry) => {
                entry.meta = meta;
                Reply::Ok
            }
            None => error(format!("not held: {name:?}")),
        },
        (Request::List, None) => return list(stream, state),
        (Request::Status, None) => Reply::Status {
            stopping: TERMINATE.load(Ordering::Relaxed),
        },
        (Request::Release { name }, None) => {
            if state.entries().remove(&name).is_some() {
                tracing::info!(name, "fd holder released an fd");
            }
            prune(state);
            Reply::Ok
        }
    };
    wire::send(stream, &reply, None)
}

fn keep(state: &State, name: String, meta: String, fd: OwnedFd) -> Reply {
    let mut entries = state.entries();
    if name.is_empty() {
        return Reply::Error {
            error: "keep needs a non-empty name".into(),
        };
    }
    if entries.len() >= MAX_ENTRIES && !entries.contains_key(&name) {
        return Reply::Error {
            error: format!("already holding {MAX_ENTRIES} fds; release some first"),
        };
    }
    // Replacing drops, and so closes, the old fd.
    let replaced = entries.insert(name.clone(), Entry { meta, fd }).is_some();
    state.ever_held.store(true, Ordering::SeqCst);
    tracing::info!(name, replaced, "fd holder holds an fd");
    Reply::Ok
}

fn list(stream: &mut UnixStream, state: &State) -> Result<(), HolderError> {
    // Copies taken under the lock and sent without it: a slow client must not stall the others.
    let copies: io::Result<Vec<(String, String, OwnedFd)>> = state
        .entries()
        .iter()
        .map(|(name, e)| Ok((name.clone(), e.meta.clone(), e.fd.try_clone()?)))
        .collect();
    let mut copies = match copies {
        Ok(copies) => copies,
        Err(e) => {
            let error = format!("cannot duplicate a held fd: {e}");
            return wire::send(stream, &Reply::Error { error }, None);
        }
    };
    copies.sort_by(|a, b| a.0.cmp(&b.0));
    for (name, meta, fd) in copies {
        wire::send(stream, &Reply::Entry { name, meta }, Some(fd.as_fd()))?;
    }
    wire::send(stream, &Reply::End, None)
}

/// Drops the fds whose connection is gone. `events = 0` still reports POLLERR/POLLHUP/POLLNVAL,
/// which a `/dev/fuse` fd raises once unmounted or aborted (and a pipe once its writers are gone).
fn prune(state: &State) {
    let mut entries = state.entries();
    let gone: Vec<String> = {
        let (names, mut fds): (Vec<&String>, Vec<PollFd<'_>>) = entries
            .iter()
            .map(|(name, e)| (name, PollFd::new(e.fd.as_fd(), PollFlags::empty())))
            .unzip();
        if fds.is_empty() {
            return;
        }
        if let Err(e) = poll(&mut fds, PollTimeout::ZERO) {
            tracing::warn!("fd holder cannot poll its fds: {e}");
            return;
        }
        let dead = PollFlags::POLLERR | PollFlags::POLLHUP | PollFlags::POLLNVAL;
        names
            .into_iter()
            .zip(&fds)
            .filter(|(_, fd)| fd.revents().is_some_and(|r| r.intersects(dead)))
            .map(|(name, _)| name.clone())
            .collect()
    };
    for name in gone {
        entries.remove(&name);
        tracing::info!(name, "fd holder dropped an fd whose connection is gone");
    }
}
