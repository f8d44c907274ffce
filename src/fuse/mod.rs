//! The FUSE adapter: decodes kernel requests, calls [`Fs`], encodes replies. Nothing else.
//!
//! fuser runs a few worker threads reading /dev/fuse. A worker never waits on the network: every
//! request that may reach the store is handed, with its reply object, to a tokio task, and the
//! worker goes back to read the next request. What needs neither the store nor waiting is
//! answered by the worker itself (`answer_now`): a lookup of a known name, attributes known
//! already, a read-only open of fresh metadata, a create, a release, a read of cached lines in
//! memory and a write the dirty bound has room for (all workers but one may read from the
//! cache or put bytes into the spill file at once: [`FuseAdapter::write_inline`],
//! [`FuseAdapter::inline_slot`]). While a request waits for
//! its answer it is in the session's in-flight table, which the no-progress watchdog
//! ([`watchdog`]) sweeps. Every error reply is logged and counted in one place ([`errno`],
//! [`refused`]).

pub mod io_uring;
mod resend;
mod watchdog;

pub use resend::request_resend;

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use bytes::Bytes;
use fuser::{
    BackingId, Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo,
    InitFlags, IoctlFlags, KernelConfig, LockOwner, OpenAccMode, OpenFlags, ReplyAttr, ReplyCreate,
    ReplyData, ReplyDirectory, ReplyDirectoryPlus, ReplyEmpty, ReplyEntry, ReplyIoctl, ReplyOpen,
    ReplyStatfs, ReplyWrite, ReplyXattr, Request, TimeOrNow, WriteFlags,
};
use tokio::runtime::Handle;

use crate::warm::abi::{SHARED_CACHE_IOCTL, WARM_IOCTL, WarmRequest};

use crate::fs::{
    Attr, BLOCK_SIZE, Creator, Fs, FsError, Kind, Listed, NameUse, OpenIo, OpenMode, Opened,
    ReadNow, Registration, RenameFlags, Result as FsResult, SetAttr, errno_name, request_name,
};
use watchdog::{InFlight, Pending, Watchdog};

/// Read-ahead asked for in the handshake. The kernel keeps at most what it offered (its 128 KiB
/// default), so `daemon::read_ahead` widens the window once the mount is live. The largest read
/// request is `max(max_write, read-ahead)` (fuser derives the kernel's `max_pages` from the two),
/// which is why a `max_write` of 1 MiB also means 1 MiB reads.
const MAX_READAHEAD: u32 = 1024 * 1024;
/// Background requests (read-ahead, async reads) the kernel keeps in flight. The kernel default
/// of 12 caps read concurrency well below what several readers need.
const MAX_BACKGROUND: u16 = 64;
const CONGESTION_THRESHOLD: u16 = 48;

pub struct FuseAdapter {
    fs: Arc<Fs>,
    runtime: Handle,
    max_write: u32,
    /// Ask for `FUSE_WRITEBACK_CACHE` in INIT.
    writeback_cache: bool,
    /// Ask for `FUSE_PASSTHROUGH` in INIT.
    passthrough: bool,
    /// Requests waiting for their answer.
    in_flight: Arc<InFlight>,
    /// Warn about requests unanswered this long (`None`: no watchdog).
    stall_warn: Option<Duration>,
    /// Names the mount in the watchdog's warnings.
    session: String,
    /// The watchdog's sweep, from the session's start (`init`, or [`FuseAdapter::resumed`])
    /// until the adapter is dropped with the session.
    watchdog: Option<Watchdog>,
    /// What the kernel offered in INIT, once the handshake has run.
    kernel: Arc<OnceLock<KernelInit>>,
    /// Requests handed to the runtime and not answered yet (whether or not a watchdog looks).
    unanswered: Unanswered,
    /// Workers writing or reading local bytes on their own thread now (`inline_slot`), and how
    /// many may at once: all but one of the session's workers, so that one is always free to
    /// read requests however slow the local disk is.
    inline_busy: AtomicUsize,
    inline_max: usize,
    /// The largest read answered on the thread that received it (see [`FuseAdapter::io_uring`]).
    inline_read_max: u32,
}

/// How many requests a session handed to the runtime are still unanswered: what a hand-off to
/// another process waits for (see `daemon::session::MountedSession::hand_off`).
#[derive(Debug, Clone, Default)]
pub struct Unanswered(Arc<AtomicUsize>);

impl Unanswered {
    pub fn count(&self) -> usize {
        self.0.load(Ordering::SeqCst)
    }
}

/// The largest read a ring thread answers itself (see [`FuseAdapter::io_uring`]).
const RING_INLINE_READ_MAX: u32 = 64 * 1024;

/// What the kernel offered in a connection's INIT: what a successor taking the connection over
/// may rely on, since no second INIT comes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct KernelInit {
    /// The kernel's FUSE ABI version (major, minor).
    pub abi: (u32, u32),
    /// `FUSE_HAS_RESEND`: the kernel replays requests a dead server took (see [`resend`]).
    pub resend: bool,
    /// The largest write the connection was set up for.
    pub max_write: u32,
    /// The kernel's writeback cache is on for this connection (`fuse_writeback_cache`): a
    /// successor inherits it whatever its own config says, since only INIT can change it.
    /// Absent from what older processes saved: they never asked for it.
    #[serde(default)]
    pub writeback_cache: bool,
    /// FUSE passthrough is on for this connection (`fuse_passthrough`): opens may be answered
    /// with a backing file the kernel reads itself. Absent from what older processes saved.
    #[serde(default)]
    pub passthrough: bool,
    /// The connection is served over io_uring (`fuse_io_uring`), with payload buffers of this
    /// many bytes; 0: over `/dev/fuse`. A successor must register rings of its own, since the
    /// kernel sends requests nowhere else. Absent from what older processes saved.
    #[serde(default)]
    pub io_uring_payload: u32,
}

impl FuseAdapter {
    /// An adapter without a no-progress watchdog (see [`FuseAdapter::watch_stalls`]).
    pub fn new(fs: Arc<Fs>, runtime: Handle, max_write: u32) -> FuseAdapter {
        FuseAdapter {
            fs,
            runtime,
            max_write,
            writeback_cache: false,
            passthrough: false,
            in_flight: InFlight::new(),
            stall_warn: None,
            session: String::new(),
            watchdog: None,
            kernel: Arc::new(OnceLock::new()),
            unanswered: Unanswered::default(),
            inline_busy: AtomicUsize::new(0),
            inline_max: 0,
            inline_read_max: u32::MAX,
        }
    }

    /// The number of worker threads reading requests for this adapter: all but one of them may
    /// answer writes and cache hits on their own thread ([`FuseAdapter::inline_slot`]). Without
    /// it (or with one worker) every write and read is handed to the runtime.
    pub fn workers(mut self, workers: usize) -> FuseAdapter {
        self.inline_max = workers.saturating_sub(1);
        self
    }

    /// Serving over io_uring (`fuse_io_uring`, as asked): every request of a CPU's callers
    /// comes through that CPU's one ring thread, pinned there, so a large cache hit answered
    /// on it would hold the queue and copy on the caller's own CPU (a cache-resident 1 MiB
    /// sequential read ran at 0.6x). Reads above 64 KiB go to the runtime, whose threads run
    /// on the other CPUs; smaller ones, whose round trip is what io_uring saves, stay.
    pub fn io_uring(mut self, asked: bool) -> FuseAdapter {
        if asked {
            self.inline_read_max = RING_INLINE_READ_MAX;
        }
        self
    }

    /// Asks the kernel for its writeback cache in INIT (when it offers one). What that changes
    /// is in docs/semantics.md and docs/configuration.md (`fuse_writeback_cache`): writes are merged into `max_write`-sized
    /// requests and sent when the kernel writes its dirty pages back (at the latest before the
    /// FLUSH of a close and before an FSYNC, so commits see every byte), and the kernel owns
    /// a cached file's size and mtime. Nothing in `Fs` depends on it: reads on a write-only
    /// handle (the kernel fills partial pages) are served like any read, and `O_APPEND` is
    /// resolved by the kernel against its own size.
    pub fn writeback_cache(mut self, on: bool) -> FuseAdapter {
        self.writeback_cache = on;
        self
    }

    /// Asks the kernel for FUSE passthrough in INIT (when it offers it, and not beside the
    /// writeback cache, which the kernel does not combine with it): read-only opens of objects
    /// wholly in the line cache's per-object files are then answered with that file, and the
    /// kernel reads it without a request per read (see `fs::passthrough`).
    pub fn passthrough(mut self, on: bool) -> FuseAdapter {
        self.passthrough = on;
        self
    }

    /// Counts the requests this adapter has handed to the runtime and not yet answered.
    pub fn unanswered(&self) -> Unanswered {
        self.unanswered.clone()
    }

    /// Filled with what the kernel offered once the handshake has run.
    pub fn kernel_init(&self) -> Arc<OnceLock<KernelInit>> {
        self.kernel.clone()
    }

    /// Prepares an adapter to serve a connection another process initialised: no INIT comes,
    /// so what `init` would start is started here.
    pub fn resumed(mut self, kernel: KernelInit) -> FuseAdapter {
        if kernel.passthrough {
            self.fs.enable_passthrough();
        }
        let _ = self.kernel.set(kernel);
        self.start_watchdog();
        self
    }

    fn start_watchdog(&mut self) {
        if let Some(bound) = self.stall_warn {
            self.watchdog = Some(Watchdog::start(
                &self.runtime,
                self.in_flight.clone(),
                bound,
                self.session.clone(),
                self.fs.metrics().clone(),
            ));
        }
    }

    /// Warns (and counts in `msfs.fuse.requests_stalled`) about each request left unanswered
    /// longer than `after` (`fuse_request_stall_warn_secs`; `None` turns the watchdog off),
    /// naming the mount as `session` (the session's source name).
    pub fn watch_stalls(mut self, after: Option<Duration>, session: &str) -> FuseAdapter {
        self.stall_warn = after.filter(|after| !after.is_zero());
        self.session = session.to_string();
        self
    }

    /// Enters a request in the in-flight table, when a watchdog looks at it.
    fn pending(
        &self,
        op: &'static str,
        ino: u64,
        req: &Request,
        started: Instant,
    ) -> Option<Pending> {
        self.stall_warn
            .map(|_| self.in_flight.begin(op, ino, req.pid(), started))
    }

    /// Answers `reply` on this worker when `now` can without waiting (`Some`: see the `*_now`
    /// methods of `Fs`), with `answer`, timed and in the in-flight table like any request.
    /// Returns the reply otherwise, for the caller to hand to the runtime (`spawn`).
    fn answer_now<T, R>(
        &self,
        op: &'static str,
        ino: u64,
        req: &Request,
        reply: R,
        now: impl FnOnce(&Fs) -> Option<T>,
        answer: impl FnOnce(&Fs, T, R),
    ) -> Option<R> {
        let started = Instant::now();
        let pending = self.pending(op, ino, req, started);
        let Some(known) = now(&self.fs) else {
            return Some(reply);
        };
        answer(&self.fs, known, reply);
        drop(pending);
        self.fs.metrics().fuse_request(op, started.elapsed());
        None
    }

    /// Runs `work` on the runtime and times it as FUSE operation `op` on inode `ino` (the
    /// directory, for operations on a name in it), issued by `req`; the FUSE worker returns at
    /// once. Until `work` has answered, the request is in the in-flight table.
    fn spawn<F>(
        &self,
        op: &'static str,
        ino: INodeNo,
        req: &Request,
        work: impl FnOnce(Arc<Fs>) -> F,
    ) where
        F: std::future::Future<Output = ()> + Send + 'static,
    {
        let started = Instant::now();
        let pending = self.pending(op, ino.0, req, started);
        let fs = self.fs.clone();
        let reply = work(self.fs.clone());
        // Counted before the worker returns, so a hand-off that sees the workers idle sees it.
        let unanswered = self.unanswered.0.clone();
        unanswered.fetch_add(1, Ordering::SeqCst);
        self.runtime.spawn(async move {
            reply.await;
            drop(pending);
            unanswered.fetch_sub(1, Ordering::SeqCst);
            fs.metrics().fuse_request(op, started.elapsed());
        });
    }
}

/// A worker's turn to write or read local bytes on its own thread (see
/// [`FuseAdapter::inline_slot`]); given back when dropped.
struct InlineSlot<'a>(&'a AtomicUsize);

impl Drop for InlineSlot<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

impl FuseAdapter {
    /// A turn to touch the local disk on this worker's thread (a write into the spill file, a
    /// reply copied from a mapped cache file), if fewer than `inline_max` workers are.
    fn inline_slot(&self) -> Option<InlineSlot<'_>> {
        self.inline_busy
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |busy| {
                (busy < self.inline_max).then_some(busy + 1)
            })
            .ok()
            .map(|_| InlineSlot(&self.inline_busy))
    }

    /// Answers a write on this worker's thread when that needs no waiting (`Fs::write_now`):
    /// the spill file's `pwrite` and its log record take microseconds, and handing them to the
    /// runtime and its blocking pool cost a 4 KiB write twice that. A write that must wait for
    /// commits to free dirty room, or that finds every other worker writing already, has its
    /// reply given back, untouched, for the runtime. While it writes, the request is in the
    /// watchdog's table, and the worker is dispatching (what a hand-off waits for).
    fn write_inline(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        data: &[u8],
        reply: ReplyWrite,
    ) -> Option<ReplyWrite> {
        let Some(slot) = self.inline_slot() else {
            return Some(reply);
        };
        let started = Instant::now();
        let pending = self.pending("write", ino.0, req, started);
        let written = self.fs.write_now(fh.0, offset, data);
        // Given back before the answer: the writer's next write, which another worker may read
        // the instant this one answers, must find the slot free.
        drop(slot);
        match written {
            None => return Some(reply),
            Some(Ok(written)) if written.part_finished => {
                drop(pending);
                let len = data.len() as u64;
                // The upload slot of the part it finished is this write's backpressure: waited
                // for on the runtime, then answered.
                self.spawn("write", ino, req, move |fs| async move {
                    fs.stream_parts_after(fh.0, offset, len).await;
                    reply.written(written.len);
                });
                return None;
            }
            Some(Ok(written)) => reply.written(written.len),
            Some(Err(e)) => reply.error(errno(&self.fs, "write", ino, &e)),
        }
        drop(pending);
        self.fs.metrics().fuse_request("write", started.elapsed());
        None
    }
}

/// Set by the kernel in the `unique` of a request it resends (`FUSE_NOTIFY_RESEND`) to the
/// server that took a connection over. The dead server may have carried it out already: an
/// unlink, rmdir or rename whose effect is there, or a mkdir whose directory exists, is then
/// answered as done rather than ENOENT/EEXIST, which the application never asked to see.
const FUSE_UNIQUE_RESEND: u64 = 1 << 63;

fn resent(req: &Request) -> bool {
    req.unique().0 & FUSE_UNIQUE_RESEND != 0
}

/// Logs a resent request found done already.
fn landed_before(op: &'static str, parent: INodeNo, name: &str) {
    tracing::info!(
        op,
        parent = parent.0,
        name,
        "a request resent after a takeover had been carried out by the previous server; \
         answered as done"
    );
}

/// Fills a readdir reply from the open directory `ino`'s entries at `offset`.
fn answer_readdir(fs: &Fs, ino: INodeNo, fh: FileHandle, offset: u64, mut reply: ReplyDirectory) {
    let result = fs.readdir(fh.0, offset, false, |next, name, attr, _| {
        !reply.add(INodeNo(attr.ino), next, file_type(&attr), name)
    });
    match result {
        Ok(()) => reply.ok(),
        Err(e) => reply.error(errno(fs, "readdir", ino, &e)),
    }
}

/// Answers an open as `Fs` decided (see `fs::passthrough`). A passthrough open registers the
/// object's file with the connection at its first use; if the kernel refuses (no
/// `CAP_SYS_ADMIN`), this open is answered with direct reads through msfs (which no other open
/// of the inode conflicts with) and every later one the usual way. A read-only handle's close
/// sends no FLUSH (`FOPEN_NOFLUSH`): there is nothing to commit, and the round trip was most of
/// what a close of a small cached file cost.
fn answer_open(fs: &Fs, opened: Opened, read_only: bool, reply: ReplyOpen) {
    let fh = FileHandle(opened.fh);
    let flags = if read_only {
        FopenFlags::FOPEN_NOFLUSH
    } else {
        FopenFlags::empty()
    };
    let backing = match opened.io {
        OpenIo::PageCache { keep_cache: true } => {
            return reply.opened(fh, flags | FopenFlags::FOPEN_KEEP_CACHE);
        }
        OpenIo::PageCache { keep_cache: false } => return reply.opened(fh, flags),
        OpenIo::Passthrough(backing) => backing,
    };
    let registered = backing.registration(|file| {
        reply
            .open_backing(file)
            .map(|id| Box::new(id) as Registration)
    });
    let registration = match registered {
        Ok(registration) => registration,
        Err(e) => {
            fs.passthrough_refused(&e);
            return reply.opened(fh, flags | FopenFlags::FOPEN_DIRECT_IO);
        }
    };
    match registration
        .as_ref()
        .and_then(|id| id.downcast_ref::<BackingId>())
    {
        Some(id) => {
            fs.metrics().fuse_passthrough_open();
            reply.opened_passthrough(fh, flags, id)
        }
        None => reply.opened(fh, flags | FopenFlags::FOPEN_DIRECT_IO),
    }
}

/// Fills a readdirplus reply: entries with their attributes, each taking a lookup reference.
fn answer_readdirplus(
    fs: &Fs,
    ino: INodeNo,
    fh: FileHandle,
    offset: u64,
    mut reply: ReplyDirectoryPlus,
) {
    let ttl = fs.ttl();
    let result = fs.readdir(fh.0, offset, true, |next, name, attr, listed| {
        let full = match listed {
            Listed::Inode { cache } => reply.add(
                INodeNo(attr.ino),
                next,
                name,
                if cache { &ttl } else { &Duration::ZERO },
                &file_attr(&attr),
                Generation(0),
            ),
            Listed::Bare => reply.add_without_inode(next, name, &file_attr(&attr)),
        };
        !full
    });
    match result {
        Ok(()) => reply.ok(),
        Err(e) => reply.error(errno(fs, "readdirplus", ino, &e)),
    }
}

/// The errno that answers FUSE operation `op` on inode `ino` (the directory, for an operation
/// on a name in it) failed with `err`. Logged once, at the level its kind deserves: a failure
/// of the store, the local disk or msfs ([`FsError::is_failure`]: EIO, ESTALE, ENOSPC…) at
/// warn, an expected answer (ENOENT, EEXIST, ENOTEMPTY, EACCES…) at debug. (The store call
/// behind a store failure is also logged where it failed, as its backend's trace_level asks.)
/// Counted in `msfs.fuse.errors`.
fn errno(fs: &Fs, op: &'static str, ino: INodeNo, err: &FsError) -> Errno {
    let errno = err.errno();
    let name = errno_name(errno);
    if err.is_failure() {
        tracing::warn!(op, ino = ino.0, errno = name, error = %err, "FUSE request failed");
    } else {
        tracing::debug!(op, ino = ino.0, errno = name, error = %err, "FUSE request failed");
    }
    fs.metrics().fuse_error(op, name);
    Errno::from_i32(errno)
}

/// `errno`, answering FUSE operation `op` on inode `ino`, which msfs refuses by nature (a
/// link, an xattr): logged at debug and counted as [`errno`] does.
fn refused(fs: &Fs, op: &'static str, ino: INodeNo, errno: Errno) -> Errno {
    let name = errno_name(errno.code());
    tracing::debug!(op, ino = ino.0, errno = name, "FUSE request refused");
    fs.metrics().fuse_error(op, name);
    errno
}

/// The name a request `op` on `parent` carries, for `purpose`; or the errno it is answered
/// with, one rule for every operation (see [`request_name`]).
fn name_of(
    fs: &Fs,
    op: &'static str,
    parent: INodeNo,
    name: &OsStr,
    purpose: NameUse,
) -> Result<String, Errno> {
    request_name(name, purpose).map_err(|e| errno(fs, op, parent, &e))
}

/// Who makes a new object, and its permission bits: `mode` without the `umask` (the kernel
/// sends both unless the filesystem asks to apply the umask itself, and has applied it then).
fn creator(req: &Request, mode: u32, umask: u32) -> Creator {
    Creator {
        uid: req.uid(),
        gid: req.gid(),
        perm: mode & !umask & 0o7777,
    }
}

fn file_attr(attr: &Attr) -> FileAttr {
    FileAttr {
        ino: INodeNo(attr.ino),
        size: attr.size,
        blocks: attr.size.div_ceil(512),
        atime: attr.atime.unwrap_or(attr.mtime),
        mtime: attr.mtime,
        ctime: attr.ctime.unwrap_or(attr.mtime),
        crtime: attr.mtime,
        kind: file_type(attr),
        perm: attr.perm,
        nlink: attr.nlink,
        uid: attr.uid,
        gid: attr.gid,
        rdev: attr.rdev,
        blksize: BLOCK_SIZE,
        flags: 0,
    }
}

fn file_type(attr: &Attr) -> FileType {
    match attr.kind {
        Kind::Dir => FileType::Directory,
        Kind::File => FileType::RegularFile,
        Kind::Symlink => FileType::Symlink,
        Kind::Fifo => FileType::NamedPipe,
        Kind::Socket => FileType::Socket,
        Kind::CharDevice => FileType::CharDevice,
        Kind::BlockDevice => FileType::BlockDevice,
    }
}

impl Filesystem for FuseAdapter {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        let wanted = InitFlags::FUSE_DO_READDIRPLUS
            | InitFlags::FUSE_PARALLEL_DIROPS
            | InitFlags::FUSE_AUTO_INVAL_DATA
            | InitFlags::FUSE_ASYNC_READ;
        // Not FUSE_ATOMIC_O_TRUNC: with it the server truncates in the open, before the kernel
        // checks write access for an `O_RDONLY | O_TRUNC` open (it does so after the open, in
        // `handle_truncate`), so such an open of a program being run failed with ETXTBSY only
        // after msfs had emptied the file under the program (pjdfstest `open::etxtbsy`; the
        // program died of SIGBUS). Without it the kernel checks first and then sends a setattr
        // of size 0, without the handle (`Fs::set_size` leaves its commit to the handle's
        // close): one more request, answered without the store.
        let wanted = if self.writeback_cache {
            wanted | InitFlags::FUSE_WRITEBACK_CACHE
        } else {
            wanted
        };
        let passthrough = self.passthrough
            && !self.writeback_cache
            && config.capabilities().contains(InitFlags::FUSE_PASSTHROUGH);
        let wanted = if passthrough {
            // Backing files lie on a plain local filesystem: one level of stacking.
            let _ = config.set_max_stack_depth(1);
            wanted | InitFlags::FUSE_PASSTHROUGH
        } else {
            wanted
        };
        let _ = config.add_capabilities(wanted & config.capabilities());
        let _ = config.set_max_readahead(MAX_READAHEAD);
        let _ = config.set_max_write(self.max_write.max(4096));
        let _ = config.set_max_background(MAX_BACKGROUND);
        let _ = config.set_congestion_threshold(CONGESTION_THRESHOLD);
        let abi = config.kernel_abi();
        let _ = self.kernel.set(KernelInit {
            abi: (abi.0, abi.1),
            resend: config.capabilities().contains(InitFlags::FUSE_HAS_RESEND),
            max_write: self.max_write.max(4096),
            writeback_cache: self.writeback_cache
                && config
                    .capabilities()
                    .contains(InitFlags::FUSE_WRITEBACK_CACHE),
            passthrough,
            // Known once the handshake has set the rings up (`MountedSession::start`).
            io_uring_payload: 0,
        });
        if passthrough {
            self.fs.enable_passthrough();
        } else if self.passthrough {
            tracing::warn!(
                "fuse_passthrough: this kernel does not offer FUSE passthrough (Linux 6.9 or later \
                 with CONFIG_FUSE_PASSTHROUGH) or the writeback cache is on; reads go through msfs"
            );
        }
        self.start_watchdog();
        Ok(())
    }

    fn lookup(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let name = match name_of(&self.fs, "lookup", parent, name, NameUse::Existing) {
            Ok(name) => name,
            Err(errno) => return reply.error(errno),
        };
        // A name known present or absent, from memory: no hop to the runtime.
        let answer = move |fs: &Fs, found: FsResult<Attr>, reply: ReplyEntry| match found {
            Ok(attr) => reply.entry(&fs.ttl(), &file_attr(&attr), Generation(0)),
            Err(e) => reply.error(errno(fs, "lookup", parent, &e)),
        };
        let now = |fs: &Fs| fs.lookup_now(parent.0, &name);
        let Some(reply) = self.answer_now("lookup", parent.0, req, reply, now, answer) else {
            return;
        };
        self.spawn("lookup", parent, req, move |fs| async move {
            answer(&fs, fs.lookup(parent.0, &name).await, reply);
        });
    }

    fn forget(&self, _req: &Request, ino: INodeNo, nlookup: u64) {
        self.fs.forget(ino.0, nlookup);
    }

    fn getattr(&self, req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        // Known and fresh, from memory: no hop to the runtime.
        let answer = move |fs: &Fs, attr: FsResult<Attr>, reply: ReplyAttr| match attr {
            Ok(attr) => reply.attr(&fs.ttl(), &file_attr(&attr)),
            Err(e) => reply.error(errno(fs, "getattr", ino, &e)),
        };
        let now = |fs: &Fs| fs.getattr_now(ino.0);
        let Some(reply) = self.answer_now("getattr", ino.0, req, reply, now, answer) else {
            return;
        };
        self.spawn("getattr", ino, req, move |fs| async move {
            answer(&fs, fs.getattr(ino.0).await, reply);
        });
    }

    fn open(&self, req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        let mode = OpenMode {
            write: flags.acc_mode() != OpenAccMode::O_RDONLY,
            direct: flags.0 & libc::O_DIRECT != 0,
        };
        // A read-only open of a file whose metadata is fresh, from memory: no hop to the
        // runtime; with passthrough, most of a lent small file's cost.
        let answer = move |fs: &Fs, opened: FsResult<Opened>, reply: ReplyOpen| match opened {
            Ok(opened) => answer_open(fs, opened, !mode.write, reply),
            Err(e) => reply.error(errno(fs, "open", ino, &e)),
        };
        let now = |fs: &Fs| fs.open_now(ino.0, mode);
        let Some(reply) = self.answer_now("open", ino.0, req, reply, now, answer) else {
            return;
        };
        self.spawn("open", ino, req, move |fs| async move {
            answer(&fs, fs.open(ino.0, mode).await, reply);
        });
    }

    fn read(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        let answer = move |fs: &Fs, read: FsResult<Bytes>, reply: ReplyData| match read {
            Ok(bytes) => reply.data(&bytes),
            Err(e) => reply.error(errno(fs, "read", ino, &e)),
        };
        // A cache hit in memory is answered on this worker, without the runtime. Only while
        // another worker stays free, as for writes (`write_inline`): the reply copies from a
        // mapped cache file, whose pages may have to come back from the disk.
        let inline = if size <= self.inline_read_max {
            self.inline_slot()
        } else {
            None
        };
        let later = match inline {
            Some(_slot) => {
                let started = Instant::now();
                let pending = self.pending("read", ino.0, req, started);
                match self.fs.read_now(fh.0, offset, size) {
                    ReadNow::Answered(read) => {
                        answer(&self.fs, read, reply);
                        drop(pending);
                        self.fs.metrics().fuse_request("read", started.elapsed());
                        return;
                    }
                    ReadNow::Later(later) => Some(later),
                }
            }
            None => None,
        };
        self.spawn("read", ino, req, move |fs| async move {
            let read = match later {
                Some(later) => fs.read_later(fh.0, offset, size, later).await,
                None => fs.read(fh.0, offset, size).await,
            };
            answer(&fs, read, reply);
        });
    }

    fn release(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        // Answered on this worker: a release waits for nothing but the deletion of an object
        // unlinked while open, which alone goes to the runtime. In the runtime's context, for
        // the commit of a written file, which starts as a task.
        let started = Instant::now();
        let pending = self.pending("release", ino.0, req, started);
        let doomed = {
            let _in_runtime = self.runtime.enter();
            self.fs.release_now(fh.0)
        };
        drop(pending);
        match doomed {
            None => {
                reply.ok();
                self.fs.metrics().fuse_request("release", started.elapsed());
            }
            Some(doomed) => self.spawn("release", ino, req, move |fs| async move {
                fs.delete_unlinked(doomed).await;
                reply.ok();
            }),
        }
    }

    /// `msfs warm` (`crate::warm`) and its shared-cache counts; every other command is not ours: ENOTTY, as for any file
    /// that knows no ioctls (fuser's default answered ENOSYS and logged a warning each time).
    fn ioctl(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        _flags: IoctlFlags,
        cmd: u32,
        in_data: &[u8],
        _out_size: u32,
        reply: ReplyIoctl,
    ) {
        if cmd == SHARED_CACHE_IOCTL {
            // Counters only: answered here, on the worker.
            return match self.fs.shared_cache_report() {
                Some(report) => reply.ioctl(0, &report.encode()),
                None => reply.error(refused(&self.fs, "ioctl", ino, Errno::ENOTTY)),
            };
        }
        let request = match (cmd, WarmRequest::decode(in_data)) {
            (WARM_IOCTL, Some(request)) => request,
            (WARM_IOCTL, None) => {
                return reply.error(refused(&self.fs, "ioctl", ino, Errno::EINVAL));
            }
            _ => return reply.error(refused(&self.fs, "ioctl", ino, Errno::ENOTTY)),
        };
        self.spawn("ioctl", ino, req, move |fs| async move {
            match fs.warm(fh.0, request.offset, request.len).await {
                Ok(report) => reply.ioctl(0, &report.encode()),
                Err(e) => reply.error(errno(&fs, "ioctl", ino, &e)),
            }
        });
    }

    fn opendir(&self, req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        self.spawn("opendir", ino, req, move |fs| async move {
            match fs.opendir(ino.0).await {
                Ok(fh) => reply.opened(FileHandle(fh), FopenFlags::empty()),
                Err(e) => reply.error(errno(&fs, "opendir", ino, &e)),
            }
        });
    }

    fn readdir(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        reply: ReplyDirectory,
    ) {
        if !self.fs.readdir_ready(fh.0, offset) {
            // A large live directory: the next page comes from the store, on the runtime.
            self.spawn("readdir", ino, req, move |fs| async move {
                match fs.readdir_prepare(fh.0, offset).await {
                    Ok(()) => answer_readdir(&fs, ino, fh, offset, reply),
                    Err(e) => reply.error(errno(&fs, "readdir", ino, &e)),
                }
            });
            return;
        }
        let started = Instant::now();
        // Answered on this worker, from the handle's entries; watched all the same.
        let _pending = self.pending("readdir", ino.0, req, started);
        answer_readdir(&self.fs, ino, fh, offset, reply);
        self.fs.metrics().fuse_request("readdir", started.elapsed());
    }

    fn readdirplus(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        reply: ReplyDirectoryPlus,
    ) {
        if !self.fs.readdir_ready(fh.0, offset) {
            self.spawn("readdirplus", ino, req, move |fs| async move {
                match fs.readdir_prepare(fh.0, offset).await {
                    Ok(()) => answer_readdirplus(&fs, ino, fh, offset, reply),
                    Err(e) => reply.error(errno(&fs, "readdirplus", ino, &e)),
                }
            });
            return;
        }
        let started = Instant::now();
        // Answered on this worker, from the handle's entries; watched all the same.
        let _pending = self.pending("readdirplus", ino.0, req, started);
        answer_readdirplus(&self.fs, ino, fh, offset, reply);
        self.fs
            .metrics()
            .fuse_request("readdirplus", started.elapsed());
    }

    fn releasedir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        reply: ReplyEmpty,
    ) {
        self.fs.releasedir(fh.0);
        reply.ok();
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        let s = self.fs.statfs();
        reply.statfs(
            s.blocks, s.bfree, s.bavail, s.files, s.ffree, s.bsize, s.namelen, s.frsize,
        );
    }

    fn flush(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        // PID 0: the closer is in a PID namespace the server cannot see.
        let closer = Some(req.pid()).filter(|pid| *pid != 0);
        self.spawn("flush", ino, req, move |fs| async move {
            match fs.flush(fh.0, closer).await {
                Ok(()) => reply.ok(),
                Err(e) => reply.error(errno(&fs, "flush", ino, &e)),
            }
        });
    }

    fn fsync(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        self.spawn("fsync", ino, req, move |fs| async move {
            match fs.fsync(fh.0).await {
                Ok(()) => reply.ok(),
                Err(e) => reply.error(errno(&fs, "fsync", ino, &e)),
            }
        });
    }

    // Extended attributes: objects carry none we expose. ENOSYS tells the kernel once and for all,
    // so `ls` stops asking on every file.

    fn getxattr(&self, _req: &Request, ino: INodeNo, _name: &OsStr, _size: u32, reply: ReplyXattr) {
        reply.error(refused(&self.fs, "getxattr", ino, Errno::ENOSYS));
    }

    fn listxattr(&self, _req: &Request, ino: INodeNo, _size: u32, reply: ReplyXattr) {
        reply.error(refused(&self.fs, "listxattr", ino, Errno::ENOSYS));
    }

    fn setattr(
        &self,
        req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        _ctime: Option<std::time::SystemTime>,
        fh: Option<FileHandle>,
        _crtime: Option<std::time::SystemTime>,
        _chgtime: Option<std::time::SystemTime>,
        _bkuptime: Option<std::time::SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let time = |t: TimeOrNow| match t {
            TimeOrNow::SpecificTime(t) => t,
            TimeOrNow::Now => std::time::SystemTime::now(),
        };
        let change = SetAttr {
            size,
            mtime: mtime.map(time),
            mode,
            uid,
            gid,
            atime: atime.map(time),
            fh: fh.map(|fh| fh.0),
        };
        self.spawn("setattr", ino, req, move |fs| async move {
            match fs.setattr(ino.0, change).await {
                Ok(attr) => reply.attr(&fs.ttl(), &file_attr(&attr)),
                Err(e) => reply.error(errno(&fs, "setattr", ino, &e)),
            }
        });
    }

    fn mknod(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        rdev: u32,
        reply: ReplyEntry,
    ) {
        let name = match name_of(&self.fs, "mknod", parent, name, NameUse::New) {
            Ok(name) => name,
            Err(errno) => return reply.error(errno),
        };
        let creator = creator(req, mode, umask);
        let kind = mode & libc::S_IFMT;
        self.spawn("mknod", parent, req, move |fs| async move {
            // A regular file is a file; FIFOs, sockets and device nodes exist only where
            // `posix_metadata` keeps their type (elsewhere EPERM).
            let made = match kind {
                libc::S_IFREG => fs.mknod_as(parent.0, &name, Some(creator)).await,
                _ => fs.mknod_special(parent.0, &name, kind, rdev, creator).await,
            };
            match made {
                Ok(attr) => reply.entry(&fs.ttl(), &file_attr(&attr), Generation(0)),
                Err(e) => reply.error(errno(&fs, "mknod", parent, &e)),
            }
        });
    }

    fn mkdir(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        reply: ReplyEntry,
    ) {
        let name = match name_of(&self.fs, "mkdir", parent, name, NameUse::New) {
            Ok(name) => name,
            Err(errno) => return reply.error(errno),
        };
        let resent = resent(req);
        let creator = creator(req, mode, umask);
        self.spawn("mkdir", parent, req, move |fs| async move {
            let made = match fs.mkdir_as(parent.0, &name, Some(creator)).await {
                Err(FsError::Exists) if resent => {
                    landed_before("mkdir", parent, &name);
                    fs.lookup(parent.0, &name).await
                }
                made => made,
            };
            match made {
                Ok(attr) => reply.entry(&fs.ttl(), &file_attr(&attr), Generation(0)),
                Err(e) => reply.error(errno(&fs, "mkdir", parent, &e)),
            }
        });
    }

    fn unlink(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let name = match name_of(&self.fs, "unlink", parent, name, NameUse::Existing) {
            Ok(name) => name,
            Err(errno) => return reply.error(errno),
        };
        let resent = resent(req);
        self.spawn("unlink", parent, req, move |fs| async move {
            match fs.unlink(parent.0, &name).await {
                Ok(()) => reply.ok(),
                Err(FsError::NotFound) if resent => {
                    landed_before("unlink", parent, &name);
                    reply.ok()
                }
                Err(e) => reply.error(errno(&fs, "unlink", parent, &e)),
            }
        });
    }

    fn rmdir(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let name = match name_of(&self.fs, "rmdir", parent, name, NameUse::Existing) {
            Ok(name) => name,
            Err(errno) => return reply.error(errno),
        };
        let resent = resent(req);
        self.spawn("rmdir", parent, req, move |fs| async move {
            match fs.rmdir(parent.0, &name).await {
                Ok(()) => reply.ok(),
                Err(FsError::NotFound) if resent => {
                    landed_before("rmdir", parent, &name);
                    reply.ok()
                }
                Err(e) => reply.error(errno(&fs, "rmdir", parent, &e)),
            }
        });
    }

    fn symlink(
        &self,
        req: &Request,
        parent: INodeNo,
        link_name: &OsStr,
        target: &std::path::Path,
        reply: ReplyEntry,
    ) {
        let name = match name_of(&self.fs, "symlink", parent, link_name, NameUse::New) {
            Ok(name) => name,
            Err(errno) => return reply.error(errno),
        };
        let target = target.as_os_str().as_bytes().to_vec();
        let creator = creator(req, 0o777, 0);
        self.spawn("symlink", parent, req, move |fs| async move {
            match fs.symlink(parent.0, &name, &target, creator).await {
                Ok(attr) => reply.entry(&fs.ttl(), &file_attr(&attr), Generation(0)),
                Err(e) => reply.error(errno(&fs, "symlink", parent, &e)),
            }
        });
    }

    fn readlink(&self, req: &Request, ino: INodeNo, reply: ReplyData) {
        self.spawn("readlink", ino, req, move |fs| async move {
            match fs.readlink(ino.0).await {
                Ok(target) => reply.data(&target),
                Err(e) => reply.error(errno(&fs, "readlink", ino, &e)),
            }
        });
    }

    fn rename(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: fuser::RenameFlags,
        reply: ReplyEmpty,
    ) {
        let names = name_of(&self.fs, "rename", parent, name, NameUse::Existing).and_then(|name| {
            name_of(&self.fs, "rename", newparent, newname, NameUse::New).map(|new| (name, new))
        });
        let (name, newname) = match names {
            Ok(names) => names,
            Err(errno) => return reply.error(errno),
        };
        let flags = RenameFlags {
            no_replace: flags.contains(fuser::RenameFlags::RENAME_NOREPLACE),
            exchange: flags.contains(fuser::RenameFlags::RENAME_EXCHANGE),
        };
        let resent = resent(req);
        self.spawn("rename", parent, req, move |fs| async move {
            match fs
                .rename(parent.0, &name, newparent.0, &newname, flags)
                .await
            {
                Ok(()) => reply.ok(),
                // The source gone and the destination there: the previous server renamed it.
                Err(FsError::NotFound)
                    if resent
                        && fs
                            .rename_landed(parent.0, &name, newparent.0, &newname)
                            .await
                            .is_ok() =>
                {
                    landed_before("rename", parent, &name);
                    reply.ok()
                }
                Err(e) => reply.error(errno(&fs, "rename", parent, &e)),
            }
        });
    }

    fn link(
        &self,
        _req: &Request,
        ino: INodeNo,
        _newparent: INodeNo,
        _newname: &OsStr,
        reply: ReplyEntry,
    ) {
        // No hard links in an object store.
        reply.error(refused(&self.fs, "link", ino, Errno::EPERM));
    }

    fn write(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        let Some(reply) = self.write_inline(req, ino, fh, offset, data, reply) else {
            return;
        };
        let data = data.to_vec();
        self.spawn("write", ino, req, move |fs| async move {
            match fs.write(fh.0, offset, &data).await {
                Ok(written) => reply.written(written),
                Err(e) => reply.error(errno(&fs, "write", ino, &e)),
            }
        });
    }

    fn create(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        _flags: i32,
        reply: ReplyCreate,
    ) {
        let name = match name_of(&self.fs, "create", parent, name, NameUse::New) {
            Ok(name) => name,
            Err(errno) => return reply.error(errno),
        };
        let creator = creator(req, mode, umask);
        // A new name, nothing being written there: from memory, no hop to the runtime.
        let answer =
            move |fs: &Fs, created: FsResult<(Attr, u64)>, reply: ReplyCreate| match created {
                Ok((attr, fh)) => {
                    let (ttl, attr, fh) = (fs.ttl(), file_attr(&attr), FileHandle(fh));
                    reply.created(&ttl, &attr, Generation(0), fh, FopenFlags::empty())
                }
                Err(e) => reply.error(errno(fs, "create", parent, &e)),
            };
        let now = |fs: &Fs| fs.create_now(parent.0, &name, Some(creator));
        let Some(reply) = self.answer_now("create", parent.0, req, reply, now, answer) else {
            return;
        };
        self.spawn("create", parent, req, move |fs| async move {
            answer(
                &fs,
                fs.create_as(parent.0, &name, Some(creator)).await,
                reply,
            );
        });
    }
}
