//! One FUSE session: an `Fs` mounted at a path and served by its own thread until unmounted.
//!
//! The daemon holds one of these; the CSI plugin one per published volume, all on the same
//! runtime and engines.

use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use fuser::{HandOff, MountOption, Notifier, Session, SessionACL, SessionUnmounter};
use tokio::runtime::Handle;
use tokio::sync::oneshot;

use super::evictor::{self, InodeEviction};
use super::{mountpoint, read_ahead};
use crate::fs::Fs;
use crate::fuse::{FuseAdapter, KernelInit, Unanswered, io_uring};

/// How a session is mounted.
#[derive(Debug, Clone)]
pub struct SessionOptions {
    /// Source name shown by `mount` and `df`.
    pub name: String,
    /// Let users other than the mounting one in.
    pub allow_other: bool,
    /// FUSE request reader threads; 0 means one per CPU (at least 2 either way).
    pub workers: usize,
    /// Mount read-only in the kernel too (the backends answer EROFS either way).
    pub read_only: bool,
    /// Mount with the kernel's noexec.
    pub no_exec: bool,
    /// Largest write request the kernel sends.
    pub max_write: u32,
    /// Ask for the kernel's writeback cache in INIT (`fuse_writeback_cache`).
    pub writeback_cache: bool,
    /// Ask for FUSE passthrough in INIT (`fuse_passthrough`).
    pub passthrough: bool,
    /// Serve over io_uring when the kernel offers it, its queues' threads polling this long
    /// before they sleep (`fuse_io_uring`, `fuse_io_uring_poll_us`); `None`: `/dev/fuse`.
    pub io_uring: Option<Duration>,
    /// Requests unanswered this long are logged and counted (`fuse_request_stall_warn_secs`;
    /// `None`: no watchdog).
    pub stall_warn: Option<Duration>,
    /// When the kernel is asked to drop idle file entries (see `evictor`).
    pub inode_eviction: InodeEviction,
}

impl SessionOptions {
    fn fuser_config(&self) -> fuser::Config {
        let mut session = fuser::Config::default();
        session.mount_options = vec![
            MountOption::FSName(self.name.clone()),
            MountOption::Subtype("msfs".into()),
            MountOption::DefaultPermissions,
            MountOption::NoAtime,
            MountOption::NoDev,
            MountOption::NoSuid,
            // Read-write even when every backend is read-only (unless asked otherwise): a
            // reload may add a writable one. Read-only backends answer EROFS themselves.
            if self.read_only {
                MountOption::RO
            } else {
                MountOption::RW
            },
        ];
        if self.no_exec {
            session.mount_options.push(MountOption::NoExec);
        }
        session.acl = if self.allow_other {
            SessionACL::All
        } else {
            SessionACL::Owner
        };
        session.n_threads = Some(self.worker_count());
        if let Some(poll) = self.io_uring {
            session.io_uring_queue_depth = IO_URING_QUEUE_DEPTH;
            session.io_uring_poll = poll;
        }
        session
    }

    /// The FUSE worker threads the session runs: `workers`, or one per CPU, at least 2.
    pub fn worker_count(&self) -> usize {
        let workers = match self.workers {
            0 => std::thread::available_parallelism().map_or(2, |n| n.get()),
            n => n,
        };
        workers.max(2)
    }
}

/// A mounted, serving FUSE session.
pub struct MountedSession {
    path: PathBuf,
    unmounter: SessionUnmounter,
    notifier: Notifier,
    done: Option<oneshot::Receiver<()>>,
    thread: Option<JoinHandle<io::Result<()>>>,
    /// A duplicate of the connection's `/dev/fuse` descriptor: what an fd holder keeps so the
    /// connection outlives this process, and where notifications go.
    fuse_fd: OwnedFd,
    /// What the kernel offered in the connection's INIT (the first server's, when resumed).
    kernel: KernelInit,
    /// Taken over from another process: fuser did not mount it, so unmounting is ours.
    resumed: bool,
    /// Stops the workers dispatching, for a hand-off to a successor.
    handoff: HandOff,
    /// Requests the adapter handed to the runtime and has not answered yet.
    unanswered: Unanswered,
    /// Stops the evictor (at an unmount or a hand-off).
    evictor_stop: Arc<AtomicBool>,
}

/// Entries of each CPU's io_uring queue: the requests a CPU's callers can have in msfs's hands
/// at once (more wait in the kernel). Each entry's payload buffer is `max_write` bytes of
/// address space, of which only what requests used is ever touched.
const IO_URING_QUEUE_DEPTH: u16 = 16;

/// How often a hand-off looks whether the requests being answered are done.
const HAND_OFF_POLL: Duration = Duration::from_millis(5);

impl MountedSession {
    /// Mounts `fs` at `path` and starts serving it. Blocks for the kernel's handshake, so call it
    /// off the async runtime (`spawn_blocking`) when one is running.
    pub fn start(
        fs: Arc<Fs>,
        runtime: Handle,
        path: &Path,
        options: &SessionOptions,
    ) -> io::Result<MountedSession> {
        let adapter = FuseAdapter::new(fs.clone(), runtime, options.max_write)
            .workers(options.worker_count())
            .writeback_cache(options.writeback_cache)
            .passthrough(options.passthrough)
            .io_uring(options.io_uring.is_some())
            .watch_stalls(options.stall_warn, &options.name);
        let kernel = adapter.kernel_init();
        let unanswered = adapter.unanswered();
        if options.io_uring.is_some() {
            io_uring::allow();
        }
        let session = Session::new(adapter, path, &options.fuser_config())?;
        let mut kernel = *kernel
            .get()
            .ok_or_else(|| io::Error::other("the FUSE handshake ended without an INIT"))?;
        kernel.io_uring_payload = session.io_uring_payload().unwrap_or(0) as u32;
        io_uring::report(path, options.io_uring.is_some(), kernel.io_uring_payload);
        let fuse_fd = session.as_fd().try_clone_to_owned()?;
        let mounted = MountedSession::serve(session, path, fuse_fd, kernel, unanswered, false)?;
        read_ahead::raise_in_background(path, read_ahead::READ_AHEAD_KIB);
        mounted.start_evictor(&fs, options.inode_eviction);
        Ok(mounted)
    }

    /// Serves a live connection another process set up and mounted at `path` (its `/dev/fuse`
    /// descriptor kept by an fd holder), by the INIT parameters that process negotiated. Asks
    /// the kernel to resend what the previous server read and never answered, where the kernel
    /// can ([`crate::fuse::request_resend`]); on older kernels those requests are lost to
    /// their callers, and counted.
    pub fn resume(
        fs: Arc<Fs>,
        runtime: Handle,
        path: &Path,
        fuse_fd: OwnedFd,
        kernel: KernelInit,
        options: &SessionOptions,
    ) -> io::Result<MountedSession> {
        let metrics = fs.metrics().clone();
        let adapter = FuseAdapter::new(fs.clone(), runtime, kernel.max_write)
            .workers(options.worker_count())
            .io_uring(kernel.io_uring_payload > 0)
            .watch_stalls(options.stall_warn, &options.name)
            .resumed(kernel);
        let unanswered = adapter.unanswered();
        let ours = fuse_fd.try_clone()?;
        let config = options.fuser_config();
        let mut session = Session::from_initialized_fd(adapter, fuse_fd, config.acl, config);
        if kernel.io_uring_payload > 0 {
            // The kernel sends this connection's requests through rings only: ours now.
            session.resume_io_uring(kernel.io_uring_payload as usize, path)?;
            tracing::warn!(path = %path.display(),
                "taking over a connection served over io_uring: the kernel does not resend \
                 requests the previous server was answering through its rings");
        }
        let mounted = MountedSession::serve(session, path, ours, kernel, unanswered, true)?;
        mounted.start_evictor(&fs, options.inode_eviction);
        metrics.record_fuse_takeover(kernel.resend);
        if kernel.resend {
            crate::fuse::request_resend(mounted.fuse_fd.as_fd())?;
        } else {
            tracing::warn!(path = %path.display(),
                "this kernel cannot resend requests the previous server read (no \
                 FUSE_HAS_RESEND); any it left unanswered stay so until their callers give up");
        }
        Ok(mounted)
    }

    fn serve(
        mut session: Session<FuseAdapter>,
        path: &Path,
        fuse_fd: OwnedFd,
        kernel: KernelInit,
        unanswered: Unanswered,
        resumed: bool,
    ) -> io::Result<MountedSession> {
        let unmounter = session.unmount_callable();
        let handoff = session.hand_off();
        let notifier = session.notifier();
        let (done_tx, done_rx) = oneshot::channel();
        let thread = std::thread::Builder::new()
            .name("fuse-session".into())
            .spawn(move || {
                let result = session.run();
                let _ = done_tx.send(());
                result
            })?;
        Ok(MountedSession {
            path: path.to_path_buf(),
            unmounter,
            notifier,
            done: Some(done_rx),
            thread: Some(thread),
            fuse_fd,
            kernel,
            resumed,
            handoff,
            unanswered,
            evictor_stop: Arc::new(AtomicBool::new(false)),
        })
    }

    /// Starts asking the kernel to drop `fs`'s idle file entries (`evictor`); a mount that
    /// cannot start it serves on, its inodes bounded only by the kernel's own reclaim.
    fn start_evictor(&self, fs: &Arc<Fs>, eviction: InodeEviction) {
        let stop = self.evictor_stop.clone();
        if let Err(e) = evictor::start(fs, self.notifier.clone(), eviction, stop) {
            tracing::warn!(path = %self.path.display(), error = %e,
                "cannot start the inode evictor; idle inodes stay until the kernel drops them");
        }
    }

    /// Stops serving, for a successor to take the connection over; the mount stays. From now
    /// on no request is dispatched: what the workers read is left unanswered for the successor,
    /// whose `FUSE_NOTIFY_RESEND` has the kernel queue it again. Waits, at most `within`, for
    /// the requests already being answered, and returns how many were still unanswered then
    /// (0: a clean hand-off; others are resent too, and may run twice). The process must then
    /// exit without unmounting, and before the successor starts reading: its workers still
    /// read, and what they take after that is lost.
    pub async fn hand_off(&self, within: Duration) -> usize {
        self.begin_hand_off();
        self.answered_within(within).await
    }

    /// The first half of [`MountedSession::hand_off`]: stops dispatching, waits for nothing
    /// (so that several sessions stop at once).
    pub fn begin_hand_off(&self) {
        // The successor evicts from now on, by its own view of the inodes.
        self.evictor_stop.store(true, Ordering::Relaxed);
        if !self.kernel.resend {
            tracing::warn!(path = %self.path.display(),
                "this kernel cannot resend requests (no FUSE_HAS_RESEND): any read during the \
                 hand-off stays unanswered");
        }
        self.handoff.begin();
    }

    /// The second half of [`MountedSession::hand_off`].
    pub async fn answered_within(&self, within: Duration) -> usize {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            // Workers first: a dispatch in progress may still hand a request to the runtime.
            let left = self.handoff.dispatching() + self.unanswered.count();
            if left == 0 || tokio::time::Instant::now() >= deadline {
                return left;
            }
            tokio::time::sleep(HAND_OFF_POLL).await;
        }
    }

    /// The connection's `/dev/fuse` descriptor (for an fd holder to keep a duplicate of).
    pub fn fuse_fd(&self) -> BorrowedFd<'_> {
        self.fuse_fd.as_fd()
    }

    /// What the kernel offered in the connection's INIT.
    pub fn kernel_init(&self) -> KernelInit {
        self.kernel
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Sends cache invalidations to the kernel for this mount.
    pub fn notifier(&self) -> Notifier {
        self.notifier.clone()
    }

    /// Resolves when the session ends, whoever unmounted it; only the first caller gets it.
    pub fn take_done(&mut self) -> Option<oneshot::Receiver<()>> {
        self.done.take()
    }

    /// Unmounts; when the mount is busy (a process has files open), detaches it lazily so it
    /// disappears now and is torn down when released.
    pub fn unmount(&mut self) -> io::Result<()> {
        self.evictor_stop.store(true, Ordering::Relaxed);
        let unmounted = if self.resumed {
            mountpoint::unmount(&self.path)
        } else {
            self.unmounter.unmount()
        };
        if let Err(e) = unmounted {
            tracing::warn!(path = %self.path.display(), error = %e,
                "unmount failed; detaching lazily");
            if let Err(e) = mountpoint::detach(&self.path)
                && e.raw_os_error() != Some(libc::EINVAL)
            {
                return Err(e);
            }
        }
        Ok(())
    }

    /// Waits for the serving thread to end (after an unmount, or an external `umount`). A lazily
    /// detached mount ends only when its last user lets go. Blocking.
    pub fn join(mut self) {
        let Some(thread) = self.thread.take() else {
            return;
        };
        match thread.join() {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::warn!(path = %self.path.display(), error = %e,
                "FUSE session ended with an error"),
            Err(_) => tracing::error!(path = %self.path.display(), "FUSE session thread panicked"),
        }
    }
}
