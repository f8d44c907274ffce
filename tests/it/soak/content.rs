//! The pre-seeded, immutable files the readers check, and how any range of them is verified.
//!
//! A seeded file's bytes are `crate::common::pattern(size, seed)`, and its name carries its index and
//! size, so a reader knows every byte of every range it reads without sharing anything with the
//! writers (who never touch the seed tree). The pattern never repeats with a period a cache line
//! or part could align with, so a stale, shifted or misplaced block always shows as corrupt.

use std::collections::BTreeSet;
use std::path::PathBuf;

use aws_sdk_s3::primitives::ByteStream;
use futures::StreamExt;

use crate::common::garage::error_text;
use crate::common::{Garage, pattern};

use super::rng::Rng;

const KIB: u64 = 1 << 10;
const MIB: u64 = 1 << 20;
/// Seeded files are spread over this many sibling directories (`seed/d0` …).
pub const SEED_DIRS: usize = 4;
/// Uploads in flight while seeding.
const SEED_UPLOADS: usize = 8;

/// One seeded object, at `<volume root>/<path>`.
#[derive(Clone, Debug)]
pub struct SeedFile {
    /// Relative to the volume root, e.g. `seed/d2/f0042-12345`.
    pub path: String,
    pub size: u64,
    pub seed: u64,
}

/// What the readers see of one volume (or one backend of the daemon mount).
#[derive(Clone, Debug)]
pub struct Volume {
    /// The directory the volume's keys appear under.
    pub root: PathBuf,
    pub files: Vec<SeedFile>,
}

impl Volume {
    /// The seeded files at least `min` bytes long.
    pub fn big_files(&self, min: u64) -> Vec<&SeedFile> {
        self.files.iter().filter(|f| f.size >= min).collect()
    }

    /// The names expected in `seed/d<dir>`.
    pub fn names_in_dir(&self, dir: usize) -> BTreeSet<String> {
        let prefix = format!("seed/d{dir}/");
        self.files
            .iter()
            .filter_map(|f| f.path.strip_prefix(&prefix).map(str::to_string))
            .collect()
    }
}

/// `count` files from 1 KiB to a few MiB (most small, as in real trees; one empty), plus one file
/// of each size in `bigs`.
pub fn seed_set(rng: &mut Rng, count: usize, bigs: &[u64]) -> Vec<SeedFile> {
    let mut sizes: Vec<u64> = (0..count)
        .map(|i| match (i, rng.range(0, 100)) {
            (0, _) => 0,
            (_, 0..45) => rng.range(KIB, 64 * KIB),
            (_, 45..85) => rng.range(64 * KIB, MIB),
            _ => rng.range(MIB, 4 * MIB + 1),
        })
        .collect();
    sizes.extend_from_slice(bigs);
    sizes
        .into_iter()
        .enumerate()
        .map(|(i, size)| SeedFile {
            path: format!("seed/d{}/f{i:04}-{size}", i % SEED_DIRS),
            size,
            seed: rng.next_u64(),
        })
        .collect()
}

/// PUTs every file of `files` under `prefix` of `bucket`, a few at a time. The payload is left
/// unsigned (the request itself is still signed): hashing hundreds of MiB in an unoptimized
/// test build would otherwise take most of the setup time.
pub async fn upload(garage: &Garage, bucket: &str, prefix: &str, files: &[SeedFile]) {
    let client = garage.client();
    futures::stream::iter(files)
        .for_each_concurrent(SEED_UPLOADS, |file| {
            let client = client.clone();
            async move {
                let key = format!("{prefix}{}", file.path);
                let body = pattern(file.size as usize, file.seed);
                if let Err(e) = client
                    .put_object()
                    .bucket(bucket)
                    .key(&key)
                    .body(ByteStream::from(body))
                    .customize()
                    .disable_payload_signing()
                    .send()
                    .await
                {
                    panic!("seed s3://{bucket}/{key}: {}", error_text(&e));
                }
            }
        })
        .await;
}

/// How many bytes of `got`, read at `offset` of a file seeded with `seed`, differ from the
/// pattern. Compares whole words where it can, without building the expected buffer: readers
/// check every byte they read, and the tests run unoptimized.
pub fn mismatches(got: &[u8], seed: u64, offset: u64) -> u64 {
    let word_at = |pos: u64| ((pos / 8).wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ seed).to_le_bytes();
    let byte_at = |pos: u64| word_at(pos)[(pos % 8) as usize];
    // Up to the first word boundary, byte by byte.
    let head = (offset.next_multiple_of(8) - offset).min(got.len() as u64) as usize;
    let mut bad = (0..head)
        .filter(|&i| got[i] != byte_at(offset + i as u64))
        .count() as u64;
    let mut pos = offset + head as u64;
    let words = got[head..].chunks_exact(8);
    let tail = words.remainder();
    for word in words {
        let expected = word_at(pos);
        if word != expected {
            bad += word.iter().zip(expected).filter(|(a, b)| **a != *b).count() as u64;
        }
        pos += 8;
    }
    bad + tail
        .iter()
        .enumerate()
        .filter(|&(i, b)| *b != byte_at(pos + i as u64))
        .count() as u64
}

/// The verifier itself, checked against the fixture's pattern (this one runs in the normal suite).
#[test]
fn mismatches_agree_with_the_shared_pattern_at_any_offset() {
    let whole = pattern(1000, 77);
    for offset in [0usize, 1, 7, 8, 9, 500, 999] {
        assert_eq!(mismatches(&whole[offset..], 77, offset as u64), 0);
    }
    let mut spoiled = whole[3..40].to_vec();
    spoiled[5] ^= 1;
    spoiled[20] ^= 0x80;
    assert_eq!(mismatches(&spoiled, 77, 3), 2);
    // Off by one byte: nearly everything differs.
    assert!(mismatches(&whole[1..65], 77, 0) > 50);
}
