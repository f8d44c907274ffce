//! How a file's content is cut into multipart-upload parts, and where each part's bytes come
//! from: unchanged ranges of the base object are copied server-side (UploadPartCopy), parts
//! uploaded earlier and unchanged since are reused, everything else is uploaded.
//!
//! Parts sit on a fixed grid of `part_size` bytes (part `i` is bytes `i*part_size..`), so a part
//! uploaded while the application was still writing keeps its place when more is written, and a
//! rewritten part can be uploaded again under the same number. Every part but the last is a full
//! grid cell, which keeps S3's rule that parts are at least 5 MiB except the last.

use std::ops::Range;

use super::extents::Extents;

/// S3's smallest part (all but the last).
pub const MIN_PART: u64 = 5 << 20;
/// S3's most parts in one upload.
pub const MAX_PARTS: u64 = crate::store::MAX_PARTS;
/// The grid for files up to `DEFAULT_PART * MAX_PARTS` (78 GiB): big enough to keep request
/// counts low, small enough that rewriting a few bytes re-sends little.
pub const DEFAULT_PART: u64 = 8 << 20;

/// The part size for a file of `size` bytes: [`DEFAULT_PART`], or the smallest whole number of
/// MiB that keeps the part count within [`MAX_PARTS`]; never past S3's 5 GiB part (sizes beyond
/// `MAX_PARTS` such parts are refused before they reach a commit).
pub fn part_size_for(size: u64) -> u64 {
    const MIB: u64 = 1 << 20;
    let needed = size.div_ceil(MAX_PARTS).div_ceil(MIB) * MIB;
    needed.clamp(DEFAULT_PART, crate::store::MAX_PART_SIZE)
}

/// How many parts a file of `size` bytes has on a grid of `part_size`.
pub fn part_count(size: u64, part_size: u64) -> u64 {
    size.div_ceil(part_size)
}

/// The byte range of part index `index` (0-based) of a file of `size` bytes.
pub fn part_range(index: u64, part_size: u64, size: u64) -> Range<u64> {
    let start = index * part_size;
    start..(start + part_size).min(size)
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// Already uploaded in this upload with exactly these bytes.
    Reuse,
    /// Every byte is the base object's, at the same offsets: copy it server-side.
    Copy,
    /// Built locally (written bytes, base bytes around them, zeros) and uploaded.
    Upload,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlannedPart {
    /// 0-based grid index; the S3 part number is `index + 1`.
    pub index: u64,
    pub range: Range<u64>,
    pub source: Source,
}

impl PlannedPart {
    pub fn number(&self) -> i32 {
        // Bounded by MAX_PARTS through `part_size_for`.
        i32::try_from(self.index + 1).unwrap_or(i32::MAX)
    }
}

/// Plans every part of a file of `size` bytes whose bytes are: `dirty` ranges from local
/// storage, else the base object's bytes below `base_len`, else zeros. `reusable(index, range)`
/// says whether an earlier upload of that part (of exactly that range) is still current.
pub fn plan_parts(
    size: u64,
    part_size: u64,
    base_len: u64,
    dirty: &Extents,
    reusable: impl Fn(u64, &Range<u64>) -> bool,
) -> Vec<PlannedPart> {
    (0..part_count(size, part_size))
        .map(|index| {
            let range = part_range(index, part_size, size);
            let source = if reusable(index, &range) {
                Source::Reuse
            } else if range.end <= base_len && !dirty.overlaps(range.clone()) {
                Source::Copy
            } else {
                Source::Upload
            };
            PlannedPart {
                index,
                range,
                source,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    #[test]
    fn part_size_grows_only_past_the_part_limit() {
        assert_eq!(part_size_for(0), DEFAULT_PART);
        assert_eq!(part_size_for(DEFAULT_PART * MAX_PARTS), DEFAULT_PART);
        let huge = DEFAULT_PART * MAX_PARTS + 1;
        let size = part_size_for(huge);
        assert!(size > DEFAULT_PART && size.is_multiple_of(MIB));
        assert!(part_count(huge, size) <= MAX_PARTS);
        let five_tib = 5 * (1u64 << 40);
        assert!(part_count(five_tib, part_size_for(five_tib)) <= MAX_PARTS);
        let largest = crate::store::MAX_OBJECT_SIZE;
        assert_eq!(part_size_for(largest), crate::store::MAX_PART_SIZE);
        assert_eq!(part_count(largest, part_size_for(largest)), MAX_PARTS);
        assert_eq!(
            part_size_for(u64::MAX),
            crate::store::MAX_PART_SIZE,
            "never a part past 5 GiB"
        );
    }

    #[test]
    fn a_small_rewrite_in_a_large_object_uploads_one_part_and_copies_the_rest() {
        let size = 1024 * MIB;
        let mut dirty = Extents::new();
        dirty.insert(100 * MIB + 5..100 * MIB + 4096 + 5);
        let parts = plan_parts(size, DEFAULT_PART, size, &dirty, |_, _| false);
        assert_eq!(parts.len(), 128);
        let uploads: Vec<_> = parts
            .iter()
            .filter(|p| p.source == Source::Upload)
            .collect();
        assert_eq!(uploads.len(), 1);
        assert_eq!(uploads[0].index, 12);
        assert_eq!(uploads[0].number(), 13);
        assert!(parts.iter().all(|p| p.source != Source::Reuse));
        // The grid covers the file exactly, every part but the last at least MIN_PART.
        assert_eq!(parts[0].range.start, 0);
        assert_eq!(parts.last().map(|p| p.range.end), Some(size));
        assert!(parts.windows(2).all(|w| w[0].range.end == w[1].range.start));
        assert!(
            parts[..parts.len() - 1]
                .iter()
                .all(|p| p.range.end - p.range.start >= MIN_PART)
        );
    }

    #[test]
    fn bytes_past_the_base_are_uploaded_and_reusable_parts_are_reused() {
        // A 20 MiB base truncated to 10 MiB, then grown to 30 MiB: the tail must read as zeros.
        let size = 30 * MIB;
        let dirty = Extents::new();
        let parts = plan_parts(size, DEFAULT_PART, 10 * MIB, &dirty, |index, _| index == 3);
        let sources: Vec<_> = parts.iter().map(|p| p.source.clone()).collect();
        assert_eq!(
            sources,
            vec![Source::Copy, Source::Upload, Source::Upload, Source::Reuse]
        );
        assert_eq!(parts[3].range, 24 * MIB..30 * MIB);
    }

    #[test]
    fn an_empty_file_has_no_parts() {
        assert!(plan_parts(0, DEFAULT_PART, 0, &Extents::new(), |_, _| false).is_empty());
    }
}
