//! The `warm` backend key (CSI attribute `warm`): at mount, the listed files and directories
//! are fetched into the cache in the background, so that a job started right after finds them
//! warm. The mount does not wait for it.
//!
//! The objects are taken in the order listed (a directory's in key order), and only as many as
//! fit in the cache: the first object that would not fit ends the list, so warming never evicts
//! what it warmed itself. What it did is logged once at the end (`warm at mount done`).

use std::sync::Arc;
use std::time::Instant;

use futures::StreamExt;

use crate::cache::{LineCache, ObjectVersion};
use crate::store::{ListRequest, ObjectMeta, ObjectStore, StoreError};

/// Objects warmed at once.
const OBJECTS_IN_FLIGHT: usize = 4;

/// What one backend asks to warm.
pub struct WarmList {
    /// The backend's `dir_name`, for the log.
    pub backend: String,
    pub store: Arc<dyn ObjectStore>,
    /// The backend's key prefix ("" or ending in `/`).
    pub prefix: String,
    /// Its `warm` entries: keys, or prefixes ending in `/`, below `prefix`.
    pub entries: Vec<String>,
}

/// What a background warm did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Warmed {
    pub objects: u64,
    pub bytes: u64,
    pub cached_before: u64,
    /// Objects listed but left out: they did not fit in the cache.
    pub left_out: u64,
    pub failed: u64,
}

/// The warm lists of `backends` (with the store each is open on) that have any entries.
pub fn lists_of<'a>(
    backends: impl IntoIterator<Item = (&'a crate::config::BackendConfig, Arc<dyn ObjectStore>)>,
) -> Vec<WarmList> {
    backends
        .into_iter()
        .filter(|(config, _)| !config.warm.is_empty())
        .map(|(config, store)| WarmList {
            backend: config.dir_name.clone(),
            store,
            prefix: config.prefix.clone(),
            entries: config.warm.clone(),
        })
        .collect()
}

/// Warms `list` into `cache` (see the module doc) and logs what it did.
pub async fn warm(list: &WarmList, cache: &LineCache) -> Warmed {
    let started = Instant::now();
    let mut listed = Vec::new();
    for entry in &list.entries {
        let key = format!("{}{entry}", list.prefix);
        match objects_of(&*list.store, &key, entry.ends_with('/')).await {
            Ok(found) if found.is_empty() => {
                tracing::warn!(backend = %list.backend, entry, "warm: nothing there");
            }
            Ok(found) => listed.extend(found),
            Err(e) => {
                tracing::warn!(backend = %list.backend, entry, error = %e,
                    "warm: cannot list; skipped");
            }
        }
    }
    let capacity = cache.capacity_bytes();
    let mut room = capacity;
    let fitting = listed
        .iter()
        .take_while(|object| match room.checked_sub(object.size) {
            Some(left) => {
                room = left;
                true
            }
            None => false,
        })
        .count();
    let mut warmed = Warmed {
        left_out: (listed.len() - fitting) as u64,
        ..Warmed::default()
    };
    let results = futures::stream::iter(listed.into_iter().take(fitting))
        .map(|object| async move {
            let version = ObjectVersion {
                key: object.key,
                etag: object.etag,
                size: object.size,
            };
            let result = cache.warm(&list.store, &version, 0..version.size).await;
            (version, result)
        })
        .buffer_unordered(OBJECTS_IN_FLIGHT)
        .collect::<Vec<_>>()
        .await;
    for (version, result) in results {
        match result {
            Ok(cached_before) => {
                warmed.objects += 1;
                warmed.bytes += version.size;
                warmed.cached_before += cached_before;
            }
            Err(e) => {
                warmed.failed += 1;
                tracing::warn!(backend = %list.backend, key = %version.key, error = %e,
                    "warm: cannot fetch");
            }
        }
    }
    tracing::info!(
        backend = %list.backend,
        objects = warmed.objects,
        bytes = warmed.bytes,
        already_cached_bytes = warmed.cached_before,
        left_out = warmed.left_out,
        failed = warmed.failed,
        capacity,
        seconds = started.elapsed().as_secs_f64(),
        "warm at mount done"
    );
    warmed
}

/// The object `key`, or with `prefix` every object below it (a flat listing, page by page,
/// directory markers left out).
async fn objects_of(
    store: &dyn ObjectStore,
    key: &str,
    prefix: bool,
) -> Result<Vec<ObjectMeta>, StoreError> {
    if !prefix {
        return Ok(store.head(key).await?.into_iter().collect());
    }
    let mut objects = Vec::new();
    let mut continuation = None;
    loop {
        let page = store
            .list(&ListRequest {
                prefix: key.to_string(),
                delimited: false,
                continuation,
                ..ListRequest::default()
            })
            .await?;
        objects.extend(page.objects.into_iter().filter(|o| !o.key.ends_with('/')));
        match page.next {
            Some(next) => continuation = Some(next),
            None => return Ok(objects),
        }
    }
}
