//! `PseudoStore`: a read-only object store whose namespace and contents are computed, never
//! stored, so that scale tests can browse 10M–100M objects on one small machine.
//!
//! The tree: the root (depth 0) holds `files_at_depth_0` files and `subdirectories_at_depth_0`
//! directories; every directory at depth `d` holds `files_at_depth_d` files and
//! `subdirectories_at_depth_d` sub-directories, named by `dir_name_format` / `file_name_format`
//! (the same names in every directory of one depth). The tree hangs at the store's root, so a
//! backend `prefix` such as `dir_00000000/` shows one subtree. Every file is `file_size` bytes of
//! [`pseudo_fill`]'s pattern, which depends only on (key, offset); its ETag only on (key, size);
//! its mtime is fixed. Directories have no marker objects.
//!
//! **Listing is computed, never materialized.** The children of a directory at depth `d` are
//! the same sorted sequence for every such directory. It is cut into *runs*: numbers whose
//! formatted names have one length. Within a run, names share their literal prefix and suffix
//! and have digit fields of one width (padding `0` and ` ` sort before every digit), so byte
//! order is numeric order and a position is found by binary search over the number. The
//! directory's listing is the merge of its runs (dirs as `name/`, files as `name`): with the
//! default fixed-width formats that is two runs, dirs then files; a format like `f%d` adds one
//! run per digit count (at most ~23 per kind), so it costs a few more string comparisons per
//! entry but is still exact and needs no memory per object. Seeking to a `start_after` or
//! continuation key costs O(runs · log n) per tree level, each further entry O(runs): a page
//! of a 10M-file directory costs O(page), wherever it starts.
//!
//! Listing semantics match the other stores here ([`super::FileStore`], [`super::RamStore`]):
//! an entry — object key or common prefix — is listed when it sorts strictly after
//! `max(start_after, continuation)`, and a continuation token is the last entry of its page.
//!
//! Each operation takes at least its configured `min_latency_*` (a tokio sleep), to imitate a
//! remote store: `head` → `stat_file`, reads → `read_file`, a delimited listing →
//! `list_directory` (`stat_directory` when it asks for a single key, which is how the namespace
//! asks "is this a directory?"), a flat listing → `list_objects`, a delete → `delete_file`
//! (before it is refused). Every write fails with an `Io` error of kind
//! [`std::io::ErrorKind::ReadOnlyFilesystem`], which the filesystem reports as `EROFS`.

use std::io;
use std::ops::Range;
use std::time::{Duration, Instant, SystemTime};

use async_trait::async_trait;
use bytes::Bytes;

use super::{
    ChunkSink, CompletedPart, ListPage, ListRequest, ObjectMeta, ObjectStore, PendingUpload,
    PutResult, Result, StoreError,
};
use crate::config::{PseudoConfig, PseudoLatencies};

/// Deepest level that can hold files (the config has `files_at_depth_0..3`).
const LEVELS: usize = 4;
/// Every generated object's mtime: 2024-01-01T00:00:00Z.
const MTIME_SECS: u64 = 1_704_067_200;
/// Bytes generated per chunk handed to a `get_range_into` sink.
const FILL_CHUNK: usize = 256 * 1024;

/// The byte at `offset` of the generated object `key` (any key, any offset): what a read of a
/// PSEUDO file must return, for tests and benchmarks that verify reads.
pub fn pseudo_byte(key: &str, offset: u64) -> u8 {
    let mut byte = [0];
    pseudo_fill(key, offset, &mut byte);
    byte[0]
}

/// Fills `buf` with bytes `offset..offset + buf.len()` of the generated object `key`.
///
/// Byte `o` is byte `o % 8` (little-endian) of a 64-bit SplitMix64 mix of a hash of the key and
/// `o / 8`: different for every key, never periodic at any cache-line or part size, so a
/// misplaced, shifted or stale block never matches; about 1 ns per 8 bytes.
pub fn pseudo_fill(key: &str, offset: u64, buf: &mut [u8]) {
    let seed = key_seed(key);
    let mut i = 0;
    while i < buf.len() {
        let at = offset + i as u64;
        let word = mix(seed, at / 8).to_le_bytes();
        let skip = (at % 8) as usize;
        let n = (8 - skip).min(buf.len() - i);
        buf[i..i + n].copy_from_slice(&word[skip..skip + n]);
        i += n;
    }
}

fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

fn finalize(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

fn key_seed(key: &str) -> u64 {
    finalize(fnv1a(key.as_bytes()))
}

fn mix(seed: u64, word: u64) -> u64 {
    finalize(seed.wrapping_add(word.wrapping_add(1).wrapping_mul(0x9e37_79b9_7f4a_7c15)))
}

/// A checked `printf`-style name format with one integer conversion (`dir_%08X`), compiled once.
/// It expands exactly like [`PseudoConfig::dir_name`] (a unit test holds the two together) and,
/// unlike it, can also be inverted.
#[derive(Debug, Clone, PartialEq, Eq)]
struct NameFormat {
    prefix: String,
    suffix: String,
    radix: u64,
    upper: bool,
    width: usize,
    pad: u8,
}

impl NameFormat {
    /// `None` when `fmt` is not a format the config accepts.
    fn compile(fmt: &str) -> Option<NameFormat> {
        let bytes = fmt.as_bytes();
        let mut prefix = String::new();
        let mut i = 0;
        while i < bytes.len() {
            if bytes[i] == b'%' {
                if bytes.get(i + 1) == Some(&b'%') {
                    prefix.push('%');
                    i += 2;
                    continue;
                }
                break;
            }
            let ch = fmt[i..].chars().next()?;
            prefix.push(ch);
            i += ch.len_utf8();
        }
        if i >= bytes.len() {
            return None; // no conversion
        }
        i += 1; // the '%'
        let zero = bytes.get(i) == Some(&b'0');
        if zero {
            i += 1;
        }
        let width_start = i;
        while bytes.get(i).is_some_and(u8::is_ascii_digit) {
            i += 1;
        }
        let width = fmt[width_start..i].parse::<usize>().unwrap_or(0);
        let (radix, upper) = match bytes.get(i)? {
            b'd' | b'u' => (10, false),
            b'x' => (16, false),
            b'X' => (16, true),
            b'o' => (8, false),
            _ => return None,
        };
        let rest = &fmt[i + 1..];
        if rest.replace("%%", "").contains('%') || width > 64 {
            return None; // a second conversion
        }
        let suffix = rest.replace("%%", "%");
        Some(NameFormat {
            prefix,
            suffix,
            radix,
            upper,
            width,
            pad: if zero { b'0' } else { b' ' },
        })
    }

    fn push(&self, value: u64, out: &mut String) {
        let digits: &[u8; 16] = if self.upper {
            b"0123456789ABCDEF"
        } else {
            b"0123456789abcdef"
        };
        let mut buf = [0u8; 64];
        let mut at = buf.len();
        let mut v = value;
        loop {
            at -= 1;
            buf[at] = digits[(v % self.radix) as usize];
            v /= self.radix;
            if v == 0 {
                break;
            }
        }
        out.push_str(&self.prefix);
        for _ in (buf.len() - at)..self.width {
            out.push(char::from(self.pad));
        }
        // Only ASCII digits were written.
        out.push_str(std::str::from_utf8(&buf[at..]).unwrap_or_default());
        out.push_str(&self.suffix);
    }

    /// Length of the digit field of `value` (before padding).
    fn digits(&self, mut value: u64) -> usize {
        let mut n = 1;
        while value >= self.radix {
            value /= self.radix;
            n += 1;
        }
        n
    }

    /// The number whose name is exactly `name`, if any.
    fn parse(&self, name: &str) -> Option<u64> {
        let field = name
            .strip_prefix(self.prefix.as_str())?
            .strip_suffix(self.suffix.as_str())?;
        let trimmed = field.trim_start_matches(char::from(self.pad));
        let value = if trimmed.is_empty() {
            0
        } else {
            u64::from_str_radix(trimmed, self.radix as u32).ok()?
        };
        let mut again = String::with_capacity(name.len());
        self.push(value, &mut again);
        (again == name).then_some(value)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Dir,
    File,
}

/// Numbers `lo..hi` of one kind whose names all have one length, hence sort numerically.
#[derive(Debug, Clone, Copy)]
struct Run {
    kind: Kind,
    lo: u64,
    hi: u64,
}

/// Cuts the numbers `start..start + count` into runs of equal name length, in numeric order.
fn runs_of(fmt: &NameFormat, kind: Kind, start: u64, count: u64, out: &mut Vec<Run>) {
    if count == 0 {
        return;
    }
    let end = start + count; // checked by `Tree::new`
    let mut lo = start;
    while lo < end {
        // The first number with more digits than `lo` (padding makes all short ones equal).
        let digits = fmt.digits(lo).max(fmt.width.max(1));
        let next = u32::try_from(digits)
            .ok()
            .and_then(|d| fmt.radix.checked_pow(d))
            .unwrap_or(u64::MAX);
        let hi = next.min(end);
        out.push(Run { kind, lo, hi });
        if hi == u64::MAX {
            break;
        }
        lo = hi;
    }
}

/// First `v` in `lo..hi` for which `pred` holds (`pred` false then true), or `hi`.
fn first_where(mut lo: u64, mut hi: u64, mut pred: impl FnMut(u64) -> bool) -> u64 {
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if pred(mid) {
            hi = mid;
        } else {
            lo = mid + 1;
        }
    }
    lo
}

/// The generated namespace: names, shape and the sorted child sequence of each depth.
#[derive(Debug)]
struct Tree {
    dir_fmt: NameFormat,
    file_fmt: NameFormat,
    /// Valid dir numbers per depth: `dir_start..dir_start + subdirs[d]`.
    dir_start: u64,
    file_start: u64,
    subdirs: [u64; LEVELS],
    files: [u64; LEVELS],
    /// Children of a directory at each depth, as runs.
    levels: [Vec<Run>; LEVELS],
    file_size: u64,
    etag_size: String,
}

impl Tree {
    fn new(config: &PseudoConfig) -> std::result::Result<Tree, String> {
        let compile = |what: &str, fmt: &str| {
            NameFormat::compile(fmt).ok_or_else(|| format!("PSEUDO.{what}: {fmt:?} is not valid"))
        };
        let dir_fmt = compile("dir_name_format", &config.dir_name_format)?;
        let file_fmt = compile("file_name_format", &config.file_name_format)?;
        let mut subdirs = [0u64; LEVELS];
        let mut files = [0u64; LEVELS];
        for d in 0..LEVELS {
            subdirs[d] = config
                .subdirectories_at_depth
                .get(d)
                .map_or(0, |&n| u64::from(n));
            files[d] = u64::from(config.files_at_depth[d]);
        }
        let too_big = |start: u64, counts: &[u64], what: &str| {
            let most = counts.iter().copied().max().unwrap_or(0);
            if start.checked_add(most).is_none() {
                Err(format!(
                    "PSEUDO.{what}_starting_number {start} plus the number of {what}s per \
                     directory passes 2^64"
                ))
            } else {
                Ok(())
            }
        };
        too_big(config.dir_starting_number, &subdirs, "dir")?;
        too_big(config.file_starting_number, &files, "file")?;
        let levels = std::array::from_fn(|d| {
            let mut runs = Vec::new();
            runs_of(
                &dir_fmt,
                Kind::Dir,
                config.dir_starting_number,
                subdirs[d],
                &mut runs,
            );
            runs_of(
                &file_fmt,
                Kind::File,
                config.file_starting_number,
                files[d],
                &mut runs,
            );
            runs
        });
        Ok(Tree {
            dir_fmt,
            file_fmt,
            dir_start: config.dir_starting_number,
            file_start: config.file_starting_number,
            subdirs,
            files,
            levels,
            file_size: config.file_size,
            etag_size: format!("{:x}", config.file_size),
        })
    }

    /// Appends the child name of `value` (dirs end in "/") to `out`.
    fn push_child(&self, kind: Kind, value: u64, out: &mut String) {
        match kind {
            Kind::Dir => {
                self.dir_fmt.push(value, out);
                out.push('/');
            }
            Kind::File => self.file_fmt.push(value, out),
        }
    }

    fn child(&self, kind: Kind, value: u64) -> String {
        let mut out = String::new();
        self.push_child(kind, value, &mut out);
        out
    }

    /// First number of `run` whose child name is greater than `after` (or at least `at_least`).
    fn seek_run(&self, run: &Run, after: Option<&str>, at_least: &str) -> u64 {
        let mut start = run.lo;
        if !at_least.is_empty() {
            start = first_where(start, run.hi, |v| {
                self.child(run.kind, v).as_str() >= at_least
            });
        }
        if let Some(after) = after {
            start = first_where(start, run.hi, |v| self.child(run.kind, v).as_str() > after);
        }
        start
    }

    /// The greatest child of a directory at `depth` whose name is at most `m`.
    fn last_at_or_before(&self, depth: usize, m: &str) -> Option<(Kind, String)> {
        self.levels[depth]
            .iter()
            .filter_map(|run| {
                let first_after =
                    first_where(run.lo, run.hi, |v| self.child(run.kind, v).as_str() > m);
                (first_after > run.lo).then(|| (run.kind, self.child(run.kind, first_after - 1)))
            })
            .max_by(|a, b| a.1.cmp(&b.1))
    }

    /// The depth of directory prefix `dir` ("" or "a/b/"), if it is a generated directory.
    fn dir_depth(&self, dir: &str) -> Option<usize> {
        let Some(inner) = dir.strip_suffix('/') else {
            return dir.is_empty().then_some(0);
        };
        let mut depth = 0;
        for segment in inner.split('/') {
            let value = self.dir_fmt.parse(segment)?;
            let count = *self.subdirs.get(depth)?;
            if value < self.dir_start || value - self.dir_start >= count {
                return None;
            }
            depth += 1;
        }
        Some(depth)
    }

    fn is_file(&self, key: &str) -> bool {
        let (dir, name) = match key.rfind('/') {
            Some(i) => key.split_at(i + 1),
            None => ("", key),
        };
        let Some(depth) = self.dir_depth(dir) else {
            return false;
        };
        self.file_fmt
            .parse(name)
            .is_some_and(|v| v >= self.file_start && v - self.file_start < self.files[depth])
    }

    fn meta(&self, key: String) -> ObjectMeta {
        let etag = format!("\"{:016x}-{}\"", key_seed(&key), self.etag_size);
        ObjectMeta {
            key,
            size: self.file_size,
            etag,
            last_modified: SystemTime::UNIX_EPOCH + Duration::from_secs(MTIME_SECS),
        }
    }

    /// One page of `request`, at most `limit` entries.
    fn list(&self, request: &ListRequest, limit: usize) -> ListPage {
        let prefix = request.prefix.as_str();
        let (dir, partial) = match prefix.rfind('/') {
            Some(i) => prefix.split_at(i + 1),
            None => ("", prefix),
        };
        let Some(depth) = self.dir_depth(dir) else {
            return ListPage::default();
        };
        let marker = request
            .continuation
            .as_deref()
            .max(request.start_after.as_deref());
        // The marker as seen from `dir`: every entry starts with `dir`.
        let after = match marker {
            Some(m) if m.starts_with(dir) => Some(&m[dir.len()..]),
            Some(m) if m < dir => None,
            Some(_) => return ListPage::default(),
            None => None,
        };
        if request.delimited {
            self.list_delimited(dir, depth, partial, after, limit)
        } else {
            self.list_flat(dir, depth, partial, after, limit)
        }
    }

    fn list_delimited(
        &self,
        dir: &str,
        depth: usize,
        partial: &str,
        after: Option<&str>,
        limit: usize,
    ) -> ListPage {
        let mut cursor = Cursor::new(self, depth, after, partial);
        let mut page = ListPage::default();
        let mut taken = 0;
        let mut last = None;
        while let Some((kind, name)) = cursor.pop_matching(partial) {
            if taken == limit {
                page.next = last;
                break;
            }
            let key = format!("{dir}{name}");
            last = Some(key.clone());
            match kind {
                Kind::Dir => page.common_prefixes.push(key),
                Kind::File => page.objects.push(self.meta(key)),
            }
            taken += 1;
        }
        page
    }

    fn list_flat(
        &self,
        dir: &str,
        depth: usize,
        partial: &str,
        after: Option<&str>,
        limit: usize,
    ) -> ListPage {
        let mut stack = vec![Frame {
            path: dir.to_string(),
            depth,
            cursor: Cursor::new(self, depth, after, partial),
            partial: partial.to_string(),
        }];
        // Resume inside the sub-directory the marker points into, at every level it names.
        if let Some(mut m) = after {
            let mut path = dir.to_string();
            let mut d = depth;
            let mut only = partial;
            while let Some((Kind::Dir, name)) = self.last_at_or_before(d, m) {
                if !(name.starts_with(only) && m.starts_with(&name)) {
                    break;
                }
                m = &m[name.len()..];
                path.push_str(&name);
                d += 1;
                only = "";
                stack.push(Frame {
                    path: path.clone(),
                    depth: d,
                    cursor: Cursor::new(self, d, Some(m), ""),
                    partial: String::new(),
                });
            }
        }
        let mut page = ListPage::default();
        while let Some(frame) = stack.last_mut() {
            let Some((kind, name)) = frame.cursor.pop_matching(&frame.partial) else {
                stack.pop();
                continue;
            };
            let key = format!("{}{name}", frame.path);
            match kind {
                Kind::File => {
                    if page.objects.len() == limit {
                        page.next = page.objects.last().map(|o| o.key.clone());
                        break;
                    }
                    page.objects.push(self.meta(key));
                }
                Kind::Dir => {
                    let depth = frame.depth + 1;
                    stack.push(Frame {
                        path: key,
                        depth,
                        cursor: Cursor::new(self, depth, None, ""),
                        partial: String::new(),
                    });
                }
            }
        }
        page
    }
}

/// One directory being walked by a flat listing.
struct Frame<'t> {
    path: String,
    depth: usize,
    cursor: Cursor<'t>,
    /// Only children starting with this (the partial last segment of the listing's prefix).
    partial: String,
}

/// The next number of one run and its child name.
struct Head {
    run: Run,
    next: u64,
    name: String,
}

/// Walks the children of one directory in key order: a merge of its runs.
struct Cursor<'t> {
    tree: &'t Tree,
    heads: Vec<Head>,
}

impl<'t> Cursor<'t> {
    /// Positioned at the first child greater than `after` and at least `at_least`.
    fn new(tree: &'t Tree, depth: usize, after: Option<&str>, at_least: &str) -> Cursor<'t> {
        let heads = tree.levels[depth]
            .iter()
            .filter_map(|run| {
                let next = tree.seek_run(run, after, at_least);
                (next < run.hi).then(|| Head {
                    run: *run,
                    next,
                    name: tree.child(run.kind, next),
                })
            })
            .collect();
        Cursor { tree, heads }
    }

    /// The next child, if it starts with `partial`. Children starting with one string are
    /// contiguous in key order, so the first that does not ends the walk.
    fn pop_matching(&mut self, partial: &str) -> Option<(Kind, String)> {
        let (i, head) = self
            .heads
            .iter()
            .enumerate()
            .min_by(|a, b| a.1.name.cmp(&b.1.name))?;
        if !head.name.starts_with(partial) {
            self.heads.clear();
            return None;
        }
        let head = &mut self.heads[i];
        let kind = head.run.kind;
        head.next += 1;
        let name = if head.next < head.run.hi {
            std::mem::replace(&mut head.name, self.tree.child(kind, head.next))
        } else {
            self.heads.swap_remove(i).name
        };
        Some((kind, name))
    }
}

fn read_only(op: &'static str, key: &str) -> StoreError {
    StoreError::Io {
        op,
        key: key.to_string(),
        source: io::Error::new(
            io::ErrorKind::ReadOnlyFilesystem,
            "PSEUDO backends are generated and read-only",
        ),
    }
}

/// See the module docs.
#[derive(Debug)]
pub struct PseudoStore {
    id: String,
    tree: Tree,
    page_size: usize,
    latency: PseudoLatencies,
}

impl PseudoStore {
    pub fn new(config: &PseudoConfig) -> Result<PseudoStore> {
        let tree = Tree::new(config).map_err(StoreError::Setup)?;
        Ok(PseudoStore {
            // Differently configured stores never share cache entries.
            id: format!("pseudo:{:016x}", fnv1a(format!("{config:?}").as_bytes())),
            tree,
            page_size: usize::try_from(config.max_list_page_size)
                .unwrap_or(usize::MAX)
                .max(1),
            latency: config.min_latency.clone(),
        })
    }

    async fn pace(started: Instant, latency: Duration) {
        if !latency.is_zero() {
            tokio::time::sleep_until((started + latency).into()).await;
        }
    }

    /// The clamped range of `key`'s bytes to read, after the existence and ETag checks.
    fn readable(&self, key: &str, range: Range<u64>, etag: Option<&str>) -> Result<Range<u64>> {
        if !self.tree.is_file(key) {
            return Err(StoreError::NotFound {
                op: "get",
                key: key.to_string(),
            });
        }
        if let Some(expected) = etag
            && self.tree.meta(key.to_string()).etag != expected
        {
            return Err(StoreError::Changed {
                op: "get",
                key: key.to_string(),
                expected: expected.to_string(),
            });
        }
        let end = range.end.min(self.tree.file_size);
        Ok(range.start.min(end)..end)
    }
}

#[async_trait]
impl ObjectStore for PseudoStore {
    fn id(&self) -> &str {
        &self.id
    }

    async fn head(&self, key: &str) -> Result<Option<ObjectMeta>> {
        let started = Instant::now();
        let found = self
            .tree
            .is_file(key)
            .then(|| self.tree.meta(key.to_string()));
        Self::pace(started, self.latency.stat_file).await;
        Ok(found)
    }

    async fn get_range(&self, key: &str, range: Range<u64>, etag: Option<&str>) -> Result<Bytes> {
        let started = Instant::now();
        let range = self.readable(key, range, etag);
        Self::pace(started, self.latency.read_file).await;
        let range = range?;
        let mut body = vec![0; (range.end - range.start) as usize];
        pseudo_fill(key, range.start, &mut body);
        Ok(Bytes::from(body))
    }

    async fn get_range_into(
        &self,
        key: &str,
        range: Range<u64>,
        etag: Option<&str>,
        sink: &mut ChunkSink<'_>,
    ) -> Result<u64> {
        let started = Instant::now();
        let range = self.readable(key, range, etag);
        Self::pace(started, self.latency.read_file).await;
        let range = range?;
        let len = range.end - range.start;
        let mut chunk = vec![0; FILL_CHUNK.min(len as usize)];
        let mut done = 0;
        while done < len {
            let n = (len - done).min(chunk.len() as u64) as usize;
            pseudo_fill(key, range.start + done, &mut chunk[..n]);
            sink(done, &chunk[..n]);
            done += n as u64;
        }
        Ok(len)
    }

    /// A flat page is computed as cheaply as a delimited one, and costs its configured latency:
    /// the namespace lists subtrees (and probes with a flat page) only where that latency is no
    /// longer than asking whether a directory exists.
    fn cheap_flat_listing(&self) -> bool {
        self.latency.list_objects <= self.latency.stat_directory
    }

    async fn list(&self, request: &ListRequest) -> Result<ListPage> {
        let started = Instant::now();
        let limit = request
            .max_keys
            .map_or(self.page_size, |m| (m as usize).clamp(1, self.page_size));
        let page = self.tree.list(request, limit);
        let latency = match (request.delimited, request.max_keys) {
            (true, Some(1)) => self.latency.stat_directory,
            (true, _) => self.latency.list_directory,
            (false, _) => self.latency.list_objects,
        };
        Self::pace(started, latency).await;
        Ok(page)
    }

    async fn put(&self, key: &str, _body: Bytes) -> Result<PutResult> {
        Err(read_only("put", key))
    }

    async fn create_multipart(&self, key: &str) -> Result<String> {
        Err(read_only("create_multipart", key))
    }

    async fn upload_part(
        &self,
        key: &str,
        _upload_id: &str,
        _part_number: i32,
        _body: Bytes,
    ) -> Result<CompletedPart> {
        Err(read_only("upload_part", key))
    }

    async fn upload_part_copy(
        &self,
        key: &str,
        _upload_id: &str,
        _part_number: i32,
        _source_key: &str,
        _range: Range<u64>,
    ) -> Result<CompletedPart> {
        Err(read_only("upload_part_copy", key))
    }

    async fn complete_multipart(
        &self,
        key: &str,
        _upload_id: &str,
        _parts: &[CompletedPart],
    ) -> Result<PutResult> {
        Err(read_only("complete_multipart", key))
    }

    async fn abort_multipart(&self, key: &str, _upload_id: &str) -> Result<()> {
        Err(read_only("abort_multipart", key))
    }

    /// Nothing is ever being uploaded here.
    async fn list_uploads(&self, _prefix: &str) -> Result<Vec<PendingUpload>> {
        Ok(Vec::new())
    }

    async fn copy(&self, _source_key: &str, dest_key: &str) -> Result<PutResult> {
        Err(read_only("copy", dest_key))
    }

    async fn delete(&self, key: &str) -> Result<()> {
        Self::pace(Instant::now(), self.latency.delete_file).await;
        Err(read_only("delete", key))
    }

    async fn delete_many(&self, keys: &[String]) -> Result<()> {
        Self::pace(Instant::now(), self.latency.delete_file).await;
        Err(read_only("delete", keys.first().map_or("", String::as_str)))
    }
}

#[cfg(test)]
pub(super) mod tests {
    use std::collections::BTreeSet;

    use super::*;

    /// Brute force over a materialized, sorted key set: the entries (name, is a common prefix)
    /// of one page and its continuation token, with the semantics of the module docs.
    pub(in crate::store) fn reference_page(
        keys: &BTreeSet<String>,
        request: &ListRequest,
        limit: usize,
    ) -> (Vec<(String, bool)>, Option<String>) {
        let marker = request
            .continuation
            .as_deref()
            .max(request.start_after.as_deref());
        let mut entries: Vec<(String, bool)> = keys
            .iter()
            .filter_map(|key| {
                let rest = key.strip_prefix(request.prefix.as_str())?;
                Some(match rest.find('/') {
                    Some(i) if request.delimited => {
                        (key[..request.prefix.len() + i + 1].to_string(), true)
                    }
                    _ => (key.clone(), false),
                })
            })
            .filter(|(entry, _)| marker.is_none_or(|m| entry.as_str() > m))
            .collect();
        entries.sort();
        entries.dedup();
        let more = entries.len() > limit;
        entries.truncate(limit);
        let next = more.then(|| entries.last().map(|e| e.0.clone())).flatten();
        (entries, next)
    }

    /// A page as (name, is a common prefix) entries in key order.
    pub(in crate::store) fn entries_of(page: &ListPage) -> Vec<(String, bool)> {
        let mut entries: Vec<(String, bool)> = page
            .objects
            .iter()
            .map(|o| (o.key.clone(), false))
            .chain(page.common_prefixes.iter().map(|p| (p.clone(), true)))
            .collect();
        entries.sort();
        entries
    }

    fn config(
        formats: (&str, &str),
        starts: (u64, u64),
        files: [u32; 4],
        subdirs: [u32; 3],
    ) -> PseudoConfig {
        PseudoConfig {
            dir_name_format: formats.0.into(),
            file_name_format: formats.1.into(),
            dir_starting_number: starts.0,
            file_starting_number: starts.1,
            file_size: 100,
            files_at_depth: files,
            subdirectories_at_depth: subdirs,
            max_list_page_size: 1000,
            min_latency: PseudoLatencies::default(),
        }
    }

    fn default_formats(files: [u32; 4], subdirs: [u32; 3]) -> PseudoConfig {
        config(("dir_%08X", "file_%08X"), (0, 0), files, subdirs)
    }

    /// Every file key, enumerated with the config's own name functions.
    fn all_keys(config: &PseudoConfig) -> BTreeSet<String> {
        fn walk(config: &PseudoConfig, dir: &str, depth: usize, out: &mut BTreeSet<String>) {
            for n in 0..u64::from(config.files_at_depth[depth]) {
                out.insert(format!("{dir}{}", config.file_name(n)));
            }
            let subdirs = config.subdirectories_at_depth.get(depth).copied();
            for n in 0..u64::from(subdirs.unwrap_or(0)) {
                walk(
                    config,
                    &format!("{dir}{}/", config.dir_name(n)),
                    depth + 1,
                    out,
                );
            }
        }
        let mut out = BTreeSet::new();
        walk(config, "", 0, &mut out);
        out
    }

    /// Small shapes covering fixed-width names, names of several lengths (which do not sort
    /// numerically), directories interleaved with files, and space and `%%` padding.
    fn shapes() -> Vec<PseudoConfig> {
        vec![
            default_formats([3, 2, 2, 2], [2, 3, 2]),
            default_formats([5, 0, 0, 0], [0, 0, 0]),
            config(("d%d", "f%d"), (8, 95), [12, 3, 0, 0], [12, 0, 0]),
            config(("x%d", "x%d_"), (0, 5), [12, 2, 0, 0], [12, 0, 0]),
            config(("%3x", "%%%02o"), (0, 0), [70, 3, 0, 0], [20, 0, 0]),
        ]
    }

    /// Directory prefixes, partial names and strings that name nothing.
    fn prefixes(keys: &BTreeSet<String>) -> BTreeSet<String> {
        let mut out = BTreeSet::from(["".to_string(), "nope/".into(), "zzz".into()]);
        for key in keys {
            for (i, _) in key.match_indices('/') {
                out.insert(key[..=i].to_string());
                out.insert(key[..i].to_string());
                out.insert(key[..i - 1].to_string());
            }
            let mut cut = key.len() - 1;
            while !key.is_char_boundary(cut) {
                cut -= 1;
            }
            out.insert(key[..cut].to_string());
            out.insert(format!("{key}/"));
        }
        out
    }

    async fn check_pages(
        store: &dyn ObjectStore,
        keys: &BTreeSet<String>,
        request: ListRequest,
        limit: usize,
    ) {
        let mut request = request.max_keys(Some(limit as u32));
        for _ in 0..=keys.len() + 1 {
            let page = store.list(&request).await.expect("list");
            let (want, want_next) = reference_page(keys, &request, limit);
            assert_eq!(entries_of(&page), want, "{request:?}");
            assert_eq!(page.next, want_next, "{request:?}");
            if page.next.is_none() {
                return;
            }
            request.continuation = page.next;
        }
        panic!("{request:?}: the listing never ended");
    }

    #[test]
    fn names_expand_exactly_like_the_config_and_parse_back() {
        for (fmt, start) in [
            ("dir_%08X", 0),
            ("f%d.bin", 0),
            ("%%%4x%%", 0),
            ("x%5o_y", 0),
            ("%0d", 0),
            ("%03u-z", 990),
            ("é%2X", 250),
            ("%x", u64::MAX - 40),
        ] {
            let cfg = config((fmt, fmt), (start, start), [0; 4], [0; 3]);
            let compiled = NameFormat::compile(fmt).expect("compiles");
            for n in 0..40 {
                let name = cfg.dir_name(n);
                let mut ours = String::new();
                compiled.push(start + n, &mut ours);
                assert_eq!(ours, name, "{fmt} {n}");
                assert_eq!(compiled.parse(&name), Some(start + n), "{fmt} {name}");
            }
        }
        let hex = NameFormat::compile("d%04X").expect("compiles");
        for bad in [
            "d00ff", "d0FF", "d+0FF", "d000FF", "d 0FF", "dFF", "0FF", "d00FFx",
        ] {
            assert_eq!(hex.parse(bad), None, "{bad}");
        }
        assert_eq!(hex.parse("d10000"), Some(0x10000));
    }

    #[tokio::test]
    async fn paginated_listings_match_a_materialized_tree_at_every_page_size() {
        for cfg in shapes() {
            let store = PseudoStore::new(&cfg).expect("store");
            let keys = all_keys(&cfg);
            for prefix in prefixes(&keys) {
                for delimited in [false, true] {
                    let request = ListRequest {
                        delimited,
                        ..ListRequest::flat(prefix.clone())
                    };
                    let total = reference_page(&keys, &request, usize::MAX).0.len();
                    // Every page size on the directory prefixes, a few elsewhere.
                    let sizes: Vec<usize> = if prefix.is_empty() || prefix.ends_with('/') {
                        (1..=total + 1).collect()
                    } else {
                        vec![1, 2, 3, total.max(1)]
                    };
                    for limit in sizes {
                        check_pages(&store, &keys, request.clone(), limit).await;
                    }
                }
            }
        }
    }

    #[tokio::test]
    async fn start_after_any_key_or_between_keys_lists_exactly_what_follows() {
        for cfg in shapes() {
            let store = PseudoStore::new(&cfg).expect("store");
            let keys = all_keys(&cfg);
            let markers = prefixes(&keys);
            let markers = markers.iter().chain(&keys);
            let dirs: Vec<String> = prefixes(&keys)
                .into_iter()
                .filter(|p| p.is_empty() || p.ends_with('/'))
                .collect();
            for marker in markers {
                for prefix in &dirs {
                    for delimited in [false, true] {
                        let request = ListRequest {
                            delimited,
                            ..ListRequest::flat(prefix.clone())
                        }
                        .after(marker.clone());
                        for limit in [1, 4, 1000] {
                            let page = store
                                .list(&request.clone().max_keys(Some(limit as u32)))
                                .await
                                .expect("list");
                            let (want, next) = reference_page(&keys, &request, limit);
                            assert_eq!(entries_of(&page), want, "{request:?} {limit}");
                            assert_eq!(page.next, next, "{request:?} {limit}");
                        }
                    }
                }
            }
        }
    }

    #[tokio::test]
    async fn the_store_page_size_caps_max_keys() {
        let mut cfg = default_formats([10, 0, 0, 0], [0; 3]);
        cfg.max_list_page_size = 3;
        let store = PseudoStore::new(&cfg).expect("store");
        let page = store
            .list(&ListRequest::flat("").max_keys(Some(100)))
            .await
            .expect("list");
        assert_eq!(page.objects.len(), 3);
        let page = store.list(&ListRequest::flat("")).await.expect("list");
        assert_eq!(page.objects.len(), 3);
        assert_eq!(page.next.as_deref(), Some("file_00000002"));
    }

    #[tokio::test]
    async fn a_page_far_into_ten_million_files_is_computed_not_materialized() {
        for formats in [("dir_%08X", "file_%08X"), ("d%d", "f%d")] {
            let cfg = config(formats, (0, 0), [10_000_000, 0, 0, 0], [0; 3]);
            let store = PseudoStore::new(&cfg).expect("store");
            for delimited in [false, true] {
                // In key order, not numeric order, for "f%d": follow the store's own order.
                let start = cfg.file_name(9_000_000);
                let mut request = ListRequest {
                    delimited,
                    ..ListRequest::flat("")
                }
                .after(start.clone())
                .max_keys(Some(1000));
                let mut previous = start;
                for _ in 0..3 {
                    let page = store.list(&request).await.expect("list");
                    assert_eq!(page.objects.len(), 1000);
                    for object in &page.objects {
                        assert!(object.key > previous, "{} after {previous}", object.key);
                        assert!(store.tree.is_file(&object.key));
                        previous = object.key.clone();
                    }
                    assert_eq!(page.next.as_ref(), Some(&previous));
                    request.continuation = page.next;
                }
            }
            let fixed = formats.1 == "file_%08X";
            if fixed {
                let page = store
                    .list(&ListRequest::flat("").after(cfg.file_name(9_000_000)))
                    .await
                    .expect("list");
                assert_eq!(page.objects[0].key, cfg.file_name(9_000_001));
            }
        }
    }

    #[test]
    fn the_pattern_depends_on_key_and_offset_only() {
        let mut whole = vec![0; 1000];
        pseudo_fill("a/b", 0, &mut whole);
        for start in [0usize, 1, 7, 8, 9, 500, 993] {
            let mut part = vec![0; 1000 - start];
            pseudo_fill("a/b", start as u64, &mut part);
            assert_eq!(part, whole[start..], "from {start}");
            assert_eq!(pseudo_byte("a/b", start as u64), whole[start]);
        }
        let mut other = vec![0; 1000];
        pseudo_fill("a/c", 0, &mut other);
        assert_ne!(whole, other);
        // Not a constant nor a short period.
        assert!(whole.windows(8).any(|w| w != &whole[..8]));
        assert_ne!(whole[..500], whole[500..]);
    }

    #[tokio::test]
    async fn reads_return_the_pattern_and_know_only_generated_files() {
        let mut cfg = default_formats([2, 1, 0, 0], [1, 0, 0]);
        cfg.file_size = 600_000;
        let store = PseudoStore::new(&cfg).expect("store");
        let key = "dir_00000000/file_00000000";
        let meta = store.head(key).await.expect("head").expect("exists");
        assert_eq!(meta.size, 600_000);
        assert_eq!(meta, store.head(key).await.expect("head").expect("exists"));
        let body = store
            .get_range(key, 1000..600_100, Some(&meta.etag))
            .await
            .expect("get");
        let mut want = vec![0; 599_000];
        pseudo_fill(key, 1000, &mut want);
        assert!(body[..] == want[..]);
        let mut streamed = vec![0; 599_000];
        let got = store
            .get_range_into(key, 1000..600_000, None, &mut |at, chunk| {
                streamed[at as usize..at as usize + chunk.len()].copy_from_slice(chunk);
            })
            .await
            .expect("get into");
        assert_eq!(got, 599_000);
        assert!(streamed == want);
        assert!(matches!(
            store.get_range(key, 0..1, Some("\"other\"")).await,
            Err(StoreError::Changed { .. })
        ));
        for missing in [
            "dir_00000000/file_00000001",
            "dir_00000001/file_00000000",
            "file_00000002",
            "dir_00000000/",
            "dir_00000000",
            "file_0000000",
            "",
        ] {
            assert!(
                store.head(missing).await.expect("head").is_none(),
                "{missing}"
            );
            assert!(matches!(
                store.get_range(missing, 0..1, None).await,
                Err(StoreError::NotFound { .. })
            ));
        }
    }

    #[tokio::test]
    async fn every_write_is_refused_as_read_only() {
        let store = PseudoStore::new(&default_formats([1, 0, 0, 0], [0; 3])).expect("store");
        let key = "file_00000000";
        let part = CompletedPart {
            part_number: 1,
            etag: "e".into(),
        };
        let results = [
            store.put(key, Bytes::new()).await.err(),
            store.create_multipart(key).await.err(),
            store.upload_part(key, "u", 1, Bytes::new()).await.err(),
            store.upload_part_copy(key, "u", 1, key, 0..1).await.err(),
            store.complete_multipart(key, "u", &[part]).await.err(),
            store.abort_multipart(key, "u").await.err(),
            store.copy(key, "other").await.err(),
            store.delete(key).await.err(),
            store.delete_many(&[key.to_string()]).await.err(),
        ];
        for result in results {
            match result {
                Some(StoreError::Io { source, .. }) => {
                    assert_eq!(source.kind(), io::ErrorKind::ReadOnlyFilesystem)
                }
                other => panic!("expected a read-only error, got {other:?}"),
            }
        }
        assert!(store.head(key).await.expect("head").is_some());
        assert!(store.list_uploads("").await.expect("uploads").is_empty());
    }

    #[test]
    fn differently_configured_stores_have_different_ids() {
        let a = default_formats([1, 0, 0, 0], [0; 3]);
        let mut b = a.clone();
        b.file_size += 1;
        let mut c = a.clone();
        c.file_starting_number = 1;
        let id = |c: &PseudoConfig| PseudoStore::new(c).expect("store").id().to_string();
        assert_eq!(id(&a), id(&a.clone()));
        assert_ne!(id(&a), id(&b));
        assert_ne!(id(&a), id(&c));
        assert!(id(&a).starts_with("pseudo:"));
    }

    #[test]
    fn numbers_past_two_to_the_64_are_refused() {
        let mut cfg = default_formats([10, 0, 0, 0], [0; 3]);
        cfg.file_starting_number = u64::MAX - 5;
        assert!(matches!(PseudoStore::new(&cfg), Err(StoreError::Setup(_))));
    }

    #[tokio::test]
    async fn operations_take_at_least_their_minimum_latency() {
        let mut cfg = default_formats([1, 0, 0, 0], [0; 3]);
        cfg.min_latency.stat_file = Duration::from_millis(30);
        cfg.min_latency.list_directory = Duration::from_millis(30);
        let store = PseudoStore::new(&cfg).expect("store");
        let started = Instant::now();
        store.head("file_00000000").await.expect("head");
        assert!(started.elapsed() >= Duration::from_millis(30));
        let started = Instant::now();
        store.list(&ListRequest::delimited("")).await.expect("list");
        assert!(started.elapsed() >= Duration::from_millis(30));
    }
}
