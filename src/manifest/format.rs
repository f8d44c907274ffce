//! The manifest's on-disk format, shared by generation, ingest and serving.
//!
//! A manifest is a directory holding one TSV file per listed directory plus
//! `manifest_index.json`, compatible with the seed's layout:
//! - the root's entries in `_root.tsv`, directory `a/b/`'s in `a/b.tsv`;
//! - one row per entry: `kind TAB basename TAB size TAB etag TAB mtime`, where kind is `d`
//!   (directory: size `0`, etag and mtime `-`) or `f` (file: bytes, the ETag as the store
//!   returned it, RFC 3339 UTC modification time);
//! - optionally three more columns on any row, `mode TAB uid TAB gid` (permission bits in
//!   octal, ids in decimal, e.g. `0750 1234 100`): that entry's owner and mode, shown instead of
//!   the backend's (an msfs extension; `generate-manifest --posix-metadata` fills them from
//!   s3fs-style object metadata, and rows without them read as before);
//! - `manifest_index.json` is written last, so a directory without it holds no usable manifest.
//!
//! **Escaping.** Fields are escaped so that a basename holding a tab, newline or carriage return
//! still fits on one row: `\` becomes `\\`, TAB `\t`, LF `\n`, CR `\r`; nothing else changes, so
//! ordinary names read exactly as in the seed's files. In the *file names* of the TSVs, `%` is
//! written `%25` and a leading `_` of a top-level directory `%5F` (so no directory can collide
//! with `_root.tsv` or our `_msfs_*` entries); a name too long for the local filesystem once
//! `.tsv` is added is replaced by `%H` and a hash of it. A directory with subdirectories is
//! also a directory on disk: its name there never ends in `.tsv` (`x.tsv/` is `x%2Etsv/`, so it
//! cannot be the TSV of a sibling `x`) and, at the top, is never `manifest_index.json` or one of
//! its temporary names (the first character escaped: `%6Danifest_index.json/`).

use std::borrow::Cow;
use std::fmt::Write as _;
use std::fs;
use std::io::{self, BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use aws_sdk_s3::primitives::{DateTime, DateTimeFormat};
use serde::{Deserialize, Serialize};

pub const INDEX_FILE: &str = "manifest_index.json";
pub const ROOT_FILE: &str = "_root.tsv";
/// The version this build writes and reads in `manifest_index.json`.
pub const FORMAT_VERSION: u32 = 1;
/// Longest TSV file name we create (most local filesystems allow 255 bytes).
const MAX_FILE_NAME: usize = 255;

#[derive(Debug, thiserror::Error)]
pub enum FormatError {
    #[error("{file}:{line}: {problem}")]
    BadRow {
        file: PathBuf,
        line: u64,
        problem: String,
    },
    #[error("{}: {source}", path.display())]
    Io { path: PathBuf, source: io::Error },
    #[error("{}: not a manifest index: {problem}", path.display())]
    BadIndex { path: PathBuf, problem: String },
}

/// One row of a directory's TSV.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub name: String,
    pub kind: EntryKind,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EntryKind {
    Dir {
        owner: Option<Ownership>,
    },
    File {
        size: u64,
        etag: String,
        mtime: SystemTime,
        owner: Option<Ownership>,
    },
}

impl EntryKind {
    /// A directory with the backend's owner and mode.
    pub const DIR: EntryKind = EntryKind::Dir { owner: None };

    /// The same entry stating `owner` (`None`: the backend's).
    pub fn with_owner(mut self, owner: Option<Ownership>) -> EntryKind {
        match &mut self {
            EntryKind::Dir { owner: o } | EntryKind::File { owner: o, .. } => *o = owner,
        }
        self
    }

    /// The owner and mode the row states, if any (else the backend's apply).
    pub fn owner(&self) -> Option<Ownership> {
        match self {
            EntryKind::Dir { owner } | EntryKind::File { owner, .. } => *owner,
        }
    }
}

/// A row's optional columns 6–8: permission bits (octal, at most `7777`), uid and gid
/// (decimal). Either all three are there or none; a row without them shows the backend's
/// `file_mode`/`dir_mode`, `uid` and `gid`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Ownership {
    pub perm: u16,
    pub uid: u32,
    pub gid: u32,
}

impl Ownership {
    /// The three columns, tab-separated, without a leading tab.
    fn columns(&self) -> String {
        format!("{:04o}\t{}\t{}", self.perm, self.uid, self.gid)
    }

    /// Columns 6–8 of a row (the fields after the fifth), or `None` when there are none.
    fn parse<'a>(mut rest: impl Iterator<Item = &'a str>) -> Result<Option<Ownership>, String> {
        let Some(perm) = rest.next() else {
            return Ok(None);
        };
        let perm = u16::from_str_radix(perm, 8)
            .ok()
            .filter(|p| *p <= 0o7777)
            .ok_or_else(|| format!("mode {perm:?} is not octal permission bits (at most 7777)"))?;
        let mut id = |what: &str| -> Result<u32, String> {
            let text = rest.next().ok_or(format!("mode without {what}"))?;
            text.parse()
                .map_err(|_| format!("{what} {text:?} is not a number"))
        };
        let owner = Ownership {
            perm,
            uid: id("uid")?,
            gid: id("gid")?,
        };
        if rest.next().is_some() {
            return Err("more than 8 columns".into());
        }
        Ok(Some(owner))
    }
}

impl Entry {
    pub fn dir(name: impl Into<String>) -> Entry {
        Entry {
            name: name.into(),
            kind: EntryKind::DIR,
        }
    }

    pub fn file(
        name: impl Into<String>,
        size: u64,
        etag: impl Into<String>,
        mtime: SystemTime,
    ) -> Entry {
        Entry {
            name: name.into(),
            kind: EntryKind::File {
                size,
                etag: etag.into(),
                mtime,
                owner: None,
            },
        }
    }

    /// The same entry with `owner` (columns 6–8).
    pub fn owned(mut self, owner: Option<Ownership>) -> Entry {
        self.kind = self.kind.with_owner(owner);
        self
    }

    pub fn is_dir(&self) -> bool {
        matches!(self.kind, EntryKind::Dir { .. })
    }
}

/// The key a store lists `entry` under, relative to its directory: its name, and a `/` after
/// a directory's (S3 lists keys and common prefixes together in byte order). Rows in this
/// order can be bisected.
pub fn sort_key(entry: &Entry, out: &mut Vec<u8>) {
    out.clear();
    out.extend_from_slice(entry.name.as_bytes());
    if entry.is_dir() {
        out.push(b'/');
    }
}

/// Appends `entry` as one row, newline included.
pub fn write_row(entry: &Entry, out: &mut String) {
    let name = escape(&entry.name);
    // Writing into a String cannot fail.
    let _ = match &entry.kind {
        EntryKind::Dir { .. } => write!(out, "d\t{name}\t0\t-\t-"),
        EntryKind::File {
            size, etag, mtime, ..
        } => {
            let written = write!(out, "f\t{name}\t{size}\t{}\t", escape(etag));
            push_time(*mtime, out);
            written
        }
    };
    if let Some(owner) = entry.kind.owner() {
        out.push('\t');
        out.push_str(&owner.columns());
    }
    out.push('\n');
}

/// Parses one row (without its newline). Errors say what is wrong; the caller adds where.
pub fn parse_row(line: &str) -> Result<Entry, String> {
    let mut fields = line.split('\t');
    let kind = fields.next().unwrap_or_default();
    let name = fields.next().ok_or("missing basename")?;
    let name = unescape(name)?.into_owned();
    if name.is_empty() {
        return Err("empty basename".into());
    }
    // A basename is one path component; with a `/` a row could name an entry (and, for a
    // directory, a TSV file to read) outside its own directory.
    if name.contains('/') {
        return Err(format!("basename {name:?} contains \"/\""));
    }
    match kind {
        // Columns 3–5 of a directory row carry nothing worth reading; accept whatever the
        // writer put there. Its owner columns count.
        "d" => {
            let owner = Ownership::parse(fields.skip(3))?;
            Ok(Entry::dir(name).owned(owner))
        }
        "f" => {
            let size = fields.next().ok_or("missing size")?;
            let size = size
                .parse()
                .map_err(|_| format!("size {size:?} is not a number"))?;
            let etag = unescape(fields.next().ok_or("missing etag")?)?.into_owned();
            let mtime = parse_time(fields.next().ok_or("missing mtime")?)?;
            let owner = Ownership::parse(fields)?;
            Ok(Entry::file(name, size, etag, mtime).owned(owner))
        }
        other => Err(format!("kind {other:?} is neither \"d\" nor \"f\"")),
    }
}

/// RFC 3339 in UTC, with fractional seconds only when there are any, to the microsecond (the
/// formatter's precision; S3 reports milliseconds).
/// Appends `time` as [`format_time`] writes it. The last time formatted on this thread is
/// kept: the objects of a listing page were mostly written in the same second, and formatting
/// (an allocation and a calendar conversion) was a few percent of a generation.
fn push_time(time: SystemTime, out: &mut String) {
    thread_local! {
        static LAST: std::cell::RefCell<Option<(SystemTime, String)>> =
            const { std::cell::RefCell::new(None) };
    }
    LAST.with_borrow_mut(|last| match last {
        Some((at, text)) if *at == time => out.push_str(text),
        _ => {
            let text = format_time(time);
            out.push_str(&text);
            *last = Some((time, text));
        }
    });
}

pub fn format_time(time: SystemTime) -> String {
    DateTime::from(time)
        .fmt(DateTimeFormat::DateTime)
        .unwrap_or_else(|_| "1970-01-01T00:00:00Z".to_string())
}

pub fn parse_time(text: &str) -> Result<SystemTime, String> {
    DateTime::from_str(text, DateTimeFormat::DateTime)
        .ok()
        .and_then(|t| SystemTime::try_from(t).ok())
        .ok_or_else(|| format!("mtime {text:?} is not an RFC 3339 time"))
}

/// Escapes `\`, TAB, LF and CR so a field stays on its row and in its column.
pub fn escape(field: &str) -> Cow<'_, str> {
    // A byte scan: these are ASCII, and a `char` pattern search cost 6% of a generation.
    if !field
        .bytes()
        .any(|b| matches!(b, b'\\' | b'\t' | b'\n' | b'\r'))
    {
        return Cow::Borrowed(field);
    }
    let mut out = String::with_capacity(field.len() + 4);
    for c in field.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\t' => out.push_str("\\t"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

/// The inverse of [`escape`]; an unknown or dangling escape is an error rather than a guess.
pub fn unescape(field: &str) -> Result<Cow<'_, str>, String> {
    if !field.contains('\\') {
        return Ok(Cow::Borrowed(field));
    }
    let mut out = String::with_capacity(field.len());
    let mut chars = field.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('\\') => out.push('\\'),
            Some('t') => out.push('\t'),
            Some('n') => out.push('\n'),
            Some('r') => out.push('\r'),
            Some(other) => return Err(format!("unknown escape \\{other} in {field:?}")),
            None => return Err(format!("dangling \\ at the end of {field:?}")),
        }
    }
    Ok(Cow::Owned(out))
}

/// The TSV file holding the entries of directory `dir` ("" for the root, else "a/b" without
/// slashes at either end) in the manifest at `root`.
pub fn dir_file(root: &Path, dir: &str) -> PathBuf {
    if dir.is_empty() {
        return root.join(ROOT_FILE);
    }
    let mut path = root.to_path_buf();
    let segments: Vec<&str> = dir.split('/').collect();
    for (depth, segment) in segments.iter().enumerate() {
        let mut name = file_name_segment(segment, depth == 0);
        if depth + 1 == segments.len() {
            name.push_str(".tsv");
            if name.len() > MAX_FILE_NAME {
                name = format!("%H{:016x}.tsv", fnv1a(segment.as_bytes()));
            }
        } else {
            name = directory_segment(name, segment, depth == 0);
            if name.len() > MAX_FILE_NAME {
                name = format!("%H{:016x}", fnv1a(segment.as_bytes()));
            }
        }
        path.push(name);
    }
    path
}

fn file_name_segment(segment: &str, top_level: bool) -> String {
    let mut out = String::with_capacity(segment.len());
    for (i, c) in segment.chars().enumerate() {
        match c {
            '%' => out.push_str("%25"),
            '_' if i == 0 && top_level => out.push_str("%5F"),
            c => out.push(c),
        }
    }
    out
}

/// The on-disk directory of a directory that has subdirectories (`name`, the escaped `segment`)
/// must not take a name that a file of the manifest has: a sibling's TSV (`x.tsv/`, beside the
/// `x.tsv` of directory `x`) or, at the top, the index and its temporary copies. The character
/// that would make it one is %-escaped, which no other name can produce (`%` itself is `%25`).
fn directory_segment(mut name: String, segment: &str, top_level: bool) -> String {
    if let Some(stem) = name.strip_suffix(".tsv") {
        name = format!("{stem}%2Etsv");
    }
    let index_like = segment == INDEX_FILE || segment.starts_with(&format!(".{INDEX_FILE}."));
    if top_level && index_like {
        // `m` or `.`, which file_name_segment leaves as they are.
        name = format!("%{:02X}{}", name.as_bytes()[0], &name[1..]);
    }
    name
}

/// A stable 64-bit hash (FNV-1a): file names must not change between builds or machines.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, &b| {
        (hash ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// Every row of the TSV file at `path`, in file order. A missing file reads as no rows: a
/// directory the generator found empty may have been written without one.
pub fn read_dir_file(path: &Path) -> Result<Vec<Entry>, FormatError> {
    let mut entries = Vec::new();
    for_each_row(path, |entry| {
        entries.push(entry);
        Ok::<(), FormatError>(())
    })?;
    Ok(entries)
}

/// Streams the rows of the TSV file at `path` into `visit` without holding them all; the first
/// error (reading, parsing, or from `visit`) stops it.
pub fn for_each_row<E: From<FormatError>>(
    path: &Path,
    mut visit: impl FnMut(Entry) -> Result<(), E>,
) -> Result<(), E> {
    let io_error = |source| FormatError::Io {
        path: path.to_path_buf(),
        source,
    };
    let file = match fs::File::open(path) {
        Ok(file) => file,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(io_error(e).into()),
    };
    let mut reader = BufReader::with_capacity(256 * 1024, file);
    let mut line = String::new();
    let mut number = 0u64;
    loop {
        line.clear();
        if reader
            .read_line(&mut line)
            .map_err(|e| E::from(io_error(e)))?
            == 0
        {
            return Ok(());
        }
        number += 1;
        let row = line.strip_suffix('\n').unwrap_or(&line);
        if row.is_empty() {
            continue;
        }
        let entry = parse_row(row).map_err(|problem| FormatError::BadRow {
            file: path.to_path_buf(),
            line: number,
            problem,
        })?;
        visit(entry)?;
    }
}

/// Writes `entries` as the TSV of directory `dir` under `root`, creating parent directories.
pub fn write_dir_file(root: &Path, dir: &str, entries: &[Entry]) -> Result<(), FormatError> {
    let path = dir_file(root, dir);
    let io_error = |source| FormatError::Io {
        path: path.clone(),
        source,
    };
    if let Some(parent) = path.parent() {
        fs::create_dir_all(parent).map_err(io_error)?;
    }
    let mut text = String::new();
    for entry in entries {
        write_row(entry, &mut text);
    }
    fs::write(&path, text).map_err(io_error)
}

/// Streams rows into one TSV file, in the order they are written, so a directory of any size
/// (a flat one may hold 100M entries) is written without holding its entries in memory.
///
/// The file is created (or truncated) with its parent directories; [`DirWriter::finish`]
/// flushes and closes it. Dropping a writer without `finish` may lose buffered rows.
#[derive(Debug)]
pub struct DirWriter {
    path: PathBuf,
    out: io::BufWriter<fs::File>,
    row: String,
    rows: u64,
    /// The listing-order key (`sort_key`) of the last row, and whether every row so far came
    /// after the one before it.
    last_key: Vec<u8>,
    key: Vec<u8>,
    sorted: bool,
}

impl DirWriter {
    /// Bytes buffered before they go to the file (a generation keeps one writer open per
    /// lister, so this times `manifest_gen_workers` is its write-buffer memory).
    const BUFFER: usize = 64 * 1024;

    /// Creates (or truncates) the TSV file at `path`, creating its parent directories.
    pub fn create(path: &Path) -> Result<DirWriter, FormatError> {
        let io_error = |source| FormatError::Io {
            path: path.to_path_buf(),
            source,
        };
        if let Some(parent) = path.parent() {
            fs::create_dir_all(parent).map_err(io_error)?;
        }
        let file = fs::File::create(path).map_err(io_error)?;
        Ok(DirWriter {
            path: path.to_path_buf(),
            out: io::BufWriter::with_capacity(Self::BUFFER, file),
            row: String::new(),
            rows: 0,
            last_key: Vec::new(),
            key: Vec::new(),
            sorted: true,
        })
    }

    /// Appends `entry` as one row.
    pub fn write(&mut self, entry: &Entry) -> Result<(), FormatError> {
        self.row.clear();
        write_row(entry, &mut self.row);
        self.out
            .write_all(self.row.as_bytes())
            .map_err(|source| FormatError::Io {
                path: self.path.clone(),
                source,
            })?;
        sort_key(entry, &mut self.key);
        if self.rows > 0 && self.key <= self.last_key {
            self.sorted = false;
        }
        std::mem::swap(&mut self.key, &mut self.last_key);
        self.rows += 1;
        Ok(())
    }

    /// Whether the rows so far are in listing order (`sort_key`, strictly increasing): such a
    /// file can be searched by bisection (`bisect`).
    pub fn sorted(&self) -> bool {
        self.sorted
    }

    /// Rows written so far.
    pub fn rows(&self) -> u64 {
        self.rows
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Flushes the buffered rows and closes the file; returns how many rows it holds.
    pub fn finish(self) -> Result<u64, FormatError> {
        let path = self.path;
        self.out
            .into_inner()
            .map_err(|e| FormatError::Io {
                path: path.clone(),
                source: e.into_error(),
            })?
            .flush()
            .map_err(|source| FormatError::Io { path, source })?;
        Ok(self.rows)
    }
}

/// `manifest_index.json`: what was listed, how much, and when.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ManifestInfo {
    pub version: u32,
    pub bucket: String,
    pub prefix: String,
    pub totals: Totals,
    /// RFC 3339 UTC; also identifies this manifest to the index built from it.
    pub created_at: String,
    /// Every TSV's rows are in listing order (`sort_key`), as `msfs generate-manifest` checks
    /// and says: a lookup may bisect a TSV instead of reading it whole. Absent (a manifest
    /// from elsewhere, or an older msfs): `false`.
    #[serde(default)]
    pub sorted_rows: bool,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Totals {
    pub objects: u64,
    pub directories: u64,
    pub bytes: u64,
}

impl ManifestInfo {
    /// The index of the manifest at `root`, or `None` when there is no manifest there yet.
    pub fn read(root: &Path) -> Result<Option<ManifestInfo>, FormatError> {
        let path = root.join(INDEX_FILE);
        let text = match fs::read_to_string(&path) {
            Ok(text) => text,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(source) => return Err(FormatError::Io { path, source }),
        };
        let info: ManifestInfo =
            serde_json::from_str(&text).map_err(|e| FormatError::BadIndex {
                path: path.clone(),
                problem: e.to_string(),
            })?;
        if info.version != FORMAT_VERSION {
            return Err(FormatError::BadIndex {
                path,
                problem: format!(
                    "version {} (this msfs reads version {FORMAT_VERSION}); regenerate it",
                    info.version
                ),
            });
        }
        Ok(Some(info))
    }

    /// Writes the index atomically (temporary file, fsync, rename), which completes a manifest.
    pub fn write(&self, root: &Path) -> Result<(), FormatError> {
        let path = root.join(INDEX_FILE);
        let temporary = root.join(format!(".{INDEX_FILE}.tmp"));
        let io_error = |source| FormatError::Io {
            path: path.clone(),
            source,
        };
        let text = serde_json::to_string_pretty(self).map_err(|e| io_error(e.into()))?;
        let mut file = fs::File::create(&temporary).map_err(io_error)?;
        file.write_all(text.as_bytes()).map_err(io_error)?;
        file.sync_all().map_err(io_error)?;
        fs::rename(&temporary, &path).map_err(io_error)
    }
}

#[cfg(test)]
impl ManifestInfo {
    /// The index of a manifest a test writes by hand.
    pub fn for_test() -> ManifestInfo {
        ManifestInfo {
            version: FORMAT_VERSION,
            bucket: "b".into(),
            prefix: String::new(),
            totals: Totals::default(),
            created_at: "2026-11-30T00:00:00Z".into(),
            // Tests write rows in any order.
            sorted_rows: false,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, UNIX_EPOCH};

    use super::*;

    fn at(secs: u64, nanos: u32) -> SystemTime {
        UNIX_EPOCH + Duration::new(secs, nanos)
    }

    #[test]
    fn rows_round_trip_including_awkward_names() {
        for name in [
            "plain.txt",
            "tab\there",
            "new\nline",
            "back\\slash",
            "cr\r",
            "ü €",
        ] {
            for entry in [
                Entry::dir(name),
                Entry::file(name, 42, "\"abc-2\"", at(1_700_000_000, 0)),
                Entry::file(name, 0, "", at(1_700_000_000, 123_000_000)),
                Entry::dir(name).owned(Some(Ownership {
                    perm: 0o1750,
                    uid: 1234,
                    gid: 0,
                })),
                Entry::file(name, 7, "e", at(1, 0)).owned(Some(Ownership {
                    perm: 0o4755,
                    uid: u32::MAX,
                    gid: 100,
                })),
            ] {
                let mut row = String::new();
                write_row(&entry, &mut row);
                assert_eq!(row.matches('\n').count(), 1, "{row:?}");
                let parsed = parse_row(row.strip_suffix('\n').unwrap()).expect("parse");
                assert_eq!(parsed, entry);
            }
        }
    }

    #[test]
    fn seed_rows_parse() {
        let entry = parse_row(
            "f\timg_001.jpg\t1024\t\"d41d8cd98f00b204e9800998ecf8427e\"\t2024-05-01T12:00:00Z",
        )
        .expect("parse");
        assert_eq!(
            entry,
            Entry::file(
                "img_001.jpg",
                1024,
                "\"d41d8cd98f00b204e9800998ecf8427e\"",
                at(1_714_564_800, 0)
            )
        );
        assert_eq!(
            parse_row("d\ttrain\t0\t\t").expect("dir"),
            Entry::dir("train")
        );
    }

    #[test]
    fn malformed_rows_say_what_is_wrong() {
        for (row, problem) in [
            ("x\ta\t1\te\t2024-05-01T12:00:00Z", "neither"),
            ("f\ta\tten\te\t2024-05-01T12:00:00Z", "not a number"),
            ("f\ta\t1\te\tyesterday", "RFC 3339"),
            ("f\ta\t1", "missing etag"),
            ("f\t\t1\te\t2024-05-01T12:00:00Z", "empty basename"),
            ("f\tbad\\q\t1\te\t2024-05-01T12:00:00Z", "unknown escape"),
            ("f\ta\t1\te\t2024-05-01T12:00:00Z\textra", "not octal"),
            (
                "f\ta\t1\te\t2024-05-01T12:00:00Z\t17777\t0\t0",
                "at most 7777",
            ),
            ("f\ta\t1\te\t2024-05-01T12:00:00Z\t0644\t1", "without gid"),
            ("d\ta\t0\t-\t-\t0755\tx\t0", "uid \"x\""),
            (
                "f\ta\t1\te\t2024-05-01T12:00:00Z\t0644\t1\t2\t3",
                "more than 8",
            ),
        ] {
            let error = parse_row(row).expect_err(row);
            assert!(error.contains(problem), "{row:?}: {error}");
        }
    }

    #[test]
    fn directory_files_follow_the_seed_layout_and_avoid_collisions() {
        let root = Path::new("/m");
        assert_eq!(dir_file(root, ""), Path::new("/m/_root.tsv"));
        assert_eq!(dir_file(root, "a"), Path::new("/m/a.tsv"));
        assert_eq!(dir_file(root, "a/b"), Path::new("/m/a/b.tsv"));
        assert_eq!(dir_file(root, "_root"), Path::new("/m/%5Froot.tsv"));
        assert_eq!(dir_file(root, "a/_x"), Path::new("/m/a/_x.tsv"));
        assert_eq!(dir_file(root, "100%"), Path::new("/m/100%25.tsv"));
        let long = "x".repeat(255);
        let file = dir_file(root, &format!("{long}/{long}"));
        for component in file.components().skip(2) {
            assert!(component.as_os_str().len() <= MAX_FILE_NAME, "{file:?}");
        }
        assert_ne!(dir_file(root, &long), dir_file(root, &"y".repeat(255)));
    }

    #[test]
    fn dir_files_and_index_round_trip_on_disk() {
        let dir = tempfile::tempdir().expect("tempdir");
        let entries = vec![
            Entry::dir("sub"),
            Entry::file("a\tb", 3, "e1", at(1_600_000_000, 0)),
        ];
        write_dir_file(dir.path(), "x/y", &entries).expect("write");
        assert_eq!(
            read_dir_file(&dir_file(dir.path(), "x/y")).expect("read"),
            entries
        );
        assert!(
            read_dir_file(&dir_file(dir.path(), "absent"))
                .expect("missing")
                .is_empty()
        );

        assert_eq!(ManifestInfo::read(dir.path()).expect("read"), None);
        let info = ManifestInfo {
            version: FORMAT_VERSION,
            bucket: "b".into(),
            prefix: "p/".into(),
            totals: Totals {
                objects: 1,
                directories: 2,
                bytes: 3,
            },
            created_at: format_time(at(1_700_000_000, 0)),
            sorted_rows: true,
        };
        info.write(dir.path()).expect("write");
        assert_eq!(ManifestInfo::read(dir.path()).expect("read"), Some(info));
    }

    #[test]
    fn dir_writer_streams_rows_that_read_back_in_order() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir_file(dir.path(), "deep/er");
        let entries = vec![
            Entry::dir("sub"),
            Entry::file("new\nline", 7, "\"e\"", at(1_650_000_000, 5_000_000)),
            Entry::file("tab\t", 0, "", at(1_650_000_001, 0)),
        ];
        let mut writer = DirWriter::create(&path).expect("create");
        for entry in &entries {
            writer.write(entry).expect("write");
        }
        assert_eq!(writer.rows(), 3);
        assert_eq!(writer.finish().expect("finish"), 3);
        assert_eq!(read_dir_file(&path).expect("read"), entries);
    }

    #[test]
    fn a_bad_row_names_its_file_and_line() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("_root.tsv");
        fs::write(&path, "d\tok\t0\t-\t-\nf\tbroken\n").expect("write");
        let error = read_dir_file(&path).expect_err("bad row").to_string();
        assert!(error.contains("_root.tsv:2:"), "{error}");
    }
}
