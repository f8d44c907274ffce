//! Property tests (the manifest readers' fuzz targets): the TSV rows and their escaping, the
//! TSV file names (`format::dir_file`), the attribute codec and the delta log's replay.
//!
//! Names and lines are built from the awkward fragments (TAB, LF, CR, `\`, `%`, a leading `_`,
//! `.tsv`, the manifest's own file names, very long names) as well as drawn at random; delta
//! logs are written record by record, then torn, extended with garbage or bit-flipped. Cases
//! per property: the `with_cases` count, which `PROPTEST_CASES` overrides (the `proptest!` macro
//! lays the environment over the config). Failures are saved under `proptest-regressions/` and
//! replayed first; inputs that once failed are also kept below as named tests.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Component, Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use proptest::prelude::*;
use proptest::test_runner::{Config as ProptestConfig, TestRunner};

use super::codec::{decode, encode};
use super::delta::{Change, DELTA_DIR, DeltaError, DeltaLog, Overlay};
use super::format::{
    Entry, EntryKind, FormatError, INDEX_FILE, Ownership, ROOT_FILE, dir_file, escape, parse_row,
    read_dir_file, unescape, write_row,
};
use super::namespace::INDEX_DB;
use super::output::{PARTS_DIR, SPILL_DIR};

/// Pieces that have a meaning somewhere in the format, to be glued into names.
const FRAGMENTS: &[&str] = &[
    "a",
    "x",
    "_",
    "%",
    "%25",
    "%5F",
    "%2E",
    "%H",
    ".tsv",
    "tsv",
    ".",
    "..",
    "\\",
    "\\t",
    "\t",
    "\n",
    "\r",
    " ",
    "é",
    "日本",
    "-",
    "_root",
    "_msfs_delta",
    "manifest_index.json",
];

/// A name (file or directory basename): glued fragments, arbitrary text, or a very long name.
fn name() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => prop::collection::vec(prop::sample::select(FRAGMENTS), 1..5).prop_map(|f| f.concat()),
        2 => any::<String>(),
        1 => (prop::sample::select(&["x", "é", "%", "_"][..]), 100usize..300)
            .prop_map(|(c, n)| c.repeat(n)),
    ]
    .prop_filter("a basename", |n| !n.is_empty() && !n.contains('/'))
}

/// A time the TSV's RFC 3339 column can hold: years 1 to 9999, to the microsecond.
fn row_time() -> impl Strategy<Value = SystemTime> {
    (-62_135_596_800i64..253_402_300_799, 0u32..1_000_000).prop_map(|(secs, micros)| {
        let whole = if secs >= 0 {
            UNIX_EPOCH + Duration::from_secs(secs as u64)
        } else {
            UNIX_EPOCH - Duration::from_secs(secs.unsigned_abs())
        };
        whole + Duration::from_micros(u64::from(micros))
    })
}

/// Any time the platform can represent, the extremes included.
fn any_time() -> impl Strategy<Value = SystemTime> {
    let secs = prop_oneof![
        Just(i64::MIN),
        Just(i64::MAX),
        Just(-1i64),
        Just(0i64),
        any::<i64>(),
    ];
    let nanos = prop_oneof![Just(0u32), Just(999_999_999u32), 0u32..1_000_000_000];
    (secs, nanos).prop_map(|(secs, nanos)| {
        let whole = if secs >= 0 {
            UNIX_EPOCH.checked_add(Duration::from_secs(secs as u64))
        } else {
            UNIX_EPOCH.checked_sub(Duration::from_secs(secs.unsigned_abs()))
        };
        whole
            .and_then(|t| t.checked_add(Duration::from_nanos(u64::from(nanos))))
            .unwrap_or(UNIX_EPOCH)
    })
}

/// Rows state an owner now and then.
fn owner() -> impl Strategy<Value = Option<Ownership>> {
    proptest::option::weighted(
        0.3,
        (0..=0o7777u16, any::<u32>(), any::<u32>()).prop_map(|(perm, uid, gid)| Ownership {
            perm,
            uid,
            gid,
        }),
    )
}

fn entry() -> impl Strategy<Value = Entry> {
    prop_oneof![
        (name(), owner()).prop_map(|(name, owner)| Entry::dir(name).owned(owner)),
        (name(), any::<u64>(), any::<String>(), row_time(), owner()).prop_map(
            |(name, size, etag, mtime, owner)| Entry::file(name, size, etag, mtime).owned(owner)
        ),
    ]
}

fn entry_kind(time: BoxedStrategy<SystemTime>) -> impl Strategy<Value = EntryKind> {
    prop_oneof![
        1 => owner().prop_map(|owner| EntryKind::Dir { owner }),
        3 => (any::<u64>(), any::<String>(), time, owner())
            .prop_map(|(size, etag, mtime, owner)| EntryKind::File { size, etag, mtime, owner }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Escaping keeps a field on its row and in its column, and unescaping gives it back.
    #[test]
    fn escaping_round_trips(field in name()) {
        let escaped = escape(&field);
        prop_assert!(!escaped.contains(['\t', '\n', '\r']), "{escaped:?}");
        let back = unescape(&escaped).expect("own escapes");
        prop_assert_eq!(back.as_ref(), field.as_str());
    }

    /// Unescaping any text answers; what it accepts is the one escaped form of its result.
    #[test]
    fn unescape_accepts_only_canonical_escapes(
        text in prop_oneof![
            r"(\\|\\\\|\\t|\\n|\\r|\\x|t|a|%|é){0,12}",
            any::<String>(),
        ],
    ) {
        if let Ok(plain) = unescape(&text)
            && !text.contains(['\t', '\n', '\r'])
        {
            let again = escape(&plain);
            prop_assert_eq!(again.as_ref(), text.as_str());
        }
    }

    /// Every entry written as a row is one line and reads back as itself.
    #[test]
    fn rows_round_trip(entry in entry()) {
        let mut row = String::new();
        write_row(&entry, &mut row);
        let line = row.strip_suffix('\n').expect("a row ends its line");
        prop_assert!(!line.contains('\n'), "{row:?}");
        let columns = if entry.kind.owner().is_some() { 8 } else { 5 };
        prop_assert_eq!(line.split('\t').count(), columns, "{:?}", row);
        prop_assert_eq!(parse_row(line).expect("own row"), entry);
    }

    /// Any line parses or is refused, never a panic; an accepted row is a real basename and
    /// writes back to a row that reads as the same entry.
    #[test]
    fn parse_row_survives_arbitrary_lines(
        line in prop_oneof![
            any::<String>(),
            r"[df]\t[^\t\n]{0,8}\t[0-9+-]{0,22}\t[^\t\n]{0,6}\t[-:.0-9TZ]{0,30}(\t.{0,3})?",
            r"[df]\t(a|\.|\.\.|/|a/b|\\t|\\|%|é){0,4}\t0\t-\t-",
            r"[df]\ta\t0\t-\t-(\t[0-9+-]{0,6}){0,4}",
        ],
    ) {
        if let Ok(entry) = parse_row(&line) {
            prop_assert!(!entry.name.is_empty() && !entry.name.contains('/'), "{entry:?}");
            let mut row = String::new();
            write_row(&entry, &mut row);
            prop_assert_eq!(parse_row(row.trim_end_matches('\n')).expect("rewritten"), entry);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// A TSV file of any bytes: its rows or an error naming the file (and the line, for a bad
    /// row); never a panic.
    #[test]
    fn dir_files_of_arbitrary_bytes_are_answered(
        bytes in prop_oneof![
            prop::collection::vec(any::<u8>(), 0..512),
            prop::collection::vec(
                prop::sample::select(&b"df\t\n\r\\0123-:TZ.a\xff"[..]),
                0..512,
            ),
        ],
    ) {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join(ROOT_FILE);
        fs::write(&path, &bytes).expect("write");
        match read_dir_file(&path) {
            Ok(entries) => {
                let lines = bytes.split(|b| *b == b'\n').filter(|l| !l.is_empty()).count();
                prop_assert_eq!(entries.len(), lines);
            }
            Err(FormatError::BadRow { file, line, .. }) => {
                prop_assert_eq!(file, path);
                prop_assert!(line >= 1);
            }
            Err(error) => prop_assert!(error.to_string().contains(ROOT_FILE), "{error}"),
        }
    }
}

/// A directory path as generation produces them: one or more basenames joined by `/`, none
/// `.` or `..` (those are listed, never descended into) except, as the index does, the last.
fn dir_path() -> impl Strategy<Value = String> {
    (
        prop::collection::vec(name(), 1..4),
        prop::option::of(prop::sample::select(&[".", ".."][..])),
    )
        .prop_filter_map("no . or .. above the last segment", |(segments, dots)| {
            if segments.iter().any(|s| s == "." || s == "..") {
                return None;
            }
            let mut path = segments.join("/");
            if let Some(dots) = dots {
                path.push('/');
                path.push_str(dots);
            }
            Some(path)
        })
}

/// The names the manifest itself uses at its top level.
const RESERVED: &[&str] = &[
    ROOT_FILE,
    INDEX_FILE,
    ".manifest_index.json.tmp",
    ".manifest_index.json.msfs-move",
    DELTA_DIR,
    INDEX_DB,
    PARTS_DIR,
    SPILL_DIR,
];

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// TSV file names: one per directory, none of them inside another's place on disk (a file
    /// where another needs a directory), none escaping the manifest or taking one of its own
    /// names, every component a valid local file name.
    #[test]
    fn dir_files_are_distinct_and_never_collide_on_disk(
        dirs in prop::collection::vec(dir_path(), 1..8),
    ) {
        let root = Path::new("/m");
        // A directory's parents are listed directories too.
        let mut all = BTreeSet::new();
        for dir in &dirs {
            let mut prefix = String::new();
            for segment in dir.split('/') {
                if !prefix.is_empty() {
                    prefix.push('/');
                }
                prefix.push_str(segment);
                all.insert(prefix.clone());
            }
        }
        all.insert(String::new());
        let files: Vec<(String, PathBuf)> =
            all.iter().map(|d| (d.clone(), dir_file(root, d))).collect();
        for (dir, file) in &files {
            let below = file.strip_prefix(root).expect("under the root");
            for component in below.components() {
                let Component::Normal(part) = component else {
                    return Err(TestCaseError::fail(format!("{dir:?} → {file:?}")));
                };
                prop_assert!(part.len() <= 255, "{dir:?} → {file:?}");
            }
            if !dir.is_empty() {
                let first = below.components().next().expect("a component");
                let first = first.as_os_str().to_string_lossy();
                prop_assert!(!RESERVED.contains(&first.as_ref()), "{dir:?} → {file:?}");
            }
        }
        for (i, (a, file_a)) in files.iter().enumerate() {
            for (b, file_b) in &files[i + 1..] {
                prop_assert_ne!(file_a, file_b, "{:?} and {:?}", a, b);
                prop_assert!(
                    !file_a.starts_with(file_b) && !file_b.starts_with(file_a),
                    "{a:?} → {file_a:?} and {b:?} → {file_b:?} cannot both exist"
                );
            }
        }
    }

    /// The attribute codec gives back every entry, whatever its time; any bytes decode to an
    /// entry or to nothing, never a panic.
    #[test]
    fn codec_round_trips_and_survives_garbage(
        kind in entry_kind(any_time().boxed()),
        garbage in prop::collection::vec(any::<u8>(), 0..40),
    ) {
        prop_assert_eq!(decode(&encode(&kind)), Some(kind));
        let _ = decode(&garbage);
    }
}

const LOG_MAGIC: &[u8] = b"MSFSDLT1";

/// Path of the delta log of the manifest at `root`, as the module documents it.
fn log_path(root: &Path) -> PathBuf {
    root.join(DELTA_DIR).join("delta.log")
}

/// One record in the documented frame, `[len u32][crc32 u32][payload]`, written independently
/// of the log's own writer (checked against it by `test_records_match_the_log_writer`).
fn record(path: &str, change: &Change) -> Vec<u8> {
    let mut payload = (path.len() as u32).to_le_bytes().to_vec();
    payload.extend_from_slice(path.as_bytes());
    match change {
        Change::Upsert(kind) => payload.extend_from_slice(&encode(kind)),
        Change::Deleted => payload.push(2),
    }
    let mut out = (payload.len() as u32).to_le_bytes().to_vec();
    out.extend_from_slice(&crc32fast::hash(&payload).to_le_bytes());
    out.extend_from_slice(&payload);
    out
}

fn change() -> impl Strategy<Value = (String, Change)> {
    let path = prop_oneof![
        4 => "[a-c]{1,2}(/[a-c]{1,2}){0,2}",
        1 => any::<String>(),
        1 => (1usize..4000).prop_map(|n| "p/".repeat(n)),
    ];
    let change = prop_oneof![
        1 => Just(Change::Deleted),
        4 => entry_kind(any_time().boxed()).prop_map(Change::Upsert),
    ];
    (path, change)
}

/// The log's bytes for `changes`, and the offset where each record ends.
fn log_bytes(changes: &[(String, Change)]) -> (Vec<u8>, Vec<usize>) {
    let mut bytes = LOG_MAGIC.to_vec();
    let mut ends = Vec::with_capacity(changes.len());
    for (path, change) in changes {
        bytes.extend_from_slice(&record(path, change));
        ends.push(bytes.len());
    }
    (bytes, ends)
}

/// The overlay the first `k` changes make; compared through `Debug` (a sorted map inside).
fn overlay_of(changes: &[(String, Change)]) -> String {
    let mut overlay = Overlay::default();
    for (path, change) in changes {
        overlay.apply(path.clone(), change.clone());
    }
    format!("{overlay:?}")
}

/// Writes `bytes` as the log of a fresh manifest directory and opens it.
/// A scratch manifest directory, on tmpfs where there is one: opening a log whose tail must be
/// cut fsyncs it, and on a disk that sync is most of what a case costs.
fn scratch_dir() -> tempfile::TempDir {
    tempfile::tempdir_in("/dev/shm")
        .or_else(|_| tempfile::tempdir())
        .expect("tempdir")
}

fn open_log(bytes: &[u8]) -> (tempfile::TempDir, Result<(DeltaLog, Overlay), DeltaError>) {
    let dir = scratch_dir();
    fs::create_dir_all(dir.path().join(DELTA_DIR)).expect("mkdir");
    fs::write(log_path(dir.path()), bytes).expect("write log");
    let opened = DeltaLog::open(dir.path());
    (dir, opened)
}

/// Whether `tail` begins with a whole record whose checksum holds: random garbage does so once
/// in four billion tries, and then replaying it is right.
fn starts_with_a_valid_frame(tail: &[u8]) -> bool {
    let (Some(len), Some(crc)) = (tail.get(0..4), tail.get(4..8)) else {
        return false;
    };
    let len = u32::from_le_bytes(len.try_into().expect("4 bytes")) as usize;
    let crc = u32::from_le_bytes(crc.try_into().expect("4 bytes"));
    tail.get(8..8 + len)
        .is_some_and(|payload| crc32fast::hash(payload) == crc)
}

#[derive(Debug, Clone)]
enum Damage {
    /// Cut the log at this share of its length (a crash while appending).
    Truncate(prop::sample::Index),
    /// Arbitrary bytes after the last record.
    Garbage(Vec<u8>),
}

/// The records this module writes are byte for byte the ones `DeltaLog::append` writes. A fixed
/// few cases, run outside `proptest!` so that `PROPTEST_CASES` does not multiply its fsyncs: it
/// pins the format the properties below rely on, it does not hunt for bugs.
#[test]
fn test_records_match_the_log_writer() {
    let mut runner = TestRunner::new(ProptestConfig::with_cases(8));
    let outcome = runner.run(&prop::collection::vec(change(), 0..4), |changes| {
        let dir = scratch_dir();
        let (mut log, _) = DeltaLog::open(dir.path()).expect("open");
        for (path, change) in &changes {
            log.append(path, change).expect("append");
        }
        drop(log);
        let written = fs::read(log_path(dir.path())).expect("read");
        prop_assert_eq!(written, log_bytes(&changes).0);
        Ok(())
    });
    if let Err(failure) = outcome {
        panic!("{failure}");
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Whole records then a torn record or garbage: exactly the whole records replay, the rest
    /// is cut off, and appending goes on from there.
    #[test]
    fn a_damaged_tail_replays_exactly_the_whole_records(
        changes in prop::collection::vec(change(), 0..8),
        damage in prop_oneof![
            any::<prop::sample::Index>().prop_map(Damage::Truncate),
            prop::collection::vec(any::<u8>(), 1..64).prop_map(Damage::Garbage),
        ],
        append_after in prop::bool::weighted(0.125),
    ) {
        let (mut bytes, ends) = log_bytes(&changes);
        let whole = match &damage {
            Damage::Truncate(at) => {
                let at = at.index(bytes.len() + 1);
                bytes.truncate(at);
                ends.iter().filter(|end| **end <= at).count()
            }
            Damage::Garbage(garbage) => {
                prop_assume!(!starts_with_a_valid_frame(garbage));
                bytes.extend_from_slice(garbage);
                changes.len()
            }
        };
        let (dir, opened) = open_log(&bytes);
        // Cut inside the magic too: a log that never held a record, which starts again.
        let (mut log, overlay) = opened.expect("opens");
        prop_assert_eq!(format!("{overlay:?}"), overlay_of(&changes[..whole]));
        let kept = if whole == 0 { LOG_MAGIC.len() } else { ends[whole - 1] };
        let len = fs::metadata(log_path(dir.path())).expect("stat").len();
        prop_assert_eq!(len, kept as u64, "the torn tail is cut");
        if append_after {
            let next = ("after/repair".to_string(), Change::Upsert(EntryKind::DIR));
            log.append(&next.0, &next.1).expect("append");
            drop(log);
            let (_, overlay) = DeltaLog::open(dir.path()).expect("reopen");
            let mut expected = changes[..whole].to_vec();
            expected.push(next);
            prop_assert_eq!(format!("{overlay:?}"), overlay_of(&expected));
        }
    }

    /// Bit flips anywhere: a flip in the header refuses the log, a flip in a record loses that
    /// record and everything after it, and nothing before it.
    #[test]
    fn bit_flips_lose_at_most_the_records_from_the_damage_on(
        changes in prop::collection::vec(change(), 1..8),
        flips in prop::collection::vec((any::<prop::sample::Index>(), 0u8..8), 1..4),
    ) {
        let (original, ends) = log_bytes(&changes);
        let mut bytes = original.clone();
        for (at, bit) in &flips {
            let at = at.index(bytes.len());
            bytes[at] ^= 1 << bit;
        }
        // Two flips of one bit undo each other: what counts is the first byte that differs.
        let Some(first) = original.iter().zip(&bytes).position(|(a, b)| a != b) else {
            return Ok(());
        };
        let (_dir, opened) = open_log(&bytes);
        if first < LOG_MAGIC.len() {
            prop_assert!(matches!(opened, Err(DeltaError::BadHeader { .. })), "{opened:?}");
            return Ok(());
        }
        let damaged = ends.iter().position(|end| first < *end).expect("inside a record");
        let (_, overlay) = opened.expect("opens");
        prop_assert_eq!(format!("{overlay:?}"), overlay_of(&changes[..damaged]));
    }
}

// Regressions: inputs the properties above once failed on, kept as plain tests.

/// `codec_round_trips_and_survives_garbage` (and every delta-log property): the earliest time
/// a SystemTime holds, i64::MIN seconds, overflowed a negation while being encoded.
#[test]
fn the_earliest_representable_time_encodes_and_decodes() {
    let earliest = UNIX_EPOCH
        .checked_sub(Duration::from_secs(1 << 63))
        .expect("Linux represents i64::MIN seconds");
    let kind = EntryKind::File {
        size: 0,
        etag: String::new(),
        mtime: earliest,
        owner: None,
    };
    assert_eq!(decode(&encode(&kind)), Some(kind));
}

/// `parse_row_survives_arbitrary_lines`: a row whose basename holds a `/` was accepted, so a
/// manifest could list `..` paths and have TSV files outside its own directory read.
#[test]
fn a_basename_with_a_slash_is_a_bad_row() {
    for line in [
        "d\t/\t0\t-\t-",
        "d\t../../etc\t0\t-\t-",
        "f\ta/b\t1\te\t2024-05-01T12:00:00Z",
    ] {
        let problem = parse_row(line).expect_err(line);
        assert!(problem.contains("contains \"/\""), "{line:?}: {problem}");
    }
    // `.` and `..` are still listed (generation writes them), just never descended into.
    assert_eq!(parse_row("d\t..\t0\t-\t-"), Ok(Entry::dir("..")));
}

/// `dir_files_are_distinct_and_never_collide_on_disk`: directory `x` has the TSV `x.tsv`, and
/// directory `x.tsv/a` needed `x.tsv` to be a directory, so one of them could not be written.
#[test]
fn a_directory_named_like_a_siblings_tsv_is_escaped() {
    let root = Path::new("/m");
    assert_eq!(dir_file(root, "x"), Path::new("/m/x.tsv"));
    assert_eq!(dir_file(root, "x.tsv"), Path::new("/m/x.tsv.tsv"));
    assert_eq!(dir_file(root, "x.tsv/a"), Path::new("/m/x%2Etsv/a.tsv"));
    assert_eq!(dir_file(root, "d/x.tsv/a"), Path::new("/m/d/x%2Etsv/a.tsv"));
    // A name holding the escape itself stays distinct: `%` is always `%25`.
    assert_eq!(dir_file(root, "x%2Etsv/a"), Path::new("/m/x%252Etsv/a.tsv"));
}

/// `dir_files_are_distinct_and_never_collide_on_disk`: a top-level directory
/// `manifest_index.json` with subdirectories took the index file's name.
#[test]
fn a_top_level_directory_named_like_the_index_is_escaped() {
    let root = Path::new("/m");
    assert_eq!(
        dir_file(root, "manifest_index.json/a"),
        Path::new("/m/%6Danifest_index.json/a.tsv")
    );
    assert_eq!(
        dir_file(root, ".manifest_index.json.tmp/a"),
        Path::new("/m/%2Emanifest_index.json.tmp/a.tsv")
    );
    // Below the top, and as a TSV name, it is an ordinary name.
    assert_eq!(
        dir_file(root, "d/manifest_index.json/a"),
        Path::new("/m/d/manifest_index.json/a.tsv")
    );
    assert_eq!(
        dir_file(root, "manifest_index.json"),
        Path::new("/m/manifest_index.json.tsv")
    );
}

/// `a_damaged_tail_replays_exactly_the_whole_records`: a log cut inside its 8-byte magic (a
/// crash while it was created) was refused as "not a delta log", so the manifest would not open.
#[test]
fn a_log_torn_inside_its_magic_starts_again() {
    let (dir, opened) = open_log(&LOG_MAGIC[..3]);
    let (mut log, overlay) = opened.expect("a torn header starts a new log");
    assert!(overlay.is_empty());
    log.append("a", &Change::Deleted).expect("append");
    drop(log);
    let (_, overlay) = DeltaLog::open(dir.path()).expect("reopen");
    assert_eq!(overlay.get("a"), Some(&Change::Deleted));
    // Anything else in the first bytes is still someone else's file.
    let (_, opened) = open_log(b"MSX");
    assert!(matches!(opened, Err(DeltaError::BadHeader { .. })));
}

/// A directory's rows for the index property: names from a few characters, so that names
/// repeat, prefix each other and sort around `/` (`a.b` before the directory `a` in listing
/// order, after it by name); files told apart by their sizes.
fn index_rows() -> impl Strategy<Value = Vec<Entry>> {
    let row = (
        "[ab.-]{1,3}",
        0u8..4,
        any::<u16>(),
        proptest::option::weighted(0.2, any::<u32>()),
    )
        .prop_map(|(name, kind, size, uid)| {
            let owner = uid.map(|uid| Ownership {
                perm: 0o755,
                uid,
                gid: 0,
            });
            if kind == 0 {
                Entry::dir(name).owned(owner)
            } else {
                Entry::file(name, u64::from(size), "etag", UNIX_EPOCH).owned(owner)
            }
        });
    proptest::collection::vec(row, 0..120)
}

/// What reading a directory's TSV gives (`Manifest::parsed_dir`): the first directory row of a
/// name stays; any later row replaces a file.
fn as_read(rows: &[Entry]) -> std::collections::BTreeMap<String, EntryKind> {
    let mut children = std::collections::BTreeMap::new();
    for entry in rows {
        if !matches!(children.get(&entry.name), Some(EntryKind::Dir { .. })) {
            children.insert(entry.name.clone(), entry.kind.clone());
        }
    }
    children
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// The index answers every lookup and every page as the TSV files read whole do, whatever
    /// the rows' order (listing order, or any): runs filled in order, rows put into the run
    /// that covers them, runs split (the tests' runs are a hundred bytes).
    #[test]
    fn the_index_answers_as_the_tsv_files_do(
        mut root in index_rows(),
        below in index_rows(),
        in_listing_order in any::<bool>(),
        page in 1usize..9,
    ) {
        use super::format::{ManifestInfo, sort_key, write_dir_file};
        use super::index::Index;

        root.push(Entry::dir("dd"));
        let mut dirs = vec![("", root), ("dd", below)];
        if in_listing_order {
            for (_, rows) in &mut dirs {
                rows.sort_by_cached_key(|entry| {
                    let mut key = Vec::new();
                    sort_key(entry, &mut key);
                    key
                });
            }
        }
        let scratch = scratch_dir();
        for (dir, rows) in &dirs {
            write_dir_file(scratch.path(), dir, rows).expect("write");
        }
        let db = scratch.path().join(INDEX_DB);
        let (index, stats) =
            Index::build(&db, scratch.path(), &ManifestInfo::for_test(), |_| {}).expect("build");
        let mut expected_entries = 0;
        for (dir, rows) in &dirs {
            let expected = as_read(rows);
            expected_entries += expected.len() as u64;
            for name in expected.keys().map(String::as_str).chain(["", "a", "aa", "b-", "zz"]) {
                prop_assert_eq!(
                    index.lookup(dir, name).expect("lookup"),
                    expected.get(name).cloned(),
                    "{:?} in {:?}", name, dir
                );
            }
            let mut listed = Vec::new();
            let mut after: Option<String> = None;
            loop {
                let got = index.list(dir, after.as_deref(), page).expect("list").expect("dir");
                prop_assert!(got.len() <= page);
                let Some(last) = got.last() else { break };
                after = Some(last.name.clone());
                listed.extend(got.into_iter().map(|e| (e.name, e.kind)));
            }
            prop_assert_eq!(listed, expected.into_iter().collect::<Vec<_>>(), "{:?}", dir);
        }
        prop_assert_eq!(stats.entries, expected_entries);
    }
}
