//! The bytes of every generated object: a pure function of (key, offset), so that a read can
//! be checked anywhere (tests, benchmarks) without the store. Kept apart from the namespace
//! because it is the one part of PSEUDO that other code relies on (`store::pseudo_fill`), and
//! the hashes here also seed the ETags and the store id.

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

pub(super) fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

fn finalize(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

pub(super) fn key_seed(key: &str) -> u64 {
    finalize(fnv1a(key.as_bytes()))
}

fn mix(seed: u64, word: u64) -> u64 {
    finalize(seed.wrapping_add(word.wrapping_add(1).wrapping_mul(0x9e37_79b9_7f4a_7c15)))
}
