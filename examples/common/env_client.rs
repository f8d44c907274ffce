//! The S3 client of the example tools: path-style, static credentials from the environment.

use aws_sdk_s3::Client;
use aws_sdk_s3::config::{BehaviorVersion, Credentials, Region, RequestChecksumCalculation};

/// A client for `endpoint` signed with `AWS_ACCESS_KEY_ID` / `AWS_SECRET_ACCESS_KEY`, in
/// `AWS_REGION` (default us-east-1).
pub fn client_from_env(endpoint: &str) -> Result<Client, std::env::VarError> {
    let credentials = Credentials::new(
        std::env::var("AWS_ACCESS_KEY_ID")?,
        std::env::var("AWS_SECRET_ACCESS_KEY")?,
        None,
        None,
        "environment",
    );
    let config = aws_sdk_s3::Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .endpoint_url(endpoint)
        .region(Region::new(
            std::env::var("AWS_REGION").unwrap_or_else(|_| "us-east-1".into()),
        ))
        .credentials_provider(credentials)
        .force_path_style(true)
        // S3-compatible servers differ in support for the SDK's default trailing checksums.
        .request_checksum_calculation(RequestChecksumCalculation::WhenRequired)
        .build();
    Ok(Client::from_conf(config))
}
