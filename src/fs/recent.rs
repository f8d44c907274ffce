//! What this mount remembers about names for a while: lookups that missed, names it removed,
//! directories it changed, objects it wrote, and fresh listing snapshots. Lookups, opens,
//! listings and every change consult or feed these records; they are kept together because
//! they share one pruning rule (`NEGATIVE_CACHE_LIMIT`, the TTL) and one question: may a cached
//! answer be trusted yet?

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Instant, SystemTime};

use super::listing::ChildKind;
use super::{Fs, NEGATIVE_CACHE_LIMIT, lock};

impl Fs {
    pub(super) fn note_written(&self, store_id: &str, key: &str) {
        let mut written = lock(&self.written);
        let ttl = self.options.ttl;
        if written.len() >= NEGATIVE_CACHE_LIMIT {
            written.retain(|_, at| at.elapsed() < ttl);
        }
        written.insert((store_id.to_string(), key.to_string()), Instant::now());
    }

    /// Whether this process wrote `key` (or renamed a file onto it) after `since`.
    pub(super) fn written_since(&self, store_id: &str, key: &str, since: Instant) -> bool {
        lock(&self.written)
            .get(&(store_id.to_string(), key.to_string()))
            .is_some_and(|at| *at > since)
    }

    pub(super) fn recently_written(&self, store_id: &str, key: &str) -> bool {
        lock(&self.written)
            .get(&(store_id.to_string(), key.to_string()))
            .is_some_and(|at| at.elapsed() < self.options.ttl)
    }

    /// Forgets what is known of directory `dir` and of `name` in it, after a change there.
    pub(super) fn invalidate_entry(&self, dir: u64, name: &str) {
        // The listing this change makes stale still tells which other names are absent.
        let fresh = self.fresh_listing(dir);
        {
            let ttl = self.options.ttl;
            let mut known = lock(&self.known);
            if let Some((children, listed_at)) = fresh {
                known.know(dir, listed_at, children, ttl);
            }
            known.changed(dir, name, ttl);
        }
        lock(&self.listings).remove(&dir);
        self.forget_kept(dir, name);
        let entry = (dir, name.to_string());
        lock(&self.negative).pop(&entry);
        lock(&self.removed).remove(&entry);
        let mut changed = lock(&self.dir_changed);
        if changed.len() >= NEGATIVE_CACHE_LIMIT {
            let ttl = self.options.ttl;
            changed.retain(|_, (at, _)| at.elapsed() < ttl);
        }
        changed.insert(dir, (Instant::now(), SystemTime::now()));
    }

    /// As `invalidate_entry`, for a name this mount just removed: listings asked for before
    /// now must not bring it back.
    pub(super) fn note_removed(&self, dir: u64, name: &str) {
        self.invalidate_entry(dir, name);
        self.remember_missing(dir, name);
        let now = Instant::now();
        let mut removed = lock(&self.removed);
        if removed.len() >= NEGATIVE_CACHE_LIMIT {
            // Only listings still open can show a removed name: keep what one of them predates.
            let oldest_listing = lock(&self.dirs).values().filter_map(|h| h.listed_at).min();
            removed.retain(|_, at| oldest_listing.is_some_and(|oldest| *at >= oldest));
        }
        removed.insert((dir, name.to_string()), now);
    }

    pub(super) fn dir_changed_since(&self, dir: u64, since: Instant) -> bool {
        lock(&self.dir_changed)
            .get(&dir)
            .is_some_and(|(at, _)| *at >= since)
    }

    /// When this mount last added or removed an entry of `dir`, by the clock, if it remembers.
    pub(super) fn dir_changed_at(&self, dir: u64) -> Option<SystemTime> {
        lock(&self.dir_changed).get(&dir).map(|(_, when)| *when)
    }

    /// Whether this mount removed `name` from `dir` after `since`.
    pub(super) fn removed_since(&self, dir: u64, name: &str, since: Instant) -> bool {
        lock(&self.removed)
            .get(&(dir, name.to_string()))
            .is_some_and(|at| *at >= since)
    }

    /// A cached listing of `ino` younger than the TTL, with when it was asked for: its own, or
    /// one a listing of an ancestor kept for it.
    pub(super) fn fresh_listing(
        &self,
        ino: u64,
    ) -> Option<(Arc<BTreeMap<String, ChildKind>>, Instant)> {
        let own = lock(&self.listings)
            .get(&ino)
            .filter(|snapshot| snapshot.fetched.elapsed() < self.options.ttl)
            .map(|snapshot| (snapshot.children.clone(), snapshot.fetched));
        own.or_else(|| self.kept_listing(ino))
    }

    pub(super) fn recently_missing(&self, parent: u64, name: &str) -> bool {
        let mut negative = lock(&self.negative);
        negative
            .get(&(parent, name.to_string()))
            .is_some_and(|at| at.elapsed() < self.options.ttl)
    }

    /// Whether `name` is known absent from `dir` without asking: `dir` was made or listed within
    /// the TTL, and neither showed `name` nor has this mount changed it since (`known_names`).
    pub(super) fn known_absent(&self, dir: u64, name: &str) -> bool {
        lock(&self.known).absent(dir, name, self.options.ttl)
    }

    /// Directory `dir` was just made where nothing was at `missing_since`: no name is in it.
    pub(super) fn know_made_empty(&self, dir: u64, missing_since: Instant) {
        let ttl = self.options.ttl;
        lock(&self.known).know(dir, missing_since, Arc::default(), ttl);
    }

    /// How long `name` has been known missing from `parent`, for a lookup that began at `asked`
    /// and missed: the oldest record it may have answered from (a listing, a miss remembered,
    /// a known directory), else `asked` (it asked the store).
    pub(super) fn missing_since(&self, parent: u64, name: &str, asked: Instant) -> Instant {
        let listed = self.fresh_listing(parent).map(|(_, at)| at);
        let missed = lock(&self.negative)
            .peek(&(parent, name.to_string()))
            .copied();
        let known = lock(&self.known).since(parent);
        [listed, missed, known]
            .into_iter()
            .flatten()
            .fold(asked, Instant::min)
    }

    pub(super) fn forget_known(&self, dir: u64) {
        lock(&self.known).forget(dir);
    }

    pub(super) fn remember_missing(&self, parent: u64, name: &str) {
        lock(&self.negative).put((parent, name.to_string()), Instant::now());
    }
}
