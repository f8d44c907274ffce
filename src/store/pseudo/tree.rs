//! `Tree`: the shape of the generated namespace — how many directories and files each depth
//! holds, their names, which keys exist and their metadata — and the sorted runs of children
//! that the listing walks. Separate from the listing so that "what exists" can be read (and
//! trusted by `head` and reads) without the seeking and merging.

use std::time::{Duration, SystemTime};

use super::names::NameFormat;
use super::pattern::key_seed;
use crate::config::PseudoConfig;
use crate::store::ObjectMeta;

/// Deepest level that can hold files (the config has `files_at_depth_0..3`).
const LEVELS: usize = 4;
/// Every generated object's mtime: 2024-01-01T00:00:00Z.
const MTIME_SECS: u64 = 1_704_067_200;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    Dir,
    File,
}

/// Numbers `lo..hi` of one kind whose names all have one length, hence sort numerically.
#[derive(Debug, Clone, Copy)]
pub(super) struct Run {
    pub(super) kind: Kind,
    pub(super) lo: u64,
    pub(super) hi: u64,
}

/// Cuts the numbers `start..start + count` into runs of equal name length, in numeric order.
fn runs_of(fmt: &NameFormat, kind: Kind, start: u64, count: u64, out: &mut Vec<Run>) {
    if count == 0 {
        return;
    }
    let end = start + count; // checked by `Tree::new`
    let mut lo = start;
    while lo < end {
        // The first number with more digits than `lo` (padding makes all short ones equal).
        let digits = fmt.digits(lo).max(fmt.width.max(1));
        let next = u32::try_from(digits)
            .ok()
            .and_then(|d| fmt.radix.checked_pow(d))
            .unwrap_or(u64::MAX);
        let hi = next.min(end);
        out.push(Run { kind, lo, hi });
        if hi == u64::MAX {
            break;
        }
        lo = hi;
    }
}

/// The generated namespace: names, shape and the sorted child sequence of each depth.
#[derive(Debug)]
pub(super) struct Tree {
    dir_fmt: NameFormat,
    file_fmt: NameFormat,
    /// Valid dir numbers per depth: `dir_start..dir_start + subdirs[d]`.
    dir_start: u64,
    file_start: u64,
    subdirs: [u64; LEVELS],
    files: [u64; LEVELS],
    /// Children of a directory at each depth, as runs.
    pub(super) levels: [Vec<Run>; LEVELS],
    pub(super) file_size: u64,
    etag_size: String,
}

impl Tree {
    pub(super) fn new(config: &PseudoConfig) -> std::result::Result<Tree, String> {
        let compile = |what: &str, fmt: &str| {
            NameFormat::compile(fmt).ok_or_else(|| format!("PSEUDO.{what}: {fmt:?} is not valid"))
        };
        let dir_fmt = compile("dir_name_format", &config.dir_name_format)?;
        let file_fmt = compile("file_name_format", &config.file_name_format)?;
        let mut subdirs = [0u64; LEVELS];
        let mut files = [0u64; LEVELS];
        for d in 0..LEVELS {
            subdirs[d] = config
                .subdirectories_at_depth
                .get(d)
                .map_or(0, |&n| u64::from(n));
            files[d] = u64::from(config.files_at_depth[d]);
        }
        let too_big = |start: u64, counts: &[u64], what: &str| {
            let most = counts.iter().copied().max().unwrap_or(0);
            if start.checked_add(most).is_none() {
                Err(format!(
                    "PSEUDO.{what}_starting_number {start} plus the number of {what}s per \
                     directory passes 2^64"
                ))
            } else {
                Ok(())
            }
        };
        too_big(config.dir_starting_number, &subdirs, "dir")?;
        too_big(config.file_starting_number, &files, "file")?;
        let levels = std::array::from_fn(|d| {
            let mut runs = Vec::new();
            runs_of(
                &dir_fmt,
                Kind::Dir,
                config.dir_starting_number,
                subdirs[d],
                &mut runs,
            );
            runs_of(
                &file_fmt,
                Kind::File,
                config.file_starting_number,
                files[d],
                &mut runs,
            );
            runs
        });
        Ok(Tree {
            dir_fmt,
            file_fmt,
            dir_start: config.dir_starting_number,
            file_start: config.file_starting_number,
            subdirs,
            files,
            levels,
            file_size: config.file_size,
            etag_size: format!("{:x}", config.file_size),
        })
    }

    /// Appends the child name of `value` (dirs end in "/") to `out`.
    fn push_child(&self, kind: Kind, value: u64, out: &mut String) {
        match kind {
            Kind::Dir => {
                self.dir_fmt.push(value, out);
                out.push('/');
            }
            Kind::File => self.file_fmt.push(value, out),
        }
    }

    pub(super) fn child(&self, kind: Kind, value: u64) -> String {
        let mut out = String::new();
        self.push_child(kind, value, &mut out);
        out
    }

    /// The depth of directory prefix `dir` ("" or "a/b/"), if it is a generated directory.
    pub(super) fn dir_depth(&self, dir: &str) -> Option<usize> {
        let Some(inner) = dir.strip_suffix('/') else {
            return dir.is_empty().then_some(0);
        };
        let mut depth = 0;
        for segment in inner.split('/') {
            let value = self.dir_fmt.parse(segment)?;
            let count = *self.subdirs.get(depth)?;
            if value < self.dir_start || value - self.dir_start >= count {
                return None;
            }
            depth += 1;
        }
        Some(depth)
    }

    pub(super) fn is_file(&self, key: &str) -> bool {
        let (dir, name) = match key.rfind('/') {
            Some(i) => key.split_at(i + 1),
            None => ("", key),
        };
        let Some(depth) = self.dir_depth(dir) else {
            return false;
        };
        self.file_fmt
            .parse(name)
            .is_some_and(|v| v >= self.file_start && v - self.file_start < self.files[depth])
    }

    pub(super) fn meta(&self, key: String) -> ObjectMeta {
        let etag = format!("\"{:016x}-{}\"", key_seed(&key), self.etag_size);
        ObjectMeta {
            key,
            size: self.file_size,
            etag,
            last_modified: SystemTime::UNIX_EPOCH + Duration::from_secs(MTIME_SECS),
        }
    }
}
