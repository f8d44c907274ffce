//! What each auth mode and notable value of the chart must produce beyond the common wiring:
//! the scenarios with expectations of their own, each with a check of its render that fails on
//! the first value that did not reach the object it configures.

use serde_yaml_ng::Value;

use crate::deploy_chart::assert_no_problems;
use crate::deploy_chart::csi_source::check_csi_source;
use crate::deploy_chart::node_pod::NodePod;
use crate::deploy_chart::wiring::STS_AUDIENCE;
use crate::deploy_chart::yaml::{at, data, name, of_kind, only, scalar, scalars, seq, str_at};

/// A check of the documents a scenario (named by the second argument) renders.
pub type Expectation = fn(&[Value], &str);

/// The scenarios with expectations of their own, and the check of each.
pub const EXPECTATIONS: &[(&str, Expectation)] = &[
    ("default", pod_tokens_and_inline_volumes_by_default),
    ("driver-static-secret", driver_secret_reaches_the_plugin_env),
    ("driver-irsa", irsa_role_annotates_the_service_account),
    ("pod-token-long-expiry", pod_token_expiry_reaches_the_driver),
    ("no-pod-token-no-inline", no_pod_tokens_no_inline_volumes),
    ("example-pv-driver", |d, s| example_pv(d, s, "driver")),
    ("example-pv-secret", |d, s| example_pv(d, s, "secret")),
    ("example-pv-pod", |d, s| example_pv(d, s, "pod")),
    (
        "example-pv-pod-service-account",
        pod_pv_without_role_leaves_it_to_the_service_account,
    ),
    ("example-pv-anonymous", |d, s| example_pv(d, s, "anonymous")),
    ("hostpath-ram-cache", host_path_cache_sizes_memory),
    ("persistent-cache-on-the-node", persistent_cache_on_the_node),
    (
        "tiered-persistent-cache",
        tiered_cache_sizes_memory_by_its_ram_tier,
    ),
    ("per-inode-file-size-limit", per_inode_cache_on_disk),
    ("metrics-everywhere", service_monitor_and_otlp_endpoint),
    ("metrics-off", metrics_off_leaves_no_address_or_service),
    ("one-memory-value", memory_mib_sets_request_and_limit),
    ("shared-cache", shared_cache_reaches_the_node_config_and_env),
];

fn shared_cache_reaches_the_node_config_and_env(docs: &[Value], scenario: &str) {
    let text = at(only(docs, "ConfigMap", scenario), "data")["config.yaml"]
        .as_str()
        .unwrap_or("");
    let config: Value = serde_yaml_ng::from_str(text).expect("the node config is YAML");
    let shared = at(&config, "shared_cache");
    assert_eq!(
        str_at(shared, "bucket_container_name"),
        Some("msfs-shared"),
        "{text}"
    );
    assert_eq!(str_at(shared, "prefix"), Some("lines/"), "{text}");
    assert_eq!(at(shared, "read_timeout_ms").as_u64(), Some(150), "{text}");
    assert_eq!(
        str_at(shared, "S3.endpoint"),
        Some("http://garage.cache.svc:3900"),
        "{text}"
    );
    assert_eq!(str_at(shared, "S3.region"), Some("garage"), "{text}");
    let pod = NodePod::in_docs(docs, scenario);
    for (var, key) in [
        ("MSFS_SHARED_CACHE_ACCESS_KEY_ID", "access_key_id"),
        ("MSFS_SHARED_CACHE_SECRET_ACCESS_KEY", "secret_access_key"),
    ] {
        let env = pod
            .plugin
            .env(var)
            .unwrap_or_else(|| panic!("nodeConfig.sharedCache.secretName: no {var}"));
        assert_eq!(
            str_at(env, "valueFrom.secretKeyRef.name"),
            Some("shared-cache-keys")
        );
        assert_eq!(str_at(env, "valueFrom.secretKeyRef.key"), Some(key));
        assert_eq!(
            str_at(shared, &format!("S3.{key}")),
            Some(format!("${{{var}}}").as_str()),
            "the config names the variable, never the key"
        );
    }
}

fn pod_tokens_and_inline_volumes_by_default(docs: &[Value], scenario: &str) {
    let driver = only(docs, "CSIDriver", scenario);
    assert_eq!(
        scalars(driver, "spec.volumeLifecycleModes"),
        ["Persistent", "Ephemeral"],
        "default lifecycle modes"
    );
    let token = seq(driver, "spec.tokenRequests")
        .first()
        .expect("the default CSIDriver asks for pod tokens");
    assert_eq!(str_at(token, "audience"), Some(STS_AUDIENCE));
    assert_eq!(at(token, "expirationSeconds").as_u64(), Some(3600));
    assert_eq!(str_at(driver, "spec.fsGroupPolicy"), Some("File"));
    let pod = NodePod::in_docs(docs, scenario);
    assert!(pod.plugin.env("AWS_ACCESS_KEY_ID").is_none());
}

fn driver_secret_reaches_the_plugin_env(docs: &[Value], scenario: &str) {
    let pod = NodePod::in_docs(docs, scenario);
    for (var, key) in [
        ("AWS_ACCESS_KEY_ID", "access_key_id"),
        ("AWS_SECRET_ACCESS_KEY", "secret_access_key"),
        ("AWS_SESSION_TOKEN", "session_token"),
    ] {
        let env = pod
            .plugin
            .env(var)
            .unwrap_or_else(|| panic!("auth.driverSecret: no {var}"));
        assert_eq!(
            str_at(env, "valueFrom.secretKeyRef.name"),
            Some("msfs-driver-keys"),
            "{var} comes from the driver Secret"
        );
        assert_eq!(
            str_at(env, "valueFrom.secretKeyRef.key"),
            Some(key),
            "{var}: the Secret's keys are spelled like nodePublishSecretRef's"
        );
    }
    let region = pod
        .plugin
        .env("AWS_REGION")
        .expect("node.region sets AWS_REGION");
    assert_eq!(str_at(region, "value"), Some("eu-west-1"));
}

fn irsa_role_annotates_the_service_account(docs: &[Value], scenario: &str) {
    let sa = only(docs, "ServiceAccount", scenario);
    assert_eq!(
        at(sa, "metadata.annotations")["eks.amazonaws.com/role-arn"].as_str(),
        Some("arn:aws:iam::111122223333:role/msfs-driver"),
        "auth.irsaRoleArn annotates the plugin's ServiceAccount"
    );
}

fn pod_token_expiry_reaches_the_driver(docs: &[Value], scenario: &str) {
    let driver = only(docs, "CSIDriver", scenario);
    let token = seq(driver, "spec.tokenRequests")
        .first()
        .expect("tokenRequests");
    assert_eq!(at(token, "expirationSeconds").as_u64(), Some(86400));
}

fn no_pod_tokens_no_inline_volumes(docs: &[Value], scenario: &str) {
    let driver = only(docs, "CSIDriver", scenario);
    assert!(seq(driver, "spec.tokenRequests").is_empty());
    assert_eq!(scalars(driver, "spec.volumeLifecycleModes"), ["Persistent"]);
}

/// examplePV renders a PV of authenticationSource `auth`, bound to its PVC both ways.
fn example_pv(docs: &[Value], scenario: &str, auth: &str) {
    let pv = only(docs, "PersistentVolume", scenario);
    let pvc = only(docs, "PersistentVolumeClaim", scenario);
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

fn pod_pv_without_role_leaves_it_to_the_service_account(docs: &[Value], scenario: &str) {
    example_pv(docs, scenario, "pod");
    let pv = only(docs, "PersistentVolume", scenario);
    assert!(
        at(pv, "spec.csi.volumeAttributes.roleArn").is_null(),
        "an empty examplePV.roleArn must leave the attribute out, for the plugin to read the \
         pod's ServiceAccount annotation"
    );
}

fn host_path_cache_sizes_memory(docs: &[Value], scenario: &str) {
    let pod = NodePod::in_docs(docs, scenario);
    assert_eq!(
        pod.host_path(&pod.plugin, "/cache/x").as_deref(),
        Ok("/mnt/nvme/msfs/x"),
        "cacheVolume.type=hostPath puts cacheDirPath on the node's directory"
    );
    // (256 MiB + 1 MiB x 4096 lines) x 8 / 7 = 4973.7 MiB, rounded up: msfs's target, an
    // eighth below the limit, is the overhead and the cache.
    assert_eq!(
        str_at(pod.plugin.value, "resources.limits.memory"),
        Some("4974Mi"),
        "memory is sized from cacheLineSize x cacheLines"
    );
}

fn persistent_cache_on_the_node(docs: &[Value], scenario: &str) {
    let config = at(only(docs, "ConfigMap", scenario), "data")["config.yaml"]
        .as_str()
        .unwrap_or("");
    assert!(
        config
            .lines()
            .any(|line| line.trim() == "cache_persistent: true"),
        "nodeConfig.cachePersistent reaches the node config:\n{config}"
    );
    let pod = NodePod::in_docs(docs, scenario);
    assert_eq!(
        str_at(pod.volume("cache").expect("cache volume"), "hostPath.path"),
        Some("/var/cache/msfs-csi"),
        "the kept lines live on the node, so an upgrade (a new pod) finds them"
    );
}

fn tiered_cache_sizes_memory_by_its_ram_tier(docs: &[Value], scenario: &str) {
    let config = at(only(docs, "ConfigMap", scenario), "data")["config.yaml"]
        .as_str()
        .unwrap_or("");
    for wanted in [
        "cache_storage: tiered",
        "cache_ram_lines: 16",
        "cache_persistent: true",
    ] {
        assert!(
            config.lines().any(|line| line.trim() == wanted),
            "{wanted} in the node config:\n{config}"
        );
    }
    let pod = NodePod::in_docs(docs, scenario);
    // (256 MiB + 10 MiB x 16 RAM lines) x 8 / 7, rounded up: the disk tier is not the
    // process's memory.
    assert_eq!(
        str_at(pod.plugin.value, "resources.limits.memory"),
        Some("476Mi"),
        "a tiered cache's memory is its RAM tier"
    );
}

fn per_inode_cache_on_disk(docs: &[Value], scenario: &str) {
    let pod = NodePod::in_docs(docs, scenario);
    assert_eq!(
        str_at(pod.plugin.value, "resources.limits.memory"),
        Some("293Mi"),
        "per-inode-file lines live in the page cache, not the process"
    );
    assert_eq!(
        str_at(
            pod.volume("cache").expect("cache volume"),
            "emptyDir.sizeLimit"
        ),
        Some("40Gi")
    );
}

fn service_monitor_and_otlp_endpoint(docs: &[Value], scenario: &str) {
    let monitor = only(docs, "ServiceMonitor", scenario);
    let service = only(docs, "Service", scenario);
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
    let config_map = only(docs, "ConfigMap", scenario);
    let config: Value = serde_yaml_ng::from_str(data(config_map, "config.yaml").expect("config"))
        .expect("config YAML");
    assert_eq!(
        str_at(&config, "opentelemetry.metrics.exporter.options.endpoint"),
        Some("http://otel-collector.monitoring:4318")
    );
}

fn metrics_off_leaves_no_address_or_service(docs: &[Value], scenario: &str) {
    let pod = NodePod::in_docs(docs, scenario);
    assert_eq!(pod.plugin.flag("metrics-address"), None);
    assert!(of_kind(docs, "Service").is_empty());
}

/// `node.memoryMiB` is the container's request and limit whatever the cache, and the node
/// config names no `process_memory_limit`: msfs derives its target from that same limit.
fn memory_mib_sets_request_and_limit(docs: &[Value], scenario: &str) {
    let pod = NodePod::in_docs(docs, scenario);
    for key in ["resources.limits.memory", "resources.requests.memory"] {
        assert_eq!(str_at(pod.plugin.value, key), Some("1024Mi"), "{key}");
    }
    let config = at(only(docs, "ConfigMap", scenario), "data")["config.yaml"]
        .as_str()
        .unwrap_or("");
    assert!(
        !config.contains("process_memory_limit"),
        "the target follows the container's limit:\n{config}"
    );
}
