//! One writer thread, alone in its own directory: creates, overwrites, appends to, patches,
//! truncates, renames (onto fresh and existing names) and unlinks files of mixed sizes — some
//! above the multipart threshold — fsyncs some, and reads back and checks every file it changed
//! against its own model of the directory. The model it returns is what the store must hold
//! once everything has landed.

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::fd::IntoRawFd;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;

use crate::common::pattern;

use super::io::read_all;
use super::rng::Rng;
use super::tally::Tally;

const KIB: u64 = 1 << 10;
const MIB: u64 = 1 << 20;
/// Files a writer keeps at most; beyond, it mostly unlinks.
const MAX_FILES: usize = 16;
/// Bytes a writer keeps at most (its model lives in the test's memory).
const MAX_BYTES: u64 = 160 * MIB;

/// File name → the bytes it must hold.
pub type Model = BTreeMap<String, Vec<u8>>;

/// Works in `dir` (created here) until the run ends or an operation fails, then checks the
/// whole directory once more; returns the model.
pub fn run(dir: PathBuf, tally: &Tally, rng: Rng) -> Model {
    let mut writer = Writer {
        dir,
        files: Model::new(),
        next_name: 0,
        rng,
        tally,
    };
    if let Err(e) = std::fs::create_dir(&writer.dir) {
        tally.error(format!("mkdir {}: {e}", writer.dir.display()));
        return writer.files;
    }
    while tally.running() {
        if let Err(e) = writer.step() {
            // The model may no longer match the directory: stop rather than report noise.
            tally.error(e);
            return writer.files;
        }
        tally.add_ops(1);
    }
    let names: Vec<String> = writer.files.keys().cloned().collect();
    let last = writer.check_listing().and_then(|()| {
        names
            .iter()
            .try_for_each(|name| writer.read_back(name, "at the end"))
    });
    if let Err(e) = last {
        tally.error(e);
    }
    writer.files
}

struct Writer<'a> {
    dir: PathBuf,
    files: Model,
    next_name: u64,
    rng: Rng,
    tally: &'a Tally,
}

impl Writer<'_> {
    fn step(&mut self) -> Result<(), String> {
        if self.files.is_empty() {
            return self.create();
        }
        let bytes: u64 = self.files.values().map(|b| b.len() as u64).sum();
        let full = self.files.len() >= MAX_FILES || bytes >= MAX_BYTES;
        let roll = self.rng.range(0, 100);
        if full && roll < 50 {
            return self.unlink();
        }
        match roll {
            0..18 if full => self.truncate(),
            0..18 => self.create(),
            18..28 => self.overwrite(),
            28..40 => self.append(),
            40..52 => self.patch(),
            52..60 => self.truncate(),
            60..70 => self.rename(),
            70..78 => self.unlink(),
            78..92 => {
                let name = self.pick();
                self.read_back(&name, "verify")
            }
            _ => self.check_listing(),
        }
    }

    fn create(&mut self) -> Result<(), String> {
        let name = format!("f{:05}", self.next_name);
        self.next_name += 1;
        let body = pattern(self.size() as usize, self.rng.next_u64());
        let path = self.path(&name);
        let mut file = File::create(&path).map_err(|e| format!("create {}: {e}", show(&path)))?;
        self.write_chunks(&mut file, &body, &path)?;
        self.maybe_sync(&file, &path)?;
        close(file, &path)?;
        self.files.insert(name.clone(), body);
        self.read_back(&name, "after create")
    }

    /// O_TRUNC and new content.
    fn overwrite(&mut self) -> Result<(), String> {
        let name = self.pick();
        let body = pattern(self.size() as usize, self.rng.next_u64());
        let path = self.path(&name);
        let mut file = File::create(&path).map_err(|e| format!("reopen {}: {e}", show(&path)))?;
        self.write_chunks(&mut file, &body, &path)?;
        self.maybe_sync(&file, &path)?;
        close(file, &path)?;
        self.files.insert(name.clone(), body);
        self.read_back(&name, "after overwrite")
    }

    fn append(&mut self) -> Result<(), String> {
        let name = self.pick();
        let extra = pattern(self.rng.range(1, MIB) as usize, self.rng.next_u64());
        let path = self.path(&name);
        let mut file = OpenOptions::new()
            .append(true)
            .open(&path)
            .map_err(|e| format!("open {} to append: {e}", show(&path)))?;
        self.write_chunks(&mut file, &extra, &path)?;
        self.maybe_sync(&file, &path)?;
        close(file, &path)?;
        self.model(&name).extend_from_slice(&extra);
        self.read_back(&name, "after append")
    }

    /// `pwrite` somewhere inside, at or (leaving a hole) past the end.
    fn patch(&mut self) -> Result<(), String> {
        let name = self.pick();
        let len = self.files[&name].len() as u64;
        let offset = if self.rng.chance(10) {
            len + self.rng.range(1, 64 * KIB)
        } else {
            self.rng.range(0, len + 1)
        };
        let data = pattern(self.rng.range(1, 2 * MIB) as usize, self.rng.next_u64());
        let path = self.path(&name);
        let file = OpenOptions::new()
            .write(true)
            .open(&path)
            .map_err(|e| format!("open {} to patch: {e}", show(&path)))?;
        file.write_all_at(&data, offset).map_err(|e| {
            format!(
                "pwrite {} bytes at {offset} of {}: {e}",
                data.len(),
                show(&path)
            )
        })?;
        self.wrote(data.len());
        self.maybe_sync(&file, &path)?;
        close(file, &path)?;
        let model = self.model(&name);
        let end = offset as usize + data.len();
        if model.len() < end {
            model.resize(end, 0);
        }
        model[offset as usize..end].copy_from_slice(&data);
        self.read_back(&name, &format!("after a pwrite at {offset}"))
    }

    /// `ftruncate` shorter or longer (zeros), or O_TRUNC with nothing written.
    fn truncate(&mut self) -> Result<(), String> {
        let name = self.pick();
        let path = self.path(&name);
        let len = self.files[&name].len() as u64;
        let new_len = if self.rng.chance(20) {
            let file = File::create(&path).map_err(|e| format!("O_TRUNC {}: {e}", show(&path)))?;
            close(file, &path)?;
            0
        } else {
            let new_len = self.rng.range(0, len + len / 2 + 2);
            let file = OpenOptions::new()
                .write(true)
                .open(&path)
                .map_err(|e| format!("open {} to truncate: {e}", show(&path)))?;
            file.set_len(new_len)
                .map_err(|e| format!("ftruncate {} to {new_len}: {e}", show(&path)))?;
            self.maybe_sync(&file, &path)?;
            close(file, &path)?;
            new_len
        };
        self.model(&name).resize(new_len as usize, 0);
        self.read_back(&name, &format!("after truncating to {new_len}"))
    }

    /// Onto a fresh name, or over another file of the directory.
    fn rename(&mut self) -> Result<(), String> {
        let from = self.pick();
        let to = if self.files.len() > 1 && self.rng.chance(30) {
            let others: Vec<&String> = self.files.keys().filter(|n| **n != from).collect();
            others[self.rng.index(others.len())].clone()
        } else {
            self.next_name += 1;
            format!("f{:05}", self.next_name - 1)
        };
        let (from_path, to_path) = (self.path(&from), self.path(&to));
        std::fs::rename(&from_path, &to_path)
            .map_err(|e| format!("rename {} to {}: {e}", show(&from_path), show(&to_path)))?;
        let body = self.files.remove(&from).unwrap_or_default();
        self.files.insert(to.clone(), body);
        self.gone(&from_path, "after rename")?;
        self.read_back(&to, &format!("after rename from {from}"))
    }

    fn unlink(&mut self) -> Result<(), String> {
        let name = self.pick();
        let path = self.path(&name);
        std::fs::remove_file(&path).map_err(|e| format!("unlink {}: {e}", show(&path)))?;
        self.files.remove(&name);
        self.gone(&path, "after unlink")
    }

    /// Reads `name` whole (via the page cache or O_DIRECT) and compares it with the model.
    fn read_back(&mut self, name: &str, when: &str) -> Result<(), String> {
        let path = self.path(name);
        let expected = &self.files[name];
        let size = std::fs::metadata(&path)
            .map_err(|e| format!("stat {} {when}: {e}", show(&path)))?
            .len();
        if size != expected.len() as u64 {
            return Err(format!(
                "stat {} {when}: size {size}, expected {}",
                show(&path),
                expected.len()
            ));
        }
        let direct = self.rng.chance(50);
        let chunk = self.rng.range(4 * KIB, 2 * MIB) as usize;
        let got = read_all(&path, direct, chunk)
            .map_err(|e| format!("read {} {when}: {e}", show(&path)))?;
        if got != *expected {
            // A short or long read counts its missing or extra bytes as corrupt too.
            let wrong = got.iter().zip(expected).filter(|(a, b)| a != b).count();
            let how = if direct { ", O_DIRECT" } else { "" };
            self.tally.corrupt(
                format!(
                    "{} {when}: {} bytes read, {} expected, {wrong} of the common bytes wrong{how}",
                    show(&path),
                    got.len(),
                    expected.len()
                ),
                (wrong + got.len().abs_diff(expected.len())) as u64,
            );
        }
        Ok(())
    }

    /// The directory lists exactly the model's names, each with its size.
    fn check_listing(&mut self) -> Result<(), String> {
        let mut listed = BTreeMap::new();
        let entries =
            std::fs::read_dir(&self.dir).map_err(|e| format!("list {}: {e}", show(&self.dir)))?;
        for entry in entries {
            let entry = entry.map_err(|e| format!("list {}: {e}", show(&self.dir)))?;
            let size = entry
                .metadata()
                .map_err(|e| format!("stat {}: {e}", show(&entry.path())))?
                .len();
            listed.insert(entry.file_name().to_string_lossy().into_owned(), size);
        }
        let expected: BTreeMap<String, u64> = self
            .files
            .iter()
            .map(|(name, body)| (name.clone(), body.len() as u64))
            .collect();
        if listed != expected {
            return Err(format!(
                "list {}: got {listed:?}, expected {expected:?}",
                show(&self.dir)
            ));
        }
        Ok(())
    }

    /// A removed name must be gone at once.
    fn gone(&self, path: &Path, when: &str) -> Result<(), String> {
        match std::fs::metadata(path) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(format!("stat {} {when}: {e}", show(path))),
            Ok(meta) => Err(format!(
                "{} still there {when} (size {})",
                show(path),
                meta.len()
            )),
        }
    }

    /// Writes `body` in chunks of a few random sizes: small writes on small files, up to 1 MiB.
    fn write_chunks(&mut self, file: &mut File, body: &[u8], path: &Path) -> Result<(), String> {
        let small = body.len() < 256 * KIB as usize && self.rng.chance(30);
        let mut rest = body;
        while !rest.is_empty() {
            let max = if small { 4 * KIB } else { MIB };
            let n = (self.rng.range(512, max + 1) as usize).min(rest.len());
            file.write_all(&rest[..n]).map_err(|e| {
                format!(
                    "write {n} bytes at {} of {}: {e}",
                    body.len() - rest.len(),
                    show(path)
                )
            })?;
            rest = &rest[n..];
        }
        self.wrote(body.len());
        Ok(())
    }

    /// `fsync` one change in five, `fdatasync` one in twenty: both wait for the commit.
    fn maybe_sync(&mut self, file: &File, path: &Path) -> Result<(), String> {
        match self.rng.range(0, 100) {
            0..20 => file
                .sync_all()
                .map_err(|e| format!("fsync {}: {e}", show(path))),
            20..25 => file
                .sync_data()
                .map_err(|e| format!("fdatasync {}: {e}", show(path))),
            _ => Ok(()),
        }
    }

    /// Mostly small files, some of a few MiB, a few above the 16 MiB multipart threshold.
    fn size(&mut self) -> u64 {
        match self.rng.range(0, 100) {
            0..50 => self.rng.range(0, 16 * KIB),
            50..80 => self.rng.range(16 * KIB, 512 * KIB),
            80..96 => self.rng.range(512 * KIB, 6 * MIB),
            _ => self.rng.range(16 * MIB, 40 * MIB),
        }
    }

    fn pick(&mut self) -> String {
        let index = self.rng.index(self.files.len());
        self.files.keys().nth(index).cloned().unwrap_or_default()
    }

    fn model(&mut self, name: &str) -> &mut Vec<u8> {
        self.files.entry(name.to_string()).or_default()
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    fn wrote(&self, n: usize) {
        self.tally
            .bytes_written
            .fetch_add(n as u64, Ordering::Relaxed);
    }
}

/// Closes `file` and reports what `close(2)` says, which dropping a `File` would ignore: an error
/// the mount reports at close is an I/O error like any other.
fn close(file: File, path: &Path) -> Result<(), String> {
    // SAFETY: `into_raw_fd` hands over the descriptor, closed exactly once, here.
    if unsafe { libc::close(file.into_raw_fd()) } == 0 {
        Ok(())
    } else {
        Err(format!(
            "close {}: {}",
            show(path),
            std::io::Error::last_os_error()
        ))
    }
}

fn show(path: &Path) -> std::path::Display<'_> {
    path.display()
}
