//! Bind mounts: how a volume whose root is one backend reaches its target.

use std::ffi::CString;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

fn c_path(path: &Path) -> io::Result<CString> {
    CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path contains NUL"))
}

/// Bind-mounts `source` onto `target`.
pub fn bind(source: &Path, target: &Path) -> io::Result<()> {
    let (source, target) = (c_path(source)?, c_path(target)?);
    // SAFETY: both strings are valid, NUL-terminated and outlive the call; no fs type or data.
    let rc = unsafe {
        libc::mount(
            source.as_ptr(),
            target.as_ptr(),
            std::ptr::null(),
            libc::MS_BIND,
            std::ptr::null(),
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Removes the bind mount at `target`, lazily if it is busy; nothing mounted is fine.
pub fn unbind(target: &Path) -> io::Result<()> {
    let path = c_path(target)?;
    // SAFETY: `path` is a valid NUL-terminated string that outlives the calls.
    let rc = unsafe { libc::umount2(path.as_ptr(), 0) };
    if rc == 0 {
        return Ok(());
    }
    match io::Error::last_os_error().raw_os_error() {
        Some(libc::EINVAL) | Some(libc::ENOENT) => Ok(()),
        Some(libc::EBUSY) => {
            // SAFETY: as above.
            let rc = unsafe { libc::umount2(path.as_ptr(), libc::MNT_DETACH) };
            if rc == 0 {
                Ok(())
            } else {
                Err(io::Error::last_os_error())
            }
        }
        _ => Err(io::Error::last_os_error()),
    }
}
