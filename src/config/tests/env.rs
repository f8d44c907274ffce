//! Environment-variable expansion and the `$MSFS_MOUNTPOINT` override.

use super::*;

#[test]
fn env_vars_expand_in_every_string_value() {
    let text = r#"
msfs_version: 1
mountname: "${NAME:-fallback}"
cache_dir_path: $HOME/cache
backends:
  - dir_name: "${DIR}"
    backend_type: S3
    bucket_container_name: "bucket-$$literal"
    prefix: "${PFX:-${DIR}/}"
"#;
    let loaded =
        parse_with("c.yaml", text, &[("HOME", "/home/u"), ("DIR", "data")]).expect("parses");
    let c = &loaded.config;
    assert_eq!(c.mountname, "fallback");
    assert_eq!(
        c.cache.dir_path.as_deref(),
        Some(Path::new("/home/u/cache"))
    );
    let b = only_backend(&loaded);
    assert_eq!(
        (b.dir_name.as_str(), b.bucket.as_str(), b.prefix.as_str()),
        ("data", "bucket-$literal", "data/")
    );
}

#[test]
fn numbers_and_booleans_from_env_strings_are_accepted() {
    let text = "msfs_version: 1\ncache_lines: \"${LINES}\"\nallow_other: \"${OTHER:-false}\"\ndir_perm: \"${PERM}\"\nbackends: [{dir_name: r, backend_type: RAM}]\n";
    let loaded = parse_with("c.yaml", text, &[("LINES", "256"), ("PERM", "700")]).expect("parses");
    assert_eq!(loaded.config.cache.lines, 256);
    assert!(!loaded.config.allow_other);
    assert_eq!(loaded.config.dir_perm, 0o700);
}

#[test]
fn unset_env_var_where_a_number_is_needed_says_so() {
    let text = "msfs_version: 1\ncache_lines: \"${LINES}\"\n";
    assert_eq!(
        error("c.yaml", text),
        "c.yaml: cache_lines: expected a whole number, found an empty string (is the environment variable set?)"
    );
}

#[test]
fn malformed_reference_names_the_key() {
    let text = "msfs_version: 1\nbackends:\n  - {dir_name: \"${OOPS\", backend_type: RAM}\n";
    assert!(error("c.yaml", text).starts_with("c.yaml: backends[0].dir_name: unterminated \"${\""));
}

#[test]
fn msfs_mountpoint_overrides_the_file() {
    let text =
        "msfs_version: 1\nmountpoint: /mnt/file\nbackends: [{dir_name: r, backend_type: RAM}]\n";
    let loaded = parse_with("c.yaml", text, &[("MSFS_MOUNTPOINT", "/mnt/env")]).expect("parses");
    assert_eq!(loaded.config.mountpoint, Path::new("/mnt/env"));
    let loaded = parse_with("c.yaml", text, &[("MSFS_MOUNTPOINT", "")]).expect("parses");
    assert_eq!(loaded.config.mountpoint, Path::new("/mnt/file"));
}
