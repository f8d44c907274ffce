//! A recovered file's base, checked against the store before its first commit.
//!
//! A killed process's commit can reach the store without its log getting the `Committed` record
//! (the PUT or the completion answered, the process killed before it appended). Its successor
//! then rebuilds the file over the version that commit replaced, and a commit over that base
//! can never land: the bytes it would take from it are gone. So before a recovered file's first
//! commit, if the object is no longer its recorded base:
//!
//! - the object holds the file's own bytes (the size, every dirty byte, the zeros above
//!   `base_len`; the bytes taken from the base cannot be checked, that version being gone): the
//!   killed process's commit landed, and the file is rebased onto it as a commit would;
//! - the file takes no byte from its base (rewritten whole, or truncated and written again):
//!   the base is not needed, and the commit goes ahead as a new version;
//! - otherwise another writer replaced (or deleted) the object, and the bytes the file did not
//!   change came from a version nobody holds any more: a terminal failure
//!   ([`WriteError::BaseReplaced`]), the data kept in the spill, reported at the next fsync.
//!
//! A base still current, or no base at all, leaves the commit as it was.

use std::fs::File;
use std::ops::Range;
use std::sync::Arc;

use crate::cache::ObjectVersion;
use crate::store::{BODY_CHUNK, ObjectMeta};
use crate::write::extents::Extents;
use crate::write::file::{DirtyFile, Target};
use crate::write::{Inner, WriteError};

/// The killed process's commit had landed as `version`: the file's content as of `generation`.
#[derive(Debug)]
pub(in crate::write) struct Landed {
    pub version: ObjectVersion,
    pub generation: u64,
}

/// What the check works from: the file as it was when the check started.
struct Recovered {
    generation: u64,
    size: u64,
    base: ObjectVersion,
    base_len: u64,
    dirty: Extents,
    spill: Option<Arc<File>>,
}

/// Checks a recovered file's base once (see the module docs), under the file's commit lock.
/// `Some` when the killed process's commit had landed (the caller rebases the file onto it);
/// `None` when the commit is to go ahead. A store that cannot be asked is an error like any
/// commit's, retried; the check is made again then.
pub(in crate::write) async fn check_base(
    inner: &Inner,
    file: &DirtyFile,
) -> Result<Option<Landed>, WriteError> {
    let recovered = {
        let mut state = file.state();
        if !state.check_base || state.deleted || !state.is_dirty() {
            return Ok(None);
        }
        let Some(base) = state.base.clone() else {
            state.check_base = false;
            return Ok(None);
        };
        // As a commit's snapshot: truncates during the check lower it (see `commit::rebase`).
        state.low_water = state.size;
        Recovered {
            generation: state.generation,
            size: state.size,
            base,
            base_len: state.base_len,
            dirty: state.dirty.clone(),
            spill: state.spill.clone(),
        }
    };
    let target = &file.target;
    let current = target
        .store
        .head(&target.key)
        .await
        .map_err(|source| WriteError::store(target, source))?;
    if current
        .as_ref()
        .is_some_and(|c| c.etag == recovered.base.etag)
    {
        file.state().check_base = false;
        return Ok(None);
    }
    if let Some(current) = &current
        && current.size == recovered.size
        && holds_own_bytes(inner, target, &recovered, current).await?
    {
        tracing::info!(backend = %target.backend, key = %target.key, etag = %current.etag,
            "a killed msfs process's commit of {} had landed; its recovered file is clean",
            target.key);
        file.state().check_base = false;
        return Ok(Some(Landed {
            version: ObjectVersion {
                key: target.key.clone(),
                etag: current.etag.clone(),
                size: current.size,
            },
            generation: recovered.generation,
        }));
    }
    let current = current.map(|c| c.etag);
    let base_len = recovered.base_len;
    if recovered.dirty.covered(0..base_len) == base_len {
        tracing::warn!(backend = %target.backend, key = %target.key,
            base = %recovered.base.etag, current = ?current,
            "the object was replaced or deleted while a killed msfs process's unsaved writes \
             to it waited; they rewrote it whole, so they are committed as its new version");
        file.state().check_base = false;
        return Ok(None);
    }
    Err(WriteError::BaseReplaced {
        key: target.key.clone(),
        base: recovered.base.etag,
        current,
    })
}

/// Whether `current` holds the file's own bytes wherever the file does not take them from its
/// base: its dirty extents, and zeros above `base_len`. Compared `BODY_CHUNK` at a time, with
/// the two chunks' memory held against the commit buffer bound.
async fn holds_own_bytes(
    inner: &Inner,
    target: &Target,
    recovered: &Recovered,
    current: &ObjectMeta,
) -> Result<bool, WriteError> {
    let _buffers = inner.buffers.hold(2 * BODY_CHUNK).await;
    let mut start = 0;
    while start < recovered.size {
        let window = start..recovered.size.min(start + BODY_CHUNK);
        start = window.end;
        for (range, dirty) in recovered.dirty.pieces(window) {
            let (range, expected) = if dirty {
                let spill = recovered.spill.clone().ok_or(WriteError::SpillGone)?;
                let bytes = DirtyFile::read_spill_off_runtime(spill, range.clone()).await?;
                (range, Some(bytes))
            } else if range.end > recovered.base_len {
                (range.start.max(recovered.base_len)..range.end, None)
            } else {
                continue; // the base's: nothing to check it against
            };
            let got = fetch(target, current, range.clone()).await?;
            let same = got.len() as u64 == range.end - range.start
                && match &expected {
                    Some(bytes) => got[..] == bytes[..],
                    None => got.iter().all(|b| *b == 0),
                };
            if !same {
                return Ok(false);
            }
        }
    }
    Ok(true)
}

/// Bytes `range` of exactly the version `current` (a version replaced meanwhile fails, and
/// the check is made again at the retry).
async fn fetch(
    target: &Target,
    current: &ObjectMeta,
    range: Range<u64>,
) -> Result<bytes::Bytes, WriteError> {
    target
        .store
        .get_range(&target.key, range, Some(&current.etag))
        .await
        .map_err(|source| WriteError::store(target, source))
}
