//! The namespace of a manifest-backed backend: lookups and listings answered from the manifest
//! (and its delta log) on local disk, with the same naming rules as the live listing.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::listing::{ChildKind, FileMeta, valid_name};
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

/// Every entry of directory `dir` that can be shown, per the manifest.
pub async fn list(
    manifest: &Arc<Manifest>,
    dir: &str,
) -> Result<BTreeMap<String, ChildKind>, ManifestError> {
    let (manifest, dir) = (manifest.clone(), dir.to_string());
    let entries = blocking(move || manifest.list(&dir)).await?;
    Ok(entries
        .into_iter()
        .filter(|(name, _)| valid_name(name))
        .map(|(name, kind)| (name, child_kind(kind)))
        .collect())
}

pub fn child_kind(kind: EntryKind) -> ChildKind {
    match kind {
        EntryKind::Dir => ChildKind::Dir,
        EntryKind::File { size, etag, mtime } => ChildKind::File(FileMeta { size, etag, mtime }),
    }
}
