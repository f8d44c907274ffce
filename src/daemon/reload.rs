//! Configuration reload (SIGHUP, or every `auto_sighup_interval` seconds): new backends appear,
//! removed ones disappear, changed ones are updated in place — all or nothing.
//!
//! A reload is refused whole, leaving the mount on its current configuration, when the new file
//! does not parse or validate, when a new or changed backend cannot reach its store, or when it
//! would remove a backend that still has open files or directories (close them and reload
//! again). A backend whose bucket, prefix or type changed is removed and added again; one whose
//! other settings changed (credentials, endpoint, permissions, `trace_level`, `flush_on_close`)
//! keeps its directory and inodes and takes the new settings for the operations that follow.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::sync::Arc;

use fuser::{INodeNo, Notifier};

use super::open_backend_settings;
use crate::config::{self, BackendConfig, BackendKind, Config};
use crate::engines::Engines;
use crate::fs::{Backend, Fs, ROOT_INO};

/// What a new configuration changes, by backend.
#[derive(Debug, Default, PartialEq)]
pub struct Plan {
    pub removed: Vec<String>,
    pub added: Vec<BackendConfig>,
    pub changed: Vec<BackendConfig>,
}

impl Plan {
    pub fn is_empty(&self) -> bool {
        self.removed.is_empty() && self.added.is_empty() && self.changed.is_empty()
    }
}

/// Whether `old` can become `new` without removing the directory: same objects, same protocol.
fn same_identity(old: &BackendConfig, new: &BackendConfig) -> bool {
    let kind = |c: &BackendConfig| std::mem::discriminant(&c.kind);
    let flavour = |c: &BackendConfig| match &c.kind {
        BackendKind::S3(s3) => Some(s3.flavor),
        _ => None,
    };
    old.bucket == new.bucket
        && old.prefix == new.prefix
        && kind(old) == kind(new)
        && flavour(old) == flavour(new)
}

pub fn plan(old: &[BackendConfig], new: &[BackendConfig]) -> Plan {
    let old_by_name: HashMap<&str, &BackendConfig> =
        old.iter().map(|b| (b.dir_name.as_str(), b)).collect();
    let new_names: Vec<&str> = new.iter().map(|b| b.dir_name.as_str()).collect();
    let mut plan = Plan::default();
    for b in old {
        if !new_names.contains(&b.dir_name.as_str()) {
            plan.removed.push(b.dir_name.clone());
        }
    }
    for b in new {
        match old_by_name.get(b.dir_name.as_str()) {
            None => plan.added.push(b.clone()),
            Some(previous) if *previous == b => {}
            Some(previous) if same_identity(previous, b) => plan.changed.push(b.clone()),
            Some(_) => {
                plan.removed.push(b.dir_name.clone());
                plan.added.push(b.clone());
            }
        }
    }
    plan
}

pub struct Reloader {
    config: Config,
    fs: Arc<Fs>,
    engines: Engines,
    notifier: Notifier,
    /// The last failure reported, so a periodic reload repeats a message only when it changes.
    last_error: Option<String>,
}

impl Reloader {
    pub fn new(config: Config, fs: Arc<Fs>, engines: Engines, notifier: Notifier) -> Reloader {
        Reloader {
            config,
            fs,
            engines,
            notifier,
            last_error: None,
        }
    }

    /// The reload period in force, if any.
    pub fn interval(&self) -> Option<std::time::Duration> {
        self.config.auto_sighup_interval
    }

    /// Re-reads the configuration file and applies it; `periodic` quiets repeated failures.
    pub async fn reload(&mut self, periodic: bool) {
        match self.try_reload().await {
            Ok(plan) => {
                self.last_error = None;
                if !plan.is_empty() || !periodic {
                    tracing::info!(
                        removed = ?plan.removed,
                        added = ?plan.added.iter().map(|b| &b.dir_name).collect::<Vec<_>>(),
                        changed = ?plan.changed.iter().map(|b| &b.dir_name).collect::<Vec<_>>(),
                        "configuration reloaded"
                    );
                }
            }
            Err(message) => {
                if !periodic || self.last_error.as_deref() != Some(message.as_str()) {
                    tracing::error!("reload refused, keeping the current configuration: {message}");
                }
                self.last_error = Some(message);
            }
        }
    }

    async fn try_reload(&mut self) -> Result<Plan, String> {
        let loaded = config::load(&self.config.source).map_err(|e| e.to_string())?;
        for warning in &loaded.warnings {
            tracing::warn!("{warning}");
        }
        let mut new = loaded.config;
        // What the command line asked of the mount holds for whatever the file says now.
        if self.config.read_only {
            new.make_read_only();
        }
        new.no_exec = self.config.no_exec;
        let plan = plan(&self.config.backends, &new.backends);
        for name in &plan.removed {
            let open = self.fs.open_handles_in(name);
            if open > 0 {
                return Err(format!(
                    "backend {name} would be removed but has {open} open files or directories"
                ));
            }
        }
        // Open every new store before changing anything, so a failure leaves nothing half-done.
        let mut opened = Vec::new();
        for b in plan.added.iter().chain(&plan.changed) {
            let settings = open_backend_settings(b, &new.backends, &self.engines)
                .await
                .map_err(|e| e.to_string())?;
            opened.push((b, settings));
        }
        warn_about_fixed_settings(&self.config, &new);
        for name in &plan.removed {
            self.fs.remove_backend(name);
            // The kernel may hold the name in its dentry cache: drop it there too.
            if let Err(e) = self
                .notifier
                .inval_entry(INodeNo(ROOT_INO), OsStr::new(name))
            {
                tracing::debug!(backend = %name, error = %e, "no cached entry to invalidate");
            }
        }
        for (config, settings) in opened {
            match self.fs.backend(&config.dir_name) {
                Some(existing) if plan.changed.contains(config) => existing.replace(settings),
                _ => self
                    .fs
                    .add_backend(Arc::new(Backend::new(&config.dir_name, settings))),
            }
        }
        let _ = self.notifier.inval_inode(INodeNo(ROOT_INO), 0, 0);
        self.engines
            .metrics
            .set_mounted_backends(self.fs.backends().len());
        self.config = Config {
            backends: new.backends.clone(),
            auto_sighup_interval: new.auto_sighup_interval,
            ..self.config.clone()
        };
        Ok(plan)
    }
}

/// Settings outside `backends` shape the mount itself (cache size, mountpoint, FUSE options);
/// they take effect at the next mount, which the log says.
fn warn_about_fixed_settings(current: &Config, new: &Config) {
    let without_backends = |c: &Config| Config {
        backends: Vec::new(),
        auto_sighup_interval: None,
        ..c.clone()
    };
    if without_backends(current) != without_backends(new) {
        tracing::warn!("settings outside `backends` changed; they take effect at the next mount");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn backends(yaml: &str) -> Vec<BackendConfig> {
        let env = |_: &str| None;
        config::parse_str(yaml, std::path::Path::new("c.yaml"), &env)
            .expect("valid config")
            .config
            .backends
    }

    const A: &str = "  - dir_name: a\n    backend_type: file\n    bucket_container_name: /data/a\n";
    const B: &str = "  - dir_name: b\n    backend_type: file\n    bucket_container_name: /data/b\n";

    fn config(items: &[&str]) -> Vec<BackendConfig> {
        backends(&format!("msfs_version: 1\nbackends:\n{}", items.concat()))
    }

    #[test]
    fn an_unchanged_config_plans_nothing() {
        assert!(plan(&config(&[A, B]), &config(&[A, B])).is_empty());
    }

    #[test]
    fn added_and_removed_backends_are_found_by_name() {
        let p = plan(&config(&[A]), &config(&[B]));
        assert_eq!(p.removed, ["a"]);
        assert_eq!(
            p.added
                .iter()
                .map(|b| b.dir_name.as_str())
                .collect::<Vec<_>>(),
            ["b"]
        );
        assert!(p.changed.is_empty());
    }

    #[test]
    fn a_permission_change_is_applied_in_place() {
        let changed = A.to_string() + "    file_perm: \"440\"\n";
        let p = plan(&config(&[A]), &config(&[&changed]));
        assert!(p.removed.is_empty() && p.added.is_empty());
        assert_eq!(p.changed.len(), 1);
    }

    #[test]
    fn a_new_bucket_is_a_removal_and_an_addition() {
        let moved = A.replace("/data/a", "/data/elsewhere");
        let p = plan(&config(&[A]), &config(&[&moved]));
        assert_eq!(p.removed, ["a"]);
        assert_eq!(p.added.len(), 1);
    }
}
