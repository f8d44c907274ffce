//! Things that load but are worth telling the operator about.

use super::*;

#[test]
fn unknown_keys_are_warnings_not_errors() {
    let text = "msfs_version: 1\ncache_linez: 5\nbackends:\n  - dir_name: a\n    backend_type: S3\n    bucket_container_name: k\n    prefx: x/\n    S3: {regoin: x}\n";
    let loaded = parse("config.yaml", text);
    assert_eq!(
        loaded.warnings,
        vec![
            "config.yaml: backends[0].S3.regoin: unknown key, ignored",
            "config.yaml: backends[0].prefx: unknown key, ignored",
            "config.yaml: cache_linez: unknown key, ignored",
        ]
    );
}

#[test]
fn keys_of_the_go_implementation_are_accepted_with_a_warning() {
    let text = "msfs_version: 1\npebble_cache_size: 1\nbackends:\n  - {dir_name: a, backend_type: RAM, upload_part_concurrency: 4}\n";
    let loaded = parse("c.yaml", text);
    assert_eq!(
        loaded.warnings,
        vec![
            "c.yaml: backends[0].upload_part_concurrency: accepted for compatibility, without \
             effect in msfs: a tuning knob of the Go implementation's write path; msfs sizes \
             parts by multipart_upload_threshold_bytes and uploads with write_commit_workers",
            "c.yaml: pebble_cache_size: accepted for compatibility, without effect in msfs: a \
             setting of the Go implementation's metadata store and dirty-line accounting, \
             which msfs does not have",
        ]
    );
}

/// Every key msfs reads and does nothing with says so, naming itself and why, each time the
/// file is loaded (`msfs check-config`, a mount, a reload).
#[test]
fn keys_without_effect_are_warned_with_their_reason() {
    let text = "msfs_version: 1\nvirtual_dir_ttl: 2000000\nvirtual_file_ttl: 2000000\n\
        opentelemetry:\n  metrics:\n    reader:\n      options: {collect_timeout_millis: 5000}\n\
        backends:\n\
        \x20 - {dir_name: a, backend_type: AIStore, bucket_container_name: b, \
        AIStore: {endpoint: 'http://ais:51080', provider: gcp}}\n\
        \x20 - {dir_name: g, backend_type: GCS, bucket_container_name: b, GCS: {api_key: k}}\n";
    let loaded = parse("c.yaml", text);
    let mut keys: Vec<&str> = loaded
        .warnings
        .iter()
        .map(|w| {
            assert!(
                w.contains(": accepted for compatibility, without effect in msfs: "),
                "{w}"
            );
            w.split(": ").nth(1).expect("a key path")
        })
        .collect();
    keys.sort();
    assert_eq!(
        keys,
        [
            "backends[0].AIStore.provider",
            "backends[1].GCS.api_key",
            "opentelemetry.metrics.reader.options.collect_timeout_millis",
            "virtual_dir_ttl",
            "virtual_file_ttl",
        ]
    );
}

#[test]
fn keys_left_at_their_defaults_are_not_warned_about() {
    let text = "msfs_version: 1\nbackends:\n  - {dir_name: a, backend_type: AIStore, \
        bucket_container_name: b, AIStore: {endpoint: 'http://ais:51080'}}\n";
    assert!(parse("c.yaml", text).warnings.is_empty());
}

#[test]
fn section_for_another_backend_type_is_a_warning() {
    let text =
        "msfs_version: 1\nbackends:\n  - {dir_name: a, backend_type: RAM, S3: {region: x}}\n";
    let loaded = parse("c.yaml", text);
    assert_eq!(
        loaded.warnings,
        vec!["c.yaml: backends[0].S3: ignored, backend_type is RAM"]
    );
}

#[test]
fn deprecated_cache_keys_map_to_cache_storage_with_a_warning() {
    let cases = [
        ("cache_backend: disk", CacheStorage::PerInodeFile),
        ("cache_backend: memory", CacheStorage::MappedFile),
        (
            "cache_backend: memory\nmapped_cache: false",
            CacheStorage::Ram,
        ),
        ("mapped_cache: false", CacheStorage::Ram),
    ];
    for (keys, storage) in cases {
        let text =
            format!("msfs_version: 1\n{keys}\nbackends: [{{dir_name: r, backend_type: RAM}}]\n");
        let loaded = parse("c.yaml", &text);
        assert_eq!(loaded.config.cache.storage, storage, "{keys}");
        assert!(
            !loaded.warnings.is_empty() && loaded.warnings.iter().all(|w| w.contains("deprecated")),
            "{keys}: {:?}",
            loaded.warnings
        );
    }
}

#[test]
fn yaml_merge_keys_are_applied() {
    let text = "msfs_version: 1\nx-common: &common {backend_type: S3, bucket_container_name: k, readonly: false}\nbackends:\n  - {<<: *common, dir_name: a}\n  - {<<: *common, dir_name: b, prefix: p/}\n";
    let loaded = parse("c.yaml", text);
    assert_eq!(loaded.config.backends.len(), 2);
    assert!(
        loaded
            .config
            .backends
            .iter()
            .all(|b| !b.readonly && b.bucket == "k")
    );
    assert_eq!(
        loaded.warnings,
        vec!["c.yaml: x-common: unknown key, ignored"]
    );
}

#[test]
fn tiered_storage_takes_a_ram_tier_on_top_of_cache_lines() {
    let tiers = |keys: &str| {
        let text = format!(
            "msfs_version: 1\ncache_lines: 64\n{keys}\nbackends: [{{dir_name: r, backend_type: RAM}}]\n"
        );
        let loaded = parse("c.yaml", &text);
        let cache = &loaded.config.cache;
        (cache.storage, cache.lines, cache.ram_lines, loaded.warnings)
    };
    assert_eq!(
        tiers("cache_storage: tiered"),
        (CacheStorage::Tiered, 64, 16, vec![]),
        "a quarter of cache_lines by default"
    );
    assert_eq!(
        tiers("cache_storage: tiered\ncache_ram_lines: 8"),
        (CacheStorage::Tiered, 64, 8, vec![])
    );
    assert_eq!(
        tiers("cache_ram_lines: 8"),
        (
            CacheStorage::MappedFile,
            64,
            0,
            vec![
                "c.yaml: cache_ram_lines: ignored: only cache_storage: tiered has a RAM tier \
                 (cache_storage is mapped-file)"
                    .to_string()
            ]
        )
    );
}
