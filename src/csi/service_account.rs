//! The role a pod's ServiceAccount names: `authenticationSource: pod` without `roleArn` reads
//! the `eks.amazonaws.com/role-arn` annotation of the pod's ServiceAccount through the
//! Kubernetes API, as EKS's IRSA webhook does for the pod itself.
//!
//! The pod's namespace and ServiceAccount name come from the volume context, where the kubelet
//! puts them when the CSIDriver sets `podInfoOnMount: true`. The API client is built on first
//! use from `KUBECONFIG`, `~/.kube/config` or the plugin's own in-cluster ServiceAccount, and
//! kept for the life of the plugin ([`KubeApi`]): a plugin whose volumes all name their
//! `roleArn` never touches the API.

use std::collections::BTreeMap;
use std::collections::HashMap;
use std::fmt;
use std::time::Duration;

use k8s_openapi::api::core::v1::ServiceAccount;
use kube::{Api, Client, Config};
use tokio::sync::OnceCell;

use crate::csi::attributes::{POD_NAMESPACE_KEY, SERVICE_ACCOUNT_NAME_KEY};
use crate::csi::credentials::check_role_arn;
use crate::csi::error::CsiError;

/// The annotation that names a ServiceAccount's IAM role (EKS IRSA's).
pub const ROLE_ARN_ANNOTATION: &str = "eks.amazonaws.com/role-arn";
/// Longest wait for the API (client setup included) before the publish fails as UNAVAILABLE
/// and the kubelet retries; kube's own read timeout (about five minutes) is sized for watches.
const LOOKUP_TIMEOUT: Duration = Duration::from_secs(20);

/// The plugin's Kubernetes API client, one per plugin (kept by its `Volumes`), set up at its
/// first lookup rather than at start: only this lookup needs it, and only for some volumes. A
/// failed setup is not kept, so a kubeconfig that appears later is picked up by the next
/// publish.
#[derive(Default)]
pub struct KubeApi {
    client: OnceCell<Client>,
}

impl KubeApi {
    /// The API client, set up on first use; `account` is the lookup it is for, named by a
    /// failure.
    async fn client(&self, account: &PodServiceAccount) -> Result<Client, CsiError> {
        self.client
            .get_or_try_init(|| async {
                let config = Config::infer().await.map_err(|e| {
                    account.unavailable(format!(
                        "no Kubernetes API configuration (the plugin's in-cluster \
                         ServiceAccount, KUBECONFIG or ~/.kube/config): {}",
                        error_chain(&e)
                    ))
                })?;
                tracing::info!(api = %config.cluster_url, "Kubernetes API client ready");
                Client::try_from(config).map_err(|e| {
                    account.unavailable(format!(
                        "cannot set up the Kubernetes API client: {}",
                        error_chain(&e)
                    ))
                })
            })
            .await
            .cloned()
    }
}

/// The ServiceAccount a volume's pod runs as.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodServiceAccount {
    pub namespace: String,
    pub name: String,
}

impl fmt::Display for PodServiceAccount {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

impl PodServiceAccount {
    /// The pod's namespace and ServiceAccount, from the kubelet's podInfoOnMount keys.
    pub fn from_context(context: &HashMap<String, String>) -> Result<PodServiceAccount, CsiError> {
        let namespace = pod_info(context, POD_NAMESPACE_KEY, 63, false)?;
        let name = pod_info(context, SERVICE_ACCOUNT_NAME_KEY, 253, true)?;
        Ok(PodServiceAccount { namespace, name })
    }

    /// The role ARN of the ServiceAccount's annotation, checked like a `roleArn` attribute.
    pub async fn role_arn(&self, kube: &KubeApi) -> Result<String, CsiError> {
        let lookup = async {
            let api: Api<ServiceAccount> =
                Api::namespaced(kube.client(self).await?, &self.namespace);
            api.get(&self.name).await.map_err(|e| self.lookup_error(&e))
        };
        let account = tokio::time::timeout(LOOKUP_TIMEOUT, lookup)
            .await
            .map_err(|_| {
                self.unavailable(format!(
                    "the Kubernetes API did not answer within {} s",
                    LOOKUP_TIMEOUT.as_secs()
                ))
            })??;
        self.role_from_annotations(account.metadata.annotations.as_ref())
    }

    fn role_from_annotations(
        &self,
        annotations: Option<&BTreeMap<String, String>>,
    ) -> Result<String, CsiError> {
        let value = annotations
            .and_then(|a| a.get(ROLE_ARN_ANNOTATION))
            .map(|v| v.trim())
            .filter(|v| !v.is_empty());
        let Some(arn) = value else {
            return Err(CsiError::invalid(
                "roleArn",
                format!(
                    "not set, and ServiceAccount {self} has no {ROLE_ARN_ANNOTATION} annotation: \
                     set roleArn on the volume or annotate the ServiceAccount with the role"
                ),
            ));
        };
        check_role_arn(arn).map_err(|problem| {
            CsiError::invalid(
                "roleArn",
                format!(
                    "not set, and the {ROLE_ARN_ANNOTATION} annotation of ServiceAccount {self} \
                     is {problem}: set roleArn on the volume or fix the annotation"
                ),
            )
        })?;
        Ok(arn.to_string())
    }

    /// A failed GET, by what the operator has to fix.
    fn lookup_error(&self, error: &kube::Error) -> CsiError {
        let status = match error {
            kube::Error::Api(status) => status,
            kube::Error::SerdeError(_) | kube::Error::FromUtf8(_) => {
                return self.unavailable(format!(
                    "the Kubernetes API's answer is not a ServiceAccount: {}",
                    error_chain(error)
                ));
            }
            _ => {
                return self.unavailable(format!(
                    "cannot reach the Kubernetes API: {}",
                    error_chain(error)
                ));
            }
        };
        match status.code {
            404 => CsiError::NotFound(format!(
                "ServiceAccount {self} not found (it is the pod's, from podInfoOnMount): \
                 create it, or set roleArn on the volume"
            )),
            403 => self.denied(format!(
                "the Kubernetes API refused to get it ({}): the plugin's ClusterRole needs \
                 `get` on serviceaccounts",
                status.message
            )),
            401 => self.denied(format!(
                "the Kubernetes API did not accept the plugin's own credentials ({}): check \
                 its ServiceAccount token or kubeconfig",
                status.message
            )),
            code => self.unavailable(format!(
                "the Kubernetes API answered {code} ({})",
                status.message
            )),
        }
    }

    fn unavailable(&self, message: String) -> CsiError {
        self.lookup_failed(message, false)
    }

    fn denied(&self, message: String) -> CsiError {
        self.lookup_failed(message, true)
    }

    fn lookup_failed(&self, message: String, denied: bool) -> CsiError {
        CsiError::ServiceAccountLookup {
            namespace: self.namespace.clone(),
            name: self.name.clone(),
            message,
            denied,
        }
    }
}

/// One podInfoOnMount value, which must be a Kubernetes name: it becomes part of an API path.
fn pod_info(
    context: &HashMap<String, String>,
    key: &str,
    max_len: usize,
    dots: bool,
) -> Result<String, CsiError> {
    let Some(value) = context.get(key).filter(|v| !v.is_empty()) else {
        return Err(CsiError::invalid(
            "roleArn",
            format!(
                "not set, and the kubelet did not pass {key} to read the role from the pod's \
                 ServiceAccount: set podInfoOnMount: true in the CSIDriver, or set roleArn"
            ),
        ));
    };
    if !is_kubernetes_name(value, max_len, dots) {
        return Err(CsiError::invalid(
            key,
            format!("not a Kubernetes name ({value:?})"),
        ));
    }
    Ok(value.clone())
}

/// A DNS-1123 label (`dots: false`) or subdomain: lowercase letters, digits, `-` (and `.`),
/// starting and ending with a letter or digit.
fn is_kubernetes_name(text: &str, max_len: usize, dots: bool) -> bool {
    let inner =
        |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || (dots && c == '.');
    let edge = |c: Option<char>| c.is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit());
    text.len() <= max_len
        && text.chars().all(inner)
        && edge(text.chars().next())
        && edge(text.chars().next_back())
}

/// An error and its sources, for a message that says why a connection failed.
fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let line = cause.to_string();
        if !text.contains(&line) {
            text.push_str(": ");
            text.push_str(&line);
        }
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::csi::credentials::tests::context;
    use tonic::{Code, Status};

    const ROLE: &str = "arn:aws:iam::123456789012:role/reader";

    fn account() -> PodServiceAccount {
        PodServiceAccount {
            namespace: "team-a".into(),
            name: "reader".into(),
        }
    }

    fn annotations(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn pod_info_keys_name_the_service_account() {
        let ctx = context(&[
            (POD_NAMESPACE_KEY, "team-a"),
            (SERVICE_ACCOUNT_NAME_KEY, "reader"),
        ]);
        assert_eq!(
            PodServiceAccount::from_context(&ctx).expect("account"),
            account()
        );
    }

    #[test]
    fn missing_pod_info_asks_for_pod_info_on_mount_or_role_arn() {
        for (present, missing) in [
            (SERVICE_ACCOUNT_NAME_KEY, POD_NAMESPACE_KEY),
            (POD_NAMESPACE_KEY, SERVICE_ACCOUNT_NAME_KEY),
        ] {
            let error = PodServiceAccount::from_context(&context(&[(present, "x")]))
                .expect_err("missing key");
            let status = Status::from(error);
            assert_eq!(status.code(), Code::InvalidArgument);
            assert!(status.message().starts_with("roleArn: "), "{status:?}");
            assert!(status.message().contains(missing), "{status:?}");
            assert!(
                status.message().contains("podInfoOnMount: true"),
                "{status:?}"
            );
        }
    }

    #[test]
    fn pod_info_must_be_kubernetes_names() {
        for (namespace, name) in [
            ("team-a", "../x"),
            ("team-a", "Reader"),
            ("team.a", "reader"),
            ("team-a", "reader/../../secrets"),
        ] {
            let ctx = context(&[
                (POD_NAMESPACE_KEY, namespace),
                (SERVICE_ACCOUNT_NAME_KEY, name),
            ]);
            let status = Status::from(PodServiceAccount::from_context(&ctx).expect_err(name));
            assert_eq!(status.code(), Code::InvalidArgument, "{namespace}/{name}");
        }
        let ctx = context(&[
            (POD_NAMESPACE_KEY, "kube-system"),
            (SERVICE_ACCOUNT_NAME_KEY, "build.bot-1"),
        ]);
        assert!(PodServiceAccount::from_context(&ctx).is_ok());
    }

    #[test]
    fn annotation_gives_the_role() {
        let a = annotations(&[(ROLE_ARN_ANNOTATION, &format!(" {ROLE}\n")), ("x", "y")]);
        assert_eq!(
            account().role_from_annotations(Some(&a)).expect("role"),
            ROLE
        );
    }

    #[test]
    fn absent_annotation_names_role_arn_and_the_annotation() {
        for a in [
            None,
            Some(annotations(&[("x", "y")])),
            Some(annotations(&[(ROLE_ARN_ANNOTATION, "")])),
        ] {
            let status = Status::from(
                account()
                    .role_from_annotations(a.as_ref())
                    .expect_err("none"),
            );
            assert_eq!(status.code(), Code::InvalidArgument);
            assert!(status.message().starts_with("roleArn: "), "{status:?}");
            assert!(status.message().contains(ROLE_ARN_ANNOTATION), "{status:?}");
            assert!(status.message().contains("team-a/reader"), "{status:?}");
        }
    }

    #[test]
    fn annotation_goes_through_the_role_arn_check() {
        let a = annotations(&[(ROLE_ARN_ANNOTATION, "my-role")]);
        let status = Status::from(account().role_from_annotations(Some(&a)).expect_err("bad"));
        assert_eq!(status.code(), Code::InvalidArgument);
        assert!(status.message().starts_with("roleArn: "), "{status:?}");
        assert!(
            status.message().contains("not an IAM role ARN"),
            "{status:?}"
        );
    }

    #[test]
    fn api_failures_map_to_what_the_operator_must_fix() {
        let api = |code| {
            let status = kube::core::Status::failure("refused", "Reason").with_code(code);
            Status::from(account().lookup_error(&kube::Error::Api(status.boxed())))
        };
        let missing = api(404);
        assert_eq!(missing.code(), Code::NotFound);
        assert!(missing.message().contains("team-a/reader"), "{missing:?}");
        let forbidden = api(403);
        assert_eq!(forbidden.code(), Code::PermissionDenied);
        assert!(
            forbidden.message().contains("`get` on serviceaccounts"),
            "{forbidden:?}"
        );
        assert_eq!(api(401).code(), Code::PermissionDenied);
        assert_eq!(api(503).code(), Code::Unavailable);
        let io = std::io::Error::other("connection refused");
        let down = Status::from(account().lookup_error(&kube::Error::ReadEvents(io)));
        assert_eq!(down.code(), Code::Unavailable);
        assert!(
            down.message().contains("cannot reach the Kubernetes API"),
            "{down:?}"
        );
    }
}
