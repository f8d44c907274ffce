//! A run of one directory's entries in name order, stored as one value of the manifest index
//! (`index.rs`).
//!
//! Why runs and not a key per entry: an ingest's time went to redb's B-tree inserts (100M
//! objects at 868K entries/s, one insert per entry). A block of about [`FULL_BYTES`] holds some
//! sixty entries, so an ingest in name order makes one insert per block and packing an entry is
//! a copy; a lookup reads one block and scans it.
//!
//! Encoding, per entry: `[name length][name][attributes length][attributes]`, the lengths as
//! LEB128 varints (one byte below 128), the attributes in `codec`'s form. Names are strictly
//! increasing within a block. A block is stored under its first name and holds every entry of
//! its directory from that name up to the next block's key.

/// A block the ingest fills in order is closed once it reaches this size: a little under a
/// 4 KiB page. (Measured on a 10M-object tree: 2 KiB blocks ingest at 1.75M entries/s, 4 KiB
/// at 1.88M, 32 KiB at 1.97M; each ~60 bytes an entry on disk.) Tests use tiny blocks, so
/// that a few rows already make several, and out-of-order rows split them.
pub(super) const FULL_BYTES: usize = if cfg!(test) { 100 } else { 4000 };

/// A block's bytes do not decode: a damaged index.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Corrupt;

/// Appends an entry; `name` must come after every name already in `block`.
pub(super) fn push(block: &mut Vec<u8>, name: &str, attributes: &[u8]) {
    push_len(block, name.len());
    block.extend_from_slice(name.as_bytes());
    push_len(block, attributes.len());
    block.extend_from_slice(attributes);
}

/// The entries of `block` in name order, as `(name, attributes)`.
pub(super) fn entries(block: &[u8]) -> Entries<'_> {
    Entries { block, at: 0 }
}

pub(super) struct Entries<'a> {
    block: &'a [u8],
    /// Where the next entry starts.
    at: usize,
}

impl<'a> Iterator for Entries<'a> {
    type Item = Result<(&'a str, &'a [u8]), Corrupt>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.at >= self.block.len() {
            return None;
        }
        let entry = self.take_field().and_then(|name| {
            let name = std::str::from_utf8(name).map_err(|_| Corrupt)?;
            Ok((name, self.take_field()?))
        });
        if entry.is_err() {
            self.at = self.block.len(); // nothing after a damaged field can be trusted
        }
        Some(entry)
    }
}

impl<'a> Entries<'a> {
    fn take_field(&mut self) -> Result<&'a [u8], Corrupt> {
        let mut rest = &self.block[self.at..];
        let len = take_len(&mut rest)?;
        if len > rest.len() {
            return Err(Corrupt);
        }
        self.at = self.block.len() - rest.len() + len;
        Ok(&rest[..len])
    }
}

fn push_len(out: &mut Vec<u8>, mut len: usize) {
    while len >= 0x80 {
        out.push((len as u8 & 0x7f) | 0x80);
        len >>= 7;
    }
    out.push(len as u8);
}

fn take_len(bytes: &mut &[u8]) -> Result<usize, Corrupt> {
    let mut len = 0usize;
    // Four bytes say up to 256 MiB, far more than any name or attributes; a fifth is damage.
    for (i, &byte) in bytes.iter().take(4).enumerate() {
        len |= usize::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            *bytes = &bytes[i + 1..];
            return Ok(len);
        }
    }
    Err(Corrupt)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block_of(items: &[(&str, &[u8])]) -> Vec<u8> {
        let mut block = Vec::new();
        for (name, attributes) in items {
            push(&mut block, name, attributes);
        }
        block
    }

    #[test]
    fn entries_round_trip_including_long_fields() {
        let long_name = "n".repeat(300);
        let long_attributes = vec![7u8; 20_000];
        let block = block_of(&[("a", &[0]), (&long_name, &long_attributes), ("z", &[])]);
        let decoded: Vec<(&str, &[u8])> = entries(&block).map(|e| e.expect("entry")).collect();
        assert_eq!(
            decoded,
            [
                ("a", &[0u8][..]),
                (long_name.as_str(), &long_attributes[..]),
                ("z", &[][..])
            ]
        );
    }

    #[test]
    fn damaged_blocks_are_reported_not_misread() {
        let block = block_of(&[("name", &[1, 2, 3])]);
        for cut in 1..block.len() {
            let decoded: Result<Vec<_>, _> = entries(&block[..cut]).collect();
            assert_eq!(decoded, Err(Corrupt), "cut at {cut} of {}", block.len());
        }
        let decoded: Result<Vec<_>, _> = entries(&[0xff, 0xff, 0xff, 0xff, 0x01]).collect();
        assert_eq!(decoded, Err(Corrupt), "a length past four bytes");
        let decoded: Result<Vec<_>, _> = entries(&[2, 0xff, 0xfe, 0]).collect();
        assert_eq!(decoded, Err(Corrupt), "not UTF-8");
        let mut after_damage = entries(&[9, b'x']);
        assert_eq!(after_damage.next(), Some(Err(Corrupt)));
        assert_eq!(after_damage.next(), None);
    }
}
