//! The example manifests of `deploy/examples/`, which users copy: every PV and inline volume a
//! source the plugin accepts, every Secret with the keys it reads, every PV bound to a claim of
//! its file, every pod mounting msfs with HostToContainer propagation, and every way to
//! authenticate shown at least once.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use serde_yaml_ng::Value;

use crate::deploy_chart::csi_source::{authentication_source, check_csi_source};
use crate::deploy_chart::files::{manifest_files, read, repo};
use crate::deploy_chart::yaml::{at, name, of_kind, parse_docs, scalar, seq, str_at};

/// What is wrong with the examples of the CSI driver `driver`, in words.
pub fn problems(driver: &str) -> Vec<String> {
    let examples = manifest_files(&repo().join("deploy/examples"));
    let mut survey = Survey {
        driver,
        problems: Vec::new(),
        sources: BTreeSet::new(),
    };
    for file in &examples {
        survey.file(file);
    }
    let Survey {
        mut problems,
        sources,
        ..
    } = survey;
    for wanted in [
        "driver",
        "secret",
        "pod",
        "anonymous",
        "inline",
        "storageclass",
    ] {
        if !sources.contains(wanted) {
            problems.push(format!("deploy/examples/ has no example of {wanted}"));
        }
    }
    let multi = examples.iter().any(|f| read(f).contains("backendsJson"));
    if !multi {
        problems.push("deploy/examples/ has no backendsJson example".into());
    }
    problems
}

/// The walk through the examples: what is wrong, and which ways to use a volume they show
/// (the authentication sources, and `inline`).
struct Survey<'d> {
    driver: &'d str,
    problems: Vec<String>,
    sources: BTreeSet<String>,
}

impl Survey<'_> {
    fn file(&mut self, file: &Path) {
        let origin = file
            .strip_prefix(repo())
            .unwrap_or(file)
            .display()
            .to_string();
        let docs = parse_docs(&read(file), &origin);
        let claims: BTreeMap<String, &Value> = of_kind(&docs, "PersistentVolumeClaim")
            .into_iter()
            .map(|c| (name(c).to_string(), c))
            .collect();
        for pv in of_kind(&docs, "PersistentVolume") {
            self.persistent_volume(pv, &docs, &claims, &origin);
        }
        let classes = self.storage_classes(&docs, &origin);
        // A claim of one of the file's StorageClasses is an msfs volume too, bound to none of
        // the file's PVs: the controller makes one.
        let claims: BTreeMap<String, &Value> = claims
            .into_iter()
            .filter(|(_, c)| {
                str_at(c, "spec.volumeName").is_some()
                    || str_at(c, "spec.storageClassName").is_some_and(|n| classes.contains(n))
            })
            .collect();
        let pods = of_kind(&docs, "Pod");
        for pod in &pods {
            self.pod(pod, &claims, &origin);
        }
        if pods.is_empty() {
            self.problems
                .push(format!("{origin}: no Pod shows how to use the volume"));
        }
    }

    /// The file's StorageClasses of the driver, by name: parameters the controller knows, and
    /// the Secrets they name, when in the file, holding the keys it reads.
    fn storage_classes(&mut self, docs: &[Value], origin: &str) -> BTreeSet<String> {
        let mut names = BTreeSet::new();
        for class in of_kind(docs, "StorageClass") {
            if str_at(class, "provisioner") != Some(self.driver) {
                continue;
            }
            names.insert(name(class).to_string());
            self.sources.insert("storageclass".into());
            self.problems
                .extend(crate::deploy_chart::controller::storage_class_problems(
                    std::slice::from_ref(class),
                    self.driver,
                    origin,
                ));
            let parameters = at(class, "parameters");
            for role in ["provisioner", "node-publish"] {
                let key = format!("csi.storage.k8s.io/{role}-secret-name");
                let Some(secret) = parameters[key.as_str()].as_str() else {
                    continue;
                };
                let found = of_kind(docs, "Secret").into_iter().any(|s| {
                    let keys = at(s, "stringData");
                    name(s) == secret
                        && !keys["access_key_id"].is_null()
                        && !keys["secret_access_key"].is_null()
                });
                if !found {
                    self.problems.push(format!(
                        "{origin}: StorageClass {} names {role} Secret {secret}, not in the file \
                         with access_key_id and secret_access_key",
                        name(class)
                    ));
                }
            }
        }
        names
    }

    /// A PV: its source, its Secret's keys, its claim in the same file.
    fn persistent_volume(
        &mut self,
        pv: &Value,
        docs: &[Value],
        claims: &BTreeMap<String, &Value>,
        origin: &str,
    ) {
        let csi = at(pv, "spec.csi");
        self.problems.extend(check_csi_source(
            csi,
            self.driver,
            &format!("{origin} PV {}", name(pv)),
        ));
        self.sources.insert(authentication_source(csi).to_string());
        if let Some(secret) = str_at(csi, "nodePublishSecretRef.name") {
            for s in of_kind(docs, "Secret")
                .into_iter()
                .filter(|s| name(s) == secret)
            {
                let keys = at(s, "stringData");
                let has = |k: &str| !keys[k].is_null();
                if !((has("access_key_id") && has("secret_access_key"))
                    || (has("key_id") && has("access_key")))
                {
                    self.problems.push(format!(
                        "{origin}: Secret {secret} lacks access_key_id and secret_access_key"
                    ));
                }
            }
        }
        let claim = str_at(pv, "spec.claimRef.name").unwrap_or("");
        match claims.get(claim) {
            Some(pvc) if str_at(pvc, "spec.volumeName") == Some(name(pv)) => {}
            _ => self.problems.push(format!(
                "{origin}: PV {} is not bound to a PVC of this file by volumeName",
                name(pv)
            )),
        }
    }

    /// A pod: its inline volumes' sources, and HostToContainer on every mount of an msfs
    /// volume (inline, or a claim of the file).
    fn pod(&mut self, pod: &Value, claims: &BTreeMap<String, &Value>, origin: &str) {
        let spec = at(pod, "spec");
        let msfs_volumes: BTreeSet<String> = seq(spec, "volumes")
            .iter()
            .filter(|v| {
                str_at(v, "csi.driver") == Some(self.driver)
                    || str_at(v, "persistentVolumeClaim.claimName")
                        .is_some_and(|c| claims.contains_key(c))
            })
            .map(|v| str_at(v, "name").unwrap_or("").to_string())
            .collect();
        for volume in seq(spec, "volumes") {
            let csi = at(volume, "csi");
            if !csi.is_null() {
                self.problems.extend(check_csi_source(
                    csi,
                    self.driver,
                    &format!("{origin} inline volume {}", scalar(&volume["name"])),
                ));
                self.sources.insert("inline".into());
                self.sources.insert(authentication_source(csi).to_string());
            }
        }
        for container in seq(spec, "containers") {
            for mount in seq(container, "volumeMounts") {
                let volume = str_at(mount, "name").unwrap_or("");
                if msfs_volumes.contains(volume)
                    && str_at(mount, "mountPropagation") != Some("HostToContainer")
                {
                    self.problems.push(format!(
                        "{origin}: pod {} mounts msfs volume {volume} without \
                         mountPropagation: HostToContainer",
                        name(pod)
                    ));
                }
            }
        }
    }
}
