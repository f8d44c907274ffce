//! Reading a file while it is being written: each range is cut into spill bytes, base-object
//! bytes and zeros (`read_plan`, which a commit uses too), planned again if a commit replaced
//! the base meanwhile. Apart because it is the one way back out of a dirty file.

use std::ops::Range;
use std::sync::Arc;

use bytes::{Bytes, BytesMut};

use super::file::{DirtyFile, View};
use super::{READ_REPLANS, WriteEngine, WriteError, commit};
use crate::cache::ObjectVersion;
use crate::store::StoreError;

impl WriteEngine {
    /// Bytes `range` of the file as it is now (clamped to its size).
    pub async fn read(
        &self,
        file: &Arc<DirtyFile>,
        range: Range<u64>,
        sequential: bool,
    ) -> Result<Bytes, WriteError> {
        let mut attempt = 0;
        loop {
            match self.read_once(file, range.clone(), sequential).await {
                // A commit replaced the base object between planning and reading: once it has
                // finished (and made its object the base), the new base holds the same bytes for
                // every range not dirty, so planning again is enough. A recovered file's base
                // may be gone because its killed process's commit landed unrecorded: checked
                // here, as its first commit would (the file is rebased onto that version).
                Err(WriteError::Store { source, .. })
                    if matches!(source.root(), StoreError::Changed { .. })
                        && attempt < READ_REPLANS =>
                {
                    attempt += 1;
                    commit::settle_base(&self.inner, file).await?;
                }
                other => return other,
            }
        }
    }

    async fn read_once(
        &self,
        file: &Arc<DirtyFile>,
        range: Range<u64>,
        sequential: bool,
    ) -> Result<Bytes, WriteError> {
        let (pieces, spill) = {
            let state = file.state();
            let end = range.end.min(state.size);
            if range.start >= end {
                return Ok(Bytes::new());
            }
            (
                read_plan(&state.view(), range.start..end),
                state.spill.clone(),
            )
        };
        let target = &file.target;
        let mut parts = Vec::with_capacity(pieces.len());
        for piece in pieces {
            parts.push(match piece {
                Piece::Spill(r) => {
                    let spill = spill.clone().ok_or(WriteError::SpillGone)?;
                    Bytes::from(DirtyFile::read_spill_off_runtime(spill, r).await?)
                }
                Piece::Base(base, r) => self
                    .inner
                    .reader
                    .read(&target.store, &base, r, sequential)
                    .await
                    .map_err(|source| WriteError::store(target, source))?,
                Piece::Zeros(n) => Bytes::from(vec![0; n]),
            });
        }
        if parts.len() == 1 {
            return Ok(parts.swap_remove(0));
        }
        let mut out = BytesMut::with_capacity(parts.iter().map(Bytes::len).sum());
        for part in parts {
            out.extend_from_slice(&part);
        }
        Ok(out.freeze())
    }
}

/// Where one piece of a read comes from.
pub(super) enum Piece {
    Spill(Range<u64>),
    Base(ObjectVersion, Range<u64>),
    Zeros(usize),
}

/// Cuts `range` (inside the file) into pieces by where their bytes are (see `file`'s doc).
pub(super) fn read_plan(state: &View<'_>, range: Range<u64>) -> Vec<Piece> {
    let mut pieces = Vec::new();
    for (r, dirty) in state.dirty.pieces(range) {
        if dirty {
            pieces.push(Piece::Spill(r));
            continue;
        }
        let base_end = r.end.min(state.base_len);
        if let Some(base) = state.base
            && r.start < base_end
        {
            pieces.push(Piece::Base(base.clone(), r.start..base_end));
        }
        let zeros_from = r.start.max(base_end);
        if zeros_from < r.end {
            pieces.push(Piece::Zeros((r.end - zeros_from) as usize));
        }
    }
    pieces
}
