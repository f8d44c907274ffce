//! One `backends[i]` entry of the `msfs_version: 1` format: the keys every backend
//! shares, then the sub-section of its `backend_type` (`S3:`, `AIStore:`, `GCS:`,
//! `RAM:`, `PSEUDO:`). Also the checks and builders the MSC translation reuses, so
//! both formats validate the same way.

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::Ids;
use super::defaults as d;
use super::error::ConfigError;
use super::pseudo::parse_pseudo;
use super::raw;
use super::reader::{Place, WITHOUT_EFFECT};
use super::scalar::{Flag, OptScalar, Real, Scalar, SecretText, Text, Whole};
use super::secret::Secret;
use super::types::{
    AIStoreOptions, AwsProfile, BackendConfig, BackendKind, FlatDirHint, ManifestConfig, RamConfig,
    RetryConfig, S3Config, S3Credentials, S3Flavor,
};

/// The accepted `backend_type` values, spelled as documented.
const BACKEND_TYPES: &str = "S3, AIStore, GCS, PSEUDO, RAM, file";

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

/// Checks one backend entry.
pub(super) fn parse_backend(
    raw: raw::Backend,
    s: &Place<'_>,
    ids: Ids,
    warnings: &mut Vec<String>,
) -> Result<BackendConfig, ConfigError> {
    let dir_name = s.required("dir_name", raw.dir_name)?;
    check_dir_name(s, "dir_name", &dir_name)?;

    let type_text = s.required("backend_type", raw.backend_type)?;
    let ty = BackendType::parse(&type_text).ok_or_else(|| {
        s.invalid(
            "backend_type",
            format!("unknown backend_type {type_text:?}; expected one of {BACKEND_TYPES}"),
        )
    })?;

    let bucket = if ty.needs_bucket() {
        s.required("bucket_container_name", raw.bucket_container_name)?
    } else {
        s.text_or("bucket_container_name", raw.bucket_container_name, "")?
    };
    if ty == BackendType::File {
        check_absolute(s, "bucket_container_name", &bucket)?;
    }
    let prefix = s.text_or("prefix", raw.prefix, "")?;
    check_prefix(s, "prefix", &prefix)?;

    let readonly = raw.readonly.value_or(d::READONLY);
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
    backend.flush_on_close = raw.flush_on_close.value_or(d::FLUSH_ON_CLOSE);
    backend.uid = raw.uid.value_or(ids.uid);
    backend.gid = raw.gid.value_or(ids.gid);
    backend.dir_perm = raw.dir_perm.value_or(backend.dir_perm);
    backend.file_perm = raw.file_perm.value_or(backend.file_perm);
    backend.directory_page_size = raw.directory_page_size.value_or(d::DIRECTORY_PAGE_SIZE);
    backend.trace_level = raw.trace_level.value_or(d::TRACE_LEVEL);
    backend.max_key_bytes = raw.max_key_bytes.value_or(d::MAX_KEY_BYTES);
    if !(1..=d::MAX_KEY_BYTES_LIMIT).contains(&backend.max_key_bytes) {
        return Err(s.invalid(
            "max_key_bytes",
            format!(
                "must be between 1 and {}, got {}",
                d::MAX_KEY_BYTES_LIMIT,
                backend.max_key_bytes
            ),
        ));
    }
    backend.warm = raw
        .warm
        .unwrap_or_default()
        .into_iter()
        .map(|t| t.0)
        .collect();
    for (i, entry) in backend.warm.iter().enumerate() {
        check_warm_entry(s, i, entry)?;
    }
    backend.manifest = parse_manifest(
        s,
        raw.manifest_path,
        raw.manifest_gen_workers,
        raw.flat_dir_confirmation_pages,
        raw.flat_dir_hints
            .unwrap_or_default()
            .into_iter()
            .map(Scalar::get)
            .collect(),
    )?;

    let given = [
        ("S3", raw.s3.is_some()),
        ("AIStore", raw.aistore.is_some()),
        ("GCS", raw.gcs.is_some()),
        ("RAM", raw.ram.is_some()),
        ("PSEUDO", raw.pseudo.is_some()),
    ];
    backend.kind = match ty {
        BackendType::S3 => BackendKind::S3(parse_s3(
            raw.s3.value().unwrap_or_default(),
            &s.child("S3"),
            warnings,
        )?),
        BackendType::AIStore => BackendKind::S3(parse_aistore(
            raw.aistore.value().unwrap_or_default(),
            &s.child("AIStore"),
            warnings,
        )?),
        BackendType::Gcs => BackendKind::S3(parse_gcs(
            raw.gcs.value().unwrap_or_default(),
            &s.child("GCS"),
            warnings,
        )?),
        BackendType::Ram => BackendKind::Ram(parse_ram(
            raw.ram.value().unwrap_or_default(),
            &s.child("RAM"),
        )?),
        BackendType::Pseudo => BackendKind::Pseudo(parse_pseudo(
            raw.pseudo.value().unwrap_or_default(),
            &s.child("PSEUDO"),
        )?),
        BackendType::File => BackendKind::File,
    };
    backend.posix_metadata = raw.posix_metadata.value_or(d::POSIX_METADATA);
    if backend.posix_metadata {
        check_posix_metadata(s, ty, &backend)?;
    }
    for (name, present) in given {
        if present && name != ty.name() {
            warnings.push(s.warning(name, &format!("ignored, backend_type is {}", ty.name())));
        }
    }
    Ok(backend)
}

/// `posix_metadata` needs a store that keeps user metadata with each object, and a namespace
/// that is read from it (a manifest has no columns for it yet).
fn check_posix_metadata(
    s: &Place<'_>,
    ty: BackendType,
    backend: &BackendConfig,
) -> Result<(), ConfigError> {
    if !matches!(
        ty,
        BackendType::S3 | BackendType::AIStore | BackendType::Gcs | BackendType::Ram
    ) {
        return Err(s.invalid(
            "posix_metadata",
            format!(
                "backend_type {} keeps no object metadata; posix_metadata needs S3, AIStore, \
                 GCS or RAM",
                ty.name()
            ),
        ));
    }
    if backend.manifest.path.is_some() {
        return Err(s.invalid(
            "posix_metadata",
            "a manifest mount reads no object's metadata; its modes and owners are the \
             manifest rows' owner columns (msfs generate-manifest --posix-metadata)"
                .to_string(),
        ));
    }
    Ok(())
}

/// Puts keys handed over as values (not read from a file) into the store section of the
/// backend's type: an S3 section takes them all, a GCS section its HMAC pair, and an AIStore
/// backend signs nothing.
pub(super) fn give_keys(raw: &mut raw::Backend, keys: &S3Credentials) {
    let ty = raw
        .backend_type
        .as_ref()
        .and_then(|t| BackendType::parse(&t.0));
    match (ty, keys) {
        (Some(BackendType::S3), S3Credentials::Anonymous) => {
            raw.s3.get_or_insert_default().0.anonymous = Some(Flag(true));
        }
        (
            Some(BackendType::S3),
            S3Credentials::Static {
                access_key_id,
                secret_access_key,
                session_token,
            },
        ) => {
            let s3 = &mut raw.s3.get_or_insert_default().0;
            s3.access_key_id = Some(Text(access_key_id.clone()));
            s3.secret_access_key = Some(SecretText(secret_access_key.clone()));
            s3.session_token = session_token.clone().map(SecretText);
        }
        (
            Some(BackendType::Gcs),
            S3Credentials::Static {
                access_key_id,
                secret_access_key,
                ..
            },
        ) => {
            let gcs = &mut raw.gcs.get_or_insert_default().0;
            gcs.access_key_id = Some(Text(access_key_id.clone()));
            gcs.secret_access_key = Some(SecretText(secret_access_key.clone()));
        }
        _ => {}
    }
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
        posix_metadata: d::POSIX_METADATA,
        uid: ids.uid,
        gid: ids.gid,
        dir_perm,
        file_perm,
        directory_page_size: d::DIRECTORY_PAGE_SIZE,
        trace_level: d::TRACE_LEVEL,
        max_key_bytes: d::MAX_KEY_BYTES,
        warm: Vec::new(),
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
            base_delay: Duration::from_millis(d::RETRY_BASE_DELAY_MS),
            multiplier: d::RETRY_NEXT_DELAY_MULTIPLIER,
            max_delay: Duration::from_millis(d::RETRY_MAX_DELAY_MS),
        }
    }
}

/// A directory name under the mountpoint: one path component, not `.` or `..`.
pub(super) fn check_dir_name(s: &Place<'_>, key: &str, name: &str) -> Result<(), ConfigError> {
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

pub(super) fn check_prefix(s: &Place<'_>, key: &str, prefix: &str) -> Result<(), ConfigError> {
    if prefix.is_empty() || prefix.ends_with('/') {
        Ok(())
    } else {
        Err(s.invalid(
            key,
            format!("must end with \"/\" (got {prefix:?}; did you mean \"{prefix}/\"?)"),
        ))
    }
}

/// A `warm` entry: a path below the backend's root (a directory ends in `/`), never leaving it.
fn check_warm_entry(s: &Place<'_>, i: usize, entry: &str) -> Result<(), ConfigError> {
    let trimmed = entry.strip_suffix('/').unwrap_or(entry);
    let problem = if entry.is_empty() || entry == "/" {
        Some("must name a file or a directory below the backend's root (a directory ends in \"/\")")
    } else if entry.starts_with('/') {
        Some("must be relative to the backend's root (no leading \"/\")")
    } else if trimmed
        .split('/')
        .any(|part| part.is_empty() || part == "." || part == "..")
    {
        Some("must not hold empty, \".\" or \"..\" components")
    } else {
        None
    };
    match problem {
        Some(problem) => Err(s.invalid_at(
            s.key_path(&format!("warm[{i}]")),
            format!("{problem} (got {entry:?})"),
        )),
        None => Ok(()),
    }
}

/// The daemon runs detached from any working directory, so local paths must be absolute.
pub(super) fn check_absolute(s: &Place<'_>, key: &str, path: &str) -> Result<(), ConfigError> {
    if Path::new(path).is_absolute() {
        Ok(())
    } else {
        Err(s.invalid(key, format!("must be an absolute path (got {path:?})")))
    }
}

/// Endpoints need a scheme: the SDKs otherwise fail later with a less helpful error.
pub(super) fn check_url(s: &Place<'_>, key: &str, url: &str) -> Result<(), ConfigError> {
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
    s: &Place<'_>,
    (id_key, id): (&str, String),
    (secret_key, secret): (&str, Secret),
    session_token: Option<Secret>,
) -> Result<Option<S3Credentials>, ConfigError> {
    match (id.is_empty(), secret.expose().is_empty()) {
        (true, true) => Ok(None),
        (false, false) => Ok(Some(S3Credentials::Static {
            access_key_id: id,
            secret_access_key: secret,
            session_token: session_token.filter(|t| !t.expose().is_empty()),
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

/// A secret given for `key`, or `default` (env-expanded) when absent.
pub(super) fn secret_or(
    s: &Place<'_>,
    key: &str,
    given: Option<SecretText>,
    default: &str,
) -> Result<Secret, ConfigError> {
    match given {
        Some(SecretText(secret)) => Ok(secret),
        None => s.expand_default(key, default).map(Secret::new),
    }
}

/// The AWS config-file profile that supplies region and endpoint (`use_config_env`).
pub(super) fn default_config_profile(s: &Place<'_>, key: &str) -> Result<AwsProfile, ConfigError> {
    Ok(AwsProfile {
        config_file: PathBuf::from(s.expand_default(key, d::S3_CONFIG_FILE)?),
        name: s.expand_default(key, d::S3_PROFILE)?,
    })
}

fn parse_manifest(
    s: &Place<'_>,
    path: Option<Text>,
    gen_workers: Option<Whole<usize>>,
    confirmation_pages: Option<Whole<u32>>,
    hints: Vec<raw::FlatDirHint>,
) -> Result<ManifestConfig, ConfigError> {
    let path = s.text_or("manifest_path", path, "")?;
    if !path.is_empty() {
        check_absolute(s, "manifest_path", &path)?;
    }
    let gen_workers = gen_workers.value_or(d::MANIFEST_GEN_WORKERS);
    if gen_workers == 0 {
        return Err(s.invalid("manifest_gen_workers", "must be at least 1"));
    }
    let mut flat_dir_hints = Vec::with_capacity(hints.len());
    for (i, hint) in hints.into_iter().enumerate() {
        flat_dir_hints.push(parse_flat_dir_hint(hint, &s.item("flat_dir_hints", i))?);
    }
    Ok(ManifestConfig {
        path: (!path.is_empty()).then(|| PathBuf::from(path)),
        gen_workers,
        flat_dir_confirmation_pages: confirmation_pages.value_or(d::FLAT_DIR_CONFIRMATION_PAGES),
        flat_dir_hints,
    })
}

fn parse_flat_dir_hint(raw: raw::FlatDirHint, h: &Place<'_>) -> Result<FlatDirHint, ConfigError> {
    let path = h.required("path", raw.path)?;
    if !path.ends_with('/') {
        return Err(h.invalid("path", format!("must end with \"/\" (got {path:?})")));
    }
    let key_prefix_chars = h.text_or(
        "key_prefix_chars",
        raw.key_prefix_chars,
        d::FLAT_DIR_KEY_PREFIX_CHARS,
    )?;
    let distinct: std::collections::BTreeSet<char> = key_prefix_chars.chars().collect();
    if distinct.is_empty() || distinct.len() != key_prefix_chars.chars().count() {
        return Err(h.invalid(
            "key_prefix_chars",
            "must be a non-empty set of distinct characters",
        ));
    }
    let split_depth = raw.split_depth.value_or(d::FLAT_DIR_SPLIT_DEPTH);
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

fn parse_retry(
    s: &Place<'_>,
    base_delay: Option<Whole<u64>>,
    multiplier: Option<Real>,
    max_delay: Option<Whole<u64>>,
) -> Result<RetryConfig, ConfigError> {
    let base_delay = Duration::from_millis(base_delay.value_or(d::RETRY_BASE_DELAY_MS));
    let multiplier = multiplier.value_or(d::RETRY_NEXT_DELAY_MULTIPLIER);
    if multiplier < 1.0 {
        return Err(s.invalid(
            "retry_next_delay_multiplier",
            format!("must be at least 1.0 so delays never shrink (got {multiplier})"),
        ));
    }
    let max_delay = Duration::from_millis(max_delay.value_or(d::RETRY_MAX_DELAY_MS));
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

pub(super) fn parse_s3(
    raw: raw::S3,
    s: &Place<'_>,
    warnings: &mut Vec<String>,
) -> Result<S3Config, ConfigError> {
    refuse_skip_tls(s, raw.skip_tls_certificate_verify)?;
    let use_config_env = raw.use_config_env.value_or(false);
    let use_credentials_env = raw.use_credentials_env.value_or(false);
    let anonymous = raw.anonymous.value_or(false);
    let profile = s.text_or(
        "config_credentials_profile",
        raw.config_credentials_profile,
        d::S3_PROFILE,
    )?;
    // The file paths only count when their `use_*_env` switch is on.
    let config_file = match use_config_env {
        true => Some(PathBuf::from(s.text_or(
            "config_file_path",
            raw.config_file_path,
            d::S3_CONFIG_FILE,
        )?)),
        false => None,
    };
    let credentials_file = match use_credentials_env {
        true => Some(PathBuf::from(s.text_or(
            "credentials_file_path",
            raw.credentials_file_path,
            d::S3_CREDENTIALS_FILE,
        )?)),
        false => None,
    };

    let endpoint = s.text_or("endpoint", raw.endpoint, d::S3_ENDPOINT)?;
    if !endpoint.is_empty() {
        check_url(s, "endpoint", &endpoint)?;
    }
    let mut region = s.text_or("region", raw.region, d::S3_REGION)?;
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

    let explicit_keys: Vec<&str> = [
        ("access_key_id", raw.access_key_id.is_some()),
        ("secret_access_key", raw.secret_access_key.is_some()),
        ("session_token", raw.session_token.is_some()),
    ]
    .into_iter()
    .filter_map(|(key, given)| given.then_some(key))
    .collect();
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
        S3Credentials::Anonymous
    } else if use_credentials_env {
        for k in &explicit_keys {
            warnings.push(s.warning(k, "ignored, use_credentials_env is true"));
        }
        S3Credentials::Files {
            config_file: config_file.clone(),
            credentials_file,
            profile: profile.clone(),
        }
    } else {
        // An env session token only belongs with env keys; paired with keys written
        // in the file it would make every request fail to authenticate.
        let token = match raw.session_token {
            Some(SecretText(t)) => Some(t),
            None if raw.access_key_id.is_none() => {
                Some(secret_or(s, "session_token", None, d::S3_SESSION_TOKEN)?)
            }
            None => None,
        };
        let id = s.text_or("access_key_id", raw.access_key_id, d::S3_ACCESS_KEY_ID)?;
        let secret = secret_or(
            s,
            "secret_access_key",
            raw.secret_access_key,
            d::S3_SECRET_ACCESS_KEY,
        )?;
        match key_pair(
            s,
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

    Ok(S3Config {
        flavor: S3Flavor::Aws,
        endpoint: (!endpoint.is_empty()).then_some(endpoint),
        region,
        credentials,
        config_profile: config_file.map(|config_file| AwsProfile {
            config_file,
            name: profile,
        }),
        virtual_hosted_style: raw.virtual_hosted_style_request.value_or(false),
        retry: parse_retry(
            s,
            raw.retry_base_delay,
            raw.retry_next_delay_multiplier,
            raw.retry_max_delay,
        )?,
        aistore: None,
    })
}

/// `skip_tls_certificate_verify: true` is refused where it is written: msfs verifies every
/// server's certificate (rustls, against the system's trust store), and a mount that accepted
/// the key and verified anyway would fail later, far from the cause.
fn refuse_skip_tls(s: &Place<'_>, given: Option<Flag>) -> Result<(), ConfigError> {
    if given.value_or(false) {
        return Err(s.invalid(
            "skip_tls_certificate_verify",
            "msfs always verifies the server's certificate: add the server's CA certificate to \
             the system trust store, or point SSL_CERT_FILE at a PEM bundle holding it",
        ));
    }
    Ok(())
}

fn parse_aistore(
    raw: raw::AIStore,
    s: &Place<'_>,
    warnings: &mut Vec<String>,
) -> Result<S3Config, ConfigError> {
    refuse_skip_tls(s, raw.skip_tls_certificate_verify)?;
    let endpoint = s.text_or("endpoint", raw.endpoint, d::AIS_ENDPOINT)?;
    if endpoint.is_empty() {
        return Err(s.invalid("endpoint", "required; set it here or in AIS_ENDPOINT"));
    }
    check_url(s, "endpoint", &endpoint)?;
    let authn_token = secret_or(s, "authn_token", raw.authn_token, d::AIS_AUTHN_TOKEN)?;
    let authn_token_file = s.text_or(
        "authn_token_file",
        raw.authn_token_file,
        d::AIS_AUTHN_TOKEN_FILE,
    )?;
    if raw.provider.is_some() {
        let provider = s.text_or("provider", raw.provider, d::AIS_PROVIDER)?;
        if provider.is_empty() {
            return Err(s.invalid(
                "provider",
                "must not be empty (\"ais\" for native AIStore buckets)",
            ));
        }
        warnings.push(s.warning(
            "provider",
            &format!(
                "{WITHOUT_EFFECT}: msfs reaches AIStore through its S3 API, where AIStore finds \
                 the bucket's provider itself"
            ),
        ));
    }
    let timeout = Duration::from_millis(raw.timeout.value_or(d::AIS_TIMEOUT_MS));
    if timeout.is_zero() {
        return Err(s.invalid("timeout", "must be greater than 0"));
    }
    let manifest_gen_backend = s.text_or("manifest_gen_backend", raw.manifest_gen_backend, "")?;
    Ok(S3Config {
        flavor: S3Flavor::AIStore,
        endpoint: Some(endpoint),
        region: d::AIS_REGION.to_string(),
        credentials: S3Credentials::Anonymous,
        config_profile: None,
        virtual_hosted_style: false,
        retry: RetryConfig::default(),
        aistore: Some(AIStoreOptions {
            authn_token: (!authn_token.expose().is_empty()).then_some(authn_token),
            authn_token_file: (!authn_token_file.is_empty())
                .then(|| PathBuf::from(authn_token_file)),
            timeout,
            manifest_gen_backend: (!manifest_gen_backend.is_empty())
                .then_some(manifest_gen_backend),
        }),
    })
}

fn parse_gcs(
    raw: raw::Gcs,
    s: &Place<'_>,
    warnings: &mut Vec<String>,
) -> Result<S3Config, ConfigError> {
    refuse_skip_tls(s, raw.skip_tls_certificate_verify)?;
    if raw.api_key.is_some() {
        warnings.push(s.warning(
            "api_key",
            &format!(
                "{WITHOUT_EFFECT}: msfs reaches GCS through its S3-interoperable XML API, which \
                 authenticates with HMAC keys: set access_key_id and secret_access_key"
            ),
        ));
    }
    let endpoint = s.text_or("endpoint", raw.endpoint, "")?;
    let endpoint = if endpoint.is_empty() {
        d::GCS_ENDPOINT.to_string()
    } else {
        check_url(s, "endpoint", &endpoint)?;
        endpoint
    };
    // HMAC interoperability keys: what an S3 client needs to sign requests to GCS.
    let id = s.text_or("access_key_id", raw.access_key_id, "")?;
    let secret = secret_or(s, "secret_access_key", raw.secret_access_key, "")?;
    let credentials = key_pair(
        s,
        ("access_key_id", id),
        ("secret_access_key", secret),
        None,
    )?
    .unwrap_or(S3Credentials::Anonymous);
    Ok(S3Config {
        flavor: S3Flavor::Gcs,
        endpoint: Some(endpoint),
        region: d::GCS_REGION.to_string(),
        credentials,
        config_profile: None,
        virtual_hosted_style: false,
        retry: parse_retry(
            s,
            raw.retry_base_delay,
            raw.retry_next_delay_multiplier,
            raw.retry_max_delay,
        )?,
        aistore: None,
    })
}

fn parse_ram(raw: raw::Ram, s: &Place<'_>) -> Result<RamConfig, ConfigError> {
    Ok(RamConfig {
        max_list_page_size: positive(
            s,
            "max_list_page_size",
            raw.max_list_page_size,
            d::RAM_MAX_LIST_PAGE_SIZE,
        )?,
        max_total_objects: positive(
            s,
            "max_total_objects",
            raw.max_total_objects,
            d::RAM_MAX_TOTAL_OBJECTS,
        )?,
        max_total_object_space: positive(
            s,
            "max_total_object_space",
            raw.max_total_object_space,
            d::RAM_MAX_TOTAL_OBJECT_SPACE,
        )?,
    })
}

/// A count that 0 would make meaningless.
pub(super) fn positive<T: PartialEq + From<u8>>(
    s: &Place<'_>,
    key: &str,
    given: Option<Whole<T>>,
    default: T,
) -> Result<T, ConfigError> {
    let v = given.value_or(default);
    if v == T::from(0) {
        return Err(s.invalid(key, "must be greater than 0"));
    }
    Ok(v)
}
