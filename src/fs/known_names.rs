//! Directories whose names this mount knows for a while, so that a lookup of a name that is not
//! there is answered without a request: a directory this mount just made (its `mkdir` found
//! nothing at that path), or one whose fresh listing a change of this mount would otherwise have
//! dropped. The names changed since are kept apart and always asked of the store.
//!
//! Why: creating a file is a lookup first (the kernel asks before `create`), and a lookup that
//! misses costs a HEAD and a LIST — more than the PutObject that stores the file. `tar x`, `cp -r`
//! and a shell loop of `echo … > file$i` into a new directory would pay it for every file. What
//! such a record answers is what a listing snapshot would (the directory as it was listed or
//! made, at most the TTL ago, plus this mount's own changes), so it keeps `entry_attr_ttl`'s
//! semantics: another client's new name is seen once the TTL has passed.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::listing::ChildKind;

/// Names held in all records together (listed and changed). Past it, expired records are
/// dropped; a record that still does not fit is not kept (its lookups ask the store again).
pub(super) const KNOWN_NAMES_LIMIT: usize = 65_536;

#[derive(Default)]
pub(super) struct KnownNames {
    dirs: HashMap<u64, Known>,
    /// Names in `dirs`, listed and changed, all records together.
    names: usize,
}

struct Known {
    /// When the directory was listed (or found absent before it was made): the record answers
    /// until the TTL has passed since.
    since: Instant,
    listed: Arc<BTreeMap<String, ChildKind>>,
    /// Names this mount added, removed or replaced since: only the store knows them.
    changed: HashSet<String>,
}

impl Known {
    fn names(&self) -> usize {
        self.listed.len() + self.changed.len()
    }
}

impl KnownNames {
    /// Directory `dir` held exactly `listed` at `since`, apart from names this mount changed
    /// since. A record already there is replaced; the names changed under it stay changed (a
    /// listing that ran beside one of those changes may not show it).
    pub(super) fn know(
        &mut self,
        dir: u64,
        since: Instant,
        listed: Arc<BTreeMap<String, ChildKind>>,
        ttl: Duration,
    ) {
        let changed = match self.dirs.remove(&dir) {
            Some(old) => {
                self.names -= old.names();
                old.changed
            }
            None => HashSet::new(),
        };
        let count = listed.len() + changed.len();
        if since.elapsed() >= ttl || !self.fits(count, ttl) {
            return;
        }
        self.names += count;
        self.dirs.insert(
            dir,
            Known {
                since,
                listed,
                changed,
            },
        );
    }

    /// This mount changed `name` in `dir`.
    pub(super) fn changed(&mut self, dir: u64, name: &str, ttl: Duration) {
        let Some(known) = self.dirs.get(&dir) else {
            return;
        };
        if known.changed.contains(name) {
            return;
        }
        if known.since.elapsed() >= ttl || !self.fits(1, ttl) {
            self.forget(dir);
            return;
        }
        if let Some(known) = self.dirs.get_mut(&dir) {
            known.changed.insert(name.to_string());
            self.names += 1;
        }
    }

    /// Whether `name` is known to be absent from `dir`.
    pub(super) fn absent(&self, dir: u64, name: &str, ttl: Duration) -> bool {
        self.dirs.get(&dir).is_some_and(|known| {
            known.since.elapsed() < ttl
                && !known.listed.contains_key(name)
                && !known.changed.contains(name)
        })
    }

    /// Since when `dir`'s names are known, if they are.
    pub(super) fn since(&self, dir: u64) -> Option<Instant> {
        self.dirs.get(&dir).map(|known| known.since)
    }

    pub(super) fn forget(&mut self, dir: u64) {
        if let Some(known) = self.dirs.remove(&dir) {
            self.names -= known.names();
        }
    }

    /// Whether `more` names fit, once expired records are dropped if they must be.
    fn fits(&mut self, more: usize, ttl: Duration) -> bool {
        if self.names + more > KNOWN_NAMES_LIMIT {
            self.dirs.retain(|_, known| known.since.elapsed() < ttl);
            self.names = self.dirs.values().map(Known::names).sum();
        }
        self.names + more <= KNOWN_NAMES_LIMIT
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TTL: Duration = Duration::from_secs(60);

    fn listed(names: &[&str]) -> Arc<BTreeMap<String, ChildKind>> {
        Arc::new(
            names
                .iter()
                .map(|name| (name.to_string(), ChildKind::DIR))
                .collect(),
        )
    }

    #[test]
    fn a_known_directory_answers_for_names_neither_listed_nor_changed() {
        let mut known = KnownNames::default();
        known.know(7, Instant::now(), listed(&["a"]), TTL);
        assert!(known.absent(7, "new", TTL));
        assert!(
            !known.absent(7, "a", TTL),
            "listed: only the store knows it now"
        );
        assert!(!known.absent(8, "new", TTL), "another directory");
        known.changed(7, "new", TTL);
        assert!(!known.absent(7, "new", TTL), "changed by this mount since");
        assert!(known.absent(7, "other", TTL));
        assert!(!known.absent(7, "other", Duration::ZERO), "expired");
        known.forget(7);
        assert!(!known.absent(7, "other", TTL));
        assert_eq!(known.names, 0);
    }

    #[test]
    fn an_expired_listing_is_not_recorded_and_a_new_one_replaces_the_old() {
        let mut known = KnownNames::default();
        let old = Instant::now() - Duration::from_secs(120);
        known.know(1, old, listed(&[]), TTL);
        assert!(!known.absent(1, "x", TTL));
        known.know(1, Instant::now(), listed(&["x"]), TTL);
        known.changed(1, "y", TTL);
        known.know(1, Instant::now(), listed(&["x"]), TTL);
        assert!(known.absent(1, "z", TTL));
        assert!(
            !known.absent(1, "y", TTL),
            "changed under the replaced record"
        );
        assert_eq!(
            known.names, 2,
            "the replaced record's listing is not counted"
        );
    }

    #[test]
    fn names_past_the_limit_drop_expired_records_then_the_one_that_grows() {
        let mut known = KnownNames::default();
        let many: Vec<String> = (0..KNOWN_NAMES_LIMIT - 1)
            .map(|i| format!("f{i}"))
            .collect();
        let many: Arc<BTreeMap<String, ChildKind>> = Arc::new(
            many.into_iter()
                .map(|name| (name, ChildKind::DIR))
                .collect(),
        );
        let half_a_minute_ago = Instant::now() - Duration::from_secs(30);
        known.know(1, half_a_minute_ago, many.clone(), TTL);
        known.know(2, Instant::now(), listed(&[]), TTL);
        known.changed(2, "one", TTL);
        assert_eq!(known.names, KNOWN_NAMES_LIMIT);
        known.changed(2, "two", TTL);
        assert!(!known.absent(2, "three", TTL), "did not fit: forgotten");
        assert!(known.absent(1, "new", TTL));
        // Under a TTL that record 1 has outlived, it makes room.
        let short = Duration::from_secs(20);
        known.know(3, Instant::now(), many, short);
        assert!(known.absent(3, "new", short));
        assert!(!known.absent(1, "new", TTL), "dropped as expired");
        assert!(known.names <= KNOWN_NAMES_LIMIT);
    }
}
