//! Server-side copy of a whole object of any size (a file rename is a copy and a delete).

use crate::cache::ObjectVersion;
use crate::store::{CopySource, Metadata, ObjectStore, PutResult, Result};

use super::journal::UploadJournal;
use super::plan;

/// S3's largest single CopyObject, and the largest part UploadPartCopy may copy.
const MAX_COPY: u64 = 5 << 30;
/// Parts of a large copy: big, as copies move no bytes through us, but within the part limit.
const COPY_PART: u64 = 512 << 20;

/// Copies `source` to `dest` inside the store: one CopyObject up to 5 GiB, else a multipart
/// upload of server-side part copies (journalled while open), each only from `source`'s version
/// (a source replaced midway fails the copy with `StoreError::Changed` instead of mixing two
/// versions), aborted if any part fails. Returns the copy's ETag.
pub(super) async fn copy_object(
    store: &dyn ObjectStore,
    journal: &UploadJournal,
    source: &ObjectVersion,
    dest: &str,
) -> Result<PutResult> {
    if source.size <= MAX_COPY {
        return store.copy(&source.key, dest).await;
    }
    // A CopyObject keeps the object's metadata (mode, owner: `posix_metadata`); an upload of
    // part copies gets it from the source's HEAD.
    let metadata = match store.keeps_metadata() {
        true => (store.head_with_metadata(&source.key).await?)
            .map(|(_, metadata)| metadata)
            .unwrap_or_default(),
        false => Metadata::new(),
    };
    let upload = store
        .create_multipart_with_metadata(dest, &metadata)
        .await?;
    journal.record(store, dest, &upload).await;
    let copied = copy_parts(store, source, dest, &upload).await;
    let finished = match &copied {
        Ok(_) => true,
        Err(_) => store.abort_multipart(dest, &upload).await.is_ok(),
    };
    // An upload that could not be aborted stays journalled, for the next process.
    if finished {
        journal.remove(store, dest, &upload).await;
    }
    copied
}

/// Fills and completes multipart upload `upload` of `dest` with copies of `source`'s parts.
async fn copy_parts(
    store: &dyn ObjectStore,
    source: &ObjectVersion,
    dest: &str,
    upload: &str,
) -> Result<PutResult> {
    let size = source.size;
    let part_size = plan::part_size_for(size).max(COPY_PART);
    let mut parts = Vec::new();
    for index in 0..plan::part_count(size, part_size) {
        let range = plan::part_range(index, part_size, size);
        let number = i32::try_from(index + 1).unwrap_or(i32::MAX);
        parts.push(
            store
                .upload_part_copy(
                    dest,
                    upload,
                    number,
                    CopySource {
                        key: &source.key,
                        range,
                        if_match: Some(&source.etag),
                    },
                )
                .await?,
        );
    }
    store.complete_multipart(dest, upload, &parts).await
}
