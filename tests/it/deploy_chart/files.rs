//! The repository's files as the checks read them: its root, a file's text, the Kubernetes
//! manifests of a directory, and the keys of Cargo.toml's `[package]`.

use std::path::{Path, PathBuf};

pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The text of `path`; a file that cannot be read fails the test, naming it.
pub fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()))
}

/// The text of `relative`, a path from the repository root.
pub fn read_repo(relative: &str) -> String {
    read(&repo().join(relative))
}

/// The Kubernetes manifests of `dir` (not the Kustomization), sorted.
pub fn manifest_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("cannot list {}: {e}", dir.display()))
        .map(|entry| entry.expect("directory entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml" || e == "yml"))
        .filter(|p| p.file_name().is_some_and(|n| n != "kustomization.yaml"))
        .collect();
    files.sort();
    files
}

/// `key = "value"` of Cargo.toml's [package] section.
pub fn cargo_package(key: &str) -> String {
    let manifest = read_repo("Cargo.toml");
    let mut in_package = false;
    for line in manifest.lines() {
        let line = line.trim();
        if line.starts_with('[') {
            in_package = line == "[package]";
        } else if in_package
            && let Some((k, v)) = line.split_once('=')
            && k.trim() == key
        {
            return v.trim().trim_matches('"').to_string();
        }
    }
    panic!("Cargo.toml [package] has no {key}")
}
