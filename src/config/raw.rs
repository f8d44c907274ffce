//! The shape of a config file as written: one struct per section, one field per key, every
//! field optional (an absent key takes its default in the check that follows). serde fills
//! these from the env-expanded tree (see [`super::reader`]); the sibling modules turn them into
//! the typed [`super::types`], checking each value and naming the key of any that is wrong.
//!
//! The CSI plugin builds a [`Backend`] directly from a volume's attributes, so its credentials
//! never pass through a text or JSON tree.

use std::collections::BTreeMap;

use serde::Deserialize;

use super::reader::Section;
use super::scalar::{Flag, Label, Perm, Real, SecretText, Text, Whole};

/// The `msfs_version: 1` format.
#[derive(Debug, Default, Deserialize)]
pub(super) struct V1 {
    /// Read before the format is chosen.
    #[serde(rename = "msfs_version")]
    pub _version: Option<serde_json::Value>,
    pub mountname: Option<Text>,
    pub mountpoint: Option<Text>,
    pub fuse_workers: Option<Whole<usize>>,
    pub uid: Option<Whole<u32>>,
    pub gid: Option<Whole<u32>>,
    pub dir_perm: Option<Perm>,
    pub allow_other: Option<Flag>,
    pub lock_code_in_memory: Option<Flag>,
    pub max_write: Option<Whole<u32>>,
    pub fuse_writeback_cache: Option<Flag>,
    pub fuse_passthrough: Option<Flag>,
    pub fuse_io_uring: Option<Flag>,
    pub fuse_io_uring_poll_us: Option<Whole<u64>>,
    pub entry_attr_ttl: Option<Whole<u64>>,
    pub evictable_inode_ttl: Option<Whole<u64>>,
    pub virtual_dir_ttl: Option<Whole<u64>>,
    pub virtual_file_ttl: Option<Whole<u64>>,
    pub ttl_check_interval: Option<Whole<u64>>,
    pub evictable_inode_limit: Option<Whole<u64>>,
    pub cache_storage: Option<Text>,
    pub cache_backend: Option<Text>,
    pub mapped_cache: Option<Flag>,
    pub cache_line_size: Option<Whole<u64>>,
    pub cache_lines: Option<Whole<u64>>,
    pub cache_ram_lines: Option<Whole<u64>>,
    pub cache_lines_to_prefetch: Option<Whole<u64>>,
    pub cache_dir_path: Option<Text>,
    pub cache_persistent: Option<Flag>,
    pub write_cache_promotion: Option<Flag>,
    pub multipart_upload_threshold_bytes: Option<Whole<u64>>,
    pub write_commit_workers: Option<Whole<usize>>,
    pub write_dirty_limit_bytes: Option<Whole<u64>>,
    pub write_buffer_limit_bytes: Option<Whole<u64>>,
    pub process_memory_limit: Option<Whole<u64>>,
    pub auto_sighup_interval: Option<Whole<u64>>,
    pub fuse_request_stall_warn_secs: Option<Whole<u64>>,
    pub endpoint: Option<Text>,
    pub opentelemetry: Option<Section<OpenTelemetry>>,
    pub backends: Option<Vec<Section<Backend>>>,
    pub shared_cache: Option<Section<SharedCache>>,
}

/// The `shared_cache` section: where the cluster's shared lines live.
#[derive(Debug, Default, Deserialize)]
pub(super) struct SharedCache {
    pub bucket_container_name: Option<Text>,
    pub prefix: Option<Text>,
    #[serde(rename = "S3")]
    pub s3: Option<Section<S3>>,
    pub read_timeout_ms: Option<Whole<u64>>,
    pub fill_workers: Option<Whole<usize>>,
    pub fill_buffer_limit_bytes: Option<Whole<u64>>,
}

/// One `backends[i]` entry; the sub-section of its `backend_type` holds the store's keys.
#[derive(Debug, Default, Deserialize)]
pub(super) struct Backend {
    pub dir_name: Option<Text>,
    pub backend_type: Option<Text>,
    pub bucket_container_name: Option<Text>,
    pub prefix: Option<Text>,
    pub readonly: Option<Flag>,
    pub flush_on_close: Option<Flag>,
    pub posix_metadata: Option<Flag>,
    pub uid: Option<Whole<u32>>,
    pub gid: Option<Whole<u32>>,
    pub dir_perm: Option<Perm>,
    pub file_perm: Option<Perm>,
    pub directory_page_size: Option<Whole<u32>>,
    pub trace_level: Option<Whole<u8>>,
    pub max_key_bytes: Option<Whole<u32>>,
    pub manifest_path: Option<Text>,
    pub manifest_gen_workers: Option<Whole<usize>>,
    pub flat_dir_confirmation_pages: Option<Whole<u32>>,
    pub flat_dir_hints: Option<Vec<Section<FlatDirHint>>>,
    pub warm: Option<Vec<Text>>,
    #[serde(rename = "S3")]
    pub s3: Option<Section<S3>>,
    #[serde(rename = "AIStore")]
    pub aistore: Option<Section<AIStore>>,
    #[serde(rename = "GCS")]
    pub gcs: Option<Section<Gcs>>,
    #[serde(rename = "RAM")]
    pub ram: Option<Section<Ram>>,
    #[serde(rename = "PSEUDO")]
    pub pseudo: Option<Section<Pseudo>>,
}

#[derive(Debug, Default, Deserialize)]
pub(super) struct FlatDirHint {
    pub path: Option<Text>,
    pub key_prefix_chars: Option<Text>,
    pub split_depth: Option<Whole<u32>>,
}

#[derive(Debug, Default, Deserialize)]
pub(super) struct S3 {
    pub use_config_env: Option<Flag>,
    pub use_credentials_env: Option<Flag>,
    pub anonymous: Option<Flag>,
    pub config_credentials_profile: Option<Text>,
    pub config_file_path: Option<Text>,
    pub credentials_file_path: Option<Text>,
    pub endpoint: Option<Text>,
    pub region: Option<Text>,
    pub access_key_id: Option<Text>,
    pub secret_access_key: Option<SecretText>,
    pub session_token: Option<SecretText>,
    pub skip_tls_certificate_verify: Option<Flag>,
    pub virtual_hosted_style_request: Option<Flag>,
    pub retry_base_delay: Option<Whole<u64>>,
    pub retry_next_delay_multiplier: Option<Real>,
    pub retry_max_delay: Option<Whole<u64>>,
}

#[derive(Debug, Default, Deserialize)]
pub(super) struct AIStore {
    pub endpoint: Option<Text>,
    pub skip_tls_certificate_verify: Option<Flag>,
    pub authn_token: Option<SecretText>,
    pub authn_token_file: Option<Text>,
    pub provider: Option<Text>,
    pub timeout: Option<Whole<u64>>,
    pub manifest_gen_backend: Option<Text>,
}

#[derive(Debug, Default, Deserialize)]
pub(super) struct Gcs {
    pub api_key: Option<SecretText>,
    pub endpoint: Option<Text>,
    pub skip_tls_certificate_verify: Option<Flag>,
    pub access_key_id: Option<Text>,
    pub secret_access_key: Option<SecretText>,
    pub retry_base_delay: Option<Whole<u64>>,
    pub retry_next_delay_multiplier: Option<Real>,
    pub retry_max_delay: Option<Whole<u64>>,
}

#[derive(Debug, Default, Deserialize)]
pub(super) struct Ram {
    pub max_list_page_size: Option<Whole<u64>>,
    pub max_total_objects: Option<Whole<u64>>,
    pub max_total_object_space: Option<Whole<u64>>,
}

#[derive(Debug, Default, Deserialize)]
pub(super) struct Pseudo {
    pub dir_name_format: Option<Text>,
    pub file_name_format: Option<Text>,
    pub dir_starting_number: Option<Whole<u64>>,
    pub file_starting_number: Option<Whole<u64>>,
    pub file_size: Option<Whole<u64>>,
    pub files_at_depth_0: Option<Whole<u32>>,
    pub files_at_depth_1: Option<Whole<u32>>,
    pub files_at_depth_2: Option<Whole<u32>>,
    pub files_at_depth_3: Option<Whole<u32>>,
    pub subdirectories_at_depth_0: Option<Whole<u32>>,
    pub subdirectories_at_depth_1: Option<Whole<u32>>,
    pub subdirectories_at_depth_2: Option<Whole<u32>>,
    pub max_list_page_size: Option<Whole<u64>>,
    pub min_latency_delete_file: Option<Whole<u64>>,
    pub min_latency_list_directory: Option<Whole<u64>>,
    pub min_latency_list_objects: Option<Whole<u64>>,
    pub min_latency_read_file: Option<Whole<u64>>,
    pub min_latency_stat_directory: Option<Whole<u64>>,
    pub min_latency_stat_file: Option<Whole<u64>>,
}

/// The MSC telemetry schema shared with the Python client.
#[derive(Debug, Default, Deserialize)]
pub(super) struct OpenTelemetry {
    pub metrics: Option<Section<Metrics>>,
}

#[derive(Debug, Default, Deserialize)]
pub(super) struct Metrics {
    pub attributes: Option<Vec<Section<AttributeProvider>>>,
    pub reader: Option<Section<Reader>>,
    pub exporter: Option<Section<Exporter>>,
}

#[derive(Debug, Default, Deserialize)]
pub(super) struct AttributeProvider {
    #[serde(rename = "type")]
    pub kind: Option<Text>,
    /// Read as [`AttributeOptions`] once the type is one msfs knows.
    pub options: Option<serde_json::Value>,
}

#[derive(Debug, Default, Deserialize)]
pub(super) struct AttributeOptions {
    pub attributes: Option<BTreeMap<String, Label>>,
}

#[derive(Debug, Default, Deserialize)]
pub(super) struct Reader {
    #[serde(rename = "type")]
    pub kind: Option<Text>,
    pub options: Option<Section<ReaderOptions>>,
}

#[derive(Debug, Default, Deserialize)]
pub(super) struct ReaderOptions {
    pub collect_interval_millis: Option<Whole<u64>>,
    pub collect_timeout_millis: Option<Whole<u64>>,
    pub export_interval_millis: Option<Whole<u64>>,
    pub export_timeout_millis: Option<Whole<u64>>,
}

#[derive(Debug, Default, Deserialize)]
pub(super) struct Exporter {
    #[serde(rename = "type")]
    pub kind: Option<Text>,
    /// Read as [`ExporterOptions`] once the type is one msfs knows.
    pub options: Option<serde_json::Value>,
}

#[derive(Debug, Default, Deserialize)]
pub(super) struct ExporterOptions {
    pub endpoint: Option<Text>,
    pub insecure: Option<Flag>,
}

/// The MSC format of the Python Multi-Storage Client.
#[derive(Debug, Default, Deserialize)]
pub(super) struct Msc {
    /// Read before the format is chosen.
    #[serde(rename = "msfs_version")]
    pub _version: Option<serde_json::Value>,
    pub posix: Option<Section<Posix>>,
    pub opentelemetry: Option<Section<OpenTelemetry>>,
    pub profiles: Option<BTreeMap<String, Section<Profile>>>,
}

#[derive(Debug, Default, Deserialize)]
pub(super) struct Posix {
    pub mountname: Option<Text>,
    pub mountpoint: Option<Text>,
    pub allow_other: Option<Flag>,
    pub auto_sighup_interval: Option<Whole<u64>>,
    pub readonly: Option<Flag>,
}

#[derive(Debug, Default, Deserialize)]
pub(super) struct Profile {
    pub storage_provider: Option<Section<Provider>>,
    pub credentials_provider: Option<Section<Provider>>,
    /// Keys of the Python client's schema a mount has no use for, taken as they are
    /// (a profile that holds only these is skipped with its own warning).
    #[serde(rename = "provider_bundle")]
    pub _provider_bundle: Option<serde_json::Value>,
    #[serde(rename = "metadata_provider")]
    pub _metadata_provider: Option<serde_json::Value>,
}

/// A `storage_provider` or `credentials_provider`: its `options` are read once the
/// type is one msfs serves, so the options of other types are not reported key by key.
#[derive(Debug, Default, Deserialize)]
pub(super) struct Provider {
    #[serde(rename = "type")]
    pub kind: Option<Text>,
    pub options: Option<serde_json::Value>,
}

/// The options of an `s3` or `s8k` storage provider.
#[derive(Debug, Default, Deserialize)]
pub(super) struct S3Options {
    pub base_path: Option<Text>,
    pub endpoint_url: Option<Text>,
    pub region_name: Option<Text>,
    pub access_key_id: Option<Text>,
    pub secret_access_key: Option<SecretText>,
    pub session_token: Option<SecretText>,
}

/// The options of a `file` storage provider.
#[derive(Debug, Default, Deserialize)]
pub(super) struct FileOptions {
    pub base_path: Option<Text>,
}

/// The options of an `S3Credentials` credentials provider.
#[derive(Debug, Default, Deserialize)]
pub(super) struct CredentialsOptions {
    pub access_key: Option<Text>,
    pub secret_key: Option<SecretText>,
    pub session_token: Option<SecretText>,
}
