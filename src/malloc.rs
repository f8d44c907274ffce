//! glibc's allocator, tuned for a long-lived server on few cores.
//!
//! glibc gives a thread that finds the allocator busy an arena of its own, up to eight per core.
//! msfs runs many threads (FUSE workers, the blocking pool, the runtime's), and memory freed in
//! one arena is never reused by another: after a large directory's inodes come and go, the
//! daemon keeps pages it no longer uses. One arena per core keeps contention as low (no more
//! threads run at once than there are cores) and fragmentation far lower: measured with
//! `bench/inode-limit.sh 65536` (`ls -l` of 1M entries), peak RSS 251 → 231 MiB (202 MiB with
//! [`trim`] after eviction rounds). Throughput did not move: `bench/run --quick` of seq-cold,
//! rand-4k (1 and 4 threads), small-4k-t4, meta-ls, meta-create-par and write-small-4k-t4 with
//! `MALLOC_ARENA_MAX=16` (glibc's default here) beside this, 3 runs each: within each other's
//! spread.

/// Caps glibc's arenas at one per core, unless `MALLOC_ARENA_MAX` says otherwise (glibc reads it
/// itself). Call first thing in `main`, before any thread starts.
pub fn limit_arenas() {
    if std::env::var_os("MALLOC_ARENA_MAX").is_some() {
        return;
    }
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    let arenas = libc::c_int::try_from(cores).unwrap_or(libc::c_int::MAX);
    // SAFETY: mallopt only changes an allocator setting; no thread has allocated concurrently
    // yet (the caller's contract), and a refused value leaves glibc's default.
    unsafe { libc::mallopt(libc::M_ARENA_MAX, arenas) };
}

/// Returns the allocator's free pages to the kernel (`malloc_trim`): after many small objects
/// were freed at once (the inodes an eviction round let go), so that the memory they held is not
/// counted against the process while it waits for reuse.
pub fn trim() {
    // SAFETY: malloc_trim only releases free memory; it is thread-safe.
    unsafe { libc::malloc_trim(0) };
}
