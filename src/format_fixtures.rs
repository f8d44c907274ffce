//! The committed samples of every on-disk format (`tests/fixtures/formats/`, described in
//! docs/FORMATS.md), for the tests that prove this build still reads what an earlier one wrote.
//!
//! Each artefact's test reads its sample and checks the content it holds. With
//! `MSFS_WRITE_FIXTURES=1` the test first writes the sample anew with this build's writer:
//! done once per format version, when a format changes (the older version's sample is kept,
//! under its own name, for as long as it is read).

use std::path::{Path, PathBuf};

/// The environment variable that makes the fixture tests write their samples anew.
const WRITE_VAR: &str = "MSFS_WRITE_FIXTURES";

/// The sample `name`, under `tests/fixtures/formats/`.
pub fn path(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/formats")
        .join(name)
}

/// Whether this run writes the samples instead of only reading them.
pub fn writing() -> bool {
    std::env::var_os(WRITE_VAR).is_some_and(|v| v == "1")
}

/// Replaces the sample `name` with a copy of `from` (a file or a directory tree).
pub fn store(name: &str, from: &Path) {
    let to = path(name);
    if to.is_dir() {
        std::fs::remove_dir_all(&to).expect("remove the old sample");
    } else if to.exists() {
        std::fs::remove_file(&to).expect("remove the old sample");
    }
    std::fs::create_dir_all(to.parent().expect("parent")).expect("mkdir");
    copy(from, &to);
}

/// A copy of the sample `name` at `to`: readers may repair or adopt what they read, and the
/// committed sample must stay as it was written.
pub fn copy_to(name: &str, to: &Path) {
    let from = path(name);
    assert!(
        from.exists(),
        "{} is missing; write it with {WRITE_VAR}=1",
        from.display()
    );
    copy(&from, to);
}

fn copy(from: &Path, to: &Path) {
    if from.is_dir() {
        std::fs::create_dir_all(to).expect("mkdir");
        for entry in std::fs::read_dir(from).expect("list") {
            let entry = entry.expect("entry");
            copy(&entry.path(), &to.join(entry.file_name()));
        }
    } else {
        std::fs::copy(from, to).expect("copy");
    }
}
