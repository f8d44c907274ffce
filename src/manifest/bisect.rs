//! One name looked up in a directory's TSV without reading the file whole, for manifests whose
//! rows are in listing order (`ManifestInfo::sorted_rows`): a bisection over byte offsets, a few
//! small reads (`pread`) per lookup whatever the directory's size. Used until the index is built,
//! where a lookup would otherwise parse the whole TSV (seconds for a million-entry directory).
//!
//! A row's place in the order is its `sort_key` (the name, `/` after a directory's), so a name
//! is searched twice: as a file (`name`) and as a directory (`name/`); a name listed as both is
//! a directory, as everywhere else.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;

use super::format::{Entry, EntryKind, FormatError, parse_row, sort_key};

/// Below this many bytes between the bounds, the rows are read one after another.
const SCAN_WINDOW: u64 = 16 * 1024;
/// Bytes read at a time while looking for a row's end.
const CHUNK: usize = 4096;
/// No row is longer than this (a 255-byte name escaped, an ETag and a time are far less): a
/// longer one is a damaged file, reported rather than read on.
const MAX_ROW: usize = 64 * 1024;

/// What `name` is in the sorted TSV at `path` (no file: an empty directory).
pub fn find(path: &Path, name: &str) -> Result<Option<EntryKind>, FormatError> {
    let io_error = |source| FormatError::Io {
        path: path.to_path_buf(),
        source,
    };
    let file = match File::open(path) {
        Ok(file) => file,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io_error(e)),
    };
    let size = file.metadata().map_err(io_error)?.len();
    let rows = Rows { file, path, size };
    let dir_key = format!("{name}/");
    if let Some(entry) = rows.first_at_or_after(dir_key.as_bytes())?
        && entry.name == name
        && entry.is_dir()
    {
        return Ok(Some(entry.kind));
    }
    Ok(rows
        .first_at_or_after(name.as_bytes())?
        .filter(|entry| entry.name == name)
        .map(|entry| entry.kind))
}

struct Rows<'a> {
    file: File,
    path: &'a Path,
    size: u64,
}

impl Rows<'_> {
    fn io(&self, source: io::Error) -> FormatError {
        FormatError::Io {
            path: self.path.to_path_buf(),
            source,
        }
    }

    /// The first row whose key is at or after `target`.
    ///
    /// Bounds: every row starting before `lo` has a key before `target`; every row starting
    /// at or after `hi` has a key at or after it. `lo` is always a row's start.
    fn first_at_or_after(&self, target: &[u8]) -> Result<Option<Entry>, FormatError> {
        let (mut lo, mut hi) = (0, self.size);
        let mut key = Vec::new();
        while hi - lo > SCAN_WINDOW {
            let mid = lo + (hi - lo) / 2;
            let start = self.row_start_at_or_after(mid)?;
            if start >= hi {
                // No row starts in [mid, hi): the answer starts before mid, or at hi.
                hi = mid;
                continue;
            }
            let Some((entry, next)) = self.row_at(start)? else {
                hi = mid;
                continue;
            };
            sort_key(&entry, &mut key);
            if key.as_slice() < target {
                lo = next;
            } else {
                hi = start;
            }
        }
        let mut at = lo;
        while let Some((entry, next)) = self.row_at(at)? {
            sort_key(&entry, &mut key);
            if key.as_slice() >= target {
                return Ok(Some(entry));
            }
            at = next;
        }
        Ok(None)
    }

    /// The start of the first row that starts at or after `offset` (`size` if none does).
    fn row_start_at_or_after(&self, offset: u64) -> Result<u64, FormatError> {
        if offset == 0 {
            return Ok(0);
        }
        // A row starts right after a newline: look from the byte before `offset`.
        let mut at = offset - 1;
        let mut buf = [0u8; CHUNK];
        while at < self.size {
            let n = self.read_at(&mut buf, at)?;
            if let Some(i) = buf[..n].iter().position(|b| *b == b'\n') {
                return Ok(at + i as u64 + 1);
            }
            at += n as u64;
            if at - offset > MAX_ROW as u64 {
                return Err(self.too_long(offset));
            }
        }
        Ok(self.size)
    }

    /// The row starting at `start` (skipping empty lines) and where the next one starts, or
    /// `None` at the end of the file.
    fn row_at(&self, mut start: u64) -> Result<Option<(Entry, u64)>, FormatError> {
        let mut line = Vec::new();
        let mut buf = [0u8; CHUNK];
        loop {
            if start >= self.size {
                return Ok(None);
            }
            line.clear();
            let mut at = start;
            let end = loop {
                let n = self.read_at(&mut buf, at)?;
                if let Some(i) = buf[..n].iter().position(|b| *b == b'\n') {
                    line.extend_from_slice(&buf[..i]);
                    break at + i as u64 + 1;
                }
                line.extend_from_slice(&buf[..n]);
                at += n as u64;
                if at >= self.size {
                    break self.size;
                }
                if line.len() > MAX_ROW {
                    return Err(self.too_long(start));
                }
            };
            if line.is_empty() {
                start = end;
                continue;
            }
            let text = std::str::from_utf8(&line).map_err(|_| self.bad(start, "not UTF-8"))?;
            let entry = parse_row(text).map_err(|problem| self.bad(start, &problem))?;
            return Ok(Some((entry, end)));
        }
    }

    fn read_at(&self, buf: &mut [u8], at: u64) -> Result<usize, FormatError> {
        let want = buf.len().min((self.size - at) as usize);
        let n = self
            .file
            .read_at(&mut buf[..want], at)
            .map_err(|e| self.io(e))?;
        if n == 0 && want > 0 {
            return Err(self.io(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "the file got shorter while being read",
            )));
        }
        Ok(n)
    }

    fn bad(&self, offset: u64, problem: &str) -> FormatError {
        FormatError::BadRow {
            file: self.path.to_path_buf(),
            // Bisection knows byte offsets, not line numbers.
            line: 0,
            problem: format!("at byte {offset}: {problem}"),
        }
    }

    fn too_long(&self, offset: u64) -> FormatError {
        self.bad(offset, &format!("a row longer than {MAX_ROW} bytes"))
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::time::{Duration, UNIX_EPOCH};

    use super::*;
    use crate::manifest::format::{DirWriter, Ownership};

    /// Names that sort around each other in awkward ways: a file and a directory of one name,
    /// names with bytes below `/` right after a prefix, escapes, long and multi-byte names.
    fn names(n: usize) -> Vec<String> {
        let mut names = Vec::new();
        for i in 0..n {
            names.push(format!("f{i:07}"));
            if i % 97 == 0 {
                names.push(format!("f{i:07}-x"));
                names.push(format!("f{i:07}.d"));
                names.push(format!("f{i:07} tab\there"));
            }
            if i % 1013 == 0 {
                names.push(format!("f{i:07}{}", "é".repeat(100)));
            }
        }
        names
    }

    /// A sorted TSV of `names`, every seventh a directory and every 500th both; what a full
    /// parse makes of it.
    fn sorted_tsv(dir: &Path, names: &[String]) -> BTreeMap<String, EntryKind> {
        let mut entries = Vec::new();
        for (i, name) in names.iter().enumerate() {
            let owner = (i % 3 == 0).then_some(Ownership {
                perm: 0o640,
                uid: i as u32,
                gid: 7,
            });
            if i % 7 != 0 || i % 500 == 0 {
                let at = UNIX_EPOCH + Duration::from_secs(i as u64);
                entries.push(Entry::file(name.clone(), i as u64, format!("e{i}"), at).owned(owner));
            }
            if i % 7 == 0 {
                entries.push(Entry::dir(name.clone()).owned(owner));
            }
        }
        let mut key = Vec::new();
        entries.sort_by_cached_key(|e| {
            sort_key(e, &mut key);
            key.clone()
        });
        let path = dir.join("d.tsv");
        let mut writer = DirWriter::create(&path).expect("create");
        let mut full = BTreeMap::new();
        for entry in &entries {
            writer.write(entry).expect("write");
            if !matches!(full.get(&entry.name), Some(EntryKind::Dir { .. })) {
                full.insert(entry.name.clone(), entry.kind.clone());
            }
        }
        assert!(writer.sorted(), "written in listing order");
        writer.finish().expect("finish");
        full
    }

    #[test]
    fn every_name_is_found_as_a_full_parse_finds_it_and_absent_names_are_not() {
        for n in [0, 1, 2, 50, 5_000] {
            let dir = tempfile::tempdir().expect("tempdir");
            let names = names(n);
            let full = sorted_tsv(dir.path(), &names);
            let path = dir.path().join("d.tsv");
            // Every name of the small files; of the large one (~300 KB, bisected), a spread.
            let step = if n > 50 { 11 } else { 1 };
            for name in names.iter().step_by(step).chain(names.last()) {
                assert_eq!(
                    find(&path, name).expect("find").as_ref(),
                    full.get(name),
                    "{name:?} of {n}"
                );
            }
            for absent in [
                "",
                "a",
                "f",
                "f0000000-",
                "f0000000/",
                "g",
                "f9999999",
                "\u{10ffff}",
            ] {
                if !full.contains_key(absent) {
                    assert_eq!(find(&path, absent).expect("find"), None, "{absent:?}");
                }
            }
        }
    }

    #[test]
    fn a_missing_file_is_an_empty_directory_and_a_damaged_row_an_error() {
        let dir = tempfile::tempdir().expect("tempdir");
        assert_eq!(find(&dir.path().join("none.tsv"), "x").expect("find"), None);
        let path = dir.path().join("bad.tsv");
        std::fs::write(&path, "f\ta\t1\te\t2024-05-01T12:00:00Z\nq\tb\n").expect("write");
        let error = find(&path, "b").expect_err("damaged");
        assert!(error.to_string().contains("bad.tsv"), "{error}");
    }

    #[test]
    fn a_writer_notices_rows_out_of_order() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut writer = DirWriter::create(&dir.path().join("t.tsv")).expect("create");
        for entry in [Entry::dir("a"), Entry::dir("b")] {
            writer.write(&entry).expect("write");
        }
        assert!(writer.sorted());
        // "b" (a file) sorts before "b/" (the directory written before it).
        writer
            .write(&Entry::file("b", 1, "e", UNIX_EPOCH))
            .expect("write");
        assert!(!writer.sorted());
    }
}
