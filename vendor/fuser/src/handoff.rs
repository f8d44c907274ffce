//! msfs: stopping a session so that another process can serve its connection (see
//! `MSFS-CHANGES.md`).
//!
//! Once [`HandOff::begin`] is called, the session's workers still read requests (a worker
//! blocked in `read` cannot be called back) but no longer dispatch them: a request read after
//! that is dropped unanswered, and the kernel, which keeps every request it handed out until it
//! is answered, gives it to the next server when that server sends `FUSE_NOTIFY_RESEND`. The
//! exceptions are FORGET and BATCH_FORGET: they are never answered, so the kernel does not keep
//! them, and dropping one would leave the next server counting lookups the kernel has let go.

use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::sync::atomic::AtomicUsize;
use std::sync::atomic::Ordering;

use crate::ll::fuse_abi::fuse_opcode;

/// A handle on a session's hand-off switch; clones share it.
#[derive(Debug, Clone, Default)]
pub struct HandOff {
    state: Arc<State>,
}

#[derive(Debug, Default)]
struct State {
    stopping: AtomicBool,
    /// Workers between reading a request and returning from its dispatch.
    dispatching: AtomicUsize,
}

impl HandOff {
    /// Stops dispatching requests (FORGETs excepted). Cannot be undone.
    pub fn begin(&self) {
        self.state.stopping.store(true, Ordering::SeqCst);
    }

    /// Whether [`HandOff::begin`] was called.
    pub fn is_stopping(&self) -> bool {
        self.state.stopping.load(Ordering::SeqCst)
    }

    /// Workers still inside a dispatch. After [`HandOff::begin`] this only falls: once it is 0,
    /// no request but a FORGET reaches the filesystem again (what a dispatch handed to threads
    /// of its own is the filesystem's to wait for).
    pub fn dispatching(&self) -> usize {
        self.state.dispatching.load(Ordering::SeqCst)
    }

    /// Counts a dispatch that goes ahead whatever the switch says (one that came through
    /// io_uring, which the kernel cannot resend).
    pub(crate) fn count(&self) -> Dispatching<'_> {
        self.state.dispatching.fetch_add(1, Ordering::SeqCst);
        Dispatching { state: &self.state }
    }

    /// Called by a worker with a request it read: `Some(guard)` to dispatch it (the guard
    /// counts the dispatch until dropped), `None` to drop it unanswered.
    pub(crate) fn admit(&self, request: &[u8]) -> Option<Dispatching<'_>> {
        // Counted before the flag is read, and `begin` sets the flag before its caller reads
        // the count (both SeqCst): a worker either sees the flag or is seen dispatching.
        self.state.dispatching.fetch_add(1, Ordering::SeqCst);
        let guard = Dispatching { state: &self.state };
        if self.is_stopping() && !is_forget(request) {
            return None;
        }
        Some(guard)
    }
}

/// One dispatch in progress.
pub(crate) struct Dispatching<'a> {
    state: &'a State,
}

impl Drop for Dispatching<'_> {
    fn drop(&mut self) {
        self.state.dispatching.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Whether a raw request (`fuse_in_header` first: len u32, opcode u32) is a FORGET.
fn is_forget(request: &[u8]) -> bool {
    let Some(opcode) = request.get(4..8) else {
        return false;
    };
    let opcode = u32::from_ne_bytes([opcode[0], opcode[1], opcode[2], opcode[3]]);
    opcode == fuse_opcode::FUSE_FORGET as u32 || opcode == fuse_opcode::FUSE_BATCH_FORGET as u32
}
