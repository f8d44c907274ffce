//! Kubernetes manifests as YAML documents, and the accessors the checks read them with: a value
//! at a dotted path, scalars as text, objects by kind and name.

use serde::Deserialize;
use serde_yaml_ng::Value;

use crate::deploy_chart::files::{manifest_files, read, repo};

/// The documents of a multi-document YAML `text` (empty ones left out); `origin` names it in
/// the failure if a document is not YAML.
pub fn parse_docs(text: &str, origin: &str) -> Vec<Value> {
    serde_yaml_ng::Deserializer::from_str(text)
        .enumerate()
        .map(|(i, doc)| {
            Value::deserialize(doc)
                .unwrap_or_else(|e| panic!("{origin}: document {i} is not YAML: {e}"))
        })
        .filter(|v| !v.is_null())
        .collect()
}

/// The documents of the manifests in `deploy/` (not its examples, not the Kustomization).
pub fn deploy_docs() -> Vec<Value> {
    manifest_files(&repo().join("deploy"))
        .iter()
        .flat_map(|f| parse_docs(&read(f), &f.display().to_string()))
        .collect()
}

/// `value` at a dotted path (`spec.template.spec`); Null when absent.
pub fn at<'a>(value: &'a Value, path: &str) -> &'a Value {
    path.split('.').fold(value, |v, key| &v[key])
}

pub fn str_at<'a>(value: &'a Value, path: &str) -> Option<&'a str> {
    at(value, path).as_str()
}

/// The sequence at `path`; empty when absent.
pub fn seq<'a>(value: &'a Value, path: &str) -> &'a [Value] {
    at(value, path).as_sequence().map_or(&[], Vec::as_slice)
}

/// The items of the sequence at `path`, as text.
pub fn scalars(value: &Value, path: &str) -> Vec<String> {
    seq(value, path).iter().map(scalar).collect()
}

/// A ConfigMap's data entry (its keys contain dots, so not through `at`).
pub fn data<'a>(config_map: &'a Value, key: &str) -> Option<&'a str> {
    at(config_map, "data")[key].as_str()
}

fn kind(doc: &Value) -> &str {
    str_at(doc, "kind").unwrap_or("")
}

pub fn name(doc: &Value) -> &str {
    str_at(doc, "metadata.name").unwrap_or("")
}

pub fn of_kind<'a>(docs: &'a [Value], wanted: &str) -> Vec<&'a Value> {
    docs.iter().filter(|d| kind(d) == wanted).collect()
}

/// The one object of kind `wanted`; none or several fail the test, naming `origin`.
pub fn only<'a>(docs: &'a [Value], wanted: &str, origin: &str) -> &'a Value {
    let found = of_kind(docs, wanted);
    assert_eq!(
        found.len(),
        1,
        "{origin}: expected exactly one {wanted}, found {}",
        found.len()
    );
    found[0]
}

/// A scalar as text (`9810`, `true`, `"x"`).
pub fn scalar(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        Value::Number(n) => n.to_string(),
        Value::Bool(b) => b.to_string(),
        Value::Null => String::new(),
        other => to_yaml(other),
    }
}

/// `value` as YAML text, for facts and messages.
pub fn to_yaml(value: &Value) -> String {
    serde_yaml_ng::to_string(value).unwrap_or_default()
}
