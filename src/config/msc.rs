//! The MSC format (no `msfs_version`, or 0) shared with the Python Multi-Storage
//! Client: each profile with an S3-compatible or `file` storage provider becomes a
//! backend named after the profile; `posix` carries the mount settings; every
//! other setting keeps its `msfs_version: 1` default.

use super::Ids;
use super::backend::{
    backend_defaults, check_absolute, check_dir_name, check_url, default_config_profile, key_pair,
};
use super::defaults as d;
use super::error::ConfigError;
use super::reader::Section;
use super::telemetry::parse_telemetry;
use super::types::{
    BackendConfig, BackendKind, Config, RetryConfig, S3Config, S3Credentials, S3Flavor,
};
use super::v1::{check_mountname, config_defaults, seconds};

/// MSC keys for the Python client that have no meaning for a mount.
const PYTHON_ONLY_TOP_LEVEL: &[&str] =
    &["cache", "path_mapping", "experimental_features", "include"];
const PYTHON_ONLY_PROFILE: &[&str] = &[
    "caching_enabled",
    "retry",
    "replicas",
    "autocommit",
    "comment",
];

pub(super) fn parse_msc(
    mut root: Section<'_>,
    ids: Ids,
    warnings: &mut Vec<String>,
) -> Result<Config, ConfigError> {
    let mut c = config_defaults(root.source(), ids);
    let mut readonly = d::READONLY;
    if let Some(mut posix) = root.opt_section("posix")? {
        if let Some(name) = posix.opt_str("mountname")? {
            check_mountname(&posix, "mountname", &name)?;
            c.mountname = name;
        }
        if let Some(mountpoint) = posix.opt_str("mountpoint")? {
            c.mountpoint = mountpoint.into();
        }
        c.allow_other = posix.bool_or("allow_other", c.allow_other)?;
        c.auto_sighup_interval =
            seconds(posix.int_or("auto_sighup_interval", d::AUTO_SIGHUP_INTERVAL_SECS)?);
        // The Go version always mounts MSC profiles read-only; writing is opt-in here.
        readonly = posix.bool_or("readonly", d::READONLY)?;
        posix.finish(warnings);
    }
    if let Some(otel) = root.opt_section("opentelemetry")? {
        c.telemetry = parse_telemetry(otel, warnings)?;
    }

    let mut profiles = root.section_or_empty("profiles")?;
    for (name, profile) in profiles.named_sections()? {
        check_dir_name(&profiles, &name, &name)?;
        if let Some(backend) = parse_profile(name, profile, readonly, ids, warnings)? {
            c.backends.push(backend);
        }
    }
    profiles.finish(warnings);
    if c.backends.is_empty() {
        warnings.push(root.warning(
            "profiles",
            "no profile msfs can mount; the mount will be empty",
        ));
    }
    root.legacy(PYTHON_ONLY_TOP_LEVEL, warnings);
    root.finish(warnings);
    Ok(c)
}

/// One profile, or `None` (with a warning) when its storage is not one msfs serves.
fn parse_profile(
    name: String,
    mut p: Section<'_>,
    readonly: bool,
    ids: Ids,
    warnings: &mut Vec<String>,
) -> Result<Option<BackendConfig>, ConfigError> {
    let Some(mut sp) = p.opt_section("storage_provider")? else {
        // Profiles that only hold a provider bundle or metadata are for the Python client.
        warnings.push(format!(
            "{}: {}: no storage_provider, profile skipped",
            p.source().display(),
            p.path()
        ));
        return Ok(None);
    };
    let kind = sp.req_str("type")?;
    let mut opts = sp.section_or_empty("options")?;
    let backend = match kind.as_str() {
        "s3" | "s8k" => {
            let base_path = opts.req_str("base_path")?;
            let (bucket, prefix) = split_base_path(&opts, &base_path)?;
            let s3 = s3_from_profile(&mut p, &mut opts, warnings)?;
            backend_defaults(name, bucket, prefix, readonly, ids, BackendKind::S3(s3))
        }
        "file" => {
            let base_path = opts.req_str("base_path")?;
            check_absolute(&opts, "base_path", &base_path)?;
            if p.has("credentials_provider") {
                p.ignore("credentials_provider");
                warnings.push(p.warning(
                    "credentials_provider",
                    "ignored for a file storage provider",
                ));
            }
            backend_defaults(
                name,
                base_path,
                String::new(),
                readonly,
                ids,
                BackendKind::File,
            )
        }
        other => {
            warnings.push(sp.warning(
                "type",
                &format!("storage provider {other:?} is not supported by msfs (supported: s3, s8k, file); profile skipped"),
            ));
            return Ok(None);
        }
    };
    opts.finish(warnings);
    sp.finish(warnings);
    p.legacy(PYTHON_ONLY_PROFILE, warnings);
    p.finish(warnings);
    Ok(Some(backend))
}

/// `bucket` or `bucket/some/prefix` → (`bucket`, `some/prefix/`).
fn split_base_path(opts: &Section<'_>, base_path: &str) -> Result<(String, String), ConfigError> {
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
    p: &mut Section<'_>,
    opts: &mut Section<'_>,
    warnings: &mut Vec<String>,
) -> Result<S3Config, ConfigError> {
    // Without either key the Go version reads both from the AWS config file profile.
    let from_profile = !opts.has("endpoint_url") && !opts.has("region_name");
    let endpoint = opts.str_or("endpoint_url", d::S3_ENDPOINT)?;
    if !endpoint.is_empty() {
        check_url(opts, "endpoint_url", &endpoint)?;
    }
    let region = match opts.opt_str("region_name")? {
        Some(r) if !r.is_empty() => r,
        _ => opts.expand_default("region_name", d::S3_REGION)?,
    };
    let config_profile = if from_profile {
        Some(default_config_profile(opts, "region_name")?)
    } else {
        None
    };

    let credentials = match p.opt_section("credentials_provider")? {
        Some(mut cp) => {
            let kind = cp.req_str("type")?;
            if kind != "S3Credentials" {
                return Err(cp.invalid(
                    "type",
                    format!(
                        "unsupported credentials provider {kind:?}; msfs supports S3Credentials"
                    ),
                ));
            }
            let mut co = cp.section_or_empty("options")?;
            let id = co.str_or("access_key", "")?;
            let secret = co.str_or("secret_key", "")?;
            let token = co.opt_str("session_token")?;
            let creds = key_pair(&co, ("access_key", id), ("secret_key", secret), token)?;
            co.finish(warnings);
            cp.finish(warnings);
            for key in ["access_key_id", "secret_access_key", "session_token"] {
                if opts.has(key) {
                    opts.ignore(key);
                    warnings.push(opts.warning(key, "ignored, credentials_provider is set"));
                }
            }
            creds
        }
        None => {
            let id = opts.str_or("access_key_id", "")?;
            let secret = opts.str_or("secret_access_key", "")?;
            let token = opts.opt_str("session_token")?;
            key_pair(
                opts,
                ("access_key_id", id),
                ("secret_access_key", secret),
                token,
            )?
        }
    };
    Ok(S3Config {
        flavor: S3Flavor::Aws,
        endpoint: (!endpoint.is_empty()).then_some(endpoint),
        region,
        credentials: credentials.unwrap_or(S3Credentials::DefaultChain),
        config_profile,
        skip_tls_certificate_verify: false,
        virtual_hosted_style: false,
        retry: RetryConfig::default(),
        aistore: None,
        gcs_api_key: None,
    })
}
