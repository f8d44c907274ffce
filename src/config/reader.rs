//! Reads the parsed (and env-expanded) tree into the raw structs of [`super::raw`] with serde,
//! keeping the key path of every error (`serde_path_to_error`) and of every key no struct has
//! a field for (`serde_ignored`), so every message reads like
//! `config.yaml: backends[1].prefix: must end with "/"` and a typo is a warning instead of
//! silently vanishing. [`Place`] addresses the checks that run on the raw structs afterwards.

use std::fmt;
use std::marker::PhantomData;
use std::path::Path;

use serde::de::value::MapAccessDeserializer;
use serde::de::{Deserialize, DeserializeOwned, Deserializer, MapAccess, Visitor};
use serde_json::Value;

use super::error::ConfigError;
use super::expand::{Env, expand};
use super::scalar::{Scalar, Text};

/// `parent.key`, or just `key` at the top level.
pub(super) fn child_path(parent: &str, key: &str) -> String {
    if parent.is_empty() {
        key.to_string()
    } else {
        format!("{parent}.{key}")
    }
}

/// `parent[i]`.
pub(super) fn index_path(parent: &str, i: usize) -> String {
    format!("{parent}[{i}]")
}

/// Keys that other implementations read and msfs does not, by the section they sit in
/// (`backends[].S3`: `[]` is any list index, `*` any one key of a mapping), with why msfs has
/// no use for them. They are warned about as such rather than as unknown keys.
pub(super) type Legacy<'k> = &'k [(&'k str, &'k str, &'k [&'k str])];

/// How a key msfs accepts and does nothing with is reported (with the reason after it): never
/// silently, so that nobody believes a setting took effect.
pub(super) const WITHOUT_EFFECT: &str = "accepted for compatibility, without effect in msfs";

/// A section of the file: a mapping of keys read into `T`, and nothing else. (serde's derived
/// structs also take a list of their field values in order, so `S3: [a, b]` would otherwise
/// fill the first two keys of the section.)
#[derive(Debug, Default)]
pub(super) struct Section<T>(pub(super) T);

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Section<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Mapping<T>(PhantomData<T>);
        impl<'de, T: Deserialize<'de>> Visitor<'de> for Mapping<T> {
            type Value = T;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a mapping of keys")
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<T, A::Error> {
                T::deserialize(MapAccessDeserializer::new(map))
            }
        }
        d.deserialize_map(Mapping(PhantomData)).map(Section)
    }
}

impl<T> Scalar for Section<T> {
    type Out = T;
    fn get(self) -> T {
        self.0
    }
}

/// Reads `tree` (the section at `at`) into `T`. Keys `T` has no field for become warnings.
pub(super) fn read<T: DeserializeOwned>(
    tree: Value,
    at: &Place<'_>,
    legacy: Legacy<'_>,
    warnings: &mut Vec<String>,
) -> Result<T, ConfigError> {
    let mut track = serde_path_to_error::Track::new();
    let mut unread = Vec::new();
    let tracked = serde_path_to_error::Deserializer::new(tree, &mut track);
    let result = serde_ignored::deserialize(tracked, |path| unread.push(segments(&path)));
    let Section(value) = result.map_err(|e| {
        let inner = track.path().to_string();
        let key = match inner.as_str() {
            "." => at.path.clone(),
            inner => join(&at.path, inner),
        };
        at.invalid_at(key, plain(e.to_string()))
    })?;
    for mut parts in unread {
        let key = parts.pop().unwrap_or_default();
        let legacy_why = legacy
            .iter()
            .find(|(section, _, keys)| matches(section, &parts) && keys.contains(&key.as_str()))
            .map(|(_, why, _)| why);
        let message = match legacy_why {
            Some(why) => format!("{WITHOUT_EFFECT}: {why}"),
            None => "unknown key, ignored".to_string(),
        };
        parts.push(key);
        let path = join(&at.path, &parts.join("."));
        warnings.push(format!("{}: {path}: {message}", at.source.display()));
    }
    Ok(value)
}

/// `a.b` + `c[2].d`, or either alone when the other is empty.
fn join(parent: &str, inner: &str) -> String {
    match (parent.is_empty(), inner.starts_with('[')) {
        (true, _) | (false, true) => format!("{parent}{inner}"),
        (false, false) => format!("{parent}.{inner}"),
    }
}

/// An unread key's path as section names, a list index kept on the name before it
/// (`["backends[0]", "S3", "regoin"]`).
fn segments(path: &serde_ignored::Path<'_>) -> Vec<String> {
    use serde_ignored::Path as P;
    match path {
        P::Root => Vec::new(),
        P::Seq { parent, index } => {
            let mut parts = segments(parent);
            match parts.last_mut() {
                Some(last) => last.push_str(&format!("[{index}]")),
                None => parts.push(format!("[{index}]")),
            }
            parts
        }
        P::Map { parent, key } => {
            let mut parts = segments(parent);
            parts.push(key.clone());
            parts
        }
        P::Some { parent } | P::NewtypeStruct { parent } | P::NewtypeVariant { parent } => {
            segments(parent)
        }
    }
}

/// Whether a [`Legacy`] section pattern names the section `parts`.
fn matches(pattern: &str, parts: &[String]) -> bool {
    let pattern: Vec<&str> = pattern.split('.').filter(|p| !p.is_empty()).collect();
    pattern.len() == parts.len()
        && pattern.iter().zip(parts).all(|(want, have)| {
            *want == "*"
                || match want.strip_suffix("[]") {
                    Some(name) => have
                        .strip_prefix(name)
                        .is_some_and(|i| i.starts_with('[') && i.ends_with(']')),
                    None => want == have,
                }
        })
}

/// serde's own wording (`invalid type: sequence, expected a mapping of keys`) in ours
/// (`expected a mapping of keys, found a list`), naming only the kind of what was found so
/// that a secret in the wrong place is never quoted.
fn plain(message: String) -> String {
    let Some((found, expected)) = message
        .strip_prefix("invalid type: ")
        .and_then(|rest| rest.rsplit_once(", expected "))
    else {
        return message;
    };
    let found = match found.split(' ').next().unwrap_or_default() {
        "map" => "a mapping",
        "sequence" => "a list",
        "string" => "a string",
        "integer" | "floating" => "a number",
        "boolean" => "a boolean",
        "unit" | "null" => "nothing",
        _ => return message,
    };
    let expected = if expected == "a sequence" {
        "a list"
    } else {
        expected
    };
    format!("expected {expected}, found {found}")
}

/// Where a section sits in the file, for the checks that run on what [`read`] produced.
#[derive(Clone)]
pub(super) struct Place<'a> {
    source: &'a Path,
    env: &'a Env<'a>,
    path: String,
}

impl<'a> Place<'a> {
    /// The top level of `source`.
    pub(super) fn root(source: &'a Path, env: &'a Env<'a>) -> Self {
        Place {
            source,
            env,
            path: String::new(),
        }
    }

    /// The section at `key` of this one.
    pub(super) fn child(&self, key: &str) -> Place<'a> {
        Place {
            path: self.key_path(key),
            ..self.clone()
        }
    }

    /// Item `i` of the list at `key` of this section.
    pub(super) fn item(&self, key: &str, i: usize) -> Place<'a> {
        Place {
            path: index_path(&self.key_path(key), i),
            ..self.clone()
        }
    }

    pub(super) fn source(&self) -> &'a Path {
        self.source
    }

    pub(super) fn path(&self) -> &str {
        &self.path
    }

    pub(super) fn key_path(&self, key: &str) -> String {
        child_path(&self.path, key)
    }

    /// An error about `key` in this section.
    pub(super) fn invalid(&self, key: &str, message: impl Into<String>) -> ConfigError {
        self.invalid_at(self.key_path(key), message)
    }

    /// An error about a full key path (list items, the section itself).
    pub(super) fn invalid_at(&self, key_path: String, message: impl Into<String>) -> ConfigError {
        ConfigError::Invalid {
            path: self.source.to_path_buf(),
            key: key_path,
            message: message.into(),
        }
    }

    /// A warning line about `key` in this section, in the same shape as errors.
    pub(super) fn warning(&self, key: &str, message: &str) -> String {
        format!(
            "{}: {}: {message}",
            self.source.display(),
            self.key_path(key)
        )
    }

    /// Expands a built-in default the same way file values were expanded.
    pub(super) fn expand_default(&self, key: &str, default: &str) -> Result<String, ConfigError> {
        expand(default, self.env).map_err(|m| self.invalid(key, format!("default value: {m}")))
    }

    /// The string given for `key`, or `default` (env-expanded) when absent.
    pub(super) fn text_or(
        &self,
        key: &str,
        given: Option<Text>,
        default: &str,
    ) -> Result<String, ConfigError> {
        match given {
            Some(Text(s)) => Ok(s),
            None => self.expand_default(key, default),
        }
    }

    /// A string that must be present and non-empty.
    pub(super) fn required(&self, key: &str, given: Option<Text>) -> Result<String, ConfigError> {
        match given {
            None => Err(self.invalid(key, "required key is missing")),
            Some(Text(s)) if s.is_empty() => Err(self.invalid(
                key,
                "must not be empty (if it names an environment variable, is that variable set?)",
            )),
            Some(Text(s)) => Ok(s),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize as Derive;
    use serde_json::json;

    use crate::config::scalar::Whole;

    #[derive(Debug, Derive)]
    struct Outer {
        #[serde(rename = "b")]
        _b: Option<Section<Inner>>,
        #[serde(rename = "list")]
        _list: Option<Vec<Section<Inner>>>,
    }

    #[derive(Debug, Derive)]
    struct Inner {
        #[serde(rename = "ok")]
        _ok: Option<Whole<u64>>,
    }

    fn no_env(_: &str) -> Option<String> {
        None
    }

    fn outer(tree: Value, legacy: Legacy<'_>) -> (Result<Outer, String>, Vec<String>) {
        let mut warnings = Vec::new();
        let place = Place::root(Path::new("c.yaml"), &no_env).child("top");
        let result = read(tree, &place, legacy, &mut warnings).map_err(|e| e.to_string());
        (result, warnings)
    }

    #[test]
    fn unread_keys_become_warnings_with_their_paths() {
        let (result, warnings) = outer(
            json!({"b": {"zz": 1, "ok": 3}, "list": [{}, {"old": 1}], "aa": 2}),
            &[("list[]", "an old key", &["old"])],
        );
        assert!(result.is_ok(), "{result:?}");
        assert_eq!(
            warnings,
            vec![
                "c.yaml: top.aa: unknown key, ignored",
                "c.yaml: top.b.zz: unknown key, ignored",
                "c.yaml: top.list[1].old: accepted for compatibility, without effect in msfs: an old key",
            ]
        );
    }

    #[test]
    fn errors_name_the_key_path_and_the_kind_found() {
        let (result, _) = outer(json!({"list": [{}, {"ok": "lots"}]}), &[]);
        assert_eq!(
            result.unwrap_err(),
            "c.yaml: top.list[1].ok: expected a non-negative whole number, found \"lots\""
        );
        let (result, _) = outer(json!({"b": ["secret"]}), &[]);
        assert_eq!(
            result.unwrap_err(),
            "c.yaml: top.b: expected a mapping of keys, found a list"
        );
        let (result, _) = outer(json!({"list": {"ok": 1}}), &[]);
        assert_eq!(
            result.unwrap_err(),
            "c.yaml: top.list: expected a list, found a mapping"
        );
    }

    #[test]
    fn legacy_patterns_match_whole_sections() {
        let parts = |p: &[&str]| p.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert!(matches("", &[]));
        assert!(matches("backends[].S3", &parts(&["backends[3]", "S3"])));
        assert!(!matches("backends[]", &parts(&["backends"])));
        assert!(matches("profiles.*", &parts(&["profiles", "a.b"])));
        assert!(!matches("profiles.*", &parts(&["profiles"])));
    }
}
