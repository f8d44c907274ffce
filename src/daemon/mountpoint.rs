//! The mountpoint as the kernel sees it: is something mounted there, and is it a dead FUSE mount
//! left by a process that died?

use std::io;
use std::path::{Path, PathBuf};

/// Undoes the `\NNN` octal escapes that /proc/self/mountinfo uses for spaces, tabs, newlines and
/// backslashes in paths.
fn unescape(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\\'
            && let Some(code) = field
                .get(i + 1..i + 4)
                .and_then(|oct| u8::from_str_radix(oct, 8).ok())
        {
            out.push(code);
            i += 4;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// What /proc/self/mountinfo says of the mount in effect on a path.
#[derive(Debug, Clone, PartialEq, Eq)]
struct MountEntry {
    /// `major:minor` of the mounted filesystem's device.
    device: String,
    /// e.g. `fuse.msfs`.
    fstype: String,
}

/// The filesystem type mounted at `path` (e.g. `fuse.msfs`), if any.
pub fn mounted_fstype(path: &Path) -> io::Result<Option<String>> {
    Ok(mount_at(path)?.map(|entry| entry.fstype))
}

/// Whether the mount in effect at `path` is a FUSE mount on device `major:minor`.
pub fn is_fuse_mount_of_device(path: &Path, major: u32, minor: u32) -> io::Result<bool> {
    Ok(mount_at(path)?.is_some_and(|entry| {
        entry.fstype.starts_with("fuse") && entry.device == format!("{major}:{minor}")
    }))
}

/// The filesystem type mounted at `path`, taken as already canonical: unlike
/// [`mounted_fstype`], this never stats the path, so a mount nobody serves cannot make it wait.
pub fn fstype_in_table(path: &Path) -> io::Result<Option<String>> {
    let table = std::fs::read_to_string("/proc/self/mountinfo")?;
    Ok(entry_in(&table, path).map(|entry| entry.fstype))
}

fn mount_at(path: &Path) -> io::Result<Option<MountEntry>> {
    let wanted = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
    let table = std::fs::read_to_string("/proc/self/mountinfo")?;
    Ok(entry_in(&table, &wanted))
}

fn entry_in(table: &str, wanted: &Path) -> Option<MountEntry> {
    // The last mount on a path is the one in effect, so keep scanning.
    let mut found = None;
    for line in table.lines() {
        let fields: Vec<&str> = line.split(' ').collect();
        let Some(sep) = fields.iter().position(|f| *f == "-") else {
            continue;
        };
        let (Some(device), Some(point), Some(fstype)) =
            (fields.get(2), fields.get(4), fields.get(sep + 1))
        else {
            continue;
        };
        if PathBuf::from(unescape(point)) == wanted {
            found = Some(MountEntry {
                device: device.to_string(),
                fstype: unescape(fstype),
            });
        }
    }
    found
}

/// Makes `path` usable as a mountpoint: it must be a directory, and a FUSE mount whose daemon
/// died ("transport endpoint is not connected") is detached first, so a restart needs no manual
/// `fusermount -u`.
pub fn prepare(path: &Path) -> Result<(), String> {
    if let Err(e) = ask_filesystem(path)
        && e.raw_os_error() == Some(libc::ENOTCONN)
    {
        tracing::warn!(path = %path.display(), "detaching a stale FUSE mount left by a dead process");
        detach(path).map_err(|e| format!("cannot detach stale mount {}: {e}", path.display()))?;
    }
    match std::fs::metadata(path) {
        Ok(meta) if meta.is_dir() => Ok(()),
        Ok(_) => Err(format!("mountpoint {} is not a directory", path.display())),
        Err(e) => Err(format!("mountpoint {}: {e}", path.display())),
    }
}

/// Asks whatever is mounted at `path` for its statistics. Unlike `stat`, which a dead FUSE
/// mount answers from the root's cached attributes for as long as they were given to live, a
/// `statfs` always reaches the filesystem (for FUSE, its daemon): a mount whose daemon died
/// answers ENOTCONN.
fn ask_filesystem(path: &Path) -> io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let c_path = std::ffi::CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path contains NUL"))?;
    // SAFETY: statfs is plain old data; zeroed is a valid value that the call overwrites.
    let mut out: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: `c_path` is NUL-terminated and outlives the call; `out` is a writable statfs.
    if unsafe { libc::statfs(c_path.as_ptr(), &mut out) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Unmounts `path` (fails with `EBUSY` while files are open there).
pub fn unmount(path: &Path) -> io::Result<()> {
    umount2(path, 0)
}

/// Lazily unmounts `path` (MNT_DETACH): it disappears from the namespace now and is torn down
/// when no longer busy.
pub fn detach(path: &Path) -> io::Result<()> {
    umount2(path, libc::MNT_DETACH)
}

fn umount2(path: &Path, flags: libc::c_int) -> io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let c_path = std::ffi::CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path contains NUL"))?;
    // SAFETY: `c_path` is a valid NUL-terminated string that outlives the call.
    let rc = unsafe { libc::umount2(c_path.as_ptr(), flags) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TABLE: &str = "\
22 1 0:21 / /proc rw,nosuid - proc proc rw
90 22 0:50 / /mnt/my\\040data rw,nosuid,nodev - fuse.msfs msfs rw,user_id=0
91 22 0:51 / /mnt/x rw - tmpfs tmpfs rw
92 91 0:52 / /mnt/x rw - fuse.msfs msfs rw
";

    fn fstype_in(table: &str, wanted: &Path) -> Option<String> {
        entry_in(table, wanted).map(|entry| entry.fstype)
    }

    #[test]
    fn escaped_mountpoints_are_matched() {
        assert_eq!(
            fstype_in(TABLE, Path::new("/mnt/my data")).as_deref(),
            Some("fuse.msfs")
        );
    }

    #[test]
    fn the_last_mount_on_a_path_wins() {
        assert_eq!(
            entry_in(TABLE, Path::new("/mnt/x")),
            Some(MountEntry {
                device: "0:52".into(),
                fstype: "fuse.msfs".into()
            })
        );
        assert_eq!(fstype_in(TABLE, Path::new("/mnt/none")), None);
    }
}
