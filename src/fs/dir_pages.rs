//! The entries of an open directory, as `readdir` walks them by offset.
//!
//! A live directory is listed whole at `opendir` (a snapshot keeps offsets stable) unless it has
//! more than `listing::WHOLE_LISTING_MAX` entries: then it is read a LIST page at a time
//! (`live_pages`). A manifest directory may hold millions of entries, so it is
//! read from the manifest a page at a time as the kernel asks: memory per open directory stays
//! at one page plus what this mount changed in it (delta log, files being written, names
//! unlinked while open), which is fixed at `opendir` and merged in name order.

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::{Arc, Mutex};

use super::DirEntry;
use super::listing::{ChildKind, valid_name};
use super::live_pages::LivePages;
use super::manifest_listing::child_kind;
use crate::manifest::namespace::{Manifest, ManifestError};

/// Entries read from the manifest per page.
const PAGE: usize = 1024;

pub(super) enum DirEntries {
    /// Listed whole at `opendir`.
    Loaded(Arc<Vec<DirEntry>>),
    /// Read from a manifest a page at a time.
    Paged(Mutex<ManifestPages>),
    /// A live directory too large to list whole, read from the store a page at a time
    /// (`Fs::readdir_prepare` fetches what `get` then answers).
    Live(Arc<LivePages>),
}

impl DirEntries {
    /// Up to `limit` entries starting at ordinal `from` (0 is the first entry after "." and
    /// ".."); fewer only at the end of the directory. Blocking for a manifest directory: it may
    /// read the manifest's local files.
    pub fn get(&self, from: u64, limit: usize) -> Result<Vec<DirEntry>, ManifestError> {
        match self {
            DirEntries::Loaded(entries) => Ok(entries
                .iter()
                .skip(usize::try_from(from).unwrap_or(usize::MAX))
                .take(limit)
                .cloned()
                .collect()),
            DirEntries::Live(pages) => Ok(pages.get(from, limit)),
            DirEntries::Paged(pages) => {
                let mut pages = pages.lock().unwrap_or_else(|p| p.into_inner());
                let mut out = Vec::with_capacity(limit.min(PAGE));
                let mut at = from;
                while out.len() < limit {
                    let got = pages.get(at, limit - out.len())?;
                    if got.is_empty() {
                        break;
                    }
                    at += got.len() as u64;
                    out.extend(got);
                }
                Ok(out)
            }
        }
    }
}

pub(super) struct ManifestPages {
    manifest: Arc<Manifest>,
    dir: String,
    /// This mount's view over the base manifest: `Some` adds or replaces an entry, `None`
    /// hides one.
    changes: BTreeMap<String, Option<ChildKind>>,
    /// Ordinal of `window[0]`.
    window_start: u64,
    /// Entries from about a page behind the last offset asked for, onwards: the kernel resumes a
    /// reply it could not take whole from an offset inside the previous page.
    window: Vec<DirEntry>,
    /// The last base name the window covers; the next page starts after it.
    covered: Option<String>,
    exhausted: bool,
    /// Pages read from the manifest, for tests.
    pages_read: usize,
}

impl ManifestPages {
    /// A reader of directory `dir` of `manifest`, with this mount's `changes` merged in.
    pub fn new(
        manifest: Arc<Manifest>,
        dir: String,
        changes: BTreeMap<String, Option<ChildKind>>,
    ) -> ManifestPages {
        ManifestPages {
            manifest,
            dir,
            changes,
            window_start: 0,
            window: Vec::new(),
            covered: None,
            exhausted: false,
            pages_read: 0,
        }
    }

    /// Up to `limit` entries from ordinal `from`. Blocking: may read the manifest's files.
    pub fn get(&mut self, from: u64, limit: usize) -> Result<Vec<DirEntry>, ManifestError> {
        if from < self.window_start {
            // A seek backwards (rewinddir, or a reply the kernel dropped): start over.
            self.window_start = 0;
            self.window.clear();
            self.covered = None;
            self.exhausted = false;
        }
        let behind = usize::try_from(from - self.window_start).unwrap_or(usize::MAX);
        if behind > PAGE && behind != usize::MAX {
            let forget = behind - PAGE;
            self.window.drain(..forget);
            self.window_start += forget as u64;
        }
        let wanted = from.saturating_add(limit as u64);
        while wanted > self.window_start + self.window.len() as u64 && !self.exhausted {
            self.advance()?;
        }
        let skip = usize::try_from(from - self.window_start).unwrap_or(usize::MAX);
        Ok(self.window.iter().skip(skip).take(limit).cloned().collect())
    }

    /// Appends the next page to the window: base entries after `covered`, merged with the
    /// changes in the same name range (all remaining ones after the base's last page).
    fn advance(&mut self) -> Result<(), ManifestError> {
        let base = self
            .manifest
            .base_page(&self.dir, self.covered.as_deref(), PAGE)?;
        let last_page = base.len() < PAGE;
        let upper = if last_page {
            Bound::Unbounded
        } else {
            Bound::Included(base.last().map(|e| e.name.clone()).unwrap_or_default())
        };
        let lower = match &self.covered {
            Some(name) => Bound::Excluded(name.clone()),
            None => Bound::Unbounded,
        };
        let mut page: BTreeMap<String, ChildKind> = base
            .into_iter()
            .map(|e| (e.name, child_kind(e.kind)))
            .collect();
        for (name, change) in self.changes.range((lower, upper.clone())) {
            match change {
                Some(kind) => page.insert(name.clone(), kind.clone()),
                None => page.remove(name),
            };
        }
        self.pages_read += 1;
        self.window.extend(
            page.into_iter()
                .filter(|(name, _)| valid_name(name))
                .map(|(name, kind)| DirEntry { name, kind }),
        );
        self.covered = match upper {
            Bound::Included(name) => Some(name),
            _ => None,
        };
        self.exhausted = last_page;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::time::UNIX_EPOCH;

    use super::*;
    use crate::manifest::format::{Entry, ManifestInfo, write_dir_file};

    fn manifest_of(root: &std::path::Path, files: usize) -> Arc<Manifest> {
        let entries: Vec<Entry> = (0..files)
            .map(|i| Entry::file(format!("f{i:06}"), 1, "e", UNIX_EPOCH))
            .collect();
        write_dir_file(root, "", &entries).expect("root");
        ManifestInfo::for_test().write(root).expect("info");
        Arc::new(
            Manifest::open(root, false)
                .expect("open")
                .expect("manifest"),
        )
    }

    #[test]
    fn replies_that_straddle_pages_resume_without_rereading_the_directory() {
        let dir = tempfile::tempdir().expect("tempdir");
        let manifest = manifest_of(dir.path(), 5 * PAGE + 17);
        let mut pages = ManifestPages::new(manifest, String::new(), BTreeMap::new());
        // Like the kernel: ask for a chunk, take only part of it, resume where it stopped.
        let mut from = 0;
        let mut names = Vec::new();
        loop {
            let chunk = pages.get(from, 128).expect("get");
            if chunk.is_empty() {
                break;
            }
            let taken: Vec<String> = chunk.into_iter().take(29).map(|e| e.name).collect();
            from += taken.len() as u64;
            names.extend(taken);
        }
        let expected: Vec<String> = (0..5 * PAGE + 17).map(|i| format!("f{i:06}")).collect();
        assert_eq!(names, expected);
        assert_eq!(pages.pages_read, 6, "each page read once");
        assert!(
            pages.window.len() <= 2 * PAGE + 128,
            "the window stays bounded"
        );
        // A rewind starts over.
        assert_eq!(pages.get(0, 1).expect("rewind")[0].name, "f000000");
    }
}
