//! Whether a process that closes a descriptor of a file still has another one open for writing
//! on it, read from `/proc`.
//!
//! The kernel sends FUSE a FLUSH at every `close(2)` and never says whether the descriptor was
//! the open file's last: after `dup2` it is not. A shell redirect (`echo x > f`) opens the file,
//! `dup2`s it to stdout and closes the first descriptor before anything is written. By the time
//! the FLUSH arrives the closed descriptor is gone from the process's table, so any descriptor
//! of the file still listed in `/proc/PID/fd` is another one, whose own close FLUSHes again.
//!
//! A descriptor counts when all of these hold: its target path ends with the file's path in
//! its backend, `/proc/PID/fdinfo` gives the file's inode number and a write access mode, and
//! its mount is a FUSE mount. That does not tell two msfs mounts apart whose files have the
//! same path and inode number, both open for writing in the same process; the cost of taking
//! one for the other is a commit that starts at the last close's RELEASE instead of before
//! that close returns. Anything that cannot be read (another PID namespace, which the kernel
//! reports as PID 0; a process gone or exiting, whose table is already empty; no permission)
//! answers "no other descriptor", which costs a commit, never a missing one.

use std::os::unix::ffi::OsStrExt;

/// Descriptors of one process looked at, at most (the first ones `/proc` lists): past them, a
/// process holding more (10,000 open files) is answered "no other descriptor", rather than
/// having each of its closes read thousands of `/proc` entries.
const DESCRIPTORS_LOOKED_AT: usize = 256;

/// The file a FLUSH was for, as `/proc` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct OpenFile {
    /// The inode number the kernel was given for the file.
    pub ino: u64,
    /// `/` and the file's path inside its backend: the end of every path the kernel shows
    /// for it, whatever the mountpoint (or a bind mount of a backend's directory).
    pub path_suffix: String,
}

/// Whether process `pid` holds a descriptor open for writing on `file` (see the module docs).
/// Blocking file I/O on `/proc`: run it on the blocking pool.
pub(super) fn another_writer(pid: u32, file: &OpenFile) -> bool {
    another_writer_on(pid, file, is_fuse)
}

fn is_fuse(fstype: &str) -> bool {
    fstype == "fuse" || fstype.starts_with("fuse.")
}

/// [`another_writer`], with the test a descriptor's mount type (`fuse.msfs`) must pass.
fn another_writer_on(pid: u32, file: &OpenFile, mount_ok: impl Fn(&str) -> bool) -> bool {
    if pid == 0 {
        return false;
    }
    let Ok(entries) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return false;
    };
    for entry in entries.take(DESCRIPTORS_LOOKED_AT).flatten() {
        let Ok(target) = std::fs::read_link(entry.path()) else {
            continue;
        };
        if !target
            .as_os_str()
            .as_bytes()
            .ends_with(file.path_suffix.as_bytes())
        {
            continue;
        }
        let fd = entry.file_name();
        let fd = fd.to_string_lossy();
        let Ok(info) = std::fs::read_to_string(format!("/proc/{pid}/fdinfo/{fd}")) else {
            continue;
        };
        let Some(info) = FdInfo::parse(&info) else {
            continue;
        };
        if info.ino != file.ino || !info.writable() {
            continue;
        }
        let Ok(mounts) = std::fs::read_to_string(format!("/proc/{pid}/mountinfo")) else {
            continue;
        };
        if mount_type(&mounts, info.mnt_id).is_some_and(&mount_ok) {
            return true;
        }
    }
    false
}

/// What `/proc/PID/fdinfo/FD` says of a descriptor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct FdInfo {
    /// The open flags (`O_WRONLY`, `O_RDWR`, …).
    flags: u32,
    mnt_id: u64,
    ino: u64,
}

impl FdInfo {
    /// Parses the `flags:` (octal), `mnt_id:` and `ino:` lines; `None` without all three.
    fn parse(text: &str) -> Option<FdInfo> {
        let (mut flags, mut mnt_id, mut ino) = (None, None, None);
        for line in text.lines() {
            let Some((key, value)) = line.split_once(':') else {
                continue;
            };
            let value = value.trim();
            match key {
                "flags" => flags = u32::from_str_radix(value, 8).ok(),
                "mnt_id" => mnt_id = value.parse().ok(),
                "ino" => ino = value.parse().ok(),
                _ => {}
            }
        }
        Some(FdInfo {
            flags: flags?,
            mnt_id: mnt_id?,
            ino: ino?,
        })
    }

    fn writable(&self) -> bool {
        let mode = self.flags & libc::O_ACCMODE as u32;
        mode == libc::O_WRONLY as u32 || mode == libc::O_RDWR as u32
    }
}

/// The filesystem type of mount `mnt_id` in a `/proc/PID/mountinfo` text
/// (`36 35 0:52 / /mnt rw,nosuid - fuse.msfs data rw,user_id=0`).
fn mount_type(mountinfo: &str, mnt_id: u64) -> Option<&str> {
    mountinfo.lines().find_map(|line| {
        let (id, _) = line.split_once(' ')?;
        if id.parse::<u64>().ok()? != mnt_id {
            return None;
        }
        let (_, after) = line.split_once(" - ")?;
        after.split(' ').next()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    fn our_pid() -> u32 {
        std::process::id()
    }

    /// A file of a temporary directory, open for writing, and how `/proc` shows it.
    fn open_temp_file(name: &str) -> (tempfile::TempDir, std::fs::File, OpenFile) {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join(name);
        let file = std::fs::File::create(&path).expect("create");
        let ino = file.metadata().expect("stat").ino();
        let wanted = OpenFile {
            ino,
            path_suffix: format!("/{name}"),
        };
        (dir, file, wanted)
    }

    #[test]
    fn a_duplicate_left_open_is_another_writer() {
        let (_dir, file, wanted) = open_temp_file("dup-left-open");
        let duplicate = file.try_clone().expect("dup");
        drop(file);
        assert!(another_writer_on(our_pid(), &wanted, |_| true));
        drop(duplicate);
        assert!(!another_writer_on(our_pid(), &wanted, |_| true));
    }

    #[test]
    fn a_descriptor_open_for_reading_only_is_not_a_writer() {
        let (dir, file, wanted) = open_temp_file("read-only");
        let reader = std::fs::File::open(dir.path().join("read-only")).expect("open");
        drop(file);
        assert!(!another_writer_on(our_pid(), &wanted, |_| true));
        drop(reader);
    }

    #[test]
    fn another_file_of_the_same_name_or_inode_is_not_the_file() {
        let (_dir, file, wanted) = open_temp_file("same-name");
        let other_ino = OpenFile {
            ino: wanted.ino + 1,
            ..wanted.clone()
        };
        let other_name = OpenFile {
            path_suffix: "/another-name".into(),
            ..wanted.clone()
        };
        assert!(another_writer_on(our_pid(), &wanted, |_| true));
        assert!(!another_writer_on(our_pid(), &other_ino, |_| true));
        assert!(!another_writer_on(our_pid(), &other_name, |_| true));
        drop(file);
    }

    #[test]
    fn only_a_fuse_mount_holds_the_file() {
        let (_dir, file, wanted) = open_temp_file("on-a-local-disk");
        // The temporary directory is not on a FUSE mount.
        assert!(!another_writer(our_pid(), &wanted));
        drop(file);
        assert!(is_fuse("fuse.msfs") && is_fuse("fuse"));
        assert!(!is_fuse("ext4") && !is_fuse("tmpfs"));
    }

    #[test]
    fn an_unknown_or_unreadable_process_has_no_other_writer() {
        let wanted = OpenFile {
            ino: 1,
            path_suffix: "/x".into(),
        };
        // PID 0: the closer is in a PID namespace the server cannot see.
        assert!(!another_writer_on(0, &wanted, |_| true));
        assert!(!another_writer_on(u32::MAX, &wanted, |_| true));
    }

    #[test]
    fn fdinfo_gives_flags_mount_and_inode() {
        let text = "pos:\t0\nflags:\t0100001\nmnt_id:\t29\nino:\t1234\n";
        let info = FdInfo::parse(text).expect("parsed");
        assert_eq!(
            info,
            FdInfo {
                flags: 0o100001,
                mnt_id: 29,
                ino: 1234
            }
        );
        assert!(info.writable());
        let read_only = FdInfo::parse("flags:\t0100000\nmnt_id:\t29\nino:\t1\n").expect("parsed");
        assert!(!read_only.writable());
        let rdwr = FdInfo::parse("flags:\t02\nmnt_id:\t1\nino:\t1\n").expect("parsed");
        assert!(rdwr.writable());
        assert_eq!(FdInfo::parse("pos:\t0\nflags:\t01\n"), None, "no inode");
    }

    #[test]
    fn mountinfo_gives_the_type_of_a_mount_by_its_id() {
        let text = "22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw\n\
                    36 22 0:52 / /tmp/m\\040x rw,nosuid,nodev - fuse.msfs data rw,user_id=0\n\
                    37 22 0:53 / /tmp/y rw shared:7 master:2 - tmpfs none rw\n";
        assert_eq!(mount_type(text, 36), Some("fuse.msfs"));
        assert_eq!(mount_type(text, 37), Some("tmpfs"));
        assert_eq!(mount_type(text, 22), Some("ext4"));
        assert_eq!(mount_type(text, 3), None);
    }
}
