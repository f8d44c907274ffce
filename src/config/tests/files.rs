//! Whole-file concerns: format, syntax, top-level shape, reading from disk.

use super::*;

#[test]
fn unsupported_msfs_version_is_rejected() {
    assert_eq!(
        error("c.yaml", "msfs_version: 2\n"),
        "c.yaml: msfs_version: unsupported version 2; use 1, or leave it out for the MSC format"
    );
}

#[test]
fn top_level_must_be_a_mapping() {
    assert_eq!(
        error("c.yaml", "- a\n- b\n"),
        "c.yaml: (top level): expected a mapping of keys, found a list"
    );
}

#[test]
fn unsupported_extension_is_rejected() {
    let err = parse_with("config.toml", "", &[]).expect_err("toml is not supported");
    assert!(matches!(err, ConfigError::UnsupportedFormat { .. }));
    assert_eq!(
        err.to_string(),
        "config.toml: unsupported config file extension; use .yaml, .yml or .json"
    );
}

#[test]
fn syntax_errors_carry_the_position() {
    let yaml = parse_with("c.yaml", "msfs_version: 1\nbackends: [\n", &[]).expect_err("bad YAML");
    assert!(matches!(&yaml, ConfigError::Syntax { .. }));
    assert!(yaml.to_string().contains("line"), "{yaml}");
    let json = parse_with("c.json", "{\n  \"a\": 1,\n}", &[]).expect_err("bad JSON");
    assert!(json.to_string().contains("line 3"), "{json}");
}

#[test]
fn secrets_never_appear_in_debug_output() {
    let text = "msfs_version: 1\nbackends:\n  - dir_name: a\n    backend_type: S3\n    bucket_container_name: k\n    S3: {access_key_id: AKIAVISIBLE, secret_access_key: topsecretvalue, session_token: tokenvalue}\n";
    let loaded = parse("c.yaml", text);
    let debug = format!("{loaded:?}");
    assert!(debug.contains("AKIAVISIBLE"));
    assert!(
        !debug.contains("topsecretvalue") && !debug.contains("tokenvalue"),
        "{debug}"
    );
}

#[test]
fn load_reads_the_file_and_names_it_in_errors() {
    let dir = tempfile::tempdir().expect("tempdir");
    let good = dir.path().join("c.yml");
    std::fs::write(
        &good,
        "msfs_version: 1\nbackends: [{dir_name: r, backend_type: RAM}]\n",
    )
    .expect("write");
    let loaded = load(&good).expect("loads");
    assert_eq!(loaded.config.source, good);
    assert_eq!(loaded.config.backends[0].dir_name, "r");

    let missing = dir.path().join("missing.yaml");
    let err = load(&missing).expect_err("missing");
    assert!(matches!(&err, ConfigError::Io { path, .. } if *path == missing));
    assert!(
        err.to_string().starts_with(&missing.display().to_string()),
        "{err}"
    );

    let binary = dir.path().join("b.json");
    std::fs::write(&binary, [0xff, 0xfe, 0x00]).expect("write");
    assert!(matches!(load(&binary), Err(ConfigError::Syntax { .. })));
}
