//! Workers that keep their descriptors for the whole run, as a training job keeps its shards
//! open: whatever happens to the server meanwhile (a restart, a takeover), the same descriptors
//! must go on working.
//!
//! The held reader opens one file of each volume twice (through the page cache and with
//! O_DIRECT) and reads random ranges through those descriptors until the end, checking every
//! byte. The held writer creates one file in its own directory and appends to it through one
//! descriptor until the end — reading back what it wrote through the same descriptor now and
//! then, fsyncing now and then — then closes it; what the file must hold is its model.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::fd::IntoRawFd;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::time::Duration;

use crate::common::pattern;

use super::content::{SeedFile, Volume};
use super::io::read_all;
use super::reader::{check, describe, open, read};
use super::rng::Rng;
use super::tally::Tally;
use super::writer::Model;

const KIB: u64 = 1 << 10;
const MIB: u64 = 1 << 20;
/// The held workers pace themselves: they are there to keep descriptors busy across the run,
/// not to add load.
const PAUSE: Duration = Duration::from_millis(50);
/// The held writer's file stops growing here (it keeps reading it back).
const HELD_FILE_MAX: u64 = 16 * MIB;
/// The held writer's file name in its directory.
pub const HELD_FILE: &str = "held.bin";

/// Reads through descriptors opened once, at the start, until the run ends.
pub fn reader(volumes: &[Volume], tally: &Tally, mut rng: Rng) {
    let mut held: Vec<(File, String, &SeedFile)> = Vec::new();
    for volume in volumes {
        // The biggest file of the volume: reads land all over it.
        let Some(file) = volume.files.iter().max_by_key(|f| f.size) else {
            continue;
        };
        let path = volume.root.join(&file.path);
        for direct in [false, true] {
            let what = format!("held {}", describe(&path, direct));
            match open(tally, &path, &what, direct) {
                Ok(f) => held.push((f, what, file)),
                Err(e) => return tally.error(e),
            }
        }
    }
    while tally.running() && !held.is_empty() {
        let (f, what, file) = &held[rng.index(held.len())];
        let offset = rng.range(0, file.size + 1);
        let len = rng.range(1, MIB + 1);
        let mut buf = vec![0u8; len as usize];
        match read(tally, f, what, &mut buf, offset) {
            Ok(n) if n as u64 == len.min(file.size - offset) => {
                check(tally, what, file, offset, &buf[..n])
            }
            Ok(n) => tally.error(format!(
                "{what}: {n} bytes at {offset} (size {}), expected {}",
                file.size,
                len.min(file.size - offset)
            )),
            Err(e) => tally.error(format!("read {what} [{offset}, +{len}): {e}")),
        }
        tally.add_ops(1);
        std::thread::sleep(PAUSE);
    }
}

/// Appends to `dir/held.bin` through one descriptor until the run ends (or an operation fails),
/// closes it, checks it once more by name and returns the model of `dir`.
pub fn writer(dir: PathBuf, tally: &Tally, mut rng: Rng) -> Model {
    let mut model = Model::new();
    let path = dir.join(HELD_FILE);
    let what = path.display().to_string();
    if let Err(e) = std::fs::create_dir(&dir) {
        tally.error(format!("mkdir {}: {e}", dir.display()));
        return model;
    }
    let mut file = match OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(&path)
    {
        Ok(file) => file,
        Err(e) => {
            tally.error(format!("create {what}: {e}"));
            return model;
        }
    };
    let mut body = Vec::new();
    model.insert(HELD_FILE.to_string(), Vec::new());
    while tally.running() {
        if let Err(e) = step(&mut file, &mut body, &what, tally, &mut rng) {
            tally.error(e);
            model.insert(HELD_FILE.to_string(), body);
            return model;
        }
        tally.add_ops(1);
        std::thread::sleep(PAUSE);
    }
    // SAFETY: `into_raw_fd` hands over the descriptor, closed exactly once, here.
    if unsafe { libc::close(file.into_raw_fd()) } != 0 {
        let e = std::io::Error::last_os_error();
        tally.error(format!("close {what}: {e}"));
    }
    match read_all(&path, rng.chance(50), 256 * KIB as usize) {
        Ok(got) if got == body => {}
        Ok(got) => {
            let wrong = got.iter().zip(&body).filter(|(a, b)| a != b).count();
            tally.corrupt(
                format!(
                    "{what} at the end: {} bytes read, {} expected, {wrong} of the common bytes wrong",
                    got.len(),
                    body.len()
                ),
                (wrong + got.len().abs_diff(body.len())) as u64,
            );
        }
        Err(e) => tally.error(format!("read {what} at the end: {e}")),
    }
    model.insert(HELD_FILE.to_string(), body);
    model
}

/// Appends a chunk (until the file is `HELD_FILE_MAX` long), and now and then reads a range
/// back through the same descriptor or fsyncs it.
fn step(
    file: &mut File,
    body: &mut Vec<u8>,
    what: &str,
    tally: &Tally,
    rng: &mut Rng,
) -> Result<(), String> {
    if (body.len() as u64) < HELD_FILE_MAX {
        let chunk = pattern(rng.range(1, 64 * KIB) as usize, rng.next_u64());
        file.write_all(&chunk).map_err(|e| {
            format!(
                "write {} bytes at {} of {what}: {e}",
                chunk.len(),
                body.len()
            )
        })?;
        body.extend_from_slice(&chunk);
        tally
            .bytes_written
            .fetch_add(chunk.len() as u64, Ordering::Relaxed);
    }
    match rng.range(0, 100) {
        0..15 => {
            let offset = rng.range(0, body.len() as u64);
            let len = rng.range(1, 256 * KIB).min(body.len() as u64 - offset);
            let mut buf = vec![0u8; len as usize];
            file.read_exact_at(&mut buf, offset)
                .map_err(|e| format!("pread {len} bytes at {offset} of {what}: {e}"))?;
            let expected = &body[offset as usize..(offset + len) as usize];
            let wrong = buf.iter().zip(expected).filter(|(a, b)| a != b).count();
            if wrong > 0 {
                tally.corrupt(
                    format!("{what}: pread [{offset}, +{len}) through the held descriptor"),
                    wrong as u64,
                );
            }
        }
        15..18 => file
            .sync_data()
            .map_err(|e| format!("fdatasync {what} at {} bytes: {e}", body.len()))?,
        _ => {}
    }
    Ok(())
}
