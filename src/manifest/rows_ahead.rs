//! The rows of a manifest's directory files, read and parsed on a thread of their own while
//! the index inserts the ones before them (`Index::build`). Parsing a row costs about a third
//! of inserting it, and the ingest is otherwise one thread: with the reader beside it, a second
//! core does the parsing.
//!
//! The ingest asks for directories in the order it numbers them, at most two ahead, so what is
//! in flight stays bounded: [`ROWS_IN_FLIGHT`] batches, whatever the namespace's size.

use std::path::{Path, PathBuf};
use std::sync::mpsc::{Receiver, Sender, SyncSender, channel, sync_channel};
use std::thread::Scope;

use super::format::{self, Entry, FormatError};

/// Batches parsed and not yet taken by the ingest.
const ROWS_IN_FLIGHT: usize = 8;

/// What the reader sends for one directory: its rows in batches, then its end or its error.
enum Rows {
    Batch(Vec<Entry>),
    End,
    Failed(FormatError),
}

/// The ingest's end of the reader thread; dropping it stops the thread.
pub(super) struct RowsAhead {
    requests: Sender<String>,
    rows: Receiver<Rows>,
}

impl RowsAhead {
    /// Starts the reader on `scope`, reading the directory files of the manifest in `root` in
    /// batches of `batch_rows` rows.
    pub(super) fn start<'scope>(
        scope: &'scope Scope<'scope, '_>,
        root: &'scope Path,
        batch_rows: usize,
    ) -> RowsAhead {
        let (requests, asked) = channel::<String>();
        let (sender, rows) = sync_channel(ROWS_IN_FLIGHT);
        scope.spawn(move || {
            for dir in asked {
                let path = format::dir_file(root, &dir);
                if read(&path, batch_rows, &sender).is_err() {
                    return; // the ingest is gone
                }
            }
        });
        RowsAhead { requests, rows }
    }

    /// Asks for the rows of directory `dir` after those asked for before.
    pub(super) fn request(&self, dir: &str) {
        // A reader gone (it never fails but by its ingest dropping it) is seen at `next`.
        let _ = self.requests.send(dir.to_string());
    }

    /// The next batch of the directory being read, or `None` at its end.
    pub(super) fn next(&self) -> Result<Option<Vec<Entry>>, FormatError> {
        match self.rows.recv() {
            Ok(Rows::Batch(batch)) => Ok(Some(batch)),
            Ok(Rows::End) => Ok(None),
            Ok(Rows::Failed(e)) => Err(e),
            // The reader holds its sender until this end goes: only a panic drops it earlier.
            Err(_) => Err(FormatError::Io {
                path: PathBuf::new(),
                source: std::io::Error::other("the manifest reader thread panicked"),
            }),
        }
    }
}

/// Sends the rows of the directory file at `path` (none if it does not exist), then its end or
/// its error. `Err` when the ingest no longer listens.
fn read(path: &Path, batch_rows: usize, sender: &SyncSender<Rows>) -> Result<(), ()> {
    let mut batch = Vec::with_capacity(batch_rows);
    let read = format::for_each_row(path, |entry| {
        batch.push(entry);
        if batch.len() >= batch_rows {
            let full = std::mem::replace(&mut batch, Vec::with_capacity(batch_rows));
            sender.send(Rows::Batch(full)).map_err(|_| Gone::Ingest)?;
        }
        Ok::<(), Gone>(())
    });
    let last = match read {
        Ok(()) if batch.is_empty() => Rows::End,
        Ok(()) => {
            sender.send(Rows::Batch(batch)).map_err(|_| ())?;
            Rows::End
        }
        Err(Gone::Format(e)) => Rows::Failed(e),
        Err(Gone::Ingest) => return Err(()),
    };
    sender.send(last).map_err(|_| ())
}

/// Why reading stopped early.
enum Gone {
    Format(FormatError),
    Ingest,
}

impl From<FormatError> for Gone {
    fn from(e: FormatError) -> Gone {
        Gone::Format(e)
    }
}
