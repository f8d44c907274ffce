//! How the target is divided among the holders of memory, at start: each gets a share, and a
//! configured size that does not fit its share is sized down (with a warning naming the keys)
//! rather than left to end in an OOM kill.
//!
//! What is not divided here is bounded elsewhere: listings are read a page at a time, and the
//! cache's fetch and read-ahead buffers are cache lines themselves (a RAM cache's count in its
//! share; a file-backed cache's live in the page cache, which the kernel reclaims under the
//! cgroup's limit).

use crate::config::{CacheConfig, CacheStorage, Config};

/// What the process holds whatever the configuration: the runtime and its threads' stacks, the
/// executable (locked in memory by default), the allocator's slack, TLS and HTTP state.
pub const BASE_BYTES: u64 = 64 << 20;

/// One inode of a mount, with its name, its path and its entries in the lookup tables
/// (measured: `ls -l` of a million files held about 820 MiB in inodes).
pub const INODE_BYTES: u64 = 1024;

/// Write buffers of commits in flight get at most this part of the target (they make commits
/// wait for room, never fail, so a small share costs throughput only).
const WRITE_BUFFER_SHARE_DIVISOR: u64 = 16;

/// The inodes of every mount keep at least this part of the target, however large the RAM
/// cache asked for; they get everything the cache and the rest leave.
const INODE_FLOOR_DIVISOR: u64 = 32;

/// The fewest lines a RAM cache is sized down to: one read's line and one being fetched.
const MIN_RAM_LINES: u64 = 2;

/// The smallest write-buffer bound the write engine accepts (`write_buffer_limit_bytes`).
const MIN_WRITE_BUFFER_BYTES: u64 = 2 << 20;

/// The sizes the process runs with under a target.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    /// The line cache's settings, with a RAM tier that fits.
    pub cache: CacheConfig,
    /// Bytes commits in flight may hold (`write_buffer_limit_bytes`, or less).
    pub write_buffer_limit: u64,
    /// Inodes every mount of the process may hold together (readdirplus may reach twice a
    /// mount's share before it lists names bare, and the share's bytes allow for that).
    pub inodes: usize,
    /// Anonymous memory the line cache may fill (0 for a cache in files).
    pub ram_cache_bytes: u64,
    /// What was sized down, and why, naming the keys.
    pub warnings: Vec<String>,
}

/// Bytes of anonymous memory `cache` fills when full.
pub fn ram_cache_bytes(cache: &CacheConfig) -> u64 {
    let lines = match cache.storage {
        CacheStorage::Ram => cache.lines,
        CacheStorage::Tiered => cache.ram_lines,
        CacheStorage::MappedFile | CacheStorage::PerInodeFile => 0,
    };
    lines.saturating_mul(cache.line_size)
}

/// Divides `target` bytes among the holders `config` sizes: the process itself, write buffers
/// (at most a sixteenth), the RAM cache (what it asks for, if that leaves the inodes their
/// floor), and the inodes of every mount (all the rest).
pub fn plan(config: &Config, target: u64) -> Plan {
    let mut warnings = Vec::new();
    let buffer_share = (target / WRITE_BUFFER_SHARE_DIVISOR).max(MIN_WRITE_BUFFER_BYTES);
    let write_buffer_limit = config.write_buffer_limit_bytes.min(buffer_share);
    if write_buffer_limit < config.write_buffer_limit_bytes {
        warnings.push(format!(
            "write_buffer_limit_bytes ({}) does not fit the memory target ({}): commits in \
             flight hold at most {} in memory, a sixteenth of the target, and wait for room \
             beyond it",
            mib(config.write_buffer_limit_bytes),
            mib(target),
            mib(write_buffer_limit),
        ));
    }
    let inode_floor = target / INODE_FLOOR_DIVISOR;
    let beside_cache = target
        .saturating_sub(BASE_BYTES)
        .saturating_sub(write_buffer_limit);

    let mut cache = config.cache.clone();
    let room = beside_cache.saturating_sub(inode_floor);
    let wanted = ram_cache_bytes(&cache);
    if wanted > room {
        let lines = (room / cache.line_size.max(1)).max(MIN_RAM_LINES);
        let keys = match cache.storage {
            CacheStorage::Tiered => {
                cache.ram_lines = lines;
                "cache_storage: tiered, cache_ram_lines x cache_line_size"
            }
            _ => {
                cache.lines = lines;
                // Read-ahead may hold at most half the lines (see the line cache).
                cache.lines_to_prefetch = cache.lines_to_prefetch.min(lines / 2);
                "cache_storage: ram, cache_lines x cache_line_size"
            }
        };
        warnings.push(format!(
            "{keys} ({}) does not fit the memory target ({}) beside the process itself ({}), \
             write buffers ({}) and inodes (at least {}): the RAM cache is sized down to \
             {lines} lines ({}); raise process_memory_limit (or the container's memory limit) \
             or use a file-backed cache_storage for more",
            mib(wanted),
            mib(target),
            mib(BASE_BYTES),
            mib(write_buffer_limit),
            mib(inode_floor),
            mib(lines.saturating_mul(cache.line_size)),
        ));
    }
    let ram_cache_bytes = ram_cache_bytes(&cache);
    let inode_bytes = beside_cache
        .saturating_sub(ram_cache_bytes)
        .max(inode_floor);
    Plan {
        ram_cache_bytes,
        cache,
        write_buffer_limit,
        inodes: usize::try_from(inode_bytes / (2 * INODE_BYTES)).unwrap_or(usize::MAX),
        warnings,
    }
}

/// Bytes as MiB, for messages.
pub fn mib(bytes: u64) -> String {
    format!("{} MiB", bytes >> 20)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(storage: CacheStorage, lines: u64, ram_lines: u64) -> Config {
        let path = std::path::Path::new("c.yaml");
        let mut c = crate::config::parse_str("msfs_version: 1\n", path, &|_| None)
            .expect("defaults parse")
            .config;
        c.cache.storage = storage;
        c.cache.line_size = 8 << 20;
        c.cache.lines = lines;
        c.cache.ram_lines = ram_lines;
        c
    }

    #[test]
    fn a_ram_cache_larger_than_the_target_is_sized_down_with_a_warning() {
        // 4 GiB of RAM cache under a 448 MiB target: 448 - 64 - 28 (buffers) - 14 (inode
        // floor) = 342 MiB, 42 lines of 8 MiB.
        let plan = plan(&config(CacheStorage::Ram, 512, 0), 448 << 20);
        assert_eq!(plan.cache.lines, 42);
        assert_eq!(plan.ram_cache_bytes, 42 * (8 << 20));
        assert_eq!(plan.cache.lines_to_prefetch, 4);
        assert_eq!(plan.write_buffer_limit, 28 << 20);
        // The inodes get what is left: 448 - 64 - 28 - 336 = 20 MiB.
        assert_eq!(plan.inodes, (20 << 20) / 2048);
        assert_eq!(plan.warnings.len(), 2, "{:?}", plan.warnings);
        assert!(
            plan.warnings[1].contains("cache_storage: ram, cache_lines x cache_line_size"),
            "{}",
            plan.warnings[1]
        );
        assert!(plan.warnings[1].contains("42 lines (336 MiB)"));
    }

    #[test]
    fn a_tiered_cache_loses_ram_lines_only() {
        let plan = plan(&config(CacheStorage::Tiered, 10_000, 512), 1 << 30);
        assert_eq!(plan.cache.lines, 10_000, "the disk tier is not memory");
        assert!(plan.cache.ram_lines < 512);
        assert!(plan.warnings.iter().any(|w| w.contains("cache_ram_lines")));
    }

    #[test]
    fn a_file_backed_cache_leaves_the_rest_to_the_inodes() {
        let c = config(CacheStorage::MappedFile, 100_000, 0);
        let plan = plan(&c, 8 << 30);
        assert_eq!(plan.cache, c.cache);
        assert_eq!(plan.write_buffer_limit, c.write_buffer_limit_bytes);
        assert_eq!(plan.ram_cache_bytes, 0);
        assert_eq!(plan.inodes, ((8 << 30) - (64 << 20) - (256 << 20)) / 2048);
        assert!(plan.warnings.is_empty(), "{:?}", plan.warnings);
    }

    #[test]
    fn the_charts_default_ram_cache_fits_its_computed_limit() {
        // The chart's memory limit for cacheStorage ram: (256 + 1280) x 8 / 7 MiB, rounded up
        // (templates/_helpers.tpl), and msfs's target an eighth below it (`Target::find`).
        let limit: u64 = 1756 << 20;
        let c = config(CacheStorage::Ram, 160, 0);
        let plan = plan(&c, limit - limit / 8);
        assert_eq!(plan.cache.lines, 160, "{:?}", plan.warnings);
    }

    #[test]
    fn the_shares_never_exceed_the_target() {
        for target in [64u64 << 20, 256 << 20, 1 << 30, 16 << 30] {
            let plan = plan(&config(CacheStorage::Ram, 1 << 20, 0), target);
            let inodes = plan.inodes as u64 * 2 * INODE_BYTES;
            let total = BASE_BYTES + inodes + plan.write_buffer_limit + plan.ram_cache_bytes;
            // Below the base and the floors (two lines, the buffers' and inodes' shares) a
            // target cannot be met: the floors are what the process needs to work at all.
            let floors = MIN_RAM_LINES * (8 << 20)
                + (target / WRITE_BUFFER_SHARE_DIVISOR).max(MIN_WRITE_BUFFER_BYTES)
                + target / INODE_FLOOR_DIVISOR;
            assert!(
                total <= target.max(BASE_BYTES + floors),
                "{target}: {total}"
            );
        }
    }
}
