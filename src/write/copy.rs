//! Server-side copy of a whole object of any size (a file rename is a copy and a delete).

use crate::store::{ObjectStore, PutResult, Result};

use super::plan;

/// S3's largest single CopyObject, and the largest part UploadPartCopy may copy.
const MAX_COPY: u64 = 5 << 30;
/// Parts of a large copy: big, as copies move no bytes through us, but within the part limit.
const COPY_PART: u64 = 512 << 20;

/// Copies `source` (of `size` bytes) to `dest` inside the store: one CopyObject up to 5 GiB,
/// else a multipart upload of server-side part copies, aborted if any part fails. Returns the
/// copy's ETag.
pub async fn copy_object(
    store: &dyn ObjectStore,
    source: &str,
    dest: &str,
    size: u64,
) -> Result<PutResult> {
    if size <= MAX_COPY {
        return store.copy(source, dest).await;
    }
    let part_size = plan::part_size_for(size).max(COPY_PART);
    let upload = store.create_multipart(dest).await?;
    let mut parts = Vec::new();
    for index in 0..plan::part_count(size, part_size) {
        let range = plan::part_range(index, part_size, size);
        let number = i32::try_from(index + 1).unwrap_or(i32::MAX);
        match store
            .upload_part_copy(dest, &upload, number, source, range)
            .await
        {
            Ok(part) => parts.push(part),
            Err(e) => {
                let _ = store.abort_multipart(dest, &upload).await;
                return Err(e);
            }
        }
    }
    match store.complete_multipart(dest, &upload, &parts).await {
        Ok(done) => Ok(done),
        Err(e) => {
            let _ = store.abort_multipart(dest, &upload).await;
            Err(e)
        }
    }
}
