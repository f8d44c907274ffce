//! Behaviour of the whole module through its public entry points: both formats,
//! defaults, env expansion, and the exact message for each kind of bad config.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::*;

mod doc_drift;
mod env;
mod files;
mod msc;
mod rejected;
mod shared_cache;
mod stores;
mod v1;
mod warnings;

fn ids() -> (u32, u32) {
    let ids = Ids::current();
    (ids.uid, ids.gid)
}

fn parse_with(name: &str, text: &str, vars: &[(&str, &str)]) -> Result<Loaded, ConfigError> {
    let vars: HashMap<String, String> = vars
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    parse_str(text, Path::new(name), &move |k| vars.get(k).cloned())
}

fn parse(name: &str, text: &str) -> Loaded {
    match parse_with(name, text, &[]) {
        Ok(l) => l,
        Err(e) => panic!("{name} should parse: {e}"),
    }
}

fn error(name: &str, text: &str) -> String {
    match parse_with(name, text, &[]) {
        Ok(l) => panic!("{name} should be rejected, got {:#?}", l.config),
        Err(e) => e.to_string(),
    }
}

fn only_backend(l: &Loaded) -> &BackendConfig {
    assert_eq!(l.config.backends.len(), 1, "{:#?}", l.config.backends);
    &l.config.backends[0]
}

fn s3(b: &BackendConfig) -> &S3Config {
    match &b.kind {
        BackendKind::S3(s3) => s3,
        other => panic!("expected an S3 backend, got {other:?}"),
    }
}
