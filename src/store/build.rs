//! Turns a backend's configuration into a live [`ObjectStore`].

use std::sync::Arc;
use std::time::Duration;

use aws_config::BehaviorVersion;
use aws_config::meta::region::ProvideRegion;
use aws_config::retry::RetryConfig;
use aws_config::timeout::TimeoutConfig;
use aws_runtime::env_config::file::{EnvConfigFileKind, EnvConfigFiles};
use aws_sdk_s3::config::{Credentials, Region, RequestChecksumCalculation};

use super::aistore_auth::{BearerToken, TokenSource};
use super::retry::DEFAULT_MAX_ATTEMPTS;
use super::{
    FileStore, ObjectStore, PseudoStore, RamStore, RetryBudget, RetryPolicy, S3Store, StoreError,
};
use crate::config::{BackendConfig, BackendKind, S3Config, S3Credentials, S3Flavor};

/// A connection that cannot be set up within this long is treated as a network failure (and
/// retried), so an unreachable endpoint fails fast instead of hanging a mount.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// No byte for this long on an open response: the request is abandoned and retried.
const READ_TIMEOUT: Duration = Duration::from_secs(30);

const GCS_ENDPOINT: &str = "https://storage.googleapis.com";

/// `retry_budget` is what the store's retries draw on: the process's one budget, shared by
/// every store it opens (see `RetryBudget`).
pub async fn open_store(
    backend: &BackendConfig,
    retry_budget: &Arc<RetryBudget>,
) -> Result<Arc<dyn ObjectStore>, StoreError> {
    match &backend.kind {
        BackendKind::S3(s3) => Ok(Arc::new(
            open_s3(&backend.bucket, s3, retry_budget.clone()).await?,
        )),
        BackendKind::File => Ok(Arc::new(FileStore::new(backend.bucket.clone().into())?)),
        BackendKind::Ram(ram) => Ok(Arc::new(RamStore::new(&backend.dir_name, ram.clone()))),
        BackendKind::Pseudo(pseudo) => {
            Ok(Arc::new(PseudoStore::new(pseudo).map_err(|e| {
                StoreError::Setup(format!("backend {}: {e}", backend.dir_name))
            })?))
        }
    }
}

/// An S3 store for `bucket` that is not a backend (the shared cache's bucket).
pub async fn open_s3_store(
    bucket: &str,
    s3: &S3Config,
    retry_budget: &Arc<RetryBudget>,
) -> Result<Arc<dyn ObjectStore>, StoreError> {
    Ok(Arc::new(open_s3(bucket, s3, retry_budget.clone()).await?))
}

/// The S3 endpoint a flavour talks to (`None`: AWS's regional one). AIStore serves its S3 API
/// under `/s3` of the cluster endpoint the config names; the SDK appends a path-style bucket to
/// the endpoint's path as it is, so that path ends with a slash (`/s3/BUCKET`, not `/s3BUCKET`).
fn effective_endpoint(s3: &S3Config) -> Option<String> {
    match (&s3.endpoint, &s3.flavor) {
        (Some(endpoint), S3Flavor::AIStore) => {
            let base = endpoint.trim_end_matches('/');
            Some(if base.ends_with("/s3") {
                format!("{base}/")
            } else {
                format!("{base}/s3/")
            })
        }
        (Some(endpoint), _) => Some(endpoint.clone()),
        (None, S3Flavor::Gcs) => Some(GCS_ENDPOINT.to_string()),
        (None, _) => None,
    }
}

async fn open_s3(
    bucket: &str,
    s3: &S3Config,
    budget: Arc<RetryBudget>,
) -> Result<S3Store, StoreError> {
    let region = profile_region(s3)
        .await
        .unwrap_or_else(|| Region::new(s3.region.clone()));
    let mut loader = aws_config::defaults(BehaviorVersion::latest())
        .region(region)
        // Retries are ours (see store::retry): the configured backoff, the SDK's list of what
        // to retry, and one retry budget for the process.
        .retry_config(RetryConfig::disabled())
        // Checksums only where the API demands them: several S3-compatible servers reject the
        // SDK's default trailing checksums on uploads.
        .request_checksum_calculation(RequestChecksumCalculation::WhenRequired)
        .timeout_config(timeouts(s3));
    loader = match &s3.credentials {
        S3Credentials::Static {
            access_key_id,
            secret_access_key,
            session_token,
        } => loader.credentials_provider(Credentials::new(
            access_key_id,
            secret_access_key.expose(),
            session_token.as_ref().map(|t| t.expose().to_string()),
            None,
            "msfs-config",
        )),
        S3Credentials::Files {
            config_file,
            credentials_file,
            profile,
        } => {
            // A file given as `None` is deliberately not consulted.
            let mut files = EnvConfigFiles::builder()
                .include_default_config_file(false)
                .include_default_credentials_file(false);
            if let Some(path) = config_file {
                files = files.with_file(EnvConfigFileKind::Config, path);
            }
            if let Some(path) = credentials_file {
                files = files.with_file(EnvConfigFileKind::Credentials, path);
            }
            loader.profile_files(files.build()).profile_name(profile)
        }
        S3Credentials::Anonymous => loader.no_credentials(),
        S3Credentials::DefaultChain => loader,
    };
    if let Some(profile) = &s3.config_profile
        && !matches!(s3.credentials, S3Credentials::Files { .. })
    {
        // The profile supplies the endpoint (`endpoint_url`); credentials stay as configured.
        loader = loader
            .profile_files(
                EnvConfigFiles::builder()
                    .include_default_config_file(false)
                    .include_default_credentials_file(false)
                    .with_file(EnvConfigFileKind::Config, &profile.config_file)
                    .build(),
            )
            .profile_name(&profile.name);
    }
    let sdk = loader.load().await;
    // An endpoint from the AWS config profile wins over the configured one (use_config_env).
    let endpoint = match (&s3.config_profile, sdk.endpoint_url()) {
        (Some(_), Some(from_profile)) => Some(from_profile.to_string()),
        _ => effective_endpoint(s3),
    };
    let mut builder =
        aws_sdk_s3::config::Builder::from(&sdk).force_path_style(!s3.virtual_hosted_style);
    if let Some(endpoint) = &endpoint {
        builder = builder.endpoint_url(endpoint);
    }
    if let Some(token) = s3.aistore.as_ref().and_then(TokenSource::of) {
        builder = builder.interceptor(BearerToken(token));
    }
    let display = endpoint.unwrap_or_else(|| format!("https://s3.{}.amazonaws.com", s3.region));
    let retry = RetryPolicy {
        base_delay: s3.retry.base_delay,
        multiplier: s3.retry.multiplier,
        max_delay: s3.retry.max_delay,
        // A zero base delay is how a config turns retries off.
        max_attempts: if s3.retry.base_delay.is_zero() {
            1
        } else {
            DEFAULT_MAX_ATTEMPTS
        },
        budget,
    };
    Ok(S3Store::new(
        aws_sdk_s3::Client::from_conf(builder.build()),
        bucket.to_string(),
        display,
        &principal(s3),
        retry,
    ))
}

/// How long a request may take to connect, and how long its answer may keep it waiting for a
/// byte (the first or the next; an AIStore backend's `timeout`), before it is abandoned and
/// retried. Not a limit on a whole answer: a large body streams as long as bytes come.
fn timeouts(s3: &S3Config) -> TimeoutConfig {
    let read = s3.aistore.as_ref().map_or(READ_TIMEOUT, |a| a.timeout);
    TimeoutConfig::builder()
        .connect_timeout(CONNECT_TIMEOUT)
        .read_timeout(read)
        .build()
}

/// Who signs a store's requests, as far as the configuration tells: stores of one bucket with
/// the same principal may share cached lines, others never (a CSI volume must not read, from
/// the node's cache, what its own credentials would be refused). Temporary keys from STS have
/// a new key id at each renewal, which costs a renewed volume its cached lines, not more.
fn principal(s3: &S3Config) -> String {
    match &s3.credentials {
        S3Credentials::Static { access_key_id, .. } => format!("key:{access_key_id}"),
        S3Credentials::Files {
            config_file,
            credentials_file,
            profile,
        } => format!("profile:{profile}:{config_file:?}:{credentials_file:?}"),
        S3Credentials::Anonymous => "anonymous".into(),
        S3Credentials::DefaultChain => "default-chain".into(),
    }
}

/// The region of the `use_config_env` profile, if it names one.
async fn profile_region(s3: &S3Config) -> Option<Region> {
    let profile = s3.config_profile.as_ref()?;
    let files = EnvConfigFiles::builder()
        .include_default_config_file(false)
        .include_default_credentials_file(false)
        .with_file(EnvConfigFileKind::Config, &profile.config_file)
        .build();
    let provider = aws_config::profile::ProfileFileRegionProvider::builder()
        .profile_files(files)
        .profile_name(&profile.name)
        .build();
    ProvideRegion::region(&provider).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{RetryConfig, S3Credentials};

    fn s3(flavor: S3Flavor, endpoint: Option<&str>) -> S3Config {
        S3Config {
            flavor,
            endpoint: endpoint.map(str::to_string),
            region: "us-east-1".into(),
            credentials: S3Credentials::Anonymous,
            config_profile: None,
            virtual_hosted_style: false,
            retry: RetryConfig::default(),
            aistore: None,
        }
    }

    #[test]
    fn each_flavour_has_its_endpoint_default() {
        assert_eq!(effective_endpoint(&s3(S3Flavor::Aws, None)), None);
        assert_eq!(
            effective_endpoint(&s3(S3Flavor::Gcs, None)).as_deref(),
            Some("https://storage.googleapis.com")
        );
        assert_eq!(
            effective_endpoint(&s3(S3Flavor::AIStore, Some("http://ais:51080/"))).as_deref(),
            Some("http://ais:51080/s3/")
        );
        assert_eq!(
            effective_endpoint(&s3(S3Flavor::AIStore, Some("http://ais:51080/s3"))).as_deref(),
            Some("http://ais:51080/s3/")
        );
    }

    /// A one-connection HTTP server on 127.0.0.1 that answers every request with an empty
    /// listing (or, `answer: false`, never answers) and sends back each request's head.
    fn listing_server(answer: bool) -> (String, std::sync::mpsc::Receiver<String>) {
        use std::io::{Read, Write};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let address = listener.local_addr().expect("address");
        let (heads, received) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { return };
                let mut head = Vec::new();
                let mut byte = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") && stream.read(&mut byte).unwrap_or(0) == 1 {
                    head.push(byte[0]);
                }
                if heads
                    .send(String::from_utf8_lossy(&head).into_owned())
                    .is_err()
                {
                    return;
                }
                if !answer {
                    // Holds the connection open, silent, until the test ends.
                    std::thread::sleep(Duration::from_secs(60));
                    return;
                }
                let body = "<?xml version=\"1.0\" encoding=\"UTF-8\"?><ListBucketResult>\
                    <Name>b</Name><Prefix></Prefix><KeyCount>0</KeyCount><MaxKeys>1</MaxKeys>\
                    <IsTruncated>false</IsTruncated></ListBucketResult>";
                let _ = write!(
                    stream,
                    "HTTP/1.1 200 OK\r\nContent-Type: application/xml\r\n\
                     Content-Length: {}\r\n\r\n{body}",
                    body.len()
                );
            }
        });
        (format!("http://{address}"), received)
    }

    fn aistore(endpoint: &str, token: Option<&str>, timeout: Duration) -> S3Config {
        S3Config {
            aistore: Some(crate::config::AIStoreOptions {
                authn_token: token.map(crate::config::Secret::new),
                authn_token_file: None,
                timeout,
                manifest_gen_backend: None,
            }),
            ..s3(S3Flavor::AIStore, Some(endpoint))
        }
    }

    async fn list_once(config: &S3Config) -> Result<(), StoreError> {
        let store = open_s3("b", config, Default::default()).await?;
        store
            .list(&super::super::ListRequest::delimited("").max_keys(Some(1)))
            .await
            .map(|_| ())
    }

    #[tokio::test]
    async fn an_aistore_backend_sends_its_authn_token_as_a_bearer_token() {
        let (endpoint, heads) = listing_server(true);
        list_once(&aistore(
            &endpoint,
            Some("tok-123"),
            Duration::from_secs(30),
        ))
        .await
        .expect("listed");
        let head = heads.recv().expect("a request").to_ascii_lowercase();
        // AIStore's S3 API, path-style: /s3/BUCKET.
        assert!(head.starts_with("get /s3/b/?"), "{head}");
        assert!(
            head.contains("\r\nauthorization: bearer tok-123\r\n"),
            "{head}"
        );
    }

    #[tokio::test]
    async fn without_a_token_an_aistore_request_carries_no_authorization() {
        let (endpoint, heads) = listing_server(true);
        list_once(&aistore(&endpoint, None, Duration::from_secs(30)))
            .await
            .expect("listed");
        let head = heads.recv().expect("a request").to_ascii_lowercase();
        assert!(!head.contains("authorization"), "{head}");
    }

    /// The configured `timeout` ends a request whose answer never starts (the default read
    /// timeout is 30 s; the margin here is wide enough for any machine).
    #[tokio::test]
    async fn an_aistore_request_that_gets_no_answer_ends_at_its_timeout() {
        let (endpoint, _heads) = listing_server(false);
        let mut config = aistore(&endpoint, None, Duration::from_millis(200));
        config.retry.base_delay = Duration::ZERO;
        let outcome = tokio::time::timeout(Duration::from_secs(20), list_once(&config)).await;
        let result = outcome.expect("the request ended at its timeout, long before 20 s");
        assert!(result.is_err(), "a silent server is an error: {result:?}");
    }
}
