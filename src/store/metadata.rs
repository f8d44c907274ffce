//! User metadata of objects (S3's `x-amz-meta-*`), and the time format msfs and s3fs keep in it.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::{Result, StoreError};

/// An object's user metadata (S3's `x-amz-meta-*` headers): names without the prefix, in lower
/// case, as S3 returns them. Only stores that say they [keep it](super::ObjectStore::keeps_metadata)
/// are given any.
pub type Metadata = BTreeMap<String, String>;

/// The metadata entry holding an object's modification time, in seconds since the epoch (s3fs's
/// name and form; see `fs::posix`). The write engine keeps it current in what it commits: a
/// write changes a file's modification time.
pub const METADATA_MTIME: &str = "mtime";
/// The entries holding an object's `st_mode` (decimal, file-type bits included), owner and
/// group (s3fs's names; see `fs::posix` and `manifest::owners`).
pub const METADATA_MODE: &str = "mode";
pub const METADATA_UID: &str = "uid";
pub const METADATA_GID: &str = "gid";
/// The entry holding its status-change time, which the write engine keeps no older than the
/// modification time.
pub const METADATA_CTIME: &str = "ctime";

/// Refuses metadata a store cannot keep, rather than dropping it silently.
pub(super) fn refuse_metadata(op: &str, key: &str, metadata: &Metadata) -> Result<()> {
    if metadata.is_empty() {
        Ok(())
    } else {
        Err(StoreError::Setup(format!(
            "{op} {key}: this store keeps no object metadata (posix_metadata needs an S3 or RAM \
             backend)"
        )))
    }
}

/// Seconds since the epoch, with nanoseconds after a point only when there are any (s3fs
/// reads both forms and writes the first for whole seconds).
pub fn format_time(time: SystemTime) -> String {
    let since = time.duration_since(UNIX_EPOCH).unwrap_or_default();
    match since.subsec_nanos() {
        0 => since.as_secs().to_string(),
        nanos => format!("{}.{nanos:09}", since.as_secs()),
    }
}

/// Reads `format_time`'s forms (and any fraction of up to nine digits). Times before the epoch
/// are not stored by either tool.
pub fn parse_time(text: &str) -> Option<SystemTime> {
    let text = text.trim();
    let (secs, fraction) = text.split_once('.').unwrap_or((text, ""));
    let secs: u64 = secs.parse().ok()?;
    let nanos = if fraction.is_empty() {
        0
    } else {
        if fraction.len() > 9 || !fraction.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        format!("{fraction:0<9}").parse::<u32>().ok()?
    };
    UNIX_EPOCH.checked_add(Duration::new(secs, nanos))
}
