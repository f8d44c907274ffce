//! What this process's commits left in the store, remembered for a while after the engine has
//! let go of the file.
//!
//! Once a file is committed and closed, the engine no longer holds it, and what the mount
//! listed of its name may predate the write: without this, the first `stat` or `open` of a file
//! just written asked the store again with a HEAD (`echo x > f; stat f` cost a PUT and a HEAD,
//! `rsync -a` several HEADs per file). The commit's own result says what the store holds. An
//! entry goes when its name is deleted, renamed away or replaced (`WriteEngine::forget`); a
//! later commit at the name replaces it; the filesystem trusts it for its TTL, like anything
//! else it learned of the store.

use std::collections::{HashMap, VecDeque};
use std::time::{Instant, SystemTime};

use crate::cache::ObjectVersion;
use crate::store::Metadata;

/// Entries kept at most, the oldest dropped first: a name whose entry was dropped is asked of
/// the store again, as before.
const KEPT: usize = 4096;

/// (store id, key).
type Name = (String, String);

/// A file's object as this process's last commit of it left it.
#[derive(Debug, Clone, PartialEq)]
pub struct RecentCommit {
    /// Its key, ETag and size.
    pub version: ObjectVersion,
    /// The modification time `stat` showed while the file was written.
    pub mtime: SystemTime,
    /// The user metadata the object carries (`posix_metadata`), empty elsewhere.
    pub metadata: Metadata,
    /// When the engine let go of the file.
    pub at: Instant,
}

/// The recent commits by name, bounded.
#[derive(Debug, Default)]
pub(super) struct RecentCommits {
    by_name: HashMap<Name, RecentCommit>,
    /// Names in the order recorded, for dropping the oldest; a name recorded again since (its
    /// `at` differs) or forgotten is skipped.
    order: VecDeque<(Name, Instant)>,
}

impl RecentCommits {
    pub fn record(&mut self, name: Name, commit: RecentCommit) {
        self.order.push_back((name.clone(), commit.at));
        self.by_name.insert(name, commit);
        while self.order.len() > KEPT {
            let Some((name, at)) = self.order.pop_front() else {
                break;
            };
            if self.by_name.get(&name).is_some_and(|c| c.at == at) {
                self.by_name.remove(&name);
            }
        }
    }

    pub fn forget(&mut self, name: &Name) {
        self.by_name.remove(name);
    }

    pub fn get(&self, name: &Name) -> Option<RecentCommit> {
        self.by_name.get(name).cloned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn name(i: usize) -> Name {
        ("s3:store".to_string(), format!("dir/f{i}"))
    }

    fn commit(i: usize, at: Instant) -> RecentCommit {
        RecentCommit {
            version: ObjectVersion {
                key: name(i).1,
                etag: format!("\"etag-{i}\""),
                size: i as u64,
            },
            mtime: SystemTime::UNIX_EPOCH + Duration::from_secs(i as u64),
            metadata: Metadata::new(),
            at,
        }
    }

    #[test]
    fn the_last_record_of_a_name_is_kept_until_forgotten() {
        let mut files = RecentCommits::default();
        let start = Instant::now();
        files.record(name(1), commit(1, start));
        let again = commit(7, start + Duration::from_millis(1));
        files.record(name(1), again.clone());
        assert_eq!(files.get(&name(1)), Some(again));
        assert_eq!(files.get(&name(2)), None);
        files.forget(&name(1));
        assert_eq!(files.get(&name(1)), None);
    }

    #[test]
    fn the_oldest_names_go_first_past_the_bound_and_a_name_recorded_again_stays() {
        let mut files = RecentCommits::default();
        let start = Instant::now();
        let at = |i: usize| start + Duration::from_micros(i as u64);
        for i in 0..KEPT {
            files.record(name(i), commit(i, at(i)));
        }
        // Name 0 is recorded again: its first entry in the order no longer counts.
        files.record(name(0), commit(0, at(KEPT)));
        for i in KEPT + 1..KEPT + 3 {
            files.record(name(i), commit(i, at(i)));
        }
        assert!(files.get(&name(0)).is_some(), "recorded again: kept");
        assert_eq!(files.get(&name(1)), None, "the oldest other one went");
        assert_eq!(files.get(&name(2)), None);
        assert!(files.get(&name(3)).is_some());
        assert!(files.get(&name(KEPT + 2)).is_some());
        assert!(files.by_name.len() <= KEPT && files.order.len() <= KEPT);
    }
}
