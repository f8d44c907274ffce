//! Keeps a mount's inodes bounded: asks the kernel to drop the file entries it holds that
//! nobody uses (`evictable_inode_ttl`), or the least recently used beyond
//! `evictable_inode_limit`, with `FUSE_NOTIFY_INVAL_ENTRY`. The kernel then forgets their
//! inodes (FORGET) and the mount frees them.
//!
//! Without it, every entry the kernel is told of stays until the kernel itself runs short of
//! memory: `ls -l` of a directory of a million files left a million inodes in msfs (~820 MiB)
//! and in the kernel. Dropping an entry is what the kernel does on its own under memory
//! pressure, so nothing depends on it staying: the next use looks the name up again. Only
//! files nobody has open are named, never directories (a process's working directory whose
//! entry is dropped can no longer tell its own path).
//!
//! The notifications go out on a thread of their own, never a FUSE worker's: the kernel
//! takes the directory's lock to drop an entry, and a request in that directory holds it
//! until a worker answers.

use std::ffi::OsStr;
use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use fuser::{INodeNo, Notifier};

use crate::fs::Fs;

/// When entries are dropped (from `evictable_inode_ttl` and `ttl_check_interval`); the limit
/// beyond which the least recently used are dropped too is the mount's own
/// ([`Fs::inode_limit`]: `evictable_inode_limit`, or less as the process's mounts share its
/// inode pool).
#[derive(Debug, Clone, Copy)]
pub struct InodeEviction {
    /// A file entry the kernel has not asked about for this long is dropped.
    pub idle: Duration,
    /// How often the limit is checked.
    pub every: Duration,
}

/// A look for idle entries reads every inode, so it runs this many times per `idle` at most
/// (each a few milliseconds per hundred thousand inodes), not at every check of the limit.
const IDLE_LOOKS_PER_TTL: u32 = 8;

/// Starts evicting `fs`'s idle entries through `notifier`, until `stop` is set, `fs` is
/// dropped or the connection is gone.
pub fn start(
    fs: &Arc<Fs>,
    notifier: Notifier,
    eviction: InodeEviction,
    stop: Arc<AtomicBool>,
) -> io::Result<()> {
    let fs = Arc::downgrade(fs);
    std::thread::Builder::new()
        .name("msfs-inode-evict".into())
        .spawn(move || run(&fs, &notifier, eviction, &stop))?;
    Ok(())
}

fn run(fs: &Weak<Fs>, notifier: &Notifier, eviction: InodeEviction, stop: &AtomicBool) {
    let idle_look_every = (eviction.idle / IDLE_LOOKS_PER_TTL).max(eviction.every);
    let mut last_idle_look = Instant::now();
    // The inode count at the last look past the limit: while entries named then are still
    // being forgotten, looking again would find nothing new.
    let mut counted_at_last_look = 0;
    let mut dropped_last_round = false;
    loop {
        std::thread::sleep(eviction.every);
        if stop.load(Ordering::Relaxed) {
            return;
        }
        let Some(fs) = fs.upgrade() else {
            return;
        };
        let count = fs.inode_count();
        let limit = fs.inode_limit();
        let over = count > limit && count != counted_at_last_look;
        if !over && last_idle_look.elapsed() < idle_look_every {
            continue;
        }
        last_idle_look = Instant::now();
        counted_at_last_look = count;
        // What the last round's entries held is free by now (the kernel forgot them): give it
        // back, or the next listing's inodes land in new pages while it sits unused.
        if dropped_last_round {
            crate::malloc::trim();
        }
        let entries = fs.evictable_entries(eviction.idle, limit);
        dropped_last_round = !entries.is_empty();
        if entries.is_empty() {
            continue;
        }
        let mut dropped = 0;
        for (parent, name) in &entries {
            if stop.load(Ordering::Relaxed) {
                return;
            }
            match notifier.inval_entry(INodeNo(*parent), OsStr::new(name)) {
                Ok(()) => dropped += 1,
                // The connection is gone (unmounted, or handed to a successor that closed it).
                Err(e) if matches!(e.raw_os_error(), Some(libc::ENODEV | libc::EBADF)) => return,
                Err(e) => {
                    tracing::debug!(parent, name = %name, error = %e,
                        "the kernel refused to drop an entry");
                }
            }
        }
        fs.metrics().fuse_inodes_evicted(dropped);
        tracing::debug!(
            dropped,
            inodes = count,
            limit,
            "asked the kernel to drop idle file entries"
        );
    }
}
