use std::ptr::NonNull;

use crate::session::MAX_WRITE_SIZE;

/// Size of the buffer for reading a request from the kernel. Since the kernel may send
/// up to `MAX_WRITE_SIZE` bytes in a write request, we use that value plus some extra space.
const BUFFER_SIZE: usize = MAX_WRITE_SIZE + 4096;

/// A buffer that provides an aligned slice for FUSE operations.
///
/// msfs: the buffer is its own anonymous mapping rather than a zeroed `Vec`. A zeroed `Vec` of
/// 16 MiB comes from the allocator, which memsets it whole when it reuses freed memory: each
/// worker of each mount then kept 16 MiB resident, though the kernel writes at most the
/// negotiated `max_write` (and a header) into it. A fresh mapping reads as zeros and takes
/// memory only for the pages the kernel writes. Page alignment satisfies `fuse_in_header`'s.
#[derive(Debug)]
pub(crate) struct FuseReadBuf {
    ptr: NonNull<u8>,
}

// SAFETY: the mapping is owned by this value alone, like a `Vec`'s heap memory.
unsafe impl Send for FuseReadBuf {}

impl FuseReadBuf {
    /// Creates a new `FuseReadBuf` of `BUFFER_SIZE` bytes, mapped but not yet resident.
    pub(crate) fn new() -> Self {
        // SAFETY: an anonymous private mapping with no address hint touches no existing memory.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                BUFFER_SIZE,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        assert!(
            ptr != libc::MAP_FAILED,
            "cannot map a FUSE read buffer: {}",
            std::io::Error::last_os_error()
        );
        Self {
            ptr: NonNull::new(ptr.cast()).expect("mmap returned a non-null address"),
        }
    }

    /// Returns a mutable reference to the buffer.
    pub(crate) fn as_mut(&mut self) -> &mut [u8] {
        // SAFETY: the mapping is BUFFER_SIZE bytes, readable and writable, zero-filled at first
        // (so initialised), and borrowed mutably through `self` only.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), BUFFER_SIZE) }
    }
}

impl Drop for FuseReadBuf {
    fn drop(&mut self) {
        // SAFETY: the mapping was made in `new` with this length and is unmapped once.
        unsafe {
            libc::munmap(self.ptr.as_ptr().cast(), BUFFER_SIZE);
        }
    }
}
