//! Configuration: finds the config file, reads either the MSC format shared with
//! the Python Multi-Storage Client or the `msfs_version: 1` format of the Go
//! implementation, and turns it into one typed, validated [`Config`].
//!
//! This is the only module that reads YAML, JSON or the environment for settings.
//! Parsing goes text → JSON tree → env expansion of every string → serde into the
//! file's own shape (`raw.rs`, with the value adapters of `scalar.rs`) keeping key
//! paths (`reader.rs`), so every error reads like
//! `config.yaml: backends[1].prefix: must end with "/"` and unknown keys become
//! warnings instead of silently vanishing → the checks of `v1.rs`, `msc.rs`,
//! `backend.rs`, … that turn it into the typed [`Config`]. Defaults live in
//! `defaults.rs` only.

mod backend;
mod defaults;
mod error;
mod expand;
mod locate;
mod msc;
mod pseudo;
mod raw;
mod reader;
mod scalar;
mod secret;
mod shared_cache;
mod telemetry;
mod types;
mod v1;

#[cfg(test)]
mod fuzz_tests;
#[cfg(test)]
mod tests;

use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde_json::{Map, Value};

pub use error::ConfigError;
pub use locate::locate;
pub use pseudo::{NameConversion, split_name_format};
pub use secret::Secret;
pub use types::{
    AIStoreOptions, AttributeProvider, AttributeSource, AwsProfile, BackendConfig, BackendKind,
    CacheConfig, CacheStorage, Config, FlatDirHint, ManifestConfig, MetricsReaderConfig,
    OtlpExporterConfig, PseudoConfig, PseudoLatencies, RamConfig, RetryConfig, S3Config,
    S3Credentials, S3Flavor, SharedCacheConfig, TelemetryConfig,
};

use expand::expand_tree;
use reader::Place;
use scalar::{Scalar, Whole};

/// A parsed configuration and the non-fatal findings (unknown or deprecated keys,
/// skipped profiles), each `"file: key.path: what"`, for the caller to log.
#[derive(Debug, Clone, PartialEq)]
pub struct Loaded {
    pub config: Config,
    pub warnings: Vec<String>,
}

/// Reads and validates the file at `path` against the real process environment,
/// including the `$MSFS_MOUNTPOINT` override.
pub fn load(path: &Path) -> Result<Loaded, ConfigError> {
    // Check the name first: no point reading a file we cannot interpret.
    Format::of(path)?;
    let bytes = std::fs::read(path).map_err(|source| ConfigError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    let text = String::from_utf8(bytes).map_err(|e| ConfigError::Syntax {
        path: path.to_path_buf(),
        message: format!("not UTF-8 text: {e}"),
    })?;
    parse_str(&text, path, &|name| std::env::var(name).ok())
}

/// Parses `text` as the contents of `source` (whose extension picks YAML or JSON),
/// looking environment variables up through `env`. A non-empty `MSFS_MOUNTPOINT`
/// from `env` overrides the mountpoint, as [`load`] does with the real environment.
pub fn parse_str(
    text: &str,
    source: &Path,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Loaded, ConfigError> {
    let mut map = match Format::of(source)?.parse(text, source)? {
        Value::Object(map) => map,
        // An empty YAML file: no profiles, all defaults.
        Value::Null => Map::new(),
        other => {
            return Err(ConfigError::Invalid {
                path: source.to_path_buf(),
                key: "(top level)".to_string(),
                message: format!(
                    "expected a mapping of keys, found {}",
                    top_level_kind(&other)
                ),
            });
        }
    };
    for (key, value) in map.iter_mut() {
        expand_tree(value, key, env).map_err(|(key, message)| ConfigError::Invalid {
            path: source.to_path_buf(),
            key,
            message,
        })?;
    }

    let ids = Ids::current();
    let mut warnings = Vec::new();
    let root = Place::root(source, env);
    let version = match map.get("msfs_version") {
        None | Some(Value::Null) => 0,
        Some(v) => Whole::<u64>::deserialize(v)
            .map_err(|e| root.invalid("msfs_version", e.to_string()))?
            .get(),
    };
    let tree = Value::Object(map);
    let mut config = match version {
        0 => msc::parse_msc(tree, &root, ids, &mut warnings)?,
        1 => v1::parse_v1(tree, &root, ids, &mut warnings)?,
        n => {
            return Err(root.invalid(
                "msfs_version",
                format!("unsupported version {n}; use 1, or leave it out for the MSC format"),
            ));
        }
    };
    if let Some(mountpoint) = env("MSFS_MOUNTPOINT").filter(|m| !m.is_empty()) {
        config.mountpoint = PathBuf::from(mountpoint);
    }
    Ok(Loaded { config, warnings })
}

/// Backends that another front end (the CSI plugin) describes as `msfs_version: 1`
/// `backends[i]` entries, checked exactly like those of a file. `keys` reach each entry's
/// store section as values, so credentials never pass through a tree or a text. Values are
/// taken literally (no `$VAR` expansion); `env` only fills built-in defaults. Errors name
/// `backends[i].…` keys of `source`.
pub fn parse_backends(
    entries: Vec<Value>,
    keys: &S3Credentials,
    source: &Path,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<(Vec<BackendConfig>, Vec<String>), ConfigError> {
    let root = Place::root(source, env);
    let mut warnings = Vec::new();
    let mut raw = Vec::with_capacity(entries.len());
    for (i, entry) in entries.into_iter().enumerate() {
        let mut backend: raw::Backend =
            reader::read(entry, &root.item("backends", i), &[], &mut warnings)?;
        backend::give_keys(&mut backend, keys);
        raw.push(reader::Section(backend));
    }
    let backends = v1::parse_backends(&root, raw, Ids::current(), &mut warnings)?;
    Ok((backends, warnings))
}

/// The identity files and directories belong to unless the config says otherwise.
#[derive(Debug, Clone, Copy)]
struct Ids {
    uid: u32,
    gid: u32,
}

impl Ids {
    fn current() -> Self {
        // SAFETY: geteuid and getegid take no arguments, touch no memory and cannot fail.
        unsafe {
            Ids {
                uid: libc::geteuid(),
                gid: libc::getegid(),
            }
        }
    }
}

#[derive(Debug, Clone, Copy)]
enum Format {
    Yaml,
    Json,
}

impl Format {
    fn of(path: &Path) -> Result<Self, ConfigError> {
        match path.extension().and_then(|e| e.to_str()) {
            Some("yaml" | "yml") => Ok(Format::Yaml),
            Some("json") => Ok(Format::Json),
            _ => Err(ConfigError::UnsupportedFormat {
                path: path.to_path_buf(),
            }),
        }
    }

    fn parse(self, text: &str, source: &Path) -> Result<Value, ConfigError> {
        let syntax = |message: String| ConfigError::Syntax {
            path: source.to_path_buf(),
            message,
        };
        match self {
            Format::Json => {
                serde_json::from_str(text).map_err(|e| syntax(format!("invalid JSON: {e}")))
            }
            Format::Yaml => {
                let mut yaml: serde_yaml_ng::Value = serde_yaml_ng::from_str(text)
                    .map_err(|e| syntax(format!("invalid YAML: {e}")))?;
                // `<<: *defaults` is common when several backends share settings.
                yaml.apply_merge()
                    .map_err(|e| syntax(format!("invalid YAML merge: {e}")))?;
                serde_json::to_value(yaml).map_err(|e| syntax(format!("unsupported YAML: {e}")))
            }
        }
    }
}

fn top_level_kind(v: &Value) -> &'static str {
    match v {
        Value::Array(_) => "a list",
        Value::String(_) => "a string",
        Value::Number(_) => "a number",
        Value::Bool(_) => "a boolean",
        Value::Null | Value::Object(_) => "nothing",
    }
}
