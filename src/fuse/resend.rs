//! `FUSE_NOTIFY_RESEND`: asks the kernel to queue again every request a server has read from a
//! connection and not answered — those a killed predecessor took with it.
//!
//! The kernel (6.9 and later, which advertise `FUSE_HAS_RESEND` in INIT) moves such requests
//! back to the pending queue, their `unique` marked with bit 63, and the next read hands them
//! out again. fuser 0.18 has no call for it; the notification is a bare 16-byte
//! `fuse_out_header` (no payload), so it is written here. On older kernels those requests stay
//! unanswered until the application gives up or the mount goes; nothing replays them.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};

/// `fuse_notify_code::FUSE_NOTIFY_RESEND` (include/uapi/linux/fuse.h, ABI 7.40).
const FUSE_NOTIFY_RESEND: i32 = 7;

/// Asks the kernel behind `fuse_fd` to resend its unanswered requests.
pub fn request_resend(fuse_fd: BorrowedFd<'_>) -> io::Result<()> {
    // struct fuse_out_header { uint32_t len; int32_t error; uint64_t unique; }: a notification
    // carries its code in `error` and a zero `unique`.
    let mut header = [0u8; 16];
    header[0..4].copy_from_slice(&16u32.to_ne_bytes());
    header[4..8].copy_from_slice(&FUSE_NOTIFY_RESEND.to_ne_bytes());
    // SAFETY: writes 16 bytes from a live buffer to a descriptor the caller keeps open.
    let written = unsafe { libc::write(fuse_fd.as_raw_fd(), header.as_ptr().cast(), header.len()) };
    match written {
        16 => Ok(()),
        n if n < 0 => Err(io::Error::last_os_error()),
        n => Err(io::Error::other(format!(
            "short write of a FUSE notification: {n} of 16 bytes"
        ))),
    }
}
