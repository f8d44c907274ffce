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
