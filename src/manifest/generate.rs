//! Manifest generation: lists a backend's whole namespace once, in parallel, and writes it as a
//! manifest ([`super::format`]) that lookups and listings can later be served from without LIST.
//!
//! **Listing.** `workers` lister tasks share one queue (`queue.rs`, bounded in memory by
//! spilling pending directories to disk) of directories, each listed "/"-delimited exactly as
//! the live mount lists it (`fs/listing.rs`): common prefixes become `d` rows (and queued
//! directories), objects become `f` rows, and the directory's own marker (`dir/`, an empty
//! name) is no entry. Rows stream to the directory's TSV page by page, in listing order, so no
//! directory is ever held in memory. Names the mount later hides (`.`, `..`, over 255 bytes)
//! are written as rows all the same, but nothing below `.` or `..` is listed (it could not be
//! reached, and its TSV path would leave the manifest). When a name is both an object and a
//! prefix (`a` and `a/b`), both an `f` and a `d` row are written: readers let the `d` row win,
//! as the live mount does.
//!
//! **Flat directories.** A directory whose listing is still paginating after
//! `flat_dir_confirmation_pages` pages (0 turns detection off, as does a single worker) and
//! whose pages were (almost) all objects — at most one sub-directory per
//! [`FLAT_MAX_SUBDIR_SHARE`] entries, so a huge directory with a few sub-directories still
//! counts — has the rest of its listing split into key ranges ([`super::split`]: by key-prefix
//! characters, or at sampled keys; at most `workers` ranges, up to
//! [`split::MAX_AUTO_RANGES`]) that queue as jobs of their own and are taken before any
//! further directory. A directory named by a `flat_dir_hints` entry is split from its first
//! key without any detection. Each range writes a part file; the lister finishing the last
//! range of a directory appends the parts, in key order, to the rows the directory's own lister
//! already wrote. The ranges partition the key space, so no key is listed twice or missed.
//!
//! **Output.** Everything is built in a fresh directory under `temp_dir` (default: beside
//! `output`), synced, completed by `manifest_index.json` (written last), and then moved into
//! `output` — by one rename when it can be, else entry by entry with the index last. So a
//! reader never takes a half-written manifest for a complete one, and a failed or cancelled
//! generation leaves `output` untouched. An existing manifest (or any non-empty directory) at
//! `output` is replaced only when [`GenerateOptions::overwrite`] says so.
//!
//! **Cancellation.** Dropping the future returned by [`generate`] aborts the listers (they run
//! in a `JoinSet`) and removes the build directory.

use std::collections::{BTreeSet, HashMap};
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Instant, SystemTime};

use tokio::task::JoinSet;

use super::format::{
    DirWriter, Entry, FORMAT_VERSION, FormatError, ManifestInfo, Totals, dir_file, format_time,
};
use super::output::{BuildDir, PARTS_DIR, SPILL_DIR, check_output};
use super::owners;
use super::progress::{Counters, ProgressMode, Reporter};
use super::queue::{Frontier, Job, MAX_PENDING_DIRS_IN_MEMORY, Scheduler};
use super::split::{self, KeyRange, Prober, Strategy};
use crate::config::{BackendConfig, BackendKind, FlatDirHint, S3Config};
use crate::store::{ListPage, ListRequest, ObjectMeta, ObjectStore, StoreError};

/// A directory counts as flat when at most one in this many of the entries on its
/// confirmation pages is a sub-directory.
pub const FLAT_MAX_SUBDIR_SHARE: u64 = 100;

/// How to generate a manifest.
#[derive(Debug, Clone, PartialEq)]
pub struct GenerateOptions {
    /// Concurrent listers (`manifest_gen_workers`); at least 1.
    pub workers: usize,
    /// Pages a directory must keep paginating, without sub-directories, before it is split
    /// (`flat_dir_confirmation_pages`); 0 never splits without a hint.
    pub flat_dir_confirmation_pages: u32,
    /// Directories to split from the start (`flat_dir_hints`), paths relative to the prefix.
    pub flat_dir_hints: Vec<FlatDirHint>,
    /// Keys per LIST page; `None` lets the store choose.
    pub page_size: Option<u32>,
    /// Where the manifest is built before it moves into place; `None`: beside the output.
    pub temp_dir: Option<PathBuf>,
    /// Replace a manifest (or anything else) already at the output.
    pub overwrite: bool,
    /// Read each object's (and directory marker's) owner and mode from its metadata with a
    /// HEAD, into the rows' owner columns (`owners`).
    pub posix_metadata: bool,
    pub progress: ProgressMode,
}

impl GenerateOptions {
    /// The settings of `backend`: its `manifest_gen_workers`, flat-directory settings and
    /// `directory_page_size`; built beside the output, no overwrite, progress on a terminal.
    pub fn from_backend(backend: &BackendConfig) -> GenerateOptions {
        GenerateOptions {
            workers: backend.manifest.gen_workers.max(1),
            flat_dir_confirmation_pages: backend.manifest.flat_dir_confirmation_pages,
            flat_dir_hints: backend.manifest.flat_dir_hints.clone(),
            page_size: (backend.directory_page_size > 0).then_some(backend.directory_page_size),
            temp_dir: None,
            overwrite: false,
            posix_metadata: false,
            progress: ProgressMode::Auto,
        }
    }
}

/// The backend that lists `backend`'s namespace for its manifest: the one its AIStore section
/// names in `manifest_gen_backend`, else the backend itself. Generate with that backend's
/// store, bucket and prefix (and its `directory_page_size`).
pub fn listing_backend<'a>(
    backends: &'a [BackendConfig],
    backend: &'a BackendConfig,
) -> Result<&'a BackendConfig, GenerateError> {
    let target = match &backend.kind {
        BackendKind::S3(S3Config {
            aistore: Some(ais), ..
        }) => ais.manifest_gen_backend.as_deref(),
        _ => None,
    };
    match target {
        None => Ok(backend),
        Some(name) => backends.iter().find(|b| b.dir_name == name).ok_or_else(|| {
            GenerateError::NoListingBackend {
                backend: backend.dir_name.clone(),
                name: name.to_string(),
            }
        }),
    }
}

#[derive(Debug, thiserror::Error)]
pub enum GenerateError {
    #[error(
        "{}: already holds a manifest (created {created_at}); pass --force to replace it, or choose another output directory",
        path.display()
    )]
    ManifestExists { path: PathBuf, created_at: String },
    #[error(
        "{}: exists and is not an empty directory; choose a new or empty output directory, or pass --force to replace its contents",
        path.display()
    )]
    OutputNotEmpty { path: PathBuf },
    #[error("{}: exists and is not a directory", path.display())]
    OutputNotDirectory { path: PathBuf },
    #[error(
        "backend {backend}: AIStore.manifest_gen_backend names {name:?}, but no backend has that dir_name"
    )]
    NoListingBackend { backend: String, name: String },
    #[error("listing bucket {bucket:?} under {prefix:?}: {source}")]
    List {
        bucket: String,
        prefix: String,
        #[source]
        source: Box<StoreError>,
    },
    #[error("{}: {action}: {source}", path.display())]
    Io {
        path: PathBuf,
        action: &'static str,
        #[source]
        source: io::Error,
    },
    #[error(transparent)]
    Format(#[from] FormatError),
    #[error("reading the owner and mode of {key:?} (--posix-metadata): {source}")]
    Head {
        key: String,
        #[source]
        source: Box<StoreError>,
    },
    #[error("a manifest lister failed: {0}")]
    Lister(String),
}

pub(super) fn io_error(
    path: &Path,
    action: &'static str,
) -> impl FnOnce(io::Error) -> GenerateError {
    let path = path.to_path_buf();
    move |source| GenerateError::Io {
        path,
        action,
        source,
    }
}

/// Lists everything under `prefix` ("" or ending in "/"; one without a trailing "/" gets one)
/// of `bucket` through `store`, writes it as a manifest into `output`, and returns its index.
///
/// `created_at` is the time the listing started: objects changed after it may or may not be in
/// the manifest. See the module documentation for how, and [`GenerateOptions`] for the knobs.
pub async fn generate(
    store: Arc<dyn ObjectStore>,
    bucket: &str,
    prefix: &str,
    output: &Path,
    options: &GenerateOptions,
) -> Result<ManifestInfo, GenerateError> {
    let started_at = SystemTime::now();
    let started = Instant::now();
    let prefix = if prefix.is_empty() || prefix.ends_with('/') {
        prefix.to_string()
    } else {
        format!("{prefix}/")
    };
    {
        let output = output.to_path_buf();
        let overwrite = options.overwrite;
        blocking(move || check_output(&output, overwrite)).await?;
    }
    let build = {
        let output = output.to_path_buf();
        let temp_dir = options.temp_dir.clone();
        blocking(move || BuildDir::create(&output, temp_dir.as_deref())).await?
    };

    let counters = Arc::new(Counters::default());
    let workers = options.workers.max(1);
    let ctx = Arc::new(Ctx {
        store,
        bucket: bucket.to_string(),
        root: build.path.clone(),
        parts_dir: build.path.join(PARTS_DIR),
        page_size: options.page_size,
        confirmation_pages: options.flat_dir_confirmation_pages,
        hints: options
            .flat_dir_hints
            .iter()
            .map(|h| (h.path.trim_matches('/').to_string(), h.clone()))
            .collect(),
        target_ranges: workers.clamp(2, split::MAX_AUTO_RANGES),
        workers,
        queue: Scheduler::new(Frontier::new(
            build.path.join(SPILL_DIR),
            MAX_PENDING_DIRS_IN_MEMORY,
        )),
        counters: counters.clone(),
        next_part: AtomicU64::new(0),
        posix_metadata: options.posix_metadata,
        unsorted: Arc::default(),
        prefix,
    });
    ctx.queue
        .push_dir(String::new())
        .map_err(io_error(&ctx.root, "queue the root directory"))?;

    let label = format!("manifest of {}", describe(bucket, &ctx.prefix));
    tracing::info!(
        workers,
        output = %output.display(),
        build = %build.path.display(),
        "generating the {label}"
    );
    let mut reporter = Reporter::start(options.progress, label.clone(), counters.clone());
    let mut listers = JoinSet::new();
    for _ in 0..workers {
        listers.spawn(lister(ctx.clone()));
    }
    let mut failure = None;
    while let Some(joined) = listers.join_next().await {
        let result = match joined {
            Ok(result) => result,
            Err(e) if e.is_cancelled() => Ok(()),
            Err(e) => Err(GenerateError::Lister(e.to_string())),
        };
        if let Err(e) = result
            && failure.is_none()
        {
            failure = Some(e);
            ctx.queue.stop();
            listers.abort_all();
        }
    }
    reporter.stop();
    if let Some(e) = failure {
        return Err(e);
    }

    let info = ManifestInfo {
        version: FORMAT_VERSION,
        bucket: bucket.to_string(),
        prefix: ctx.prefix.clone(),
        totals: Totals {
            objects: counters.objects(),
            directories: counters.directories(),
            bytes: counters.bytes(),
        },
        created_at: format_time(started_at),
        sorted_rows: !ctx.unsorted.load(Ordering::Relaxed),
    };
    {
        let info = info.clone();
        let output = output.to_path_buf();
        let overwrite = options.overwrite;
        blocking(move || build.complete(&info, &output, overwrite)).await?;
    }
    tracing::info!(
        objects = info.totals.objects,
        directories = info.totals.directories,
        lists = counters.lists(),
        elapsed = ?started.elapsed(),
        output = %output.display(),
        "{label} written"
    );
    Ok(info)
}

fn describe(bucket: &str, prefix: &str) -> String {
    if prefix.is_empty() {
        format!("bucket {bucket:?}")
    } else {
        format!("bucket {bucket:?} under {prefix:?}")
    }
}

/// Runs blocking file work off the runtime threads.
async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, GenerateError> + Send + 'static,
) -> Result<T, GenerateError> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|e| GenerateError::Lister(e.to_string()))?
}

/// What every lister shares.
struct Ctx {
    store: Arc<dyn ObjectStore>,
    bucket: String,
    /// The listed prefix: "" or ending in "/".
    prefix: String,
    root: PathBuf,
    parts_dir: PathBuf,
    page_size: Option<u32>,
    confirmation_pages: u32,
    /// By directory path ("" for the root, else "a/b").
    hints: HashMap<String, FlatDirHint>,
    target_ranges: usize,
    workers: usize,
    queue: Scheduler<RangeJob>,
    counters: Arc<Counters>,
    next_part: AtomicU64,
    posix_metadata: bool,
    /// Set when a TSV's rows came out of listing order (a store that does not list in byte
    /// order): the manifest then does not say its rows are sorted.
    unsorted: Arc<AtomicBool>,
}

/// One key range of a split directory.
#[derive(Debug)]
struct RangeJob {
    split: Arc<SplitDir>,
    range: KeyRange,
}

/// A directory whose listing was split into ranges.
#[derive(Debug)]
struct SplitDir {
    dir: String,
    /// The directory's TSV, already holding the rows listed before the split.
    tsv: PathBuf,
    /// Finished ranges: (range start, part file).
    parts: Mutex<Vec<(Option<String>, PathBuf)>>,
    remaining: AtomicUsize,
}

impl Ctx {
    /// The listing prefix of directory `dir`.
    fn dir_prefix(&self, dir: &str) -> String {
        if dir.is_empty() {
            self.prefix.clone()
        } else {
            format!("{}{dir}/", self.prefix)
        }
    }

    async fn list(&self, request: &ListRequest) -> Result<ListPage, GenerateError> {
        Counters::add(&self.counters.lists, 1);
        self.store
            .list(request)
            .await
            .map_err(|source| self.list_error(&request.prefix, source))
    }

    fn list_error(&self, prefix: &str, source: StoreError) -> GenerateError {
        GenerateError::List {
            bucket: self.bucket.clone(),
            prefix: prefix.to_string(),
            source: Box::new(source),
        }
    }

    /// Queues a page's sub-directories, counts it, and returns its rows (with their owners,
    /// with `posix_metadata`).
    async fn rows(&self, prefix: &str, batch: Batch) -> Result<Vec<Entry>, GenerateError> {
        let entries = self.take(batch)?;
        if !self.posix_metadata {
            return Ok(entries);
        }
        owners::read_owners(self.store.as_ref(), prefix, entries)
            .await
            .map_err(|(key, source)| GenerateError::Head {
                key,
                source: Box::new(source),
            })
    }

    fn take(&self, batch: Batch) -> Result<Vec<Entry>, GenerateError> {
        for dir in batch.subdirs {
            self.queue
                .push_dir(dir)
                .map_err(io_error(&self.root.join(SPILL_DIR), "queue a directory"))?;
        }
        Counters::add(&self.counters.objects, batch.objects);
        Counters::add(&self.counters.directories, batch.directories);
        Counters::add(&self.counters.bytes, batch.bytes);
        Ok(batch.entries)
    }

    fn start_split(
        &self,
        dir: String,
        tsv: PathBuf,
        after: Option<String>,
        points: Vec<String>,
        strategy: Strategy,
    ) {
        let ranges = split::partition(after, None, points);
        tracing::debug!(dir, ranges = ranges.len(), %strategy, "splitting a flat directory");
        let split = Arc::new(SplitDir {
            dir,
            tsv,
            parts: Mutex::new(Vec::with_capacity(ranges.len())),
            remaining: AtomicUsize::new(0),
        });
        self.add_ranges(&split, ranges);
    }

    /// Queues more ranges of `split`; counted before they can finish, so no lister merges early.
    fn add_ranges(&self, split: &Arc<SplitDir>, ranges: Vec<KeyRange>) {
        split.remaining.fetch_add(ranges.len(), Ordering::AcqRel);
        self.queue
            .push_ranges(ranges.into_iter().map(|range| RangeJob {
                split: split.clone(),
                range,
            }));
    }

    /// Split points for the rest of a directory's listing, (`after`, `through`].
    async fn plan_split(
        &self,
        prefix: &str,
        after: &str,
        through: Option<&str>,
        seen: &BTreeSet<char>,
        target: usize,
    ) -> Result<split::Plan, GenerateError> {
        let on_list = || Counters::add(&self.counters.lists, 1);
        let prober = Prober {
            store: self.store.as_ref(),
            prefix,
            on_list: &on_list,
        };
        split::plan(&prober, after, through, seen, target)
            .await
            .map_err(|source| self.list_error(prefix, source))
    }
}

/// A TSV (or part file) being written, opened with its first rows: a directory that fits in
/// one page costs one blocking call (create, write, close) rather than three.
struct Sink {
    path: PathBuf,
    writer: Option<DirWriter>,
    unsorted: Arc<AtomicBool>,
}

impl Sink {
    fn new(ctx: &Ctx, path: PathBuf) -> Sink {
        Sink {
            path,
            writer: None,
            unsorted: ctx.unsorted.clone(),
        }
    }

    /// Appends `entries`.
    async fn add(&mut self, entries: Vec<Entry>) -> Result<(), GenerateError> {
        if entries.is_empty() {
            return Ok(());
        }
        self.writer = self.write(entries, false).await?;
        Ok(())
    }

    /// Appends `entries` and closes the file (creating it if nothing was written yet, so every
    /// listed directory has its TSV).
    async fn finish(mut self, entries: Vec<Entry>) -> Result<(), GenerateError> {
        self.write(entries, true).await?;
        Ok(())
    }

    async fn write(
        &mut self,
        entries: Vec<Entry>,
        last: bool,
    ) -> Result<Option<DirWriter>, GenerateError> {
        let path = self.path.clone();
        let writer = self.writer.take();
        let unsorted = self.unsorted.clone();
        blocking(move || {
            let mut writer = match writer {
                Some(writer) => writer,
                None => DirWriter::create(&path)?,
            };
            for entry in &entries {
                writer.write(entry)?;
            }
            if last {
                if !writer.sorted() {
                    unsorted.store(true, Ordering::Relaxed);
                }
                writer.finish()?;
                Ok(None)
            } else {
                Ok(Some(writer))
            }
        })
        .await
    }
}

/// One lister: takes jobs until the queue is done; the first error stops every lister.
async fn lister(ctx: Arc<Ctx>) -> Result<(), GenerateError> {
    loop {
        let job = ctx.queue.next().await.map_err(io_error(
            &ctx.root.join(SPILL_DIR),
            "read queued directories",
        ))?;
        let Some(job) = job else {
            return Ok(());
        };
        let result = match job {
            Job::Dir(dir) => list_dir(&ctx, dir).await,
            Job::Range(range) => list_range(&ctx, range).await,
        };
        ctx.queue.finished();
        if let Err(e) = result {
            ctx.queue.stop();
            return Err(e);
        }
    }
}

/// Lists directory `dir` page by page into its TSV, splitting it if it turns out flat.
async fn list_dir(ctx: &Ctx, dir: String) -> Result<(), GenerateError> {
    let prefix = ctx.dir_prefix(&dir);
    let tsv = dir_file(&ctx.root, &dir);
    let mut sink = Sink::new(ctx, tsv.clone());
    if let Some(hint) = ctx.hints.get(&dir) {
        sink.finish(Vec::new()).await?;
        let points = split::hint_points(&prefix, &hint.key_prefix_chars, hint.split_depth);
        ctx.start_split(dir, tsv, None, points, Strategy::Hint);
        return Ok(());
    }
    // With one lister, splitting would only add probes.
    let mut detect = ctx.confirmation_pages > 0 && ctx.workers > 1;
    let mut pages = 0u32;
    let (mut objects, mut subdirs) = (0u64, 0u64);
    let mut seen = BTreeSet::new();
    let mut token = None;
    loop {
        let request = ListRequest::delimited(&prefix)
            .continuing(token.take())
            .max_keys(ctx.page_size);
        let page = ctx.list(&request).await?;
        let next = page.next.clone();
        let batch = Batch::of(&dir, &prefix, page, None);
        pages += 1;
        objects += batch.objects;
        subdirs += batch.directories;
        let last_key = batch.last_key.clone();
        if detect {
            note_chars(&mut seen, &batch.entries);
        }
        let entries = ctx.rows(&prefix, batch).await?;
        let Some(next) = next else {
            return sink.finish(entries).await;
        };
        if detect && pages >= ctx.confirmation_pages {
            detect = false;
            let flat = subdirs * FLAT_MAX_SUBDIR_SHARE <= objects + subdirs;
            if flat && let Some(after) = last_key {
                let plan = ctx
                    .plan_split(&prefix, &after, None, &seen, ctx.target_ranges)
                    .await?;
                if !plan.points.is_empty() {
                    sink.finish(entries).await?;
                    ctx.start_split(dir, tsv, Some(after), plan.points, plan.strategy);
                    return Ok(());
                }
            }
        }
        sink.add(entries).await?;
        token = Some(next);
    }
}

/// Lists one range of a split directory into a part file; the last range to finish merges.
///
/// A range still paginating after every `flat_dir_confirmation_pages` pages while listers
/// stand idle (its split points guessed wrong, or keys are skewed) hands the rest of itself,
/// split again, to them and ends where it got to.
async fn list_range(ctx: &Ctx, job: RangeJob) -> Result<(), GenerateError> {
    let RangeJob { split, range } = job;
    let prefix = ctx.dir_prefix(&split.dir);
    let part = ctx.parts_dir.join(format!(
        "{}.tsv",
        ctx.next_part.fetch_add(1, Ordering::Relaxed)
    ));
    let mut sink = Sink::new(ctx, part.clone());
    let mut token: Option<String> = None;
    let mut pages = 0u32;
    let mut seen = BTreeSet::new();
    loop {
        let request = match (token.take(), &range.after) {
            (Some(token), _) => ListRequest::delimited(&prefix).continuing(Some(token)),
            (None, Some(after)) => split::delimited_after(prefix.clone(), after),
            (None, None) => ListRequest::delimited(&prefix),
        }
        .max_keys(ctx.page_size);
        let page = ctx.list(&request).await?;
        let next = page.next.clone();
        let batch = Batch::of(&split.dir, &prefix, page, Some(&range));
        let past_end = batch.past_end;
        let last_key = batch.last_key.clone();
        pages += 1;
        note_chars(&mut seen, &batch.entries);
        let entries = ctx.rows(&prefix, batch).await?;
        match next {
            Some(next) if !past_end => {
                let check =
                    ctx.confirmation_pages > 0 && pages.is_multiple_of(ctx.confirmation_pages);
                let idle = if check {
                    ctx.queue.idle(ctx.workers)
                } else {
                    0
                };
                // (A page can only end at or before the range's start when a store repeats a
                // common prefix there; nothing to split then.)
                if idle > 0
                    && let Some(after) = last_key
                    && range.starts_before(&after)
                {
                    let plan = ctx
                        .plan_split(&prefix, &after, range.through.as_deref(), &seen, idle + 1)
                        .await?;
                    if !plan.points.is_empty() {
                        let rest =
                            split::partition(Some(after), range.through.clone(), plan.points);
                        tracing::debug!(
                            dir = split.dir,
                            ranges = rest.len(),
                            strategy = %plan.strategy,
                            "splitting a range again for idle listers"
                        );
                        ctx.add_ranges(&split, rest);
                        sink.finish(entries).await?;
                        break;
                    }
                }
                sink.add(entries).await?;
                token = Some(next);
            }
            _ => {
                sink.finish(entries).await?;
                break;
            }
        }
    }
    split
        .parts
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
        .push((range.after, part));
    if split.remaining.fetch_sub(1, Ordering::AcqRel) == 1 {
        blocking(move || merge(&split)).await?;
    }
    Ok(())
}

/// Appends a split directory's parts, in key order, to its TSV and removes them.
fn merge(split: &SplitDir) -> Result<(), GenerateError> {
    let mut parts = std::mem::take(
        &mut *split
            .parts
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner()),
    );
    // `None` (the range from the first key) sorts first.
    parts.sort_by(|a, b| a.0.cmp(&b.0));
    let mut out = fs::OpenOptions::new()
        .append(true)
        .open(&split.tsv)
        .map_err(io_error(&split.tsv, "open to append listed ranges"))?;
    for (_, part) in parts {
        let mut input = fs::File::open(&part).map_err(io_error(&part, "open a listed range"))?;
        io::copy(&mut input, &mut out).map_err(io_error(&split.tsv, "append a listed range"))?;
        fs::remove_file(&part).map_err(io_error(&part, "remove a listed range"))?;
    }
    Ok(())
}

/// Joins a directory path and a child name, as the live mount does.
fn child_path(dir: &str, name: &str) -> String {
    if dir.is_empty() {
        name.to_string()
    } else {
        format!("{dir}/{name}")
    }
}

/// Records the characters of the names listed, for choosing split points.
fn note_chars(seen: &mut BTreeSet<char>, entries: &[Entry]) {
    const MAX_SEEN: usize = 256;
    // Names repeat the same few ASCII characters: a bit for each one seen spares a B-tree
    // search per character of every name (6% of a 10M-object generation's time).
    let mut ascii = seen
        .iter()
        .filter(|c| c.is_ascii())
        .fold(0u128, |bits, &c| bits | 1 << u32::from(c));
    for entry in entries {
        for c in entry.name.chars() {
            if c.is_ascii() {
                let bit = 1u128 << u32::from(c);
                if ascii & bit != 0 {
                    continue;
                }
                ascii |= bit;
            }
            if seen.len() >= MAX_SEEN {
                return;
            }
            seen.insert(c);
        }
    }
}

/// One page turned into rows.
#[derive(Debug, Default)]
struct Batch {
    entries: Vec<Entry>,
    /// Sub-directories to list (paths relative to the prefix).
    subdirs: Vec<String>,
    objects: u64,
    directories: u64,
    bytes: u64,
    /// The page's largest key or common prefix (where its listing continues).
    last_key: Option<String>,
    /// The page reached beyond the range's end.
    past_end: bool,
}

impl Batch {
    /// The rows of `page` of directory `dir` (listed under `prefix`), in key order, keeping
    /// only the keys inside `range` when one is given.
    fn of(dir: &str, prefix: &str, page: ListPage, range: Option<&KeyRange>) -> Batch {
        enum Item {
            Object(ObjectMeta),
            Prefix(String),
        }
        let key = |item: &Item| match item {
            Item::Object(o) => o.key.clone(),
            Item::Prefix(p) => p.clone(),
        };
        let mut items: Vec<Item> = page
            .objects
            .into_iter()
            .map(Item::Object)
            .chain(page.common_prefixes.into_iter().map(Item::Prefix))
            .collect();
        items.sort_by(|a, b| match (a, b) {
            (Item::Object(a), Item::Object(b)) => a.key.cmp(&b.key),
            (Item::Object(a), Item::Prefix(b)) => a.key.as_str().cmp(b),
            (Item::Prefix(a), Item::Object(b)) => a.as_str().cmp(&b.key),
            (Item::Prefix(a), Item::Prefix(b)) => a.cmp(b),
        });
        let mut batch = Batch {
            last_key: items.last().map(key),
            ..Batch::default()
        };
        for item in items {
            let key = match &item {
                Item::Object(o) => o.key.as_str(),
                Item::Prefix(p) => p.as_str(),
            };
            if let Some(range) = range {
                if !range.starts_before(key) {
                    continue;
                }
                if range.ends_before(key) {
                    batch.past_end = true;
                    break;
                }
            }
            let Some(rest) = key.strip_prefix(prefix) else {
                continue;
            };
            match &item {
                Item::Prefix(_) => {
                    let name = rest.strip_suffix('/').unwrap_or(rest);
                    // "dir//" (an empty segment) is no entry, as in the live mount.
                    if name.is_empty() || name.contains('/') {
                        continue;
                    }
                    if name != "." && name != ".." {
                        batch.subdirs.push(child_path(dir, name));
                    }
                    batch.entries.push(Entry::dir(name));
                    batch.directories += 1;
                }
                Item::Object(_) => {
                    // The directory's own marker ("dir/") lists as an empty name.
                    if rest.is_empty() || rest.contains('/') {
                        continue;
                    }
                    let cut = key.len() - rest.len();
                    let Item::Object(mut object) = item else {
                        unreachable!("matched above");
                    };
                    // The key's own allocation becomes the name.
                    object.key.drain(..cut);
                    let name = object.key;
                    batch.objects += 1;
                    batch.bytes += object.size;
                    batch.entries.push(Entry::file(
                        name,
                        object.size,
                        object.etag,
                        object.last_modified,
                    ));
                }
            }
        }
        batch
    }
}

#[cfg(test)]
#[path = "generate_tests.rs"]
mod tests;
