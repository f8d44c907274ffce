//! The provisioning controller's objects (the chart's with `controller.enabled`, and
//! `deploy/controller/`): the wiring a schema cannot see. The sidecar reaches the socket msfs
//! serves, one driver name everywhere, leader election on with the Lease rights it needs, the
//! rights csi-provisioner needs bound to the pod's ServiceAccount, and every StorageClass of
//! this driver passing only parameters the controller knows.

use serde_yaml_ng::Value;

use crate::deploy_chart::yaml::{at, name, of_kind, scalars, seq, str_at};

/// The controller Deployments of `docs` (component `controller`).
pub fn deployments(docs: &[Value]) -> Vec<&Value> {
    of_kind(docs, "Deployment")
        .into_iter()
        .filter(|d| {
            at(d, "metadata.labels")["app.kubernetes.io/component"].as_str() == Some("controller")
        })
        .collect()
}

/// The container called `wanted` of a Deployment's pod.
pub fn container<'a>(deployment: &'a Value, wanted: &str) -> Option<&'a Value> {
    seq(deployment, "spec.template.spec.containers")
        .iter()
        .find(|c| str_at(c, "name") == Some(wanted))
}

/// `--flag=value` among a container's arguments.
pub fn flag(container: &Value, wanted: &str) -> Option<String> {
    scalars(container, "args").into_iter().find_map(|a| {
        a.strip_prefix(&format!("--{wanted}="))
            .map(str::to_string)
            .or_else(|| (a == format!("--{wanted}")).then(String::new))
    })
}

/// The volume mounted at `path` in `container`.
fn volume_at<'a>(container: &'a Value, path: &str) -> Option<&'a str> {
    seq(container, "volumeMounts")
        .iter()
        .find(|m| str_at(m, "mountPath") == Some(path))
        .and_then(|m| str_at(m, "name"))
}

fn parent(path: &str) -> &str {
    path.rsplit_once('/').map_or("", |(p, _)| p)
}

/// Whether a rule of a (Cluster)Role named `role` grants `verb` on `resource`.
fn grants(docs: &[Value], kind: &str, role: &str, resource: &str, verb: &str) -> bool {
    of_kind(docs, kind)
        .into_iter()
        .filter(|r| name(r) == role)
        .flat_map(|r| seq(r, "rules"))
        .any(|rule| {
            scalars(rule, "resources").iter().any(|r| r == resource)
                && scalars(rule, "verbs").iter().any(|v| v == verb)
        })
}

/// The role a binding of `kind` gives `account`, if any.
fn bound_role<'a>(docs: &'a [Value], kind: &str, account: &str) -> Vec<&'a str> {
    of_kind(docs, kind)
        .into_iter()
        .filter(|b| {
            seq(b, "subjects").iter().any(|s| {
                str_at(s, "kind") == Some("ServiceAccount") && str_at(s, "name") == Some(account)
            })
        })
        .filter_map(|b| str_at(b, "roleRef.name"))
        .collect()
}

/// What is wrong with the controller objects of `docs`, for driver `driver`, in words.
/// `node_args`: the node plugin's arguments, when the same render has the node.
pub fn problems(
    docs: &[Value],
    driver: &str,
    node_args: Option<&[String]>,
    origin: &str,
) -> Vec<String> {
    let mut problems = Vec::new();
    let controllers = deployments(docs);
    if let Some(args) = node_args {
        let with = args.iter().any(|a| a == "--with-controller");
        let deployed = !controllers.is_empty();
        if with != deployed {
            problems.push(format!(
                "{origin}: the node plugin's --with-controller ({with}) must match whether a \
                 controller is deployed ({deployed})"
            ));
        }
    }
    for deployment in &controllers {
        let (Some(msfs), Some(sidecar)) = (
            container(deployment, "msfs"),
            container(deployment, "csi-provisioner"),
        ) else {
            problems.push(format!(
                "{origin}: controller {} lacks the msfs or csi-provisioner container",
                name(deployment)
            ));
            continue;
        };
        let args = scalars(msfs, "args");
        if args.first().map(String::as_str) != Some("csi") || flag(msfs, "controller").is_none() {
            problems.push(format!(
                "{origin}: the controller runs {args:?}, not `msfs csi --controller`"
            ));
        }
        if flag(msfs, "driver-name").as_deref() != Some(driver) {
            problems.push(format!(
                "{origin}: the controller's --driver-name {:?} is not the CSIDriver's {driver}",
                flag(msfs, "driver-name")
            ));
        }
        let socket = flag(msfs, "endpoint")
            .and_then(|e| e.strip_prefix("unix://").map(str::to_string))
            .unwrap_or_default();
        let address = flag(sidecar, "csi-address").unwrap_or_default();
        if socket.is_empty() || socket != address {
            problems.push(format!(
                "{origin}: csi-provisioner dials {address:?}, msfs listens on {socket:?}"
            ));
        }
        let (served, dialled) = (
            volume_at(msfs, parent(&socket)),
            volume_at(sidecar, parent(&address)),
        );
        if served.is_none() || served != dialled {
            problems.push(format!(
                "{origin}: the socket's directory is not one volume shared by both containers \
                 ({served:?} and {dialled:?})"
            ));
        }
        if flag(sidecar, "leader-election").is_none() {
            problems.push(format!(
                "{origin}: csi-provisioner runs without --leader-election"
            ));
        }
        let account = str_at(deployment, "spec.template.spec.serviceAccountName").unwrap_or("");
        let cluster_roles = bound_role(docs, "ClusterRoleBinding", account);
        for (resource, verb) in [
            ("persistentvolumes", "create"),
            ("persistentvolumes", "delete"),
            ("persistentvolumeclaims", "watch"),
            ("storageclasses", "get"),
            ("secrets", "get"),
            ("events", "create"),
        ] {
            if !cluster_roles
                .iter()
                .any(|role| grants(docs, "ClusterRole", role, resource, verb))
            {
                problems.push(format!(
                    "{origin}: ServiceAccount {account} may not {verb} {resource}"
                ));
            }
        }
        let roles = bound_role(docs, "RoleBinding", account);
        if !roles
            .iter()
            .any(|role| grants(docs, "Role", role, "leases", "update"))
        {
            problems.push(format!(
                "{origin}: ServiceAccount {account} may not update the leader election Lease"
            ));
        }
    }
    problems.extend(storage_class_problems(docs, driver, origin));
    problems
}

/// Every StorageClass of `driver`: parameters the controller knows.
pub fn storage_class_problems(docs: &[Value], driver: &str, origin: &str) -> Vec<String> {
    let mut problems = Vec::new();
    for class in of_kind(docs, "StorageClass") {
        if str_at(class, "provisioner") != Some(driver) {
            continue;
        }
        let Some(parameters) = at(class, "parameters").as_mapping() else {
            problems.push(format!(
                "{origin}: StorageClass {} has no parameters",
                name(class)
            ));
            continue;
        };
        for (key, value) in parameters {
            let key = key.as_str().unwrap_or("");
            let known = key.starts_with("csi.storage.k8s.io/")
                || msfs::csi::STORAGE_CLASS_PARAMETERS.contains(&key);
            if !known {
                problems.push(format!(
                    "{origin}: StorageClass {} has parameter {key}, which the controller refuses",
                    name(class)
                ));
            }
            if !value.is_string() {
                problems.push(format!(
                    "{origin}: StorageClass {} parameter {key} is not a string",
                    name(class)
                ));
            }
        }
        if parameters.get("bucketName").is_none() {
            problems.push(format!(
                "{origin}: StorageClass {} has no bucketName",
                name(class)
            ));
        }
    }
    problems
}
