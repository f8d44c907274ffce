//! The compact binary form of an entry's attributes, shared by the index and the delta log.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::format::{EntryKind, Ownership};

pub const DIR_TAG: u8 = 0;
pub const FILE_TAG: u8 = 1;
/// The same with the entry's owner and mode first (`Ownership`: perm u16, uid u32, gid u32):
/// tags an index or log written before owners existed never holds, so it is never misread.
pub const OWNED_DIR_TAG: u8 = 2;
pub const OWNED_FILE_TAG: u8 = 3;
const OWNER_LEN: usize = 10;

/// `[tag]` for a directory; `[tag, size u64, secs i64, nanos u32, etag…]` (little-endian) for a
/// file; an entry with an owner has the `OWNED_*` tag and its owner right after it.
pub fn encode(kind: &EntryKind) -> Vec<u8> {
    let mut out = Vec::new();
    encode_into(kind, &mut out);
    out
}

/// [`encode`], appended to `out` (the index packs many entries into one buffer).
pub fn encode_into(kind: &EntryKind, out: &mut Vec<u8>) {
    let owner = kind.owner();
    match (kind, owner) {
        (EntryKind::Dir { .. }, None) => out.push(DIR_TAG),
        (EntryKind::Dir { .. }, Some(_)) => out.push(OWNED_DIR_TAG),
        (EntryKind::File { .. }, None) => out.push(FILE_TAG),
        (EntryKind::File { .. }, Some(_)) => out.push(OWNED_FILE_TAG),
    }
    if let Some(owner) = owner {
        out.extend_from_slice(&owner.perm.to_le_bytes());
        out.extend_from_slice(&owner.uid.to_le_bytes());
        out.extend_from_slice(&owner.gid.to_le_bytes());
    }
    if let EntryKind::File {
        size, etag, mtime, ..
    } = kind
    {
        let (secs, nanos) = split_time(*mtime);
        out.reserve(20 + etag.len());
        out.extend_from_slice(&size.to_le_bytes());
        out.extend_from_slice(&secs.to_le_bytes());
        out.extend_from_slice(&nanos.to_le_bytes());
        out.extend_from_slice(etag.as_bytes());
    }
}

/// Whether `bytes` (an [`encode`]d entry) are a directory's, without decoding them.
pub fn is_dir(bytes: &[u8]) -> bool {
    matches!(bytes.first(), Some(&DIR_TAG | &OWNED_DIR_TAG))
}

pub fn decode(bytes: &[u8]) -> Option<EntryKind> {
    let (&tag, rest) = bytes.split_first()?;
    let (owner, rest) = match tag {
        OWNED_DIR_TAG | OWNED_FILE_TAG if rest.len() >= OWNER_LEN => {
            let owner = Ownership {
                perm: u16::from_le_bytes(rest[0..2].try_into().ok()?),
                uid: u32::from_le_bytes(rest[2..6].try_into().ok()?),
                gid: u32::from_le_bytes(rest[6..10].try_into().ok()?),
            };
            (Some(owner), &rest[OWNER_LEN..])
        }
        DIR_TAG | FILE_TAG => (None, rest),
        _ => return None,
    };
    match tag {
        DIR_TAG | OWNED_DIR_TAG if rest.is_empty() => Some(EntryKind::Dir { owner }),
        FILE_TAG | OWNED_FILE_TAG if rest.len() >= 20 => {
            let size = u64::from_le_bytes(rest[0..8].try_into().ok()?);
            let secs = i64::from_le_bytes(rest[8..16].try_into().ok()?);
            let nanos = u32::from_le_bytes(rest[16..20].try_into().ok()?);
            let etag = std::str::from_utf8(&rest[20..]).ok()?.to_string();
            Some(EntryKind::File {
                size,
                etag,
                mtime: join_time(secs, nanos)?,
                owner,
            })
        }
        _ => None,
    }
}

fn split_time(time: SystemTime) -> (i64, u32) {
    match time.duration_since(UNIX_EPOCH) {
        Ok(after) => (after.as_secs() as i64, after.subsec_nanos()),
        Err(e) => {
            let before = e.duration();
            let nanos = before.subsec_nanos();
            // The earliest time a SystemTime holds is i64::MIN seconds: 2^63 s before the
            // epoch, which wraps to i64::MIN as an i64 and is its own (wrapping) negation. A
            // plain `-` overflowed there (a panic in debug builds).
            let secs = (before.as_secs() as i64).wrapping_neg();
            if nanos == 0 {
                (secs, 0)
            } else {
                (secs - 1, 1_000_000_000 - nanos)
            }
        }
    }
}

fn join_time(secs: i64, nanos: u32) -> Option<SystemTime> {
    if secs >= 0 {
        UNIX_EPOCH.checked_add(Duration::new(secs as u64, nanos))
    } else {
        UNIX_EPOCH
            .checked_sub(Duration::from_secs(secs.unsigned_abs()))?
            .checked_add(Duration::from_nanos(u64::from(nanos)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(secs: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(secs)
    }

    #[test]
    fn times_round_trip_across_the_epoch() {
        for time in [
            at(0),
            at(1_700_000_000) + Duration::from_nanos(5),
            UNIX_EPOCH - Duration::from_millis(1500),
        ] {
            let (secs, nanos) = split_time(time);
            assert_eq!(join_time(secs, nanos), Some(time));
        }
        assert_eq!(decode(&[9]), None);
        assert_eq!(decode(&[FILE_TAG, 1, 2]), None);
        let owner = Some(Ownership {
            perm: 0o750,
            uid: 1234,
            gid: 7,
        });
        for owner in [None, owner] {
            let file = EntryKind::File {
                size: 3,
                etag: "\"e\"".into(),
                mtime: at(9),
                owner,
            };
            assert_eq!(decode(&encode(&file)), Some(file));
            let dir = EntryKind::Dir { owner };
            assert_eq!(decode(&encode(&dir)), Some(dir));
        }
        assert_eq!(decode(&[OWNED_DIR_TAG, 1, 2]), None, "owner cut short");
    }
}
