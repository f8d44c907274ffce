//! The live namespace: directories inferred from "/"-delimited keys, read with LIST and HEAD.
//!
//! S3 has no directories, only keys. A directory exists when some key continues below it (a common
//! prefix) or when a zero-byte marker key ending in "/" names it. When one name is both an object
//! and a prefix (`a` and `a/b`), the directory wins and the object is hidden: a path can only be
//! one of the two, and hiding the directory would hide everything below it.

use std::collections::BTreeMap;
use std::time::SystemTime;

use super::backend::BackendSettings;
use crate::manifest::format::Ownership;
use crate::store::{ListRequest, ObjectMeta, StoreError};

/// The longest name most Linux filesystems and tools accept.
pub const NAME_MAX: usize = 255;
/// A live directory with more entries than this is read a page at a time (`live_pages`)
/// instead of being listed whole at `opendir`.
pub const WHOLE_LISTING_MAX: usize = 10_000;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileMeta {
    pub size: u64,
    pub etag: String,
    pub mtime: SystemTime,
    /// Owner and mode a manifest row states (`None`: the backend's).
    pub owner: Option<Ownership>,
}

impl From<&ObjectMeta> for FileMeta {
    fn from(meta: &ObjectMeta) -> FileMeta {
        FileMeta {
            size: meta.size,
            etag: meta.etag.clone(),
            mtime: meta.last_modified,
            owner: None,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChildKind {
    /// `owner`: what a manifest row states (`None`: the backend's).
    Dir {
        owner: Option<Ownership>,
    },
    File(FileMeta),
}

impl ChildKind {
    /// A directory with the backend's owner and mode.
    pub const DIR: ChildKind = ChildKind::Dir { owner: None };

    pub fn owner(&self) -> Option<Ownership> {
        match self {
            ChildKind::Dir { owner } => *owner,
            ChildKind::File(meta) => meta.owner,
        }
    }

    pub fn set_owner(&mut self, owner: Option<Ownership>) {
        match self {
            ChildKind::Dir { owner: o } => *o = owner,
            ChildKind::File(meta) => meta.owner = owner,
        }
    }
}

/// Whether `name` can be shown as a directory entry. Keys with empty, "." or ".." segments, or
/// segments longer than NAME_MAX, cannot be represented in a POSIX tree and are skipped.
pub fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name != "."
        && name != ".."
        && name.len() <= NAME_MAX
        && !name.contains('/')
        && !name.contains('\0')
}

/// Joins a directory path inside a backend and a child name.
pub fn child_path(dir: &str, name: &str) -> String {
    if dir.is_empty() {
        name.to_string()
    } else {
        format!("{dir}/{name}")
    }
}

/// Every entry of directory `path`, by name, reading pages of the listing until it ends; `None`
/// as soon as it holds more than `max_entries` (the caller reads it a page at a time instead,
/// or only needed to know it is not empty).
pub async fn list_dir(
    backend: &BackendSettings,
    path: &str,
    max_entries: usize,
) -> Result<Option<BTreeMap<String, ChildKind>>, StoreError> {
    let prefix = backend.dir_prefix_of(path);
    let mut children = BTreeMap::new();
    let mut token = None;
    loop {
        let page = backend
            .store
            .list(
                &ListRequest::delimited(&prefix)
                    .continuing(token)
                    .max_keys(backend.page_size),
            )
            .await?;
        for common in &page.common_prefixes {
            let name = common
                .strip_prefix(&prefix)
                .and_then(|rest| rest.strip_suffix('/'))
                .unwrap_or_default();
            if valid_name(name) {
                children.insert(name.to_string(), ChildKind::DIR);
            }
        }
        for object in &page.objects {
            let name = object.key.strip_prefix(&prefix).unwrap_or_default();
            // The directory's own marker ("dir/") lists as an empty name: not a child.
            if valid_name(name) {
                children
                    .entry(name.to_string())
                    .or_insert_with(|| ChildKind::File(FileMeta::from(object)));
            }
        }
        if children.len() > max_entries {
            return Ok(None);
        }
        match page.next {
            Some(next) => token = Some(next),
            None => return Ok(Some(children)),
        }
    }
}

/// What `path` is, found without listing its parent: a HEAD of the key and a one-key LIST below
/// it, in parallel.
pub async fn probe(backend: &BackendSettings, path: &str) -> Result<Option<ChildKind>, StoreError> {
    let key = backend.key_of(path);
    let below = ListRequest::delimited(backend.dir_prefix_of(path)).max_keys(Some(1));
    let (head, below) = tokio::join!(backend.store.head(&key), backend.store.list(&below));
    let below = below?;
    if !below.objects.is_empty() || !below.common_prefixes.is_empty() {
        return Ok(Some(ChildKind::DIR));
    }
    Ok(head?.map(|meta| ChildKind::File(FileMeta::from(&meta))))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_that_cannot_be_directory_entries_are_rejected() {
        assert!(valid_name("a b ü.txt"));
        assert!(!valid_name(""));
        assert!(!valid_name("."));
        assert!(!valid_name(".."));
        assert!(!valid_name(&"x".repeat(256)));
        assert!(valid_name(&"x".repeat(255)));
    }

    #[test]
    fn child_paths_join_without_leading_slash() {
        assert_eq!(child_path("", "a"), "a");
        assert_eq!(child_path("a/b", "c"), "a/b/c");
    }
}
