//! The compact binary form of an entry's attributes, shared by the index and the delta log.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::format::EntryKind;

pub const DIR_TAG: u8 = 0;
pub const FILE_TAG: u8 = 1;

/// `[tag]` for a directory; `[tag, size u64, secs i64, nanos u32, etag…]` (little-endian) for a file.
pub fn encode(kind: &EntryKind) -> Vec<u8> {
    match kind {
        EntryKind::Dir => vec![DIR_TAG],
        EntryKind::File { size, etag, mtime } => {
            let (secs, nanos) = split_time(*mtime);
            let mut out = Vec::with_capacity(21 + etag.len());
            out.push(FILE_TAG);
            out.extend_from_slice(&size.to_le_bytes());
            out.extend_from_slice(&secs.to_le_bytes());
            out.extend_from_slice(&nanos.to_le_bytes());
            out.extend_from_slice(etag.as_bytes());
            out
        }
    }
}

pub fn decode(bytes: &[u8]) -> Option<EntryKind> {
    match bytes.split_first()? {
        (&DIR_TAG, []) => Some(EntryKind::Dir),
        (&FILE_TAG, rest) if rest.len() >= 20 => {
            let size = u64::from_le_bytes(rest[0..8].try_into().ok()?);
            let secs = i64::from_le_bytes(rest[8..16].try_into().ok()?);
            let nanos = u32::from_le_bytes(rest[16..20].try_into().ok()?);
            let etag = std::str::from_utf8(&rest[20..]).ok()?.to_string();
            Some(EntryKind::File {
                size,
                etag,
                mtime: join_time(secs, nanos)?,
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
        let file = EntryKind::File {
            size: 3,
            etag: "\"e\"".into(),
            mtime: at(9),
        };
        assert_eq!(decode(&encode(&file)), Some(file));
        assert_eq!(decode(&encode(&EntryKind::Dir)), Some(EntryKind::Dir));
    }
}
