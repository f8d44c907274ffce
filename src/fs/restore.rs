//! Taking over what a previous server of the same FUSE connection left (`Fs::restore`), and
//! rewriting the kernel-state journal as what is live now. Apart from the request paths
//! because it runs once per takeover (and at each compaction) and touches every table at once.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use super::kernel_state::{FileRecord, Record, Restored};
use super::passthrough::HandleIo;
use super::{FileHandle, Fs, FsError, Result, SequentialDetector, lock};
use crate::cache::ObjectVersion;

impl Fs {
    /// Takes over what a previous server of this connection left: its inodes, its open files
    /// (each pinned to the object version it was opened on; a written one joins the file the
    /// write engine recovered, or the object as the store has it now) and its open
    /// directories (listed again). What cannot be restored — a backend gone, an object that
    /// cannot be asked about — is logged; the kernel's requests on it fail as on a stale handle.
    pub async fn restore(&self, restored: &Restored) {
        let nodes = lock(&self.inodes).restore(restored, |name| self.backend(name));
        let mut next_handle = 1;
        let mut files = 0;
        for record in restored.files.values() {
            next_handle = next_handle.max(record.fh + 1);
            match self.restored_handle(record).await {
                Ok(handle) => {
                    self.io_modes.restore(handle.ino, &handle.io);
                    lock(&self.files).insert(record.fh, Arc::new(handle));
                    files += 1;
                }
                Err(e) => tracing::warn!(backend = %record.backend, key = %record.key,
                    error = %e, "cannot restore an open file of the previous server"),
            }
        }
        let mut dirs = 0;
        for (&fh, &ino) in &restored.dirs {
            next_handle = next_handle.max(fh + 1);
            match self.dir_handle(ino).await {
                Ok(handle) => {
                    lock(&self.dirs).insert(fh, Arc::new(handle));
                    dirs += 1;
                }
                Err(e) => tracing::warn!(ino, error = %e,
                    "cannot restore an open directory of the previous server"),
            }
        }
        self.next_handle.fetch_max(next_handle, Ordering::Relaxed);
        tracing::info!(
            inodes = nodes,
            files,
            dirs,
            "took over the kernel's state from the previous server"
        );
        self.compact_kernel_state();
    }

    async fn restored_handle(&self, record: &FileRecord) -> Result<FileHandle> {
        let backend = self.backend(&record.backend).ok_or(FsError::NotFound)?;
        let node = self.node(record.ino)?;
        let settings = backend.settings();
        let dirty = if record.writable {
            let target = settings.target(&backend.dir_name, &node.path);
            let file = self.open_for_write(&backend, target).await?;
            self.began_writing(&node, &file);
            Some(file)
        } else {
            self.engines.writes.find(settings.store.id(), &record.key)
        };
        Ok(FileHandle {
            ino: record.ino,
            store: settings.store.clone(),
            backend: backend.dir_name.clone(),
            version: ObjectVersion {
                key: record.key.clone(),
                etag: record.etag.clone(),
                size: record.size,
            },
            stream: SequentialDetector::default(),
            dirty: Mutex::new(dirty),
            writable: record.writable,
            flush_on_close: settings.flush_on_close,
            // What the previous server's handle did is not known: its closes commit.
            wrote: AtomicBool::new(record.writable),
            io: HandleIo::restored(record.io),
        })
    }

    /// Rewrites the kernel-state journal as what is live now (see `kernel_state`).
    pub(super) fn compact_kernel_state(&self) {
        let Some(state) = &self.kernel_state else {
            return;
        };
        let result = state.compact(|out| {
            lock(&self.inodes).snapshot(out);
            for (&fh, handle) in lock(&self.files).iter() {
                out.record(&Record::File(handle.record(fh)));
            }
            for (&fh, handle) in lock(&self.dirs).iter() {
                out.record(&Record::Dir {
                    fh,
                    ino: handle.ino,
                });
            }
        });
        if let Err(e) = result {
            tracing::warn!(dir = %state.dir().display(), error = %e,
                "cannot compact the kernel-state journal");
        }
    }
}
