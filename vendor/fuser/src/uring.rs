//! msfs: FUSE over io_uring (Linux 6.14 and later, with `fuse.enable_uring=Y`).
//!
//! Over `/dev/fuse` every request costs the server a `read(2)` to fetch it and a `writev(2)`
//! to answer it, and the kernel wakes whichever worker sleeps in `read`. Over io_uring the
//! server registers buffers per CPU ("queues" of "entries"); the kernel copies a request into
//! an entry of the queue of the CPU that issued it and completes that entry's command, and one
//! `COMMIT_AND_FETCH` command both answers it and hands the entry back for the next request.
//! FORGETs, INTERRUPTs and notifications still travel over `/dev/fuse`, whose workers keep
//! running beside the rings.
//!
//! The protocol (include/uapi/linux/fuse.h, fs/fuse/dev_uring.c): an entry is a header buffer
//! (`fuse_uring_req_header`: 128 bytes for the in/out header, 128 for the operation's own
//! argument struct, then `fuse_uring_ent_in_out`) and a payload buffer of at least the
//! connection's largest request. A request is reassembled here into the layout `/dev/fuse`
//! delivers (header, argument struct, payload) so that the rest of fuser parses it unchanged;
//! an answer's out header goes to the header buffer and everything after it to the payload.
//!
//! Ownership of an entry's buffers alternates: the kernel's from the submission of its
//! REGISTER or COMMIT_AND_FETCH until its completion, then this process's until the one answer
//! commits it. The ring thread copies a request out before dispatching it, so the only writer
//! of an entry in this process's turn is the answer (`RingReply::send`), which any thread may
//! send, once.
//!
//! Only the queue's own thread submits to its ring. The kernel delivers the next request into
//! an entry as task work of the thread that submitted the entry's command, and cancels the
//! commands of a thread that exits: an answer from a runtime thread that later ends would
//! take its entry with it. So an answer sent elsewhere writes the entry's buffers, queues its
//! commit and wakes the ring thread through an eventfd the ring keeps a read armed on.

use std::cell::UnsafeCell;
use std::io;
use std::io::IoSlice;
use std::os::fd::AsRawFd;
use std::os::fd::FromRawFd;
use std::os::fd::OwnedFd;
use std::path::Path;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::OnceLock;
use std::sync::atomic::AtomicBool;
use std::sync::atomic::Ordering;
use std::thread;
use std::thread::ThreadId;
use std::time::Duration;
use std::time::Instant;

use io_uring::IoUring;
use io_uring::cqueue;
use io_uring::opcode;
use io_uring::squeue;
use io_uring::types;
use log::error;
use log::warn;

use crate::dev_fuse::DevFuse;

/// `fuse_uring_cmd::FUSE_IO_URING_CMD_REGISTER`.
const CMD_REGISTER: u32 = 1;
/// `fuse_uring_cmd::FUSE_IO_URING_CMD_COMMIT_AND_FETCH`.
const CMD_COMMIT_AND_FETCH: u32 = 2;
/// `FUSE_URING_IN_OUT_HEADER_SZ` and `FUSE_URING_OP_IN_OUT_SZ`.
const IN_OUT_HEADER_SIZE: usize = 128;
const OP_IN_SIZE: usize = 128;
/// `sizeof(struct fuse_in_header)` and `sizeof(struct fuse_out_header)`.
const IN_HEADER_SIZE: usize = 40;
const OUT_HEADER_SIZE: usize = 16;
/// `IORING_ENTER_GETEVENTS`.
const ENTER_GETEVENTS: u32 = 1;
/// Small enough for the system allocator to answer `alloc_zeroed` with `calloc`, whose large
/// blocks are fresh, untouched pages (a larger alignment is zeroed by hand, page by page).
const PAYLOAD_ALIGN: usize = 8;
/// `FUSE_MIN_READ_BUFFER`: the kernel's floor for a payload buffer.
const MIN_PAYLOAD: usize = 8192;
/// Byte offset of `len` in `struct io_uring_sqe`; see `register_entry`.
const SQE_LEN_OFFSET: usize = 24;

/// `struct fuse_uring_ent_in_out`.
#[repr(C)]
#[derive(Clone, Copy)]
struct EntInOut {
    flags: u64,
    /// The request's unique ID, which its COMMIT_AND_FETCH names.
    commit_id: u64,
    /// Bytes of payload: of the request, or (written by us) of the answer.
    payload_sz: u32,
    padding: u32,
    reserved: u64,
}

/// `struct fuse_uring_req_header`.
#[repr(C, align(8))]
struct ReqHeader {
    in_out: [u8; IN_OUT_HEADER_SIZE],
    op_in: [u8; OP_IN_SIZE],
    ent_in_out: EntInOut,
}

/// `struct fuse_uring_cmd_req`, the command area of a REGISTER or COMMIT_AND_FETCH.
fn cmd_req(commit_id: u64, qid: u16) -> [u8; 80] {
    let mut cmd = [0u8; 80];
    // flags (u64) stays 0.
    cmd[8..16].copy_from_slice(&commit_id.to_ne_bytes());
    cmd[16..18].copy_from_slice(&qid.to_ne_bytes());
    cmd
}

/// One entry's buffers. Their addresses are registered with the kernel, so they never move.
struct RingEntry {
    header: Box<UnsafeCell<ReqHeader>>,
    /// `payload_len` bytes from `alloc_zeroed`: pages the kernel never wrote stay untouched,
    /// so an entry costs memory for the largest request it carried, not for the largest
    /// possible one.
    payload: *mut u8,
    payload_len: usize,
    /// The two iovecs REGISTER names; read by the kernel during that submission only.
    iov: Box<[libc::iovec; 2]>,
    /// In this process's hands (between the completion and the answer's commit).
    in_userspace: AtomicBool,
}

impl RingEntry {
    fn new(payload_len: usize) -> io::Result<Self> {
        let header = Box::new(UnsafeCell::new(ReqHeader {
            in_out: [0; IN_OUT_HEADER_SIZE],
            op_in: [0; OP_IN_SIZE],
            ent_in_out: EntInOut {
                flags: 0,
                commit_id: 0,
                payload_sz: 0,
                padding: 0,
                reserved: 0,
            },
        }));
        let layout = Self::payload_layout(payload_len)?;
        // SAFETY: a non-zero size (`payload_len` is at least `MIN_PAYLOAD`).
        let payload = unsafe { std::alloc::alloc_zeroed(layout) };
        if payload.is_null() {
            return Err(io::Error::from(io::ErrorKind::OutOfMemory));
        }
        let iov = Box::new([
            libc::iovec {
                iov_base: header.get().cast(),
                iov_len: size_of::<ReqHeader>(),
            },
            libc::iovec {
                iov_base: payload.cast(),
                iov_len: payload_len,
            },
        ]);
        Ok(Self {
            header,
            payload,
            payload_len,
            iov,
            in_userspace: AtomicBool::new(false),
        })
    }

    fn payload_layout(len: usize) -> io::Result<std::alloc::Layout> {
        std::alloc::Layout::from_size_align(len, PAYLOAD_ALIGN)
            .map_err(|_| io::Error::other(format!("a {len}-byte FUSE ring payload")))
    }
}

impl Drop for RingEntry {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with this layout (which was valid then) and freed once.
        // The ring is dropped first (`RingQueue`'s field order), so the kernel no longer
        // writes it.
        unsafe {
            let layout =
                std::alloc::Layout::from_size_align_unchecked(self.payload_len, PAYLOAD_ALIGN);
            std::alloc::dealloc(self.payload, layout);
        }
    }
}

/// One CPU's queue: its ring and its entries.
pub(crate) struct RingQueue {
    qid: u16,
    ring: IoUring<squeue::Entry128, cqueue::Entry>,
    dev: Arc<DevFuse>,
    entries: Box<[RingEntry]>,
    /// The thread that serves the queue, the only one that submits to its ring.
    thread: OnceLock<ThreadId>,
    /// Commits of answers sent on other threads, `(entry, commit ID)`, for the ring thread.
    pending: Mutex<Vec<(usize, u64)>>,
    /// Wakes the ring thread for `pending`.
    wake: OwnedFd,
    /// Where the armed read of `wake` lands (the kernel's while armed).
    wake_count: Box<UnsafeCell<u64>>,
    /// The connection ended: the ring thread returns at its next wake-up.
    stopping: AtomicBool,
    /// How long the ring thread polls for the next request before it sleeps.
    poll: Duration,
    /// The ring thread answered a request itself since it last waited.
    answered_here: AtomicBool,
    /// For a connection taken over: a directory of the mount to look a made-up name up in
    /// once the entries are registered (see `poke`).
    poke: Option<PathBuf>,
}

// SAFETY: the entries' buffers are shared with the kernel and written in turns (see the
// module's documentation); the submission and completion queues are only touched by the
// queue's one ring thread (`RingQueue::serve`), and `wake_count` only by the kernel.
unsafe impl Sync for RingQueue {}
unsafe impl Send for RingQueue {}

impl std::fmt::Debug for RingQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RingQueue")
            .field("qid", &self.qid)
            .field("entries", &self.entries.len())
            .finish()
    }
}

/// The rings of one FUSE connection, one queue per possible CPU as the kernel requires.
#[derive(Debug)]
pub(crate) struct Rings {
    pub(crate) queues: Vec<Arc<RingQueue>>,
    /// Each entry's payload buffer, in bytes.
    pub(crate) payload_len: usize,
}

impl Rings {
    /// Sets up the rings and their buffers (before INIT is answered, so that a kernel or a
    /// sandbox without io_uring leaves the connection on `/dev/fuse`). `max_payload` is the
    /// connection's largest request or answer payload (`max_write`, `max_pages`).
    pub(crate) fn new(
        dev: Arc<DevFuse>,
        depth: u16,
        max_payload: usize,
        poll: Duration,
        poke: Option<PathBuf>,
    ) -> io::Result<Self> {
        let cpus = possible_cpus()?;
        let payload_len = max_payload.max(MIN_PAYLOAD);
        let mut queues = Vec::with_capacity(cpus);
        for qid in 0..cpus {
            // One submission per entry at most, and the armed read of `wake`.
            let ring = IoUring::<squeue::Entry128, cqueue::Entry>::builder()
                .setup_coop_taskrun()
                .setup_taskrun_flag()
                .build((u32::from(depth) + 1).next_power_of_two())?;
            // SAFETY: a plain eventfd(2); the descriptor is owned from here on.
            let wake = unsafe {
                let fd = libc::eventfd(0, libc::EFD_CLOEXEC);
                if fd < 0 {
                    return Err(io::Error::last_os_error());
                }
                OwnedFd::from_raw_fd(fd)
            };
            let entries = (0..depth)
                .map(|_| RingEntry::new(payload_len))
                .collect::<io::Result<_>>()?;
            queues.push(Arc::new(RingQueue {
                qid: u16::try_from(qid).map_err(|_| io::Error::other("too many CPUs"))?,
                ring,
                dev: dev.clone(),
                entries,
                thread: OnceLock::new(),
                pending: Mutex::new(Vec::with_capacity(usize::from(depth))),
                wake,
                wake_count: Box::new(UnsafeCell::new(0)),
                stopping: AtomicBool::new(false),
                poll,
                answered_here: AtomicBool::new(false),
                poke: poke.clone(),
            }));
        }
        Ok(Self {
            queues,
            payload_len,
        })
    }
}

/// The CPUs the kernel may run a requester on: its `num_possible_cpus()`, the number of
/// queues it waits for before it switches the connection to the rings.
fn possible_cpus() -> io::Result<usize> {
    let text = std::fs::read_to_string("/sys/devices/system/cpu/possible")?;
    let mut count = 0;
    for range in text.trim().split(',') {
        let (first, last) = range.split_once('-').unwrap_or((range, range));
        let parse = |s: &str| {
            s.parse::<usize>()
                .map_err(|_| io::Error::other(format!("unreadable CPU list {text:?}")))
        };
        count += parse(last)? - parse(first)? + 1;
    }
    Ok(count)
}

/// Runs this thread on `cpu`, the CPU whose requests its queue carries: a caller sleeps there
/// while its small request is answered, so the answer is computed where the caller's data is
/// warm and the caller is woken without an interrupt to another CPU (on a 2-core VM a 4 KiB
/// cache hit took 8 µs so, against 12 µs unpinned). Best effort: a CPU outside the process's
/// allowed set (a container's cpuset) leaves the thread where it is.
fn pin_to_cpu(cpu: usize) {
    // SAFETY: a zeroed cpu_set_t filled by the libc macro, for this thread.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, size_of::<libc::cpu_set_t>(), &set);
    }
}

/// Lets this thread run on any CPU again (see `pin_to_cpu`); the kernel keeps it within the
/// process's cpuset.
fn unpin() {
    // SAFETY: as in `pin_to_cpu`.
    unsafe {
        let mut all: libc::cpu_set_t = std::mem::zeroed();
        for cpu in 0..libc::CPU_SETSIZE as usize {
            libc::CPU_SET(cpu, &mut all);
        }
        libc::sched_setaffinity(0, size_of::<libc::cpu_set_t>(), &all);
    }
}

/// Has the kernel fetch what it queued for queue `qid` while no entry was free (the previous
/// server's were taken with it): it hands queued requests out only as entries commit answers,
/// never at registration. A lookup of a made-up name, by a thread on the queue's CPU, is a
/// request of that queue; its answer's commit fetches the first queued request, whose answer
/// fetches the next.
fn poke(dir: &Path, qid: u16) {
    let name = dir.join(format!(
        ".msfs-io-uring-resume-{qid}-{}",
        std::process::id()
    ));
    let spawned = thread::Builder::new()
        .name(format!("fuser-poke-{qid}"))
        .spawn(move || {
            pin_to_cpu(usize::from(qid));
            let _ = std::fs::symlink_metadata(&name);
        });
    if let Err(e) = spawned {
        warn!("FUSE ring {qid}: cannot start its first request: {e}");
    }
}

/// The `user_data` of the armed read of `wake`; entries are numbered from 0.
const WAKE: u64 = u64::MAX;

impl RingQueue {
    pub(crate) fn qid(&self) -> u16 {
        self.qid
    }

    /// Ends the ring thread once the connection has ended: entries in this process's hands
    /// when it did will never complete, so it cannot wait for all of them.
    pub(crate) fn stop(&self) {
        self.stopping.store(true, Ordering::Release);
        self.wake();
    }

    fn wake(&self) {
        let one = 1u64.to_ne_bytes();
        // SAFETY: an 8-byte write to our eventfd, which fails only if its count would
        // overflow, when a wake-up is pending anyway.
        unsafe { libc::write(self.wake.as_raw_fd(), one.as_ptr().cast(), 8) };
    }

    /// Pushes one submission; submitted at the ring thread's next wait. Ring thread only.
    fn push(&self, sqe: &squeue::Entry128) {
        // SAFETY: only the ring thread touches the submission queue (the caller's contract),
        // which holds one submission per entry and the wake read, so it cannot be full.
        unsafe {
            let mut sq = self.ring.submission_shared();
            if sq.push(sqe).is_err() {
                unreachable!("a FUSE ring's submission queue holds every entry's command");
            }
            sq.sync();
        }
    }

    fn on_ring_thread(&self) -> bool {
        self.thread.get() == Some(&thread::current().id())
    }

    fn push_register(&self, index: usize) {
        let entry = &self.entries[index];
        let sqe = opcode::UringCmd80::new(types::Fd(self.dev.as_raw_fd()), CMD_REGISTER)
            .cmd(cmd_req(0, self.qid))
            .addr(Some(entry.iov.as_ptr() as u64))
            .build()
            .user_data(index as u64);
        self.push(&with_len(sqe, 2));
    }

    fn push_commit(&self, index: usize, commit_id: u64) {
        let sqe = opcode::UringCmd80::new(types::Fd(self.dev.as_raw_fd()), CMD_COMMIT_AND_FETCH)
            .cmd(cmd_req(commit_id, self.qid))
            .build()
            .user_data(index as u64);
        self.push(&sqe);
    }

    fn push_wake_read(&self) {
        let sqe = opcode::Read::new(
            types::Fd(self.wake.as_raw_fd()),
            self.wake_count.get().cast(),
            8,
        )
        .build()
        .user_data(WAKE);
        self.push(&squeue::Entry128::from(sqe));
    }

    /// Answers the request in `index` and hands the entry back for the next one.
    fn commit(&self, index: usize, commit_id: u64, bufs: &[IoSlice<'_>]) -> io::Result<()> {
        let entry = &self.entries[index];
        if !entry.in_userspace.swap(false, Ordering::AcqRel) {
            return Err(io::Error::other("FUSE ring entry answered twice"));
        }
        let total: usize = bufs.iter().map(|b| b.len()).sum();
        let payload_len = total.saturating_sub(OUT_HEADER_SIZE);
        let fits = total >= OUT_HEADER_SIZE && payload_len <= entry.payload_len;
        let refused;
        let bufs = if fits {
            bufs
        } else {
            // The caller still gets an answer, EIO, rather than waiting for one forever.
            refused = eio_answer(commit_id);
            &[IoSlice::new(&refused)][..]
        };
        write_answer(entry, bufs, if fits { payload_len } else { 0 });
        if self.on_ring_thread() {
            self.answered_here.store(true, Ordering::Relaxed);
            self.push_commit(index, commit_id);
        } else {
            self.pending
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push((index, commit_id));
            self.wake();
        }
        if fits {
            Ok(())
        } else {
            Err(io::Error::other(format!(
                "a FUSE answer of {total} bytes does not fit a ring entry; answered EIO"
            )))
        }
    }

    /// Submits what is queued and polls, for at most `poll`, until a completion is there
    /// (running the kernel's task work, which delivers requests, when it says it has some).
    /// A request that arrives meanwhile is taken without the thread having slept: the
    /// sleep and wake-up are most of a small request's round trip (measured in the README).
    fn poll_for_work(&self) {
        if self.ring.submitter().submit().is_err() {
            return;
        }
        let start = Instant::now();
        let mut polls = 0u32;
        loop {
            // SAFETY: ring thread only, as every use of the queues.
            let (ready, taskrun) = unsafe {
                (
                    !self.ring.completion_shared().is_empty(),
                    self.ring.submission_shared().taskrun(),
                )
            };
            if ready {
                return;
            }
            if taskrun {
                // SAFETY: runs task work without submitting or waiting.
                let _ = unsafe {
                    self.ring
                        .submitter()
                        .enter::<libc::sigset_t>(0, 0, ENTER_GETEVENTS, None)
                };
                continue;
            }
            polls += 1;
            if polls % 64 == 0 {
                if start.elapsed() > self.poll {
                    return;
                }
                // msfs: a caller that shares this CPU (more writers than CPUs) runs meanwhile
                // instead of waiting for the poll to end; with nothing else to run, the yield
                // returns at once. 4 KiB random writes by 4 and 8 threads on 2 CPUs: 36-38k
                // IOPS spinning, 47-52k yielding; one thread unchanged (README, Performance).
                std::thread::yield_now();
            }
            std::hint::spin_loop();
        }
    }

    /// Registers the entries, then waits for requests and hands each to `dispatch`,
    /// reassembled as `/dev/fuse` delivers it, with the reply that answers it through this
    /// queue. Runs on the queue's own thread until the connection ends.
    pub(crate) fn serve(self: &Arc<Self>, mut dispatch: impl FnMut(&[u8], RingReply)) {
        if self.thread.set(thread::current().id()).is_err() {
            error!("FUSE ring {} served twice", self.qid);
            return;
        }
        pin_to_cpu(usize::from(self.qid));
        for index in 0..self.entries.len() {
            self.push_register(index);
        }
        self.push_wake_read();
        if let Err(e) = self.ring.submitter().submit() {
            error!("FUSE ring {}: registering: {e}", self.qid);
            return;
        }
        if let Some(dir) = &self.poke {
            poke(dir, self.qid);
        }
        let payload_len = self.entries.first().map_or(0, |e| e.payload_len);
        let mut request = Vec::with_capacity(IN_HEADER_SIZE + OP_IN_SIZE + payload_len);
        let mut live = self.entries.len();
        let mut done = Vec::with_capacity(self.entries.len() + 1);
        let mut pinned = true;
        loop {
            let mut from_elsewhere = false;
            for (index, commit_id) in self
                .pending
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .drain(..)
            {
                from_elsewhere = true;
                self.push_commit(index, commit_id);
            }
            // The kernel copies an answer's payload where its commit is submitted: on this
            // thread. Answers from elsewhere are the large ones (big reads, fetches), whose
            // callers keep running meanwhile (read-ahead): the thread leaves the callers' CPU
            // to the scheduler while they come, and goes back to it once it answers itself.
            let answered_here = self.answered_here.load(Ordering::Relaxed);
            if from_elsewhere && !answered_here && pinned {
                unpin();
                pinned = false;
            } else if answered_here && !from_elsewhere && !pinned {
                pin_to_cpu(usize::from(self.qid));
                pinned = true;
            }
            // Poll only after answering on this thread: the caller is then blocked on us and
            // asks again at once. After answers from elsewhere (large reads, store fetches)
            // the callers are often running on this CPU, whose time polling would take.
            if !self.poll.is_zero() && self.answered_here.swap(false, Ordering::Relaxed) {
                self.poll_for_work();
            }
            if let Err(e) = self.ring.submitter().submit_and_wait(1) {
                if e.raw_os_error() == Some(libc::EINTR) {
                    continue;
                }
                error!("FUSE ring {}: {e}", self.qid);
                return;
            }
            // SAFETY: only this thread reads the completion queue.
            unsafe {
                done.extend(
                    self.ring
                        .completion_shared()
                        .map(|c| (c.user_data(), c.result())),
                );
            }
            for (user_data, result) in done.drain(..) {
                if user_data == WAKE {
                    if result < 0 {
                        error!(
                            "FUSE ring {}: wake-up read: {}",
                            self.qid,
                            io::Error::from_raw_os_error(-result)
                        );
                        return;
                    }
                    if self.stopping.load(Ordering::Acquire) {
                        return;
                    }
                    self.push_wake_read();
                    continue;
                }
                let index = user_data as usize;
                if result < 0 {
                    // The entry is the kernel's no more: the connection is going away (or the
                    // command was refused, which is logged).
                    live -= 1;
                    let errno = -result;
                    if ![libc::ENOTCONN, libc::ECONNABORTED, libc::ECANCELED].contains(&errno) {
                        warn!(
                            "FUSE ring {} entry {index}: {}",
                            self.qid,
                            io::Error::from_raw_os_error(errno)
                        );
                    }
                    if live == 0 {
                        return;
                    }
                    continue;
                }
                let entry = &self.entries[index];
                match reassemble(entry, &mut request) {
                    Ok(commit_id) => {
                        entry.in_userspace.store(true, Ordering::Release);
                        dispatch(
                            &request,
                            RingReply {
                                queue: self.clone(),
                                index,
                                commit_id,
                            },
                        );
                    }
                    Err(e) => {
                        // Without its commit ID the request cannot be answered; the kernel
                        // ends it when the connection goes.
                        error!("FUSE ring {} entry {index}: {e}", self.qid);
                        live -= 1;
                    }
                }
            }
        }
    }
}

/// A `fuse_out_header` answering request `unique` with `EIO` and nothing else.
fn eio_answer(unique: u64) -> [u8; OUT_HEADER_SIZE] {
    let mut header = [0u8; OUT_HEADER_SIZE];
    header[..4].copy_from_slice(&(OUT_HEADER_SIZE as u32).to_ne_bytes());
    header[4..8].copy_from_slice(&(-libc::EIO).to_ne_bytes());
    header[8..].copy_from_slice(&unique.to_ne_bytes());
    header
}

/// Writes an answer (`bufs`: the out header, then its payload of `payload_len` bytes, bounded
/// by the caller) into `entry`'s buffers.
fn write_answer(entry: &RingEntry, bufs: &[IoSlice<'_>], payload_len: usize) {
    let header = entry.header.get();
    let payload = entry.payload;
    let mut at = 0usize;
    for buf in bufs {
        let mut bytes: &[u8] = buf;
        if at < OUT_HEADER_SIZE {
            let n = (OUT_HEADER_SIZE - at).min(bytes.len());
            // SAFETY: the entry is in our hands (its `in_userspace` was taken by this answer,
            // the only writer); `at + n <= OUT_HEADER_SIZE`.
            unsafe {
                let out = std::ptr::addr_of_mut!((*header).in_out).cast::<u8>();
                std::ptr::copy_nonoverlapping(bytes.as_ptr(), out.add(at), n);
            }
            at += n;
            bytes = &bytes[n..];
        }
        if !bytes.is_empty() {
            // SAFETY: as above; the payload ends at `payload_len`, within the buffer.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    bytes.as_ptr(),
                    payload.add(at - OUT_HEADER_SIZE),
                    bytes.len(),
                );
            }
            at += bytes.len();
        }
    }
    // SAFETY: as above.
    unsafe {
        (*header).ent_in_out.payload_sz = payload_len as u32;
    }
}

/// Copies the request in `entry` into `request` in `/dev/fuse`'s layout (in header,
/// argument struct, payload); returns its commit ID.
fn reassemble(entry: &RingEntry, request: &mut Vec<u8>) -> io::Result<u64> {
    // SAFETY: the kernel completed this entry: it is ours until answered.
    let header = unsafe { &*entry.header.get() };
    let total = u32::from_ne_bytes(header.in_out[..4].try_into().unwrap()) as usize;
    let payload_len = header.ent_in_out.payload_sz as usize;
    let op_len = total
        .checked_sub(IN_HEADER_SIZE + payload_len)
        .filter(|&n| n <= OP_IN_SIZE && payload_len <= entry.payload_len)
        .ok_or_else(|| {
            io::Error::other(format!(
                "request of {total} bytes with a {payload_len}-byte payload"
            ))
        })?;
    request.clear();
    request.extend_from_slice(&header.in_out[..IN_HEADER_SIZE]);
    request.extend_from_slice(&header.op_in[..op_len]);
    // SAFETY: as above; `payload_len` is within the buffer.
    request.extend_from_slice(unsafe { std::slice::from_raw_parts(entry.payload, payload_len) });
    Ok(header.ent_in_out.commit_id)
}

/// Sets an SQE's `len`, which `UringCmd80` of io-uring 0.7 cannot: REGISTER names two iovecs.
fn with_len(sqe: squeue::Entry128, len: u32) -> squeue::Entry128 {
    const { assert!(size_of::<squeue::Entry128>() == 128) };
    // SAFETY: `Entry128` is `repr(C)`: a `struct io_uring_sqe` (whose `len` is a u32 at byte
    // 24) followed by the 64 bytes of the command's extension; every bit pattern is valid.
    unsafe {
        let mut raw: [u8; 128] = std::mem::transmute(sqe);
        raw[SQE_LEN_OFFSET..SQE_LEN_OFFSET + 4].copy_from_slice(&len.to_ne_bytes());
        std::mem::transmute(raw)
    }
}

/// The way back for one request that came through a ring.
#[derive(Clone, Debug)]
pub(crate) struct RingReply {
    queue: Arc<RingQueue>,
    index: usize,
    commit_id: u64,
}

impl RingReply {
    pub(crate) fn send(&self, bufs: &[IoSlice<'_>]) -> io::Result<()> {
        self.queue.commit(self.index, self.commit_id, bufs)
    }

    /// Answers `EIO`: for a request that cannot be dispatched, whose entry would otherwise
    /// never come back (nor its caller).
    pub(crate) fn refuse(&self) -> io::Result<()> {
        self.send(&[IoSlice::new(&eio_answer(self.commit_id))])
    }

    pub(crate) fn dev(&self) -> &Arc<DevFuse> {
        &self.queue.dev
    }
}
