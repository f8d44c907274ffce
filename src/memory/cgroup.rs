//! The memory limit a cgroup puts on this process, read the way the kernel applies it: the
//! smallest `memory.max` (v2) or `memory.limit_in_bytes` (v1) on the path from the process's
//! cgroup up to the hierarchy's root. A container usually sees its own cgroup as the root of
//! the mount (a cgroup namespace, or v1's bind mount of the container's directory), while
//! `/proc/self/cgroup` may still name the host's path: directories of that path missing under
//! the mount are skipped, so the walk ends at the mount's root, the container's own limit.

use std::path::{Path, PathBuf};

/// A v1 limit at or above this is the kernel's "unlimited" (`PAGE_COUNTER_MAX` in bytes,
/// rounded down to a page: 9223372036854771712 on 4 KiB pages).
const V1_UNLIMITED: u64 = 1 << 62;

/// Which cgroup version a limit was read from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Version {
    V1,
    V2,
}

/// Where the cgroup filesystems are mounted, and the process's own `/proc/self/cgroup`; the
/// system's in a running process, fixture trees in tests.
#[derive(Debug, Clone)]
pub struct Hierarchy {
    /// The v2 (unified) mount: `/sys/fs/cgroup`, when it holds `cgroup.controllers`.
    pub v2_root: PathBuf,
    /// The v1 memory controller's mount: `/sys/fs/cgroup/memory`.
    pub v1_root: PathBuf,
    /// `/proc/self/cgroup`.
    pub proc_self_cgroup: PathBuf,
}

impl Hierarchy {
    pub fn system() -> Hierarchy {
        Hierarchy {
            v2_root: PathBuf::from("/sys/fs/cgroup"),
            v1_root: PathBuf::from("/sys/fs/cgroup/memory"),
            proc_self_cgroup: PathBuf::from("/proc/self/cgroup"),
        }
    }

    /// The tightest memory limit over the process, and the version it came from: v2 when the
    /// unified hierarchy has the memory controller, else v1. `None`: no limit anywhere.
    pub fn limit(&self) -> Option<(u64, Version)> {
        let membership = std::fs::read_to_string(&self.proc_self_cgroup).ok()?;
        if let Some(path) = v2_path(&membership)
            && has_memory_controller(&self.v2_root)
        {
            return smallest_on_path(&self.v2_root, path, "memory.max", parse_v2)
                .map(|limit| (limit, Version::V2));
        }
        let path = v1_path(&membership)?;
        smallest_on_path(&self.v1_root, path, "memory.limit_in_bytes", parse_v1)
            .map(|limit| (limit, Version::V1))
    }
}

/// The unified hierarchy's line of `/proc/self/cgroup`: `0::/path`.
fn v2_path(membership: &str) -> Option<&str> {
    membership.lines().find_map(|line| line.strip_prefix("0::"))
}

/// The v1 memory controller's line: `4:memory:/path` (controllers may be co-mounted:
/// `4:cpu,memory:/path`).
fn v1_path(membership: &str) -> Option<&str> {
    membership.lines().find_map(|line| {
        let mut fields = line.splitn(3, ':');
        let _id = fields.next()?;
        let controllers = fields.next()?;
        let path = fields.next()?;
        controllers
            .split(',')
            .any(|c| c == "memory")
            .then_some(path)
    })
}

/// A v2 mount without the memory controller (a hybrid system's `unified`) limits nothing.
fn has_memory_controller(root: &Path) -> bool {
    std::fs::read_to_string(root.join("cgroup.controllers"))
        .is_ok_and(|controllers| controllers.split_whitespace().any(|c| c == "memory"))
}

fn parse_v2(text: &str) -> Option<u64> {
    match text.trim() {
        "max" => None,
        value => value.parse().ok(),
    }
}

fn parse_v1(text: &str) -> Option<u64> {
    text.trim()
        .parse()
        .ok()
        .filter(|limit| *limit < V1_UNLIMITED)
}

/// The smallest limit in `file` of the directories from `root/path` up to `root`.
fn smallest_on_path(
    root: &Path,
    path: &str,
    file: &str,
    parse: fn(&str) -> Option<u64>,
) -> Option<u64> {
    let mut dir = root.join(path.trim_start_matches('/'));
    let mut smallest: Option<u64> = None;
    loop {
        // The root of a v2 hierarchy has no memory.max; a missing directory is the host's path
        // seen from inside a container (see the module doc).
        if let Ok(text) = std::fs::read_to_string(dir.join(file))
            && let Some(limit) = parse(&text)
        {
            smallest = Some(smallest.map_or(limit, |s| s.min(limit)));
        }
        if dir == root || !dir.pop() || !dir.starts_with(root) {
            return smallest;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The checked-in trees under `src/memory/fixtures`, shaped like `/sys/fs/cgroup`.
    fn fixture(name: &str, proc_self_cgroup: &str) -> Hierarchy {
        let base = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/memory/fixtures");
        Hierarchy {
            v2_root: base.join(name),
            v1_root: base.join(name).join("memory"),
            proc_self_cgroup: base.join(proc_self_cgroup),
        }
    }

    #[test]
    fn v2_takes_the_smallest_limit_on_the_way_up() {
        // kubepods.slice/pod/container: the container says max, the pod 1 GiB, kubepods 8 GiB.
        let h = fixture("v2", "v2/proc_self_cgroup");
        assert_eq!(h.limit(), Some((1 << 30, Version::V2)));
    }

    #[test]
    fn v2_inside_a_namespace_reads_the_mount_root() {
        // "0::/" with the container's own limit at the mount's root.
        let h = fixture("v2-namespaced", "v2-namespaced/proc_self_cgroup");
        assert_eq!(h.limit(), Some((256 << 20, Version::V2)));
    }

    #[test]
    fn v2_unlimited_everywhere_is_no_limit() {
        let h = fixture("v2-unlimited", "v2-unlimited/proc_self_cgroup");
        assert_eq!(h.limit(), None);
    }

    #[test]
    fn v1_reads_the_memory_controller_and_ignores_its_unlimited_value() {
        // The memory line is co-mounted with another controller; the leaf's 9223372036854771712
        // is "unlimited", its parent says 512 MiB.
        let h = fixture("v1", "v1/proc_self_cgroup");
        assert_eq!(h.limit(), Some((512 << 20, Version::V1)));
    }

    #[test]
    fn v1_with_the_hosts_path_falls_back_to_the_mount_root() {
        // A container's v1 mount is its own cgroup; /proc/self/cgroup still names the host's.
        let h = fixture("v1-container", "v1-container/proc_self_cgroup");
        assert_eq!(h.limit(), Some((768 << 20, Version::V1)));
    }

    #[test]
    fn a_hybrid_system_without_memory_in_v2_uses_v1() {
        let h = fixture("hybrid", "hybrid/proc_self_cgroup");
        assert_eq!(h.limit(), Some((128 << 20, Version::V1)));
    }

    #[test]
    fn no_cgroup_file_is_no_limit() {
        let h = fixture("v2", "absent");
        assert_eq!(h.limit(), None);
    }
}
