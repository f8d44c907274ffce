//! Bad configuration files fail fast, before anything is mounted, with a message that names the
//! file and the key. Runs the real binary; no server needed.

use std::process::Command;

/// `msfs check-config` of `text` written as `file_name`, with warnings logged.
fn check_output(file_name: &str, text: &str) -> std::process::Output {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join(file_name);
    std::fs::write(&path, text).expect("write config");
    Command::new(env!("CARGO_BIN_EXE_msfs"))
        .arg("check-config")
        .arg(&path)
        .env("RUST_LOG", "warn")
        .output()
        .expect("run msfs")
}

fn check(file_name: &str, text: &str) -> (bool, String) {
    let out = check_output(file_name, text);
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn assert_rejected(file_name: &str, text: &str, key: &str) {
    let (ok, stderr) = check(file_name, text);
    assert!(!ok, "accepted: {text}");
    assert!(stderr.contains(file_name), "file not named: {stderr}");
    assert!(stderr.contains(key), "key {key} not named: {stderr}");
}

const S3: &str = "    backend_type: S3\n    bucket_container_name: b\n";

#[test]
fn a_missing_required_key_is_named() {
    assert_rejected(
        "config.yaml",
        "msfs_version: 1\nbackends:\n  - backend_type: S3\n    bucket_container_name: b\n",
        "backends[0].dir_name",
    );
}

#[test]
fn a_wrong_type_is_named() {
    assert_rejected(
        "config.yaml",
        &format!("msfs_version: 1\ncache_lines: lots\nbackends:\n  - dir_name: a\n{S3}"),
        "cache_lines",
    );
}

#[test]
fn an_unknown_backend_type_is_named() {
    assert_rejected(
        "config.json",
        r#"{"msfs_version": 1, "backends": [{"dir_name": "a", "backend_type": "FTP", "bucket_container_name": "b"}]}"#,
        "backends[0].backend_type",
    );
}

#[test]
fn a_prefix_without_trailing_slash_is_named() {
    assert_rejected(
        "config.yaml",
        &format!(
            "msfs_version: 1\nbackends:\n  - dir_name: a\n{S3}  - dir_name: b\n{S3}    prefix: data\n"
        ),
        "backends[1].prefix",
    );
}

#[test]
fn two_backends_with_one_dir_name_are_rejected() {
    assert_rejected(
        "config.yaml",
        &format!("msfs_version: 1\nbackends:\n  - dir_name: same\n{S3}  - dir_name: same\n{S3}"),
        "backends[1].dir_name",
    );
}

#[test]
fn a_syntax_error_names_the_file() {
    let (ok, stderr) = check("broken.yaml", "msfs_version: 1\nbackends: [\n");
    assert!(!ok);
    assert!(stderr.contains("broken.yaml"), "{stderr}");
}

#[test]
fn a_missing_config_file_is_reported_not_searched_past() {
    let out = Command::new(env!("CARGO_BIN_EXE_msfs"))
        .args(["check-config", "/nonexistent/msfs.yaml"])
        .output()
        .expect("run msfs");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent/msfs.yaml"));
}

#[test]
fn a_valid_config_is_summarised() {
    let (ok, stderr) = check(
        "good.yaml",
        "msfs_version: 1\nbackends:\n  - dir_name: a\n    backend_type: S3\n    bucket_container_name: b\n    prefix: p/\n",
    );
    assert!(ok, "{stderr}");
}

#[test]
fn the_config_is_found_through_msc_config() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("from-env.yaml");
    std::fs::write(&path, "msfs_version: 1\nbackends: []\n").expect("write");
    let out = Command::new(env!("CARGO_BIN_EXE_msfs"))
        .arg("check-config")
        .env("MSC_CONFIG", &path)
        .output()
        .expect("run msfs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("from-env.yaml"));
}

#[test]
fn skipping_certificate_verification_is_refused_naming_the_key() {
    assert_rejected(
        "config.yaml",
        &format!(
            "msfs_version: 1\nbackends:\n  - dir_name: a\n{S3}    S3:\n      region: r\n      \
             skip_tls_certificate_verify: true\n"
        ),
        "backends[0].S3.skip_tls_certificate_verify",
    );
}

/// `msfs check-config` shows each key it accepts without effect, with why, on its output (the
/// log, as a mount's start does).
#[test]
fn check_config_warns_of_each_key_without_effect() {
    let out = check_output(
        "config.yaml",
        &format!(
            "msfs_version: 1\nvirtual_dir_ttl: 2000000\nvirtual_file_ttl: 2000000\n\
             backends:\n  - dir_name: a\n{S3}    S3: {{region: r}}\n"
        ),
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    for key in ["virtual_dir_ttl", "virtual_file_ttl"] {
        assert!(
            stdout.contains(&format!(
                "{key}: accepted for compatibility, without effect in msfs: "
            )),
            "{key} not warned about:\n{stdout}"
        );
    }
}
