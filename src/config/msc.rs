//! The MSC format (no `msfs_version`, or 0) shared with the Python Multi-Storage
//! Client: each profile with an S3-compatible or `file` storage provider becomes a
//! backend named after the profile; `posix` carries the mount settings; every
//! other setting keeps its `msfs_version: 1` default.

use serde_json::Value;

use super::Ids;
use super::backend::{
    backend_defaults, check_absolute, check_dir_name, check_url, default_config_profile, key_pair,
};
use super::defaults as d;
use super::error::ConfigError;
use super::raw;
use super::reader::{Place, Section, read};
use super::scalar::{OptScalar, SecretText};
use super::secret::Secret;
use super::telemetry::parse_telemetry;
use super::types::{
    BackendConfig, BackendKind, Config, RetryConfig, S3Config, S3Credentials, S3Flavor,
};
use super::v1::{check_mountname, config_defaults, seconds};

/// Keys of the Python client that have no meaning for a mount.
pub(super) const LEGACY: &[(&str, &str, &[&str])] = &[
    (
        "",
        "a setting of the Python client's own cache and path handling; a mount caches with the \
         msfs_version: 1 cache_* keys",
        &["cache", "path_mapping", "experimental_features", "include"],
    ),
    (
        "profiles.*",
        "a setting of the Python client's object operations, which a mount does not use",
        &[
            "caching_enabled",
            "retry",
            "replicas",
            "autocommit",
            "comment",
        ],
    ),
];

/// Reads and checks an MSC file's tree.
pub(super) fn parse_msc(
    tree: Value,
    s: &Place<'_>,
    ids: Ids,
    warnings: &mut Vec<String>,
) -> Result<Config, ConfigError> {
    let raw: raw::Msc = read(tree, s, LEGACY, warnings)?;
    let mut c = config_defaults(s.source(), ids);
    let mut readonly = d::READONLY;
    if let Some(Section(posix)) = raw.posix {
        if let Some(name) = posix.mountname.value() {
            check_mountname(&s.child("posix"), "mountname", &name)?;
            c.mountname = name;
        }
        if let Some(mountpoint) = posix.mountpoint.value() {
            c.mountpoint = mountpoint.into();
        }
        c.allow_other = posix.allow_other.value_or(c.allow_other);
        c.auto_sighup_interval = seconds(
            posix
                .auto_sighup_interval
                .value_or(d::AUTO_SIGHUP_INTERVAL_SECS),
        );
        // The Go version always mounts MSC profiles read-only; writing is opt-in here.
        readonly = posix.readonly.value_or(d::READONLY);
    }
    if let Some(Section(otel)) = raw.opentelemetry {
        c.telemetry = parse_telemetry(otel, &s.child("opentelemetry"), warnings)?;
    }

    let profiles = s.child("profiles");
    for (name, Section(profile)) in raw.profiles.unwrap_or_default() {
        check_dir_name(&profiles, &name, &name)?;
        let at = profiles.child(&name);
        if let Some(backend) = parse_profile(name, profile, &at, readonly, ids, warnings)? {
            c.backends.push(backend);
        }
    }
    if c.backends.is_empty() {
        warnings.push(s.warning(
            "profiles",
            "no profile msfs can mount; the mount will be empty",
        ));
    }
    Ok(c)
}

/// One profile, or `None` (with a warning) when its storage is not one msfs serves.
fn parse_profile(
    name: String,
    p: raw::Profile,
    at: &Place<'_>,
    readonly: bool,
    ids: Ids,
    warnings: &mut Vec<String>,
) -> Result<Option<BackendConfig>, ConfigError> {
    let Some(Section(sp)) = p.storage_provider else {
        // Profiles that only hold a provider bundle or metadata are for the Python client.
        warnings.push(format!(
            "{}: {}: no storage_provider, profile skipped",
            at.source().display(),
            at.path()
        ));
        return Ok(None);
    };
    let sp_at = at.child("storage_provider");
    let opts_at = sp_at.child("options");
    let options = sp.options.unwrap_or(Value::Null);
    let kind = sp_at.required("type", sp.kind)?;
    let backend = match kind.as_str() {
        "s3" | "s8k" => {
            let mut opts: raw::S3Options = read_options(options, &opts_at, warnings)?;
            let base_path = opts_at.required("base_path", opts.base_path.take())?;
            let (bucket, prefix) = split_base_path(&opts_at, &base_path)?;
            let s3 = s3_from_profile(p.credentials_provider.value(), opts, at, &opts_at, warnings)?;
            backend_defaults(name, bucket, prefix, readonly, ids, BackendKind::S3(s3))
        }
        "file" => {
            let opts: raw::FileOptions = read_options(options, &opts_at, warnings)?;
            let base_path = opts_at.required("base_path", opts.base_path)?;
            check_absolute(&opts_at, "base_path", &base_path)?;
            if p.credentials_provider.is_some() {
                warnings.push(at.warning(
                    "credentials_provider",
                    "ignored for a file storage provider",
                ));
            }
            let kind = BackendKind::File;
            backend_defaults(name, base_path, String::new(), readonly, ids, kind)
        }
        other => {
            warnings.push(sp_at.warning(
                "type",
                &format!("storage provider {other:?} is not supported by msfs (supported: s3, s8k, file); profile skipped"),
            ));
            return Ok(None);
        }
    };
    Ok(Some(backend))
}

/// A provider's `options`; absent ones read as empty.
fn read_options<T: serde::de::DeserializeOwned + Default>(
    options: Value,
    at: &Place<'_>,
    warnings: &mut Vec<String>,
) -> Result<T, ConfigError> {
    match options {
        Value::Null => Ok(T::default()),
        tree => read(tree, at, &[], warnings),
    }
}

/// `bucket` or `bucket/some/prefix` → (`bucket`, `some/prefix/`).
fn split_base_path(opts: &Place<'_>, base_path: &str) -> Result<(String, String), ConfigError> {
    if base_path.contains("://") {
        return Err(opts.invalid(
            "base_path",
            format!("{base_path:?} must be bucket[/prefix], without a URL scheme"),
        ));
    }
    let (bucket, rest) = base_path.split_once('/').unwrap_or((base_path, ""));
    if bucket.is_empty() {
        return Err(opts.invalid(
            "base_path",
            format!("{base_path:?} must start with the bucket name (bucket[/prefix])"),
        ));
    }
    let prefix = if rest.is_empty() || rest.ends_with('/') {
        rest.to_string()
    } else {
        format!("{rest}/")
    };
    Ok((bucket.to_string(), prefix))
}

fn s3_from_profile(
    credentials_provider: Option<raw::Provider>,
    opts: raw::S3Options,
    at: &Place<'_>,
    opts_at: &Place<'_>,
    warnings: &mut Vec<String>,
) -> Result<S3Config, ConfigError> {
    // Without either key the Go version reads both from the AWS config file profile.
    let from_profile = opts.endpoint_url.is_none() && opts.region_name.is_none();
    let endpoint = opts_at.text_or("endpoint_url", opts.endpoint_url, d::S3_ENDPOINT)?;
    if !endpoint.is_empty() {
        check_url(opts_at, "endpoint_url", &endpoint)?;
    }
    let region = match opts.region_name.value() {
        Some(r) if !r.is_empty() => r,
        _ => opts_at.expand_default("region_name", d::S3_REGION)?,
    };
    let config_profile = if from_profile {
        Some(default_config_profile(opts_at, "region_name")?)
    } else {
        None
    };
    let given = |secret: Option<SecretText>| secret.value().unwrap_or_else(|| Secret::new(""));

    let credentials = match credentials_provider {
        Some(cp) => {
            let cp_at = at.child("credentials_provider");
            let kind = cp_at.required("type", cp.kind)?;
            if kind != "S3Credentials" {
                return Err(cp_at.invalid(
                    "type",
                    format!(
                        "unsupported credentials provider {kind:?}; msfs supports S3Credentials"
                    ),
                ));
            }
            let co_at = cp_at.child("options");
            let co: raw::CredentialsOptions =
                read_options(cp.options.unwrap_or(Value::Null), &co_at, warnings)?;
            let id = co.access_key.value().unwrap_or_default();
            let keys = (("access_key", id), ("secret_key", given(co.secret_key)));
            let creds = key_pair(&co_at, keys.0, keys.1, co.session_token.value())?;
            for (key, present) in [
                ("access_key_id", opts.access_key_id.is_some()),
                ("secret_access_key", opts.secret_access_key.is_some()),
                ("session_token", opts.session_token.is_some()),
            ] {
                if present {
                    warnings.push(opts_at.warning(key, "ignored, credentials_provider is set"));
                }
            }
            creds
        }
        None => key_pair(
            opts_at,
            (
                "access_key_id",
                opts.access_key_id.value().unwrap_or_default(),
            ),
            ("secret_access_key", given(opts.secret_access_key)),
            opts.session_token.value(),
        )?,
    };
    Ok(S3Config {
        flavor: S3Flavor::Aws,
        endpoint: (!endpoint.is_empty()).then_some(endpoint),
        region,
        credentials: credentials.unwrap_or(S3Credentials::DefaultChain),
        config_profile,
        virtual_hosted_style: false,
        retry: RetryConfig::default(),
        aistore: None,
    })
}
