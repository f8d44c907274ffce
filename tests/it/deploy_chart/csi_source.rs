//! One CSI volume source (a PV's `spec.csi` or an inline volume's `csi`) as the plugin will
//! judge it: the driver, the attributes it accepts, and what each authenticationSource needs.

use std::collections::BTreeSet;

use msfs::csi::{BACKEND_ATTRIBUTES, VOLUME_ATTRIBUTES};
use serde_yaml_ng::Value;

use crate::deploy_chart::yaml::{at, scalar, str_at};

/// The source's authenticationSource; `driver` when it sets none.
pub fn authentication_source(csi: &Value) -> &str {
    str_at(csi, "volumeAttributes.authenticationSource").unwrap_or("driver")
}

/// What the plugin would refuse in the source `csi` for `driver`, each problem prefixed with
/// `origin`. Attribute keys with a `/` are Kubernetes' own.
pub fn check_csi_source(csi: &Value, driver: &str, origin: &str) -> Vec<String> {
    let mut problems = Vec::new();
    if str_at(csi, "driver") != Some(driver) {
        problems.push(format!(
            "{origin}: csi.driver is {:?}, not {driver}",
            str_at(csi, "driver")
        ));
    }
    if let Some(handle) = str_at(csi, "volumeHandle")
        && (handle.contains('/') || handle.contains(".."))
    {
        problems.push(format!(
            "{origin}: volumeHandle {handle:?} contains / or .., which the plugin refuses"
        ));
    }
    let attributes = at(csi, "volumeAttributes");
    let mut keys = BTreeSet::new();
    for (k, v) in attributes.as_mapping().into_iter().flatten() {
        let key = scalar(k);
        if !v.is_string() {
            problems.push(format!("{origin}: attribute {key} is not a string"));
        }
        if !key.contains('/')
            && !BACKEND_ATTRIBUTES.contains(&key.as_str())
            && !VOLUME_ATTRIBUTES.contains(&key.as_str())
        {
            problems.push(format!(
                "{origin}: the plugin refuses unknown attribute {key}"
            ));
        }
        keys.insert(key);
    }
    match str_at(attributes, "backendsJson") {
        Some(json) => problems.extend(backends_json_problems(json, origin)),
        None => {
            if !keys.contains("bucketName") {
                problems.push(format!("{origin}: no bucketName"));
            }
        }
    }
    if let Some(prefix) = str_at(attributes, "prefix")
        && !prefix.is_empty()
        && !prefix.ends_with('/')
    {
        problems.push(format!("{origin}: prefix {prefix:?} must end with /"));
    }
    let auth = authentication_source(csi);
    match auth {
        // `pod` without a roleArn reads the role from the pod's ServiceAccount annotation.
        "driver" | "anonymous" | "pod" => {}
        "secret" => {
            if at(csi, "nodePublishSecretRef.name").is_null() {
                problems.push(format!(
                    "{origin}: authenticationSource secret without nodePublishSecretRef"
                ));
            }
        }
        other => problems.push(format!("{origin}: unknown authenticationSource {other:?}")),
    }
    if let Some(role) = str_at(attributes, "roleArn")
        && !role.starts_with("arn:")
    {
        problems.push(format!("{origin}: roleArn {role:?} is not an ARN"));
    }
    if auth == "anonymous" && keys.contains("roleArn") {
        problems.push(format!(
            "{origin}: roleArn with authenticationSource anonymous"
        ));
    }
    problems
}

/// A `backendsJson` attribute: a non-empty JSON list of backends, each with a dirName and a
/// bucketName and only backend attributes.
fn backends_json_problems(json: &str, origin: &str) -> Vec<String> {
    let mut problems = Vec::new();
    let items = match serde_json::from_str::<serde_json::Value>(json) {
        Ok(serde_json::Value::Array(items)) if !items.is_empty() => items,
        _ => {
            problems.push(format!(
                "{origin}: backendsJson is not a non-empty JSON list"
            ));
            return problems;
        }
    };
    for (i, item) in items.iter().enumerate() {
        let Some(map) = item.as_object() else {
            problems.push(format!("{origin}: backendsJson[{i}] is not an object"));
            continue;
        };
        for key in map.keys() {
            if !BACKEND_ATTRIBUTES.contains(&key.as_str()) {
                problems.push(format!(
                    "{origin}: backendsJson[{i}].{key} is not a backend attribute"
                ));
            }
        }
        for required in ["dirName", "bucketName"] {
            if !map.contains_key(required) {
                problems.push(format!("{origin}: backendsJson[{i}] lacks {required}"));
            }
        }
    }
    problems
}
