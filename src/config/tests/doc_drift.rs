//! docs/configuration.md and the parser know the same keys: every key a section of the file may
//! hold (a field of its `raw` struct, or a legacy key the parser warns about) has a row in that
//! section's table, and every row names such a key. The same for the CSI volume attributes and
//! the Helm chart's values.
//!
//! In the document, a table of keys follows a marker line `<!-- keys: SECTION -->`, and the
//! first cell of each of its rows is the key in backticks.

use std::collections::{BTreeMap, BTreeSet};

use serde::Deserialize;
use serde::de::{self, Deserializer, Visitor};

use super::super::{msc, raw, v1};

/// A deserializer that only records the field names of the struct asked of it, then stops.
struct FieldNames<'a>(&'a mut Vec<&'static str>);

#[derive(Debug)]
struct Stop;

impl std::fmt::Display for Stop {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("field names taken")
    }
}

impl std::error::Error for Stop {}

impl de::Error for Stop {
    fn custom<T: std::fmt::Display>(_: T) -> Self {
        Stop
    }
}

impl<'de> Deserializer<'de> for FieldNames<'_> {
    type Error = Stop;

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        fields: &'static [&'static str],
        _visitor: V,
    ) -> Result<V::Value, Stop> {
        self.0.extend(fields);
        Err(Stop)
    }

    fn deserialize_any<V: Visitor<'de>>(self, _visitor: V) -> Result<V::Value, Stop> {
        Err(Stop)
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
        option unit unit_struct newtype_struct seq tuple tuple_struct map enum identifier
        ignored_any
    }
}

/// The keys of `T`, a section of the file as serde reads it (renames applied).
fn fields_of<T: for<'de> Deserialize<'de>>() -> Vec<&'static str> {
    let mut names = Vec::new();
    let _ = T::deserialize(FieldNames(&mut names));
    assert!(
        !names.is_empty(),
        "{} has named fields",
        std::any::type_name::<T>()
    );
    names
}

/// Every section of both formats with the keys the parser takes there.
fn parser_sections() -> BTreeMap<String, BTreeSet<String>> {
    let mut sections: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut add = |section: &str, keys: Vec<&str>| {
        sections
            .entry(section.to_string())
            .or_default()
            .extend(keys.into_iter().map(str::to_string));
    };
    add("v1", fields_of::<raw::V1>());
    add("v1.backends[]", fields_of::<raw::Backend>());
    add(
        "v1.backends[].flat_dir_hints[]",
        fields_of::<raw::FlatDirHint>(),
    );
    add("v1.backends[].S3", fields_of::<raw::S3>());
    add("v1.backends[].AIStore", fields_of::<raw::AIStore>());
    add("v1.backends[].GCS", fields_of::<raw::Gcs>());
    add("v1.backends[].RAM", fields_of::<raw::Ram>());
    add("v1.backends[].PSEUDO", fields_of::<raw::Pseudo>());
    add("v1.shared_cache", fields_of::<raw::SharedCache>());
    add("v1.shared_cache.S3", fields_of::<raw::S3>());
    add("opentelemetry", fields_of::<raw::OpenTelemetry>());
    add("opentelemetry.metrics", fields_of::<raw::Metrics>());
    add(
        "opentelemetry.metrics.attributes[]",
        fields_of::<raw::AttributeProvider>(),
    );
    add(
        "opentelemetry.metrics.attributes[].options",
        fields_of::<raw::AttributeOptions>(),
    );
    add("opentelemetry.metrics.reader", fields_of::<raw::Reader>());
    add(
        "opentelemetry.metrics.reader.options",
        fields_of::<raw::ReaderOptions>(),
    );
    add(
        "opentelemetry.metrics.exporter",
        fields_of::<raw::Exporter>(),
    );
    add(
        "opentelemetry.metrics.exporter.options",
        fields_of::<raw::ExporterOptions>(),
    );
    add("msc", fields_of::<raw::Msc>());
    add("msc.posix", fields_of::<raw::Posix>());
    add("msc.profiles.*", fields_of::<raw::Profile>());
    for provider in ["storage_provider", "credentials_provider"] {
        add(
            &format!("msc.profiles.*.{provider}"),
            fields_of::<raw::Provider>(),
        );
    }
    add(
        "msc.profiles.*.storage_provider.options",
        fields_of::<raw::S3Options>(),
    );
    add(
        "msc.profiles.*.storage_provider.options",
        fields_of::<raw::FileOptions>(),
    );
    add(
        "msc.profiles.*.credentials_provider.options",
        fields_of::<raw::CredentialsOptions>(),
    );
    for (format, legacy) in [("v1", v1::LEGACY), ("msc", msc::LEGACY)] {
        for (section, _, keys) in legacy {
            let section = if section.is_empty() {
                format.to_string()
            } else {
                format!("{format}.{section}")
            };
            add(&section, keys.to_vec());
        }
    }
    // Read before the format is chosen; a field of both top levels under a serde rename.
    for section in ["v1", "msc"] {
        sections
            .get_mut(section)
            .expect("top level")
            .insert("msfs_version".into());
    }
    sections
}

/// The CSI volume attributes.
fn attribute_keys() -> BTreeSet<String> {
    crate::csi::attributes::BACKEND_KEYS
        .iter()
        .chain(&crate::csi::attributes::VOLUME_KEYS)
        .map(|k| k.to_string())
        .collect()
}

/// The dotted paths of every leaf of the chart's values (a scalar, a list, an empty mapping).
fn chart_value_keys() -> BTreeSet<String> {
    fn walk(prefix: &str, value: &serde_json::Value, out: &mut BTreeSet<String>) {
        match value {
            serde_json::Value::Object(map) if !map.is_empty() => {
                for (key, value) in map {
                    let path = if prefix.is_empty() {
                        key.clone()
                    } else {
                        format!("{prefix}.{key}")
                    };
                    walk(&path, value, out);
                }
            }
            _ => {
                out.insert(prefix.to_string());
            }
        }
    }
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/charts/msfs/values.yaml");
    let text = std::fs::read_to_string(path).expect("charts/msfs/values.yaml");
    let values: serde_json::Value = serde_yaml_ng::from_str(&text).expect("values.yaml is YAML");
    let mut keys = BTreeSet::new();
    walk("", &values, &mut keys);
    keys
}

/// The keys the document describes, by the section marker they follow.
fn documented() -> BTreeMap<String, Vec<String>> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/configuration.md");
    let text = std::fs::read_to_string(path).expect("docs/configuration.md");
    let mut sections: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut current: Option<String> = None;
    for line in text.lines() {
        let line = line.trim();
        if let Some(section) = line
            .strip_prefix("<!-- keys:")
            .and_then(|rest| rest.strip_suffix("-->"))
        {
            current = Some(section.trim().to_string());
            sections.entry(section.trim().to_string()).or_default();
            continue;
        }
        let Some(section) = &current else { continue };
        if !line.starts_with('|') {
            // A table ends at its first line that is not a row; prose may follow.
            if !line.is_empty() {
                current = None;
            }
            continue;
        }
        let first = line.trim_start_matches('|').split('|').next().unwrap_or("");
        let first = first.trim();
        if let Some(key) = first.strip_prefix('`').and_then(|k| k.strip_suffix('`')) {
            sections
                .get_mut(section)
                .expect("entered")
                .push(key.to_string());
        }
    }
    sections
}

#[test]
fn the_configuration_doc_describes_exactly_the_keys_the_parser_takes() {
    let mut expected = parser_sections();
    expected.insert("csi.volumeAttributes".into(), attribute_keys());
    expected.insert("chart.values".into(), chart_value_keys());
    expected.insert(
        "csi.storageClassParameters".into(),
        crate::csi::STORAGE_CLASS_PARAMETERS
            .iter()
            .map(|k| k.to_string())
            .collect(),
    );
    let documented = documented();
    let mut problems = Vec::new();
    for (section, keys) in &documented {
        let mut seen = BTreeSet::new();
        for key in keys {
            if !seen.insert(key) {
                problems.push(format!("{section}: `{key}` is described twice"));
            }
        }
        match expected.get(section) {
            None => problems.push(format!("marker for unknown section {section:?}")),
            Some(known) => {
                for key in keys.iter().filter(|k| !known.contains(*k)) {
                    problems.push(format!("{section}: `{key}` is described, not parsed"));
                }
            }
        }
    }
    for (section, keys) in &expected {
        let described: BTreeSet<&String> = documented.get(section).into_iter().flatten().collect();
        for key in keys.iter().filter(|k| !described.contains(k)) {
            problems.push(format!("{section}: `{key}` is parsed, not described"));
        }
    }
    assert!(
        problems.is_empty(),
        "docs/configuration.md and the parser disagree:\n{}",
        problems.join("\n")
    );
}
