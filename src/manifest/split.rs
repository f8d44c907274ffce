//! Splitting one flat directory's listing into key ranges that several listers work on at once.
//!
//! **Ranges, not prefixes.** Every split is a partition of the key space at *split points*
//! p1 < p2 < … < pn into the ranges (start, p1], (p1, p2], …, (pn, end): each lister lists with
//! `StartAfter` at its range's start and keeps the entries up to and including its stop key.
//! Because the ranges partition the whole line of strings, every key lands in exactly one range
//! whatever the split points are: a key whose first character was never probed or hinted falls
//! into the range around it (the first and last ranges are the catch-alls below the first point
//! and above the last). Split points only decide how evenly the work spreads, never which keys
//! are listed. Each entry is kept by comparing its own key (object key, or common prefix
//! `sub/`) with the range's bounds, so a common prefix that a store repeats around a
//! `StartAfter` inside it is still written once. The price is that a range's last page may run
//! past its stop key: at most one page per range is listed and discarded.
//!
//! **Choosing split points** for the keys after K, the last key listed so far (up to the
//! range's stop key when a range is split again):
//! - *By key-prefix characters*: probe the single-character prefixes `dir/c` (alphanumerics and
//!   the characters seen in the names so far) with one-key LISTs after K; when at least
//!   [`MIN_PREFIX_BLOCKS`] are non-empty, split at those characters.
//! - *Otherwise by key ranges estimated from sampled keys*: find the longest prefix Q of K's
//!   name whose block still holds every later key (binary search, one probe each step), then
//!   sample the blocks one character deeper (`Q+c`, for the characters the names use), and
//!   deeper again under the non-empty ones, taking the first real key of each non-empty block
//!   as a split point, until there are enough points or [`MAX_PROBES`] is spent; the points are
//!   then thinned evenly to the target.
//! - *Hints* (`flat_dir_hints`) skip both: the split points are every string of `split_depth`
//!   hint characters, no probing.
//!
//! Guessed split points can be uneven (one character may hold most keys). The generator
//! corrects that as it goes: a range that is still paginating while listers stand idle is
//! split again, with the same planner, between its last key and its stop key.

use std::collections::BTreeSet;

use futures::{StreamExt, TryStreamExt};

use crate::store::{ListRequest, ObjectStore, StoreError};

/// Single-character blocks that must be non-empty to split by key-prefix characters.
pub const MIN_PREFIX_BLOCKS: usize = 8;
/// Most ranges one automatically detected flat directory is split into.
pub const MAX_AUTO_RANGES: usize = 256;
/// Most one-key probe LISTs spent on choosing one directory's split points.
pub const MAX_PROBES: usize = 4096;
/// Probe LISTs in flight at once while choosing split points.
pub const PROBE_CONCURRENCY: usize = 32;
/// Levels sampled below the remainder's common block.
const MAX_SAMPLE_LEVELS: usize = 4;
/// Most split points a hint may produce (as the configuration allows).
const MAX_HINT_POINTS: usize = 65_536;
/// Characters probed besides those seen in the directory's first pages.
const PROBE_CHARS: &str = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
/// Largest distinct characters probed at one position.
const MAX_PROBE_CHARS: usize = 128;

/// Keys strictly after `after` (from the first key when `None`) up to and including `through`
/// (to the last key when `None`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct KeyRange {
    pub after: Option<String>,
    pub through: Option<String>,
}

impl KeyRange {
    /// Whether `key` lies after this range's start.
    pub fn starts_before(&self, key: &str) -> bool {
        self.after.as_deref().is_none_or(|after| key > after)
    }

    /// Whether `key` lies beyond this range's end (so everything after it does too).
    pub fn ends_before(&self, key: &str) -> bool {
        self.through.as_deref().is_some_and(|through| key > through)
    }
}

/// How a flat directory's split points were chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Strategy {
    Hint,
    KeyPrefix,
    KeyRange,
}

impl std::fmt::Display for Strategy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Strategy::Hint => "flat_dir_hints",
            Strategy::KeyPrefix => "key-prefix characters",
            Strategy::KeyRange => "sampled key ranges",
        })
    }
}

/// The ranges that partition (`after`, `through`] at `points` (full keys; any order;
/// duplicates and points outside the range are dropped).
pub(super) fn partition(
    after: Option<String>,
    through: Option<String>,
    points: Vec<String>,
) -> Vec<KeyRange> {
    let points: BTreeSet<String> = points
        .into_iter()
        .filter(|p| after.as_deref().is_none_or(|a| p.as_str() > a))
        .filter(|p| through.as_deref().is_none_or(|t| p.as_str() < t))
        .collect();
    let mut ranges = Vec::with_capacity(points.len() + 1);
    let mut start = after;
    for point in points {
        ranges.push(KeyRange {
            after: start,
            through: Some(point.clone()),
        });
        start = Some(point);
    }
    ranges.push(KeyRange {
        after: start,
        through,
    });
    ranges
}

/// A hint's split points: `prefix` followed by every string of `depth` characters from `chars`
/// (sorted, as keys sort). A depth whose fan-out exceeds the configuration's limit is lowered.
pub(super) fn hint_points(prefix: &str, chars: &str, depth: u32) -> Vec<String> {
    let chars: BTreeSet<char> = chars.chars().filter(|c| *c != '/').collect();
    if chars.is_empty() {
        return Vec::new();
    }
    let mut depth = depth.max(1);
    while depth > 1 && (chars.len() as u64).saturating_pow(depth) > MAX_HINT_POINTS as u64 {
        depth -= 1;
    }
    let mut points = vec![prefix.to_string()];
    for _ in 0..depth {
        points = points
            .iter()
            .flat_map(|p| chars.iter().map(move |c| format!("{p}{c}")))
            .take(MAX_HINT_POINTS)
            .collect();
    }
    points
}

/// Split points for the part of a flat directory after `after`.
#[derive(Debug)]
pub(super) struct Plan {
    pub strategy: Strategy,
    pub points: Vec<String>,
}

/// Asks a store one-key questions about a directory's keys.
pub(super) struct Prober<'a> {
    pub store: &'a dyn ObjectStore,
    /// The directory's listing prefix ("" or ending in "/").
    pub prefix: &'a str,
    /// Called once per LIST sent.
    pub on_list: &'a (dyn Fn() + Sync),
}

impl Prober<'_> {
    /// The first key or common prefix under `list_prefix` strictly after `after`.
    async fn first(&self, list_prefix: String, after: &str) -> Result<Option<String>, StoreError> {
        (self.on_list)();
        let page = self
            .store
            .list(&delimited_after(list_prefix, after).max_keys(Some(1)))
            .await?;
        Ok(page
            .objects
            .into_iter()
            .map(|o| o.key)
            .chain(page.common_prefixes)
            .filter(|k| k.as_str() > after)
            .min())
    }

    /// For each block (a name prefix inside the directory), its first key after `after` (and
    /// not beyond `through`); returns the non-empty blocks with that key, in block order.
    async fn blocks(
        &self,
        blocks: Vec<String>,
        after: &str,
        through: Option<&str>,
    ) -> Result<Vec<(String, String)>, StoreError> {
        let found: Vec<Option<(String, String)>> = futures::stream::iter(blocks)
            .map(|block| async move {
                let first = self.first(format!("{}{block}", self.prefix), after).await?;
                Ok::<_, StoreError>(first.map(|key| (block, key)))
            })
            .buffered(PROBE_CONCURRENCY)
            .try_collect()
            .await?;
        Ok(found
            .into_iter()
            .flatten()
            .filter(|(_, key)| through.is_none_or(|t| key.as_str() <= t))
            .collect())
    }
}

/// Chooses split points for the keys in (`after`, `through`] (full keys; `None`: to the end) of
/// a directory whose pages so far used the characters `seen`, aiming at `target` ranges.
pub(super) async fn plan(
    prober: &Prober<'_>,
    after: &str,
    through: Option<&str>,
    seen: &BTreeSet<char>,
    target: usize,
) -> Result<Plan, StoreError> {
    let target = target.clamp(2, MAX_AUTO_RANGES);
    let Some(last_name) = after.strip_prefix(prober.prefix) else {
        return Ok(Plan {
            strategy: Strategy::KeyRange,
            points: Vec::new(),
        });
    };
    let alphabet = |chars: &mut dyn Iterator<Item = char>| -> Vec<char> {
        chars
            .filter(|c| *c != '/')
            .collect::<BTreeSet<char>>()
            .into_iter()
            .take(MAX_PROBE_CHARS)
            .collect()
    };
    // First characters: alphanumerics and whatever the names showed.
    let first_chars = alphabet(&mut PROBE_CHARS.chars().chain(seen.iter().copied()));
    // Deeper down, names repeat their own characters (digits, hex, a separator): probing only
    // those keeps sampling cheap; a block of other characters still lands in some range.
    let deeper_chars = if seen.len() >= 2 {
        alphabet(&mut seen.iter().copied())
    } else {
        first_chars.clone()
    };
    let end_name = through.and_then(|t| t.strip_prefix(prober.prefix));
    let children = |block: &str| -> Vec<String> {
        let chars = if block.is_empty() {
            &first_chars
        } else {
            &deeper_chars
        };
        chars
            .iter()
            .map(|c| format!("{block}{c}"))
            .filter(|b| !wholly_before(b, last_name))
            // A block's smallest name is the block itself.
            .filter(|b| end_name.is_none_or(|end| b.as_str() <= end))
            .collect()
    };

    // By key-prefix characters.
    let first_level = prober.blocks(children(""), after, through).await?;
    if first_level.len() >= MIN_PREFIX_BLOCKS.min(target) {
        let points = first_level
            .iter()
            .map(|(block, _)| format!("{}{block}", prober.prefix))
            .collect();
        return Ok(Plan {
            strategy: Strategy::KeyPrefix,
            points: thin(points, target - 1),
        });
    }

    // By key ranges from sampled keys. First the common block of everything after `after`.
    let boundaries: Vec<usize> = last_name
        .char_indices()
        .map(|(i, _)| i)
        .skip(1)
        .chain([last_name.len()])
        .collect();
    let (mut low, mut high) = (0usize, boundaries.len());
    while low < high {
        let mid = (low + high).div_ceil(2);
        let block = format!("{}{}", prober.prefix, &last_name[..boundaries[mid - 1]]);
        let beyond = prober
            .first(prober.prefix.to_string(), &format!("{block}\u{10FFFF}"))
            .await?;
        let inside =
            |key: &String| key.starts_with(&block) || through.is_some_and(|t| key.as_str() > t);
        if beyond.is_none_or(|key| inside(&key)) {
            low = mid;
        } else {
            high = mid - 1;
        }
    }
    let common = if low == 0 {
        ""
    } else {
        &last_name[..boundaries[low - 1]]
    };

    let mut points = BTreeSet::new();
    let mut budget = MAX_PROBES;
    let mut frontier: Vec<String> = if common.is_empty() {
        // The first level is what the key-prefix probes found.
        points.extend(first_level.iter().map(|(_, key)| key.clone()));
        first_level.into_iter().map(|(block, _)| block).collect()
    } else {
        vec![common.to_string()]
    };
    for _ in 0..MAX_SAMPLE_LEVELS {
        if points.len() + 1 >= target || frontier.is_empty() {
            break;
        }
        let blocks: Vec<String> = frontier.iter().flat_map(|b| children(b)).collect();
        if blocks.len() > budget {
            break;
        }
        budget -= blocks.len();
        let found = prober.blocks(blocks, after, through).await?;
        points.extend(found.iter().map(|(_, key)| key.clone()));
        frontier = found.into_iter().map(|(block, _)| block).collect();
    }
    Ok(Plan {
        strategy: Strategy::KeyRange,
        points: thin(points.into_iter().collect(), target - 1),
    })
}

/// A delimited listing of `prefix` from the first key after `after`. `StartAfter` is sent only
/// when it lies inside or beyond the prefix: below it every key qualifies anyway, and some
/// S3-compatible servers (garage) answer such a request with an empty listing.
pub(super) fn delimited_after(prefix: String, after: &str) -> ListRequest {
    if after >= prefix.as_str() {
        ListRequest::delimited(prefix).after(after)
    } else {
        ListRequest::delimited(prefix)
    }
}

/// Whether every name starting with `block` sorts before `name`.
fn wholly_before(block: &str, name: &str) -> bool {
    block < name && !name.starts_with(block)
}

/// At most `n` of the sorted `points`, evenly spaced.
fn thin(points: Vec<String>, n: usize) -> Vec<String> {
    if points.len() <= n {
        return points;
    }
    let len = points.len();
    (1..=n)
        .map(|i| points[i * len / (n + 1)].clone())
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys_in(ranges: &[KeyRange], key: &str) -> usize {
        ranges
            .iter()
            .filter(|r| r.starts_before(key) && !r.ends_before(key))
            .count()
    }

    #[test]
    fn ranges_partition_every_key_after_the_start() {
        let ranges = partition(
            Some("d/k".into()),
            None,
            vec!["d/m".into(), "d/b".into(), "d/x".into(), "d/m".into()],
        );
        assert_eq!(ranges.len(), 3, "{ranges:?}");
        for key in ["d/k0", "d/m", "d/m0", "d/x", "d/~", "d/é", "d/z/", "e"] {
            assert_eq!(keys_in(&ranges, key), 1, "{key}");
        }
        for key in ["d/b", "d/k", "d/a"] {
            assert_eq!(keys_in(&ranges, key), 0, "{key}");
        }
        let whole = partition(None, None, Vec::new());
        assert_eq!(keys_in(&whole, ""), 1);
        let bounded = partition(
            Some("d/b".into()),
            Some("d/m".into()),
            vec!["d/a".into(), "d/c".into(), "d/m".into(), "d/z".into()],
        );
        assert_eq!(bounded.len(), 2, "{bounded:?}");
        for key in ["d/b0", "d/c", "d/c0", "d/m"] {
            assert_eq!(keys_in(&bounded, key), 1, "{key}");
        }
        for key in ["d/b", "d/m0", "d/z"] {
            assert_eq!(keys_in(&bounded, key), 0, "{key}");
        }
    }

    #[test]
    fn hint_points_are_every_string_of_the_depth_in_key_order() {
        assert_eq!(hint_points("p/", "ba", 2), ["p/aa", "p/ab", "p/ba", "p/bb"]);
        assert_eq!(hint_points("", "0123456789", 1).len(), 10);
        // A fan-out beyond the limit is lowered rather than exhausting memory.
        assert!(hint_points("", "0123456789abcdef", 8).len() <= MAX_HINT_POINTS);
    }

    #[test]
    fn start_after_is_sent_only_inside_or_beyond_the_prefix() {
        assert_eq!(delimited_after("d/c".into(), "d/5").start_after, None);
        assert_eq!(
            delimited_after("d/c".into(), "d/c7").start_after.as_deref(),
            Some("d/c7")
        );
        assert_eq!(
            delimited_after("d/".into(), "d/x").start_after.as_deref(),
            Some("d/x")
        );
    }

    #[test]
    fn thinning_keeps_evenly_spaced_points() {
        let points: Vec<String> = (0..100).map(|i| format!("{i:03}")).collect();
        let thinned = thin(points.clone(), 3);
        assert_eq!(thinned, ["025", "050", "075"]);
        assert_eq!(thin(points[..2].to_vec(), 5), ["000", "001"]);
    }

    #[test]
    fn blocks_before_a_name_are_skipped_but_its_own_block_is_not() {
        assert!(wholly_before("a", "b7"));
        assert!(!wholly_before("b", "b7"));
        assert!(!wholly_before("b7", "b7"));
        assert!(!wholly_before("c", "b7"));
    }
}
