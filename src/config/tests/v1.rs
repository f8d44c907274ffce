//! The `msfs_version: 1` format end to end, and its defaults.

use super::*;

/// A v1 file touching every section, and the exact structure it must produce.
const FULL_V1_YAML: &str = r#"
msfs_version: 1
mountname: data
mountpoint: /mnt/data
fuse_workers: 4
uid: 1000
gid: 1001
dir_perm: "750"
allow_other: false
lock_code_in_memory: false
max_write: 1048576
fuse_writeback_cache: true
fuse_io_uring: true
fuse_io_uring_poll_us: 20
entry_attr_ttl: 5000
evictable_inode_ttl: 60000
virtual_dir_ttl: 70000
virtual_file_ttl: 80000
ttl_check_interval: 100
evictable_inode_limit: 50000
cache_storage: per-inode-file
cache_line_size: 1048576
cache_lines: 64
cache_lines_to_prefetch: 2
cache_dir_path: /var/cache/msfs
write_cache_promotion: true
multipart_upload_threshold_bytes: 8388608
write_commit_workers: 16
write_dirty_limit_bytes: 1073741824
write_buffer_limit_bytes: 67108864
process_memory_limit: 0
auto_sighup_interval: 300
fuse_request_stall_warn_secs: 120
endpoint: http://0.0.0.0:9100
backends:
  - dir_name: train
    backend_type: S3
    bucket_container_name: datasets
    prefix: imagenet/
    readonly: false
    flush_on_close: true
    uid: 2000
    gid: 2001
    file_perm: 640
    directory_page_size: 500
    trace_level: 2
    manifest_path: /var/lib/msfs/train
    manifest_gen_workers: 50
    flat_dir_confirmation_pages: 3
    flat_dir_hints:
      - path: train/
        key_prefix_chars: "0123456789"
        split_depth: 2
    S3:
      endpoint: http://127.0.0.1:9000
      region: eu-west-1
      access_key_id: AKIA1
      secret_access_key: s3cr3t
      skip_tls_certificate_verify: false
      virtual_hosted_style_request: true
      retry_base_delay: 20
      retry_next_delay_multiplier: 1.5
      retry_max_delay: 400
  - dir_name: scratch
    backend_type: RAM
    readonly: false
    RAM:
      max_total_objects: 5
  - dir_name: local
    backend_type: file
    bucket_container_name: /srv/objects
"#;

fn full_v1_expected(source: &str) -> Config {
    let (euid, egid) = ids();
    Config {
        source: PathBuf::from(source),
        mountname: "data".into(),
        mountpoint: "/mnt/data".into(),
        fuse_workers: 4,
        uid: 1000,
        gid: 1001,
        dir_perm: 0o750,
        allow_other: false,
        lock_code_in_memory: false,
        max_write: 1_048_576,
        fuse_writeback_cache: true,
        fuse_passthrough: false,
        fuse_io_uring: true,
        fuse_io_uring_poll: Duration::from_micros(20),
        entry_attr_ttl: Duration::from_millis(5000),
        evictable_inode_ttl: Duration::from_millis(60_000),
        ttl_check_interval: Duration::from_millis(100),
        evictable_inode_limit: 50_000,
        cache: CacheConfig {
            storage: CacheStorage::PerInodeFile,
            line_size: 1_048_576,
            lines: 64,
            ram_lines: 0,
            lines_to_prefetch: 2,
            dir_path: Some("/var/cache/msfs".into()),
            persistent: false,
            write_cache_promotion: true,
        },
        multipart_upload_threshold_bytes: 8_388_608,
        write_commit_workers: 16,
        write_dirty_limit_bytes: 1 << 30,
        write_buffer_limit_bytes: 64 << 20,
        process_memory_limit: None,
        auto_sighup_interval: Some(Duration::from_secs(300)),
        fuse_request_stall_warn: Some(Duration::from_secs(120)),
        metrics_endpoint: Some("http://0.0.0.0:9100".into()),
        telemetry: None,
        backends: vec![
            BackendConfig {
                dir_name: "train".into(),
                bucket: "datasets".into(),
                prefix: "imagenet/".into(),
                readonly: false,
                flush_on_close: true,
                posix_metadata: false,
                uid: 2000,
                gid: 2001,
                dir_perm: 0o777,
                file_perm: 0o640,
                directory_page_size: 500,
                trace_level: 2,
                max_key_bytes: 1024,
                manifest: ManifestConfig {
                    path: Some("/var/lib/msfs/train".into()),
                    gen_workers: 50,
                    flat_dir_confirmation_pages: 3,
                    flat_dir_hints: vec![FlatDirHint {
                        path: "train/".into(),
                        key_prefix_chars: "0123456789".into(),
                        split_depth: 2,
                    }],
                },
                warm: Vec::new(),
                kind: BackendKind::S3(S3Config {
                    flavor: S3Flavor::Aws,
                    endpoint: Some("http://127.0.0.1:9000".into()),
                    region: "eu-west-1".into(),
                    credentials: S3Credentials::Static {
                        access_key_id: "AKIA1".into(),
                        secret_access_key: Secret::new("s3cr3t"),
                        session_token: None,
                    },
                    config_profile: None,
                    virtual_hosted_style: true,
                    retry: RetryConfig {
                        base_delay: Duration::from_millis(20),
                        multiplier: 1.5,
                        max_delay: Duration::from_millis(400),
                    },
                    aistore: None,
                }),
            },
            BackendConfig {
                dir_name: "scratch".into(),
                bucket: String::new(),
                prefix: String::new(),
                readonly: false,
                flush_on_close: false,
                posix_metadata: false,
                uid: euid,
                gid: egid,
                dir_perm: 0o777,
                file_perm: 0o666,
                directory_page_size: 0,
                trace_level: 0,
                max_key_bytes: 1024,
                manifest: ManifestConfig {
                    path: None,
                    gen_workers: 200,
                    flat_dir_confirmation_pages: 5,
                    flat_dir_hints: vec![],
                },
                warm: Vec::new(),
                kind: BackendKind::Ram(RamConfig {
                    max_list_page_size: 1000,
                    max_total_objects: 5,
                    max_total_object_space: 1 << 30,
                }),
            },
            BackendConfig {
                dir_name: "local".into(),
                bucket: "/srv/objects".into(),
                prefix: String::new(),
                readonly: true,
                flush_on_close: false,
                posix_metadata: false,
                uid: euid,
                gid: egid,
                dir_perm: 0o555,
                file_perm: 0o444,
                directory_page_size: 0,
                trace_level: 0,
                max_key_bytes: 1024,
                manifest: ManifestConfig {
                    path: None,
                    gen_workers: 200,
                    flat_dir_confirmation_pages: 5,
                    flat_dir_hints: vec![],
                },
                warm: Vec::new(),
                kind: BackendKind::File,
            },
        ],
        shared_cache: None,
        read_only: false,
        no_exec: false,
    }
}

/// The full file sets the reference's three keys msfs has no use for; nothing else is warned.
fn assert_only_keys_without_effect(loaded: &Loaded) {
    let keys: Vec<&str> = loaded
        .warnings
        .iter()
        .filter(|w| w.contains(": accepted for compatibility, without effect in msfs: "))
        .filter_map(|w| w.split(": ").nth(1))
        .collect();
    assert_eq!(
        keys,
        ["virtual_dir_ttl", "virtual_file_ttl"],
        "{:?}",
        loaded.warnings
    );
    assert_eq!(keys.len(), loaded.warnings.len(), "{:?}", loaded.warnings);
}

#[test]
fn v1_yaml_parses_to_the_expected_config() {
    let loaded = parse("full.yaml", FULL_V1_YAML);
    assert_eq!(loaded.config, full_v1_expected("full.yaml"));
    assert_only_keys_without_effect(&loaded);
}

#[test]
fn v1_json_parses_to_the_same_config_as_yaml() {
    let yaml: serde_yaml_ng::Value =
        serde_yaml_ng::from_str(FULL_V1_YAML).expect("fixture is YAML");
    let json = serde_json::to_string_pretty(&yaml).expect("fixture converts to JSON");
    let loaded = parse("full.json", &json);
    assert_eq!(loaded.config, full_v1_expected("full.json"));
    assert_only_keys_without_effect(&loaded);
}

#[test]
fn v1_defaults_match_the_reference_table() {
    let loaded = parse(
        "c.yaml",
        "msfs_version: 1\nbackends:\n  - {dir_name: b, backend_type: S3, bucket_container_name: k}\n",
    );
    let (euid, egid) = ids();
    let c = &loaded.config;
    assert_eq!(c.mountname, "msfs");
    assert_eq!(c.mountpoint, Path::new("/mnt"));
    assert_eq!(c.fuse_workers, 0);
    assert_eq!((c.uid, c.gid), (euid, egid));
    assert_eq!(c.dir_perm, 0o555);
    assert!(c.allow_other);
    assert_eq!(c.max_write, 131_072);
    assert!(!c.fuse_io_uring);
    assert_eq!(c.fuse_io_uring_poll, Duration::from_micros(50));
    assert_eq!(c.entry_attr_ttl, Duration::from_millis(10_000));
    assert_eq!(c.evictable_inode_ttl, Duration::from_millis(1_000_000));
    assert_eq!(c.ttl_check_interval, Duration::from_millis(250));
    assert_eq!(c.evictable_inode_limit, 262_144);
    assert_eq!(
        c.cache,
        CacheConfig {
            storage: CacheStorage::MappedFile,
            line_size: 10_485_760,
            lines: 128,
            ram_lines: 0,
            lines_to_prefetch: 4,
            dir_path: None,
            persistent: false,
            write_cache_promotion: false,
        }
    );
    assert_eq!(c.multipart_upload_threshold_bytes, 67_108_864);
    assert_eq!(c.write_commit_workers, 8);
    assert_eq!(c.write_dirty_limit_bytes, 4 << 30);
    assert_eq!(c.write_buffer_limit_bytes, 256 << 20);
    assert_eq!(c.process_memory_limit, None);
    assert_eq!(c.auto_sighup_interval, None);
    assert_eq!(c.fuse_request_stall_warn, Some(Duration::from_secs(60)));
    assert_eq!(c.metrics_endpoint, None);
    assert_eq!(c.telemetry, None);

    let b = only_backend(&loaded);
    assert!(b.readonly);
    assert!(!b.flush_on_close);
    assert_eq!(
        (b.uid, b.gid, b.dir_perm, b.file_perm),
        (euid, egid, 0o555, 0o444)
    );
    assert_eq!(
        (b.prefix.as_str(), b.directory_page_size, b.trace_level),
        ("", 0, 0)
    );
    assert_eq!(
        b.manifest,
        ManifestConfig {
            path: None,
            gen_workers: 200,
            flat_dir_confirmation_pages: 5,
            flat_dir_hints: vec![],
        }
    );
    let s = s3(b);
    assert_eq!(s.endpoint, None);
    assert_eq!(s.region, "us-east-1");
    assert_eq!(s.credentials, S3Credentials::DefaultChain);
    assert_eq!(s.config_profile, None);
    assert!(!s.virtual_hosted_style);
    assert_eq!(
        s.retry,
        RetryConfig {
            base_delay: Duration::from_millis(10),
            multiplier: 2.0,
            max_delay: Duration::from_millis(2000),
        }
    );
}

#[test]
fn writable_backend_defaults_to_777_and_666() {
    let loaded = parse(
        "c.yaml",
        "msfs_version: 1\nbackends:\n  - {dir_name: b, backend_type: S3, bucket_container_name: k, readonly: false}\n",
    );
    let b = only_backend(&loaded);
    assert_eq!((b.dir_perm, b.file_perm), (0o777, 0o666));
}

#[test]
fn flat_dir_hint_defaults_apply() {
    let loaded = parse(
        "c.yaml",
        "msfs_version: 1\nbackends:\n  - dir_name: b\n    backend_type: S3\n    bucket_container_name: k\n    flat_dir_hints: [{path: a/}]\n",
    );
    assert_eq!(
        only_backend(&loaded).manifest.flat_dir_hints,
        vec![FlatDirHint {
            path: "a/".into(),
            key_prefix_chars: "0123456789abcdefghijklmnopqrstuvwxyz".into(),
            split_depth: 1,
        }]
    );
}
