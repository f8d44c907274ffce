//! The footprint curve and its verdict: a compact table for stderr, CSV rows for the file named
//! by `MSFS_SOAK_REPORT`, and the checks that memory stayed flat and that neither file
//! descriptors nor threads grew.

use std::io::Write;
use std::os::fd::AsRawFd;
use std::time::Duration;

use super::sampler::Sample;

/// Where the CSV goes, if set. Each test appends its rows (a header first if the file is empty).
const REPORT_ENV: &str = "MSFS_SOAK_REPORT";

/// The first fifth of the run is warm-up: the cache fills, connection and thread pools reach
/// their working size, the allocator settles into its arenas. (The RSS check compares the middle
/// and last thirds, both past it.)
const WARM_UP: f64 = 0.2;
/// ... and at least this long: pools take the same time to reach their working size in a short
/// run as in a long one (in a 60 s run the blocking pool reached its plateau of ~20 threads
/// at 15–25 s, after the first fifth, and stayed flat to the end).
const WARM_UP_MIN_SECS: f64 = 30.0;
/// How much the last third's RSS peak may exceed the middle third's. A leak grows with the work
/// done, and the last third does as much work as the middle one, so a leak shows up as its whole
/// per-third growth on top of the middle peak. In a 10-minute run on a 2-core VM each third
/// moves about 3 GiB through the cache in some 15,000 store requests and 2,500 file operations,
/// so a leak of more than ~3 KiB per request or ~20 KiB per file operation exceeds the slack
/// (about 50 MiB for this daemon); short CI runs only catch gross leaks. What the slack tolerates
/// is the allocator: glibc's per-thread arenas and fragmentation move RSS in steps of a few MiB
/// to a few tens of MiB that do not repeat, and a peak lands in either third depending on which
/// buffers were live at the sampling instant. Peaks rather than end points, so that one quiet
/// sample cannot hide growth.
const RSS_SLACK_FRACTION: f64 = 0.10;
const RSS_SLACK_KIB: u64 = 32 << 10;
/// Descriptors other than sockets (open handles, spill files of files being written) that may
/// be open at any instant beyond the warm-up peak. Sockets are judged separately (see
/// [`settle`]): the store's connection pool grows to the peak number of requests in flight, and
/// a burst of reads late in the run legitimately opens a dozen more connections at once.
const FILE_SLACK: u64 = 8;
/// Threads the runtime may add or drop at any instant beyond the middle third's peak: the
/// blocking pool keeps a worker for every blocking task that ran at once in the last 10 s, so a
/// burst of commits late in the run grows it (CI saw 35 threads in the last third of a
/// four-volume run against a middle-third peak of 24, back to 8 once settled). A leaked thread
/// never exits, and is caught by [`settle`] within `SETTLED_SLACK`.
const THREAD_SLACK: u64 = 16;
/// How far above its state before the load a process may stay once the load is over and idle
/// connections have been closed.
const SETTLED_SLACK: u64 = 4;
/// How long a process may take to settle: the store client closes a pooled connection once it
/// has been idle for 90 s, checking every 90 s, so up to 180 s after the last request.
const SETTLE_LIMIT: Duration = Duration::from_secs(240);

/// What grew (empty if nothing did): `samples` are taken under load over `run`, `end` once the
/// load has stopped and the writes have landed.
pub fn growth(samples: &[Sample], end: &Sample, run: Duration) -> Vec<String> {
    let run = run.as_secs_f64().max(1.0);
    let between = |lo: f64, hi: f64| -> Vec<Sample> {
        samples
            .iter()
            .filter(|s| (lo..hi).contains(&(s.elapsed.as_secs_f64() / run)))
            .copied()
            .collect()
    };
    let mut warm_up = between(0.0, WARM_UP.max(WARM_UP_MIN_SECS / run));
    if warm_up.is_empty() {
        warm_up.extend(samples.first().copied());
    }
    let middle = between(1.0 / 3.0, 2.0 / 3.0);
    // Up to the load's end, not past it: the sampler goes on while the workers wind down, and
    // there every writer commits its last file at once (CI saw a sample there with 36 threads
    // against a middle-third peak of 24). That burst is judged by `end` and [`settle`].
    let last = between(2.0 / 3.0, 1.0);
    if warm_up.is_empty() || middle.is_empty() || last.is_empty() {
        return vec![format!(
            "only {} samples: too few to judge growth",
            samples.len()
        )];
    }
    let peak = |set: &[Sample], f: fn(&Sample) -> u64| set.iter().map(f).max().unwrap_or(0);
    let mut found = Vec::new();

    let (rss_middle, rss_last) = (peak(&middle, |s| s.rss_kib), peak(&last, |s| s.rss_kib));
    let rss_bound = rss_middle + (rss_middle as f64 * RSS_SLACK_FRACTION) as u64 + RSS_SLACK_KIB;
    if rss_last > rss_bound {
        found.push(format!(
            "RSS grew: last third peaked at {} MiB, middle third at {} MiB (bound {} MiB)",
            rss_last >> 10,
            rss_middle >> 10,
            rss_bound >> 10
        ));
    }
    let files: fn(&Sample) -> u64 = |s| s.fds - s.sockets;
    let threads: fn(&Sample) -> u64 = |s| s.threads;
    // `end` is sampled right after the writers' last files were committed, all at once: their
    // parts are read from the spill files on the blocking pool, whose workers then idle for 10 s
    // before exiting (CI saw 27 threads there against a warm-up peak of 13, and 7 once settled).
    // So threads are judged under load and, for leaks, by [`settle`]; descriptors at `end` too,
    // since a spill file or handle still open after its commit is a leak at any instant.
    for (what, f, slack, at_end) in [
        ("descriptors other than sockets", files, FILE_SLACK, true),
        ("threads", threads, THREAD_SLACK, false),
    ] {
        let (warm, middle, last) = (peak(&warm_up, f), peak(&middle, f), peak(&last, f));
        if last > middle + slack {
            found.push(format!(
                "{what} grew under load: last third peaked at {last}, middle third at {middle}"
            ));
        }
        if at_end && f(end) > warm + slack {
            found.push(format!(
                "{what} grew: {} at the end, warm-up peak {warm} (+{slack} allowed)",
                f(end)
            ));
        }
    }
    found
}

/// Polls `probe` until the process is back within a few descriptors and threads of `before`
/// (its state before the load): every connection, spill file and worker the load needed has
/// been released. A leaked socket never closes, so this is where sockets are judged. Returns
/// the settled sample, or what was still open after [`SETTLE_LIMIT`].
pub async fn settle(
    before: &Sample,
    mut probe: impl FnMut() -> Result<Sample, String>,
    open_now: impl Fn() -> String,
) -> Result<Sample, String> {
    let deadline = std::time::Instant::now() + SETTLE_LIMIT;
    loop {
        let now = probe()?;
        if now.fds <= before.fds + SETTLED_SLACK && now.threads <= before.threads + SETTLED_SLACK {
            return Ok(now);
        }
        if std::time::Instant::now() >= deadline {
            return Err(format!(
                "not settled {SETTLE_LIMIT:?} after the load: {} descriptors ({} sockets) and {} \
                 threads, {} ({}) and {} before it; open now:\n{}",
                now.fds,
                now.sockets,
                now.threads,
                before.fds,
                before.sockets,
                before.threads,
                open_now()
            ));
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// The curve as a table of at most ~30 rows under load (first, last, the RSS peak and evenly
/// spaced ones between), then the samples `after` it (`("end", …)`, `("settled", …)`) and a
/// summary line.
pub fn table(test: &str, pid: u32, samples: &[Sample], after: &[(&str, &Sample)]) -> String {
    let mut out = format!(
        "{test}: msfs pid {pid}, {} samples under load\n{:>7} {:>9} {:>9} {:>5} {:>7} {:>7} {:>10} {:>10} {:>8}\n",
        samples.len(),
        "t(s)",
        "rss(MiB)",
        "anon(MiB)",
        "fds",
        "sockets",
        "threads",
        "read(MiB)",
        "wrote(MiB)",
        "ops"
    );
    let peak_at = samples
        .iter()
        .enumerate()
        .max_by_key(|(_, s)| s.rss_kib)
        .map_or(0, |(i, _)| i);
    let step = samples.len().div_ceil(30).max(1);
    for (i, s) in samples.iter().enumerate() {
        if i % step == 0 || i == peak_at || i + 1 == samples.len() {
            out.push_str(&row(&format!("{}", s.elapsed.as_secs()), s));
        }
    }
    for (label, s) in after {
        out.push_str(&row(label, s));
    }
    if let (Some(first), Some(peak)) = (samples.first(), samples.get(peak_at)) {
        let range = |f: fn(&Sample) -> u64| {
            let min = samples.iter().map(f).min().unwrap_or(0);
            let max = samples.iter().map(f).max().unwrap_or(0);
            let points: String = std::iter::once(("start", first))
                .chain(after.iter().copied())
                .map(|(label, s)| format!(", {label} {}", f(s)))
                .collect();
            format!("{min}..{max} under load{points}")
        };
        let rss_after: String = after
            .iter()
            .map(|(label, s)| format!(", {label} {} MiB", s.rss_kib >> 10))
            .collect();
        out.push_str(&format!(
            "RSS start {} MiB, peak {} MiB at {} s{rss_after}; fds {}; sockets {}; threads {}\n",
            first.rss_kib >> 10,
            peak.rss_kib >> 10,
            peak.elapsed.as_secs(),
            range(|s| s.fds),
            range(|s| s.sockets),
            range(|s| s.threads),
        ));
    }
    out
}

fn row(label: &str, s: &Sample) -> String {
    format!(
        "{label:>7} {:>9.1} {:>9.1} {:>5} {:>7} {:>7} {:>10} {:>10} {:>8}\n",
        s.rss_kib as f64 / 1024.0,
        s.anon_kib as f64 / 1024.0,
        s.fds,
        s.sockets,
        s.threads,
        s.read_mib,
        s.written_mib,
        s.ops
    )
}

/// Appends the curve (`load` rows, then the `after` ones) to `$MSFS_SOAK_REPORT` as CSV, if set.
/// Both soak tests may finish at the
/// same moment (nextest runs them in parallel), so the file is locked while written.
pub fn write_report(test: &str, samples: &[Sample], after: &[(&str, &Sample)]) {
    let Some(path) = std::env::var_os(REPORT_ENV) else {
        return;
    };
    let mut text = String::new();
    let rows = samples
        .iter()
        .map(|s| ("load", s))
        .chain(after.iter().copied());
    for (phase, s) in rows {
        text.push_str(&format!(
            "{test},{phase},{:.1},{},{},{},{},{},{},{},{}\n",
            s.elapsed.as_secs_f64(),
            s.rss_kib,
            s.anon_kib,
            s.fds,
            s.sockets,
            s.threads,
            s.read_mib,
            s.written_mib,
            s.ops
        ));
    }
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .unwrap_or_else(|e| panic!("{REPORT_ENV}={}: {e}", path.display()));
    // SAFETY: flock(2) on a descriptor we own; released when `file` closes.
    unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) };
    let empty = file.metadata().map(|m| m.len() == 0).unwrap_or(false);
    if empty {
        text.insert_str(
            0,
            "test,phase,elapsed_s,rss_kib,rss_anon_kib,fds,sockets,threads,read_mib,written_mib,ops\n",
        );
    }
    file.write_all(text.as_bytes())
        .unwrap_or_else(|e| panic!("write {REPORT_ENV}={}: {e}", path.display()));
}
