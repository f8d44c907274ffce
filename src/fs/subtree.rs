//! Subtree listings: a live directory whose whole subtree is small is listed once, without a
//! delimiter, and that one listing answers the listing of every directory below it — `find`
//! over a tree of a few hundred keys costs one LIST instead of one per directory.
//!
//! A flat listing returns keys in order, and the keys below one prefix are contiguous in that
//! order: when a bounded listing stops early, every directory it saw whose keys all sort before
//! the last key returned is still complete; only that key's ancestors are not. The lookup probe
//! of a directory no listing knows yet reads such a page too, so a small directory is known
//! whole as soon as it is looked up (opening `dir/file` costs one probe, not two).
//!
//! What the listings found is kept by directory key prefix (the directories below have no inode
//! yet) and trusted for the TTL since the LIST was asked for, like any listing. A change this
//! mount makes in a directory drops its kept listing and those below the changed name; a listing
//! asked for before this mount last changed anything in that store, or of a subtree below which
//! this mount has written, keeps nothing but the directory it was asked for. Only stores whose
//! flat pages are as cheap as delimited ones are listed this way
//! (`ObjectStore::cheap_flat_listing`).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::num::NonZeroUsize;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::backend::BackendSettings;
use super::listing::{self, ChildKind, FileMeta, valid_name};
use super::{DirSnapshot, Fs, lock};
use crate::store::{ListRequest, Metadata, ObjectMeta, StoreError};

/// Keys a subtree listing at `opendir` reads before giving up (one page at S3's default page
/// size). A directory with a larger subtree is then listed with the delimiter after all: its
/// first listing costs one page more, partly repaid by the complete subdirectories that page
/// holds, and it is remembered as large (`LARGE_MEMORY`) so that the next ones do not.
pub(super) const SUBTREE_LISTING_MAX_KEYS: usize = 1_000;
/// Keys the LIST of a lookup probe asks for: a small directory is then known whole, and
/// probing a huge one costs about what one key does.
const PROBE_KEYS: u32 = 100;
/// How long a directory whose subtree overflowed the bound is listed with the delimiter (and
/// probed for one key) straight away.
const LARGE_MEMORY: Duration = Duration::from_secs(300);
/// Directories remembered as large, at most.
const LARGE_MAX: usize = 4096;
/// Entries held in all kept listings together. Past it, expired listings are dropped, and if
/// that is not enough, new ones are not kept (they are only a shortcut).
const KEPT_ENTRIES_MAX: usize = 200_000;

/// The directories a flat listing below `root` (a key prefix) found complete.
pub(super) struct Subtree {
    root: String,
    /// By key prefix ("" or ending in "/"): each complete directory's children.
    dirs: BTreeMap<String, BTreeMap<String, ChildKind>>,
}

impl Subtree {
    /// Sorts `objects` (keys below `root`) into the directories they belong to, with the
    /// delimited listing's rules: a name both a file and a directory is the directory, the
    /// marker `dir/` makes `dir` exist without being a child of it, names that cannot be
    /// directory entries are skipped (with whatever lies below them). Unless `complete`, only
    /// the directories whose keys all sort before the last one listed are kept.
    fn build(root: &str, objects: Vec<ObjectMeta>, complete: bool) -> Subtree {
        let last = objects.iter().map(|o| o.key.clone()).max();
        let mut dirs: BTreeMap<String, BTreeMap<String, ChildKind>> = BTreeMap::new();
        dirs.insert(root.to_string(), BTreeMap::new());
        for object in &objects {
            let Some(mut rest) = object.key.strip_prefix(root) else {
                continue;
            };
            let mut dir = root.to_string();
            loop {
                match rest.split_once('/') {
                    Some((name, below)) if valid_name(name) => {
                        let sub = format!("{dir}{name}/");
                        dirs.entry(dir)
                            .or_default()
                            .insert(name.to_string(), ChildKind::DIR);
                        dirs.entry(sub.clone()).or_default();
                        dir = sub;
                        rest = below;
                    }
                    Some(_) => break,
                    None => {
                        if valid_name(rest) {
                            dirs.entry(dir)
                                .or_default()
                                .entry(rest.to_string())
                                .or_insert_with(|| ChildKind::File(FileMeta::from(object)));
                        }
                        break;
                    }
                }
            }
        }
        if !complete {
            dirs.retain(|prefix, _| last.as_ref().is_some_and(|l| !l.starts_with(prefix)));
        }
        Subtree {
            root: root.to_string(),
            dirs,
        }
    }

    /// The root directory's children, if the listing holds all of them.
    fn take_root(&mut self) -> Option<BTreeMap<String, ChildKind>> {
        self.dirs.remove(&self.root)
    }
}

/// Lists below directory `path` without a delimiter, page by page, until the listing ends or
/// has returned `max_keys` keys.
async fn list(
    settings: &BackendSettings,
    path: &str,
    max_keys: usize,
) -> Result<Subtree, StoreError> {
    let root = settings.dir_prefix_of(path);
    let mut objects: Vec<ObjectMeta> = Vec::new();
    let mut token = None;
    let complete = loop {
        let wanted = max_keys.saturating_sub(objects.len()).max(1);
        let page_keys = settings
            .page_size
            .map_or(wanted, |page| wanted.min(page as usize));
        let request = ListRequest::flat(&root)
            .continuing(token)
            .max_keys(Some(u32::try_from(page_keys).unwrap_or(u32::MAX)));
        let page = settings.store.list(&request).await?;
        objects.extend(page.objects);
        match page.next {
            None => break true,
            Some(next) if objects.len() < max_keys => token = Some(next),
            Some(_) => break false,
        }
    };
    Ok(Subtree::build(&root, objects, complete))
}

/// Directory listings found by subtree listings and probes, by (cache scope, key prefix): like
/// cached lines, one principal's listing never answers another's lookups.
pub(super) struct KeptListings {
    inner: Mutex<Kept>,
}

struct Kept {
    dirs: BTreeMap<(String, String), DirSnapshot>,
    /// Children in `dirs`, all listings together.
    entries: usize,
    /// The cache scopes with listings here of each store id: a change in a store through any
    /// of them drops the listings of all.
    scopes: HashMap<String, BTreeSet<String>>,
    /// When this mount last changed a directory, by store id, and in any store.
    changed: HashMap<String, Instant>,
    changed_any: Option<Instant>,
    /// Directories whose subtree overflowed the bound, by (store id, key prefix), with when.
    large: lru::LruCache<(String, String), Instant>,
}

impl Default for KeptListings {
    fn default() -> Self {
        KeptListings {
            inner: Mutex::new(Kept {
                dirs: BTreeMap::new(),
                entries: 0,
                scopes: HashMap::new(),
                changed: HashMap::new(),
                changed_any: None,
                large: lru::LruCache::new(NonZeroUsize::new(LARGE_MAX).expect("a non-zero bound")),
            }),
        }
    }
}

impl Kept {
    fn remove(&mut self, key: &(String, String)) {
        if let Some(old) = self.dirs.remove(key) {
            self.entries -= old.children.len() + 1;
        }
    }
}

impl KeptListings {
    /// The kept listing of the directory at `prefix`, if younger than `ttl`.
    fn get(
        &self,
        scope: &str,
        prefix: &str,
        ttl: Duration,
    ) -> Option<(Arc<BTreeMap<String, ChildKind>>, Instant)> {
        let kept = lock(&self.inner);
        let snapshot = kept.dirs.get(&(scope.to_string(), prefix.to_string()))?;
        (snapshot.fetched.elapsed() < ttl).then(|| (snapshot.children.clone(), snapshot.fetched))
    }

    /// Keeps the complete directories of `subtree`, listed from `fetched` on through `scope` of
    /// store `id`, unless this mount changed a directory of that store since.
    fn keep(&self, id: &str, scope: &str, subtree: Subtree, fetched: Instant, ttl: Duration) {
        let mut kept = lock(&self.inner);
        let changed = kept.changed.get(id).max(kept.changed_any.as_ref());
        if changed.is_some_and(|at| *at >= fetched) {
            return;
        }
        let adding: usize = subtree.dirs.values().map(|c| c.len() + 1).sum();
        if kept.entries + adding > KEPT_ENTRIES_MAX {
            kept.dirs.retain(|_, s| s.fetched.elapsed() < ttl);
            kept.entries = kept.dirs.values().map(|s| s.children.len() + 1).sum();
            if kept.entries + adding > KEPT_ENTRIES_MAX {
                return;
            }
        }
        kept.scopes
            .entry(id.to_string())
            .or_default()
            .insert(scope.to_string());
        for (prefix, children) in subtree.dirs {
            let key = (scope.to_string(), prefix);
            kept.remove(&key);
            kept.entries += children.len() + 1;
            kept.dirs.insert(
                key,
                DirSnapshot {
                    children: Arc::new(children),
                    fetched,
                },
            );
        }
    }

    /// Drops the kept listings of the directory at `prefix` of store `id` and, with `name`, of
    /// every directory below `name` in it; listings asked for before now are not kept any more.
    fn forget(&self, id: &str, prefix: &str, name: Option<&str>) {
        let mut kept = lock(&self.inner);
        kept.changed.insert(id.to_string(), Instant::now());
        let scopes: Vec<String> = kept
            .scopes
            .get(id)
            .map(|scopes| scopes.iter().cloned().collect())
            .unwrap_or_default();
        for scope in scopes {
            let mut doomed = vec![(scope.clone(), prefix.to_string())];
            if let Some(name) = name {
                let below = format!("{prefix}{name}/");
                doomed.extend(
                    kept.dirs
                        .range((scope.clone(), below.clone())..)
                        .map(|(key, _)| key)
                        .take_while(|(s, p)| *s == scope && p.starts_with(&below))
                        .cloned(),
                );
            }
            for key in &doomed {
                kept.remove(key);
            }
        }
    }

    /// Drops every kept listing (a change in a directory whose place is not known).
    fn forget_all(&self) {
        let mut kept = lock(&self.inner);
        kept.changed_any = Some(Instant::now());
        kept.dirs.clear();
        kept.entries = 0;
    }

    fn note_large(&self, id: &str, prefix: &str) {
        lock(&self.inner)
            .large
            .put((id.to_string(), prefix.to_string()), Instant::now());
    }

    fn is_large(&self, id: &str, prefix: &str) -> bool {
        lock(&self.inner)
            .large
            .get(&(id.to_string(), prefix.to_string()))
            .is_some_and(|at| at.elapsed() < LARGE_MEMORY)
    }
}

impl Fs {
    /// Whether directories of this backend are listed by subtree.
    fn lists_subtrees(settings: &BackendSettings) -> bool {
        settings.manifest.is_none() && settings.store.cheap_flat_listing()
    }

    /// Lists directory `path` by its subtree, keeping what it finds below: its children, or
    /// `None` when the subtree is too large (list it with the delimiter instead).
    pub(super) async fn list_by_subtree(
        &self,
        settings: &BackendSettings,
        path: &str,
        started: Instant,
    ) -> Result<Option<BTreeMap<String, ChildKind>>, StoreError> {
        let store_id = settings.store.id();
        let prefix = settings.dir_prefix_of(path);
        if !Self::lists_subtrees(settings) || self.kept.is_large(store_id, &prefix) {
            return Ok(None);
        }
        let mut subtree = list(settings, path, self.subtree_listing_max).await?;
        let root = subtree.take_root();
        if root.is_none() {
            self.kept.note_large(store_id, &prefix);
        }
        self.keep_subtree(settings, subtree, started);
        Ok(root)
    }

    /// What `path` is, found without listing its parent: a HEAD of the key and, in parallel, a
    /// LIST below it, whose page is kept as the listing of what it holds whole.
    pub(super) async fn probe(
        &self,
        settings: &BackendSettings,
        path: &str,
    ) -> Result<Option<ChildKind>, StoreError> {
        if !Self::lists_subtrees(settings) {
            return listing::probe(settings, path).await;
        }
        let store = &settings.store;
        let key = settings.key_of(path);
        let prefix = settings.dir_prefix_of(path);
        let keys = match self.kept.is_large(store.id(), &prefix) {
            true => 1,
            false => settings.page_size.map_or(PROBE_KEYS, |p| p.min(PROBE_KEYS)),
        };
        let started = Instant::now();
        let below = ListRequest::flat(&prefix).max_keys(Some(keys));
        // With `posix_metadata` the HEAD reads the metadata too: the lookup needs no second.
        let head = async {
            match settings.posix_metadata {
                true => store.head_with_metadata(&key).await,
                false => Ok(store.head(&key).await?.map(|meta| (meta, Metadata::new()))),
            }
        };
        let (head, below) = tokio::join!(head, store.list(&below));
        let below = below?;
        if below.objects.is_empty() && below.common_prefixes.is_empty() {
            let Some((meta, metadata)) = head? else {
                return Ok(None);
            };
            if settings.posix_metadata {
                self.metadata.put(store.id(), &key, metadata);
            }
            return Ok(Some(ChildKind::File(FileMeta::from(&meta))));
        }
        // A directory's marker sorts first below it: when the page does not start with one,
        // the directory has none, and so no metadata to read (a HEAD saved).
        if settings.posix_metadata && below.objects.first().is_none_or(|o| o.key != prefix) {
            self.metadata.put(store.id(), &prefix, Metadata::new());
        }
        let complete = below.next.is_none();
        let subtree = Subtree::build(&prefix, below.objects, complete);
        self.keep_subtree(settings, subtree, started);
        Ok(Some(ChildKind::DIR))
    }

    /// Keeps what `subtree` (asked for at `started`) found, unless this mount has written below
    /// its root: a file it wrote may have been committed (and let go by the write engine)
    /// while the LIST ran, and be missing from it.
    fn keep_subtree(&self, settings: &BackendSettings, subtree: Subtree, started: Instant) {
        let store = &settings.store;
        let wrote_below = lock(&self.written)
            .keys()
            .any(|(id, key)| id == store.id() && key.starts_with(&subtree.root));
        if !wrote_below {
            let ttl = self.options.ttl;
            self.kept
                .keep(store.id(), store.cache_scope(), subtree, started, ttl);
        }
    }

    /// A kept listing of directory `ino` younger than the TTL, with this mount's writes laid
    /// over it; from now on it is the directory's listing snapshot.
    pub(super) fn kept_listing(
        &self,
        ino: u64,
    ) -> Option<(Arc<BTreeMap<String, ChildKind>>, Instant)> {
        let node = self.node(ino).ok()?;
        let settings = node.backend.as_ref()?.settings();
        if !Self::lists_subtrees(&settings) {
            return None;
        }
        let prefix = settings.dir_prefix_of(&node.path);
        let (children, fetched) =
            self.kept
                .get(settings.store.cache_scope(), &prefix, self.options.ttl)?;
        if self.dir_changed_since(ino, fetched) {
            return None;
        }
        let mut children = (*children).clone();
        self.overlay_writes(&settings, &node.path, Vec::new(), &mut children);
        let children = Arc::new(children);
        lock(&self.listings).insert(
            ino,
            DirSnapshot {
                children: children.clone(),
                fetched,
            },
        );
        Some((children, fetched))
    }

    /// Drops the kept listings of directory `dir` and of every directory below its `name`,
    /// after a change there.
    pub(super) fn forget_kept(&self, dir: u64, name: &str) {
        let place = self
            .node(dir)
            .ok()
            .and_then(|node| Some((node.backend?.settings(), node.path)));
        match place {
            Some((settings, path)) => self.kept.forget(
                settings.store.id(),
                &settings.dir_prefix_of(&path),
                Some(name),
            ),
            None => self.kept.forget_all(),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::UNIX_EPOCH;

    use super::*;

    fn objects(keys: &[&str]) -> Vec<ObjectMeta> {
        keys.iter()
            .map(|key| ObjectMeta {
                key: key.to_string(),
                size: 1,
                etag: "e".into(),
                last_modified: UNIX_EPOCH,
            })
            .collect()
    }

    fn names(subtree: &Subtree, prefix: &str) -> Option<Vec<(String, bool)>> {
        let dir = subtree.dirs.get(prefix)?;
        Some(
            dir.iter()
                .map(|(name, kind)| (name.clone(), matches!(kind, ChildKind::Dir { .. })))
                .collect(),
        )
    }

    #[test]
    fn a_complete_listing_fills_every_directory_below_the_root() {
        let keys = ["t/a/b/f", "t/a/g", "t/a/h/", "t/x", "t/x/y"];
        let subtree = Subtree::build("t/", objects(&keys), true);
        let d = |n: &str| (n.to_string(), true);
        let f = |n: &str| (n.to_string(), false);
        assert_eq!(
            names(&subtree, "t/"),
            Some(vec![d("a"), d("x")]),
            "x is a dir"
        );
        assert_eq!(names(&subtree, "t/a/"), Some(vec![d("b"), f("g"), d("h")]));
        assert_eq!(names(&subtree, "t/a/b/"), Some(vec![f("f")]));
        assert_eq!(names(&subtree, "t/a/h/"), Some(vec![]), "a marker: empty");
        assert_eq!(names(&subtree, "t/x/"), Some(vec![f("y")]));
    }

    #[test]
    fn names_that_cannot_be_entries_hide_what_lies_below_them() {
        let keys = ["t/a//b", "t/./c", "t/ok"];
        let subtree = Subtree::build("t/", objects(&keys), true);
        assert_eq!(
            names(&subtree, "t/"),
            Some(vec![("a".into(), true), ("ok".into(), false)])
        );
        assert_eq!(names(&subtree, "t/a/"), Some(vec![]));
        assert_eq!(subtree.dirs.len(), 2);
    }

    #[test]
    fn a_cut_listing_keeps_only_the_directories_it_passed() {
        let keys = ["t/a/b/f", "t/a/c/f", "t/d/e/f"];
        let mut subtree = Subtree::build("t/", objects(&keys), false);
        assert!(subtree.take_root().is_none(), "the root is never whole");
        assert!(names(&subtree, "t/a/").is_some());
        assert!(names(&subtree, "t/a/b/").is_some());
        assert!(
            names(&subtree, "t/d/").is_none(),
            "an ancestor of the last key"
        );
        assert!(
            names(&subtree, "t/d/e/").is_none(),
            "may hold more after it"
        );
        // A page that ends inside the root's own files: nothing below is cut.
        let keys = ["t/a/f", "t/b"];
        let subtree = Subtree::build("t/", objects(&keys), false);
        assert!(names(&subtree, "t/a/").is_some());
        assert!(names(&subtree, "t/").is_none());
    }

    #[test]
    fn kept_listings_expire_and_are_forgotten_below_a_changed_name() {
        let kept = KeptListings::default();
        let ttl = Duration::from_secs(60);
        let keys = ["t/a/b/f", "t/a/g", "t/ab/f"];
        let subtree = Subtree::build("t/", objects(&keys), true);
        kept.keep("s", "s#me", subtree, Instant::now(), ttl);
        let subtree = Subtree::build("t/", objects(&["t/a/b/f"]), true);
        kept.keep("s", "s#you", subtree, Instant::now(), ttl);
        assert!(kept.get("s#me", "t/a/b/", ttl).is_some());
        assert!(
            kept.get("s#me", "t/a/b/", Duration::ZERO).is_none(),
            "expired"
        );
        assert!(
            kept.get("s#other", "t/a/b/", ttl).is_none(),
            "another principal"
        );
        kept.forget("s", "t/", Some("a"));
        assert!(
            kept.get("s#me", "t/", ttl).is_none(),
            "the changed directory"
        );
        assert!(kept.get("s#me", "t/a/", ttl).is_none());
        assert!(kept.get("s#me", "t/a/b/", ttl).is_none());
        assert!(
            kept.get("s#you", "t/a/b/", ttl).is_none(),
            "through any principal"
        );
        assert!(
            kept.get("s#me", "t/ab/", ttl).is_some(),
            "a sibling sharing a prefix"
        );
        assert_eq!(lock(&kept.inner).entries, 2, "t/ab/ and its file");
    }

    #[test]
    fn a_listing_asked_for_before_a_change_is_not_kept() {
        let kept = KeptListings::default();
        let ttl = Duration::from_secs(60);
        let subtree = || Subtree::build("t/", objects(&["t/a/f"]), true);
        let asked = Instant::now();
        kept.forget("s", "elsewhere/", None);
        kept.keep("s", "s", subtree(), asked, ttl);
        assert!(kept.get("s", "t/a/", ttl).is_none());
        kept.keep("other", "other", subtree(), asked, ttl);
        assert!(kept.get("other", "t/a/", ttl).is_some(), "another store");
        let later = Instant::now() + Duration::from_millis(1);
        kept.keep("s", "s", subtree(), later, ttl);
        assert!(kept.get("s", "t/a/", ttl).is_some());
        kept.forget_all();
        assert!(kept.get("s", "t/a/", ttl).is_none());
        kept.keep("other", "other", subtree(), asked, ttl);
        assert!(
            kept.get("other", "t/a/", ttl).is_none(),
            "after a change anywhere"
        );
    }
}
