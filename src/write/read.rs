//! Reading a file while it is being written: each range is cut into spill bytes, base-object
//! bytes and zeros (`read_plan`, which a commit uses too), planned again if a commit replaced
//! the base meanwhile. Apart because it is the one way back out of a dirty file.

use std::fs::File;
use std::ops::Range;
use std::sync::Arc;

use bytes::{Bytes, BytesMut};

use super::file::{DirtyFile, Target, View};
use super::{READ_REPLANS, WriteEngine, WriteError, commit};
use crate::cache::{ObjectReader, ObjectVersion};
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
        assemble(pieces, spill, &self.inner.reader, &file.target, sequential).await
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

/// The bytes of `pieces` (consecutive, in order, as `read_plan` cut them) with at most one read
/// of the spill file and one of the base object, each over the span its pieces cover. A range of
/// a file written at random offsets is hundreds of pieces (a commit's 1 MiB body chunk after
/// 4 KiB random writes is up to 256 spill and 256 base pieces): a blocking-pool hop and a cache
/// lookup for each cost far more than reading each span once and copying the pieces out of it.
/// The spans cost at most twice the range in memory while the bytes are put together.
pub(super) async fn assemble(
    pieces: Vec<Piece>,
    spill: Option<Arc<File>>,
    reader: &Arc<dyn ObjectReader>,
    target: &Target,
    sequential: bool,
) -> Result<Bytes, WriteError> {
    let read_base = |base: ObjectVersion, range: Range<u64>| async move {
        reader
            .read(&target.store, &base, range, sequential)
            .await
            .map_err(|source| WriteError::store(target, source))
    };
    let read_spill = |range: Range<u64>| {
        let spill = spill.clone();
        async move {
            let spill = spill.ok_or(WriteError::SpillGone)?;
            DirtyFile::read_spill_off_runtime(spill, range)
                .await
                .map(Bytes::from)
        }
    };
    // One piece: handed on as read (a base read from the cache is not copied again).
    if let [only] = pieces.as_slice() {
        return match only {
            Piece::Spill(r) => read_spill(r.clone()).await,
            Piece::Base(base, r) => read_base(base.clone(), r.clone()).await,
            Piece::Zeros(n) => Ok(Bytes::from(vec![0; *n])),
        };
    }
    let mut base_span: Option<(ObjectVersion, Range<u64>)> = None;
    let mut spill_span: Option<Range<u64>> = None;
    for piece in &pieces {
        match piece {
            Piece::Spill(r) => spill_span = Some(widen(spill_span, r)),
            Piece::Base(base, r) => {
                let span = widen(base_span.as_ref().map(|(_, s)| s.clone()), r);
                base_span = Some((base.clone(), span));
            }
            Piece::Zeros(_) => {}
        }
    }
    let spill_read = async {
        match &spill_span {
            Some(span) => read_spill(span.clone()).await,
            None => Ok(Bytes::new()),
        }
    };
    let base_read = async {
        match &base_span {
            Some((base, span)) => read_base(base.clone(), span.clone()).await,
            None => Ok(Bytes::new()),
        }
    };
    let (spilled, based) = futures::try_join!(spill_read, base_read)?;
    let spill_start = spill_span.map_or(0, |s| s.start);
    let base_start = base_span.map_or(0, |(_, s)| s.start);
    let mut out = BytesMut::new();
    for piece in &pieces {
        match piece {
            Piece::Spill(r) => out.extend_from_slice(slice_of(&spilled, spill_start, r)?),
            Piece::Base(_, r) => out.extend_from_slice(slice_of(&based, base_start, r)?),
            Piece::Zeros(n) => out.resize(out.len() + n, 0),
        }
    }
    Ok(out.freeze())
}

/// `span` grown to cover `range` (pieces come in order, so only its end moves after the first).
fn widen(span: Option<Range<u64>>, range: &Range<u64>) -> Range<u64> {
    match span {
        Some(span) => span.start.min(range.start)..span.end.max(range.end),
        None => range.clone(),
    }
}

/// The bytes of `range` within `bytes`, which hold the span starting at `start`.
fn slice_of<'a>(bytes: &'a [u8], start: u64, range: &Range<u64>) -> Result<&'a [u8], WriteError> {
    let from = (range.start - start) as usize;
    let to = (range.end - start) as usize;
    // A base object shorter than the length recorded for it: the store changed under us.
    bytes.get(from..to).ok_or(WriteError::Internal(
        "a piece of a read lies past the bytes read for it",
    ))
}
