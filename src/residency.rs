//! `lock_code_in_memory`: msfs's code stays in memory.
//!
//! Every request to a mount waits on this process, so code the kernel has paged out costs every
//! caller the disk reads that page it back in. Measured here (a fresh mount, `drop_caches`, then
//! `stat`, `open` and a 1-byte `read` of a 1 GiB object): 20–25 ms to the first byte, of which
//! 4–5 major page faults in msfs took 12–15 ms; with msfs's pages in memory, 5.4–8 ms. Under
//! memory pressure it is worse than slow: reclaim may wait on writeback to this very mount while
//! msfs waits for memory to page its code back in.
//!
//! So at start msfs locks (`mlock`) the mappings of its executable and the shared libraries it
//! uses: about 40 MB of a release build, resident once anyway while msfs serves. The line cache,
//! spill files and heap are never locked (they are bounded by their own settings). A process
//! that may not lock (no `CAP_IPC_LOCK` and a small `RLIMIT_MEMLOCK`) logs why and runs as before.

use std::io;
use std::ops::Range;
use std::path::Path;

/// What `lock_code` locked.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Locked {
    pub mappings: usize,
    pub bytes: u64,
}

/// Locks the code of this process in memory, as `lock_code_in_memory` asks; logs the outcome.
pub fn lock_code_as_configured(wanted: bool) {
    if !wanted {
        return;
    }
    match lock_code() {
        Ok(locked) => tracing::info!(
            mappings = locked.mappings,
            bytes = locked.bytes,
            "msfs's code is locked in memory (lock_code_in_memory)"
        ),
        Err(e) => tracing::warn!(error = %e,
            "cannot lock msfs's code in memory (lock_code_in_memory); it may be paged out \
             under memory pressure, and requests then wait for it to be read back in"),
    }
}

/// Locks every mapping of the executable and of shared libraries (see the module doc).
pub fn lock_code() -> io::Result<Locked> {
    let exe = std::fs::read_link("/proc/self/exe")?;
    let maps = std::fs::read_to_string("/proc/self/maps")?;
    let mut locked = Locked::default();
    for mapping in maps.lines().filter_map(Mapping::parse) {
        if !mapping.accessible || !is_code(mapping.path, &exe) {
            continue;
        }
        let len = mapping.range.end - mapping.range.start;
        // SAFETY: mlock reads and pins the pages of an existing mapping of this process (listed
        // in its maps just now, and code is never unmapped); it changes no byte of memory.
        if unsafe { libc::mlock(mapping.range.start as *const libc::c_void, len) } != 0 {
            return Err(io::Error::last_os_error());
        }
        locked.mappings += 1;
        locked.bytes += len as u64;
    }
    Ok(locked)
}

/// Whether a mapped file is code: the executable itself, or a shared library.
fn is_code(path: &str, exe: &Path) -> bool {
    if Path::new(path) == exe {
        return true;
    }
    let name = path.rsplit('/').next().unwrap_or(path);
    path.starts_with('/') && (name.ends_with(".so") || name.contains(".so."))
}

/// One line of `/proc/self/maps`.
#[derive(Debug, PartialEq, Eq)]
struct Mapping<'a> {
    range: Range<usize>,
    /// Not `---p`: a guard or gap, which nothing reads.
    accessible: bool,
    /// The mapped file (empty for anonymous memory).
    path: &'a str,
}

impl<'a> Mapping<'a> {
    /// `start-end perms offset dev inode   path`, the path after padding (it may hold spaces).
    fn parse(line: &'a str) -> Option<Mapping<'a>> {
        let mut fields = line.splitn(6, ' ');
        let (start, end) = fields.next()?.split_once('-')?;
        let perms = fields.next()?;
        let path = fields.nth(3).unwrap_or("").trim_start();
        Some(Mapping {
            range: usize::from_str_radix(start, 16).ok()?..usize::from_str_radix(end, 16).ok()?,
            accessible: perms.get(..3)? != "---",
            path,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_lines_are_read_with_their_paths_whole() {
        let code = "55d0c1a00000-55d0c1a2c000 r-xp 00001000 08:01 1234                       \
                    /opt/my tools/msfs";
        assert_eq!(
            Mapping::parse(code),
            Some(Mapping {
                range: 0x55d0_c1a0_0000..0x55d0_c1a2_c000,
                accessible: true,
                path: "/opt/my tools/msfs",
            })
        );
        let anonymous = "7f0000000000-7f0000001000 rw-p 00000000 00:00 0 ";
        assert_eq!(Mapping::parse(anonymous).map(|m| m.path), Some(""));
        let gap = "7f0000001000-7f0000002000 ---p 00000000 08:01 99   /usr/lib/libc.so.6";
        assert_eq!(Mapping::parse(gap).map(|m| m.accessible), Some(false));
        assert_eq!(Mapping::parse("garbage"), None);
    }

    #[test]
    fn code_is_the_executable_and_shared_libraries_never_cache_files() {
        let exe = Path::new("/usr/bin/msfs");
        assert!(is_code("/usr/bin/msfs", exe));
        assert!(is_code("/usr/lib/x86_64-linux-gnu/libc.so.6", exe));
        assert!(is_code("/lib64/ld-linux-x86-64.so.2", exe));
        assert!(!is_code("/var/cache/msfs/msfs-line-cache/lines", exe));
        assert!(!is_code("/var/cache/msfs/data.sorted", exe));
        assert!(!is_code("[vdso]", exe));
        assert!(!is_code("", exe));
    }

    /// Run as root here (CAP_IPC_LOCK): the lock succeeds and the kernel counts it.
    #[test]
    fn the_code_of_this_process_is_locked_and_counted_by_the_kernel() {
        let locked = lock_code().expect("lock the test binary's code");
        assert!(locked.mappings >= 2, "{locked:?}");
        let status = std::fs::read_to_string("/proc/self/status").expect("status");
        let vm_lck_kib: u64 = status
            .lines()
            .find_map(|line| line.strip_prefix("VmLck:"))
            .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
            .expect("VmLck in /proc/self/status");
        assert!(
            vm_lck_kib * 1024 >= locked.bytes,
            "VmLck {vm_lck_kib} kB < {} bytes locked",
            locked.bytes
        );
    }
}
