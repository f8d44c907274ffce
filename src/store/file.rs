//! `FileStore`: a local directory tree served as an object store (the MSC "file"/POSIX provider).
//!
//! It lets a first-time user try msfs with no cloud account, and gives the engines a second,
//! independent [`ObjectStore`] to be tested against. Keys map to paths under the root; sub-
//! directories are the common prefixes. Writes land in a temporary file that is renamed into
//! place, so a reader never sees half an object.

use std::io::{self, Read, Seek, SeekFrom};
use std::ops::Range;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use async_trait::async_trait;
use bytes::Bytes;

use super::{
    CompletedPart, CopySource, ListPage, ListRequest, ObjectMeta, ObjectStore, PendingUpload,
    PutResult, Result, StoreError,
};

/// Multipart uploads are staged here, under the root so that completing one is a rename within
/// one filesystem. Listings never show it.
const STAGING_DIR: &str = ".msfs-multipart";
const DEFAULT_PAGE: usize = 1000;
/// Ends the names of objects being written; listings never show them.
const TMP_SUFFIX: &str = ".msfs-tmp";
/// In each upload's staging directory: the key the upload is for.
const UPLOAD_KEY_FILE: &str = "key";

#[derive(Debug)]
pub struct FileStore {
    root: PathBuf,
    id: String,
    next_upload: AtomicU64,
}

impl FileStore {
    pub fn new(root: PathBuf) -> Result<FileStore> {
        let meta = std::fs::metadata(&root).map_err(|source| StoreError::Io {
            op: "open",
            key: root.display().to_string(),
            source,
        })?;
        if !meta.is_dir() {
            return Err(StoreError::Setup(format!(
                "{} is not a directory",
                root.display()
            )));
        }
        let id = format!("file:{}", root.display());
        Ok(FileStore {
            root,
            id,
            next_upload: AtomicU64::new(1),
        })
    }

    /// The path of `key`, refusing keys that would escape the root.
    fn path_of(&self, op: &'static str, key: &str) -> Result<PathBuf> {
        let bad = key.is_empty()
            || key.starts_with('/')
            || key.split('/').any(|seg| seg == ".." || seg == ".")
            || key.split('/').next() == Some(STAGING_DIR);
        if bad {
            return Err(StoreError::Io {
                op,
                key: key.to_string(),
                source: io::Error::new(
                    io::ErrorKind::InvalidInput,
                    "key not representable as a path",
                ),
            });
        }
        Ok(self.root.join(key))
    }

    fn staging(&self, upload_id: &str) -> PathBuf {
        self.root.join(STAGING_DIR).join(upload_id)
    }

    async fn blocking<T: Send + 'static>(
        op: &'static str,
        key: &str,
        f: impl FnOnce() -> io::Result<T> + Send + 'static,
    ) -> Result<T> {
        let key = key.to_string();
        match tokio::task::spawn_blocking(f).await {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(source)) if source.kind() == io::ErrorKind::NotFound => {
                Err(StoreError::NotFound { op, key })
            }
            Ok(Err(source)) => Err(StoreError::Io { op, key, source }),
            Err(join) => Err(StoreError::Io {
                op,
                key,
                source: io::Error::other(join.to_string()),
            }),
        }
    }
}

/// A synthetic ETag: changes whenever the file is replaced or modified.
fn etag_of(meta: &std::fs::Metadata) -> String {
    format!(
        "\"{:x}-{:x}-{:x}.{:x}\"",
        meta.ino(),
        meta.size(),
        meta.mtime(),
        meta.mtime_nsec()
    )
}

fn meta_of(key: String, meta: &std::fs::Metadata) -> ObjectMeta {
    ObjectMeta {
        key,
        size: meta.len(),
        etag: etag_of(meta),
        last_modified: meta.modified().unwrap_or(std::time::UNIX_EPOCH),
    }
}

enum Entry {
    Object(ObjectMeta),
    Prefix(String),
}

impl Entry {
    fn key(&self) -> &str {
        match self {
            Entry::Object(o) => &o.key,
            Entry::Prefix(p) => p,
        }
    }
}

/// Everything under `prefix`, sorted by key as S3 sorts (bytewise).
fn collect_entries(root: &Path, prefix: &str, delimited: bool) -> io::Result<Vec<Entry>> {
    let (dir_part, _) = prefix
        .rsplit_once('/')
        .map_or(("", prefix), |(d, n)| (d, n));
    let dir_key = if dir_part.is_empty() {
        String::new()
    } else {
        format!("{dir_part}/")
    };
    let mut out = Vec::new();
    let mut stack = vec![dir_key];
    while let Some(dir_key) = stack.pop() {
        let entries = match std::fs::read_dir(root.join(&dir_key)) {
            Ok(e) => e,
            // Nothing below a missing path or a file: an empty listing, as in S3.
            Err(e)
                if e.kind() == io::ErrorKind::NotFound
                    || e.raw_os_error() == Some(libc::ENOTDIR) =>
            {
                continue;
            }
            Err(e) => return Err(e),
        };
        for entry in entries {
            let entry = entry?;
            let Ok(name) = entry.file_name().into_string() else {
                continue; // not valid UTF-8: cannot be an S3 key
            };
            if (dir_key.is_empty() && name == STAGING_DIR) || name.ends_with(TMP_SUFFIX) {
                continue;
            }
            let key = format!("{dir_key}{name}");
            let file_type = entry.file_type()?;
            if file_type.is_dir() {
                let sub = format!("{key}/");
                if !(sub.starts_with(prefix) || prefix.starts_with(&sub)) {
                    continue;
                }
                if delimited && sub.starts_with(prefix) {
                    out.push(Entry::Prefix(sub));
                } else {
                    stack.push(sub);
                }
            } else if key.starts_with(prefix) {
                // Follows symlinks so a demo tree can link in data from elsewhere.
                let meta = std::fs::metadata(entry.path())?;
                if meta.is_file() {
                    out.push(Entry::Object(meta_of(key, &meta)));
                }
            }
        }
    }
    // An empty directory stands for its own marker object ("dir/"), as S3 lists one: a
    // directory made through the mount then exists for a lookup too, not only in listings.
    if out.is_empty()
        && prefix.ends_with('/')
        && let Ok(meta) = std::fs::metadata(root.join(prefix))
        && meta.is_dir()
    {
        let mut marker = meta_of(prefix.to_string(), &meta);
        marker.size = 0;
        out.push(Entry::Object(marker));
    }
    out.sort_by(|a, b| a.key().cmp(b.key()));
    Ok(out)
}

fn read_range(path: &Path, range: Range<u64>) -> io::Result<Bytes> {
    let mut file = std::fs::File::open(path)?;
    let size = file.metadata()?.len();
    let end = range.end.min(size);
    if range.start >= end {
        return Ok(Bytes::new());
    }
    file.seek(SeekFrom::Start(range.start))?;
    let mut buf = vec![0; (end - range.start) as usize];
    file.read_exact(&mut buf)?;
    Ok(Bytes::from(buf))
}

/// Writes `body` next to `dest` and renames it into place.
fn write_atomically(dest: &Path, body: &[u8]) -> io::Result<std::fs::Metadata> {
    if let Some(parent) = dest.parent() {
        std::fs::create_dir_all(parent)?;
    }
    // Unique per write, so concurrent writes of one key never share a temporary file.
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let tmp = dest.with_file_name(format!(
        ".{}.{}-{}{TMP_SUFFIX}",
        dest.file_name()
            .and_then(|n| n.to_str())
            .unwrap_or("object"),
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::write(&tmp, body)?;
    std::fs::rename(&tmp, dest)?;
    std::fs::metadata(dest)
}

#[async_trait]
impl ObjectStore for FileStore {
    fn id(&self) -> &str {
        &self.id
    }

    async fn head(&self, key: &str) -> Result<Option<ObjectMeta>> {
        let path = self.path_of("head", key)?;
        let owned = key.to_string();
        let found = Self::blocking("head", key, move || match std::fs::metadata(&path) {
            Ok(meta) if meta.is_file() => Ok(Some(meta_of(owned, &meta))),
            Ok(_) => Ok(None),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) if e.raw_os_error() == Some(libc::ENOTDIR) => Ok(None),
            Err(e) => Err(e),
        })
        .await?;
        Ok(found)
    }

    async fn get_range(&self, key: &str, range: Range<u64>, etag: Option<&str>) -> Result<Bytes> {
        let path = self.path_of("get", key)?;
        let expected = etag.map(str::to_string);
        let changed = StoreError::Changed {
            op: "get",
            key: key.to_string(),
            expected: expected.clone().unwrap_or_default(),
        };
        let out = Self::blocking("get", key, move || {
            if let Some(want) = &expected
                && etag_of(&std::fs::metadata(&path)?) != *want
            {
                return Ok(None);
            }
            read_range(&path, range).map(Some)
        })
        .await?;
        out.ok_or(changed)
    }

    /// A flat page walks every directory below the prefix (`collect_entries`).
    fn cheap_flat_listing(&self) -> bool {
        false
    }

    async fn list(&self, request: &ListRequest) -> Result<ListPage> {
        let root = self.root.clone();
        let owned_prefix = request.prefix.clone();
        let delimited = request.delimited;
        let entries = Self::blocking("list", &request.prefix, move || {
            collect_entries(&root, &owned_prefix, delimited)
        })
        .await?;
        let limit = request
            .max_keys
            .map_or(DEFAULT_PAGE, |m| (m as usize).max(1));
        // A continuation token is the last key of the previous page, so both it and
        // `start_after` mean "strictly after this key".
        let start = match request
            .continuation
            .as_deref()
            .max(request.start_after.as_deref())
        {
            Some(after) => entries.partition_point(|e| e.key() <= after),
            None => 0,
        };
        let mut page = ListPage::default();
        let taken = entries.iter().skip(start).take(limit).count();
        for entry in entries.into_iter().skip(start).take(limit) {
            match entry {
                Entry::Object(o) => page.objects.push(o),
                Entry::Prefix(p) => page.common_prefixes.push(p),
            }
        }
        let last = page
            .objects
            .last()
            .map(|o| o.key.clone())
            .into_iter()
            .chain(page.common_prefixes.last().cloned())
            .max();
        if taken == limit {
            page.next = last;
        }
        Ok(page)
    }

    async fn put(&self, key: &str, body: Bytes) -> Result<PutResult> {
        let path = self.path_of("put", key)?;
        let marker = key.ends_with('/');
        if marker && !body.is_empty() {
            return Err(StoreError::Io {
                op: "put",
                key: key.to_string(),
                source: io::Error::new(
                    io::ErrorKind::InvalidInput,
                    "a key ending in / can only be an empty directory marker here",
                ),
            });
        }
        let meta = Self::blocking("put", key, move || {
            if marker {
                // A directory marker is the directory itself.
                std::fs::create_dir_all(&path)?;
                return std::fs::metadata(&path);
            }
            write_atomically(&path, &body)
        })
        .await?;
        Ok(PutResult {
            etag: etag_of(&meta),
        })
    }

    async fn create_multipart(&self, key: &str) -> Result<String> {
        self.path_of("create_multipart", key)?;
        let id = format!(
            "{}-{}",
            std::process::id(),
            self.next_upload.fetch_add(1, Ordering::Relaxed)
        );
        let dir = self.staging(&id);
        let owned = key.to_string();
        Self::blocking("create_multipart", key, move || {
            std::fs::create_dir_all(&dir)?;
            // What the upload is for, so that pending uploads can be listed by key.
            std::fs::write(dir.join(UPLOAD_KEY_FILE), owned)
        })
        .await?;
        Ok(id)
    }

    async fn upload_part(
        &self,
        key: &str,
        upload_id: &str,
        part_number: i32,
        body: Bytes,
    ) -> Result<CompletedPart> {
        let part = self.staging(upload_id).join(format!("{part_number:05}"));
        let meta =
            Self::blocking("upload_part", key, move || write_atomically(&part, &body)).await?;
        Ok(CompletedPart {
            part_number,
            etag: etag_of(&meta),
        })
    }

    async fn upload_part_copy(
        &self,
        key: &str,
        upload_id: &str,
        part_number: i32,
        source: CopySource<'_>,
    ) -> Result<CompletedPart> {
        let body = self
            .get_range(source.key, source.range, source.if_match)
            .await?;
        self.upload_part(key, upload_id, part_number, body).await
    }

    async fn complete_multipart(
        &self,
        key: &str,
        upload_id: &str,
        parts: &[CompletedPart],
    ) -> Result<PutResult> {
        let dest = self.path_of("complete_multipart", key)?;
        let staging = self.staging(upload_id);
        let numbers: Vec<i32> = parts.iter().map(|p| p.part_number).collect();
        let meta = Self::blocking("complete_multipart", key, move || {
            let mut body = Vec::new();
            for n in numbers {
                body.extend_from_slice(&std::fs::read(staging.join(format!("{n:05}")))?);
            }
            let meta = write_atomically(&dest, &body)?;
            std::fs::remove_dir_all(&staging)?;
            Ok(meta)
        })
        .await?;
        Ok(PutResult {
            etag: etag_of(&meta),
        })
    }

    async fn abort_multipart(&self, key: &str, upload_id: &str) -> Result<()> {
        let staging = self.staging(upload_id);
        Self::blocking(
            "abort_multipart",
            key,
            move || match std::fs::remove_dir_all(staging) {
                Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
                other => other,
            },
        )
        .await
    }

    async fn list_uploads(&self, prefix: &str) -> Result<Vec<PendingUpload>> {
        let staging = self.root.join(STAGING_DIR);
        let prefix = prefix.to_string();
        Self::blocking("list_uploads", &prefix.clone(), move || {
            let mut uploads = Vec::new();
            let entries = match std::fs::read_dir(&staging) {
                Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(uploads),
                other => other?,
            };
            for entry in entries {
                let entry = entry?;
                let Ok(key) = std::fs::read_to_string(entry.path().join(UPLOAD_KEY_FILE)) else {
                    continue; // not (or no longer) an upload
                };
                if key.starts_with(&prefix) {
                    uploads.push(PendingUpload {
                        key,
                        upload_id: entry.file_name().to_string_lossy().into_owned(),
                        initiated: entry.metadata()?.modified()?,
                    });
                }
            }
            uploads.sort_by(|a, b| a.key.cmp(&b.key));
            Ok(uploads)
        })
        .await
    }

    async fn copy(&self, source_key: &str, dest_key: &str) -> Result<PutResult> {
        let source = self.path_of("copy", source_key)?;
        let dest = self.path_of("copy", dest_key)?;
        let meta = Self::blocking("copy", source_key, move || {
            let body = std::fs::read(source)?;
            write_atomically(&dest, &body)
        })
        .await?;
        Ok(PutResult {
            etag: etag_of(&meta),
        })
    }

    async fn delete(&self, key: &str) -> Result<()> {
        let path = self.path_of("delete", key)?;
        let marker = key.ends_with('/');
        Self::blocking("delete", key, move || {
            // Deleting a marker leaves what is below it, as in S3.
            let removed = if marker {
                std::fs::remove_dir(path)
            } else {
                std::fs::remove_file(path)
            };
            match removed {
                Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
                Err(e) if marker && e.kind() == io::ErrorKind::DirectoryNotEmpty => Ok(()),
                other => other,
            }
        })
        .await
    }

    async fn delete_many(&self, keys: &[String]) -> Result<()> {
        for key in keys {
            self.delete(key).await?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn store_with(files: &[(&str, &[u8])]) -> (tempfile::TempDir, FileStore) {
        let dir = tempfile::tempdir().expect("tempdir");
        for (key, body) in files {
            let path = dir.path().join(key);
            std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
            std::fs::write(path, body).expect("write");
        }
        let store = FileStore::new(dir.path().to_path_buf()).expect("store");
        (dir, store)
    }

    #[tokio::test]
    async fn delimited_listing_shows_files_and_subdirectories_in_key_order() {
        let (_dir, store) = store_with(&[("b.txt", b"b"), ("a/x", b"x"), ("c/d/e", b"e")]);
        let page = store.list(&ListRequest::delimited("")).await.expect("list");
        let keys: Vec<_> = page.objects.iter().map(|o| o.key.as_str()).collect();
        assert_eq!(keys, ["b.txt"]);
        assert_eq!(page.common_prefixes, ["a/", "c/"]);
        assert!(page.next.is_none());
    }

    #[tokio::test]
    async fn flat_listing_starts_strictly_after_the_given_key() {
        let (_dir, store) =
            store_with(&[("d/a", b"a"), ("d/b", b"b"), ("d/c/x", b"x"), ("e", b"e")]);
        let page = store
            .list(&ListRequest::flat("d/").after("d/b"))
            .await
            .expect("list");
        let keys: Vec<_> = page.objects.iter().map(|o| o.key.as_str()).collect();
        assert_eq!(keys, ["d/c/x"]);
        assert!(page.common_prefixes.is_empty());
    }

    #[tokio::test]
    async fn listing_paginates_without_repeating_or_skipping() {
        let files: Vec<(String, Vec<u8>)> = (0..25)
            .map(|i| (format!("d/f{i:03}"), vec![i as u8]))
            .collect();
        let refs: Vec<(&str, &[u8])> = files
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_slice()))
            .collect();
        let (_dir, store) = store_with(&refs);
        let mut seen = Vec::new();
        let mut token = None;
        loop {
            let page = store
                .list(
                    &ListRequest::delimited("d/")
                        .continuing(token)
                        .max_keys(Some(10)),
                )
                .await
                .expect("list");
            seen.extend(page.objects.into_iter().map(|o| o.key));
            token = page.next;
            if token.is_none() {
                break;
            }
        }
        let expected: Vec<String> = files.into_iter().map(|(k, _)| k).collect();
        assert_eq!(seen, expected);
    }

    #[tokio::test]
    async fn ranged_get_returns_exact_bytes_and_rejects_a_changed_etag() {
        let (dir, store) = store_with(&[("k", b"0123456789")]);
        let meta = store.head("k").await.expect("head").expect("exists");
        let bytes = store
            .get_range("k", 2..5, Some(&meta.etag))
            .await
            .expect("get");
        assert_eq!(&bytes[..], b"234");
        std::fs::write(dir.path().join("k"), b"changed content").expect("rewrite");
        let err = store.get_range("k", 0..3, Some(&meta.etag)).await;
        assert!(matches!(err, Err(StoreError::Changed { .. })));
    }

    #[tokio::test]
    async fn head_of_a_directory_or_missing_key_is_none() {
        let (_dir, store) = store_with(&[("a/b", b"1")]);
        assert!(store.head("a").await.expect("head").is_none());
        assert!(store.head("nope").await.expect("head").is_none());
        assert!(store.head("a/b/c").await.expect("head").is_none());
    }

    #[tokio::test]
    async fn multipart_upload_assembles_parts_in_order_and_hides_staging() {
        let (_dir, store) = store_with(&[("src", b"abcdefgh")]);
        let id = store.create_multipart("out").await.expect("create");
        let p2 = store
            .upload_part_copy("out", &id, 2, CopySource::any_version("src", 4..8))
            .await
            .expect("copy part");
        let p1 = store
            .upload_part("out", &id, 1, Bytes::from_static(b"XY"))
            .await
            .expect("part");
        store
            .complete_multipart("out", &id, &[p1, p2])
            .await
            .expect("complete");
        let body = store.get_range("out", 0..100, None).await.expect("get");
        assert_eq!(&body[..], b"XYefgh");
        let page = store.list(&ListRequest::delimited("")).await.expect("list");
        assert!(
            page.common_prefixes.is_empty(),
            "{:?}",
            page.common_prefixes
        );
    }

    #[test]
    fn keys_escaping_the_root_are_refused() {
        let (_dir, store) = store_with(&[]);
        assert!(store.path_of("get", "../etc/passwd").is_err());
        assert!(store.path_of("get", "a/./b").is_err());
        assert!(store.path_of("get", "/abs").is_err());
    }
}
