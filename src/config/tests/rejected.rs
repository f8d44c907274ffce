//! Bad configs: each fails with the file and the key path in the message.

use super::*;

#[test]
fn missing_required_key_is_reported_with_its_path() {
    let text = "msfs_version: 1\nbackends:\n  - {dir_name: a, backend_type: RAM}\n  - {backend_type: RAM}\n";
    assert_eq!(
        error("c.yaml", text),
        "c.yaml: backends[1].dir_name: required key is missing"
    );
}

#[test]
fn missing_bucket_is_reported_for_object_stores() {
    let text = "msfs_version: 1\nbackends:\n  - {dir_name: a, backend_type: S3}\n";
    assert_eq!(
        error("c.yaml", text),
        "c.yaml: backends[0].bucket_container_name: required key is missing"
    );
}

#[test]
fn file_backend_root_must_be_absolute() {
    let text = "msfs_version: 1\nbackends:\n  - {dir_name: a, backend_type: file, bucket_container_name: rel/dir}\n";
    assert_eq!(
        error("c.yaml", text),
        "c.yaml: backends[0].bucket_container_name: must be an absolute path (got \"rel/dir\")"
    );
}

#[test]
fn wrong_type_is_reported_with_the_value() {
    assert_eq!(
        error("config.yaml", "msfs_version: 1\ncache_lines: lots\n"),
        "config.yaml: cache_lines: expected a non-negative whole number, found \"lots\""
    );
    assert_eq!(
        error(
            "config.json",
            r#"{"msfs_version": 1, "backends": {"dir_name": "x"}}"#
        ),
        "config.json: backends: expected a list, found a mapping"
    );
}

#[test]
fn unknown_backend_type_lists_the_allowed_values() {
    let text = "msfs_version: 1\nbackends:\n  - {dir_name: a, backend_type: Azure}\n";
    assert_eq!(
        error("c.yaml", text),
        "c.yaml: backends[0].backend_type: unknown backend_type \"Azure\"; expected one of S3, AIStore, GCS, PSEUDO, RAM, file"
    );
}

#[test]
fn prefix_must_end_with_a_slash() {
    let text = "msfs_version: 1\nbackends:\n  - {dir_name: a, backend_type: RAM}\n  - {dir_name: b, backend_type: S3, bucket_container_name: k, prefix: data}\n";
    assert_eq!(
        error("config.yaml", text),
        "config.yaml: backends[1].prefix: must end with \"/\" (got \"data\"; did you mean \"data/\"?)"
    );
}

#[test]
fn duplicate_dir_name_is_rejected() {
    let text = "msfs_version: 1\nbackends:\n  - {dir_name: a, backend_type: RAM}\n  - {dir_name: a, backend_type: RAM}\n";
    assert_eq!(
        error("c.yaml", text),
        "c.yaml: backends[1].dir_name: \"a\" is already used by backends[0]; directory names must be unique"
    );
}

#[test]
fn dot_and_slash_dir_names_are_rejected() {
    for (name, reason) in [
        ("..", "must not be \".\" or \"..\""),
        ("a/b", "must not contain \"/\""),
    ] {
        let text = format!(
            "msfs_version: 1\nbackends:\n  - {{dir_name: \"{name}\", backend_type: RAM}}\n"
        );
        let msg = error("c.yaml", &text);
        assert!(
            msg.starts_with("c.yaml: backends[0].dir_name: ") && msg.contains(reason),
            "{msg}"
        );
    }
}

#[test]
fn duplicate_manifest_path_is_rejected() {
    let text = "msfs_version: 1\nbackends:\n  - {dir_name: a, backend_type: RAM, manifest_path: /m}\n  - {dir_name: b, backend_type: RAM, manifest_path: /m}\n";
    assert_eq!(
        error("c.yaml", text),
        "c.yaml: backends[1].manifest_path: /m is already used by backends[0]; each backend needs its own manifest directory"
    );
}

#[test]
fn bad_perm_is_rejected() {
    let text =
        "msfs_version: 1\nbackends:\n  - {dir_name: a, backend_type: RAM, dir_perm: \"999\"}\n";
    assert_eq!(
        error("c.yaml", text),
        "c.yaml: backends[0].dir_perm: \"999\" is not an octal permission between 000 and 777 (for example \"755\")"
    );
}

#[test]
fn retry_multiplier_below_one_is_rejected() {
    let text = "msfs_version: 1\nbackends:\n  - dir_name: a\n    backend_type: S3\n    bucket_container_name: k\n    S3: {retry_next_delay_multiplier: 0.5}\n";
    assert_eq!(
        error("c.yaml", text),
        "c.yaml: backends[0].S3.retry_next_delay_multiplier: must be at least 1.0 so delays never shrink (got 0.5)"
    );
}

#[test]
fn too_few_cache_lines_are_rejected() {
    assert_eq!(
        error("c.yaml", "msfs_version: 1\ncache_lines: 8\n"),
        "c.yaml: cache_lines: must be at least 16 (got 8)"
    );
}

#[test]
fn evictable_inode_ttl_below_entry_attr_ttl_is_rejected() {
    assert_eq!(
        error(
            "c.yaml",
            "msfs_version: 1\nentry_attr_ttl: 5000\nevictable_inode_ttl: 1000\n"
        ),
        "c.yaml: evictable_inode_ttl: must be at least entry_attr_ttl (5000 ms)"
    );
}

#[test]
fn endpoint_without_scheme_is_rejected() {
    let text = "msfs_version: 1\nbackends:\n  - dir_name: a\n    backend_type: S3\n    bucket_container_name: k\n    S3: {endpoint: \"minio:9000\"}\n";
    assert_eq!(
        error("c.yaml", text),
        "c.yaml: backends[0].S3.endpoint: not a URL (\"minio:9000\"); expected http://host[:port] or https://host[:port]"
    );
}

#[test]
fn manifest_gen_backend_must_name_another_non_aistore_backend() {
    let base = "msfs_version: 1\nbackends:\n  - {dir_name: s3, backend_type: S3, bucket_container_name: k}\n  - {dir_name: ais2, backend_type: AIStore, bucket_container_name: k, AIStore: {endpoint: \"http://a\"}}\n  - dir_name: ais\n    backend_type: AIStore\n    bucket_container_name: k\n    AIStore: {endpoint: \"http://a\", manifest_gen_backend: TARGET}\n";
    let key = "c.yaml: backends[2].AIStore.manifest_gen_backend: ";
    let cases = [
        ("ais", "must name another backend, not this one".to_string()),
        ("nope", "no backend has dir_name \"nope\"".to_string()),
        (
            "ais2",
            "\"ais2\" is itself an AIStore backend; name one that lists the underlying store"
                .to_string(),
        ),
    ];
    for (target, message) in cases {
        assert_eq!(
            error("c.yaml", &base.replace("TARGET", target)),
            format!("{key}{message}")
        );
    }
    let loaded = parse("c.yaml", &base.replace("TARGET", "s3"));
    let ais = s3(&loaded.config.backends[2])
        .aistore
        .as_ref()
        .expect("AIStore options");
    assert_eq!(ais.manifest_gen_backend.as_deref(), Some("s3"));
}

#[test]
fn a_list_where_a_section_belongs_is_rejected_without_quoting_it() {
    // serde's derived structs would take `[a, b]` as the section's first two keys, in order.
    let text = "msfs_version: 1\nbackends:\n  - {dir_name: a, backend_type: S3, bucket_container_name: k, S3: [my-key-id, my-secret]}\n";
    assert_eq!(
        error("c.yaml", text),
        "c.yaml: backends[0].S3: expected a mapping of keys, found a list"
    );
}

#[test]
fn passthrough_needs_per_object_cache_files_and_no_writeback_cache() {
    assert_eq!(
        error("c.yaml", "msfs_version: 1\nfuse_passthrough: true\n"),
        "c.yaml: fuse_passthrough: needs cache_storage: per-inode-file (the kernel reads an \
         object from a file that holds it byte for byte)"
    );
    let both = "msfs_version: 1\nfuse_passthrough: true\nfuse_writeback_cache: true\n\
                cache_storage: per-inode-file\n";
    assert_eq!(
        error("c.yaml", both),
        "c.yaml: fuse_passthrough: cannot be on with fuse_writeback_cache: the kernel offers \
         passthrough only without its writeback cache"
    );
}

#[test]
fn an_io_uring_poll_past_ten_milliseconds_is_refused() {
    assert_eq!(
        error(
            "c.yaml",
            "msfs_version: 1\nfuse_io_uring: true\nfuse_io_uring_poll_us: 10001\n"
        ),
        "c.yaml: fuse_io_uring_poll_us: must be at most 10000: a thread that polls longer only \
         burns a CPU"
    );
}

#[test]
fn a_persistent_cache_needs_one_mapped_file_and_a_directory_of_its_own() {
    assert_eq!(
        error(
            "c.yaml",
            "msfs_version: 1\ncache_persistent: true\ncache_storage: ram\n"
        ),
        "c.yaml: cache_persistent: needs cache_storage: mapped-file or tiered (lines kept \
         across restarts live in one file, tiered's disk tier); cache_storage is ram"
    );
    assert_eq!(
        error("c.yaml", "msfs_version: 1\ncache_persistent: true\n"),
        "c.yaml: cache_persistent: needs cache_dir_path: the lines outlive the process there, \
         and the system temp directory is no place to keep them"
    );
}

#[test]
fn warm_entries_stay_below_the_backend_root() {
    let backend = |warm: &str| {
        format!(
            "msfs_version: 1\nbackends:\n  - {{dir_name: d, backend_type: RAM, warm: {warm}}}\n"
        )
    };
    let parsed = parse("c.yaml", &backend("[train/, labels/all.csv]"));
    assert_eq!(only_backend(&parsed).warm, ["train/", "labels/all.csv"]);
    assert_eq!(
        error("c.yaml", &backend("[ok/, ../etc/]")),
        "c.yaml: backends[0].warm[1]: must not hold empty, \".\" or \"..\" components \
         (got \"../etc/\")"
    );
    assert_eq!(
        error("c.yaml", &backend("[/abs]")),
        "c.yaml: backends[0].warm[0]: must be relative to the backend's root (no leading \
         \"/\") (got \"/abs\")"
    );
}

#[test]
fn a_tiered_cache_needs_a_ram_line_and_may_keep_its_disk_tier() {
    assert_eq!(
        error(
            "c.yaml",
            "msfs_version: 1\ncache_storage: tiered\ncache_ram_lines: 0\n"
        ),
        "c.yaml: cache_ram_lines: must be at least 1 with cache_storage: tiered"
    );
    let parsed = parse(
        "c.yaml",
        "msfs_version: 1\ncache_storage: tiered\ncache_persistent: true\ncache_dir_path: /c\n",
    );
    assert!(parsed.config.cache.persistent);
    assert_eq!(parsed.config.cache.storage, CacheStorage::Tiered);
}

#[test]
fn max_key_bytes_out_of_range_names_the_key() {
    for value in ["0", "65537"] {
        let text = format!(
            "msfs_version: 1\nbackends:\n  - {{dir_name: a, backend_type: RAM, max_key_bytes: {value}}}\n"
        );
        assert_eq!(
            error("c.yaml", &text),
            format!("c.yaml: backends[0].max_key_bytes: must be between 1 and 65536, got {value}")
        );
    }
}

#[test]
fn process_memory_limit_is_taken_and_a_tiny_one_refused() {
    let loaded = parse(
        "c.yaml",
        "msfs_version: 1\nprocess_memory_limit: 536870912\n",
    );
    assert_eq!(loaded.config.process_memory_limit, Some(512 << 20));
    assert!(
        !loaded
            .warnings
            .iter()
            .any(|w| w.contains("process_memory_limit")),
        "{:?}",
        loaded.warnings
    );
    assert_eq!(
        error("c.yaml", "msfs_version: 1\nprocess_memory_limit: 1000000\n"),
        "c.yaml: process_memory_limit: must be 0 (derived from the cgroup or the machine) or at \
         least 67108864 (64 MiB)"
    );
}
