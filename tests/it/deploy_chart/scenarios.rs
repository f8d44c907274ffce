//! The chart's values under test: the scenarios it must render right — the default values,
//! every auth mode, and the values that move paths, ports and volumes around — and the values
//! it must refuse.

use serde_yaml_ng::Value;

use crate::deploy_chart::tools::helm_template;
use crate::deploy_chart::yaml::parse_docs;

/// A named set of `--set` values.
pub struct Scenario {
    pub name: &'static str,
    pub sets: &'static [&'static str],
}

impl Scenario {
    /// The scenario called `name`.
    pub fn named(name: &str) -> &'static Scenario {
        SCENARIOS
            .iter()
            .find(|s| s.name == name)
            .unwrap_or_else(|| panic!("no scenario {name}"))
    }

    /// `["a=b", …] (name)`, how messages name the scenario.
    pub fn describe(&self) -> String {
        format!("{:?} ({})", self.sets, self.name)
    }

    /// The chart rendered with these values; a failed render fails the test.
    pub fn render(&self) -> String {
        helm_template(self.sets)
            .unwrap_or_else(|e| panic!("helm template with {} failed:\n{e}", self.describe()))
    }

    /// The rendered chart's documents.
    pub fn docs(&self) -> Vec<Value> {
        parse_docs(&self.render(), self.name)
    }
}

/// Every scenario the chart is rendered with; the default values first.
pub const SCENARIOS: &[Scenario] = &[
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
        name: "controller",
        sets: &[
            "controller.enabled=true",
            "storageClass.enabled=true",
            "storageClass.bucketName=shared",
            "storageClass.prefix=claims/",
            "storageClass.endpoint=http://minio.minio.svc:9000",
            "storageClass.authenticationSource=secret",
            "storageClass.secretName=minio-keys",
            "storageClass.keepDataOnDelete=true",
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
        name: "example-pv-pod-service-account",
        sets: &[
            "examplePV.enabled=true",
            "examplePV.bucketName=training",
            "examplePV.authenticationSource=pod",
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
        name: "persistent-cache-on-the-node",
        sets: &[
            "nodeConfig.cachePersistent=true",
            "nodeConfig.cacheVolume.type=hostPath",
        ],
    },
    Scenario {
        name: "tiered-persistent-cache",
        sets: &[
            "nodeConfig.cacheStorage=tiered",
            "nodeConfig.cacheRamLines=16",
            "nodeConfig.cachePersistent=true",
            "nodeConfig.cacheVolume.type=hostPath",
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
        name: "shared-cache",
        sets: &[
            "nodeConfig.sharedCache.bucket=msfs-shared",
            "nodeConfig.sharedCache.prefix=lines/",
            "nodeConfig.sharedCache.endpoint=http://garage.cache.svc:3900",
            "nodeConfig.sharedCache.region=garage",
            "nodeConfig.sharedCache.secretName=shared-cache-keys",
            "nodeConfig.sharedCache.readTimeoutMs=150",
        ],
    },
    Scenario {
        name: "one-memory-value",
        sets: &["node.memoryMiB=1024", "nodeConfig.cacheStorage=ram"],
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
            // Two pods of one node cannot share host ports: no surge on the host network.
            "node.updateStrategy.rollingUpdate.maxSurge=0",
            "node.updateStrategy.rollingUpdate.maxUnavailable=1",
            "node.maxVolumes=32",
            "logFormat=json",
        ],
    },
];

/// Values the chart must refuse, each with a word its refusal must name.
pub const REFUSED_VALUES: &[(&[&str], &str)] = &[
    (
        &["storageClass.enabled=true", "storageClass.bucketName=b"],
        "controller.enabled",
    ),
    (
        &["controller.enabled=true", "storageClass.enabled=true"],
        "bucketName",
    ),
    (&["storageClass.prefix=claims"], "prefix"),
    (&["storageClass.reclaimPolicy=Recycle"], "reclaimPolicy"),
    (&["controller.replicas=0"], "replicas"),
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
    (
        &["nodeConfig.evictableInodeLimit=100"],
        "evictableInodeLimit",
    ),
    (&["nodeConfig.cacheDirPath=cache"], "cacheDirPath"),
    (
        &[
            "nodeConfig.cachePersistent=true",
            "nodeConfig.cacheStorage=ram",
        ],
        "cachePersistent",
    ),
    (&["nodeConfig.cacheRamLines=16"], "cacheRamLines"),
    (
        &[
            "nodeConfig.sharedCache.bucket=b-shared",
            "nodeConfig.sharedCache.fillBufferLimitBytes=1024",
        ],
        "fillBufferLimitBytes",
    ),
    (&["nodeConfig.sharedCache.prefix=lines"], "prefix"),
    (&["nodeConfig.sharedCache.readTimeoutMs=0"], "readTimeoutMs"),
    (&["nodeConfig.cacheRamLines=-1"], "cacheRamLines"),
    (
        &["nodeConfig.extra.cache_persistent=true"],
        "cache_persistent",
    ),
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
    (&["node.hostNetwork=true"], "maxSurge"),
    (&["examplePV.enabled=true"], "bucketName"),
    (
        &[
            "examplePV.enabled=true",
            "examplePV.bucketName=b",
            "examplePV.authenticationSource=pod",
            "examplePV.roleArn=my-role",
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
