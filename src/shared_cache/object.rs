//! One shared line as an object: where it lives in the shared bucket, and what it carries.
//!
//! The object's name is derived from what identifies the line (the origin store's cache scope —
//! endpoint, bucket and signing principal —, the key, the ETag, the line size and the line's
//! index), and the object carries all of them again in a header, with the payload's length and
//! CRC-32. A reader checks every field against what it asked for: a hash collision, a line of
//! another version, a truncated or flipped payload are each a miss, never bytes. Encoding is a
//! pure function of the line, so two nodes filling one line at once write the same bytes.

use bytes::{Bytes, BytesMut};
use md5::Digest;
use serde::{Deserialize, Serialize};

/// The first bytes of every shared line object (format version 1).
const MAGIC: &[u8] = b"MSFS-SHARED-LINE 1\n";
/// A header is a few hundred bytes (a key is at most 1024); more is not one of ours.
pub(super) const MAX_HEADER: u64 = 16 * 1024;

/// What one shared line is: the identity a reader asks for and a writer records.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct LineId {
    /// The origin store's cache scope (`ObjectStore::cache_scope`).
    pub scope: String,
    pub key: String,
    pub etag: String,
    pub line_size: u64,
    pub line: u64,
}

/// The header written before the payload: the line's identity, then the payload's length and
/// checksum. Field order is fixed by the struct, so the encoding is deterministic.
#[derive(Debug, Serialize, Deserialize)]
struct Header {
    #[serde(flatten)]
    id: LineId,
    len: u64,
    crc32: u32,
}

/// Why a shared object was not served.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub(super) enum Mismatch {
    #[error("not a shared line object (no msfs header)")]
    NoHeader,
    #[error("unreadable header: {0}")]
    BadHeader(String),
    #[error("holds another line: {0}")]
    OtherLine(&'static str),
    #[error("payload is {got} bytes, header says {expected}")]
    Length { got: u64, expected: u64 },
    #[error("payload checksum {got:08x} differs from the header's {expected:08x}")]
    Checksum { got: u32, expected: u32 },
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

impl LineId {
    /// The object's name under `prefix`: `<scope hash>/<key and ETag hash>/<line size>/<line>`.
    /// Hashes keep any key valid as an object name; the header, not the name, is trusted.
    pub(super) fn object_key(&self, prefix: &str) -> String {
        let scope = md5::Md5::digest(self.scope.as_bytes());
        let mut object = md5::Md5::new();
        object.update(self.key.as_bytes());
        object.update(b"\n");
        object.update(self.etag.as_bytes());
        format!(
            "{prefix}{}/{}/{}/{}",
            hex(&scope),
            hex(&object.finalize()),
            self.line_size,
            self.line
        )
    }
}

/// The object holding `payload` as line `id`.
pub(super) fn encode(id: &LineId, payload: &[u8]) -> Bytes {
    let header = Header {
        id: id.clone(),
        len: payload.len() as u64,
        crc32: crc32fast::hash(payload),
    };
    let json = serde_json::to_vec(&header).expect("a header serializes");
    let mut out = BytesMut::with_capacity(MAGIC.len() + json.len() + 1 + payload.len());
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&json);
    out.extend_from_slice(b"\n");
    out.extend_from_slice(payload);
    out.freeze()
}

/// The payload of `object` if it is exactly line `id`, whole and unaltered.
pub(super) fn decode(id: &LineId, object: Bytes) -> Result<Bytes, Mismatch> {
    let rest = object.strip_prefix(MAGIC).ok_or(Mismatch::NoHeader)?;
    let end = rest
        .iter()
        .take(MAX_HEADER as usize)
        .position(|&b| b == b'\n')
        .ok_or_else(|| Mismatch::BadHeader("no end of header".into()))?;
    let header: Header =
        serde_json::from_slice(&rest[..end]).map_err(|e| Mismatch::BadHeader(e.to_string()))?;
    for (field, same) in [
        ("scope", header.id.scope == id.scope),
        ("key", header.id.key == id.key),
        ("etag", header.id.etag == id.etag),
        ("line_size", header.id.line_size == id.line_size),
        ("line", header.id.line == id.line),
    ] {
        if !same {
            return Err(Mismatch::OtherLine(field));
        }
    }
    let start = MAGIC.len() + end + 1;
    let payload = object.slice(start..);
    if payload.len() as u64 != header.len || header.len > id.line_size {
        return Err(Mismatch::Length {
            got: payload.len() as u64,
            expected: header.len,
        });
    }
    let crc = crc32fast::hash(&payload);
    if crc != header.crc32 {
        return Err(Mismatch::Checksum {
            got: crc,
            expected: header.crc32,
        });
    }
    Ok(payload)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id() -> LineId {
        LineId {
            scope: "s3:http://h/b#0011".into(),
            key: "data/a".into(),
            etag: "\"e1\"".into(),
            line_size: 8,
            line: 2,
        }
    }

    #[test]
    fn a_line_round_trips_and_encodes_the_same_every_time() {
        let object = encode(&id(), b"abcdefgh");
        assert_eq!(object, encode(&id(), b"abcdefgh"));
        assert_eq!(
            decode(&id(), object).unwrap(),
            Bytes::from_static(b"abcdefgh")
        );
    }

    #[test]
    fn a_flipped_payload_byte_is_a_mismatch() {
        let mut object = encode(&id(), b"abcdefgh").to_vec();
        let last = object.len() - 1;
        object[last] ^= 0x01;
        assert!(matches!(
            decode(&id(), object.into()),
            Err(Mismatch::Checksum { .. })
        ));
    }

    #[test]
    fn a_truncated_payload_is_a_mismatch() {
        let object = encode(&id(), b"abcdefgh");
        let cut = object.slice(..object.len() - 1);
        assert!(matches!(decode(&id(), cut), Err(Mismatch::Length { .. })));
    }

    #[test]
    fn a_line_of_another_version_scope_or_index_is_never_served() {
        let object = encode(&id(), b"abcdefgh");
        for (field, other) in [
            (
                "etag",
                LineId {
                    etag: "\"e2\"".into(),
                    ..id()
                },
            ),
            (
                "scope",
                LineId {
                    scope: "s3:http://h/b#9999".into(),
                    ..id()
                },
            ),
            (
                "key",
                LineId {
                    key: "data/b".into(),
                    ..id()
                },
            ),
            ("line", LineId { line: 3, ..id() }),
            (
                "line_size",
                LineId {
                    line_size: 16,
                    ..id()
                },
            ),
        ] {
            assert_eq!(
                decode(&other, object.clone()),
                Err(Mismatch::OtherLine(field))
            );
        }
    }

    #[test]
    fn an_object_without_our_header_is_a_mismatch() {
        assert_eq!(
            decode(&id(), Bytes::from_static(b"abcdefgh")),
            Err(Mismatch::NoHeader)
        );
    }

    #[test]
    fn object_names_differ_by_every_part_of_the_identity() {
        let base = id().object_key("sc/");
        assert!(base.starts_with("sc/"));
        assert!(base.ends_with("/8/2"));
        for other in [
            LineId {
                etag: "\"e2\"".into(),
                ..id()
            },
            LineId {
                scope: "s3:http://h/c#0011".into(),
                ..id()
            },
            LineId {
                key: "data/b".into(),
                ..id()
            },
            LineId { line: 3, ..id() },
        ] {
            assert_ne!(other.object_key("sc/"), base);
        }
    }
}
