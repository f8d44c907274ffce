//! Durable spills: what a file being written holds only locally — the bytes written and the
//! state saying which bytes they are — kept in named files that outlive a killed process, so
//! that the next msfs process commits them instead of losing them.
//!
//! Each process keeps its spills in a [`PrivateDir`](crate::private_dir::PrivateDir) of kind
//! `msfs-spill` under `journal_parent` (like the upload journal: processes that should recover
//! each other share it), `flock`ed while it lives. A file gets, at its first change, a
//! directory of its own there (`<n>/`, `n` unique in the process) holding:
//!
//! - `data`: the spill file, sparse, byte `o` of the file at offset `o` (as before);
//! - `log`: an append-only log of the changes to the file's in-memory state: a header (store
//!   id, backend, key, base object, `base_len`, size, mtime), then one record per write,
//!   truncate, mtime change and landed commit.
//!
//! One directory per file, not two files side by side, so that a recovering process adopts a
//! file with one `rename(2)`: killed halfway through, it leaves the file in one place, whole.
//!
//! Ordering is what makes a record trustworthy. A write's bytes are in `data` before its record
//! is appended, and the record is appended (one `write(2)` on an `O_APPEND` descriptor, under the
//! file's state lock, so the log's order is the state's) before the FUSE write returns. So every
//! write that returned is on record, and every record describes bytes that are there. A record
//! is framed by its length and CRC-32: one cut short by the kill (it never returned) fails the
//! check and ends the log there (the layout: `record`). A write whose range is dirty already and that grows nothing
//! changes nothing a record would say and appends none: the common rewrite costs one `pwrite`.
//! A truncate is recorded *before* the spill file is cut: a kill in between leaves the state
//! after the truncate, never bytes dropped under extents that still claim them.
//!
//! A commit that leaves the file clean lets go of its directory: emptied, log first, and kept
//! as a spare for another file's first change ([`spare`]: an empty log is what recovery drops
//! as torn), or removed (log first: a `data` without a log is known garbage); the next change
//! starts a new one with a new header. A commit that lands while writes raced it, or while a
//! write is still putting bytes in (`writers`), appends a commit record instead (the new base;
//! whether the extents were cleared). A file deleted or
//! replaced ([`super::WriteEngine::forget`]) loses its directory at once; its bytes live on,
//! unnamed, for the handles still open on it. A stranded file (its commit refused for good)
//! keeps its directory, and so does every file still dirty when the process exits.
//!
//! Nothing is fsynced: the page cache outlives the process (a SIGKILL, an OOM kill, a crash of
//! msfs), not the node (a power loss, a kernel panic, a reboot that empties the temp dir).
//!
//! Recovery ([`recover`]) runs when a store is built, like the upload journal's: for each
//! `msfs-spill` directory of a dead process (the same liveness rule: nobody locks it), every
//! file recorded for that store id whose key the caller claims is moved into this process's
//! directory, rebuilt as a dirty file, and committed in the background. Files of stores not
//! built yet stay where they are for a later pass; a dead directory goes once empty. A
//! recovered file's base is checked against the store before its first commit ([`landed`]):
//! the killed process's last commit may have landed without its record.

mod landed;
mod open_logs;
mod record;
mod recover;
mod spare;

use std::fs::File;
use std::io;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::SystemTime;

use super::WriteError;
use super::file::State;
use crate::framed_log;
use open_logs::Slot;

pub(super) use landed::check_base;
pub(super) use open_logs::OpenLogs;
pub(super) use record::{Header, Record, Snapshot};
pub(super) use recover::recover;
pub(super) use spare::Spares;

/// The kind of the spill directories.
pub(super) const KIND: &str = "msfs-spill";
const DATA: &str = "data";
const LOG: &str = "log";

/// The log of one file's spill. It keeps the descriptor it was opened with while the engine's
/// bound allows ([`open_logs`]), and is otherwise opened for each record and closed again, so
/// that 10,000 files being written still hold one descriptor each (their data), as they did
/// before the logs existed, plus a bounded few.
#[derive(Debug)]
pub(super) struct SpillLog {
    /// The file's own directory, `<spill dir>/<n>`, holding `data` and `log`.
    dir: PathBuf,
    /// Bytes of whole records: a record that fails halfway is cut back off to here.
    len: u64,
    /// A record failed and could not be cut back off: nothing after it would ever be read, so
    /// nothing more is appended (and writes fail, rather than pretend to be on record).
    broken: bool,
    /// The log opened for appending, kept between records (with its place in the bound).
    kept: Option<(File, Slot)>,
    open_logs: Arc<OpenLogs>,
}

impl SpillLog {
    fn new(dir: PathBuf, len: u64, open_logs: &Arc<OpenLogs>) -> SpillLog {
        SpillLog {
            dir,
            len,
            broken: false,
            kept: None,
            open_logs: Arc::clone(open_logs),
        }
    }

    /// Appends `record` with one `write(2)`, on the kept descriptor or one opened for it.
    pub fn append(&mut self, record: &Record) -> io::Result<()> {
        if self.broken {
            return Err(at(
                &self.dir.join(LOG),
                io::Error::other("an earlier record could not be written"),
            ));
        }
        if self.open_logs.is_closed() {
            // Left to a successor: see `open_logs`.
            self.kept = None;
        }
        let (log, slot) = match self.kept.take() {
            Some((log, slot)) => (log, Some(slot)),
            None => {
                let path = self.dir.join(LOG);
                let log = File::options()
                    .append(true)
                    .open(&path)
                    .map_err(|e| at(&path, e))?;
                (log, self.open_logs.slot())
            }
        };
        let appended = self.write_frame(&log, &record.frame());
        if let Some(slot) = slot {
            self.kept = Some((log, slot));
        }
        appended
    }

    /// Writes one record's `frame` at the end of `log` (`framed_log::append`: one that fails
    /// halfway is cut back off). Not fsynced: see the module docs.
    fn write_frame(&mut self, log: &File, frame: &[u8]) -> io::Result<()> {
        match framed_log::append(log, self.len, frame, framed_log::Sync::PageCache) {
            Ok(()) => {
                self.len += frame.len() as u64;
                Ok(())
            }
            Err(e) => {
                // A partial record would end the log for recovery and hide every record after
                // it.
                self.broken |= e.broken;
                Err(at(&self.dir.join(LOG), e.error))
            }
        }
    }

    /// Empties the log (a spare's is empty), through the kept descriptor if there is one.
    fn empty(&mut self) -> io::Result<()> {
        match self.kept.take() {
            Some((log, _slot)) => log.set_len(0),
            None => File::options()
                .write(true)
                .truncate(true)
                .open(self.dir.join(LOG))
                .map(drop),
        }?;
        self.len = 0;
        Ok(())
    }

    /// Appends `record`; a failure is logged, not returned (for changes that happened
    /// already: a commit that landed, an mtime set). The log then takes no more records, so
    /// the next write fails instead of being recorded after a hole.
    pub fn append_or_break(&mut self, record: &Record) {
        if let Err(e) = self.append(record) {
            self.broken = true;
            tracing::error!(error = %e, "cannot record a change of a file being written; its \
                next writes fail until it is committed, and if msfs is killed meanwhile its \
                recovery may fail");
        }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

/// An I/O error on the file's spill file, naming it when it has a name.
pub(super) fn spill_error(state: &State, error: io::Error) -> WriteError {
    let source = match &state.log {
        Some(log) => at(&log.dir.join(DATA), error),
        None => error,
    };
    WriteError::Spill { source }
}

/// `error`, naming `path`, of the same kind (so that ENOSPC stays ENOSPC).
fn at(path: &Path, error: io::Error) -> io::Error {
    io::Error::new(error.kind(), format!("{}: {error}", path.display()))
}

/// Gives a file its spill directory: a spare made ahead of need when one is ready, else
/// `<spill_dir>/<new_number()>` made now, with an empty `data` and a log holding `header`.
/// Returns the data file and the log.
pub(super) fn create(
    spill_dir: &Path,
    spares: &Spares,
    open_logs: &Arc<OpenLogs>,
    new_number: impl FnOnce() -> u64,
    header: Header,
) -> io::Result<(File, SpillLog)> {
    let header = Record::Header(header);
    if let Some(spare) = spares.take() {
        match headed(spare.clone(), &header, open_logs) {
            Ok(made) => return Ok(made),
            // Gone or broken (removed by hand?): dropped, and a new one made below.
            Err(e) => {
                tracing::debug!(path = %spare.display(), error = %e,
                    "dropping a spare spill directory");
                let _ = std::fs::remove_dir_all(&spare);
            }
        }
    }
    let dir = spill_dir.join(new_number().to_string());
    spare::make(&dir)?;
    headed(dir.clone(), &header, open_logs).inspect_err(|_| {
        let _ = std::fs::remove_dir_all(&dir);
    })
}

/// Opens the `data` of spill directory `dir`, made empty with its `log` (a spare, or
/// `spare::make` just now), and appends `header` to the log.
fn headed(
    dir: PathBuf,
    header: &Record,
    open_logs: &Arc<OpenLogs>,
) -> io::Result<(File, SpillLog)> {
    let data = open_data(&dir)?;
    let mut log = SpillLog::new(dir, 0, open_logs);
    log.append(header)?;
    Ok((data, log))
}

/// The spill data file of directory `dir`, opened for reading and writing.
fn open_data(dir: &Path) -> io::Result<File> {
    let path = dir.join(DATA);
    File::options()
        .read(true)
        .write(true)
        .open(&path)
        .map_err(|e| at(&path, e))
}

/// Removes a file's spill directory: the log first (a `data` alone is known garbage).
fn remove_dir(dir: &Path) {
    let removed = remove_file(&dir.join(LOG))
        .and_then(|()| remove_file(&dir.join(DATA)))
        .and_then(|()| match std::fs::remove_dir(dir) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        });
    if let Err(e) = removed {
        tracing::warn!(path = %dir.display(), error = %e,
            "cannot remove the spill files of a file no longer being written; if msfs is \
             killed, the next process finds them (and discards them if they hold nothing new)");
    }
}

fn remove_file(path: &Path) -> io::Result<()> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

/// What a file let go of: its spill directory (and handles) to remove and close.
#[derive(Debug, Default)]
pub(super) struct Leftover {
    pub spill: Option<Arc<File>>,
    pub log: Option<SpillLog>,
}

impl Leftover {
    /// Lets go of the directory and closes the files off the async runtime: closing a large
    /// spill file frees its blocks, which takes the local filesystem a while. A directory whose
    /// data this was the last descriptor of becomes a spare (`spares`), else it is removed.
    pub fn dispose(self, spares: &Spares) {
        let Leftover { spill, log } = self;
        let Some(mut log) = log else {
            if let Some(spill) = spill {
                drop_off_runtime(move || drop(spill));
            }
            return;
        };
        let recycler = spares.recycler();
        drop_off_runtime(move || {
            // Another clone (a read in flight) may still read it: not emptied under it.
            let recycled = spill
                .and_then(|spill| Arc::try_unwrap(spill).ok())
                .is_some_and(|data| recycler.recycle(&mut log, data));
            if !recycled {
                remove_dir(log.dir());
            }
        });
    }
}

/// Runs `work` (file I/O, closing files) on the blocking pool when called on the runtime.
fn drop_off_runtime(work: impl FnOnce() + Send + 'static) {
    match tokio::runtime::Handle::try_current() {
        Ok(runtime) => {
            runtime.spawn_blocking(work);
        }
        Err(_) => work(),
    }
}

/// Records a write of `range` that is in the spill file already, unless it changes nothing a
/// record would say (its range is dirty already and it grows nothing). Called under the state
/// lock, before the state records it.
pub(super) fn log_write(
    state: &mut State,
    range: Range<u64>,
    mtime: SystemTime,
) -> Result<(), WriteError> {
    let len = range.end - range.start;
    // While a commit's landing or a recovered base is unrecorded, a rewrite of dirty bytes is
    // news too (see `State::commit_unrecorded`).
    let nothing_new = range.end <= state.size
        && state.dirty.covered(range.clone()) == len
        && !state.commit_unrecorded
        && state.check_base.is_none();
    match &mut state.log {
        Some(log) if !nothing_new => log
            .append(&Record::Write { range, mtime })
            .map_err(|source| WriteError::Spill { source }),
        _ => Ok(()),
    }
}

/// Records a truncate to `size`, before the spill file is cut (see the module docs).
pub(super) fn log_truncate(
    state: &mut State,
    size: u64,
    mtime: SystemTime,
) -> Result<(), WriteError> {
    match &mut state.log {
        Some(log) => log
            .append(&Record::Truncate { size, mtime })
            .map_err(|source| WriteError::Spill { source }),
        None => Ok(()),
    }
}

/// A commit landed and the state was rebased onto `base`. A clean file with no write in flight
/// lets go of its spill (returned, to be disposed of); otherwise the new base is recorded.
pub(super) fn log_commit(state: &mut State, clean: bool) -> Leftover {
    state.commit_unrecorded = false;
    if clean && state.writers == 0 {
        return Leftover {
            spill: state.spill.take(),
            log: state.log.take(),
        };
    }
    let (Some(base), base_len) = (state.base.clone(), state.base_len) else {
        return Leftover::default();
    };
    if let Some(log) = &mut state.log {
        log.append_or_break(&Record::Committed {
            base,
            base_len,
            clean,
        });
    }
    Leftover::default()
}

/// Records that a commit is about to send the file's content as it is now (`Record::
/// CommitStarting`): should the process die before the commit's `Committed` record, the
/// successor can still recognise that content in the store (`landed`).
pub(super) fn log_commit_starting(state: &mut State) {
    let record = Record::CommitStarting {
        size: state.size,
        base_len: state.base_len,
    };
    if let Some(log) = &mut state.log {
        log.append_or_break(&record);
        state.commit_unrecorded = true;
    }
}

/// Records the file's unreported commit failure as it is now (set, or reported and cleared),
/// so that the next process's fsync reports it as this one's would have.
pub(super) fn log_failure(state: &mut State) {
    let failure = state.failure.clone();
    if let Some(log) = &mut state.log {
        log.append_or_break(&Record::Failure(failure));
    }
}

/// Records the file's metadata as it is now (nothing to record for a file without a log: a log
/// created later starts with it, see `spill`).
pub(super) fn log_metadata(state: &mut State) {
    let metadata = state.metadata.clone();
    if let Some(log) = &mut state.log {
        log.append_or_break(&Record::Metadata(metadata));
    }
}

/// Records an mtime set by the application (nothing to record for a file without a log: its
/// mtime is the object's once clean).
pub(super) fn log_mtime(state: &mut State, mtime: SystemTime) {
    if let Some(log) = &mut state.log {
        log.append_or_break(&Record::Mtime(mtime));
    }
}
