//! The namespace of a manifest-backed backend: lookups answered from the manifest (and its delta
//! log) on local disk; listings are read page by page (`dir_pages`).

use std::sync::Arc;

use super::listing::{ChildKind, FileMeta};
use crate::manifest::format::EntryKind;
use crate::manifest::namespace::{Manifest, ManifestError};
use crate::manifest::registry::blocking;

/// What `name` in directory `dir` is, per the manifest.
pub async fn lookup(
    manifest: &Arc<Manifest>,
    dir: &str,
    name: &str,
) -> Result<Option<ChildKind>, ManifestError> {
    // With the index built, a lookup is a few reads of pages the kernel (or redb) caches: a
    // hop to the blocking pool and back cost more than that (and `find` past the inode cap
    // looks up every name). Until then it may parse a TSV: off the async threads.
    if manifest.index_ready() {
        return Ok(manifest.lookup(dir, name)?.map(child_kind));
    }
    let (manifest, dir, name) = (manifest.clone(), dir.to_string(), name.to_string());
    let kind = blocking(move || manifest.lookup(&dir, &name)).await?;
    Ok(kind.map(child_kind))
}

pub fn child_kind(kind: EntryKind) -> ChildKind {
    match kind {
        EntryKind::Dir { owner } => ChildKind::Dir { owner },
        EntryKind::File {
            size,
            etag,
            mtime,
            owner,
        } => ChildKind::File(FileMeta {
            size,
            etag,
            mtime,
            owner,
        }),
    }
}
