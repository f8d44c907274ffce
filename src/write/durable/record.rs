//! The spill log's records: what each change of a file's state is on disk, and how a log is
//! read back (up to its first torn record) and replayed into the state it describes.
//!
//! A spill log is a framed log (`crate::framed_log`: `len | crc32(body) | body`, versioned by
//! its first frame, the header). A body starts with a tag byte; integers are little-endian, strings a u32 length and UTF-8 bytes, times an i64
//! count of seconds and a u32 of nanoseconds from the Unix epoch:
//!
//! - `H` header: format (u32), store id, backend, key, base (0, or 1 then key, ETag, size),
//!   `base_len`, size, mtime;
//! - `W` write: start, end, mtime;
//! - `T` truncate: size, mtime;
//! - `M` mtime;
//! - `C` commit landed: base key, ETag, size, `base_len`, clean (0 or 1);
//! - `S` commit starting (format 2): the size and `base_len` of the content it sends, the
//!   dirty extents being those the records before it left. Appended before the first request
//!   of each commit, so that a successor can recognise that content in the store should the
//!   process die before the commit's `C` record (`landed`).

use std::ops::Range;
use std::time::{Duration, SystemTime};

use crate::cache::ObjectVersion;
use crate::framed_log::{self, Frames, Layout, Read};
use crate::store::Metadata;
use crate::write::Extents;
use crate::write::file::{State, Target};

/// The version is bumped whenever a record's layout changes; logs of another version are
/// left alone. Version 2 added the `S` record; version 1 logs (without it) are read too. No
/// record is anywhere near 64 KiB (keys are at most 1,024 bytes).
const LAYOUT: Layout = Layout {
    header: framed_log::Header::FirstFrame { tag: TAG_HEADER },
    version: 2,
    reads: &[1, 2],
    max_body: 64 << 10,
};

/// What a file's log starts with: enough to rebuild the file over its base object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(in crate::write) struct Header {
    /// [`crate::store::ObjectStore::id`] of the store the file is committed to.
    pub store: String,
    pub backend: String,
    pub key: String,
    pub base: Option<ObjectVersion>,
    pub base_len: u64,
    pub size: u64,
    pub mtime: SystemTime,
}

impl Header {
    /// The header of `target`'s file as it is now.
    pub fn of(target: &Target, state: &State) -> Header {
        Header {
            store: target.store.id().to_string(),
            backend: target.backend.clone(),
            key: target.key.clone(),
            base: state.base.clone(),
            base_len: state.base_len,
            size: state.size,
            mtime: state.mtime,
        }
    }
}

/// One entry of a file's log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(in crate::write) enum Record {
    Header(Header),
    /// Bytes `range` are in the spill file (`State::record_write`).
    Write {
        range: Range<u64>,
        mtime: SystemTime,
    },
    /// `State::record_truncate`.
    Truncate {
        size: u64,
        mtime: SystemTime,
    },
    /// `DirtyFile::set_mtime`.
    Mtime(SystemTime),
    /// `DirtyFile::set_metadata`: the user metadata the file is committed with (`posix_metadata`:
    /// mode, owner, times), whole.
    Metadata(Metadata),
    /// A commit landed: `base` is the new base object and `base_len` its share of the file;
    /// `clean` when nothing was written during the commit, and so the extents were cleared.
    Committed {
        base: ObjectVersion,
        base_len: u64,
        clean: bool,
    },
    /// A background commit failed with this message, not reported yet (`Some`), or the
    /// failure was reported by an fsync (`None`): what the next process's fsync reports.
    Failure(Option<String>),
    /// A commit is about to send the file's content as the records before this one leave it:
    /// `size` bytes, the first `base_len` not dirty taken from the base.
    CommitStarting {
        size: u64,
        base_len: u64,
    },
}

const TAG_HEADER: u8 = b'H';
const TAG_WRITE: u8 = b'W';
const TAG_TRUNCATE: u8 = b'T';
const TAG_MTIME: u8 = b'M';
const TAG_METADATA: u8 = b'X';
const TAG_COMMITTED: u8 = b'C';
const TAG_FAILURE: u8 = b'F';
const TAG_COMMIT_STARTING: u8 = b'S';

impl Record {
    /// The record as appended: its frame around its body (little-endian integers, strings as
    /// a u32 length and UTF-8 bytes, times as i64 seconds and u32 nanoseconds from the Unix
    /// epoch).
    pub(in crate::write) fn frame(&self) -> Vec<u8> {
        let mut body = Vec::with_capacity(64);
        match self {
            Record::Header(h) => {
                body = LAYOUT.header_body();
                put_str(&mut body, &h.store);
                put_str(&mut body, &h.backend);
                put_str(&mut body, &h.key);
                match &h.base {
                    Some(base) => {
                        body.push(1);
                        put_version(&mut body, base);
                    }
                    None => body.push(0),
                }
                put_u64(&mut body, h.base_len);
                put_u64(&mut body, h.size);
                put_time(&mut body, h.mtime);
            }
            Record::Write { range, mtime } => {
                body.push(TAG_WRITE);
                put_u64(&mut body, range.start);
                put_u64(&mut body, range.end);
                put_time(&mut body, *mtime);
            }
            Record::Truncate { size, mtime } => {
                body.push(TAG_TRUNCATE);
                put_u64(&mut body, *size);
                put_time(&mut body, *mtime);
            }
            Record::Mtime(mtime) => {
                body.push(TAG_MTIME);
                put_time(&mut body, *mtime);
            }
            Record::Metadata(metadata) => {
                body.push(TAG_METADATA);
                put_u32(&mut body, metadata.len() as u32);
                for (name, value) in metadata {
                    put_str(&mut body, name);
                    put_str(&mut body, value);
                }
            }
            Record::Committed {
                base,
                base_len,
                clean,
            } => {
                body.push(TAG_COMMITTED);
                put_version(&mut body, base);
                put_u64(&mut body, *base_len);
                body.push(u8::from(*clean));
            }
            Record::CommitStarting { size, base_len } => {
                body.push(TAG_COMMIT_STARTING);
                put_u64(&mut body, *size);
                put_u64(&mut body, *base_len);
            }
            Record::Failure(failure) => {
                body.push(TAG_FAILURE);
                match failure {
                    Some(message) => {
                        body.push(1);
                        put_str(&mut body, message);
                    }
                    None => body.push(0),
                }
            }
        }
        framed_log::frame(&body)
    }

    /// The record whose body is `body` (its frame checked already); `None` if it does not
    /// parse (then it ends the log), or, for a header, if it is of another format.
    fn parse(body: &[u8]) -> Option<Record> {
        let mut r = Reader(body);
        let record = match r.u8()? {
            TAG_HEADER => {
                if !LAYOUT.reads.contains(&r.u32()?) {
                    return None;
                }
                let (store, backend, key) = (r.string()?, r.string()?, r.string()?);
                let base = match r.u8()? {
                    0 => None,
                    1 => Some(r.version()?),
                    _ => return None,
                };
                Record::Header(Header {
                    store,
                    backend,
                    key,
                    base,
                    base_len: r.u64()?,
                    size: r.u64()?,
                    mtime: r.time()?,
                })
            }
            TAG_WRITE => {
                let (start, end) = (r.u64()?, r.u64()?);
                if start > end {
                    return None;
                }
                Record::Write {
                    range: start..end,
                    mtime: r.time()?,
                }
            }
            TAG_TRUNCATE => Record::Truncate {
                size: r.u64()?,
                mtime: r.time()?,
            },
            TAG_MTIME => Record::Mtime(r.time()?),
            TAG_METADATA => {
                let count = r.u32()?;
                let mut metadata = Metadata::new();
                for _ in 0..count {
                    let name = r.string()?;
                    metadata.insert(name, r.string()?);
                }
                Record::Metadata(metadata)
            }
            TAG_COMMITTED => Record::Committed {
                base: r.version()?,
                base_len: r.u64()?,
                clean: match r.u8()? {
                    0 => false,
                    1 => true,
                    _ => return None,
                },
            },
            TAG_COMMIT_STARTING => Record::CommitStarting {
                size: r.u64()?,
                base_len: r.u64()?,
            },
            TAG_FAILURE => Record::Failure(match r.u8()? {
                0 => None,
                1 => Some(r.string()?),
                _ => return None,
            }),
            _ => return None,
        };
        r.0.is_empty().then_some(record)
    }
}

fn put_u32(out: &mut Vec<u8>, v: u32) {
    out.extend_from_slice(&v.to_le_bytes());
}

fn put_u64(out: &mut Vec<u8>, v: u64) {
    out.extend_from_slice(&v.to_le_bytes());
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    put_u32(out, s.len() as u32);
    out.extend_from_slice(s.as_bytes());
}

fn put_version(out: &mut Vec<u8>, v: &ObjectVersion) {
    put_str(out, &v.key);
    put_str(out, &v.etag);
    put_u64(out, v.size);
}

/// Times before the epoch are possible (`touch -d 1960-01-01`), hence a signed count.
fn put_time(out: &mut Vec<u8>, t: SystemTime) {
    let (secs, nanos) = match t.duration_since(SystemTime::UNIX_EPOCH) {
        Ok(after) => (after.as_secs() as i64, after.subsec_nanos()),
        Err(before) => {
            let before = before.duration();
            let whole = before.as_secs() as i64 + i64::from(before.subsec_nanos() > 0);
            let nanos = (1_000_000_000 - before.subsec_nanos()) % 1_000_000_000;
            (-whole, nanos)
        }
    };
    out.extend_from_slice(&secs.to_le_bytes());
    put_u32(out, nanos);
}

/// A cursor over a record's body.
struct Reader<'a>(&'a [u8]);

impl Reader<'_> {
    fn take(&mut self, n: usize) -> Option<&[u8]> {
        if self.0.len() < n {
            return None;
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Some(head)
    }

    fn u8(&mut self) -> Option<u8> {
        self.take(1).map(|b| b[0])
    }

    fn u32(&mut self) -> Option<u32> {
        Some(u32::from_le_bytes(self.take(4)?.try_into().ok()?))
    }

    fn u64(&mut self) -> Option<u64> {
        Some(u64::from_le_bytes(self.take(8)?.try_into().ok()?))
    }

    fn string(&mut self) -> Option<String> {
        let len = self.u32()? as usize;
        String::from_utf8(self.take(len)?.to_vec()).ok()
    }

    fn version(&mut self) -> Option<ObjectVersion> {
        Some(ObjectVersion {
            key: self.string()?,
            etag: self.string()?,
            size: self.u64()?,
        })
    }

    fn time(&mut self) -> Option<SystemTime> {
        let secs = i64::from_le_bytes(self.take(8)?.try_into().ok()?);
        let nanos = self.u32()?;
        if nanos >= 1_000_000_000 {
            return None;
        }
        let epoch = SystemTime::UNIX_EPOCH;
        if secs >= 0 {
            epoch.checked_add(Duration::new(secs as u64, nanos))
        } else {
            epoch
                .checked_sub(Duration::from_secs(secs.unsigned_abs()))?
                .checked_add(Duration::from_nanos(u64::from(nanos)))
        }
    }
}

/// The records of a log's frames, in order, up to the first that does not parse; with the
/// length they take.
fn records(frames: Frames<'_>) -> (Vec<Record>, u64) {
    let (mut records, mut end) = (Vec::new(), frames.start());
    for (body, at) in frames {
        let Some(record) = Record::parse(body) else {
            break;
        };
        records.push(record);
        end = at;
    }
    (records, end)
}

/// A file's state as its log tells it: its header as changed by the records after it, and
/// what they dirtied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(in crate::write) struct Replayed {
    /// What the file is now (the header's fields, brought up to date).
    pub now: Header,
    pub dirty: Extents,
    /// A write or truncate was recorded since the header or the last commit that left the
    /// file clean: there is something to commit.
    pub changed: bool,
    /// Bytes of whole records: where the next one is to be appended.
    pub valid_len: u64,
    /// A background commit's failure no fsync reported (cleared by a commit that landed).
    pub failure: Option<String>,
    /// The metadata last recorded (empty if none was).
    pub metadata: Metadata,
    /// The content the last commit started sent, if no `C` record followed it (it may have
    /// landed all the same), with what the spill file still holds of it.
    pub in_flight: Option<Snapshot>,
}

/// A content of the file that may be in the store (sent by a commit the log does not say
/// landed), and how far the spill file still holds its dirty bytes: the writes and truncates
/// recorded since changed the spill file under it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(in crate::write) struct Snapshot {
    pub size: u64,
    pub base_len: u64,
    pub dirty: Extents,
    /// Ranges written since: their spill bytes are not this content's any more.
    pub rewritten: Extents,
    /// The lowest size since: spill bytes above it are gone.
    pub low_water: u64,
}

impl Snapshot {
    /// The file's content as it is: nothing rewritten since.
    pub fn of(size: u64, base_len: u64, dirty: &Extents) -> Snapshot {
        Snapshot {
            size,
            base_len,
            dirty: dirty.clone(),
            rewritten: Extents::new(),
            low_water: size,
        }
    }

    /// Bytes `range` were written after this content was taken.
    pub fn rewrite(&mut self, range: Range<u64>) {
        self.rewritten.insert(range);
    }

    /// The file was truncated to `size` after this content was taken.
    pub fn truncate(&mut self, size: u64) {
        self.low_water = self.low_water.min(size);
    }
}

/// What a log holds.
#[derive(Debug, PartialEq, Eq)]
pub(in crate::write) enum Parsed {
    /// Boxed: a replayed file is large beside the other answers.
    File(Box<Replayed>),
    /// No whole header: the file was killed while being created, before any write returned.
    Torn,
    /// A header of another format (another msfs version's): left alone.
    Foreign,
}

/// Replays a log onto its header: the same changes `State::record_write` and
/// `State::record_truncate` and a commit's rebase made to the file, in the same order.
pub(in crate::write) fn replay(log: &[u8]) -> Parsed {
    let frames = match LAYOUT.read(log) {
        Read::Log { frames, .. } => frames,
        Read::Foreign => return Parsed::Foreign,
        Read::Empty | Read::Torn => return Parsed::Torn,
    };
    let (records, valid_len) = records(frames);
    let mut records = records.into_iter();
    let Some(Record::Header(header)) = records.next() else {
        return Parsed::Torn;
    };
    let base_len = header.base_len.min(header.size);
    let mut file = Replayed {
        now: Header { base_len, ..header },
        dirty: Extents::new(),
        changed: false,
        valid_len,
        failure: None,
        metadata: Metadata::new(),
        in_flight: None,
    };
    for record in records {
        match record {
            // Only the first record is a header; another is corruption, and ends the log.
            Record::Header(_) => break,
            Record::Write { range, mtime } => {
                file.now.size = file.now.size.max(range.end);
                if let Some(sent) = &mut file.in_flight {
                    sent.rewrite(range.clone());
                }
                file.dirty.insert(range);
                file.now.mtime = mtime;
                file.changed = true;
            }
            Record::Truncate { size, mtime } => {
                if let Some(sent) = &mut file.in_flight {
                    sent.truncate(size);
                }
                file.now.size = size;
                file.now.base_len = file.now.base_len.min(size);
                file.dirty.truncate(size);
                file.now.mtime = mtime;
                file.changed = true;
            }
            Record::Mtime(mtime) => file.now.mtime = mtime,
            Record::Metadata(metadata) => file.metadata = metadata,
            Record::Failure(failure) => file.failure = failure,
            Record::CommitStarting { size, base_len } => {
                file.in_flight = Some(Snapshot::of(size, base_len, &file.dirty));
            }
            Record::Committed {
                base,
                base_len,
                clean,
            } => {
                file.now.base = Some(base);
                file.now.base_len = base_len.min(file.now.size);
                file.in_flight = None;
                // As in the live state: a commit that lands clears an unreported failure.
                file.failure = None;
                if clean {
                    file.dirty = Extents::new();
                    file.changed = false;
                }
            }
        }
    }
    Parsed::File(Box::new(file))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header() -> Header {
        Header {
            store: "s3:a".into(),
            backend: "data".into(),
            key: "dir/file".into(),
            base: Some(ObjectVersion {
                key: "dir/file".into(),
                etag: "\"abc\"".into(),
                size: 100,
            }),
            base_len: 100,
            size: 100,
            mtime: SystemTime::UNIX_EPOCH + Duration::new(1_700_000_000, 5),
        }
    }

    fn log_of(records: &[Record]) -> Vec<u8> {
        records.iter().flat_map(Record::frame).collect()
    }

    fn replayed(log: &[u8]) -> Replayed {
        match replay(log) {
            Parsed::File(file) => *file,
            other => panic!("not a file: {other:?}"),
        }
    }

    #[test]
    fn the_last_recorded_metadata_is_what_a_successor_commits_with() {
        let mode = |m: &str| Metadata::from([("mode".to_string(), m.to_string())]);
        let log = log_of(&[
            Record::Header(header()),
            Record::Metadata(mode("33188")),
            Record::Write {
                range: 0..4,
                mtime: SystemTime::UNIX_EPOCH,
            },
            Record::Metadata(mode("33261")),
        ]);
        assert_eq!(replayed(&log).metadata, mode("33261"));
        let without = log_of(&[Record::Header(header())]);
        assert!(replayed(&without).metadata.is_empty());
    }

    #[test]
    fn every_record_reads_back_as_written() {
        let at = SystemTime::UNIX_EPOCH + Duration::new(1_700_000_001, 999_999_999);
        let before_epoch = SystemTime::UNIX_EPOCH - Duration::new(3, 250);
        let all = vec![
            Record::Header(header()),
            Record::Header(Header {
                base: None,
                ..header()
            }),
            Record::Write {
                range: 5..70,
                mtime: at,
            },
            Record::Truncate {
                size: 12,
                mtime: before_epoch,
            },
            Record::Mtime(SystemTime::UNIX_EPOCH - Duration::from_secs(86_400)),
            Record::Metadata(Metadata::new()),
            Record::Metadata(Metadata::from([
                ("mode".to_string(), "33188".to_string()),
                ("uid".to_string(), "1234".to_string()),
            ])),
            Record::Committed {
                base: ObjectVersion {
                    key: "dir/file".into(),
                    etag: "new".into(),
                    size: 3,
                },
                base_len: 3,
                clean: true,
            },
            Record::Failure(Some("AccessDenied: no".into())),
            Record::Failure(None),
            Record::CommitStarting {
                size: 70,
                base_len: 12,
            },
        ];
        let log = log_of(&all);
        let Read::Log { frames, .. } = LAYOUT.read(&log) else {
            panic!("not a log");
        };
        let (read, len) = records(frames);
        assert_eq!(read, all);
        assert_eq!(len, log.len() as u64);
    }

    #[test]
    fn a_log_replays_to_the_state_its_records_made() {
        let at = |s| SystemTime::UNIX_EPOCH + Duration::from_secs(s);
        let log = log_of(&[
            Record::Header(header()),
            Record::Write {
                range: 90..120,
                mtime: at(1),
            },
            Record::Truncate {
                size: 50,
                mtime: at(2),
            },
            Record::Write {
                range: 60..64,
                mtime: at(3),
            },
            Record::Mtime(at(4)),
        ]);
        let file = replayed(&log);
        assert_eq!((file.now.size, file.now.base_len), (64, 50));
        assert_eq!(file.dirty.iter().collect::<Vec<_>>(), vec![60..64]);
        assert_eq!(file.now.mtime, at(4));
        assert!(file.changed);
        assert_eq!(file.valid_len, log.len() as u64);
    }

    #[test]
    fn the_content_a_commit_started_sending_is_replayed_until_its_commit_is_recorded() {
        let at = |s| SystemTime::UNIX_EPOCH + Duration::from_secs(s);
        let write = |range| Record::Write {
            range,
            mtime: at(1),
        };
        let started = Record::CommitStarting {
            size: 120,
            base_len: 100,
        };
        let log = log_of(&[
            Record::Header(header()),
            write(90..120),
            started.clone(),
            write(95..97),
            Record::Truncate {
                size: 110,
                mtime: at(2),
            },
            write(130..140),
        ]);
        let file = replayed(&log);
        let sent = file.in_flight.expect("a commit was sending");
        assert_eq!((sent.size, sent.base_len), (120, 100));
        assert_eq!(sent.dirty.iter().collect::<Vec<_>>(), vec![90..120]);
        assert_eq!(
            sent.rewritten.iter().collect::<Vec<_>>(),
            vec![95..97, 130..140],
            "written after it started"
        );
        assert_eq!(sent.low_water, 110, "truncated after it started");

        let committed = Record::Committed {
            base: ObjectVersion {
                key: "dir/file".into(),
                etag: "landed".into(),
                size: 120,
            },
            base_len: 120,
            clean: false,
        };
        let log = log_of(&[Record::Header(header()), write(90..120), started, committed]);
        assert_eq!(replayed(&log).in_flight, None, "its record came");
    }

    #[test]
    fn an_unreported_failure_is_replayed_until_an_fsync_reports_it_or_a_commit_lands() {
        let write = Record::Write {
            range: 0..10,
            mtime: SystemTime::UNIX_EPOCH,
        };
        let failed = Record::Failure(Some("SlowDown".into()));
        let landed = Record::Committed {
            base: header().base.expect("base"),
            base_len: 10,
            clean: false,
        };
        let failure = |records: &[Record]| {
            let mut all = vec![Record::Header(header()), write.clone()];
            all.extend_from_slice(records);
            replayed(&log_of(&all)).failure
        };
        assert_eq!(
            failure(std::slice::from_ref(&failed)),
            Some("SlowDown".into())
        );
        assert_eq!(failure(&[failed.clone(), Record::Failure(None)]), None);
        assert_eq!(failure(&[failed.clone(), landed.clone()]), None);
        assert_eq!(failure(&[landed, failed]), Some("SlowDown".into()));
    }

    #[test]
    fn a_clean_commit_leaves_nothing_to_recover_until_the_next_change() {
        let base = ObjectVersion {
            key: "dir/file".into(),
            etag: "v2".into(),
            size: 120,
        };
        let mut records = vec![
            Record::Header(header()),
            Record::Write {
                range: 90..120,
                mtime: SystemTime::UNIX_EPOCH,
            },
            Record::Committed {
                base: base.clone(),
                base_len: 120,
                clean: true,
            },
        ];
        let file = replayed(&log_of(&records));
        assert!(!file.changed && file.dirty.is_empty());
        assert_eq!(file.now.base, Some(base));
        records.push(Record::Write {
            range: 0..1,
            mtime: SystemTime::UNIX_EPOCH,
        });
        let file = replayed(&log_of(&records));
        assert!(file.changed);
        assert_eq!(file.dirty.iter().collect::<Vec<_>>(), vec![0..1]);
    }

    #[test]
    fn a_torn_or_corrupt_tail_ends_the_log_where_the_whole_records_end() {
        let whole = log_of(&[
            Record::Header(header()),
            Record::Write {
                range: 0..10,
                mtime: SystemTime::UNIX_EPOCH,
            },
        ]);
        let torn = Record::Write {
            range: 10..20,
            mtime: SystemTime::UNIX_EPOCH,
        }
        .frame();
        for cut in 1..torn.len() {
            let mut log = whole.clone();
            log.extend_from_slice(&torn[..cut]);
            let file = replayed(&log);
            assert_eq!(file.now.size, 100, "cut at {cut}");
            assert_eq!(file.dirty.iter().collect::<Vec<_>>(), vec![0..10]);
            assert_eq!(file.valid_len, whole.len() as u64);
        }
        let mut flipped = whole.clone();
        flipped.extend_from_slice(&torn);
        let last = flipped.len() - 1;
        flipped[last] ^= 1;
        assert_eq!(replayed(&flipped).valid_len, whole.len() as u64);
    }

    #[test]
    fn a_log_without_its_header_is_torn_and_another_format_foreign() {
        let frame = Record::Header(header()).frame();
        assert_eq!(replay(&frame[..frame.len() - 1]), Parsed::Torn);
        assert_eq!(replay(&[]), Parsed::Torn);
        let mut foreign = vec![TAG_HEADER];
        put_u32(&mut foreign, LAYOUT.version + 1);
        foreign.extend_from_slice(b"whatever comes next");
        assert_eq!(replay(&framed_log::frame(&foreign)), Parsed::Foreign);
    }

    #[test]
    fn a_log_the_previous_format_wrote_is_recovered() {
        // Format 1 (before `CommitStarting`): the same header with its format field at 1.
        let head = framed_log::FRAME_HEAD;
        let mut body = Record::Header(header()).frame()[head..].to_vec();
        body[1..5].copy_from_slice(&1u32.to_le_bytes());
        let mut log = framed_log::frame(&body);
        log.extend(
            Record::Write {
                range: 0..5,
                mtime: SystemTime::UNIX_EPOCH,
            }
            .frame(),
        );
        let file = replayed(&log);
        assert_eq!(file.now.key, "dir/file");
        assert_eq!(file.dirty.iter().collect::<Vec<_>>(), vec![0..5]);
    }
}
