//! `msfs warm`: walks the paths given, then warms every regular file through the mount, a
//! chunk at a time, on `--jobs` threads; a progress line on a terminal, a summary at the end.
//!
//! Before anything is fetched, the total is compared with the cache's capacity (msfs reports
//! it): warming more than the cache holds would evict the first files to make room for the
//! last, so it is refused with both numbers. SIGINT (Ctrl-C) stops it between chunks: what is
//! warmed stays warm, and the summary says it was cancelled.

use std::collections::VecDeque;
use std::fs::File;
use std::io::{IsTerminal, Write};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use super::abi::{
    PAYLOAD, SHARED_CACHE_IOCTL, SHARED_CACHE_PAYLOAD, SharedCacheReport, WARM_IOCTL, WarmReport,
    WarmRequest,
};

/// Bytes warmed per ioctl: small enough that a cancellation or a progress line waits little,
/// big enough that the request itself costs nothing beside the fetch.
const CHUNK: u64 = 64 << 20;
const PROGRESS_EVERY: Duration = Duration::from_millis(250);

#[derive(Debug, Clone)]
pub struct Options {
    pub paths: Vec<PathBuf>,
    pub recursive: bool,
    pub jobs: usize,
}

/// What a run did.
#[derive(Debug, Default)]
pub struct Summary {
    pub files: u64,
    pub bytes: u64,
    /// Of `bytes`, those already in the cache before.
    pub cached_before: u64,
    pub elapsed: Duration,
    /// Files that could not be warmed, with why.
    pub failed: Vec<(PathBuf, String)>,
    pub cancelled: bool,
    /// With a shared cache: what the mount's process did with it while warming (its counts
    /// are process-wide, so other readers of the node show too), fills finished included.
    pub shared_cache: Option<SharedCacheReport>,
}

impl std::fmt::Display for Summary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let seconds = self.elapsed.as_secs_f64();
        let rate = if seconds > 0.0 {
            self.bytes as f64 / seconds
        } else {
            0.0
        };
        let share = if self.bytes > 0 {
            100.0 * self.cached_before as f64 / self.bytes as f64
        } else {
            0.0
        };
        write!(
            f,
            "{} {} file{}, {} in {seconds:.1} s ({}/s); {share:.0}% was already cached",
            if self.cancelled {
                "cancelled after warming"
            } else {
                "warmed"
            },
            self.files,
            if self.files == 1 { "" } else { "s" },
            human(self.bytes),
            human(rate as u64),
        )?;
        if !self.failed.is_empty() {
            write!(f, "; {} failed", self.failed.len())?;
        }
        if let Some(shared) = &self.shared_cache {
            write!(
                f,
                "\nshared cache: {} line(s) read from it, {} from the origin; {} filled for the \
                 other nodes, {} dropped",
                shared.hits, shared.misses, shared.fills, shared.fill_drops
            )?;
            if shared.pending > 0 {
                write!(f, ", {} still being filled", shared.pending)?;
            }
            if shared.fallbacks > 0 {
                write!(f, "; {} read(s) fell back to the origin", shared.fallbacks)?;
            }
        }
        Ok(())
    }
}

static CANCELLED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_interrupt(_: libc::c_int) {
    // Async-signal-safe: one atomic store.
    CANCELLED.store(true, Ordering::SeqCst);
}

/// Runs `msfs warm`: progress on stderr when it is a terminal. `Err` for what stops it before
/// anything is warmed (a bad path, a directory without `--recursive`, too much for the cache).
pub fn run(options: &Options) -> Result<Summary, String> {
    let files = collect(&options.paths, options.recursive)?;
    let Some((first, _)) = files.first() else {
        return Ok(Summary::default());
    };
    let total: u64 = files.iter().map(|(_, size)| size).sum();
    let first_file = File::open(first).map_err(|e| describe(first, &e))?;
    let cache = ask(&first_file, 0, 0).map_err(|e| describe(first, &e))?;
    let shared_before = shared_cache_report(&first_file);
    if total > cache.capacity {
        return Err(format!(
            "{} in {} files would not fit in the cache ({} = cache_line_size × cache_lines): \
             warming it would evict its own first files; warm less, or raise cache_lines",
            human(total),
            files.len(),
            human(cache.capacity)
        ));
    }
    // SAFETY: `on_interrupt` only stores into an atomic, which is async-signal-safe.
    unsafe {
        libc::signal(
            libc::SIGINT,
            on_interrupt as *const () as libc::sighandler_t,
        )
    };
    let queue = Mutex::new(files.into_iter().collect::<VecDeque<_>>());
    let progress = Progress::default();
    let failed = Mutex::new(Vec::new());
    let started = Instant::now();
    let jobs = options.jobs.max(1);
    let running = AtomicUsize::new(jobs);
    let show = std::io::stderr().is_terminal();
    std::thread::scope(|scope| {
        for _ in 0..jobs {
            scope.spawn(|| {
                while let Some((path, size)) = next(&queue) {
                    if let Err(why) = warm_file(&path, size, &progress) {
                        failed
                            .lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .push((path, why));
                    }
                }
                running.fetch_sub(1, Ordering::SeqCst);
            });
        }
        while running.load(Ordering::SeqCst) > 0 {
            if show {
                progress.show(total, started.elapsed());
            }
            std::thread::sleep(PROGRESS_EVERY.min(Duration::from_millis(50)));
        }
    });
    if show {
        eprint!("\r\x1b[K");
    }
    let shared_cache = shared_before.map(|before| fills_settled(&first_file).since(&before));
    Ok(Summary {
        files: progress.files.load(Ordering::SeqCst),
        bytes: progress.bytes.load(Ordering::SeqCst),
        cached_before: progress.cached_before.load(Ordering::SeqCst),
        elapsed: started.elapsed(),
        failed: failed.into_inner().unwrap_or_else(|e| e.into_inner()),
        cancelled: CANCELLED.load(Ordering::SeqCst),
        shared_cache,
    })
}

/// How long the summary waits at most for the background fills of what was warmed.
const FILLS_WAIT_LIMIT: Duration = Duration::from_secs(120);

/// The shared cache's counts once no fill is pending (or two minutes have passed, or Ctrl-C):
/// "warmed" then means the other nodes can read it.
fn fills_settled(file: &File) -> SharedCacheReport {
    let started = Instant::now();
    loop {
        let now = shared_cache_report(file).unwrap_or_default();
        if now.pending == 0
            || started.elapsed() >= FILLS_WAIT_LIMIT
            || CANCELLED.load(Ordering::SeqCst)
        {
            return now;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The shared cache's counts of `file`'s mount; `None` when it has no shared cache.
fn shared_cache_report(file: &File) -> Option<SharedCacheReport> {
    let mut payload = [0u8; SHARED_CACHE_PAYLOAD];
    // SAFETY: the command encodes a 64-byte argument the kernel writes, and `payload` is 64
    // bytes that live across the call.
    let rc = unsafe {
        libc::ioctl(
            file.as_raw_fd(),
            SHARED_CACHE_IOCTL as libc::Ioctl,
            payload.as_mut_ptr(),
        )
    };
    (rc == 0)
        .then(|| SharedCacheReport::decode(&payload))
        .flatten()
}

fn next(queue: &Mutex<VecDeque<(PathBuf, u64)>>) -> Option<(PathBuf, u64)> {
    if CANCELLED.load(Ordering::SeqCst) {
        return None;
    }
    queue.lock().unwrap_or_else(|e| e.into_inner()).pop_front()
}

#[derive(Default)]
struct Progress {
    files: AtomicU64,
    bytes: AtomicU64,
    cached_before: AtomicU64,
    last_shown: Mutex<Option<Instant>>,
}

impl Progress {
    fn show(&self, total: u64, elapsed: Duration) {
        let mut last = self.last_shown.lock().unwrap_or_else(|e| e.into_inner());
        if last.is_some_and(|at| at.elapsed() < PROGRESS_EVERY) {
            return;
        }
        *last = Some(Instant::now());
        let bytes = self.bytes.load(Ordering::SeqCst);
        let percent = (100 * bytes).checked_div(total).unwrap_or(100);
        let rate = bytes as f64 / elapsed.as_secs_f64().max(0.001);
        eprint!(
            "\r\x1b[Kwarming {} of {} ({percent}%), {} files done, {}/s",
            human(bytes),
            human(total),
            self.files.load(Ordering::SeqCst),
            human(rate as u64)
        );
        let _ = std::io::stderr().flush();
    }
}

/// Warms one file, `CHUNK` bytes per request, until done or cancelled.
fn warm_file(path: &Path, size: u64, progress: &Progress) -> Result<(), String> {
    let file = File::open(path).map_err(|e| describe(path, &e))?;
    let mut offset = 0;
    while offset < size {
        if CANCELLED.load(Ordering::SeqCst) {
            return Ok(());
        }
        let len = CHUNK.min(size - offset);
        let report = ask(&file, offset, len).map_err(|e| describe(path, &e))?;
        progress
            .cached_before
            .fetch_add(report.cached_before, Ordering::SeqCst);
        progress.bytes.fetch_add(len, Ordering::SeqCst);
        offset += len;
    }
    progress.files.fetch_add(1, Ordering::SeqCst);
    Ok(())
}

/// One warm ioctl on `file`.
fn ask(file: &File, offset: u64, len: u64) -> std::io::Result<WarmReport> {
    let mut payload = WarmRequest { offset, len }.encode();
    // SAFETY: the command encodes a 32-byte read-write argument, and `payload` is 32 bytes
    // that live across the call; the kernel copies in and out of exactly those.
    let rc = unsafe {
        libc::ioctl(
            file.as_raw_fd(),
            WARM_IOCTL as libc::Ioctl,
            payload.as_mut_ptr(),
        )
    };
    if rc < 0 {
        return Err(std::io::Error::last_os_error());
    }
    WarmReport::decode(&payload[..PAYLOAD])
        .ok_or_else(|| std::io::Error::other("malformed answer from msfs"))
}

/// An error of `path` in words a user can act on.
fn describe(path: &Path, error: &std::io::Error) -> String {
    let why = match error.raw_os_error() {
        Some(libc::ENOTTY | libc::ENOSYS | libc::EINVAL) => {
            "not a file of an msfs mount with a cache (or that msfs predates `msfs warm`)"
                .to_string()
        }
        _ => error.to_string(),
    };
    format!("{}: {why}", path.display())
}

/// The regular files under `paths` with their sizes: a file as given, a directory's whole tree
/// with `recursive` (symbolic links are not followed).
fn collect(paths: &[PathBuf], recursive: bool) -> Result<Vec<(PathBuf, u64)>, String> {
    let mut files = Vec::new();
    for path in paths {
        let meta = std::fs::metadata(path).map_err(|e| format!("{}: {e}", path.display()))?;
        if meta.is_file() {
            files.push((path.clone(), meta.len()));
        } else if meta.is_dir() && recursive {
            walk(path, &mut files)?;
        } else if meta.is_dir() {
            return Err(format!(
                "{}: is a directory (add --recursive to warm what it holds)",
                path.display()
            ));
        } else {
            return Err(format!("{}: not a regular file", path.display()));
        }
    }
    Ok(files)
}

fn walk(dir: &Path, files: &mut Vec<(PathBuf, u64)>) -> Result<(), String> {
    let read = |e: std::io::Error| format!("{}: {e}", dir.display());
    let mut entries = std::fs::read_dir(dir)
        .map_err(read)?
        .collect::<Result<Vec<_>, _>>()
        .map_err(read)?;
    entries.sort_by_key(|entry| entry.file_name());
    for entry in entries {
        let path = entry.path();
        let kind = entry
            .file_type()
            .map_err(|e| format!("{}: {e}", path.display()))?;
        if kind.is_dir() {
            walk(&path, files)?;
        } else if kind.is_file() {
            let meta = entry
                .metadata()
                .map_err(|e| format!("{}: {e}", path.display()))?;
            files.push((path, meta.len()));
        }
    }
    Ok(())
}

/// `bytes` in binary units, one decimal.
pub fn human(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes} B")
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_read_as_people_write_them() {
        assert_eq!(human(512), "512 B");
        assert_eq!(human(1536), "1.5 KiB");
        assert_eq!(human(2 << 30), "2.0 GiB");
    }

    #[test]
    fn a_directory_needs_recursive_and_a_tree_is_walked_in_order() {
        let dir = tempfile::tempdir().expect("dir");
        std::fs::create_dir(dir.path().join("sub")).expect("sub");
        std::fs::write(dir.path().join("b"), b"22").expect("b");
        std::fs::write(dir.path().join("sub/a"), b"1").expect("a");
        let error = collect(&[dir.path().to_path_buf()], false).expect_err("refused");
        assert!(error.contains("add --recursive"), "{error}");
        let files = collect(&[dir.path().to_path_buf()], true).expect("walked");
        assert_eq!(
            files,
            vec![(dir.path().join("b"), 2), (dir.path().join("sub/a"), 1)]
        );
    }

    #[test]
    fn a_file_outside_msfs_is_named_with_why() {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("f");
        std::fs::write(&path, b"x").expect("f");
        let error = ask(&File::open(&path).expect("open"), 0, 1).expect_err("not msfs");
        assert!(
            describe(&path, &error).contains("not a file of an msfs mount"),
            "{}",
            describe(&path, &error)
        );
    }
}
