//! Directories as `opendir`, `readdir` and `releasedir` see them: a live directory listed whole
//! (with this mount's own writes and removals laid over the listing) or a page at a time when
//! it is large (`live_pages`), a manifest directory a page at a time (`dir_pages`), and the
//! attributes each entry is handed to the kernel with.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use super::dir_pages::{DirEntries, ManifestPages};
use super::inode::Node;
use super::kernel_state::Record;
use super::live_pages::LivePages;
use super::{
    Attr, BackendSettings, ChildKind, DirEntry, DirHandle, DirSnapshot, Fs, FsError, READDIR_CHUNK,
    Result, listing, lock, manifest_listing, pending_kind,
};
use crate::fs::backend::Backend;
use crate::manifest::namespace::Manifest;
use crate::write::DirtyMeta;

/// How [`Fs::readdir`] hands an entry to the kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Listed {
    /// With its inode, on which the kernel holds a reference (readdirplus). `cache`: whether
    /// the kernel may keep the entry and its attributes for the TTL (not when they may predate
    /// this mount's own write).
    Inode { cache: bool },
    /// A name and a number, no reference (readdir; readdirplus past the inode cap): the kernel
    /// looks the name up when it is used.
    Bare,
}

impl Fs {
    /// Whether `readdir(fh, offset)` can answer without asking the store (see
    /// `readdir_prepare`); true for every directory but a large live one.
    pub fn readdir_ready(&self, fh: u64, offset: u64) -> bool {
        match lock(&self.dirs).get(&fh).map(|h| &h.entries) {
            Some(DirEntries::Live(pages)) => pages.ready(offset.saturating_sub(2)),
            _ => true,
        }
    }

    /// Reads the store's listing of a large live directory up to the entry at `offset`, so that
    /// the `readdir` that follows has it.
    pub async fn readdir_prepare(&self, fh: u64, offset: u64) -> Result<()> {
        let handle = lock(&self.dirs)
            .get(&fh)
            .cloned()
            .ok_or(FsError::BadHandle(fh))?;
        let DirEntries::Live(pages) = &handle.entries else {
            return Ok(());
        };
        let pages = Arc::clone(pages);
        let result = pages.fill(offset.saturating_sub(2)).await;
        result.map_err(|e| {
            let dir = self.node(handle.ino);
            match dir.ok().and_then(|d| d.backend) {
                Some(backend) => Self::store_error(&backend, e),
                None => FsError::Invalid("the mount root is never listed from a store"),
            }
        })
    }

    /// Opens a directory. A live one is listed whole now, so errors surface here and offsets are
    /// stable for the handle's life; a manifest one is read page by page as `readdir` asks.
    pub async fn opendir(&self, ino: u64) -> Result<u64> {
        let handle = self.dir_handle(ino).await?;
        // `ls -l` asks for every entry's attributes: with `posix_metadata` they are in each
        // object's metadata, read for the whole listing at once now rather than one lookup at
        // a time. (A directory read a page at a time leaves it to those lookups.)
        if let DirEntries::Loaded(entries) = &handle.entries {
            self.read_ahead_metadata(&self.node(ino)?, entries).await;
        }
        let fh = self.next_handle.fetch_add(1, Ordering::Relaxed);
        self.journal(|| Record::Dir { fh, ino });
        lock(&self.dirs).insert(fh, Arc::new(handle));
        Ok(fh)
    }

    /// Directory `ino` opened: its entries, listed now (or paged as readdir walks them).
    pub(super) async fn dir_handle(&self, ino: u64) -> Result<DirHandle> {
        let node = self.node(ino)?;
        if !node.is_dir() {
            return Err(FsError::NotADirectory);
        }
        let loaded = |entries: Vec<DirEntry>| DirEntries::Loaded(Arc::new(entries));
        let mut listed_at = None;
        let entries = match &node.backend {
            None => loaded(
                self.backends()
                    .iter()
                    .map(|b| DirEntry {
                        name: b.dir_name.clone(),
                        kind: ChildKind::DIR,
                    })
                    .collect(),
            ),
            Some(backend) => {
                let settings = backend.settings();
                match &settings.manifest {
                    Some(manifest) => DirEntries::Paged(Mutex::new(ManifestPages::new(
                        manifest.clone(),
                        node.path.clone(),
                        self.mount_changes(&settings, Some(manifest), &node.path),
                    ))),
                    None => {
                        let (children, at) = match self.fresh_listing(ino) {
                            Some((children, at)) => (Some(children), at),
                            None => self.load_listing(ino, backend, &node.path).await?,
                        };
                        listed_at = Some(at);
                        match children {
                            Some(children) => loaded(
                                children
                                    .iter()
                                    .map(|(name, kind)| DirEntry {
                                        name: name.clone(),
                                        kind: kind.clone(),
                                    })
                                    .collect(),
                            ),
                            // Too large to hold: read a page at a time as readdir walks it.
                            None => DirEntries::Live(Arc::new(LivePages::new(
                                settings.clone(),
                                settings.dir_prefix_of(&node.path),
                                self.mount_changes(&settings, None, &node.path),
                            ))),
                        }
                    }
                }
            }
        };
        Ok(DirHandle {
            ino,
            parent: node.parent,
            entries,
            listed_at,
        })
    }

    /// How this mount has changed directory `path` (read from `manifest`, or live when `None`):
    /// the delta log's records, files being written (shown), and names unlinked while open
    /// (hidden).
    pub(super) fn mount_changes(
        &self,
        settings: &BackendSettings,
        manifest: Option<&Manifest>,
        path: &str,
    ) -> BTreeMap<String, Option<ChildKind>> {
        let mut changes: BTreeMap<String, Option<ChildKind>> = manifest
            .map(|manifest| manifest.overlay_children(path))
            .unwrap_or_default()
            .into_iter()
            .map(|(name, kind)| (name, kind.map(manifest_listing::child_kind)))
            .collect();
        let store_id = settings.store.id();
        let prefix = settings.dir_prefix_of(path);
        for (name, file) in self.engines.writes.files_in(store_id, &prefix) {
            let listed = changes.get(&name).cloned().flatten();
            if !matches!(listed, Some(ChildKind::Dir { .. })) {
                let owner = listed.and_then(|kind| kind.owner());
                changes.insert(name, Some(pending_kind(file, owner)));
            }
        }
        let unlinked = lock(&self.unlinked);
        for (id, key) in unlinked.keys() {
            if id == store_id
                && let Some(name) = key.strip_prefix(&prefix)
                && !name.contains('/')
            {
                changes.insert(name.to_string(), None);
            }
        }
        changes
    }

    async fn load_listing(
        &self,
        ino: u64,
        backend: &Backend,
        path: &str,
    ) -> Result<(Option<Arc<BTreeMap<String, ChildKind>>>, Instant)> {
        let settings = backend.settings();
        let started = Instant::now();
        // Files being written before the LIST are marked too: one committed (and let go by the
        // write engine) while the LIST ran may be listed with its old version.
        let before = self
            .engines
            .writes
            .files_in(settings.store.id(), &settings.dir_prefix_of(path));
        let by_subtree = self
            .list_by_subtree(&settings, path, started)
            .await
            .map_err(|e| Self::store_error(backend, e))?
            .filter(|children| children.len() <= self.whole_listing_max);
        let listed = match by_subtree {
            Some(children) => Some(children),
            None => listing::list_dir(&settings, path, self.whole_listing_max)
                .await
                .map_err(|e| Self::store_error(backend, e))?,
        };
        let Some(mut children) = listed else {
            return Ok((None, started));
        };
        self.overlay_writes(&settings, path, before, &mut children);
        let children = Arc::new(children);
        // A change made while the LIST ran may be missing from it: good enough for the one
        // `opendir` that asked (as for any listing racing a change), not to answer others.
        if !self.dir_changed_since(ino, started) {
            lock(&self.listings).insert(
                ino,
                DirSnapshot {
                    children: children.clone(),
                    fetched: started,
                },
            );
        }
        Ok((Some(children), started))
    }

    /// Shows files being written (which may not exist in the store yet) and hides objects
    /// unlinked while open (which still do).
    pub(super) fn overlay_writes(
        &self,
        settings: &BackendSettings,
        path: &str,
        before: Vec<(String, DirtyMeta)>,
        children: &mut BTreeMap<String, ChildKind>,
    ) {
        let store_id = settings.store.id();
        let prefix = settings.dir_prefix_of(path);
        let now = self.engines.writes.files_in(store_id, &prefix);
        for (name, file) in before.into_iter().chain(now) {
            let listed = children.get(&name);
            if !matches!(listed, Some(ChildKind::Dir { .. })) {
                let owner = listed.and_then(ChildKind::owner);
                children.insert(name, pending_kind(file, owner));
            }
        }
        let unlinked = lock(&self.unlinked);
        children.retain(|name, _| {
            !unlinked.contains_key(&(store_id.to_string(), format!("{prefix}{name}")))
        });
    }

    /// Entries of an open directory from `offset` on, each handed to `sink` with its offset (the
    /// one the kernel passes back to continue after it) until `sink` returns false because the
    /// reply buffer is full. With `plus`, each accepted child entry takes a kernel reference, as
    /// readdirplus requires ([`Listed::Inode`]) — until the mount holds twice
    /// `evictable_inode_limit` inodes: past that, a name without an inode is listed bare
    /// ([`Listed::Bare`]), so that a listing longer than the evictor keeps up with (`find` reads
    /// 100,000 names before it stats one) cannot grow the table without bound.
    pub fn readdir(
        &self,
        fh: u64,
        offset: u64,
        plus: bool,
        mut sink: impl FnMut(u64, &str, Attr, Listed) -> bool,
    ) -> Result<()> {
        let handle = lock(&self.dirs)
            .get(&fh)
            .cloned()
            .ok_or(FsError::BadHandle(fh))?;
        let dir = self.node(handle.ino)?;
        let parent_attr = self
            .node(handle.parent)
            .map(|p| self.attr_of(&p))
            .unwrap_or_else(|_| self.attr_of(&dir));
        let dot_entries = [(".", self.attr_of(&dir)), ("..", parent_attr)];
        let mut index = offset;
        let dot = if plus {
            Listed::Inode { cache: true }
        } else {
            Listed::Bare
        };
        while let Some((name, attr)) = dot_entries.get(index as usize) {
            index += 1;
            if !sink(index, name, attr.clone(), dot) {
                return Ok(());
            }
        }
        loop {
            let chunk =
                handle
                    .entries
                    .get(index - 2, READDIR_CHUNK)
                    .map_err(|e| match &dir.backend {
                        Some(backend) => Self::manifest_error(backend, e),
                        None => FsError::Invalid("the mount root has no manifest"),
                    })?;
            if chunk.is_empty() {
                return Ok(());
            }
            for entry in &chunk {
                index += 1;
                // None: the backend was removed from under the root, or this mount removed the
                // name after the listing was taken; skip it.
                let Some((attr, listed)) = self.entry_attr(&dir, entry, plus, handle.listed_at)
                else {
                    continue;
                };
                if !sink(index, &entry.name, attr.clone(), listed) {
                    if let Listed::Inode { .. } = listed {
                        self.forget(attr.ino, 1);
                    }
                    return Ok(());
                }
            }
        }
    }

    fn entry_attr(
        &self,
        dir: &Node,
        entry: &DirEntry,
        plus: bool,
        listed_at: Option<Instant>,
    ) -> Option<(Attr, Listed)> {
        let backend = match &dir.backend {
            Some(b) => b.clone(),
            None => self
                .backends()
                .into_iter()
                .find(|b| b.dir_name == entry.name)?,
        };
        if listed_at.is_some_and(|at| self.removed_since(dir.ino, &entry.name, at)) {
            return None;
        }
        if plus && self.hands_out_inode(dir.ino, &entry.name) {
            let path = match &dir.backend {
                Some(_) => listing::child_path(&dir.path, &entry.name),
                None => String::new(),
            };
            let settings = backend.settings();
            let key = settings.key_of(&path);
            // Metadata not read within the TTL: the kernel asks again (a lookup reads it).
            let posix_known = dir.backend.is_none()
                || self.posix_known(
                    &settings,
                    &path,
                    matches!(entry.kind, ChildKind::Dir { .. }),
                );
            let being_written = match &dir.backend {
                Some(_) => self.engines.writes.find(settings.store.id(), &key),
                None => None,
            };
            // A file this mount wrote within the TTL whose commit has landed: neither the
            // listing nor what its node last saw (the size when writing began) is sure to be
            // its version, so the kernel must ask again (lookup, getattr: the store answers)
            // instead of caching this entry.
            let mut trusted = true;
            let node = match being_written {
                // Its size is the write engine's, newer than any listing's.
                Some(file) => lock(&self.inodes).lookup(
                    dir.ino,
                    &entry.name,
                    backend,
                    path,
                    pending_kind(file.meta(), entry.kind.owner()),
                ),
                None => {
                    let written = self.recently_written(settings.store.id(), &key);
                    trusted = !written;
                    let mut inodes = lock(&self.inodes);
                    match listed_at {
                        // What the mount learnt since the listing was asked for (a new size,
                        // a rename) must not be replaced by the listing's.
                        Some(at) => inodes.lookup_listed(
                            dir.ino,
                            &entry.name,
                            backend,
                            path,
                            entry.kind.clone(),
                            at,
                            written,
                        ),
                        None => {
                            inodes.lookup(dir.ino, &entry.name, backend, path, entry.kind.clone())
                        }
                    }
                }
            };
            let cache = trusted && posix_known;
            return Some((self.attr_of(&node), Listed::Inode { cache }));
        }
        let mut inodes = lock(&self.inodes);
        let ino = inodes.peek_or_reserve(dir.ino, &entry.name);
        drop(inodes);
        let attr =
            super::lookup::listed_attr(ino, &entry.kind, &backend.settings(), self.mounted_at);
        Some((attr, Listed::Bare))
    }

    /// Whether readdirplus gives `name` in `dir` an inode: below the cap (twice
    /// `evictable_inode_limit`), or when it has one already (which costs nothing more).
    fn hands_out_inode(&self, dir: u64, name: &str) -> bool {
        let inodes = lock(&self.inodes);
        inodes.len() < self.options.inode_limit.get().saturating_mul(2)
            || inodes.child(dir, name).is_some()
    }

    pub fn releasedir(&self, fh: u64) {
        if lock(&self.dirs).remove(&fh).is_some() {
            self.journal(|| Record::DirClosed { fh });
        }
    }
}
