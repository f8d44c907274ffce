//! A small seeded generator (SplitMix64) for the soak's choices. Each worker draws from its own
//! stream, derived from the run's seed, so a failing run's operation sequences can be replayed
//! with `MSFS_SOAK_SEED` (the interleaving of threads, of course, cannot).

/// Where the run's seed comes from when one is given.
pub const SEED_ENV: &str = "MSFS_SOAK_SEED";

pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    /// An independent stream for worker `index` of a run seeded with `seed`.
    pub fn for_worker(seed: u64, index: u64) -> Rng {
        let mut base = Rng::new(seed ^ index.wrapping_mul(0xA24B_AED4_963E_E407));
        Rng::new(base.next_u64())
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `lo..hi` (`lo` when the range is empty).
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        if hi <= lo {
            return lo;
        }
        lo + self.next_u64() % (hi - lo)
    }

    /// Uniform in `0..n` as an index (`0` when `n` is 0).
    pub fn index(&mut self, n: usize) -> usize {
        self.range(0, n as u64) as usize
    }

    /// True `percent` times in a hundred.
    pub fn chance(&mut self, percent: u64) -> bool {
        self.range(0, 100) < percent
    }
}

/// The run's seed: `MSFS_SOAK_SEED` if set (decimal or `0x…` hex), else the clock's nanoseconds.
pub fn run_seed() -> u64 {
    match std::env::var(SEED_ENV) {
        Ok(text) => {
            let text = text.trim();
            let parsed = match text.strip_prefix("0x") {
                Some(hex) => u64::from_str_radix(hex, 16),
                None => text.parse(),
            };
            parsed.unwrap_or_else(|e| panic!("{SEED_ENV}={text:?}: not a number: {e}"))
        }
        Err(_) => std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64),
    }
}
