//! The node DaemonSet's pod, typed: its plugin, registrar and liveness-probe containers (flags,
//! env, ports, mounts) and where a path inside a container lands on the node.

use serde_yaml_ng::Value;

use crate::deploy_chart::yaml::{at, only, scalar, scalars, seq, str_at};

/// One container of the node pod, with its arguments as text.
pub struct Container<'a> {
    pub value: &'a Value,
    pub name: String,
    pub args: Vec<String>,
}

impl<'a> Container<'a> {
    fn new(value: &'a Value) -> Self {
        Container {
            value,
            name: str_at(value, "name").unwrap_or("").to_string(),
            args: scalars(value, "args"),
        }
    }

    /// `--name=value` or `--name value`.
    pub fn flag(&self, name: &str) -> Option<String> {
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
    pub fn positionals(&self) -> Vec<String> {
        let mut out = Vec::new();
        let mut iter = self.args.iter().skip(1);
        while let Some(arg) = iter.next() {
            if arg.starts_with("--") {
                // `--flag value`, except for the plugin's switches, which take none.
                if !arg.contains('=') && arg != "--with-controller" {
                    iter.next();
                }
            } else {
                out.push(arg.clone());
            }
        }
        out
    }

    pub fn env(&self, name: &str) -> Option<&'a Value> {
        seq(self.value, "env")
            .iter()
            .find(|e| str_at(e, "name") == Some(name))
    }

    pub fn image(&self) -> &str {
        str_at(self.value, "image").unwrap_or("")
    }

    /// The containerPort of the port called `port_name`.
    pub fn port(&self, port_name: &str) -> Option<String> {
        seq(self.value, "ports")
            .iter()
            .find(|p| str_at(p, "name") == Some(port_name))
            .map(|p| scalar(&p["containerPort"]))
    }

    /// The port its livenessProbe asks, a port name resolved to its number.
    pub fn liveness_port(&self) -> String {
        let asked = scalar(at(self.value, "livenessProbe.httpGet.port"));
        self.port(&asked).unwrap_or(asked)
    }

    pub fn mounts(&self) -> &'a [Value] {
        seq(self.value, "volumeMounts")
    }
}

/// The node pod and its three containers.
pub struct NodePod<'a> {
    pub daemonset: &'a Value,
    pub spec: &'a Value,
    pub plugin: Container<'a>,
    pub registrar: Container<'a>,
    pub probe: Container<'a>,
}

impl<'a> NodePod<'a> {
    /// The pod of the one DaemonSet among `docs`; `origin` names them in a failure.
    pub fn in_docs(docs: &'a [Value], origin: &str) -> Self {
        let daemonset = only(docs, "DaemonSet", origin);
        let spec = at(daemonset, "spec.template.spec");
        let pick = |what: &str, test: fn(&Container<'a>) -> bool| -> Container<'a> {
            let mut found: Vec<Container<'a>> = seq(spec, "containers")
                .iter()
                .map(Container::new)
                .filter(test)
                .collect();
            assert_eq!(
                found.len(),
                1,
                "{origin}: expected one {what} container in the DaemonSet, found {}",
                found.len()
            );
            found.remove(0)
        };
        NodePod {
            daemonset,
            spec,
            plugin: pick("msfs plugin (args starting with `csi`)", |c| {
                c.args.first().map(String::as_str) == Some("csi")
            }),
            registrar: pick("csi-node-driver-registrar", |c| {
                c.image().contains("csi-node-driver-registrar")
            }),
            probe: pick("livenessprobe", |c| c.image().contains("livenessprobe")),
        }
    }

    /// The containers with the role messages and facts name them by.
    pub fn containers(&self) -> [(&'static str, &Container<'a>); 3] {
        [
            ("plugin", &self.plugin),
            ("registrar", &self.registrar),
            ("liveness probe", &self.probe),
        ]
    }

    /// The `msfs fd-holder` container (args starting with `fd-holder`), if the pod has one.
    pub fn fd_holder(&self) -> Option<Container<'a>> {
        seq(self.spec, "containers")
            .iter()
            .map(Container::new)
            .find(|c| c.args.first().map(String::as_str) == Some("fd-holder"))
    }

    pub fn volume(&self, name: &str) -> Option<&'a Value> {
        seq(self.spec, "volumes")
            .iter()
            .find(|v| str_at(v, "name") == Some(name))
    }

    /// The mount of `container` holding `path` (the longest mountPath that contains it).
    pub fn mount_of(&self, container: &Container<'a>, path: &str) -> Option<&'a Value> {
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
    pub fn host_path(&self, container: &Container<'a>, path: &str) -> Result<String, String> {
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
