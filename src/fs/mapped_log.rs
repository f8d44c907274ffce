//! An append-only file written through a shared mapping of its tail: an append is a copy into
//! the page cache, with no system call, and it outlives the process as a `write(2)` would (the
//! page cache belongs to the file, not to the process). The kernel-state journal appends a
//! record before nearly every reply to the kernel, so a system call per record was most of its
//! cost on metadata workloads (`bench/journal-cost.sh`).
//!
//! Only a window of [`WINDOW`] bytes is mapped at a time, so the process's resident memory holds
//! at most that much of the log however long it grows (a tmpfs page mapped counts as the
//! process's). Each window's blocks are allocated (`fallocate`) before it is mapped: a store into
//! a page that a full filesystem could not back would kill the process with `SIGBUS`, an
//! allocation refused up front is an error the caller logs.
//!
//! The file is as long as the windows it used; the bytes past the last append are zeros. A clean
//! close cuts them off; a killed process leaves them, and a reader stops at the first zero byte
//! after the last line (see [`records_of`]).

use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::path::Path;

use memmap2::{MmapMut, MmapOptions};

/// Bytes of the log mapped at a time (a multiple of the page size), and the least a log takes
/// on disk while it is written (a tmpfs under `/run` by default: memory, once per mount).
const WINDOW: usize = 256 << 10;

#[derive(Debug)]
pub struct MappedLog {
    file: File,
    /// The mapped window, from `window_at`; `None` after a window could not be allocated.
    window: Option<MmapMut>,
    window_at: u64,
    /// Bytes of the window appended to.
    used: usize,
    /// An append failed part-way: its bytes written so far get a line end before the next.
    torn: bool,
}

impl MappedLog {
    /// Creates `path`, empty (an earlier file of that name is cut to nothing).
    pub fn create(path: &Path) -> io::Result<MappedLog> {
        let file = OpenOptions::new()
            .create(true)
            .truncate(true)
            .read(true)
            .write(true)
            .open(path)?;
        let mut log = MappedLog {
            file,
            window: None,
            window_at: 0,
            used: 0,
            torn: false,
        };
        log.window = Some(log.map_window()?);
        Ok(log)
    }

    /// Appends `bytes`, a line, at the end of the log. After a failure, what part of it was
    /// written is ended as a line of its own at the next append, for a reader to skip.
    pub fn append(&mut self, bytes: &[u8]) -> io::Result<()> {
        if self.torn {
            self.copy(b"\n")?;
            self.torn = false;
        }
        let copied = self.copy(bytes);
        self.torn = copied.is_err();
        copied
    }

    fn copy(&mut self, mut bytes: &[u8]) -> io::Result<()> {
        while !bytes.is_empty() {
            if self.used == WINDOW {
                self.advance()?;
            }
            let window = match &mut self.window {
                Some(window) => window,
                // The last window could not be allocated: try again at this append.
                None => self.window.insert(self.map_window()?),
            };
            let n = bytes.len().min(WINDOW - self.used);
            window[self.used..self.used + n].copy_from_slice(&bytes[..n]);
            self.used += n;
            bytes = &bytes[n..];
        }
        Ok(())
    }

    /// Moves the window to the next `WINDOW` bytes of the file.
    fn advance(&mut self) -> io::Result<()> {
        // Unmapped first: a failed allocation must not leave the old window to be written again.
        self.window = None;
        self.window_at += WINDOW as u64;
        self.used = 0;
        self.window = Some(self.map_window()?);
        Ok(())
    }

    fn map_window(&self) -> io::Result<MmapMut> {
        let offset = libc::off_t::try_from(self.window_at).map_err(io::Error::other)?;
        // SAFETY: plain system call on a descriptor this log owns.
        let allocated =
            unsafe { libc::fallocate(self.file.as_raw_fd(), 0, offset, WINDOW as libc::off_t) };
        if allocated != 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: the file is this process's own, opened read-write and never truncated below
        // the window while it is mapped (only `Drop` cuts it, after unmapping).
        unsafe {
            MmapOptions::new()
                .offset(self.window_at)
                .len(WINDOW)
                .map_mut(&self.file)
        }
    }
}

impl Drop for MappedLog {
    /// Cuts off the zeros past the last append.
    fn drop(&mut self) {
        self.window = None;
        let _ = self.file.set_len(self.window_at + self.used as u64);
    }
}

/// Cuts `line`, read from a log, at the zeros a killed writer left after its last append;
/// true when it had them (nothing follows: the log ends there). The last line may be torn (cut
/// short by a kill): the caller skips what does not parse.
pub fn cut_zeros(line: &mut Vec<u8>) -> bool {
    match line.iter().position(|&b| b == 0) {
        Some(at) => {
            line.truncate(at);
            true
        }
        None => false,
    }
}

/// The lines of a log, read as a successor reads them (`cut_zeros`), empty ones left out.
pub fn read_lines(reader: impl io::BufRead) -> impl Iterator<Item = io::Result<Vec<u8>>> {
    let mut ended = false;
    reader
        .split(b'\n')
        .map_while(move |line| {
            if ended {
                return None;
            }
            Some(line.map(|mut line| {
                ended = cut_zeros(&mut line);
                line
            }))
        })
        .filter(|line| line.as_ref().map_or(true, |line| !line.is_empty()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(path: &Path) -> Vec<String> {
        let file = io::BufReader::new(File::open(path).expect("open"));
        read_lines(file)
            .map(|line| String::from_utf8(line.expect("read")).expect("utf-8"))
            .collect()
    }

    #[test]
    fn appends_are_in_the_file_at_once_and_a_close_cuts_the_zeros() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("log");
        let mut log = MappedLog::create(&path).expect("create");
        log.append(b"one\n").expect("append");
        log.append(b"two\n").expect("append");
        // Read while the log is open, as a successor reads the log of a killed process.
        assert_eq!(lines(&path), ["one", "two"]);
        assert_eq!(std::fs::metadata(&path).expect("stat").len(), WINDOW as u64);
        drop(log);
        assert_eq!(std::fs::read(&path).expect("read"), b"one\ntwo\n");
    }

    #[test]
    fn a_record_straddling_two_windows_reads_whole() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("log");
        let mut log = MappedLog::create(&path).expect("create");
        let filler = "x".repeat(WINDOW - 3);
        log.append(format!("{filler}\n").as_bytes())
            .expect("append");
        log.append(b"across\n").expect("append");
        log.append(b"after\n").expect("append");
        let read = lines(&path);
        assert_eq!(read.len(), 3);
        assert_eq!(read[1..], ["across", "after"]);
        assert_eq!(
            std::fs::metadata(&path).expect("stat").len(),
            2 * WINDOW as u64
        );
        drop(log);
        assert_eq!(
            std::fs::metadata(&path).expect("stat").len(),
            (WINDOW - 2 + 7 + 6) as u64
        );
    }

    #[test]
    fn a_torn_last_line_is_returned_for_the_caller_to_skip() {
        let read = |bytes: &[u8]| -> Vec<Vec<u8>> {
            read_lines(bytes).map(|line| line.expect("read")).collect()
        };
        let torn = b"{\"r\":1}\n{\"r\":2}\n{\"r\0\0\0\0\n\0\0\n";
        assert_eq!(read(torn), [&b"{\"r\":1}"[..], b"{\"r\":2}", b"{\"r"]);
        assert!(read(b"\0\0\0").is_empty());
        assert_eq!(read(b"a\n\nb"), [b"a", b"b"]);
    }
}
