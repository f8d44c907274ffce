//! The framed log: an append-only file of records that a crash can tear only at its end, and
//! whose reader finds where the whole records end. The spill logs (`write::durable`) and the
//! manifest's delta log (`manifest::delta`) are framed logs; their records' bodies are theirs.
//!
//! **Frame.** Each record is `len | crc32(body) | body`: two little-endian u32s, the length of
//! the body and its CRC-32 (IEEE), then the body. A frame is appended with one `write(2)`, so a
//! process killed while appending leaves a prefix of its last frame at most; a power loss may
//! leave any prefix of the unsynced appends (see [`Sync`]).
//!
//! **Header.** A log says which layout and version of records it holds, in one of two places
//! ([`Header`]): a magic run of bytes before the first frame, ending in the version as one ASCII
//! digit (the delta log: `MSFSDLT1`), or the first frame itself, whose body starts with a tag
//! byte and the version as a little-endian u32 (a spill log: `H`, then 1 or 2). A header that
//! names a version this build does not read makes the log *foreign*: another msfs's, left alone.
//!
//! **Torn tail.** [`read`] returns the frames in order up to the first that is cut short, longer
//! than the layout allows, or fails its checksum, and says where the whole ones end. A body that
//! checks out but that the caller cannot parse ends the log there too (the caller stops taking
//! frames, and the length it keeps is that of the frames it took): a writer never appends after
//! a frame it did not finish, so nothing after a bad frame is trustworthy.

use std::fs::File;
use std::io::{self, Write};

/// Length and CRC-32, each a little-endian u32.
pub const FRAME_HEAD: usize = 8;

/// Where a log's version is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Header {
    /// The file starts with `family` and one ASCII digit, the version; frames follow.
    Magic { family: &'static [u8] },
    /// The first frame's body starts with `tag` and the version (a little-endian u32); the rest
    /// of that body is the caller's, and the frame is returned with the others.
    FirstFrame { tag: u8 },
}

/// A kind of framed log: where its header is, the version this build writes, the versions it
/// reads, and the longest body one of its records can have.
#[derive(Debug, Clone, Copy)]
pub struct Layout {
    pub header: Header,
    pub version: u32,
    pub reads: &'static [u32],
    /// A length past this is a torn or foreign frame, not an allocation to attempt.
    pub max_body: usize,
}

/// When an append reaches the disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sync {
    /// Never fsynced: an append survives the death of the process (the page cache belongs to
    /// the file), not a power loss.
    PageCache,
    /// Each append is followed by `fdatasync(2)` before it returns: it survives a power loss.
    Data,
}

/// What a log holds, read from its bytes.
#[derive(Debug, PartialEq, Eq)]
pub enum Read<'a> {
    /// No bytes at all.
    Empty,
    /// A header cut short (the writer was killed creating the log), or, for a
    /// [`Header::FirstFrame`] log, a first frame that is not a header: nothing was ever
    /// recorded in it.
    Torn,
    /// A whole header of another layout or of a version this build does not read.
    Foreign,
    /// A log this build reads.
    Log { version: u32, frames: Frames<'a> },
}

/// The frames of a log, in order, each with the offset where it ends; the iteration stops at
/// the first frame cut short or corrupt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frames<'a> {
    bytes: &'a [u8],
    at: usize,
    max_body: usize,
}

impl<'a> Frames<'a> {
    /// Where the frames start: the end of the header (the magic), or 0.
    pub fn start(&self) -> u64 {
        self.at as u64
    }
}

impl<'a> Iterator for Frames<'a> {
    /// A frame's body and the offset just past it.
    type Item = (&'a [u8], u64);

    fn next(&mut self) -> Option<Self::Item> {
        let (body, end) = frame_at(self.bytes, self.at, self.max_body)?;
        self.at = end;
        Some((body, end as u64))
    }
}

/// The checked body of the frame at `at` and the offset past it, if it is whole.
fn frame_at(bytes: &[u8], at: usize, max_body: usize) -> Option<(&[u8], usize)> {
    let head = bytes.get(at..at.checked_add(FRAME_HEAD)?)?;
    let len = u32::from_le_bytes(head[0..4].try_into().ok()?) as usize;
    let crc = u32::from_le_bytes(head[4..8].try_into().ok()?);
    if len > max_body {
        return None;
    }
    let start = at + FRAME_HEAD;
    let body = bytes.get(start..start + len)?;
    (crc32fast::hash(body) == crc).then_some((body, start + len))
}

impl Layout {
    /// What a new log starts with before its first frame: the magic, or nothing.
    pub fn magic(&self) -> Vec<u8> {
        match self.header {
            Header::Magic { family } => {
                let mut magic = family.to_vec();
                magic.push(version_digit(self.version));
                magic
            }
            Header::FirstFrame { .. } => Vec::new(),
        }
    }

    /// Starts a header frame's body: the tag and the version; the caller adds its fields.
    /// Empty for a [`Header::Magic`] log, whose first frame is an ordinary record.
    pub fn header_body(&self) -> Vec<u8> {
        match self.header {
            Header::FirstFrame { tag } => {
                let mut body = Vec::with_capacity(64);
                body.push(tag);
                body.extend_from_slice(&self.version.to_le_bytes());
                body
            }
            Header::Magic { .. } => Vec::new(),
        }
    }

    /// Reads the log in `bytes`: its header, then its frames up to the first torn one.
    pub fn read<'a>(&self, bytes: &'a [u8]) -> Read<'a> {
        if bytes.is_empty() {
            return Read::Empty;
        }
        let frames = |at| Frames {
            bytes,
            at,
            max_body: self.max_body,
        };
        match self.header {
            Header::Magic { family } => {
                let len = family.len() + 1;
                if bytes.len() < len {
                    let whole = self.magic();
                    return if whole.starts_with(bytes) {
                        Read::Torn
                    } else {
                        Read::Foreign
                    };
                }
                let (name, digit) = (&bytes[..family.len()], bytes[family.len()]);
                match (name == family).then(|| version_of_digit(digit)).flatten() {
                    Some(version) if self.reads.contains(&version) => Read::Log {
                        version,
                        frames: frames(len),
                    },
                    _ => Read::Foreign,
                }
            }
            Header::FirstFrame { tag } => {
                let Some((body, _)) = frame_at(bytes, 0, self.max_body) else {
                    return Read::Torn;
                };
                let version = body
                    .get(1..5)
                    .map(|v| u32::from_le_bytes(v.try_into().expect("four bytes")));
                match (body[..].first() == Some(&tag), version) {
                    (true, Some(version)) if self.reads.contains(&version) => Read::Log {
                        version,
                        frames: frames(0),
                    },
                    (true, Some(_)) => Read::Foreign,
                    _ => Read::Torn,
                }
            }
        }
    }
}

fn version_digit(version: u32) -> u8 {
    assert!(version < 10, "a magic's version is one digit");
    b'0' + version as u8
}

fn version_of_digit(digit: u8) -> Option<u32> {
    digit.is_ascii_digit().then(|| u32::from(digit - b'0'))
}

/// The frame of `body`: `len | crc32(body) | body`.
pub fn frame(body: &[u8]) -> Vec<u8> {
    let mut frame = Vec::with_capacity(FRAME_HEAD + body.len());
    frame.extend_from_slice(&(body.len() as u32).to_le_bytes());
    frame.extend_from_slice(&crc32fast::hash(body).to_le_bytes());
    frame.extend_from_slice(body);
    frame
}

/// Why an append failed.
#[derive(Debug)]
pub struct AppendError {
    pub error: io::Error,
    /// A part of the frame was written and could not be cut back off: nothing appended after
    /// it would ever be read, so the log must take no more records.
    pub broken: bool,
}

/// Appends `frame` to `log`, whose whole frames end at `len`, with one `write(2)` (the
/// descriptor opened for appending), then syncs as `sync` says. A write that fails halfway is
/// cut back off to `len`: a partial frame would end the log for its reader and hide every
/// frame after it.
pub fn append(mut log: &File, len: u64, frame: &[u8], sync: Sync) -> Result<(), AppendError> {
    let error = match log.write(frame) {
        Ok(n) if n == frame.len() => {
            return match sync {
                Sync::PageCache => Ok(()),
                Sync::Data => log.sync_data().map_err(|error| AppendError {
                    error,
                    broken: false,
                }),
            };
        }
        Ok(n) => io::Error::new(
            io::ErrorKind::WriteZero,
            format!("wrote {n} of a record's {} bytes", frame.len()),
        ),
        Err(e) => e,
    };
    Err(AppendError {
        broken: log.set_len(len).is_err(),
        error,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAGIC: Layout = Layout {
        header: Header::Magic { family: b"TESTLOG" },
        version: 2,
        reads: &[1, 2],
        max_body: 1 << 10,
    };
    const FIRST: Layout = Layout {
        header: Header::FirstFrame { tag: b'H' },
        version: 2,
        reads: &[1, 2],
        max_body: 1 << 10,
    };

    /// A log of `layout` holding a header (its own frame or the magic) and three records.
    fn log(layout: &Layout) -> (Vec<u8>, Vec<Vec<u8>>) {
        let mut bytes = layout.magic();
        let mut bodies = Vec::new();
        if matches!(layout.header, Header::FirstFrame { .. }) {
            let mut header = layout.header_body();
            header.extend_from_slice(b"fields");
            bodies.push(header);
        }
        bodies.extend([b"one".to_vec(), Vec::new(), vec![7u8; 300]]);
        for body in &bodies {
            bytes.extend(frame(body));
        }
        (bytes, bodies)
    }

    /// The bodies read and where they end, or what the log was read as.
    fn bodies(layout: &Layout, bytes: &[u8]) -> Result<(Vec<Vec<u8>>, u64), String> {
        match layout.read(bytes) {
            Read::Log { frames, .. } => {
                let mut end = frames.start();
                let mut read = Vec::new();
                for (body, at) in frames {
                    read.push(body.to_vec());
                    end = at;
                }
                Ok((read, end))
            }
            other => Err(format!("{other:?}")),
        }
    }

    #[test]
    fn frames_read_back_as_appended_with_their_version() {
        for layout in [MAGIC, FIRST] {
            let (bytes, written) = log(&layout);
            assert_eq!(bodies(&layout, &bytes), Ok((written, bytes.len() as u64)));
            assert!(matches!(layout.read(&bytes), Read::Log { version: 2, .. }));
        }
        assert_eq!(MAGIC.magic(), b"TESTLOG2");
    }

    #[test]
    fn a_log_torn_at_any_byte_reads_as_its_whole_frames() {
        for layout in [MAGIC, FIRST] {
            let (bytes, written) = log(&layout);
            let mut ends = vec![layout.magic().len()];
            for body in &written {
                ends.push(ends.last().expect("an end") + FRAME_HEAD + body.len());
            }
            for cut in 0..bytes.len() {
                let torn = &bytes[..cut];
                let whole = ends.iter().filter(|&&end| end <= cut).count();
                let read = bodies(&layout, torn);
                match (layout.header, whole) {
                    // Nothing whole yet: the header itself is torn.
                    (_, 0) | (Header::FirstFrame { .. }, 1) if cut == 0 => {
                        assert_eq!(layout.read(torn), Read::Empty, "cut at {cut}");
                    }
                    (Header::Magic { .. }, 0) | (Header::FirstFrame { .. }, 1) => {
                        assert_eq!(layout.read(torn), Read::Torn, "cut at {cut}");
                    }
                    _ => {
                        let frames = whole - 1;
                        assert_eq!(
                            read,
                            Ok((written[..frames].to_vec(), ends[frames] as u64)),
                            "cut at {cut}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn a_flipped_byte_ends_the_log_at_the_frame_before_it() {
        let (bytes, written) = log(&MAGIC);
        for at in MAGIC.magic().len()..bytes.len() {
            let mut flipped = bytes.clone();
            flipped[at] ^= 0x40;
            let (read, end) = bodies(&MAGIC, &flipped).expect("a log");
            assert!(read.len() < written.len(), "flipped at {at}: {read:?}");
            assert_eq!(read[..], written[..read.len()], "flipped at {at}");
            assert!(end as usize <= at, "flipped at {at}: read to {end}");
        }
    }

    #[test]
    fn an_oversized_length_is_a_torn_frame_not_an_allocation() {
        let mut bytes = MAGIC.magic();
        bytes.extend_from_slice(&u32::MAX.to_le_bytes());
        bytes.extend_from_slice(&0u32.to_le_bytes());
        bytes.extend_from_slice(&[0; 64]);
        assert_eq!(bodies(&MAGIC, &bytes), Ok((Vec::new(), 8)));
    }

    #[test]
    fn another_layout_or_version_is_foreign() {
        assert_eq!(MAGIC.read(b"TESTLOG3"), Read::Foreign, "a later version");
        assert_eq!(MAGIC.read(b"OTHERLOG and more"), Read::Foreign);
        assert_eq!(MAGIC.read(b"TESTLOGX"), Read::Foreign);
        assert_eq!(
            MAGIC.read(b"xyz"),
            Read::Foreign,
            "short, and no prefix of the magic"
        );
        assert_eq!(MAGIC.read(b"TEST"), Read::Torn, "a prefix of the magic");

        let mut later = vec![b'H'];
        later.extend_from_slice(&3u32.to_le_bytes());
        assert_eq!(FIRST.read(&frame(&later)), Read::Foreign);
        let mut untagged = vec![b'W'];
        untagged.extend_from_slice(&2u32.to_le_bytes());
        assert_eq!(FIRST.read(&frame(&untagged)), Read::Torn, "no header frame");
        assert_eq!(
            FIRST.read(&frame(b"H")),
            Read::Torn,
            "a header without its version"
        );
        assert_eq!(FIRST.read(b"not a log at all"), Read::Torn);
    }

    #[test]
    fn an_older_version_is_read_as_itself() {
        let mut old = b"TESTLOG1".to_vec();
        old.extend(frame(b"one"));
        assert!(matches!(MAGIC.read(&old), Read::Log { version: 1, .. }));
        assert_eq!(bodies(&MAGIC, &old), Ok((vec![b"one".to_vec()], 19)));
    }

    #[test]
    fn an_empty_file_is_empty() {
        assert_eq!(MAGIC.read(&[]), Read::Empty);
        assert_eq!(FIRST.read(&[]), Read::Empty);
    }

    #[test]
    fn appends_go_to_the_end_and_read_back() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("log");
        std::fs::write(&path, MAGIC.magic()).expect("magic");
        let file = File::options().append(true).open(&path).expect("open");
        let mut len = MAGIC.magic().len() as u64;
        for (body, sync) in [(&b"a"[..], Sync::PageCache), (b"bc", Sync::Data)] {
            let framed = frame(body);
            append(&file, len, &framed, sync).expect("append");
            len += framed.len() as u64;
        }
        let bytes = std::fs::read(&path).expect("read");
        assert_eq!(
            bodies(&MAGIC, &bytes),
            Ok((vec![b"a".to_vec(), b"bc".to_vec()], len))
        );
    }
}
