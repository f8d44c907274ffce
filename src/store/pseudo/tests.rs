//! `PseudoStore` against a materialized copy of the same tree: every page size, every marker,
//! reads, refusals and ids. In a file of its own because it is longer than any part of the
//! store it tests; `reference_page` and `entries_of` are shared with `RamStore`'s tests.

use std::collections::BTreeSet;

use super::names::NameFormat;
use super::*;

/// Brute force over a materialized, sorted key set: the entries (name, is a common prefix)
/// of one page and its continuation token, with the semantics of the module docs.
pub(in crate::store) fn reference_page(
    keys: &BTreeSet<String>,
    request: &ListRequest,
    limit: usize,
) -> (Vec<(String, bool)>, Option<String>) {
    let marker = request
        .continuation
        .as_deref()
        .max(request.start_after.as_deref());
    let mut entries: Vec<(String, bool)> = keys
        .iter()
        .filter_map(|key| {
            let rest = key.strip_prefix(request.prefix.as_str())?;
            Some(match rest.find('/') {
                Some(i) if request.delimited => {
                    (key[..request.prefix.len() + i + 1].to_string(), true)
                }
                _ => (key.clone(), false),
            })
        })
        .filter(|(entry, _)| marker.is_none_or(|m| entry.as_str() > m))
        .collect();
    entries.sort();
    entries.dedup();
    let more = entries.len() > limit;
    entries.truncate(limit);
    let next = more.then(|| entries.last().map(|e| e.0.clone())).flatten();
    (entries, next)
}

/// A page as (name, is a common prefix) entries in key order.
pub(in crate::store) fn entries_of(page: &ListPage) -> Vec<(String, bool)> {
    let mut entries: Vec<(String, bool)> = page
        .objects
        .iter()
        .map(|o| (o.key.clone(), false))
        .chain(page.common_prefixes.iter().map(|p| (p.clone(), true)))
        .collect();
    entries.sort();
    entries
}

fn config(
    formats: (&str, &str),
    starts: (u64, u64),
    files: [u32; 4],
    subdirs: [u32; 3],
) -> PseudoConfig {
    PseudoConfig {
        dir_name_format: formats.0.into(),
        file_name_format: formats.1.into(),
        dir_starting_number: starts.0,
        file_starting_number: starts.1,
        file_size: 100,
        files_at_depth: files,
        subdirectories_at_depth: subdirs,
        max_list_page_size: 1000,
        min_latency: PseudoLatencies::default(),
    }
}

fn default_formats(files: [u32; 4], subdirs: [u32; 3]) -> PseudoConfig {
    config(("dir_%08X", "file_%08X"), (0, 0), files, subdirs)
}

/// Every file key, enumerated with the config's own name functions.
fn all_keys(config: &PseudoConfig) -> BTreeSet<String> {
    fn walk(config: &PseudoConfig, dir: &str, depth: usize, out: &mut BTreeSet<String>) {
        for n in 0..u64::from(config.files_at_depth[depth]) {
            out.insert(format!("{dir}{}", config.file_name(n)));
        }
        let subdirs = config.subdirectories_at_depth.get(depth).copied();
        for n in 0..u64::from(subdirs.unwrap_or(0)) {
            walk(
                config,
                &format!("{dir}{}/", config.dir_name(n)),
                depth + 1,
                out,
            );
        }
    }
    let mut out = BTreeSet::new();
    walk(config, "", 0, &mut out);
    out
}

/// Small shapes covering fixed-width names, names of several lengths (which do not sort
/// numerically), directories interleaved with files, and space and `%%` padding.
fn shapes() -> Vec<PseudoConfig> {
    vec![
        default_formats([3, 2, 2, 2], [2, 3, 2]),
        default_formats([5, 0, 0, 0], [0, 0, 0]),
        config(("d%d", "f%d"), (8, 95), [12, 3, 0, 0], [12, 0, 0]),
        config(("x%d", "x%d_"), (0, 5), [12, 2, 0, 0], [12, 0, 0]),
        config(("%3x", "%%%02o"), (0, 0), [70, 3, 0, 0], [20, 0, 0]),
    ]
}

/// Directory prefixes, partial names and strings that name nothing.
fn prefixes(keys: &BTreeSet<String>) -> BTreeSet<String> {
    let mut out = BTreeSet::from(["".to_string(), "nope/".into(), "zzz".into()]);
    for key in keys {
        for (i, _) in key.match_indices('/') {
            out.insert(key[..=i].to_string());
            out.insert(key[..i].to_string());
            out.insert(key[..i - 1].to_string());
        }
        let mut cut = key.len() - 1;
        while !key.is_char_boundary(cut) {
            cut -= 1;
        }
        out.insert(key[..cut].to_string());
        out.insert(format!("{key}/"));
    }
    out
}

async fn check_pages(
    store: &dyn ObjectStore,
    keys: &BTreeSet<String>,
    request: ListRequest,
    limit: usize,
) {
    let mut request = request.max_keys(Some(limit as u32));
    for _ in 0..=keys.len() + 1 {
        let page = store.list(&request).await.expect("list");
        let (want, want_next) = reference_page(keys, &request, limit);
        assert_eq!(entries_of(&page), want, "{request:?}");
        assert_eq!(page.next, want_next, "{request:?}");
        if page.next.is_none() {
            return;
        }
        request.continuation = page.next;
    }
    panic!("{request:?}: the listing never ended");
}

#[test]
fn names_expand_exactly_like_the_config_and_parse_back() {
    for (fmt, start) in [
        ("dir_%08X", 0),
        ("f%d.bin", 0),
        ("%%%4x%%", 0),
        ("x%5o_y", 0),
        ("%0d", 0),
        ("%03u-z", 990),
        ("é%2X", 250),
        ("%x", u64::MAX - 40),
    ] {
        let cfg = config((fmt, fmt), (start, start), [0; 4], [0; 3]);
        let compiled = NameFormat::compile(fmt).expect("compiles");
        for n in 0..40 {
            let name = cfg.dir_name(n);
            let mut ours = String::new();
            compiled.push(start + n, &mut ours);
            assert_eq!(ours, name, "{fmt} {n}");
            assert_eq!(compiled.parse(&name), Some(start + n), "{fmt} {name}");
        }
    }
    let hex = NameFormat::compile("d%04X").expect("compiles");
    for bad in [
        "d00ff", "d0FF", "d+0FF", "d000FF", "d 0FF", "dFF", "0FF", "d00FFx",
    ] {
        assert_eq!(hex.parse(bad), None, "{bad}");
    }
    assert_eq!(hex.parse("d10000"), Some(0x10000));
}

#[tokio::test]
async fn paginated_listings_match_a_materialized_tree_at_every_page_size() {
    for cfg in shapes() {
        let store = PseudoStore::new(&cfg).expect("store");
        let keys = all_keys(&cfg);
        for prefix in prefixes(&keys) {
            for delimited in [false, true] {
                let request = ListRequest {
                    delimited,
                    ..ListRequest::flat(prefix.clone())
                };
                let total = reference_page(&keys, &request, usize::MAX).0.len();
                // Every page size on the directory prefixes, a few elsewhere.
                let sizes: Vec<usize> = if prefix.is_empty() || prefix.ends_with('/') {
                    (1..=total + 1).collect()
                } else {
                    vec![1, 2, 3, total.max(1)]
                };
                for limit in sizes {
                    check_pages(&store, &keys, request.clone(), limit).await;
                }
            }
        }
    }
}

#[tokio::test]
async fn start_after_any_key_or_between_keys_lists_exactly_what_follows() {
    for cfg in shapes() {
        let store = PseudoStore::new(&cfg).expect("store");
        let keys = all_keys(&cfg);
        let markers = prefixes(&keys);
        let markers = markers.iter().chain(&keys);
        let dirs: Vec<String> = prefixes(&keys)
            .into_iter()
            .filter(|p| p.is_empty() || p.ends_with('/'))
            .collect();
        for marker in markers {
            for prefix in &dirs {
                for delimited in [false, true] {
                    let request = ListRequest {
                        delimited,
                        ..ListRequest::flat(prefix.clone())
                    }
                    .after(marker.clone());
                    for limit in [1, 4, 1000] {
                        let page = store
                            .list(&request.clone().max_keys(Some(limit as u32)))
                            .await
                            .expect("list");
                        let (want, next) = reference_page(&keys, &request, limit);
                        assert_eq!(entries_of(&page), want, "{request:?} {limit}");
                        assert_eq!(page.next, next, "{request:?} {limit}");
                    }
                }
            }
        }
    }
}

#[tokio::test]
async fn the_store_page_size_caps_max_keys() {
    let mut cfg = default_formats([10, 0, 0, 0], [0; 3]);
    cfg.max_list_page_size = 3;
    let store = PseudoStore::new(&cfg).expect("store");
    let page = store
        .list(&ListRequest::flat("").max_keys(Some(100)))
        .await
        .expect("list");
    assert_eq!(page.objects.len(), 3);
    let page = store.list(&ListRequest::flat("")).await.expect("list");
    assert_eq!(page.objects.len(), 3);
    assert_eq!(page.next.as_deref(), Some("file_00000002"));
}

#[tokio::test]
async fn a_page_far_into_ten_million_files_is_computed_not_materialized() {
    for formats in [("dir_%08X", "file_%08X"), ("d%d", "f%d")] {
        let cfg = config(formats, (0, 0), [10_000_000, 0, 0, 0], [0; 3]);
        let store = PseudoStore::new(&cfg).expect("store");
        for delimited in [false, true] {
            // In key order, not numeric order, for "f%d": follow the store's own order.
            let start = cfg.file_name(9_000_000);
            let mut request = ListRequest {
                delimited,
                ..ListRequest::flat("")
            }
            .after(start.clone())
            .max_keys(Some(1000));
            let mut previous = start;
            for _ in 0..3 {
                let page = store.list(&request).await.expect("list");
                assert_eq!(page.objects.len(), 1000);
                for object in &page.objects {
                    assert!(object.key > previous, "{} after {previous}", object.key);
                    assert!(store.tree.is_file(&object.key));
                    previous = object.key.clone();
                }
                assert_eq!(page.next.as_ref(), Some(&previous));
                request.continuation = page.next;
            }
        }
        let fixed = formats.1 == "file_%08X";
        if fixed {
            let page = store
                .list(&ListRequest::flat("").after(cfg.file_name(9_000_000)))
                .await
                .expect("list");
            assert_eq!(page.objects[0].key, cfg.file_name(9_000_001));
        }
    }
}

#[test]
fn the_pattern_depends_on_key_and_offset_only() {
    let mut whole = vec![0; 1000];
    pseudo_fill("a/b", 0, &mut whole);
    for start in [0usize, 1, 7, 8, 9, 500, 993] {
        let mut part = vec![0; 1000 - start];
        pseudo_fill("a/b", start as u64, &mut part);
        assert_eq!(part, whole[start..], "from {start}");
        assert_eq!(pseudo_byte("a/b", start as u64), whole[start]);
    }
    let mut other = vec![0; 1000];
    pseudo_fill("a/c", 0, &mut other);
    assert_ne!(whole, other);
    // Not a constant nor a short period.
    assert!(whole.windows(8).any(|w| w != &whole[..8]));
    assert_ne!(whole[..500], whole[500..]);
}

#[tokio::test]
async fn reads_return_the_pattern_and_know_only_generated_files() {
    let mut cfg = default_formats([2, 1, 0, 0], [1, 0, 0]);
    cfg.file_size = 600_000;
    let store = PseudoStore::new(&cfg).expect("store");
    let key = "dir_00000000/file_00000000";
    let meta = store.head(key).await.expect("head").expect("exists");
    assert_eq!(meta.size, 600_000);
    assert_eq!(meta, store.head(key).await.expect("head").expect("exists"));
    let body = store
        .get_range(key, 1000..600_100, Some(&meta.etag))
        .await
        .expect("get");
    let mut want = vec![0; 599_000];
    pseudo_fill(key, 1000, &mut want);
    assert!(body[..] == want[..]);
    let mut streamed = vec![0; 599_000];
    let got = store
        .get_range_into(key, 1000..600_000, None, &mut |at, chunk| {
            streamed[at as usize..at as usize + chunk.len()].copy_from_slice(chunk);
        })
        .await
        .expect("get into");
    assert_eq!(got, 599_000);
    assert!(streamed == want);
    assert!(matches!(
        store.get_range(key, 0..1, Some("\"other\"")).await,
        Err(StoreError::Changed { .. })
    ));
    for missing in [
        "dir_00000000/file_00000001",
        "dir_00000001/file_00000000",
        "file_00000002",
        "dir_00000000/",
        "dir_00000000",
        "file_0000000",
        "",
    ] {
        assert!(
            store.head(missing).await.expect("head").is_none(),
            "{missing}"
        );
        assert!(matches!(
            store.get_range(missing, 0..1, None).await,
            Err(StoreError::NotFound { .. })
        ));
    }
}

#[tokio::test]
async fn every_write_is_refused_as_read_only() {
    let store = PseudoStore::new(&default_formats([1, 0, 0, 0], [0; 3])).expect("store");
    let key = "file_00000000";
    let part = CompletedPart {
        part_number: 1,
        etag: "e".into(),
    };
    let results = [
        store.put(key, Bytes::new()).await.err(),
        store.create_multipart(key).await.err(),
        store.upload_part(key, "u", 1, Bytes::new()).await.err(),
        store
            .upload_part_copy(key, "u", 1, CopySource::any_version(key, 0..1))
            .await
            .err(),
        store.complete_multipart(key, "u", &[part]).await.err(),
        store.abort_multipart(key, "u").await.err(),
        store.copy(key, "other").await.err(),
        store.delete(key).await.err(),
        store.delete_many(&[key.to_string()]).await.err(),
    ];
    for result in results {
        match result {
            Some(StoreError::Io { source, .. }) => {
                assert_eq!(source.kind(), io::ErrorKind::ReadOnlyFilesystem)
            }
            other => panic!("expected a read-only error, got {other:?}"),
        }
    }
    assert!(store.head(key).await.expect("head").is_some());
    assert!(store.list_uploads("").await.expect("uploads").is_empty());
}

#[test]
fn differently_configured_stores_have_different_ids() {
    let a = default_formats([1, 0, 0, 0], [0; 3]);
    let mut b = a.clone();
    b.file_size += 1;
    let mut c = a.clone();
    c.file_starting_number = 1;
    let id = |c: &PseudoConfig| PseudoStore::new(c).expect("store").id().to_string();
    assert_eq!(id(&a), id(&a.clone()));
    assert_ne!(id(&a), id(&b));
    assert_ne!(id(&a), id(&c));
    assert!(id(&a).starts_with("pseudo:"));
}

#[test]
fn numbers_past_two_to_the_64_are_refused() {
    let mut cfg = default_formats([10, 0, 0, 0], [0; 3]);
    cfg.file_starting_number = u64::MAX - 5;
    assert!(matches!(PseudoStore::new(&cfg), Err(StoreError::Setup(_))));
}

#[tokio::test]
async fn operations_take_at_least_their_minimum_latency() {
    let mut cfg = default_formats([1, 0, 0, 0], [0; 3]);
    cfg.min_latency.stat_file = Duration::from_millis(30);
    cfg.min_latency.list_directory = Duration::from_millis(30);
    let store = PseudoStore::new(&cfg).expect("store");
    let started = Instant::now();
    store.head("file_00000000").await.expect("head");
    assert!(started.elapsed() >= Duration::from_millis(30));
    let started = Instant::now();
    store.list(&ListRequest::delimited("")).await.expect("list");
    assert!(started.elapsed() >= Duration::from_millis(30));
}
