//! The deployment artifacts — the Helm chart (`charts/msfs`), the plain manifests (`deploy/`,
//! `deploy/examples/`) and the `Dockerfile` — checked offline for what breaks clusters silently.
//!
//! No API server can run here, so the checks are: `helm lint`; `helm template` with the default
//! values and every auth mode and notable value combination; every rendered object and every
//! file of `deploy/` validated against the Kubernetes 1.35 API schema by `kubernetes-validate
//! --strict`; and the rendered objects read back to check the wiring a schema cannot see — the
//! registrar registers the socket the plugin really listens on, one driver name everywhere,
//! Bidirectional propagation on the plugin's kubelet mount only, the token audience the plugin
//! reads — and that `deploy/` and the default chart agree on all of it. The plugin's command
//! lines and node configs are fed to the real `msfs` binary, and the Dockerfile is linted with
//! hadolint and checked for its stages.
//!
//! helm, kubernetes-validate and hadolint must be on PATH: `scripts/install-test-deps.sh`
//! installs them, and a missing one fails the test with that instruction, never skips it.
//!
//! The helpers live in `deploy_chart/`: [`tools`] runs the tools, [`scenarios`] holds the
//! values the chart is rendered with, [`yaml`] and [`node_pod`] read the manifests back,
//! [`wiring`] checks what a schema cannot (and [`controller`] for the provisioning controller),
//! [`csi_source`] and [`examples`] check the volumes users write, [`chart_values`] what each value must produce, and [`dockerfile`] the image.

mod chart_values;
mod controller;
mod csi_source;
mod dockerfile;
mod examples;
mod files;
mod node_pod;
mod scenarios;
mod tools;
mod wiring;
mod yaml;

use std::collections::BTreeSet;
use std::path::PathBuf;

use serde_yaml_ng::Value;

use dockerfile::Dockerfile;
use files::{cargo_package, manifest_files, read_repo, repo};
use node_pod::NodePod;
use scenarios::{REFUSED_VALUES, SCENARIOS, Scenario};
use tools::{
    KUBE_VERSION, helm_install_dry_run, helm_template, kubernetes_validate, msfs, run, text,
};
use yaml::{data, deploy_docs, name, of_kind, only, parse_docs, scalars, seq, str_at};

fn assert_no_problems(problems: &[String]) {
    assert!(
        problems.is_empty(),
        "{} problem(s):\n  {}",
        problems.len(),
        problems.join("\n  ")
    );
}

// ---------------------------------------------------------------------------------------------
// The chart

#[test]
fn helm_lint_passes() {
    let out = run("helm", &["lint", "--strict", "charts/msfs"]);
    assert!(
        out.status.success(),
        "helm lint --strict charts/msfs:\n{}",
        text(&out)
    );
}

#[test]
fn every_chart_render_is_valid_against_the_kubernetes_api() {
    let dir = tempfile::tempdir().expect("temp dir");
    let files: Vec<PathBuf> = SCENARIOS
        .iter()
        .map(|scenario| {
            let path = dir.path().join(format!("{}.yaml", scenario.name));
            std::fs::write(&path, scenario.render()).expect("write the render");
            path
        })
        .collect();
    let problems = kubernetes_validate(&files);
    assert!(
        problems.is_empty(),
        "rendered charts (file = scenario in SCENARIOS) fail Kubernetes {KUBE_VERSION} schema \
         validation:\n  {}",
        problems.join("\n  ")
    );
}

#[test]
fn every_chart_render_is_wired_right() {
    let mut problems = Vec::new();
    for scenario in SCENARIOS {
        let origin = format!("chart with {}", scenario.describe());
        problems.extend(wiring::wiring(&scenario.docs(), &origin).1);
    }
    assert_no_problems(&problems);
}

/// What each auth mode and notable value must produce beyond the common wiring.
#[test]
fn values_reach_the_objects_they_configure() {
    for (name, expectation) in chart_values::EXPECTATIONS {
        expectation(&Scenario::named(name).docs(), name);
    }
}

/// NOTES.txt is rendered only by `helm install`: a template error there fails the install.
#[test]
fn install_notes_render_for_every_scenario() {
    let mut problems = Vec::new();
    for scenario in SCENARIOS {
        let out = helm_install_dry_run(scenario.sets);
        let output = text(&out);
        let notes = output.split_once("NOTES:").map_or("", |(_, notes)| notes);
        if !out.status.success() || !notes.contains("kubectl get csinode") {
            problems.push(format!(
                "helm install --dry-run=client with {} renders no NOTES:\n{output}",
                scenario.describe()
            ));
        }
    }
    assert_no_problems(&problems);
}

#[test]
fn bad_values_are_refused_at_install() {
    let mut problems = Vec::new();
    for (sets, names) in REFUSED_VALUES {
        match helm_template(sets) {
            Ok(_) => problems.push(format!("helm template accepted {sets:?}")),
            Err(message) if !message.contains(names) => problems.push(format!(
                "helm template refused {sets:?} without naming {names}:\n{message}"
            )),
            Err(_) => {}
        }
    }
    assert_no_problems(&problems);
}

/// The plugin's command line, from deploy/ and every render, parses in the real binary.
#[test]
fn plugin_command_lines_are_ones_msfs_accepts() {
    let mut renders: Vec<(String, Vec<Value>)> = SCENARIOS
        .iter()
        .map(|s| (format!("chart {}", s.name), s.docs()))
        .collect();
    renders.push(("deploy/".into(), deploy_docs()));
    let mut problems = Vec::new();
    for (origin, docs) in &renders {
        let pod = NodePod::in_docs(docs, origin);
        // clap rejects an unknown flag or a bad value before it reaches --help.
        let mut args: Vec<&str> = pod.plugin.args.iter().map(String::as_str).collect();
        args.push("--help");
        let out = msfs(&args, &[]);
        if !out.status.success() {
            problems.push(format!(
                "{origin}: `msfs {}` is refused:\n{}",
                pod.plugin.args.join(" "),
                text(&out)
            ));
        }
    }
    assert_no_problems(&problems);
}

/// The node configs of deploy/ and every render load in the real binary, without warnings.
#[test]
fn node_configs_are_ones_msfs_accepts_without_warnings() {
    let node_configs = |docs: &[Value]| -> Vec<String> {
        of_kind(docs, "ConfigMap")
            .into_iter()
            .map(|cm| data(cm, "config.yaml").expect("config.yaml").to_string())
            .collect()
    };
    let mut configs: Vec<(String, String)> = Vec::new();
    for scenario in SCENARIOS {
        for content in node_configs(&scenario.docs()) {
            configs.push((format!("chart {}", scenario.name), content));
        }
    }
    for content in node_configs(&deploy_docs()) {
        configs.push(("deploy/configmap.yaml".into(), content));
    }
    let dir = tempfile::tempdir().expect("temp dir");
    let mut problems = Vec::new();
    for (i, (origin, content)) in configs.iter().enumerate() {
        let path = dir.path().join(format!("config-{i}.yaml"));
        std::fs::write(&path, content).expect("write config");
        let out = msfs(
            &["check-config", &path.display().to_string()],
            &[("KUBE_NODE_NAME", "node-1")],
        );
        let output = text(&out);
        // A node config has no backends by design; every other warning is a key msfs ignores.
        let warnings: Vec<&str> = output
            .lines()
            .filter(|l| l.contains("WARN"))
            .filter(|l| !l.contains("no backends configured"))
            .collect();
        if !out.status.success() || !warnings.is_empty() {
            problems.push(format!("{origin}: msfs check-config says:\n{output}"));
        }
    }
    assert_no_problems(&problems);
}

// ---------------------------------------------------------------------------------------------
// deploy/

#[test]
fn deploy_manifests_and_examples_are_valid_against_the_kubernetes_api() {
    let deploy = repo().join("deploy");
    let mut files = manifest_files(&deploy);
    files.extend(manifest_files(&deploy.join("controller")));
    files.extend(manifest_files(&deploy.join("examples")));
    assert!(
        files.len() >= 10,
        "expected deploy/ and deploy/examples/ manifests, found {files:?}"
    );
    let problems = kubernetes_validate(&files);
    assert!(
        problems.is_empty(),
        "deploy/ fails Kubernetes {KUBE_VERSION} schema validation:\n  {}",
        problems.join("\n  ")
    );
}

#[test]
fn deploy_is_wired_right_and_agrees_with_the_default_chart() {
    let (deploy_facts, mut problems) = wiring::wiring(&deploy_docs(), "deploy/");
    let chart_docs = parse_docs(&Scenario::named("default").render(), "default chart");
    let (chart_facts, chart_problems) = wiring::wiring(&chart_docs, "default chart");
    problems.extend(chart_problems);
    problems.extend(wiring::disagreements(&deploy_facts, &chart_facts));
    assert_no_problems(&problems);
}

#[test]
fn kustomization_lists_every_deploy_manifest() {
    let deploy = repo().join("deploy");
    let kustomization: Value =
        serde_yaml_ng::from_str(&read_repo("deploy/kustomization.yaml")).expect("YAML");
    let listed: BTreeSet<String> = scalars(&kustomization, "resources").into_iter().collect();
    let present: BTreeSet<String> = manifest_files(&deploy)
        .iter()
        .map(|p| p.file_name().expect("name").to_string_lossy().into_owned())
        .collect();
    assert_eq!(
        listed, present,
        "deploy/kustomization.yaml resources must list exactly the manifests in deploy/"
    );
    let deploy_docs = deploy_docs();
    let image = NodePod::in_docs(&deploy_docs, "deploy/")
        .plugin
        .image()
        .to_string();
    let image_name = image.rsplit_once(':').map_or(image.as_str(), |(n, _)| n);
    assert!(
        seq(&kustomization, "images")
            .iter()
            .any(|i| str_at(i, "name") == Some(image_name)),
        "deploy/kustomization.yaml images should name the plugin image {image_name} so it can be retagged"
    );
}

/// The controller's Deployment, RBAC and StorageClasses, in every render and in
/// deploy/controller/ (with the examples' StorageClasses): wired right, present exactly when
/// asked for, the node plugin told about it.
#[test]
fn the_controller_is_wired_right_in_every_render_and_in_deploy() {
    let mut problems = Vec::new();
    for scenario in SCENARIOS {
        let docs = scenario.docs();
        let origin = format!("chart with {}", scenario.describe());
        let driver = name(only(&docs, "CSIDriver", &origin)).to_string();
        let node = NodePod::in_docs(&docs, &origin);
        problems.extend(controller::problems(
            &docs,
            &driver,
            Some(&node.plugin.args),
            &origin,
        ));
        let wanted = scenario.sets.contains(&"controller.enabled=true");
        if controller::deployments(&docs).len() != usize::from(wanted) {
            problems.push(format!(
                "{origin}: a controller Deployment only with controller.enabled"
            ));
        }
    }
    let deploy = repo().join("deploy");
    let mut docs = Vec::new();
    for file in manifest_files(&deploy.join("controller"))
        .into_iter()
        .chain(manifest_files(&deploy.join("examples")))
    {
        docs.extend(parse_docs(
            &read_repo(
                &file
                    .strip_prefix(repo())
                    .expect("in repo")
                    .display()
                    .to_string(),
            ),
            "deploy/",
        ));
    }
    let driver = name(only(&deploy_docs(), "CSIDriver", "deploy/")).to_string();
    problems.extend(controller::problems(
        &docs,
        &driver,
        None,
        "deploy/controller/",
    ));
    if controller::deployments(&docs).len() != 1 {
        problems.push("deploy/controller/ has no controller Deployment".into());
    }
    if !of_kind(&docs, "StorageClass")
        .iter()
        .any(|c| str_at(c, "provisioner") == Some(driver.as_str()))
    {
        problems.push("deploy/examples/ has no StorageClass of the driver".into());
    }
    let kustomization: Value =
        serde_yaml_ng::from_str(&read_repo("deploy/controller/kustomization.yaml")).expect("YAML");
    let listed: BTreeSet<String> = scalars(&kustomization, "resources").into_iter().collect();
    let present: BTreeSet<String> = manifest_files(&deploy.join("controller"))
        .iter()
        .map(|p| p.file_name().expect("name").to_string_lossy().into_owned())
        .collect();
    if listed != present {
        problems.push(format!(
            "deploy/controller/kustomization.yaml lists {listed:?}, the directory holds {present:?}"
        ));
    }
    // The controller's command line parses in the real binary (clap refuses an unknown flag
    // before it reaches --help).
    let controller_docs = Scenario::named("controller").docs();
    for (origin, docs) in [
        ("chart controller", &controller_docs),
        ("deploy/controller/", &docs),
    ] {
        for deployment in controller::deployments(docs) {
            let msfs_container = controller::container(deployment, "msfs").expect("msfs container");
            let mut args = scalars(msfs_container, "args");
            args.push("--help".into());
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            let out = msfs(&args, &[]);
            if !out.status.success() {
                problems.push(format!(
                    "{origin}: `msfs {}` is refused:\n{}",
                    args.join(" "),
                    text(&out)
                ));
            }
        }
    }
    assert_no_problems(&problems);
}

#[test]
fn examples_use_the_driver_attributes_and_secrets_the_plugin_knows() {
    let deploy_docs = deploy_docs();
    let driver = name(only(&deploy_docs, "CSIDriver", "deploy/"));
    assert_no_problems(&examples::problems(driver));
}

// ---------------------------------------------------------------------------------------------
// Versions and the image

#[test]
fn versions_agree_with_the_crate() {
    let version = cargo_package("version");
    let chart: Value =
        serde_yaml_ng::from_str(&read_repo("charts/msfs/Chart.yaml")).expect("Chart.yaml");
    assert_eq!(
        str_at(&chart, "appVersion"),
        Some(version.as_str()),
        "charts/msfs/Chart.yaml appVersion must be the crate version (Cargo.toml)"
    );
    let docs = deploy_docs();
    assert_eq!(
        NodePod::in_docs(&docs, "deploy/").plugin.image(),
        format!("msfs:{version}"),
        "deploy/daemonset.yaml runs the image of the crate version"
    );
    let dockerfile = Dockerfile::read();
    assert_eq!(
        dockerfile.arg("MSFS_VERSION").as_deref(),
        Some(version.as_str()),
        "Dockerfile ARG MSFS_VERSION must be the crate version"
    );
    assert_eq!(
        dockerfile.arg("RUST_VERSION"),
        Some(cargo_package("rust-version")),
        "Dockerfile ARG RUST_VERSION must be Cargo.toml's rust-version"
    );
}

#[test]
fn dockerfile_builds_locked_in_a_builder_and_ships_no_build_tools() {
    assert_no_problems(&Dockerfile::read().problems());
}

#[test]
fn hadolint_passes_on_the_dockerfile() {
    let out = run("hadolint", &["--no-color", "Dockerfile"]);
    assert!(out.status.success(), "hadolint Dockerfile:\n{}", text(&out));
}
