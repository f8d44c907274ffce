//! The cluster wiring a schema cannot see, read back from a set of manifests (a chart render or
//! `deploy/`): the registrar registers the socket the plugin really listens on, one driver name
//! everywhere, Bidirectional propagation on the plugin's kubelet mount only, the state directory
//! and node config where the plugin looks for them, memory for its cache, ports and probes that
//! meet, the token audience the plugin reads, and the identity and scheduling a node plugin
//! needs.
//!
//! Each check says what is wrong, in words. Alongside, the wiring is summed up as [`Facts`],
//! which `deploy/` and the default chart must share.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Display;

use serde_yaml_ng::Value;

use crate::deploy_chart::dockerfile::IMAGE_BINARY;
use crate::deploy_chart::node_pod::{Container, NodePod};
use crate::deploy_chart::yaml::{
    at, data, name, of_kind, only, scalar, scalars, seq, str_at, to_yaml,
};

/// The audience the plugin reads from `csi.storage.k8s.io/serviceAccount.tokens`
/// (`STS_AUDIENCE` in src/csi/credentials.rs).
pub const STS_AUDIENCE: &str = "sts.amazonaws.com";
/// Defaults of `msfs csi` (src/main.rs `CsiArgs`).
const DEFAULT_ENDPOINT: &str = "unix:///csi/csi.sock";
const DEFAULT_KUBELET_DIR: &str = "/var/lib/kubelet";
const DEFAULT_STATE_DIR: &str = "/var/lib/msfs-csi";

/// Facts that `deploy/` and the default chart render must share, by name.
pub type Facts = BTreeMap<String, String>;

/// The facts of the manifests `docs`, and what is wrong with their wiring, each problem
/// prefixed with `origin`.
pub fn wiring(docs: &[Value], origin: &str) -> (Facts, Vec<String>) {
    let mut out = Findings {
        origin,
        problems: Vec::new(),
        facts: Facts::new(),
    };
    let driver = only(docs, "CSIDriver", origin);
    let pod = NodePod::in_docs(docs, origin);

    let driver_name = driver_name(driver, &pod.plugin, &mut out);
    let registration = plugin_socket(&pod, &mut out);
    let kubelet_dir = kubelet_dir(&pod, &driver_name, &registration, &mut out);
    mounts_reach_the_pods(&pod, &kubelet_dir, &mut out);
    state_dir_and_fuse(&pod, &mut out);
    fd_holder(&pod, &mut out);
    argument_variables_and_node_id(&pod.plugin, &mut out);
    let node_config = node_config(docs, &pod, &mut out);
    cache_dir(&node_config, &pod, &mut out);
    memory(&node_config, &pod.plugin, &mut out);
    ports_and_probes(docs, &pod, &mut out);
    driver_behaviour(driver, &mut out);
    identity_and_permissions(docs, &pod, &mut out);
    scheduling(&pod, &mut out);
    plugin_command(&pod.plugin, &mut out);
    pod_facts(driver, &pod, &mut out);
    (out.facts, out.problems)
}

/// Where the facts of `deploy/` and of the default chart differ, each in words.
pub fn disagreements(deploy: &Facts, chart: &Facts) -> Vec<String> {
    let keys: BTreeSet<&String> = deploy.keys().chain(chart.keys()).collect();
    let mut problems = Vec::new();
    for key in keys {
        let (d, c) = (deploy.get(key), chart.get(key));
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
    problems
}

/// What the checks of one set of manifests found.
struct Findings<'o> {
    origin: &'o str,
    problems: Vec<String>,
    facts: Facts,
}

impl Findings<'_> {
    fn problem(&mut self, problem: impl Display) {
        self.problems.push(format!("{}: {problem}", self.origin));
    }

    fn fact(&mut self, key: impl Into<String>, value: impl Into<String>) {
        self.facts.insert(key.into(), value.into());
    }
}

/// One driver name: the CSIDriver's, which the plugin's --driver-name must repeat.
fn driver_name(driver: &Value, plugin: &Container, out: &mut Findings) -> String {
    let driver_name = name(driver).to_string();
    let plugin_driver = plugin
        .flag("driver-name")
        .unwrap_or_else(|| msfs::csi::DEFAULT_DRIVER_NAME.to_string());
    if let Err(e) = msfs::csi::check_driver_name(&driver_name) {
        out.problem(format!("CSIDriver name: {e}"));
    }
    if plugin_driver != driver_name {
        out.problem(format!(
            "the plugin's --driver-name is {plugin_driver:?} but the CSIDriver is {driver_name:?}: \
             kubelet would find no driver for the PVs"
        ));
    }
    out.fact("driver name", driver_name.clone());
    driver_name
}

/// The plugin's socket, as the registrar registers it and the sidecars reach it; returns the
/// registrar's --kubelet-registration-path.
fn plugin_socket(pod: &NodePod, out: &mut Findings) -> String {
    let (plugin, registrar, probe) = (&pod.plugin, &pod.registrar, &pod.probe);
    let endpoint = plugin
        .flag("endpoint")
        .unwrap_or_else(|| DEFAULT_ENDPOINT.to_string());
    let socket = socket_of(&endpoint);
    let plugin_socket = pod.host_path(plugin, &socket).unwrap_or_else(|e| {
        out.problem(format!(
            "the plugin's --endpoint {endpoint}: {e}; kubelet cannot reach the socket"
        ));
        String::new()
    });
    let registration = registrar
        .flag("kubelet-registration-path")
        .unwrap_or_default();
    if registration != plugin_socket {
        out.problem(format!(
            "the registrar's --kubelet-registration-path is {registration:?} but the plugin's \
             socket ({endpoint} in the plugin container) is {plugin_socket:?} on the node: \
             kubelet would dial a socket nobody listens on"
        ));
    }
    for (who, sidecar) in [("registrar", registrar), ("liveness probe", probe)] {
        match sidecar.flag("csi-address") {
            None => out.problem(format!("the {who} has no --csi-address")),
            Some(address) => match pod.host_path(sidecar, &socket_of(&address)) {
                Ok(host) if host == plugin_socket => {}
                Ok(host) => out.problem(format!(
                    "the {who}'s --csi-address {address} is {host:?} on the node, not the \
                     plugin's socket {plugin_socket:?}"
                )),
                Err(e) => out.problem(format!("the {who}'s --csi-address {address}: {e}")),
            },
        }
    }
    out.fact("registration path", registration.clone());
    out.fact("plugin socket on the node", plugin_socket);
    registration
}

/// kubelet's directory, from the plugin's flag: the registration paths must be under it.
/// Returns it without a trailing `/`.
fn kubelet_dir(pod: &NodePod, driver_name: &str, registration: &str, out: &mut Findings) -> String {
    let kubelet_dir = pod
        .plugin
        .flag("kubelet-dir")
        .unwrap_or_else(|| DEFAULT_KUBELET_DIR.to_string());
    let kubelet_dir = kubelet_dir.trim_end_matches('/').to_string();
    let expected_registration = format!("{kubelet_dir}/plugins/{driver_name}/csi.sock");
    if registration != expected_registration {
        out.problem(format!(
            "the registrar's --kubelet-registration-path is {registration:?}; with --kubelet-dir \
             {kubelet_dir} and driver {driver_name} it must be {expected_registration:?}"
        ));
    }
    match pod.host_path(&pod.registrar, "/registration/x") {
        Ok(host) if host == format!("{kubelet_dir}/plugins_registry/x") => {}
        Ok(host) => out.problem(format!(
            "the registrar's /registration is {:?} on the node, not {kubelet_dir}/plugins_registry: \
             kubelet never sees the registration",
            parent(&host)
        )),
        Err(e) => out.problem(format!("the registrar's /registration: {e}")),
    }
    out.fact("kubelet dir", kubelet_dir.clone());
    kubelet_dir
}

/// The plugin's FUSE mounts reach the pods: it mounts kubelet's directory, the only
/// Bidirectional mount of the pod, at the node's path, and is privileged.
fn mounts_reach_the_pods(pod: &NodePod, kubelet_dir: &str, out: &mut Findings) {
    let plugin = &pod.plugin;
    let mut bidirectional = Vec::new();
    for (_, container) in pod.containers() {
        for mount in container.mounts() {
            let mode = str_at(mount, "mountPropagation").unwrap_or("None");
            let path = str_at(mount, "mountPath").unwrap_or("");
            if mode == "Bidirectional" {
                bidirectional.push((container.name.clone(), path.to_string()));
            } else if mode != "None" && container.name != plugin.name {
                out.problem(format!(
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
        out.problem(format!(
            "the plugin does not mount --kubelet-dir {kubelet_dir} with Bidirectional \
             propagation: its FUSE mounts would never reach the pods"
        ));
    }
    for (container, path) in &bidirectional {
        if *container != plugin.name || path.trim_end_matches('/') != kubelet_dir {
            out.problem(format!(
                "container {container} mounts {path} Bidirectional; only the plugin's \
                 kubelet directory should propagate mounts back to the node"
            ));
        }
    }
    match pod.host_path(plugin, &format!("{kubelet_dir}/pods")) {
        Ok(host) if host == format!("{kubelet_dir}/pods") => {}
        Ok(host) => out.problem(format!(
            "the plugin's {kubelet_dir}/pods is {host:?} on the node: targets kubelet sends \
             would not be where the plugin mounts"
        )),
        Err(e) => out.problem(format!("the plugin's --kubelet-dir: {e}")),
    }
    if at(plugin.value, "securityContext.privileged").as_bool() != Some(true) {
        out.problem("the plugin is not privileged: it cannot mount FUSE or propagate mounts");
    }
}

/// The state directory must be the node's, and /dev/fuse must be there.
fn state_dir_and_fuse(pod: &NodePod, out: &mut Findings) {
    let state_dir = pod
        .plugin
        .flag("state-dir")
        .unwrap_or_else(|| DEFAULT_STATE_DIR.to_string());
    let state_host = pod.host_path(&pod.plugin, &state_dir).unwrap_or_else(|e| {
        out.problem(format!(
            "--state-dir {state_dir}: {e}; it would not outlive a plugin restart"
        ));
        String::new()
    });
    if pod.host_path(&pod.plugin, "/dev/fuse").as_deref() != Ok("/dev/fuse") {
        out.problem("the plugin does not mount the node's /dev/fuse");
    }
    out.fact("state dir on the node", state_host);
}

/// The plugin's `--fd-holder-socket` is the holder container's `--socket`, on the same node
/// path for both, and names the pod (`$(POD_NAME)`, defined in both): in an upgrade the old
/// and the new pod's holders run side by side in one directory.
fn fd_holder(pod: &NodePod, out: &mut Findings) {
    let Some(holder) = pod.fd_holder() else {
        out.problem("no fd-holder container: a plugin restart would end every pod's mount");
        return;
    };
    let (Some(theirs), Some(ours)) = (holder.flag("socket"), pod.plugin.flag("fd-holder-socket"))
    else {
        out.problem("the fd holder's --socket or the plugin's --fd-holder-socket is missing");
        return;
    };
    if theirs != ours {
        out.problem(format!(
            "the plugin's --fd-holder-socket {ours} is not the holder's --socket {theirs}"
        ));
    }
    if pod.host_path(&holder, &theirs) != pod.host_path(&pod.plugin, &ours) {
        out.problem("the fd holder's socket and the plugin's are not one path on the node");
    }
    if !ours.contains("$(POD_NAME)") {
        out.problem(format!(
            "--fd-holder-socket {ours} does not name the pod: two pods' holders would collide"
        ));
    }
    for container in [&holder, &pod.plugin] {
        let from = container
            .env("POD_NAME")
            .map(|v| str_at(v, "valueFrom.fieldRef.fieldPath"));
        if from != Some(Some("metadata.name")) {
            out.problem(format!(
                "container {} has no POD_NAME from metadata.name",
                container.name
            ));
        }
    }
    out.fact("fd holder socket", ours);
}

/// $(VAR) in the plugin's arguments must be defined, or kubelet passes it literally; the node
/// id must come from the pod's node.
fn argument_variables_and_node_id(plugin: &Container, out: &mut Findings) {
    for arg in &plugin.args {
        let mut rest = arg.as_str();
        while let Some(start) = rest.find("$(") {
            let Some(end) = rest[start..].find(')') else {
                break;
            };
            let var = &rest[start + 2..start + end];
            if plugin.env(var).is_none() {
                out.problem(format!(
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
        out.problem("the plugin has neither --node-id nor KUBE_NODE_NAME");
    }
    if node_from_env.is_some_and(|f| f != "spec.nodeName") {
        out.problem("KUBE_NODE_NAME is not the pod's spec.nodeName");
    }
}

/// The node config the plugin reads (its NODE_CONFIG argument or MSFS_CSI_CONFIG), which must
/// be a file from a ConfigMap among `docs`; Null when it is not there.
fn node_config(docs: &[Value], pod: &NodePod, out: &mut Findings) -> Value {
    let plugin = &pod.plugin;
    let config_path = plugin.positionals().first().cloned().or_else(|| {
        plugin
            .env("MSFS_CSI_CONFIG")
            .and_then(|e| str_at(e, "value"))
            .map(str::to_string)
    });
    let Some(path) = config_path else {
        out.problem("the plugin gets no NODE_CONFIG: the cache runs on defaults in /tmp");
        return Value::Null;
    };
    let Some(mount) = pod.mount_of(plugin, &path) else {
        out.problem(format!("NODE_CONFIG {path} is on no volume of the plugin"));
        return Value::Null;
    };
    let volume = pod.volume(str_at(mount, "name").unwrap_or(""));
    let key = path[str_at(mount, "mountPath").unwrap_or("").len()..].trim_start_matches('/');
    let Some(cm) = volume.and_then(|v| str_at(v, "configMap.name")) else {
        out.problem(format!("NODE_CONFIG {path} is not from a ConfigMap"));
        return Value::Null;
    };
    let found = of_kind(docs, "ConfigMap")
        .into_iter()
        .find(|d| name(d) == cm);
    let Some(content) = found.and_then(|d| data(d, key)) else {
        out.problem(format!(
            "NODE_CONFIG {path} needs ConfigMap {cm} with key {key}, which is not among the \
             manifests"
        ));
        return Value::Null;
    };
    out.fact("node config", content);
    serde_yaml_ng::from_str(content).unwrap_or_else(|e| {
        out.problem(format!("ConfigMap {cm} {key} is not YAML: {e}"));
        Value::Null
    })
}

/// The node config names a cache directory on a writable volume of the plugin.
fn cache_dir(node_config: &Value, pod: &NodePod, out: &mut Findings) {
    let cache_dir = str_at(node_config, "cache_dir_path").unwrap_or("");
    if cache_dir.is_empty() {
        out.problem("the node config sets no cache_dir_path: cache and spilled writes go to /tmp");
        return;
    }
    match pod.mount_of(&pod.plugin, cache_dir) {
        Some(mount) if at(mount, "readOnly").as_bool() != Some(true) => {}
        _ => out.problem(format!(
            "cache_dir_path {cache_dir} is on no writable volume of the plugin"
        )),
    }
}

/// Memory: a `mapped-file` cache's capacity must fit the limit (its pages are charged to the
/// container, and msfs does not size them down), and the plugin is not throttled. A `ram` or
/// `tiered` cache larger than the limit is no problem of the render: msfs sizes its RAM down to
/// its memory target at start, and warns (`tests/it/memory_target.rs`).
fn memory(node_config: &Value, plugin: &Container, out: &mut Findings) {
    let storage = str_at(node_config, "cache_storage").unwrap_or("mapped-file");
    // Of a tiered cache, the RAM tier is the process's memory; its disk tier is what it adds.
    let lines = match storage {
        "tiered" => at(node_config, "cache_ram_lines").as_u64(),
        _ => at(node_config, "cache_lines").as_u64(),
    };
    let capacity = at(node_config, "cache_line_size")
        .as_u64()
        .unwrap_or(10_485_760)
        * lines.unwrap_or(128);
    let limit = str_at(plugin.value, "resources.limits.memory").and_then(quantity_bytes);
    let request = str_at(plugin.value, "resources.requests.memory").and_then(quantity_bytes);
    match (limit, request) {
        (Some(limit), Some(request)) => {
            if storage == "mapped-file" && limit < capacity {
                out.problem(format!(
                    "the plugin's memory limit ({limit} B) is below its {storage} cache \
                     ({capacity} B): the cache's pages would be reclaimed as fast as they fill"
                ));
            }
            if request < limit {
                out.problem(
                    "the plugin requests less memory than its limit: the node may \
                         overcommit it and evict the plugin with every mount",
                );
            }
        }
        _ => out.problem("the plugin has no memory request and limit"),
    }
    if !at(plugin.value, "resources.limits.cpu").is_null() {
        out.problem("the plugin has a CPU limit: throttling stalls every pod reading through it");
    }
}

/// The metrics port, the Services that target it, the liveness probes and the port names.
fn ports_and_probes(docs: &[Value], pod: &NodePod, out: &mut Findings) {
    let (plugin, registrar, probe) = (&pod.plugin, &pod.registrar, &pod.probe);
    if let Some(address) = plugin.flag("metrics-address") {
        let port = port_of(&address);
        if plugin.port("metrics").as_deref() != Some(port) {
            out.problem(format!(
                "--metrics-address {address} but the plugin's port `metrics` is {:?}",
                plugin.port("metrics")
            ));
        }
        for service in of_kind(docs, "Service") {
            for p in seq(service, "spec.ports") {
                let target = scalar(&p["targetPort"]);
                if target != "metrics" && target != port {
                    out.problem(format!(
                        "Service {} targets port {target}, not the plugin's metrics port",
                        name(service)
                    ));
                }
            }
        }
        out.fact("metrics address", address);
    }
    let health = probe.flag("health-port").unwrap_or_else(|| "9808".into());
    let probe_port = plugin.liveness_port();
    if probe_port != health {
        out.problem(format!(
            "the plugin's livenessProbe asks port {probe_port} but the livenessprobe sidecar \
             serves /healthz on {health}"
        ));
    }
    if let Some(endpoint) = registrar.flag("http-endpoint") {
        let port = port_of(&endpoint);
        let asked = registrar.liveness_port();
        if asked != port {
            out.problem(format!(
                "the registrar serves /healthz on {port} but its livenessProbe asks {asked}"
            ));
        }
    }
    for (_, container) in pod.containers() {
        for p in seq(container.value, "ports") {
            let port_name = str_at(p, "name").unwrap_or("");
            if port_name.len() > 15 {
                out.problem(format!(
                    "port name {port_name:?} is longer than 15 characters"
                ));
            }
        }
    }
}

/// The CSIDriver's behaviour: no attach, pod info and tokens of the audience the plugin reads,
/// republished before they expire.
fn driver_behaviour(driver: &Value, out: &mut Findings) {
    let spec = at(driver, "spec");
    if at(spec, "attachRequired").as_bool() != Some(false) {
        out.problem(
            "CSIDriver attachRequired is not false: pods would wait for an attacher that does not exist",
        );
    }
    if at(spec, "podInfoOnMount").as_bool() != Some(true) {
        out.problem("CSIDriver podInfoOnMount is not true");
    }
    if !scalars(spec, "volumeLifecycleModes")
        .iter()
        .any(|m| m == "Persistent")
    {
        out.problem("CSIDriver volumeLifecycleModes lacks Persistent");
    }
    let tokens = seq(spec, "tokenRequests");
    for token in tokens {
        let audience = str_at(token, "audience").unwrap_or("");
        if audience != STS_AUDIENCE {
            out.problem(format!(
                "CSIDriver tokenRequests asks audience {audience:?}; the plugin reads only \
                 {STS_AUDIENCE:?}"
            ));
        }
        if at(token, "expirationSeconds")
            .as_u64()
            .is_some_and(|s| s < 600)
        {
            out.problem("tokenRequests expirationSeconds below 600 is refused by the API");
        }
    }
    if !tokens.is_empty() && at(spec, "requiresRepublish").as_bool() != Some(true) {
        out.problem(
            "CSIDriver has tokenRequests without requiresRepublish: pod credentials would \
             expire with the first token",
        );
    }
}

/// The DaemonSet's ServiceAccount exists, is bound, and may only get ServiceAccounts.
fn identity_and_permissions(docs: &[Value], pod: &NodePod, out: &mut Findings) {
    let account = str_at(pod.spec, "serviceAccountName").unwrap_or("");
    let namespace = str_at(pod.daemonset, "metadata.namespace").unwrap_or("");
    if !of_kind(docs, "ServiceAccount")
        .iter()
        .any(|sa| name(sa) == account)
    {
        out.problem(format!(
            "the DaemonSet's ServiceAccount {account:?} is not among the manifests"
        ));
    }
    // The provisioning controller's own are checked by `controller`.
    let node_side = |doc: &&Value| {
        at(doc, "metadata.labels")["app.kubernetes.io/component"].as_str() != Some("controller")
    };
    for binding in of_kind(docs, "ClusterRoleBinding")
        .into_iter()
        .filter(node_side)
    {
        let bound = seq(binding, "subjects").iter().any(|s| {
            str_at(s, "name") == Some(account) && str_at(s, "namespace") == Some(namespace)
        });
        if !bound {
            out.problem(format!(
                "ClusterRoleBinding {} does not bind {namespace}/{account}",
                name(binding)
            ));
        }
    }
    let expected: Value = serde_yaml_ng::from_str(
        "- apiGroups: ['']\n  resources: [serviceaccounts]\n  verbs: [get]\n",
    )
    .expect("expected rules");
    for role in of_kind(docs, "ClusterRole").into_iter().filter(node_side) {
        if *at(role, "rules") != expected {
            out.problem(format!(
                "ClusterRole {} grants more or other than get serviceaccounts:\n{}",
                name(role),
                to_yaml(at(role, "rules"))
            ));
        }
    }
    out.fact("namespace", namespace);
    out.fact("service account", account);
}

/// Scheduling: every node, whatever its taints, and cluster DNS on the host network.
fn scheduling(pod: &NodePod, out: &mut Findings) {
    let tolerations = seq(pod.spec, "tolerations");
    if !tolerations
        .iter()
        .any(|t| str_at(t, "operator") == Some("Exists") && at(t, "key").is_null())
    {
        out.problem("the plugin does not tolerate every taint (operator: Exists without a key)");
    }
    let selector = at(pod.daemonset, "spec.selector.matchLabels");
    let labels = at(pod.daemonset, "spec.template.metadata.labels");
    for (k, v) in selector.as_mapping().into_iter().flatten() {
        if labels.get(k) != Some(v) {
            out.problem(format!(
                "the DaemonSet's selector {} is not on its pod template",
                scalar(k)
            ));
        }
    }
    if at(pod.spec, "hostNetwork").as_bool() == Some(true)
        && str_at(pod.spec, "dnsPolicy") != Some("ClusterFirstWithHostNet")
    {
        out.problem("hostNetwork without dnsPolicy ClusterFirstWithHostNet: no cluster DNS");
    }
}

/// The plugin's command, if it sets one, is the binary the image ships.
fn plugin_command(plugin: &Container, out: &mut Findings) {
    let command = scalars(plugin.value, "command");
    if command.first().is_some_and(|c| c != IMAGE_BINARY) {
        out.problem(format!(
            "the plugin runs {command:?}; the image has msfs at {IMAGE_BINARY}"
        ));
    }
    out.fact("plugin command", command.join(" "));
}

/// The rest of what `deploy/` and the default chart must share: each container's arguments,
/// image and mounts, and the driver's and pod's settings.
fn pod_facts(driver: &Value, pod: &NodePod, out: &mut Findings) {
    for (role, container) in pod.containers() {
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
        out.fact(format!("{role} args"), container.args.join(" "));
        out.fact(format!("{role} image"), container.image());
        out.fact(format!("{role} mounts"), mounts.join(", "));
    }
    out.fact("CSIDriver spec", to_yaml(at(driver, "spec")));
    for (label, path) in [
        ("plugin resources", "resources"),
        ("plugin securityContext", "securityContext"),
        ("plugin env", "env"),
    ] {
        out.fact(label, to_yaml(at(pod.plugin.value, path)));
    }
    for (label, path) in [
        ("tolerations", "tolerations"),
        ("priority class", "priorityClassName"),
        ("node selector", "nodeSelector"),
        ("host network", "hostNetwork"),
        ("termination grace", "terminationGracePeriodSeconds"),
    ] {
        out.fact(label, to_yaml(at(pod.spec, path)));
    }
    out.fact(
        "update strategy",
        to_yaml(at(pod.daemonset, "spec.updateStrategy")),
    );
}

/// The socket path of a `unix://` endpoint.
fn socket_of(endpoint: &str) -> String {
    endpoint
        .strip_prefix("unix://")
        .or_else(|| endpoint.strip_prefix("unix:"))
        .unwrap_or(endpoint)
        .to_string()
}

/// The port of `host:port`.
fn port_of(address: &str) -> &str {
    address.rsplit(':').next().unwrap_or("")
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
