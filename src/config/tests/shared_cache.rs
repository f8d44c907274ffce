//! The `shared_cache` section: what it becomes, and each mistake named by key and file.

use super::*;

const SHARED: &str = "msfs_version: 1
shared_cache:
  bucket_container_name: near
  prefix: lines/
  S3:
    endpoint: http://cache.local:3900
    region: here
    access_key_id: AK
    secret_access_key: SK
backends:
  - dir_name: data
    backend_type: S3
    bucket_container_name: far
    S3:
      endpoint: http://origin.example:9000
      region: there
      access_key_id: AK
      secret_access_key: SK
";

#[test]
fn a_shared_cache_section_is_read_with_its_defaults() {
    let loaded = parse("c.yaml", SHARED);
    let shared = loaded.config.shared_cache.expect("shared_cache");
    assert_eq!(shared.bucket, "near");
    assert_eq!(shared.prefix, "lines/");
    assert_eq!(
        shared.s3.endpoint.as_deref(),
        Some("http://cache.local:3900")
    );
    assert_eq!(shared.s3.region, "here");
    assert_eq!(shared.read_timeout, Duration::from_millis(200));
    assert_eq!(shared.fill_workers, 4);
    assert_eq!(shared.fill_buffer_limit_bytes, 64 << 20);
    assert_eq!(shared.s3.retry.base_delay, Duration::ZERO, "never retried");
    assert!(loaded.warnings.is_empty(), "{:?}", loaded.warnings);
}

#[test]
fn without_the_section_there_is_no_shared_cache() {
    let text = SHARED.replace("shared_cache:", "unused_section:");
    let loaded = parse_with("c.yaml", &text, &[]).expect("parses");
    assert_eq!(loaded.config.shared_cache, None);
}

#[test]
fn each_mistake_is_named_by_its_key_and_file() {
    for (from, to, expected) in [
        (
            "  bucket_container_name: near\n",
            "",
            "c.yaml: shared_cache.bucket_container_name: required",
        ),
        (
            "bucket_container_name: near",
            "bucket_container_name: n",
            "shared_cache.bucket_container_name",
        ),
        (
            "prefix: lines/",
            "prefix: lines",
            "c.yaml: shared_cache.prefix: must end with \"/\"",
        ),
        (
            "  prefix: lines/\n",
            "  prefix: lines/\n  read_timeout_ms: 0\n",
            "c.yaml: shared_cache.read_timeout_ms: must be greater than 0",
        ),
        (
            "  prefix: lines/\n",
            "  prefix: lines/\n  read_timeout_ms: 60000\n",
            "c.yaml: shared_cache.read_timeout_ms: must be at most 10000",
        ),
        (
            "  prefix: lines/\n",
            "  prefix: lines/\n  fill_workers: 0\n",
            "c.yaml: shared_cache.fill_workers: must be greater than 0",
        ),
        (
            "  prefix: lines/\n",
            "  prefix: lines/\n  fill_buffer_limit_bytes: 1024\n",
            "c.yaml: shared_cache.fill_buffer_limit_bytes: must be at least cache_line_size",
        ),
        (
            "    region: here\n",
            "    region: here\n    retry_base_delay: 5\n",
            "c.yaml: shared_cache.S3.retry_base_delay: the shared cache never retries",
        ),
        (
            "endpoint: http://cache.local:3900",
            "endpoint: htp://x",
            "c.yaml: shared_cache.S3.endpoint",
        ),
    ] {
        assert!(SHARED.contains(from), "{from}");
        let message = error("c.yaml", &SHARED.replacen(from, to, 1));
        assert!(message.contains(expected), "{message:?} lacks {expected:?}");
    }
}

#[test]
fn shared_lines_inside_a_backend_are_refused() {
    let text = SHARED
        .replace(
            "endpoint: http://cache.local:3900",
            "endpoint: http://origin.example:9000",
        )
        .replace("bucket_container_name: near", "bucket_container_name: far");
    let message = error("c.yaml", &text);
    assert!(
        message.contains("c.yaml: shared_cache.prefix:")
            && message.contains("overlaps backend \"data\""),
        "{message}"
    );
}
