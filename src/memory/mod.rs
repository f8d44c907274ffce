//! One memory target for the whole process, and its division among the holders of memory.
//!
//! The target is `process_memory_limit` when set; else the process's memory cgroup limit
//! ([`cgroup`]) less headroom for what the kernel charges the cgroup beside msfs's own heap
//! (page tables, socket buffers, the page cache of spill and cache files); else half of the
//! machine's memory, which other processes share. At start it is divided ([`plan`]): the RAM
//! cache is sized down to fit, write buffers are capped, and the inodes of every mount draw
//! from one pool ([`inodes`]). Past the start, the write buffers make commits wait for room
//! and the inode pool makes mounts drop idle entries and list bare names, instead of growing.
//! Near and over the target anyway ([`pressure`]), read-ahead shrinks and stops, the RAM cache
//! gives back clean lines, then the inode shares are halved, then new fetches and commits wait.

pub mod cgroup;
pub mod inodes;
pub mod plan;
pub mod pressure;

use std::path::Path;

use crate::config::Config;
pub use cgroup::{Hierarchy, Version};
pub use inodes::{InodeLimit, InodePool};
pub use plan::{INODE_BYTES, Plan};
pub use pressure::{Pressure, Shed, Stage};

use std::sync::Arc;

/// Headroom below a cgroup limit: an eighth of it, at least this much.
const MIN_HEADROOM: u64 = 32 << 20;

/// Where the target came from, as logged at start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// `process_memory_limit`.
    Config,
    /// The cgroup's limit, in bytes.
    Cgroup { version: Version, limit: u64 },
    /// The machine's memory (`MemTotal`), in bytes.
    Machine { total: u64 },
    /// Nothing could be read: no bound.
    Unknown,
}

impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Source::Config => write!(f, "process_memory_limit"),
            Source::Cgroup { version, limit } => {
                let v = match version {
                    Version::V1 => "v1 memory.limit_in_bytes",
                    Version::V2 => "v2 memory.max",
                };
                write!(f, "cgroup {v} {} less headroom", plan::mib(*limit))
            }
            Source::Machine { total } => {
                write!(
                    f,
                    "half the machine's {} (no cgroup limit)",
                    plan::mib(*total)
                )
            }
            Source::Unknown => write!(f, "unknown: no limit found"),
        }
    }
}

/// The memory the process aims to stay under.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Target {
    pub bytes: u64,
    pub source: Source,
}

impl Target {
    /// From `configured` (`process_memory_limit`), else the cgroup, else the machine.
    pub fn find(configured: Option<u64>, hierarchy: &Hierarchy, meminfo: &Path) -> Target {
        if let Some(bytes) = configured {
            return Target {
                bytes,
                source: Source::Config,
            };
        }
        let total = machine_total(meminfo);
        // A limit above the machine's memory (an unlimited v1 value rounded down to some page
        // size) limits nothing.
        if let Some((limit, version)) = hierarchy.limit()
            && total.is_none_or(|total| limit < total)
        {
            let headroom = (limit / 8).max(MIN_HEADROOM).min(limit / 2);
            return Target {
                bytes: limit - headroom,
                source: Source::Cgroup { version, limit },
            };
        }
        match total {
            Some(total) => Target {
                bytes: total / 2,
                source: Source::Machine { total },
            },
            None => Target {
                bytes: u64::MAX,
                source: Source::Unknown,
            },
        }
    }
}

/// `MemTotal` of `/proc/meminfo`, in bytes.
fn machine_total(meminfo: &Path) -> Option<u64> {
    kib_field(&std::fs::read_to_string(meminfo).ok()?, "MemTotal")
}

/// The bytes of a `NAME:  N kB` line of a `/proc` file (`/proc/meminfo`, `/proc/PID/status`).
pub(crate) fn kib_field(text: &str, name: &str) -> Option<u64> {
    let kib: u64 = text
        .lines()
        .find_map(|line| line.strip_prefix(name)?.strip_prefix(':'))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    kib.checked_mul(1024)
}

/// The process's target, how it is divided, and the inode pool every mount joins.
#[derive(Debug)]
pub struct Memory {
    pub target: Target,
    pub plan: Plan,
    pub inodes: Arc<InodePool>,
    /// How pressed the process is now, read by every holder (see [`pressure`]).
    pub pressure: Arc<Pressure>,
}

impl Memory {
    /// The target of `config` on this system, divided; logs the target and its source, and
    /// warns of what was sized down.
    pub fn for_config(config: &Config) -> Memory {
        let target = Target::find(
            config.process_memory_limit,
            &Hierarchy::system(),
            Path::new("/proc/meminfo"),
        );
        let memory = Memory::with_target(config, target);
        tracing::info!(
            target_bytes = target.bytes,
            source = %target.source,
            ram_cache_bytes = memory.plan.ram_cache_bytes,
            write_buffer_bytes = memory.plan.write_buffer_limit,
            inodes = memory.plan.inodes,
            "memory target {} ({})",
            plan::mib(target.bytes),
            target.source
        );
        for warning in &memory.plan.warnings {
            tracing::warn!("{warning}");
        }
        pressure::watch(target.bytes, memory.inodes.clone(), memory.pressure.clone());
        memory
    }

    pub fn with_target(config: &Config, target: Target) -> Memory {
        let plan = plan::plan(config, target.bytes);
        Memory {
            inodes: InodePool::new(plan.inodes),
            target,
            plan,
            pressure: Arc::default(),
        }
    }

    /// No bound (tests of the layers above the engines).
    pub fn unbounded() -> Memory {
        Memory {
            target: Target {
                bytes: u64::MAX,
                source: Source::Unknown,
            },
            plan: Plan {
                cache: crate::config::CacheConfig {
                    storage: crate::config::CacheStorage::MappedFile,
                    line_size: 1,
                    lines: 1,
                    ram_lines: 0,
                    lines_to_prefetch: 0,
                    dir_path: None,
                    persistent: false,
                    write_cache_promotion: false,
                },
                write_buffer_limit: u64::MAX,
                inodes: usize::MAX,
                ram_cache_bytes: 0,
                warnings: Vec::new(),
            },
            inodes: InodePool::new(usize::MAX),
            pressure: Arc::default(),
        }
    }
}

/// This process's resident set, in bytes (`/proc/self/statm`), for the gauges.
pub fn resident_bytes() -> u64 {
    let Ok(statm) = std::fs::read_to_string("/proc/self/statm") else {
        return 0;
    };
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .unwrap_or(0);
    // SAFETY: sysconf only reads a system constant.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    pages.saturating_mul(u64::try_from(page).unwrap_or(4096))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixtures() -> std::path::PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("src/memory/fixtures")
    }

    fn hierarchy(name: &str) -> Hierarchy {
        Hierarchy {
            v2_root: fixtures().join(name),
            v1_root: fixtures().join(name).join("memory"),
            proc_self_cgroup: fixtures().join(name).join("proc_self_cgroup"),
        }
    }

    #[test]
    fn the_config_wins_over_the_cgroup() {
        let t = Target::find(
            Some(300 << 20),
            &hierarchy("v2"),
            &fixtures().join("meminfo"),
        );
        assert_eq!(t.bytes, 300 << 20);
        assert_eq!(t.source, Source::Config);
    }

    #[test]
    fn a_cgroup_limit_leaves_an_eighth_as_headroom() {
        let t = Target::find(None, &hierarchy("v2"), &fixtures().join("meminfo"));
        assert_eq!(t.bytes, (1 << 30) - (128 << 20));
        assert_eq!(
            t.source,
            Source::Cgroup {
                version: Version::V2,
                limit: 1 << 30
            }
        );
        let t = Target::find(None, &hierarchy("hybrid"), &fixtures().join("meminfo"));
        assert_eq!(
            t.bytes,
            (128 << 20) - (32 << 20),
            "at least 32 MiB of headroom"
        );
        assert_eq!(
            t.source.to_string(),
            "cgroup v1 memory.limit_in_bytes 128 MiB less headroom"
        );
    }

    #[test]
    fn without_a_cgroup_limit_half_the_machine() {
        let t = Target::find(
            None,
            &hierarchy("v2-unlimited"),
            &fixtures().join("meminfo"),
        );
        // meminfo's MemTotal: 16384000 kB.
        assert_eq!(t.bytes, 16_384_000 * 1024 / 2);
        assert_eq!(
            t.source,
            Source::Machine {
                total: 16_384_000 * 1024
            }
        );
    }
}
