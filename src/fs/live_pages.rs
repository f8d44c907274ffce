//! A live directory too large to list whole, read from the store a LIST page at a time as
//! `readdir` walks it: memory per open directory stays at about two pages, whatever the
//! directory's size (a 1,000,000-key prefix is a thousand pages; listed whole it would be held in
//! memory for as long as the directory is open).
//!
//! Order and names: a delimited LIST returns objects and common prefixes in key order, which is
//! not name order (`a`, `a.txt`, `a/`: `.` sorts before `/`), and a file `a` and a directory `a/`
//! may both exist. Entries are therefore handed out in the order of `name + "/"`, files and
//! directories alike, so a file and a directory of one name sort together and the directory wins,
//! as in a whole listing. An entry read is held back until the listing has passed its sort key
//! (no directory of its name can come later), which holds back at most the names between `a` and
//! `a/` in key order. This mount's changes (files being written, names unlinked while open) are
//! fixed at `opendir` and merged in the same order.
//!
//! Offsets are ordinals in that order; a seek backwards (rewinddir, or a reply the kernel
//! dropped) lists again from the start.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use super::DirEntry;
use super::backend::BackendSettings;
use super::listing::{ChildKind, FileMeta, valid_name};
use crate::store::{ListRequest, StoreError};

/// Entries kept behind the last offset asked for: the kernel resumes a reply it could not take
/// whole from an offset inside what it was last given.
const KEEP_BEHIND: usize = 1024;

pub(super) struct LivePages {
    settings: Arc<BackendSettings>,
    /// The directory's key prefix ("" or ending in "/").
    prefix: String,
    /// This mount's view over the listing, by sort key: `Some` adds or replaces, `None` hides.
    changes: BTreeMap<String, Option<ChildKind>>,
    window: Mutex<Window>,
    /// Serializes fetches: one LIST in flight per open directory.
    fetching: tokio::sync::Mutex<()>,
}

#[derive(Default)]
struct Window {
    /// Ordinal of `entries[0]`.
    start: u64,
    entries: Vec<DirEntry>,
    /// Read from the store, not handed out yet: by sort key.
    held: BTreeMap<String, ChildKind>,
    /// The sort key up to which `entries` is final (changes merged up to it).
    merged_to: Option<String>,
    /// The next page's continuation token; `None` before the first page and after the last.
    token: Option<String>,
    exhausted: bool,
    /// LIST pages read, for tests.
    pages_read: usize,
}

/// Files and directories sort by their name followed by "/": see the module doc.
fn sort_key(name: &str) -> String {
    format!("{name}/")
}

fn name_of(sort_key: &str) -> &str {
    sort_key.strip_suffix('/').unwrap_or(sort_key)
}

impl LivePages {
    /// A reader of the directory at key prefix `prefix`, with this mount's `changes` (by name).
    pub fn new(
        settings: Arc<BackendSettings>,
        prefix: String,
        changes: BTreeMap<String, Option<ChildKind>>,
    ) -> LivePages {
        LivePages {
            settings,
            prefix,
            changes: changes
                .into_iter()
                .map(|(name, change)| (sort_key(&name), change))
                .collect(),
            window: Mutex::new(Window::default()),
            fetching: tokio::sync::Mutex::new(()),
        }
    }

    fn window(&self) -> MutexGuard<'_, Window> {
        self.window.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether `get(from, 1)` can be answered without a LIST.
    pub fn ready(&self, from: u64) -> bool {
        let window = self.window();
        from >= window.start
            && (from < window.start + window.entries.len() as u64 || window.exhausted)
    }

    /// Reads pages until entry `from` is in the window, or the directory ends.
    pub async fn fill(&self, from: u64) -> Result<(), StoreError> {
        let _one_fetch = self.fetching.lock().await;
        loop {
            let token = {
                let mut window = self.window();
                if from < window.start {
                    *window = Window {
                        pages_read: window.pages_read,
                        ..Window::default()
                    };
                }
                let behind = usize::try_from(from - window.start).unwrap_or(usize::MAX);
                if behind > KEEP_BEHIND && behind <= window.entries.len() {
                    let forget = behind - KEEP_BEHIND;
                    window.entries.drain(..forget);
                    window.start += forget as u64;
                }
                if from < window.start + window.entries.len() as u64 || window.exhausted {
                    return Ok(());
                }
                window.token.clone()
            };
            let request = ListRequest::delimited(&self.prefix)
                .continuing(token)
                .max_keys(self.settings.page_size);
            let page = self.settings.store.list(&request).await?;
            let mut window = self.window();
            window.pages_read += 1;
            // Everything up to the largest key of the page has been seen.
            let mut position: Option<String> = None;
            for common in &page.common_prefixes {
                let rel = common.strip_prefix(&self.prefix).unwrap_or_default();
                let name = rel.strip_suffix('/').unwrap_or(rel);
                if valid_name(name) {
                    window.held.insert(sort_key(name), ChildKind::DIR);
                }
                position = position.max(Some(rel.to_string()));
            }
            for object in &page.objects {
                let rel = object.key.strip_prefix(&self.prefix).unwrap_or_default();
                // The directory's own marker ("dir/") lists as an empty name: not a child.
                if valid_name(rel) {
                    window
                        .held
                        .entry(sort_key(rel))
                        .or_insert_with(|| ChildKind::File(FileMeta::from(object)));
                }
                position = position.max(Some(rel.to_string()));
            }
            window.token = page.next;
            window.exhausted = window.token.is_none();
            match (window.exhausted, position) {
                (true, _) => self.release(&mut window, None),
                (false, Some(position)) => self.release(&mut window, Some(position)),
                (false, None) => {} // an empty page that is not the last: nothing is final yet
            }
        }
    }

    /// Moves the held entries whose sort key is at most `upto` (all of them when `None`) into
    /// the window, with this mount's changes in that range merged in.
    fn release(&self, window: &mut Window, upto: Option<String>) {
        let mut ready = match &upto {
            Some(upto) => {
                let rest = window.held.split_off(&format!("{upto}\0"));
                std::mem::replace(&mut window.held, rest)
            }
            None => std::mem::take(&mut window.held),
        };
        let from = window.merged_to.clone();
        for (key, change) in &self.changes {
            let after_from = from.as_ref().is_none_or(|f| key > f);
            let before_upto = upto.as_ref().is_none_or(|u| key <= u);
            if !(after_from && before_upto) {
                continue;
            }
            match change {
                Some(kind) if !matches!(ready.get(key), Some(ChildKind::Dir { .. })) => {
                    ready.insert(key.clone(), kind.clone());
                }
                Some(_) => {}
                None => {
                    ready.remove(key);
                }
            }
        }
        window
            .entries
            .extend(ready.into_iter().map(|(key, kind)| DirEntry {
                name: name_of(&key).to_string(),
                kind,
            }));
        if upto.is_some() {
            window.merged_to = upto.max(from);
        }
    }

    /// Up to `limit` entries from ordinal `from`, from what `fill` has read: call `fill` first.
    /// Fewer than asked only at the end of the window; none only at the end of the directory.
    pub fn get(&self, from: u64, limit: usize) -> Vec<DirEntry> {
        let window = self.window();
        let skip = usize::try_from(from.saturating_sub(window.start)).unwrap_or(usize::MAX);
        if from < window.start {
            return Vec::new();
        }
        window
            .entries
            .iter()
            .skip(skip)
            .take(limit)
            .cloned()
            .collect()
    }

    #[cfg(test)]
    pub fn pages_read(&self) -> usize {
        self.window().pages_read
    }

    #[cfg(test)]
    pub fn window_len(&self) -> usize {
        let window = self.window();
        window.entries.len() + window.held.len()
    }
}
