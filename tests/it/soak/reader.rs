//! One reader thread: over and over, it picks a volume and one of its seeded files and checks
//! it — whole, in random ranges, in the big objects (whose lines the small cache keeps
//! evicting), at and across end of file — or lists a seed directory and stats its entries.
//! Every byte is compared with the pattern its file was seeded with. Now and then it also lists
//! a writer's directory and stats what it finds there, as `ls -l` would while a job writes: it
//! cannot know what to expect there, but the writer's own checks see whatever the listing
//! disturbs.

use std::collections::BTreeSet;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;

use super::content::{SEED_DIRS, SeedFile, Volume, mismatches};
use super::io::{open_read, read_full_at};
use super::rng::Rng;
use super::tally::Tally;

const KIB: u64 = 1 << 10;
const MIB: u64 = 1 << 20;
/// Files at least this big count as "big": more lines than the cache holds.
const BIG: u64 = 32 * MIB;
/// Entries of a listed directory that are stat'ed too.
const STATS_PER_LISTING: usize = 8;

pub fn run(volumes: &[Volume], busy_dirs: &[PathBuf], tally: &Tally, mut rng: Rng) {
    while tally.running() {
        if !busy_dirs.is_empty() && rng.chance(8) {
            let dir = &busy_dirs[rng.index(busy_dirs.len())];
            let listed = tally.reader_call(|| format!("list {}", dir.display()), || list_busy(dir));
            if let Err(e) = listed {
                tally.error(e);
            }
            tally.add_ops(1);
            continue;
        }
        let volume = &volumes[rng.index(volumes.len())];
        let file = &volume.files[rng.index(volume.files.len())];
        let direct = rng.chance(50);
        let result = match rng.range(0, 100) {
            0..30 => whole(volume, file, direct, &mut rng, tally),
            30..60 => {
                let count = rng.range(1, 9);
                ranges(volume, file, direct, count, &mut rng, tally)
            }
            60..78 => match volume.big_files(BIG).as_slice() {
                [] => Ok(()),
                big => {
                    let file = big[rng.index(big.len())];
                    ranges(volume, file, direct, 16, &mut rng, tally)
                }
            },
            78..90 => end_of_file(volume, file, direct, &mut rng, tally),
            _ => tally.reader_call(
                || format!("list a seed directory of {}", volume.root.display()),
                || listing(volume, &mut rng),
            ),
        };
        if let Err(e) = result {
            tally.error(e);
        }
        tally.add_ops(1);
    }
}

/// The whole file, sequentially, in chunks of a random size, to its end.
fn whole(
    volume: &Volume,
    file: &SeedFile,
    direct: bool,
    rng: &mut Rng,
    tally: &Tally,
) -> Result<(), String> {
    let path = volume.root.join(&file.path);
    let what = describe(&path, direct);
    let f = open(tally, &path, &what, direct)?;
    let mut buf = vec![0u8; rng.range(4 * KIB, MIB + 1) as usize];
    let mut offset = 0u64;
    loop {
        let n = read(tally, &f, &what, &mut buf, offset)
            .map_err(|e| format!("read {what} at {offset}: {e}"))?;
        check(tally, &what, file, offset, &buf[..n]);
        offset += n as u64;
        if n < buf.len() {
            break;
        }
    }
    if offset != file.size {
        return Err(format!("{what}: read {offset} bytes of {}", file.size));
    }
    Ok(())
}

/// `count` reads at random offsets, of lengths from a byte to a few MiB.
fn ranges(
    volume: &Volume,
    file: &SeedFile,
    direct: bool,
    count: u64,
    rng: &mut Rng,
    tally: &Tally,
) -> Result<(), String> {
    let path = volume.root.join(&file.path);
    let what = describe(&path, direct);
    let f = open(tally, &path, &what, direct)?;
    for _ in 0..count {
        let offset = rng.range(0, file.size + 1);
        let len = match rng.range(0, 10) {
            0..4 => rng.range(1, 4 * KIB + 1),
            4..8 => rng.range(4 * KIB, 256 * KIB + 1),
            _ => rng.range(256 * KIB, 3 * MIB),
        };
        let mut buf = vec![0u8; len as usize];
        let n = read(tally, &f, &what, &mut buf, offset)
            .map_err(|e| format!("read {what} [{offset}, +{len}): {e}"))?;
        let expected = len.min(file.size - offset);
        if n as u64 != expected {
            return Err(format!(
                "{what}: {n} bytes at {offset} (size {}), expected {expected}",
                file.size
            ));
        }
        check(tally, &what, file, offset, &buf[..n]);
    }
    Ok(())
}

/// A read at end of file returns nothing; one across it returns exactly the tail.
fn end_of_file(
    volume: &Volume,
    file: &SeedFile,
    direct: bool,
    rng: &mut Rng,
    tally: &Tally,
) -> Result<(), String> {
    let path = volume.root.join(&file.path);
    let what = describe(&path, direct);
    let f = open(tally, &path, &what, direct)?;
    let mut buf = vec![0u8; 8192];
    let n = read(tally, &f, &what, &mut buf, file.size)
        .map_err(|e| format!("read {what} at its end: {e}"))?;
    if n != 0 {
        return Err(format!(
            "{what}: {n} bytes past the end (size {})",
            file.size
        ));
    }
    let tail = rng.range(1, 4097).min(file.size);
    let offset = file.size - tail;
    let n = read(tally, &f, &what, &mut buf, offset)
        .map_err(|e| format!("read {what} across its end: {e}"))?;
    if n as u64 != tail {
        return Err(format!(
            "{what}: {n} bytes from {offset}, expected the {tail}-byte tail"
        ));
    }
    check(tally, &what, file, offset, &buf[..n]);
    Ok(())
}

/// A seed directory lists exactly its seeded names, and a few of them stat to their size.
fn listing(volume: &Volume, rng: &mut Rng) -> Result<(), String> {
    let index = rng.index(SEED_DIRS);
    let dir = volume.root.join(format!("seed/d{index}"));
    let expected = volume.names_in_dir(index);
    let mut names = BTreeSet::new();
    for entry in std::fs::read_dir(&dir).map_err(|e| format!("list {}: {e}", dir.display()))? {
        let entry = entry.map_err(|e| format!("list {}: {e}", dir.display()))?;
        names.insert(entry.file_name().to_string_lossy().into_owned());
    }
    if names != expected {
        let missing: Vec<_> = expected.difference(&names).collect();
        let extra: Vec<_> = names.difference(&expected).collect();
        return Err(format!(
            "list {}: missing {missing:?}, unexpected {extra:?}",
            dir.display()
        ));
    }
    let prefix = format!("seed/d{index}/");
    let files: Vec<&SeedFile> = volume
        .files
        .iter()
        .filter(|f| f.path.starts_with(&prefix))
        .collect();
    for _ in 0..STATS_PER_LISTING.min(files.len()) {
        let file = files[rng.index(files.len())];
        let path = volume.root.join(&file.path);
        let len = std::fs::metadata(&path)
            .map_err(|e| format!("stat {}: {e}", path.display()))?
            .len();
        if len != file.size {
            return Err(format!(
                "stat {}: size {len}, seeded {}",
                path.display(),
                file.size
            ));
        }
    }
    Ok(())
}

/// Lists a directory another thread is changing and stats each entry. Names may come and go
/// between the listing and the stat (or before the writer has created its directory): only
/// other errors count.
fn list_busy(dir: &Path) -> Result<(), String> {
    let gone = |e: &std::io::Error| e.kind() == std::io::ErrorKind::NotFound;
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if gone(&e) => return Ok(()),
        Err(e) => return Err(format!("list {}: {e}", dir.display())),
    };
    for entry in entries {
        let entry = entry.map_err(|e| format!("list {}: {e}", dir.display()))?;
        match std::fs::metadata(entry.path()) {
            Ok(_) => {}
            Err(e) if gone(&e) => {}
            Err(e) => return Err(format!("stat {}: {e}", entry.path().display())),
        }
    }
    Ok(())
}

/// Opens `path` for reading, timed.
pub fn open(tally: &Tally, path: &Path, what: &str, direct: bool) -> Result<File, String> {
    tally
        .reader_call(|| format!("open {what}"), || open_read(path, direct))
        .map_err(|e| format!("open {what}: {e}"))
}

/// Fills `buf` from `offset` of `file` (short only at its end), timed.
pub fn read(
    tally: &Tally,
    file: &File,
    what: &str,
    buf: &mut [u8],
    offset: u64,
) -> std::io::Result<usize> {
    let len = buf.len();
    tally.reader_call(
        || format!("read {len} bytes at {offset} of {what}"),
        || read_full_at(file, buf, offset),
    )
}

pub fn check(tally: &Tally, what: &str, file: &SeedFile, offset: u64, got: &[u8]) {
    tally
        .bytes_read
        .fetch_add(got.len() as u64, Ordering::Relaxed);
    let bad = mismatches(got, file.seed, offset);
    if bad > 0 {
        let end = offset + got.len() as u64;
        tally.corrupt(format!("{what} [{offset}, {end})"), bad);
    }
}

pub fn describe(path: &Path, direct: bool) -> String {
    let how = if direct { " (O_DIRECT)" } else { "" };
    format!("{}{how}", path.display())
}
