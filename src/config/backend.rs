//! One `backends[i]` entry of the `msfs_version: 1` format: the keys every backend
//! shares, then the sub-section of its `backend_type` (`S3:`, `AIStore:`, `GCS:`,
//! `RAM:`, `PSEUDO:`). Also the checks and builders the MSC translation reuses, so
//! both formats validate the same way.

use std::path::{Path, PathBuf};

use super::Ids;
use super::defaults as d;
use super::error::ConfigError;
use super::pseudo::parse_pseudo;
use super::reader::Section;
use super::secret::Secret;
use super::types::{
    AIStoreOptions, AwsProfile, BackendConfig, BackendKind, FlatDirHint, ManifestConfig, RamConfig,
    RetryConfig, S3Config, S3Credentials, S3Flavor,
};

/// The accepted `backend_type` values, spelled as documented.
const BACKEND_TYPES: &str = "S3, AIStore, GCS, PSEUDO, RAM, file";

/// Sub-section names, one per type that has one.
const SUB_SECTIONS: [&str; 5] = ["S3", "AIStore", "GCS", "RAM", "PSEUDO"];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum BackendType {
    S3,
    AIStore,
    Gcs,
    Pseudo,
    Ram,
    File,
}

impl BackendType {
    /// Case-insensitive, because `s3` and `ram` are easy to write either way.
    fn parse(text: &str) -> Option<Self> {
        let t = text.trim();
        [
            ("S3", Self::S3),
            ("AIStore", Self::AIStore),
            ("GCS", Self::Gcs),
            ("PSEUDO", Self::Pseudo),
            ("RAM", Self::Ram),
            ("file", Self::File),
        ]
        .into_iter()
        .find(|(name, _)| name.eq_ignore_ascii_case(t))
        .map(|(_, ty)| ty)
    }

    fn name(self) -> &'static str {
        match self {
            Self::S3 => "S3",
            Self::AIStore => "AIStore",
            Self::Gcs => "GCS",
            Self::Pseudo => "PSEUDO",
            Self::Ram => "RAM",
            Self::File => "file",
        }
    }

    fn needs_bucket(self) -> bool {
        matches!(self, Self::S3 | Self::AIStore | Self::Gcs | Self::File)
    }

    /// The write path exists only for these stores; the others are read-only by nature.
    fn writable(self) -> bool {
        matches!(self, Self::S3 | Self::Ram | Self::File)
    }
}

/// Reads one backend entry.
pub(super) fn parse_backend(
    s: &mut Section<'_>,
    ids: Ids,
    warnings: &mut Vec<String>,
) -> Result<BackendConfig, ConfigError> {
    let dir_name = s.req_str("dir_name")?;
    check_dir_name(s, "dir_name", &dir_name)?;

    let type_text = s.req_str("backend_type")?;
    let ty = BackendType::parse(&type_text).ok_or_else(|| {
        s.invalid(
            "backend_type",
            format!("unknown backend_type {type_text:?}; expected one of {BACKEND_TYPES}"),
        )
    })?;

    let bucket = if ty.needs_bucket() {
        s.req_str("bucket_container_name")?
    } else {
        s.str_or("bucket_container_name", "")?
    };
    if ty == BackendType::File {
        check_absolute(s, "bucket_container_name", &bucket)?;
    }
    let prefix = s.str_or("prefix", "")?;
    check_prefix(s, "prefix", &prefix)?;

    let readonly = s.bool_or("readonly", d::READONLY)?;
    if !readonly && !ty.writable() {
        return Err(s.invalid(
            "readonly",
            format!(
                "backend_type {} is read-only; writes are supported for S3, RAM and file backends",
                ty.name()
            ),
        ));
    }
    let mut backend = backend_defaults(dir_name, bucket, prefix, readonly, ids, BackendKind::File);
    backend.flush_on_close = s.bool_or("flush_on_close", d::FLUSH_ON_CLOSE)?;
    backend.uid = s.int_or("uid", ids.uid)?;
    backend.gid = s.int_or("gid", ids.gid)?;
    backend.dir_perm = s.perm_or("dir_perm", backend.dir_perm)?;
    backend.file_perm = s.perm_or("file_perm", backend.file_perm)?;
    backend.directory_page_size = s.int_or("directory_page_size", d::DIRECTORY_PAGE_SIZE)?;
    backend.trace_level = s.int_or("trace_level", d::TRACE_LEVEL)?;
    backend.manifest = parse_manifest(s, warnings)?;

    backend.kind = match ty {
        BackendType::S3 => BackendKind::S3(parse_s3(s.section_or_empty("S3")?, warnings)?),
        BackendType::AIStore => {
            BackendKind::S3(parse_aistore(s.section_or_empty("AIStore")?, warnings)?)
        }
        BackendType::Gcs => BackendKind::S3(parse_gcs(s.section_or_empty("GCS")?, warnings)?),
        BackendType::Ram => BackendKind::Ram(parse_ram(s.section_or_empty("RAM")?, warnings)?),
        BackendType::Pseudo => {
            BackendKind::Pseudo(parse_pseudo(s.section_or_empty("PSEUDO")?, warnings)?)
        }
        BackendType::File => BackendKind::File,
    };
    for name in SUB_SECTIONS {
        if name != ty.name() && s.has(name) {
            s.ignore(name);
            warnings.push(s.warning(name, &format!("ignored, backend_type is {}", ty.name())));
        }
    }
    // Tuning knobs of the Go write path, which works differently here.
    s.legacy(
        &[
            "multipart_cache_line_threshold",
            "upload_part_cache_lines",
            "upload_part_concurrency",
        ],
        warnings,
    );
    Ok(backend)
}

/// A backend with every optional key at its default; perms follow `readonly`.
pub(super) fn backend_defaults(
    dir_name: String,
    bucket: String,
    prefix: String,
    readonly: bool,
    ids: Ids,
    kind: BackendKind,
) -> BackendConfig {
    let (dir_perm, file_perm) = if readonly {
        (d::DIR_PERM_READONLY, d::FILE_PERM_READONLY)
    } else {
        (d::DIR_PERM_WRITABLE, d::FILE_PERM_WRITABLE)
    };
    BackendConfig {
        dir_name,
        bucket,
        prefix,
        readonly,
        flush_on_close: d::FLUSH_ON_CLOSE,
        uid: ids.uid,
        gid: ids.gid,
        dir_perm,
        file_perm,
        directory_page_size: d::DIRECTORY_PAGE_SIZE,
        trace_level: d::TRACE_LEVEL,
        manifest: ManifestConfig {
            path: None,
            gen_workers: d::MANIFEST_GEN_WORKERS,
            flat_dir_confirmation_pages: d::FLAT_DIR_CONFIRMATION_PAGES,
            flat_dir_hints: Vec::new(),
        },
        kind,
    }
}

impl Default for RetryConfig {
    fn default() -> Self {
        RetryConfig {
            base_delay: std::time::Duration::from_millis(d::RETRY_BASE_DELAY_MS),
            multiplier: d::RETRY_NEXT_DELAY_MULTIPLIER,
            max_delay: std::time::Duration::from_millis(d::RETRY_MAX_DELAY_MS),
        }
    }
}

/// A directory name under the mountpoint: one path component, not `.` or `..`.
pub(super) fn check_dir_name(s: &Section<'_>, key: &str, name: &str) -> Result<(), ConfigError> {
    let problem = if name.is_empty() {
        Some("must not be empty")
    } else if name == "." || name == ".." {
        Some("must not be \".\" or \"..\"")
    } else if name.contains('/') {
        Some("must not contain \"/\"; it is a single directory name")
    } else if name.contains('\0') {
        Some("must not contain a NUL character")
    } else {
        None
    };
    match problem {
        Some(p) => Err(s.invalid(key, format!("{name:?} {p}"))),
        None => Ok(()),
    }
}

pub(super) fn check_prefix(s: &Section<'_>, key: &str, prefix: &str) -> Result<(), ConfigError> {
    if prefix.is_empty() || prefix.ends_with('/') {
        Ok(())
    } else {
        Err(s.invalid(
            key,
            format!("must end with \"/\" (got {prefix:?}; did you mean \"{prefix}/\"?)"),
        ))
    }
}

/// The daemon runs detached from any working directory, so local paths must be absolute.
pub(super) fn check_absolute(s: &Section<'_>, key: &str, path: &str) -> Result<(), ConfigError> {
    if Path::new(path).is_absolute() {
        Ok(())
    } else {
        Err(s.invalid(key, format!("must be an absolute path (got {path:?})")))
    }
}

/// Endpoints need a scheme: the SDKs otherwise fail later with a less helpful error.
pub(super) fn check_url(s: &Section<'_>, key: &str, url: &str) -> Result<(), ConfigError> {
    let rest = url
        .strip_prefix("http://")
        .or_else(|| url.strip_prefix("https://"));
    match rest {
        Some(host)
            if !host.is_empty()
                && !host.starts_with('/')
                && !host.contains(char::is_whitespace) =>
        {
            Ok(())
        }
        _ => Err(s.invalid(
            key,
            format!("not a URL ({url:?}); expected http://host[:port] or https://host[:port]"),
        )),
    }
}

/// Keys given as a pair: both set means static credentials, neither means "not
/// configured here", one alone is a mistake worth stopping for.
pub(super) fn key_pair(
    s: &Section<'_>,
    (id_key, id): (&str, String),
    (secret_key, secret): (&str, String),
    session_token: Option<String>,
) -> Result<Option<S3Credentials>, ConfigError> {
    match (id.is_empty(), secret.is_empty()) {
        (true, true) => Ok(None),
        (false, false) => Ok(Some(S3Credentials::Static {
            access_key_id: id,
            secret_access_key: Secret::new(secret),
            session_token: session_token.filter(|t| !t.is_empty()).map(Secret::new),
        })),
        (false, true) => Err(s.invalid(
            secret_key,
            format!("missing or empty while {id_key} is set; give both or neither"),
        )),
        (true, false) => Err(s.invalid(
            id_key,
            format!("missing or empty while {secret_key} is set; give both or neither"),
        )),
    }
}

/// The AWS config-file profile that supplies region and endpoint (`use_config_env`).
pub(super) fn default_config_profile(
    s: &Section<'_>,
    key: &str,
) -> Result<AwsProfile, ConfigError> {
    Ok(AwsProfile {
        config_file: PathBuf::from(s.expand_default(key, d::S3_CONFIG_FILE)?),
        name: s.expand_default(key, d::S3_PROFILE)?,
    })
}

fn parse_manifest(
    s: &mut Section<'_>,
    warnings: &mut Vec<String>,
) -> Result<ManifestConfig, ConfigError> {
    let path = s.str_or("manifest_path", "")?;
    if !path.is_empty() {
        check_absolute(s, "manifest_path", &path)?;
    }
    let gen_workers = s.int_or("manifest_gen_workers", d::MANIFEST_GEN_WORKERS)?;
    if gen_workers == 0 {
        return Err(s.invalid("manifest_gen_workers", "must be at least 1"));
    }
    let flat_dir_confirmation_pages = s.int_or(
        "flat_dir_confirmation_pages",
        d::FLAT_DIR_CONFIRMATION_PAGES,
    )?;
    let mut flat_dir_hints = Vec::new();
    for (path, value) in s.opt_list("flat_dir_hints")?.unwrap_or_default() {
        let mut h = s.item(path, value)?;
        flat_dir_hints.push(parse_flat_dir_hint(&mut h)?);
        h.finish(warnings);
    }
    Ok(ManifestConfig {
        path: (!path.is_empty()).then(|| PathBuf::from(path)),
        gen_workers,
        flat_dir_confirmation_pages,
        flat_dir_hints,
    })
}

fn parse_flat_dir_hint(h: &mut Section<'_>) -> Result<FlatDirHint, ConfigError> {
    let path = h.req_str("path")?;
    if !path.ends_with('/') {
        return Err(h.invalid("path", format!("must end with \"/\" (got {path:?})")));
    }
    let key_prefix_chars = h.str_or("key_prefix_chars", d::FLAT_DIR_KEY_PREFIX_CHARS)?;
    let distinct: std::collections::BTreeSet<char> = key_prefix_chars.chars().collect();
    if distinct.is_empty() || distinct.len() != key_prefix_chars.chars().count() {
        return Err(h.invalid(
            "key_prefix_chars",
            "must be a non-empty set of distinct characters",
        ));
    }
    let split_depth = h.int_or("split_depth", d::FLAT_DIR_SPLIT_DEPTH)?;
    let fanout = (distinct.len() as u64).checked_pow(split_depth);
    if split_depth == 0 || fanout.is_none_or(|f| f > d::MAX_FLAT_DIR_FANOUT) {
        return Err(h.invalid(
            "split_depth",
            format!(
                "must be at least 1, and {} characters to the power {split_depth} must not exceed {} listers",
                distinct.len(),
                d::MAX_FLAT_DIR_FANOUT
            ),
        ));
    }
    Ok(FlatDirHint {
        path,
        key_prefix_chars,
        split_depth,
    })
}

fn parse_retry(s: &mut Section<'_>) -> Result<RetryConfig, ConfigError> {
    let base_delay = s.ms_or("retry_base_delay", d::RETRY_BASE_DELAY_MS)?;
    let multiplier = s
        .opt_f64("retry_next_delay_multiplier")?
        .unwrap_or(d::RETRY_NEXT_DELAY_MULTIPLIER);
    if multiplier < 1.0 {
        return Err(s.invalid(
            "retry_next_delay_multiplier",
            format!("must be at least 1.0 so delays never shrink (got {multiplier})"),
        ));
    }
    let max_delay = s.ms_or("retry_max_delay", d::RETRY_MAX_DELAY_MS)?;
    if !base_delay.is_zero() && max_delay < base_delay {
        return Err(s.invalid(
            "retry_max_delay",
            "must be at least retry_base_delay (set retry_base_delay: 0 to disable retries)",
        ));
    }
    Ok(RetryConfig {
        base_delay,
        multiplier,
        max_delay,
    })
}

fn parse_s3(mut s: Section<'_>, warnings: &mut Vec<String>) -> Result<S3Config, ConfigError> {
    let use_config_env = s.bool_or("use_config_env", false)?;
    let use_credentials_env = s.bool_or("use_credentials_env", false)?;
    let anonymous = s.bool_or("anonymous", false)?;
    let profile = s.str_or("config_credentials_profile", d::S3_PROFILE)?;
    let config_file = if use_config_env {
        Some(PathBuf::from(
            s.str_or("config_file_path", d::S3_CONFIG_FILE)?,
        ))
    } else {
        s.ignore("config_file_path");
        None
    };
    let credentials_file = if use_credentials_env {
        Some(PathBuf::from(
            s.str_or("credentials_file_path", d::S3_CREDENTIALS_FILE)?,
        ))
    } else {
        s.ignore("credentials_file_path");
        None
    };

    let endpoint = s.str_or("endpoint", d::S3_ENDPOINT)?;
    if !endpoint.is_empty() {
        check_url(&s, "endpoint", &endpoint)?;
    }
    let mut region = s.str_or("region", d::S3_REGION)?;
    if region.is_empty() {
        if !use_config_env {
            return Err(s.invalid(
                "region",
                "must not be empty (is the environment variable set?)",
            ));
        }
        // The config-file profile is expected to name the region; this only backs it up.
        region = d::FALLBACK_REGION.to_string();
    }

    let explicit_keys = ["access_key_id", "secret_access_key", "session_token"]
        .into_iter()
        .filter(|k| s.has(k))
        .collect::<Vec<_>>();
    let credentials = if anonymous {
        if let Some(k) = explicit_keys.first() {
            return Err(s.invalid(k, "cannot be combined with anonymous: true"));
        }
        if use_credentials_env {
            return Err(s.invalid(
                "use_credentials_env",
                "cannot be combined with anonymous: true",
            ));
        }
        for k in ["access_key_id", "secret_access_key", "session_token"] {
            s.ignore(k);
        }
        S3Credentials::Anonymous
    } else if use_credentials_env {
        for k in &explicit_keys {
            s.ignore(k);
            warnings.push(s.warning(k, "ignored, use_credentials_env is true"));
        }
        S3Credentials::Files {
            config_file: config_file.clone(),
            credentials_file,
            profile: profile.clone(),
        }
    } else {
        let id = s.str_or("access_key_id", d::S3_ACCESS_KEY_ID)?;
        let secret = s.str_or("secret_access_key", d::S3_SECRET_ACCESS_KEY)?;
        // An env session token only belongs with env keys; paired with keys written
        // in the file it would make every request fail to authenticate.
        let token = match s.opt_str("session_token")? {
            Some(t) => Some(t),
            None if !s.has("access_key_id") => {
                Some(s.expand_default("session_token", d::S3_SESSION_TOKEN)?)
            }
            None => None,
        };
        match key_pair(
            &s,
            ("access_key_id", id),
            ("secret_access_key", secret),
            token,
        )? {
            Some(static_keys) => static_keys,
            None if use_config_env => S3Credentials::Files {
                config_file: config_file.clone(),
                credentials_file: None,
                profile: profile.clone(),
            },
            None => S3Credentials::DefaultChain,
        }
    };

    let skip_tls_certificate_verify = s.bool_or("skip_tls_certificate_verify", false)?;
    let virtual_hosted_style = s.bool_or("virtual_hosted_style_request", false)?;
    let retry = parse_retry(&mut s)?;
    s.legacy(&["unsigned_payload"], warnings);
    let config = S3Config {
        flavor: S3Flavor::Aws,
        endpoint: (!endpoint.is_empty()).then_some(endpoint),
        region,
        credentials,
        config_profile: config_file.map(|config_file| AwsProfile {
            config_file,
            name: profile,
        }),
        skip_tls_certificate_verify,
        virtual_hosted_style,
        retry,
        aistore: None,
        gcs_api_key: None,
    };
    s.finish(warnings);
    Ok(config)
}

fn parse_aistore(mut s: Section<'_>, warnings: &mut Vec<String>) -> Result<S3Config, ConfigError> {
    let endpoint = s.str_or("endpoint", d::AIS_ENDPOINT)?;
    if endpoint.is_empty() {
        return Err(s.invalid("endpoint", "required; set it here or in AIS_ENDPOINT"));
    }
    check_url(&s, "endpoint", &endpoint)?;
    let skip_tls_certificate_verify = s.bool_or("skip_tls_certificate_verify", false)?;
    let authn_token = s.str_or("authn_token", d::AIS_AUTHN_TOKEN)?;
    let authn_token_file = s.str_or("authn_token_file", d::AIS_AUTHN_TOKEN_FILE)?;
    let provider = s.str_or("provider", d::AIS_PROVIDER)?;
    if provider.is_empty() {
        return Err(s.invalid(
            "provider",
            "must not be empty (\"ais\" for native AIStore buckets)",
        ));
    }
    let timeout = s.ms_or("timeout", d::AIS_TIMEOUT_MS)?;
    if timeout.is_zero() {
        return Err(s.invalid("timeout", "must be greater than 0"));
    }
    let manifest_gen_backend = s.str_or("manifest_gen_backend", "")?;
    let config = S3Config {
        flavor: S3Flavor::AIStore,
        endpoint: Some(endpoint),
        region: d::AIS_REGION.to_string(),
        credentials: S3Credentials::Anonymous,
        config_profile: None,
        skip_tls_certificate_verify,
        virtual_hosted_style: false,
        retry: RetryConfig::default(),
        aistore: Some(AIStoreOptions {
            authn_token: (!authn_token.is_empty()).then(|| Secret::new(authn_token)),
            authn_token_file: (!authn_token_file.is_empty())
                .then(|| PathBuf::from(authn_token_file)),
            provider,
            timeout,
            manifest_gen_backend: (!manifest_gen_backend.is_empty())
                .then_some(manifest_gen_backend),
        }),
        gcs_api_key: None,
    };
    s.finish(warnings);
    Ok(config)
}

fn parse_gcs(mut s: Section<'_>, warnings: &mut Vec<String>) -> Result<S3Config, ConfigError> {
    let api_key = s.str_or("api_key", "")?;
    let endpoint = s.str_or("endpoint", "")?;
    let endpoint = if endpoint.is_empty() {
        d::GCS_ENDPOINT.to_string()
    } else {
        check_url(&s, "endpoint", &endpoint)?;
        endpoint
    };
    let skip_tls_certificate_verify = s.bool_or("skip_tls_certificate_verify", false)?;
    // HMAC interoperability keys: what an S3 client needs to sign requests to GCS.
    let id = s.str_or("access_key_id", "")?;
    let secret = s.str_or("secret_access_key", "")?;
    let credentials = key_pair(
        &s,
        ("access_key_id", id),
        ("secret_access_key", secret),
        None,
    )?
    .unwrap_or(S3Credentials::Anonymous);
    let retry = parse_retry(&mut s)?;
    let config = S3Config {
        flavor: S3Flavor::Gcs,
        endpoint: Some(endpoint),
        region: d::GCS_REGION.to_string(),
        credentials,
        config_profile: None,
        skip_tls_certificate_verify,
        virtual_hosted_style: false,
        retry,
        aistore: None,
        gcs_api_key: (!api_key.is_empty()).then(|| Secret::new(api_key)),
    };
    s.finish(warnings);
    Ok(config)
}

fn parse_ram(mut s: Section<'_>, warnings: &mut Vec<String>) -> Result<RamConfig, ConfigError> {
    let config = RamConfig {
        max_list_page_size: positive(&mut s, "max_list_page_size", d::RAM_MAX_LIST_PAGE_SIZE)?,
        max_total_objects: positive(&mut s, "max_total_objects", d::RAM_MAX_TOTAL_OBJECTS)?,
        max_total_object_space: positive(
            &mut s,
            "max_total_object_space",
            d::RAM_MAX_TOTAL_OBJECT_SPACE,
        )?,
    };
    s.finish(warnings);
    Ok(config)
}

fn positive(s: &mut Section<'_>, key: &str, default: u64) -> Result<u64, ConfigError> {
    let v = s.int_or(key, default)?;
    if v == 0 {
        return Err(s.invalid(key, "must be greater than 0"));
    }
    Ok(v)
}
