//! POSIX metadata kept with each object (`posix_metadata: true`): mode, owner and times in the
//! object's user metadata, under the names s3fs uses (`x-amz-meta-mode`, `-uid`, `-gid`,
//! `-mtime`, `-atime`, `-ctime`), so a bucket written by either shows the same owners and modes
//! through the other. A directory keeps its own on its `dir/` marker object; a symbolic link is
//! an object whose body is the target and whose mode has the link type bits (s3fs's convention).
//!
//! Here: reading and writing those values ([`Posix`]), and the mount's cache of what objects
//! carry ([`MetadataCache`]): LIST returns no user metadata, so it is read by a HEAD once per
//! TTL and shared by lookups, `getattr` and `readdirplus` (which fills it for a whole listing
//! at once, see `Fs::read_ahead_metadata`).

use std::num::NonZeroUsize;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use crate::store::{Metadata, format_time, parse_time};

pub const MODE: &str = crate::store::METADATA_MODE;
pub const UID: &str = crate::store::METADATA_UID;
pub const GID: &str = crate::store::METADATA_GID;
pub const MTIME: &str = crate::store::METADATA_MTIME;
pub const ATIME: &str = "atime";
pub const CTIME: &str = crate::store::METADATA_CTIME;
pub const RDEV: &str = "rdev";

/// The file-type bits of a mode, and the types msfs stores.
pub const S_IFMT: u32 = libc::S_IFMT;
pub const S_IFREG: u32 = libc::S_IFREG;
pub const S_IFDIR: u32 = libc::S_IFDIR;
pub const S_IFLNK: u32 = libc::S_IFLNK;
pub const S_IFIFO: u32 = libc::S_IFIFO;
pub const S_IFSOCK: u32 = libc::S_IFSOCK;
pub const S_IFCHR: u32 = libc::S_IFCHR;
pub const S_IFBLK: u32 = libc::S_IFBLK;

/// The special file types an object can stand for: empty objects whose mode says which (and,
/// for a device node, whose `rdev` says which device).
pub const SPECIAL_TYPES: [u32; 4] = [S_IFIFO, S_IFSOCK, S_IFCHR, S_IFBLK];

/// What an object's metadata says of its POSIX attributes; each is `None` when absent or
/// unreadable (then the backend's `uid`, `gid`, `file_perm`/`dir_perm` or the object's own
/// Last-Modified stand in).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Posix {
    /// `st_mode`, type bits included (as s3fs writes it).
    pub mode: Option<u32>,
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    pub mtime: Option<SystemTime>,
    pub atime: Option<SystemTime>,
    pub ctime: Option<SystemTime>,
    /// The device of a character or block device node.
    pub rdev: Option<u32>,
}

impl Posix {
    pub fn of(metadata: &Metadata) -> Posix {
        let number = |name: &str| {
            metadata
                .get(name)
                .and_then(|v| v.trim().parse::<u32>().ok())
        };
        let time = |name: &str| metadata.get(name).and_then(|v| parse_time(v));
        Posix {
            mode: number(MODE),
            uid: number(UID),
            gid: number(GID),
            mtime: time(MTIME),
            atime: time(ATIME),
            ctime: time(CTIME),
            rdev: number(RDEV),
        }
    }

    /// What a new object of type `kind` (`S_IFREG`, `S_IFDIR`, `S_IFLNK`) made by `uid`:`gid`
    /// with permission bits `perm` carries.
    pub fn new_object(kind: u32, perm: u32, uid: u32, gid: u32) -> Posix {
        let now = SystemTime::now();
        Posix {
            mode: Some(kind | (perm & 0o7777)),
            uid: Some(uid),
            gid: Some(gid),
            mtime: Some(now),
            atime: None,
            ctime: Some(now),
            rdev: None,
        }
    }

    /// The file-type bits the mode stores, if any.
    pub fn file_type(&self) -> Option<u32> {
        self.mode.map(|m| m & S_IFMT).filter(|t| *t != 0)
    }

    pub fn is_symlink(&self) -> bool {
        self.file_type() == Some(S_IFLNK)
    }

    /// The permission bits (setuid, setgid and sticky included), if stored.
    pub fn perm(&self) -> Option<u16> {
        self.mode.map(|m| (m & 0o7777) as u16)
    }

    /// `metadata` with these values written over it; other names it holds are kept, since a
    /// replace in the store replaces all of them.
    pub fn written_over(&self, metadata: &Metadata) -> Metadata {
        let mut out = metadata.clone();
        let mut put = |name: &str, value: Option<String>| {
            if let Some(value) = value {
                out.insert(name.to_string(), value);
            }
        };
        put(MODE, self.mode.map(|m| m.to_string()));
        put(UID, self.uid.map(|u| u.to_string()));
        put(GID, self.gid.map(|g| g.to_string()));
        put(MTIME, self.mtime.map(format_time));
        put(ATIME, self.atime.map(format_time));
        put(CTIME, self.ctime.map(format_time));
        put(RDEV, self.rdev.map(|r| r.to_string()));
        out
    }
}

/// (store id, key) → what the object carried, and when that was read.
type Entries = lru::LruCache<(String, String), (Arc<Metadata>, Instant)>;

/// Metadata entries remembered at most (least recently used go first).
const CACHE_LIMIT: usize = 65_536;

/// What objects of the mount's `posix_metadata` backends carry, by (store id, key), each with
/// when it was read: trusted for the TTL, as attributes are. A directory's entry is under its
/// marker's key (`dir/`); an empty map stands for "no metadata" (an implicit directory, an
/// object written without any).
#[derive(Debug)]
pub struct MetadataCache {
    entries: Mutex<Entries>,
    ttl: Duration,
}

impl MetadataCache {
    pub fn new(ttl: Duration) -> MetadataCache {
        MetadataCache {
            entries: Mutex::new(lru::LruCache::new(
                NonZeroUsize::new(CACHE_LIMIT).expect("a non-zero limit"),
            )),
            ttl,
        }
    }

    fn entries(&self) -> std::sync::MutexGuard<'_, Entries> {
        self.entries.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// What `key` carries, if read within the TTL.
    pub fn fresh(&self, store: &str, key: &str) -> Option<Arc<Metadata>> {
        let mut entries = self.entries();
        let (metadata, read) = entries.get(&(store.to_string(), key.to_string()))?;
        (read.elapsed() < self.ttl).then(|| Arc::clone(metadata))
    }

    /// What `key` carried when last read, however long ago: what a change of one value writes
    /// the others from (the caller refreshes it first when it can).
    pub fn last(&self, store: &str, key: &str) -> Option<Arc<Metadata>> {
        let mut entries = self.entries();
        entries
            .get(&(store.to_string(), key.to_string()))
            .map(|(metadata, _)| Arc::clone(metadata))
    }

    pub fn put(&self, store: &str, key: &str, metadata: Metadata) {
        self.entries().put(
            (store.to_string(), key.to_string()),
            (Arc::new(metadata), Instant::now()),
        );
    }

    pub fn forget(&self, store: &str, key: &str) {
        self.entries().pop(&(store.to_string(), key.to_string()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::UNIX_EPOCH;

    #[test]
    fn times_read_back_as_written_whole_or_with_nanoseconds() {
        let whole = UNIX_EPOCH + Duration::from_secs(1_234_567_890);
        assert_eq!(format_time(whole), "1234567890");
        assert_eq!(parse_time("1234567890"), Some(whole));
        let fine = whole + Duration::from_nanos(5_000_001);
        assert_eq!(format_time(fine), "1234567890.005000001");
        assert_eq!(parse_time(&format_time(fine)), Some(fine));
        assert_eq!(
            parse_time("1234567890.5"),
            Some(whole + Duration::from_millis(500))
        );
        for bad in ["", "x", "-5", "1.2.3", "1.0123456789", "1.a"] {
            assert_eq!(parse_time(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn s3fs_metadata_reads_as_its_mode_owner_and_time() {
        // What s3fs 1.9x writes for `chmod 750 f; chown 1234:5678 f` (mode in decimal).
        let metadata = Metadata::from([
            ("mode".to_string(), "33256".to_string()),
            ("uid".to_string(), "1234".to_string()),
            ("gid".to_string(), "5678".to_string()),
            ("mtime".to_string(), "1700000000".to_string()),
        ]);
        let posix = Posix::of(&metadata);
        assert_eq!(posix.mode, Some(S_IFREG | 0o750));
        assert_eq!(posix.perm(), Some(0o750));
        assert_eq!((posix.uid, posix.gid), (Some(1234), Some(5678)));
        assert_eq!(
            posix.mtime,
            Some(UNIX_EPOCH + Duration::from_secs(1_700_000_000))
        );
        assert!(!posix.is_symlink());
        assert_eq!(posix.written_over(&Metadata::new()), metadata);
    }

    #[test]
    fn written_over_keeps_other_names_and_unreadable_values_stay_unset() {
        let theirs = Metadata::from([
            ("owner-team".to_string(), "ml".to_string()),
            ("uid".to_string(), "not-a-number".to_string()),
        ]);
        assert_eq!(Posix::of(&theirs).uid, None);
        let link = Posix::new_object(S_IFLNK, 0o777, 7, 8);
        assert!(link.is_symlink());
        let written = link.written_over(&theirs);
        assert_eq!(written["owner-team"], "ml");
        assert_eq!(written["uid"], "7");
        assert_eq!(Posix::of(&written).mode, Some(S_IFLNK | 0o777));
    }

    #[test]
    fn the_cache_answers_within_its_ttl_and_remembers_the_last_value_after() {
        let cache = MetadataCache::new(Duration::ZERO);
        cache.put("s", "k", Metadata::from([("mode".into(), "1".into())]));
        assert!(cache.fresh("s", "k").is_none(), "a zero TTL trusts nothing");
        assert_eq!(cache.last("s", "k").expect("kept")["mode"], "1");
        cache.forget("s", "k");
        assert!(cache.last("s", "k").is_none());
        let cache = MetadataCache::new(Duration::from_secs(60));
        cache.put("s", "k", Metadata::new());
        assert!(cache.fresh("s", "k").is_some());
        assert!(cache.fresh("other", "k").is_none());
    }
}
