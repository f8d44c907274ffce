//! The warm ioctl: its command number and the 32 bytes that go in and come back.
//!
//! A FUSE server may only answer "restricted" ioctls on regular files: the kernel copies in and
//! out exactly the size encoded in the command number, in the direction it encodes. So the
//! command is `_IOWR('m', 1, [u8; 32])`, and both ways the payload is four little-endian `u64`s.

/// `_IOWR('m', 1, 32 bytes)`, as Linux encodes it: direction (read and write) in bits 30–31,
/// size in bits 16–29, type in 8–15, number in 0–7.
pub const WARM_IOCTL: u32 = (3 << 30) | ((PAYLOAD as u32) << 16) | ((b'm' as u32) << 8) | 1;

/// Bytes copied each way.
pub const PAYLOAD: usize = 32;

/// `_IOR('m', 2, 64 bytes)`: the shared cache's counts (a [`SharedCacheReport`]), for the
/// summary's line about it. A mount without a shared cache answers `ENOTTY`, as an older one.
pub const SHARED_CACHE_IOCTL: u32 =
    (2 << 30) | ((SHARED_CACHE_PAYLOAD as u32) << 16) | ((b'm' as u32) << 8) | 2;

/// Bytes the shared cache's counts take: eight little-endian `u64`s.
pub const SHARED_CACHE_PAYLOAD: usize = 64;

/// The process's shared-cache counts, in lines, since it started; `pending` is now.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SharedCacheReport {
    pub hits: u64,
    pub misses: u64,
    pub fills: u64,
    pub fill_drops: u64,
    /// Lines waiting to be written or being written.
    pub pending: u64,
    pub verification_failures: u64,
    pub fallbacks: u64,
}

impl SharedCacheReport {
    pub fn encode(&self) -> [u8; SHARED_CACHE_PAYLOAD] {
        let mut out = [0; SHARED_CACHE_PAYLOAD];
        let values = [
            self.hits,
            self.misses,
            self.fills,
            self.fill_drops,
            self.pending,
            self.verification_failures,
            self.fallbacks,
            0,
        ];
        for (chunk, value) in out.chunks_exact_mut(8).zip(values) {
            chunk.copy_from_slice(&value.to_le_bytes());
        }
        out
    }

    pub fn decode(bytes: &[u8]) -> Option<SharedCacheReport> {
        if bytes.len() != SHARED_CACHE_PAYLOAD {
            return None;
        }
        let mut v = [0u64; 8];
        for (value, chunk) in v.iter_mut().zip(bytes.chunks_exact(8)) {
            *value = u64::from_le_bytes(chunk.try_into().ok()?);
        }
        Some(SharedCacheReport {
            hits: v[0],
            misses: v[1],
            fills: v[2],
            fill_drops: v[3],
            pending: v[4],
            verification_failures: v[5],
            fallbacks: v[6],
        })
    }

    /// What happened between `earlier` and `self` (`pending` as of `self`).
    pub fn since(&self, earlier: &SharedCacheReport) -> SharedCacheReport {
        SharedCacheReport {
            hits: self.hits.saturating_sub(earlier.hits),
            misses: self.misses.saturating_sub(earlier.misses),
            fills: self.fills.saturating_sub(earlier.fills),
            fill_drops: self.fill_drops.saturating_sub(earlier.fill_drops),
            pending: self.pending,
            verification_failures: self
                .verification_failures
                .saturating_sub(earlier.verification_failures),
            fallbacks: self.fallbacks.saturating_sub(earlier.fallbacks),
        }
    }
}

/// What the caller asks: warm `len` bytes of the open file from `offset` (`len` 0 only reports).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WarmRequest {
    pub offset: u64,
    pub len: u64,
}

/// What msfs answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct WarmReport {
    /// The file's size.
    pub size: u64,
    /// Bytes of the asked range that were cached (or being fetched) before the request.
    pub cached_before: u64,
    /// The cache's capacity in bytes (`cache_line_size × cache_lines`).
    pub capacity: u64,
    /// Bytes per cache line.
    pub line_size: u64,
}

impl WarmRequest {
    pub fn encode(&self) -> [u8; PAYLOAD] {
        words([self.offset, self.len, 0, 0])
    }

    /// `None` for a payload of another size: not this ioctl's.
    pub fn decode(bytes: &[u8]) -> Option<WarmRequest> {
        let [offset, len, _, _] = unwords(bytes)?;
        Some(WarmRequest { offset, len })
    }
}

impl WarmReport {
    pub fn encode(&self) -> [u8; PAYLOAD] {
        words([self.size, self.cached_before, self.capacity, self.line_size])
    }

    pub fn decode(bytes: &[u8]) -> Option<WarmReport> {
        let [size, cached_before, capacity, line_size] = unwords(bytes)?;
        Some(WarmReport {
            size,
            cached_before,
            capacity,
            line_size,
        })
    }
}

fn words(values: [u64; 4]) -> [u8; PAYLOAD] {
    let mut out = [0; PAYLOAD];
    for (chunk, value) in out.chunks_exact_mut(8).zip(values) {
        chunk.copy_from_slice(&value.to_le_bytes());
    }
    out
}

fn unwords(bytes: &[u8]) -> Option<[u64; 4]> {
    if bytes.len() != PAYLOAD {
        return None;
    }
    let mut values = [0; 4];
    for (value, chunk) in values.iter_mut().zip(bytes.chunks_exact(8)) {
        *value = u64::from_le_bytes(chunk.try_into().ok()?);
    }
    Some(values)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_command_number_is_linux_iowr_of_32_bytes() {
        // _IOWR('m', 1, char[32]) as the C headers compute it.
        assert_eq!(WARM_IOCTL, 0xc020_6d01);
        // _IOR('m', 2, char[64]).
        assert_eq!(SHARED_CACHE_IOCTL, 0x8040_6d02);
    }

    #[test]
    fn payloads_round_trip_and_other_sizes_are_refused() {
        let request = WarmRequest {
            offset: 1 << 40,
            len: 64 << 20,
        };
        assert_eq!(WarmRequest::decode(&request.encode()), Some(request));
        let report = WarmReport {
            size: 5,
            cached_before: 4,
            capacity: 3,
            line_size: 2,
        };
        assert_eq!(WarmReport::decode(&report.encode()), Some(report));
        assert_eq!(WarmRequest::decode(&[0; 16]), None);
        let shared = SharedCacheReport {
            hits: 1,
            misses: 2,
            fills: 3,
            fill_drops: 4,
            pending: 5,
            verification_failures: 6,
            fallbacks: 7,
        };
        assert_eq!(SharedCacheReport::decode(&shared.encode()), Some(shared));
        assert_eq!(SharedCacheReport::decode(&[0; 32]), None);
    }
}
