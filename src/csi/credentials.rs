//! Where a volume's credentials come from (`authenticationSource`), and getting them.
//!
//! Resolved per volume and never shared between volumes:
//! - `driver` (default): the plugin's own AWS chain (environment, shared files, IRSA, container
//!   and instance credentials), resolved by the SDK inside each backend's client;
//! - `secret`: keys from the volume's `nodePublishSecretRef`;
//! - `anonymous`: unsigned requests;
//! - `pod`: the pod's service-account token (`csi.storage.k8s.io/serviceAccount.tokens`,
//!   audience `sts.amazonaws.com`) exchanged by AssumeRoleWithWebIdentity for `roleArn`, or,
//!   without `roleArn`, for the role the pod's ServiceAccount names in its
//!   `eks.amazonaws.com/role-arn` annotation (read through the Kubernetes API, as IRSA does).
//!
//! With `driver` or `secret`, a `roleArn` means AssumeRole from those credentials. STS calls go
//! through the AWS SDK's STS client; the temporary keys it returns become the backends' static
//! credentials, and a republish with a fresh token (`requiresRepublish`) renews them in place.

use std::collections::HashMap;
use std::time::SystemTime;

use aws_sdk_sts::config::{BehaviorVersion, Credentials, Region};
use aws_sdk_sts::error::ProvideErrorMetadata;

use super::attributes::TOKENS_KEY;
use super::error::CsiError;
use super::service_account::{KubeApi, PodServiceAccount};
use crate::config::Secret;

/// The token audience AWS STS expects (what the CSIDriver's `tokenRequests` must ask for).
pub const STS_AUDIENCE: &str = "sts.amazonaws.com";
/// STS region when neither `stsRegion` nor `region` names one.
const DEFAULT_STS_REGION: &str = "us-east-1";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuthSource {
    Driver,
    Secret,
    Pod,
    Anonymous,
}

/// The volume-level authentication attributes, checked.
#[derive(Debug, Clone, PartialEq)]
pub struct AuthSettings {
    pub source: AuthSource,
    pub role_arn: Option<String>,
    pub sts_region: String,
    pub sts_endpoint: Option<String>,
}

/// Static keys (possibly temporary ones from STS).
#[derive(Debug, Clone, PartialEq)]
pub struct StaticKeys {
    pub access_key_id: String,
    pub secret_access_key: Secret,
    pub session_token: Option<Secret>,
    /// When temporary keys stop working.
    pub expires: Option<SystemTime>,
}

/// What the backends of a volume sign with.
#[derive(Debug, Clone, PartialEq)]
pub enum Keys {
    DefaultChain,
    Anonymous,
    Static(StaticKeys),
}

impl AuthSettings {
    pub fn parse(context: &HashMap<String, String>) -> Result<AuthSettings, CsiError> {
        let source = match context.get("authenticationSource").map(|s| s.trim()) {
            None | Some("") => AuthSource::Driver,
            Some(text) => match text.to_ascii_lowercase().as_str() {
                "driver" => AuthSource::Driver,
                "secret" => AuthSource::Secret,
                "pod" => AuthSource::Pod,
                "anonymous" => AuthSource::Anonymous,
                _ => {
                    return Err(CsiError::invalid(
                        "authenticationSource",
                        format!(
                            "unknown value {text:?}; expected driver, secret, pod or anonymous"
                        ),
                    ));
                }
            },
        };
        let role_arn = context.get("roleArn").filter(|r| !r.is_empty()).cloned();
        if let Some(arn) = &role_arn {
            check_role_arn(arn).map_err(|problem| CsiError::invalid("roleArn", problem))?;
        }
        // `pod` needs no `roleArn`: without one, publish reads it from the pod's ServiceAccount.
        if source == AuthSource::Anonymous && role_arn.is_some() {
            return Err(CsiError::invalid(
                "roleArn",
                "cannot be combined with authenticationSource anonymous",
            ));
        }
        let sts_endpoint = context
            .get("stsEndpoint")
            .filter(|e| !e.is_empty())
            .cloned();
        if let Some(endpoint) = &sts_endpoint {
            let host = endpoint
                .strip_prefix("http://")
                .or_else(|| endpoint.strip_prefix("https://"));
            if host.is_none_or(|h| h.is_empty() || h.contains(char::is_whitespace)) {
                return Err(CsiError::invalid(
                    "stsEndpoint",
                    format!(
                        "not a URL ({endpoint:?}); expected http://host[:port] or https://host[:port]"
                    ),
                ));
            }
        }
        let sts_region = context
            .get("stsRegion")
            .or_else(|| context.get("region"))
            .filter(|r| !r.trim().is_empty())
            .map_or_else(|| DEFAULT_STS_REGION.to_string(), |r| r.trim().to_string());
        Ok(AuthSettings {
            source,
            role_arn,
            sts_region,
            sts_endpoint,
        })
    }

    /// Checks, without any network call, that the request carries what this source needs.
    pub fn check_request(
        &self,
        secrets: &HashMap<String, String>,
        context: &HashMap<String, String>,
    ) -> Result<(), CsiError> {
        match self.source {
            AuthSource::Secret => secret_keys(secrets).map(|_| ()),
            AuthSource::Pod => {
                pod_token(context)?;
                if self.role_arn.is_none() {
                    PodServiceAccount::from_context(context)?;
                }
                Ok(())
            }
            AuthSource::Driver | AuthSource::Anonymous => Ok(()),
        }
    }

    /// The keys the volume's backends sign with; may call STS, and the Kubernetes API through
    /// `kube` (`pod` without `roleArn`).
    pub async fn resolve(
        &self,
        volume_id: &str,
        secrets: &HashMap<String, String>,
        context: &HashMap<String, String>,
        kube: &KubeApi,
    ) -> Result<Keys, CsiError> {
        let base = match self.source {
            AuthSource::Anonymous => return Ok(Keys::Anonymous),
            AuthSource::Pod => {
                let token = pod_token(context)?;
                let role_arn = match &self.role_arn {
                    Some(role_arn) => role_arn.clone(),
                    None => {
                        let account = PodServiceAccount::from_context(context)?;
                        let role_arn = account.role_arn(kube).await?;
                        tracing::info!(
                            volume_id,
                            service_account = %account,
                            role_arn,
                            "role read from the ServiceAccount's annotation"
                        );
                        role_arn
                    }
                };
                return self
                    .assume_with_web_identity(volume_id, &role_arn, &token)
                    .await;
            }
            AuthSource::Driver => Keys::DefaultChain,
            AuthSource::Secret => Keys::Static(secret_keys(secrets)?),
        };
        match &self.role_arn {
            None => Ok(base),
            Some(role_arn) => self.assume_role(volume_id, role_arn, &base).await,
        }
    }

    async fn sts_config(&self, base: Option<&Keys>) -> aws_sdk_sts::config::Builder {
        let region = Region::new(self.sts_region.clone());
        let mut builder = match base {
            // The plugin's own chain signs the AssumeRole call.
            Some(Keys::DefaultChain) => {
                let sdk = aws_config::defaults(BehaviorVersion::latest())
                    .region(region)
                    .load()
                    .await;
                aws_sdk_sts::config::Builder::from(&sdk)
            }
            Some(Keys::Static(keys)) => aws_sdk_sts::config::Builder::new()
                .behavior_version(BehaviorVersion::latest())
                .region(region)
                .credentials_provider(Credentials::new(
                    &keys.access_key_id,
                    keys.secret_access_key.expose(),
                    keys.session_token.as_ref().map(|t| t.expose().to_string()),
                    None,
                    "msfs-csi-secret",
                )),
            // AssumeRoleWithWebIdentity is unsigned: the token is the proof.
            Some(Keys::Anonymous) | None => aws_sdk_sts::config::Builder::new()
                .behavior_version(BehaviorVersion::latest())
                .region(region),
        };
        if let Some(endpoint) = &self.sts_endpoint {
            builder = builder.endpoint_url(endpoint);
        }
        builder
    }

    async fn assume_role(
        &self,
        volume_id: &str,
        role_arn: &str,
        base: &Keys,
    ) -> Result<Keys, CsiError> {
        let client = aws_sdk_sts::Client::from_conf(self.sts_config(Some(base)).await.build());
        let result = client
            .assume_role()
            .role_arn(role_arn)
            .role_session_name(session_name(volume_id))
            .send()
            .await;
        match result {
            Ok(out) => temporary_keys(out.credentials, "AssumeRole", role_arn),
            Err(e) => Err(sts_error("AssumeRole", role_arn, &e)),
        }
    }

    async fn assume_with_web_identity(
        &self,
        volume_id: &str,
        role_arn: &str,
        token: &Secret,
    ) -> Result<Keys, CsiError> {
        let client = aws_sdk_sts::Client::from_conf(self.sts_config(None).await.build());
        let result = client
            .assume_role_with_web_identity()
            .role_arn(role_arn)
            .role_session_name(session_name(volume_id))
            .web_identity_token(token.expose())
            .send()
            .await;
        match result {
            Ok(out) => temporary_keys(out.credentials, "AssumeRoleWithWebIdentity", role_arn),
            Err(e) => Err(sts_error("AssumeRoleWithWebIdentity", role_arn, &e)),
        }
    }
}

/// The one check of a role ARN, whether from `roleArn` or a ServiceAccount annotation; the
/// error says what is wrong, for the caller to address to where the ARN came from.
pub(super) fn check_role_arn(arn: &str) -> Result<(), String> {
    if arn.starts_with("arn:") && !arn.contains(char::is_whitespace) {
        Ok(())
    } else {
        Err(format!(
            "not an IAM role ARN ({arn:?}); expected arn:aws:iam::ACCOUNT:role/NAME"
        ))
    }
}

/// The keys of a `nodePublishSecretRef` Secret.
pub(super) fn secret_keys(secrets: &HashMap<String, String>) -> Result<StaticKeys, CsiError> {
    let pick = |names: &[&str]| {
        names
            .iter()
            .find_map(|n| secrets.get(*n).filter(|v| !v.is_empty()))
            .cloned()
    };
    let id = pick(&["access_key_id", "key_id"]);
    let secret = pick(&["secret_access_key", "access_key"]);
    match (id, secret) {
        (Some(access_key_id), Some(secret)) => Ok(StaticKeys {
            access_key_id,
            secret_access_key: Secret::new(secret),
            session_token: pick(&["session_token"]).map(Secret::new),
            expires: None,
        }),
        _ => Err(CsiError::invalid(
            "nodePublishSecretRef",
            "authenticationSource secret needs a Secret with access_key_id and \
             secret_access_key (or key_id and access_key), referenced by the PV's \
             nodePublishSecretRef",
        )),
    }
}

/// The pod's token for STS, from the tokens kubelet passes in the volume context.
fn pod_token(context: &HashMap<String, String>) -> Result<Secret, CsiError> {
    let missing = || {
        CsiError::invalid(
            TOKENS_KEY,
            format!(
                "authenticationSource pod needs the pod's service-account token for audience \
                 {STS_AUDIENCE}: list it in the CSIDriver's tokenRequests"
            ),
        )
    };
    let text = context.get(TOKENS_KEY).ok_or_else(missing)?;
    // {"sts.amazonaws.com": {"token": "...", "expirationTimestamp": "..."}}; never echoed.
    let tokens: serde_json::Value = serde_json::from_str(text)
        .map_err(|_| CsiError::invalid(TOKENS_KEY, "not the JSON kubelet sends"))?;
    tokens
        .get(STS_AUDIENCE)
        .and_then(|t| t.get("token"))
        .and_then(|t| t.as_str())
        .filter(|t| !t.is_empty())
        .map(Secret::new)
        .ok_or_else(missing)
}

/// An STS session name: `msfs-<volume id>`, within STS's 64 characters of `[\w+=,.@-]`.
fn session_name(volume_id: &str) -> String {
    let cleaned: String = volume_id
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "+=,.@-_".contains(c) {
                c
            } else {
                '-'
            }
        })
        .collect();
    let mut name = format!("msfs-{cleaned}");
    name.truncate(64);
    name
}

fn temporary_keys(
    credentials: Option<aws_sdk_sts::types::Credentials>,
    action: &'static str,
    role_arn: &str,
) -> Result<Keys, CsiError> {
    let credentials = credentials.ok_or_else(|| CsiError::Sts {
        action,
        role_arn: role_arn.to_string(),
        message: "STS answered without credentials".into(),
        denied: false,
    })?;
    let expires = SystemTime::try_from(credentials.expiration).ok();
    Ok(Keys::Static(StaticKeys {
        access_key_id: credentials.access_key_id,
        secret_access_key: Secret::new(credentials.secret_access_key),
        session_token: Some(Secret::new(credentials.session_token)),
        expires,
    }))
}

fn sts_error<E, R>(
    action: &'static str,
    role_arn: &str,
    error: &aws_sdk_sts::error::SdkError<E, R>,
) -> CsiError
where
    E: ProvideErrorMetadata,
{
    use aws_sdk_sts::error::SdkError;
    let (message, denied) = match error {
        SdkError::ServiceError(e) => {
            let code = e.err().code().unwrap_or("error");
            let text = e.err().message().unwrap_or("");
            (format!("{code}: {text}"), true)
        }
        SdkError::TimeoutError(_) => ("STS did not answer in time".to_string(), false),
        SdkError::DispatchFailure(_) => ("cannot reach STS".to_string(), false),
        _ => ("STS request failed".to_string(), false),
    };
    CsiError::Sts {
        action,
        role_arn: role_arn.to_string(),
        message,
        denied,
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A request map (attributes, secrets or volume context) from pairs.
    pub(crate) fn context(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn secret_keys_accept_both_spellings() {
        let keys = secret_keys(&context(&[("key_id", "id"), ("access_key", "s")])).expect("keys");
        assert_eq!(keys.access_key_id, "id");
        assert_eq!(keys.secret_access_key.expose(), "s");
        assert!(secret_keys(&context(&[("access_key_id", "id")])).is_err());
    }

    #[test]
    fn pod_token_is_read_for_the_sts_audience_only() {
        let tokens = r#"{"sts.amazonaws.com":{"token":"t0k","expirationTimestamp":"x"}}"#;
        let ctx = context(&[(TOKENS_KEY, tokens)]);
        assert_eq!(pod_token(&ctx).expect("token").expose(), "t0k");
        let other = context(&[(TOKENS_KEY, r#"{"vault":{"token":"t"}}"#)]);
        assert!(pod_token(&other).is_err());
    }

    #[test]
    fn pod_without_role_arn_needs_the_pod_info_to_find_its_service_account() {
        use super::super::attributes::{POD_NAMESPACE_KEY, SERVICE_ACCOUNT_NAME_KEY};
        let tokens = r#"{"sts.amazonaws.com":{"token":"t0k"}}"#;
        let mut ctx = context(&[("authenticationSource", "pod"), (TOKENS_KEY, tokens)]);
        let auth = AuthSettings::parse(&ctx).expect("pod without roleArn");
        assert_eq!(auth.role_arn, None);
        let error = auth
            .check_request(&HashMap::new(), &ctx)
            .expect_err("no pod info");
        assert!(
            error.to_string().starts_with("roleArn: ")
                && error.to_string().contains("podInfoOnMount"),
            "{error}"
        );
        ctx.extend(context(&[
            (POD_NAMESPACE_KEY, "team-a"),
            (SERVICE_ACCOUNT_NAME_KEY, "reader"),
        ]));
        auth.check_request(&HashMap::new(), &ctx)
            .expect("pod info present");
    }

    #[test]
    fn role_arn_attribute_is_checked() {
        let bad = AuthSettings::parse(&context(&[("roleArn", "my-role")])).expect_err("not an ARN");
        assert!(
            bad.to_string().starts_with("roleArn: not an IAM role ARN"),
            "{bad}"
        );
        let anonymous = context(&[
            ("authenticationSource", "anonymous"),
            ("roleArn", "arn:aws:iam::1:role/r"),
        ]);
        assert!(AuthSettings::parse(&anonymous).is_err());
    }

    #[test]
    fn session_names_fit_sts_rules() {
        assert_eq!(session_name("pv/1 x"), "msfs-pv-1-x");
        assert_eq!(session_name(&"a".repeat(100)).len(), 64);
    }
}
