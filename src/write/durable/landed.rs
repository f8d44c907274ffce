//! A recovered file's base, checked against the store before its first commit (or by the first
//! read that finds the base gone).
//!
//! A killed process's commit can reach the store without its log getting the `Committed` record
//! (the PUT or the completion answered, the process killed before it appended). Its successor
//! then rebuilds the file over the version that commit replaced, and a commit over that base
//! can never land, nor a read of the bytes it takes from it: that version is gone. So before a
//! recovered file's first commit, if the object is no longer its recorded base:
//!
//! - the object holds the file's own bytes *as recovered* (`AsRecovered`: the size, every dirty
//!   byte the spill still has — a descriptor kept across the kill may have written since —, the
//!   zeros above `base_len`; the bytes taken from the base cannot be checked, that version being
//!   gone): the killed process's commit landed, and the file is rebased onto it as a commit
//!   would, what was written since staying dirty;
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

use super::record::Snapshot;
use crate::cache::ObjectVersion;
use crate::store::{BODY_CHUNK, ObjectMeta};
use crate::write::file::{DirtyFile, Target};
use crate::write::{Inner, WriteError};

/// The killed process's commit had landed as `version`.
#[derive(Debug)]
pub(in crate::write) struct Landed {
    pub version: ObjectVersion,
    /// The file's content as of this generation is `version` (0: an older content than the
    /// recovered one, whose later writes stay dirty).
    pub generation: u64,
    /// Bytes of `version` the file takes as its base from now on, at most: the recovered
    /// file's `base_len` when what landed is an earlier content (the bytes above it that the
    /// file does not write are zeros in it, whatever that content held there).
    pub base_len: Option<u64>,
}

/// Checks a recovered file's base once (see the module docs), under the file's commit lock.
/// `Some` when the killed process's commit had landed (the caller rebases the file onto it);
/// `None` when the commit is to go ahead. A store that cannot be asked is an error like any
/// commit's, retried; the check is made again then.
///
/// What landed may be the file as recovered, or the content of the last commit its log saw
/// start (the process died before that commit's record, with writes recorded after it). It is
/// recognised by its size and the dirty bytes the spill file still holds of it — not by what
/// was written since recovery (a writer that kept its descriptor across the kill).
pub(in crate::write) async fn check_base(
    inner: &Inner,
    file: &DirtyFile,
) -> Result<Option<Landed>, WriteError> {
    let (recovered, base, spill, base_len, rewritten_whole) = {
        let mut state = file.state();
        if state.deleted || !state.is_dirty() || state.check_base.is_none() {
            return Ok(None);
        }
        let Some(base) = state.base.clone() else {
            state.check_base = None;
            return Ok(None);
        };
        // No byte of the file as it is now comes from its base (rewritten whole, or truncated
        // and written again, before or after the kill).
        let rewritten_whole = state.dirty.covered(0..state.base_len) == state.base_len;
        let recovered = state.check_base.clone().expect("checked above");
        let spill = state.spill.clone();
        (recovered, base, spill, state.base_len, rewritten_whole)
    };
    let target = &file.target;
    let current = target
        .store
        .head(&target.key)
        .await
        .map_err(|source| WriteError::store(target, source))?;
    if current.as_ref().is_some_and(|c| c.etag == base.etag) {
        file.state().check_base = None;
        return Ok(None);
    }
    if let Some(current) = &current {
        let whole = (&recovered.whole, recovered.generation, None);
        // Older than the recovered content: the later writes stay to commit.
        let sent = (recovered.in_flight.iter()).map(|sent| (sent, 0, Some(base_len)));
        for (content, generation, base_len) in std::iter::once(whole).chain(sent) {
            if current.size == content.size
                && holds_own_bytes(inner, target, content, spill.clone(), current).await?
            {
                tracing::info!(backend = %target.backend, key = %target.key,
                    etag = %current.etag, whole = base_len.is_none(),
                    "a killed msfs process's commit of {} had landed unrecorded; its recovered \
                     file is rebased onto it", target.key);
                file.state().check_base = None;
                return Ok(Some(Landed {
                    version: ObjectVersion {
                        key: target.key.clone(),
                        etag: current.etag.clone(),
                        size: current.size,
                    },
                    generation,
                    base_len,
                }));
            }
        }
    }
    let current = current.map(|c| c.etag);
    if rewritten_whole {
        tracing::warn!(backend = %target.backend, key = %target.key,
            base = %base.etag, current = ?current,
            "the object was replaced or deleted while a killed msfs process's unsaved writes \
             to it waited; they rewrote it whole, so they are committed as its new version");
        file.state().check_base = None;
        return Ok(None);
    }
    Err(WriteError::BaseReplaced {
        key: target.key.clone(),
        base: base.etag,
        current,
    })
}

/// Whether `current` holds `content`'s own bytes wherever it did not take them from its base:
/// its dirty extents (as far as the spill file still has them: not rewritten or truncated away
/// since), and zeros above its `base_len`. Compared `BODY_CHUNK` at a time, with the two
/// chunks' memory held against the commit buffer bound.
async fn holds_own_bytes(
    inner: &Inner,
    target: &Target,
    content: &Snapshot,
    spill: Option<Arc<File>>,
    current: &ObjectMeta,
) -> Result<bool, WriteError> {
    let _buffers = inner.buffers.hold(2 * BODY_CHUNK).await;
    let mut start = 0;
    while start < content.size {
        let window = start..content.size.min(start + BODY_CHUNK);
        start = window.end;
        for (range, dirty) in content.dirty.pieces(window) {
            if dirty {
                for range in still_in_spill(content, range) {
                    let spill = spill.clone().ok_or(WriteError::SpillGone)?;
                    let bytes = DirtyFile::read_spill_off_runtime(spill, range.clone()).await?;
                    if !same(target, current, range, |got| got == &bytes[..]).await? {
                        return Ok(false);
                    }
                }
            } else if range.end > content.base_len {
                let zeros = range.start.max(content.base_len)..range.end;
                if !same(target, current, zeros, |got| got.iter().all(|b| *b == 0)).await? {
                    return Ok(false);
                }
            }
            // Else the base's: nothing to check it against.
        }
    }
    Ok(true)
}

/// The parts of `content`'s dirty `range` whose spill bytes are still that content's.
fn still_in_spill(content: &Snapshot, range: Range<u64>) -> Vec<Range<u64>> {
    let below = range.start..range.end.min(content.low_water);
    if below.is_empty() {
        return Vec::new();
    }
    content
        .rewritten
        .pieces(below)
        .filter(|(_, rewritten)| !rewritten)
        .map(|(range, _)| range)
        .collect()
}

/// Whether bytes `range` of `current` pass `expected`.
async fn same(
    target: &Target,
    current: &ObjectMeta,
    range: Range<u64>,
    expected: impl FnOnce(&[u8]) -> bool,
) -> Result<bool, WriteError> {
    let len = range.end - range.start;
    let got = fetch(target, current, range).await?;
    Ok(got.len() as u64 == len && expected(&got))
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
