//! A small path-tracking reader over the parsed (and env-expanded) JSON tree.
//!
//! Each [`Section`] knows where it sits in the file (`backends[1].S3`), so every
//! error and warning names the exact key, and it remembers which keys were read so
//! [`Section::finish`] can warn about the ones nobody asked for (usually typos).
//! Numbers and booleans are also accepted as strings, because after env expansion
//! `"${PORT}"` is a string even when it holds a number.

use std::collections::{BTreeMap, HashSet};
use std::path::Path;
use std::time::Duration;

use serde_json::{Map, Value};

use super::error::ConfigError;
use super::expand::{Env, expand};

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

/// Integer types a key can be read into, with their upper bound for the error message.
pub(super) trait Int: TryFrom<u64> + Copy {
    const MAX: u64;
}
impl Int for u8 {
    const MAX: u64 = u8::MAX as u64;
}
impl Int for u16 {
    const MAX: u64 = u16::MAX as u64;
}
impl Int for u32 {
    const MAX: u64 = u32::MAX as u64;
}
impl Int for u64 {
    const MAX: u64 = u64::MAX;
}
impl Int for usize {
    const MAX: u64 = usize::MAX as u64;
}

/// One mapping in the config tree, read key by key.
pub(super) struct Section<'a> {
    path: String,
    map: Option<&'a Map<String, Value>>,
    seen: HashSet<&'a str>,
    source: &'a Path,
    env: &'a Env<'a>,
}

impl<'a> Section<'a> {
    /// The top-level mapping of `source`.
    pub(super) fn root(map: &'a Map<String, Value>, source: &'a Path, env: &'a Env<'a>) -> Self {
        Self::new(String::new(), Some(map), source, env)
    }

    fn new(
        path: String,
        map: Option<&'a Map<String, Value>>,
        source: &'a Path,
        env: &'a Env<'a>,
    ) -> Self {
        Section {
            path,
            map,
            seen: HashSet::new(),
            source,
            env,
        }
    }

    pub(super) fn path(&self) -> &str {
        &self.path
    }

    pub(super) fn source(&self) -> &'a Path {
        self.source
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

    /// Whether `key` is present with a non-null value. Does not count as reading it.
    pub(super) fn has(&self, key: &str) -> bool {
        self.map
            .and_then(|m| m.get(key))
            .is_some_and(|v| !v.is_null())
    }

    /// Marks `key` as read; `null` (an empty YAML value) counts as absent.
    fn get(&mut self, key: &str) -> Option<&'a Value> {
        let (k, v) = self.map?.get_key_value(key)?;
        self.seen.insert(k.as_str());
        (!v.is_null()).then_some(v)
    }

    /// Accepts `key` without reading it, so `finish` does not report it.
    pub(super) fn ignore(&mut self, key: &str) {
        let _ = self.get(key);
    }

    /// Keys that older implementations read and msfs does not: warn, do not fail.
    pub(super) fn legacy(&mut self, keys: &[&str], warnings: &mut Vec<String>) {
        for key in keys {
            if self.get(key).is_some() {
                warnings.push(self.warning(key, "not used by msfs, ignored"));
            }
        }
    }

    pub(super) fn opt_str(&mut self, key: &str) -> Result<Option<String>, ConfigError> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            // YAML reads `bucket_container_name: 2024` as a number; the user meant the name.
            Some(Value::Number(n)) => Ok(Some(n.to_string())),
            Some(v) => Err(self.invalid(key, format!("expected a string, found {}", kind(v)))),
        }
    }

    /// A string that must be present and non-empty.
    pub(super) fn req_str(&mut self, key: &str) -> Result<String, ConfigError> {
        match self.opt_str(key)? {
            None => Err(self.invalid(key, "required key is missing")),
            Some(s) if s.is_empty() => Err(self.invalid(
                key,
                "must not be empty (if it names an environment variable, is that variable set?)",
            )),
            Some(s) => Ok(s),
        }
    }

    /// The value of `key`, or `default` (env-expanded) when absent.
    pub(super) fn str_or(&mut self, key: &str, default: &str) -> Result<String, ConfigError> {
        match self.opt_str(key)? {
            Some(s) => Ok(s),
            None => self.expand_default(key, default),
        }
    }

    pub(super) fn opt_bool(&mut self, key: &str) -> Result<Option<bool>, ConfigError> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(*b)),
            Some(Value::String(s)) if s.trim().eq_ignore_ascii_case("true") => Ok(Some(true)),
            Some(Value::String(s)) if s.trim().eq_ignore_ascii_case("false") => Ok(Some(false)),
            Some(v) => Err(self.invalid(
                key,
                format!("expected true or false, found {}", describe(v)),
            )),
        }
    }

    pub(super) fn bool_or(&mut self, key: &str, default: bool) -> Result<bool, ConfigError> {
        Ok(self.opt_bool(key)?.unwrap_or(default))
    }

    pub(super) fn opt_u64(&mut self, key: &str) -> Result<Option<u64>, ConfigError> {
        let Some(v) = self.get(key) else {
            return Ok(None);
        };
        let parsed = match v {
            Value::Number(n) => n.as_u64().or_else(|| {
                n.as_f64()
                    .filter(|f| f.fract() == 0.0 && *f >= 0.0 && *f < 1.8e19)
                    .map(|f| f as u64)
            }),
            Value::String(s) => s.trim().parse::<u64>().ok(),
            _ => None,
        };
        match parsed {
            Some(n) => Ok(Some(n)),
            None if matches!(v, Value::String(s) if s.trim().is_empty()) => Err(self.invalid(
                key,
                "expected a whole number, found an empty string (is the environment variable set?)",
            )),
            None => Err(self.invalid(
                key,
                format!(
                    "expected a non-negative whole number, found {}",
                    describe(v)
                ),
            )),
        }
    }

    /// An unsigned integer of type `T`, range-checked, or `default` when absent.
    pub(super) fn int_or<T: Int>(&mut self, key: &str, default: T) -> Result<T, ConfigError> {
        match self.opt_u64(key)? {
            None => Ok(default),
            Some(n) => T::try_from(n)
                .map_err(|_| self.invalid(key, format!("{n} is too large; at most {}", T::MAX))),
        }
    }

    pub(super) fn opt_f64(&mut self, key: &str) -> Result<Option<f64>, ConfigError> {
        let Some(v) = self.get(key) else {
            return Ok(None);
        };
        let parsed = match v {
            Value::Number(n) => n.as_f64(),
            Value::String(s) => s.trim().parse::<f64>().ok(),
            _ => None,
        };
        match parsed.filter(|f| f.is_finite()) {
            Some(f) => Ok(Some(f)),
            None => Err(self.invalid(key, format!("expected a number, found {}", describe(v)))),
        }
    }

    /// A count of milliseconds.
    pub(super) fn ms_or(&mut self, key: &str, default_ms: u64) -> Result<Duration, ConfigError> {
        Ok(Duration::from_millis(self.int_or(key, default_ms)?))
    }

    /// Permission bits written as octal digits: `"555"`, `"0755"` or the YAML number `555`.
    pub(super) fn perm_or(&mut self, key: &str, default: u16) -> Result<u16, ConfigError> {
        let Some(v) = self.get(key) else {
            return Ok(default);
        };
        let digits = match v {
            Value::String(s) => s.trim().to_string(),
            // A bare 555 is the digits the user typed, not the decimal value 555.
            Value::Number(n) if n.is_u64() => n.to_string(),
            _ => {
                return Err(self.invalid(
                    key,
                    format!(
                        "expected octal permission digits such as \"755\", found {}",
                        describe(v)
                    ),
                ));
            }
        };
        let valid = !digits.is_empty()
            && digits.len() <= 4
            && digits.bytes().all(|b| (b'0'..=b'7').contains(&b));
        match u16::from_str_radix(&digits, 8) {
            Ok(mode) if valid && mode <= 0o777 => Ok(mode),
            _ => Err(self.invalid(
                key,
                format!("{digits:?} is not an octal permission between 000 and 777 (for example \"755\")"),
            )),
        }
    }

    /// A nested mapping, if present.
    pub(super) fn opt_section(&mut self, key: &str) -> Result<Option<Section<'a>>, ConfigError> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::Object(map)) => Ok(Some(Section::new(
                self.key_path(key),
                Some(map),
                self.source,
                self.env,
            ))),
            Some(v) => Err(self.invalid(
                key,
                format!("expected a mapping of keys, found {}", kind(v)),
            )),
        }
    }

    /// A nested mapping; an absent one reads as empty, so every key takes its default.
    pub(super) fn section_or_empty(&mut self, key: &str) -> Result<Section<'a>, ConfigError> {
        Ok(match self.opt_section(key)? {
            Some(s) => s,
            None => Section::new(self.key_path(key), None, self.source, self.env),
        })
    }

    /// The items of a list, each with its key path (`backends[2]`).
    pub(super) fn opt_list(
        &mut self,
        key: &str,
    ) -> Result<Option<Vec<(String, &'a Value)>>, ConfigError> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::Array(items)) => {
                let base = self.key_path(key);
                Ok(Some(
                    items
                        .iter()
                        .enumerate()
                        .map(|(i, v)| (index_path(&base, i), v))
                        .collect(),
                ))
            }
            Some(v) => Err(self.invalid(key, format!("expected a list, found {}", kind(v)))),
        }
    }

    /// A list item (or any value at `path`) read as a mapping.
    pub(super) fn item(&self, path: String, value: &'a Value) -> Result<Section<'a>, ConfigError> {
        match value {
            Value::Object(map) => Ok(Section::new(path, Some(map), self.source, self.env)),
            v => Err(self.invalid_at(
                path,
                format!("expected a mapping of keys, found {}", kind(v)),
            )),
        }
    }

    /// The entries of this section that are themselves mappings, in key order, each
    /// marked as read. Used for `profiles`, whose keys are names rather than settings.
    pub(super) fn named_sections(&mut self) -> Result<Vec<(String, Section<'a>)>, ConfigError> {
        let Some(map) = self.map else {
            return Ok(Vec::new());
        };
        let mut out = Vec::with_capacity(map.len());
        for (name, value) in map {
            self.seen.insert(name.as_str());
            out.push((name.clone(), self.item(self.key_path(name), value)?));
        }
        out.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(out)
    }

    /// A mapping of names to scalar values (telemetry attributes), scalars as strings.
    pub(super) fn string_map(
        &mut self,
        key: &str,
    ) -> Result<BTreeMap<String, String>, ConfigError> {
        let mut out = BTreeMap::new();
        let Some(section) = self.opt_section(key)? else {
            return Ok(out);
        };
        let Some(map) = section.map else {
            return Ok(out);
        };
        for (name, value) in map {
            let text = match value {
                Value::String(s) => s.clone(),
                Value::Number(n) => n.to_string(),
                Value::Bool(b) => b.to_string(),
                v => {
                    return Err(
                        section.invalid(name, format!("expected a string, found {}", kind(v)))
                    );
                }
            };
            out.insert(name.clone(), text);
        }
        Ok(out)
    }

    /// Reports every key that was never read as a warning, in key order.
    pub(super) fn finish(self, warnings: &mut Vec<String>) {
        let Some(map) = self.map else {
            return;
        };
        let mut unknown: Vec<&str> = map
            .keys()
            .map(String::as_str)
            .filter(|k| !self.seen.contains(k))
            .collect();
        unknown.sort_unstable();
        for key in unknown {
            warnings.push(self.warning(key, "unknown key, ignored"));
        }
    }
}

/// "a string", "a list", … for type errors.
fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "nothing",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "a mapping",
    }
}

/// The value itself for scalars (shortened), the kind otherwise. Only used for
/// keys that never hold secrets.
fn describe(v: &Value) -> String {
    match v {
        Value::String(s) if s.chars().count() > 40 => {
            let head: String = s.chars().take(40).collect();
            format!("\"{head}…\"")
        }
        Value::String(s) => format!("{s:?}"),
        Value::Number(n) => n.to_string(),
        Value::Bool(b) => b.to_string(),
        other => kind(other).to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn no_env(_: &str) -> Option<String> {
        None
    }

    fn with<R>(json: Value, f: impl FnOnce(&mut Section<'_>) -> R) -> R {
        let map = json.as_object().cloned().expect("test input is a mapping");
        let source = Path::new("t.yaml");
        let mut s = Section::root(&map, source, &no_env);
        f(&mut s)
    }

    fn message(e: ConfigError) -> String {
        e.to_string()
    }

    #[test]
    fn numbers_are_accepted_as_strings() {
        with(
            serde_json::json!({"n": " 42 ", "b": "true", "f": "1.5"}),
            |s| {
                assert_eq!(s.int_or("n", 0u32).expect("n"), 42);
                assert!(s.bool_or("b", false).expect("b"));
                assert_eq!(s.opt_f64("f").expect("f"), Some(1.5));
            },
        );
    }

    #[test]
    fn integral_floats_read_as_integers() {
        with(serde_json::json!({"n": 10.0, "m": 10.5}), |s| {
            assert_eq!(s.int_or("n", 0u64).expect("n"), 10);
            assert!(s.int_or("m", 0u64).is_err());
        });
    }

    #[test]
    fn negative_or_oversized_integers_are_rejected() {
        with(serde_json::json!({"neg": -1, "big": 300}), |s| {
            assert!(message(s.int_or("neg", 0u64).expect_err("neg")).contains("non-negative"));
            assert!(message(s.int_or("big", 0u8).expect_err("big")).contains("at most 255"));
        });
    }

    #[test]
    fn empty_string_number_hints_at_unset_variable() {
        with(serde_json::json!({"port": ""}), |s| {
            let m = message(s.int_or("port", 0u16).expect_err("empty"));
            assert!(m.contains("environment variable"), "{m}");
        });
    }

    #[test]
    fn perm_reads_octal_digits_from_strings_and_numbers() {
        with(
            serde_json::json!({"a": "555", "b": 755, "c": "0750", "d": "999", "e": 1777, "f": "rwx"}),
            |s| {
                assert_eq!(s.perm_or("a", 0).expect("a"), 0o555);
                assert_eq!(s.perm_or("b", 0).expect("b"), 0o755);
                assert_eq!(s.perm_or("c", 0).expect("c"), 0o750);
                assert!(s.perm_or("d", 0).is_err());
                assert!(s.perm_or("e", 0).is_err());
                assert!(s.perm_or("f", 0).is_err());
                assert_eq!(s.perm_or("absent", 0o444).expect("default"), 0o444);
            },
        );
    }

    #[test]
    fn null_value_reads_as_absent_but_counts_as_seen() {
        let mut warnings = Vec::new();
        with(serde_json::json!({"prefix": null}), |s| {
            assert_eq!(s.str_or("prefix", "dflt").expect("prefix"), "dflt");
        });
        let map = serde_json::json!({"prefix": null});
        let map = map.as_object().expect("mapping");
        let mut s = Section::root(map, Path::new("t.yaml"), &no_env);
        let _ = s.opt_str("prefix");
        s.finish(&mut warnings);
        assert!(warnings.is_empty(), "{warnings:?}");
    }

    #[test]
    fn unread_keys_become_sorted_warnings_with_paths() {
        let tree = serde_json::json!({"b": {"zz": 1, "yy": 2, "ok": 3}});
        let map = tree.as_object().expect("mapping");
        let mut warnings = Vec::new();
        let mut root = Section::root(map, Path::new("c.yaml"), &no_env);
        let mut b = root.opt_section("b").expect("b").expect("present");
        let _ = b.opt_u64("ok");
        b.finish(&mut warnings);
        root.finish(&mut warnings);
        assert_eq!(
            warnings,
            vec![
                "c.yaml: b.yy: unknown key, ignored",
                "c.yaml: b.zz: unknown key, ignored"
            ]
        );
    }

    #[test]
    fn wrong_type_names_the_key_path() {
        let tree = serde_json::json!({"backends": [{}, {"cache_lines": "lots"}]});
        let map = tree.as_object().expect("mapping");
        let mut root = Section::root(map, Path::new("c.yaml"), &no_env);
        let items = root.opt_list("backends").expect("list").expect("present");
        let (path, value) = items[1].clone();
        let mut item = root.item(path, value).expect("mapping");
        let m = message(item.int_or("cache_lines", 0u64).expect_err("lots"));
        assert_eq!(
            m,
            "c.yaml: backends[1].cache_lines: expected a non-negative whole number, found \"lots\""
        );
    }
}
