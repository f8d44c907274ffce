//! Owners and modes for a manifest's rows (`msfs generate-manifest --posix-metadata`): read
//! from each object's user metadata under s3fs's names (`mode`, `uid`, `gid`, the names
//! `posix_metadata` mounts write), so a manifest of a bucket written by s3fs or by a
//! `posix_metadata` mount shows the same owners and modes. LIST returns no user metadata, so
//! this costs a HEAD per object and per directory marker: opt-in, run `PARALLEL_HEADS` at a
//! time per lister.

use futures::stream::{self, StreamExt, TryStreamExt};

use super::format::{Entry, Ownership};
use crate::store::{METADATA_GID, METADATA_MODE, METADATA_UID, Metadata, ObjectStore, StoreError};

/// HEADs in flight per lister (so `workers × PARALLEL_HEADS` in all).
pub const PARALLEL_HEADS: usize = 16;

/// What `metadata` says of an owner and mode: `None` unless all three are there and numbers
/// (a row states all three or none). The mode's file-type bits are dropped.
pub fn ownership_of(metadata: &Metadata) -> Option<Ownership> {
    let number = |name: &str| metadata.get(name)?.trim().parse::<u32>().ok();
    Some(Ownership {
        perm: (number(METADATA_MODE)? & 0o7777) as u16,
        uid: number(METADATA_UID)?,
        gid: number(METADATA_GID)?,
    })
}

/// Fills in the owner of each of `entries`, listed under `prefix` (a file's object, a
/// directory's `name/` marker; a directory without a marker, or an object deleted since the
/// LIST, has none). Returns the entries and how many HEADs were sent.
pub async fn read_owners(
    store: &dyn ObjectStore,
    prefix: &str,
    entries: Vec<Entry>,
) -> Result<Vec<Entry>, (String, StoreError)> {
    stream::iter(entries)
        .map(|entry| async move {
            let key = match entry.is_dir() {
                true => format!("{prefix}{}/", entry.name),
                false => format!("{prefix}{}", entry.name),
            };
            let found = store.head_with_metadata(&key).await.map_err(|e| (key, e))?;
            let owner = found.and_then(|(_, metadata)| ownership_of(&metadata));
            Ok(entry.owned(owner))
        })
        .buffered(PARALLEL_HEADS)
        .try_collect()
        .await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn metadata(pairs: &[(&str, &str)]) -> Metadata {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn all_three_or_none() {
        let s3fs = metadata(&[("mode", "33256"), ("uid", "1234"), ("gid", " 100 ")]);
        assert_eq!(
            ownership_of(&s3fs),
            Some(Ownership {
                perm: 0o750,
                uid: 1234,
                gid: 100
            }),
            "s3fs's decimal st_mode, type bits dropped"
        );
        assert_eq!(
            ownership_of(&metadata(&[("mode", "420"), ("uid", "1")])),
            None
        );
        assert_eq!(
            ownership_of(&metadata(&[("mode", "x"), ("uid", "1"), ("gid", "1")])),
            None
        );
        assert_eq!(ownership_of(&Metadata::new()), None);
    }
}
