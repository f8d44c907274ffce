//! The inode table: stable inode numbers for paths the kernel holds, freed when it forgets them.
//! Every number the kernel is told of is journalled (`kernel_state`), so that a successor
//! serving the same connection knows it.

use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasher, RandomState};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use hashbrown::HashTable;

use super::backend::Backend;
use super::kernel_state::{KernelState, NameHeld, NodeRecord, Record, Restored, Snapshot};
use super::listing::{ChildKind, FileMeta};
use crate::telemetry::Metrics;

pub const ROOT_INO: u64 = 1;

#[derive(Debug, Clone)]
pub struct Node {
    pub ino: u64,
    pub parent: u64,
    pub name: String,
    /// `None` only for the mount root, whose children are the backends.
    pub backend: Option<Arc<Backend>>,
    /// Path inside the backend ("" for the backend's own directory).
    pub path: String,
    pub kind: ChildKind,
    /// When `kind` was last confirmed by the store.
    pub refreshed: Instant,
    /// The ETag the kernel's page cache holds data of, if any; lets a re-open keep that cache.
    pub cached_etag: Option<String>,
    /// Kernel references (lookups not yet forgotten); for a restored node, those since the
    /// restore.
    lookups: u64,
    /// Known to the kernel before this process (from the journal): how many references the
    /// kernel held then is unknown, see [`InodeTable::forget`].
    restored: bool,
    /// When the kernel last asked about it (looked it up, listed it, or asked for it by number).
    used: Instant,
    /// Named to the kernel for eviction ([`InodeTable::evictable`]) and not used since: not
    /// named again while the kernel decides (it keeps an entry someone holds).
    offered: bool,
}

impl Node {
    pub fn is_dir(&self) -> bool {
        matches!(self.kind, ChildKind::Dir { .. })
    }

    /// The kernel asks about it now: not idle, and named for eviction again only once idle.
    fn touch(&mut self, now: Instant) {
        self.used = now;
        self.offered = false;
    }

    pub fn file(&self) -> Option<&FileMeta> {
        match &self.kind {
            ChildKind::File(meta) => Some(meta),
            ChildKind::Dir { .. } => None,
        }
    }
}

#[derive(Debug)]
pub struct InodeTable {
    /// Boxed: a map sized in powers of two holds up to twice as many slots as nodes, and a
    /// slot of a 208-byte node would cost as much empty as full (measured: 690 → 495 bytes per
    /// inode).
    nodes: HashMap<u64, Box<Node>>,
    /// The inode holding each name, hashed by its node's `(parent, name)`: one `u64` a name, not
    /// a second copy of it as a map key would be (measured with glibc's count over 200,000
    /// lookups: 352 → 320 bytes an inode). A node renamed over or replaced stays in `nodes`
    /// without a name. Every inode here is in `nodes`, whose name says where it hashes: it
    /// leaves here before it leaves there or its name changes.
    names: HashTable<u64>,
    hasher: RandomState,
    next_ino: u64,
    journal: Option<Arc<KernelState>>,
    /// Where the count of inodes held is kept (`msfs_fuse_inodes`, summed over the mounts).
    metrics: Option<Arc<Metrics>>,
}

impl InodeTable {
    pub fn new() -> InodeTable {
        let root = Node {
            ino: ROOT_INO,
            parent: ROOT_INO,
            name: String::new(),
            backend: None,
            path: String::new(),
            kind: ChildKind::DIR,
            refreshed: Instant::now(),
            cached_etag: None,
            lookups: 1,
            restored: false,
            used: Instant::now(),
            offered: false,
        };
        InodeTable {
            nodes: HashMap::from([(ROOT_INO, Box::new(root))]),
            names: HashTable::new(),
            hasher: RandomState::new(),
            next_ino: ROOT_INO + 1,
            journal: None,
            metrics: None,
        }
    }

    /// Counts this table's inodes in `metrics` from now on (and until it is dropped).
    pub fn set_metrics(&mut self, metrics: Arc<Metrics>) {
        metrics.add_fuse_inodes(self.nodes.len() as i64);
        self.metrics = Some(metrics);
    }

    fn count(&self, delta: i64) {
        if let Some(metrics) = &self.metrics {
            metrics.add_fuse_inodes(delta);
        }
    }

    /// Journals every change the kernel will be told of from now on.
    pub fn set_journal(&mut self, journal: Arc<KernelState>) {
        self.journal = Some(journal);
    }

    fn journal(&self, record: impl FnOnce() -> Record) {
        if let Some(journal) = &self.journal {
            journal.append(&record());
        }
    }

    /// Takes in the inodes a previous server of the connection left (`restored`), their
    /// backends found by name by `backend` (those of a backend gone since are left out: the
    /// kernel's requests on them fail with ESTALE). File metadata is not journalled, so a
    /// restored file's is asked of the store at its next use.
    pub fn restore(
        &mut self,
        restored: &Restored,
        backend: impl Fn(&str) -> Option<Arc<Backend>>,
    ) -> usize {
        let now = Instant::now();
        let mut taken = 0;
        for record in restored.nodes.values() {
            self.next_ino = self.next_ino.max(record.ino + 1);
            let Some(backend) = backend(&record.backend) else {
                tracing::warn!(backend = %record.backend, path = %record.path,
                    "the kernel holds an inode of a backend this mount no longer has");
                continue;
            };
            let kind = if record.dir {
                ChildKind::DIR
            } else {
                // An empty ETag marks metadata to be confirmed by the store (see
                // `Fs::refreshed`).
                ChildKind::File(FileMeta {
                    size: 0,
                    etag: String::new(),
                    mtime: SystemTime::UNIX_EPOCH,
                    owner: None,
                })
            };
            let replaced = self.nodes.insert(
                record.ino,
                Box::new(Node {
                    ino: record.ino,
                    parent: record.parent,
                    name: record.name.clone(),
                    backend: Some(backend),
                    path: record.path.clone(),
                    kind,
                    refreshed: now,
                    cached_etag: None,
                    lookups: 0,
                    restored: true,
                    used: now,
                    offered: false,
                }),
            );
            taken += 1;
            if replaced.is_none() {
                self.count(1);
            }
        }
        for ((parent, name), ino) in &restored.names {
            // A journal names an inode by its node's own name; any other mapping is not taken
            // (a lookup of the name makes a new inode).
            if self
                .nodes
                .get(ino)
                .is_some_and(|node| node.parent == *parent && node.name == *name)
            {
                self.give_name(*ino);
            }
        }
        taken
    }

    /// Writes the table as journal records that rebuild it (for a compaction).
    pub fn snapshot(&self, out: &mut Snapshot) {
        let nodes: Vec<&Node> = self
            .nodes
            .values()
            .map(|node| &**node)
            .filter(|node| node.backend.is_some())
            .collect();
        out.nodes(
            &nodes,
            |node| NodeRecord {
                ino: node.ino,
                parent: node.parent,
                name: node.name.clone(),
                backend: node
                    .backend
                    .as_ref()
                    .map(|backend| backend.dir_name.clone())
                    .unwrap_or_default(),
                path: node.path.clone(),
                dir: node.is_dir(),
            },
            |node| NameHeld::of(node.ino, self.child(node.parent, &node.name)),
        );
    }

    pub fn get(&self, ino: u64) -> Option<&Node> {
        self.nodes.get(&ino).map(|node| &**node)
    }

    pub fn get_mut(&mut self, ino: u64) -> Option<&mut Node> {
        self.nodes.get_mut(&ino).map(|node| &mut **node)
    }

    /// Inode `ino`, which the kernel is asking about now (it is not idle).
    pub fn used(&mut self, ino: u64) -> Option<&Node> {
        let node = self.nodes.get_mut(&ino)?;
        node.touch(Instant::now());
        Some(node)
    }

    /// Entries (parent, name) the kernel is to be asked to drop, so that it forgets their
    /// inodes and this table frees them: file inodes (never directories, which may be a
    /// process's working directory) that are not `open`, and either unused for `idle`, or,
    /// while the table holds more than `limit` inodes, the least recently used beyond it. Each
    /// is named once until it is used again: the kernel keeps an entry that someone holds.
    pub fn evictable(
        &mut self,
        idle: Duration,
        limit: usize,
        open: &HashSet<u64>,
    ) -> Vec<(u64, String)> {
        let now = Instant::now();
        let mut going = 0;
        let mut candidates: Vec<(Instant, u64)> = Vec::new();
        for node in self.nodes.values() {
            if node.offered {
                going += 1;
            } else if node.ino != ROOT_INO
                && (node.lookups > 0 || node.restored)
                && !node.is_dir()
                && !open.contains(&node.ino)
            {
                candidates.push((node.used, node.ino));
            }
        }
        let over = (self.nodes.len() - going).saturating_sub(limit);
        let chosen = if over >= candidates.len() {
            candidates
        } else {
            // The `over` least recently used, and any other idle one.
            if over > 0 {
                candidates.select_nth_unstable(over - 1);
            }
            let mut chosen = candidates.split_off(over);
            chosen.retain(|(used, _)| now.duration_since(*used) >= idle);
            chosen.extend_from_slice(&candidates);
            chosen
        };
        chosen
            .into_iter()
            .filter_map(|(_, ino)| {
                let node = self.nodes.get(&ino)?;
                // A replaced entry's name is its successor's: dropping it would drop that one.
                let named = (self.child(node.parent, &node.name) == Some(ino))
                    .then(|| (node.parent, node.name.clone()));
                self.nodes.get_mut(&ino)?.offered = true;
                named
            })
            .collect()
    }

    /// The inode of `name` in `parent` if the table already has one.
    pub fn child(&self, parent: u64, name: &str) -> Option<u64> {
        let hash = self.hasher.hash_one((parent, name));
        self.names
            .find(hash, |ino| named(&self.nodes, *ino, parent, name))
            .copied()
    }

    /// Takes `name` in `parent` from the inode holding it, if any, which stays in `nodes`.
    fn take_name(&mut self, parent: u64, name: &str) -> Option<u64> {
        let hash = self.hasher.hash_one((parent, name));
        let nodes = &self.nodes;
        let held = self
            .names
            .find_entry(hash, |ino| named(nodes, *ino, parent, name))
            .ok()?;
        Some(held.remove().0)
    }

    /// Gives inode `ino` (in `nodes`) its node's name, taking it from any other holder.
    fn give_name(&mut self, ino: u64) {
        let (nodes, hasher) = (&self.nodes, &self.hasher);
        let Some(node) = nodes.get(&ino) else {
            return;
        };
        let hash = hasher.hash_one((node.parent, node.name.as_str()));
        if let Ok(held) = self
            .names
            .find_entry(hash, |held| named(nodes, *held, node.parent, &node.name))
        {
            held.remove();
        }
        self.names.insert_unique(hash, ino, |ino| {
            let node = &nodes[ino];
            hasher.hash_one((node.parent, node.name.as_str()))
        });
    }

    /// Takes inode `ino` (in `nodes`) out of `names` if it holds its node's name.
    fn drop_name(&mut self, ino: u64) {
        let Some(node) = self.nodes.get(&ino) else {
            return;
        };
        let hash = self.hasher.hash_one((node.parent, node.name.as_str()));
        if let Ok(held) = self.names.find_entry(hash, |held| *held == ino) {
            held.remove();
        }
    }

    /// Records that `name` in `parent` is `kind` and takes one kernel reference on it. The inode
    /// number is kept while the entry stays the same kind; a file replaced by a directory (or the
    /// reverse) gets a new number so the kernel never confuses the two.
    pub fn lookup(
        &mut self,
        parent: u64,
        name: &str,
        backend: Arc<Backend>,
        path: String,
        kind: ChildKind,
    ) -> Node {
        let now = Instant::now();
        if let Some(ino) = self.child(parent, name)
            && let Some(node) = self.nodes.get_mut(&ino)
            && node.is_dir() == matches!(kind, ChildKind::Dir { .. })
        {
            node.kind = kind;
            node.refreshed = now;
            node.lookups += 1;
            node.touch(now);
            return Node::clone(node);
        }
        let ino = self.next_ino;
        self.next_ino += 1;
        self.journal(|| {
            Record::Node(NodeRecord {
                ino,
                parent,
                name: name.to_string(),
                backend: backend.dir_name.clone(),
                path: path.clone(),
                dir: matches!(kind, ChildKind::Dir { .. }),
            })
        });
        let node = Node {
            ino,
            parent,
            name: name.to_string(),
            backend: Some(backend),
            path,
            kind,
            refreshed: now,
            cached_etag: None,
            lookups: 1,
            restored: false,
            used: now,
            offered: false,
        };
        // A replaced entry stays in `nodes` until the kernel forgets it, but its name now maps to
        // the new inode.
        self.nodes.insert(ino, Box::new(node.clone()));
        self.give_name(ino);
        self.count(1);
        node
    }

    /// As [`InodeTable::lookup`], for an entry of a listing asked for at `listed_at`: a node
    /// refreshed since — or any node when `keep` — keeps what it knows, since the listing may
    /// predate a write or a rename this mount made.
    #[allow(clippy::too_many_arguments)]
    pub fn lookup_listed(
        &mut self,
        parent: u64,
        name: &str,
        backend: Arc<Backend>,
        path: String,
        kind: ChildKind,
        listed_at: Instant,
        keep: bool,
    ) -> Node {
        if let Some(ino) = self.child(parent, name)
            && let Some(node) = self.nodes.get_mut(&ino)
            && node.is_dir() == matches!(kind, ChildKind::Dir { .. })
            && (keep || node.refreshed >= listed_at)
        {
            node.lookups += 1;
            node.touch(Instant::now());
            return Node::clone(node);
        }
        self.lookup(parent, name, backend, path, kind)
    }

    /// Drops `count` kernel references; the inode is freed when none remain. The kernel sends
    /// one FORGET with its whole count when it drops an inode (and a FORGET of 1 for a lookup
    /// answer it could not use), so a restored inode, whose count before the restore is
    /// unknown, is freed by a FORGET of more than the lookups since.
    pub fn forget(&mut self, ino: u64, count: u64) {
        if ino == ROOT_INO {
            return;
        }
        let Some(node) = self.nodes.get_mut(&ino) else {
            return;
        };
        let gone = if node.restored {
            let gone = count > node.lookups;
            node.lookups = node.lookups.saturating_sub(count);
            gone
        } else {
            node.lookups = node.lookups.saturating_sub(count);
            node.lookups == 0
        };
        if gone {
            self.drop_name(ino);
            self.nodes.remove(&ino);
            self.count(-1);
            self.journal(|| Record::Forgotten { ino });
        }
    }

    /// `name` in `parent` is gone (unlinked, removed or renamed away): lookups no longer find
    /// its inode, which lives on until the kernel forgets it.
    pub fn remove_name(&mut self, parent: u64, name: &str) {
        if self.take_name(parent, name).is_some() {
            self.journal(|| Record::Unnamed {
                parent,
                name: name.to_string(),
            });
        }
    }

    /// Moves the inode of `name` in `parent` to `new_name` in `new_parent` (at `new_path`),
    /// replacing whatever had that name.
    pub fn rename(
        &mut self,
        parent: u64,
        name: &str,
        new_parent: u64,
        new_name: &str,
        new_path: String,
    ) {
        let Some(ino) = self.take_name(parent, name) else {
            self.remove_name(new_parent, new_name);
            return;
        };
        self.journal(|| Record::Moved {
            ino,
            parent: new_parent,
            name: new_name.to_string(),
            path: new_path.clone(),
        });
        if let Some(node) = self.nodes.get_mut(&ino) {
            node.parent = new_parent;
            node.name = new_name.to_string();
            node.path = new_path;
        }
        // (`take_name` found `ino` through its node, so the node is there.)
        self.give_name(ino);
    }

    /// A number for a directory entry the kernel takes no reference on (plain readdir): the
    /// entry's inode if it has one, else a fresh number that no node uses.
    pub fn peek_or_reserve(&mut self, parent: u64, name: &str) -> u64 {
        self.child(parent, name).unwrap_or_else(|| {
            let ino = self.next_ino;
            self.next_ino += 1;
            ino
        })
    }

    pub fn len(&self) -> usize {
        self.nodes.len()
    }
}

/// Whether inode `ino` of `nodes` is `name` in `parent`.
fn named(nodes: &HashMap<u64, Box<Node>>, ino: u64, parent: u64, name: &str) -> bool {
    nodes
        .get(&ino)
        .is_some_and(|node| node.parent == parent && node.name == name)
}

impl Drop for InodeTable {
    fn drop(&mut self) {
        self.count(-(self.nodes.len() as i64));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fs::backend::BackendSettings;
    use crate::store::FileStore;
    use std::time::SystemTime;

    fn backend() -> (tempfile::TempDir, Arc<Backend>) {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = Arc::new(FileStore::new(dir.path().to_path_buf()).expect("store"));
        let backend = Backend::new(
            "b",
            BackendSettings {
                store,
                prefix: String::new(),
                readonly: true,
                flush_on_close: false,
                posix_metadata: false,
                uid: 0,
                gid: 0,
                dir_perm: 0o555,
                file_perm: 0o444,
                page_size: None,
                max_key_bytes: crate::store::MAX_KEY_LEN,
                manifest: None,
            },
        );
        (dir, Arc::new(backend))
    }

    fn file(size: u64) -> ChildKind {
        ChildKind::File(FileMeta {
            size,
            etag: "e".into(),
            mtime: SystemTime::UNIX_EPOCH,
            owner: None,
        })
    }

    /// Files the kernel holds are named for eviction when idle, or least recently used first
    /// beyond the limit; never a directory, an open file, or an entry named already and not
    /// used since; a file used again is named again once idle.
    #[test]
    fn eviction_names_idle_files_and_the_least_recently_used_beyond_the_limit() {
        let (_d, b) = backend();
        let mut table = InodeTable::new();
        let dir = table.lookup(ROOT_INO, "d", b.clone(), "d".into(), ChildKind::DIR);
        let files: Vec<u64> = (0..6)
            .map(|i| {
                let name = format!("f{i}");
                table
                    .lookup(dir.ino, &name, b.clone(), format!("d/{name}"), file(1))
                    .ino
            })
            .collect();
        let open = HashSet::from([files[0]]);
        let long = Duration::from_secs(3600);
        // 8 inodes (root, d, six files), nothing idle, no limit reached: nothing.
        assert!(table.evictable(long, 8, &open).is_empty());
        // Limit 5: the three least recently used files that are not open (f1, f2, f3).
        let names = |entries: Vec<(u64, String)>| -> Vec<String> {
            let mut names: Vec<String> = entries.into_iter().map(|(_, n)| n).collect();
            names.sort();
            names
        };
        assert_eq!(names(table.evictable(long, 5, &open)), ["f1", "f2", "f3"]);
        // Named already: while the kernel decides, the same limit names nothing more.
        assert!(table.evictable(long, 5, &open).is_empty());
        // f1 used again (the kernel kept it), then everything idle: every closed file but f1,
        // which was named and used since, is named; the directory never is.
        table.used(files[1]);
        let all_idle = table.evictable(Duration::ZERO, 100, &open);
        assert_eq!(names(all_idle), ["f1", "f4", "f5"]);
        assert!(
            table
                .evictable(Duration::ZERO, 100, &HashSet::new())
                .contains(&(dir.ino, "f0".into()))
        );
        // The kernel forgets what it dropped: the table shrinks.
        for ino in &files[1..] {
            table.forget(*ino, 1);
        }
        assert_eq!(table.len(), 3);
    }

    #[test]
    fn repeated_lookups_keep_the_inode_number() {
        let (_d, b) = backend();
        let mut table = InodeTable::new();
        let first = table.lookup(ROOT_INO, "x", b.clone(), "x".into(), file(1));
        let again = table.lookup(ROOT_INO, "x", b, "x".into(), file(2));
        assert_eq!(first.ino, again.ino);
        assert_eq!(again.file().map(|f| f.size), Some(2));
    }

    #[test]
    fn inode_is_freed_only_after_all_lookups_are_forgotten() {
        let (_d, b) = backend();
        let mut table = InodeTable::new();
        let node = table.lookup(ROOT_INO, "x", b.clone(), "x".into(), file(1));
        table.lookup(ROOT_INO, "x", b, "x".into(), file(1));
        table.forget(node.ino, 1);
        assert!(table.get(node.ino).is_some());
        table.forget(node.ino, 1);
        assert!(table.get(node.ino).is_none());
        assert_eq!(table.child(ROOT_INO, "x"), None);
        assert_eq!(table.len(), 1);
    }

    #[test]
    fn a_file_replaced_by_a_directory_gets_a_new_inode() {
        let (_d, b) = backend();
        let mut table = InodeTable::new();
        let as_file = table.lookup(ROOT_INO, "x", b.clone(), "x".into(), file(1));
        let as_dir = table.lookup(ROOT_INO, "x", b, "x".into(), ChildKind::DIR);
        assert_ne!(as_file.ino, as_dir.ino);
        table.forget(as_file.ino, 1);
        assert_eq!(table.child(ROOT_INO, "x"), Some(as_dir.ino));
    }
}
