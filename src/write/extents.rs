//! `Extents`: the byte ranges of a file that were written locally and so differ from (or extend
//! beyond) the object the file is based on.

use std::collections::BTreeMap;
use std::ops::Range;

/// A set of disjoint, non-adjacent, non-empty half-open byte ranges.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Extents {
    /// start → end; kept merged, so no two entries touch or overlap.
    ranges: BTreeMap<u64, u64>,
}

impl Extents {
    pub fn new() -> Extents {
        Extents::default()
    }

    pub fn is_empty(&self) -> bool {
        self.ranges.is_empty()
    }

    /// Total bytes covered.
    pub fn len(&self) -> u64 {
        self.ranges.iter().map(|(start, end)| end - start).sum()
    }

    /// Adds `range`, merging it with every range it overlaps or touches. Returns how many bytes
    /// were not covered before.
    pub fn insert(&mut self, range: Range<u64>) -> u64 {
        if range.is_empty() {
            return 0;
        }
        let before = self.covered(range.clone());
        let (mut start, mut end) = (range.start, range.end);
        // The range starting at or before `start` may reach into (or touch) the new one.
        if let Some((&s, &e)) = self.ranges.range(..=start).next_back()
            && e >= start
        {
            start = s;
            end = end.max(e);
        }
        let absorbed: Vec<u64> = self.ranges.range(start..=end).map(|(&s, _)| s).collect();
        for s in absorbed {
            if let Some(e) = self.ranges.remove(&s) {
                end = end.max(e);
            }
        }
        self.ranges.insert(start, end);
        (range.end - range.start) - before
    }

    /// Drops everything at or beyond `len` (a truncation). Returns how many bytes were dropped.
    pub fn truncate(&mut self, len: u64) -> u64 {
        let before = self.len();
        let beyond: Vec<u64> = self.ranges.range(len..).map(|(&s, _)| s).collect();
        for s in beyond {
            self.ranges.remove(&s);
        }
        if let Some((_, e)) = self.ranges.range_mut(..len).next_back()
            && *e > len
        {
            *e = len;
        }
        before - self.len()
    }

    /// How many bytes of `range` are covered.
    pub fn covered(&self, range: Range<u64>) -> u64 {
        self.pieces(range)
            .filter(|(_, dirty)| *dirty)
            .map(|(r, _)| r.end - r.start)
            .sum()
    }

    /// Whether any byte of `range` is covered.
    pub fn overlaps(&self, range: Range<u64>) -> bool {
        self.pieces(range).any(|(_, dirty)| dirty)
    }

    /// `range` cut into consecutive pieces, each flagged covered or not, in order.
    pub fn pieces(&self, range: Range<u64>) -> impl Iterator<Item = (Range<u64>, bool)> + '_ {
        let first = self
            .ranges
            .range(..=range.start)
            .next_back()
            .filter(|(_, e)| **e > range.start)
            .map(|(&s, _)| s)
            .unwrap_or(range.start);
        let mut at = range.start;
        let mut inner = self.ranges.range(first..range.end).peekable();
        std::iter::from_fn(move || {
            if at >= range.end {
                return None;
            }
            match inner.peek() {
                Some(&(&s, &e)) if s <= at => {
                    inner.next();
                    let piece = at..e.min(range.end);
                    at = piece.end;
                    Some((piece, true))
                }
                Some(&(&s, _)) => {
                    let piece = at..s.min(range.end);
                    at = piece.end;
                    Some((piece, false))
                }
                None => {
                    let piece = at..range.end;
                    at = range.end;
                    Some((piece, false))
                }
            }
        })
    }

    pub fn iter(&self) -> impl Iterator<Item = Range<u64>> + '_ {
        self.ranges.iter().map(|(&s, &e)| s..e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ranges(e: &Extents) -> Vec<Range<u64>> {
        e.iter().collect()
    }

    #[test]
    fn inserts_merge_overlapping_and_touching_ranges() {
        let mut e = Extents::new();
        assert_eq!(e.insert(10..20), 10);
        assert_eq!(e.insert(30..40), 10);
        assert_eq!(e.insert(20..25), 5, "touching on the left merges");
        assert_eq!(ranges(&e), vec![10..25, 30..40]);
        assert_eq!(e.insert(5..35), 10, "only the gaps are new");
        assert_eq!(ranges(&e), vec![5..40]);
        assert_eq!(e.insert(12..13), 0);
        assert_eq!(e.insert(0..0), 0);
        assert_eq!(e.len(), 35);
    }

    #[test]
    fn truncate_cuts_and_drops() {
        let mut e = Extents::new();
        e.insert(0..10);
        e.insert(20..30);
        e.insert(40..50);
        assert_eq!(e.truncate(25), 5 + 10);
        assert_eq!(ranges(&e), vec![0..10, 20..25]);
        assert_eq!(e.truncate(20), 5);
        assert_eq!(ranges(&e), vec![0..10]);
        assert_eq!(e.truncate(0), 10);
        assert!(e.is_empty());
    }

    #[test]
    fn pieces_alternate_and_cover_the_range_exactly() {
        let mut e = Extents::new();
        e.insert(10..20);
        e.insert(30..40);
        let got: Vec<_> = e.pieces(15..35).collect();
        assert_eq!(got, vec![(15..20, true), (20..30, false), (30..35, true)]);
        let got: Vec<_> = e.pieces(0..5).collect();
        assert_eq!(got, vec![(0..5, false)]);
        let got: Vec<_> = e.pieces(40..45).collect();
        assert_eq!(got, vec![(40..45, false)]);
        assert_eq!(e.covered(0..100), 20);
        assert!(e.overlaps(19..21));
        assert!(!e.overlaps(20..30));
    }

    #[test]
    fn matches_a_byte_model_under_random_operations() {
        let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
        let mut next = move |bound: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % bound
        };
        let mut e = Extents::new();
        let mut model = vec![false; 256];
        for _ in 0..2000 {
            if next(5) == 0 {
                let len = next(256);
                e.truncate(len);
                model[len as usize..].fill(false);
            } else {
                let start = next(256);
                let end = (start + next(40)).min(256);
                let fresh = e.insert(start..end);
                let expect = model[start as usize..end as usize]
                    .iter()
                    .filter(|b| !**b)
                    .count() as u64;
                assert_eq!(fresh, expect);
                model[start as usize..end as usize].fill(true);
            }
            let from_model: Vec<bool> = (0..256).map(|i| model[i]).collect();
            let mut from_set = vec![false; 256];
            for (piece, dirty) in e.pieces(0..256) {
                from_set[piece.start as usize..piece.end as usize].fill(dirty);
            }
            assert_eq!(from_set, from_model);
            let merged = ranges(&e);
            assert!(merged.windows(2).all(|w| w[0].end < w[1].start));
        }
    }
}
