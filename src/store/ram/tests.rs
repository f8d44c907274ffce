//! `RamStore` against a materialized listing (the reference shared with `PseudoStore`'s
//! tests), its ETags, multipart uploads and both bounds. In a file of its own because it is
//! two thirds as long as the store it tests.

use std::collections::BTreeSet;

use super::*;
use crate::store::pseudo::tests::{entries_of, reference_page};

const MIB: u64 = 1 << 20;

fn store(objects: u64, space: u64) -> RamStore {
    RamStore::new(
        "test",
        RamConfig {
            max_list_page_size: 1000,
            max_total_objects: objects,
            max_total_object_space: space,
        },
    )
}

fn is_full(result: Result<impl std::fmt::Debug>) -> bool {
    match result {
        Err(StoreError::Io { source, .. }) => source.kind() == io::ErrorKind::StorageFull,
        other => panic!("expected a full store, got {other:?}"),
    }
}

async fn body(store: &RamStore, key: &str) -> Bytes {
    store.get_range(key, 0..u64::MAX, None).await.expect("get")
}

#[tokio::test]
async fn listings_match_a_materialized_listing_for_every_page_size_and_marker() {
    let keys: BTreeSet<String> = [
        "a",
        "a/",
        "a/b",
        "a/b/",
        "a/b/c",
        "a/b/d",
        "a/c",
        "a.txt",
        "a0",
        "b/x/y/z",
        "b/x/z",
        "b/y",
        "c",
        "c/",
        "dir/f1",
        "dir/f2",
        "dir/sub/g",
        "ü/é",
    ]
    .into_iter()
    .map(String::from)
    .collect();
    let store = store(1000, MIB);
    for key in &keys {
        store.put(key, Bytes::from(key.clone())).await.expect("put");
    }
    let mut prefixes: BTreeSet<String> = BTreeSet::from(["".to_string(), "nope/".into()]);
    for key in &keys {
        for (i, _) in key.char_indices() {
            prefixes.insert(key[..i].to_string());
        }
        prefixes.insert(key.clone());
    }
    let markers: Vec<String> = prefixes.iter().cloned().chain(["zzz".into()]).collect();
    for prefix in &prefixes {
        for delimited in [false, true] {
            let request = ListRequest {
                delimited,
                ..ListRequest::flat(prefix.clone())
            };
            for limit in 1..=keys.len() + 1 {
                let mut request = request.clone().max_keys(Some(limit as u32));
                loop {
                    let page = store.list(&request).await.expect("list");
                    let (want, next) = reference_page(&keys, &request, limit);
                    assert_eq!(entries_of(&page), want, "{request:?}");
                    assert_eq!(page.next, next, "{request:?}");
                    if page.next.is_none() {
                        break;
                    }
                    request.continuation = page.next;
                }
            }
            for marker in &markers {
                let request = request.clone().after(marker.clone());
                for limit in [1, 3, 1000] {
                    let page = store
                        .list(&request.clone().max_keys(Some(limit)))
                        .await
                        .expect("list");
                    let (want, next) = reference_page(&keys, &request, limit as usize);
                    assert_eq!(entries_of(&page), want, "{request:?} {limit}");
                    assert_eq!(page.next, next, "{request:?} {limit}");
                }
            }
        }
    }
    let page = store
        .list(&ListRequest::delimited("a/"))
        .await
        .expect("list");
    assert_eq!(
        page.objects[0].key, "a/",
        "a directory marker lists as an object"
    );
    assert_eq!(page.objects[0].size, 1 + 1);
}

#[tokio::test]
async fn the_configured_page_size_caps_max_keys() {
    let store = RamStore::new(
        "t",
        RamConfig {
            max_list_page_size: 2,
            max_total_objects: 10,
            max_total_object_space: MIB,
        },
    );
    for key in ["a", "b", "c"] {
        store.put(key, Bytes::new()).await.expect("put");
    }
    let page = store
        .list(&ListRequest::flat("").max_keys(Some(10)))
        .await
        .expect("list");
    assert_eq!(page.objects.len(), 2);
    assert_eq!(page.next.as_deref(), Some("b"));
}

#[tokio::test]
async fn every_write_gives_a_new_etag_and_old_etags_read_as_changed() {
    let store = store(10, MIB);
    let first = store
        .put("k", Bytes::from_static(b"same"))
        .await
        .expect("put");
    let second = store
        .put("k", Bytes::from_static(b"same"))
        .await
        .expect("put");
    assert_ne!(first.etag, second.etag);
    assert!(matches!(
        store.get_range("k", 0..4, Some(&first.etag)).await,
        Err(StoreError::Changed { .. })
    ));
    let copied = store.copy("k", "k2").await.expect("copy");
    assert_ne!(copied.etag, second.etag);
    assert_eq!(&body(&store, "k2").await[..], b"same");
    assert_eq!(
        store.head("k").await.expect("head").expect("exists").etag,
        second.etag
    );
    assert_eq!(
        &store
            .get_range("k", 1..3, Some(&second.etag))
            .await
            .expect("get")[..],
        b"am"
    );
    assert!(
        store
            .get_range("k", 10..20, None)
            .await
            .expect("get")
            .is_empty()
    );
    assert!(matches!(
        store.get_range("missing", 0..1, None).await,
        Err(StoreError::NotFound { .. })
    ));
    assert!(matches!(
        store.copy("missing", "x").await,
        Err(StoreError::NotFound { .. })
    ));
    // Another store of the same process never issues the same ETag.
    let other = self::store(10, MIB);
    let put = other
        .put("k", Bytes::from_static(b"same"))
        .await
        .expect("put");
    assert_ne!(put.etag, first.etag);
    assert_ne!(other.id(), store.id());
}

#[tokio::test]
async fn multipart_assembles_uploaded_and_copied_parts_in_order() {
    let store = store(10, 10 * MIB);
    store
        .put("src", Bytes::from_static(b"0123456789"))
        .await
        .expect("put");
    let id = store.create_multipart("out").await.expect("create");
    let p3 = store
        .upload_part("out", &id, 3, Bytes::from_static(b"tail"))
        .await
        .expect("part 3");
    let p2 = store
        .upload_part_copy("out", &id, 2, CopySource::any_version("src", 2..6))
        .await
        .expect("part 2");
    let p1 = store
        .upload_part("out", &id, 1, Bytes::from_static(b"XY"))
        .await
        .expect("part 1");
    let uploads = store.list_uploads("o").await.expect("uploads");
    assert_eq!(uploads.len(), 1);
    assert_eq!(
        (uploads[0].key.as_str(), uploads[0].upload_id.as_str()),
        ("out", &*id)
    );
    assert!(
        store.head("out").await.expect("head").is_none(),
        "invisible until done"
    );
    let wrong = CompletedPart {
        part_number: 1,
        etag: "\"wrong\"".into(),
    };
    assert!(
        store
            .complete_multipart("out", &id, &[wrong])
            .await
            .is_err()
    );
    assert!(
        store
            .complete_multipart("out", &id, &[p2.clone(), p1.clone()])
            .await
            .is_err(),
        "parts out of order"
    );
    let done = store
        .complete_multipart("out", &id, &[p1, p2, p3])
        .await
        .expect("complete");
    assert!(done.etag.ends_with("-3\""), "{}", done.etag);
    assert_eq!(&body(&store, "out").await[..], b"XY2345tail");
    assert!(store.list_uploads("").await.expect("uploads").is_empty());
    assert!(matches!(
        store.upload_part("out", &id, 4, Bytes::new()).await,
        Err(StoreError::Service { status: 404, .. })
    ));
    assert!(
        store
            .upload_part_copy("x", &id, 1, CopySource::any_version("src", 5..11))
            .await
            .is_err(),
        "a range past the source's end"
    );
    let state = store.state();
    assert_eq!((state.used, state.in_parts), (20, 0));
}

#[tokio::test]
async fn the_object_count_bound_refuses_new_keys_but_not_overwrites() {
    let store = store(2, MIB);
    store.put("a", Bytes::from_static(b"1")).await.expect("put");
    store.put("d/", Bytes::new()).await.expect("marker");
    assert!(is_full(store.put("b", Bytes::new()).await));
    assert!(is_full(store.copy("a", "c").await));
    store
        .put("a", Bytes::from_static(b"2"))
        .await
        .expect("overwrite");
    let id = store.create_multipart("e").await.expect("create");
    let part = store
        .upload_part("e", &id, 1, Bytes::from_static(b"p"))
        .await
        .expect("part");
    assert!(is_full(store.complete_multipart("e", &id, &[part]).await));
    store.delete("d/").await.expect("delete");
    store.put("b", Bytes::new()).await.expect("room again");
    assert_eq!(&body(&store, "a").await[..], b"2");
}

#[tokio::test]
async fn the_space_bound_counts_unfinished_parts_and_frees_on_delete_and_abort() {
    let store = store(100, 100);
    store.put("a", Bytes::from(vec![1; 60])).await.expect("put");
    assert!(is_full(store.put("b", Bytes::from(vec![2; 41])).await));
    assert!(
        store.head("b").await.expect("head").is_none(),
        "nothing half-written"
    );
    // Replacing an object only needs room for the difference.
    store
        .put("a", Bytes::from(vec![3; 90]))
        .await
        .expect("grow");
    store
        .put("a", Bytes::from(vec![4; 50]))
        .await
        .expect("shrink");
    let id = store.create_multipart("m").await.expect("create");
    store
        .upload_part("m", &id, 1, Bytes::from(vec![5; 30]))
        .await
        .expect("part");
    assert!(is_full(store.put("c", Bytes::from(vec![6; 21])).await));
    assert!(is_full(
        store
            .upload_part_copy("m", &id, 2, CopySource::any_version("a", 0..21))
            .await
    ));
    // A part uploaded again replaces the earlier one.
    store
        .upload_part("m", &id, 1, Bytes::from(vec![7; 50]))
        .await
        .expect("part again");
    store.abort_multipart("m", &id).await.expect("abort");
    store.abort_multipart("m", &id).await.expect("abort twice");
    store
        .put("c", Bytes::from(vec![6; 50]))
        .await
        .expect("room after abort");
    store.delete("a").await.expect("delete");
    store.delete("a").await.expect("delete a missing object");
    store
        .put("d", Bytes::from(vec![8; 50]))
        .await
        .expect("room after delete");
    let state = store.state();
    assert_eq!(
        (state.used, state.in_parts, state.objects.len()),
        (100, 0, 2)
    );
}

#[tokio::test]
async fn completing_a_large_upload_needs_no_extra_room() {
    let store = store(10, 3 * MIB);
    let id = store.create_multipart("big").await.expect("create");
    let mut parts = Vec::new();
    for n in 1..=3 {
        parts.push(
            store
                .upload_part("big", &id, n, Bytes::from(vec![n as u8; MIB as usize]))
                .await
                .expect("part"),
        );
    }
    store
        .complete_multipart("big", &id, &parts)
        .await
        .expect("complete at the bound");
    let got = body(&store, "big").await;
    assert_eq!(got.len() as u64, 3 * MIB);
    assert_eq!((got[0], got[MIB as usize], got[got.len() - 1]), (1, 2, 3));
    store.delete_many(&["big".into()]).await.expect("delete");
    assert_eq!(store.state().used, 0);
}

#[tokio::test]
async fn a_part_copy_with_if_match_refuses_a_replaced_source() {
    let store = store(10, MIB);
    let first = store
        .put("src", Bytes::from_static(b"0123456789"))
        .await
        .expect("put");
    store
        .put("src", Bytes::from_static(b"abcdefghij"))
        .await
        .expect("replace");
    let id = store.create_multipart("out").await.expect("create");
    let copy = CopySource {
        key: "src",
        range: 0..4,
        if_match: Some(&first.etag),
    };
    let err = store
        .upload_part_copy("out", &id, 1, copy)
        .await
        .expect_err("the source changed");
    assert!(matches!(err, StoreError::Changed { .. }), "{err}");
}
