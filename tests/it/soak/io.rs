//! Reading through the mount both ways the kernel offers: through the page cache, and with
//! O_DIRECT, where every byte comes from a FUSE read that msfs answers. Workers pick either at
//! random, so both paths stay under load.

use std::fs::File;
use std::io;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path;

/// Opens `path` read-only, with O_DIRECT if `direct`. (FUSE puts no alignment rule on O_DIRECT
/// buffers or offsets, so plain `Vec`s and odd offsets are fine.)
pub fn open_read(path: &Path, direct: bool) -> io::Result<File> {
    let mut options = std::fs::OpenOptions::new();
    options.read(true);
    if direct {
        options.custom_flags(libc::O_DIRECT);
    }
    options.open(path)
}

/// Fills as much of `buf` as the file holds from `offset`: short only at end of file.
pub fn read_full_at(file: &File, buf: &mut [u8], offset: u64) -> io::Result<usize> {
    let mut done = 0;
    while done < buf.len() {
        match file.read_at(&mut buf[done..], offset + done as u64) {
            Ok(0) => break,
            Ok(n) => done += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(done)
}

/// The whole file, read in chunks of `chunk` bytes.
pub fn read_all(path: &Path, direct: bool, chunk: usize) -> io::Result<Vec<u8>> {
    let file = open_read(path, direct)?;
    let mut out = Vec::new();
    let mut buf = vec![0u8; chunk.max(1)];
    loop {
        let n = read_full_at(&file, &mut buf, out.len() as u64)?;
        out.extend_from_slice(&buf[..n]);
        if n < buf.len() {
            return Ok(out);
        }
    }
}
