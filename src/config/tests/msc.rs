//! The MSC format shared with the Python client, and the telemetry section.

use super::*;

const MSC_YAML: &str = r#"
profiles:
  s3-data:
    storage_provider:
      type: s3
      options:
        base_path: my-bucket/some/prefix
        endpoint_url: https://s3.example.com
        region_name: us-west-2
    credentials_provider:
      type: S3Credentials
      options:
        access_key: AK
        secret_key: SK
  whole:
    storage_provider:
      type: s8k
      options:
        base_path: other
        region_name: eu-central-1
  disk:
    storage_provider:
      type: file
      options:
        base_path: /srv/data
posix:
  mountname: msc
  mountpoint: /mnt/msc
  allow_other: false
  auto_sighup_interval: 60
"#;

#[test]
fn msc_yaml_profiles_become_backends() {
    let loaded = parse("msc.yaml", MSC_YAML);
    let c = &loaded.config;
    assert!(loaded.warnings.is_empty(), "{:?}", loaded.warnings);
    assert_eq!(c.mountname, "msc");
    assert_eq!(c.mountpoint, Path::new("/mnt/msc"));
    assert!(!c.allow_other);
    assert_eq!(c.auto_sighup_interval, Some(Duration::from_secs(60)));
    // Everything else keeps the v1 defaults.
    assert_eq!(c.cache.lines, 128);
    assert_eq!(c.write_commit_workers, 8);

    let names: Vec<&str> = c.backends.iter().map(|b| b.dir_name.as_str()).collect();
    assert_eq!(names, ["disk", "s3-data", "whole"]);

    let disk = &c.backends[0];
    assert_eq!(
        (disk.bucket.as_str(), disk.prefix.as_str()),
        ("/srv/data", "")
    );
    assert_eq!(disk.kind, BackendKind::File);

    let data = &c.backends[1];
    assert_eq!(
        (data.bucket.as_str(), data.prefix.as_str()),
        ("my-bucket", "some/prefix/")
    );
    assert!(data.readonly);
    assert_eq!((data.dir_perm, data.file_perm), (0o555, 0o444));
    let s = s3(data);
    assert_eq!(s.endpoint.as_deref(), Some("https://s3.example.com"));
    assert_eq!(s.region, "us-west-2");
    assert_eq!(s.config_profile, None);
    assert_eq!(
        s.credentials,
        S3Credentials::Static {
            access_key_id: "AK".into(),
            secret_access_key: Secret::new("SK"),
            session_token: None,
        }
    );

    let whole = &c.backends[2];
    assert_eq!(
        (whole.bucket.as_str(), whole.prefix.as_str()),
        ("other", "")
    );
    assert_eq!(s3(whole).region, "eu-central-1");
    assert_eq!(s3(whole).credentials, S3Credentials::DefaultChain);
}

#[test]
fn msc_json_user_guide_example_uses_keys_from_the_options() {
    let text = r#"{
      "profiles": {
        "my-profile": {
          "storage_provider": {
            "type": "s3",
            "options": {
              "base_path": "${BUCKET_NAME}",
              "access_key_id": "${AWS_ACCESS_KEY_ID}",
              "secret_access_key": "${AWS_SECRET_ACCESS_KEY}"
            }
          }
        }
      }
    }"#;
    let loaded = parse_with(
        "msc.json",
        text,
        &[
            ("BUCKET_NAME", "bkt/pre"),
            ("AWS_ACCESS_KEY_ID", "AK"),
            ("AWS_SECRET_ACCESS_KEY", "SK"),
        ],
    )
    .expect("parses");
    let b = only_backend(&loaded);
    assert_eq!(
        (b.dir_name.as_str(), b.bucket.as_str(), b.prefix.as_str()),
        ("my-profile", "bkt", "pre/")
    );
    assert!(
        matches!(&s3(b).credentials, S3Credentials::Static { access_key_id, .. } if access_key_id == "AK")
    );
}

#[test]
fn msc_profile_without_endpoint_or_region_uses_the_aws_config_profile() {
    let text = "profiles:\n  p:\n    storage_provider: {type: s3, options: {base_path: b}}\n";
    let loaded = parse_with("msc.yaml", text, &[("HOME", "/home/u")]).expect("parses");
    let s = s3(only_backend(&loaded));
    assert_eq!(
        s.config_profile,
        Some(AwsProfile {
            config_file: "/home/u/.aws/config".into(),
            name: "default".into(),
        })
    );
    assert_eq!(s.credentials, S3Credentials::DefaultChain);
    assert_eq!(s.region, "us-east-1");
}

#[test]
fn msc_posix_readonly_false_makes_profiles_writable() {
    let text = "posix: {readonly: false}\nprofiles:\n  p:\n    storage_provider: {type: s3, options: {base_path: b/}}\n";
    let loaded = parse("msc.yaml", text);
    let b = only_backend(&loaded);
    assert!(!b.readonly);
    assert_eq!(
        (b.dir_perm, b.file_perm, b.prefix.as_str()),
        (0o777, 0o666, "")
    );
}

#[test]
fn msc_unsupported_storage_provider_is_skipped_with_a_warning() {
    let text = "profiles:\n  az:\n    storage_provider: {type: azure, options: {base_path: c}}\n  ok:\n    storage_provider: {type: s3, options: {base_path: b}}\n  bundle:\n    provider_bundle: {type: x}\n";
    let loaded = parse("msc.yaml", text);
    assert_eq!(only_backend(&loaded).dir_name, "ok");
    assert_eq!(
        loaded.warnings,
        vec![
            "msc.yaml: profiles.az.storage_provider.type: storage provider \"azure\" is not supported by msfs (supported: s3, s8k, file); profile skipped",
            "msc.yaml: profiles.bundle: no storage_provider, profile skipped",
        ]
    );
}

#[test]
fn msc_base_path_without_bucket_is_rejected() {
    let text = "profiles:\n  p:\n    storage_provider: {type: s3, options: {base_path: /x}}\n";
    assert_eq!(
        error("msc.yaml", text),
        "msc.yaml: profiles.p.storage_provider.options.base_path: \"/x\" must start with the bucket name (bucket[/prefix])"
    );
}

#[test]
fn msc_unknown_credentials_provider_is_rejected() {
    let text = "profiles:\n  p:\n    storage_provider: {type: s3, options: {base_path: b}}\n    credentials_provider: {type: Vault}\n";
    assert_eq!(
        error("msc.yaml", text),
        "msc.yaml: profiles.p.credentials_provider.type: unsupported credentials provider \"Vault\"; msfs supports S3Credentials"
    );
}

#[test]
fn msc_profile_name_must_be_a_directory_name() {
    let text = "profiles:\n  \"a/b\":\n    storage_provider: {type: s3, options: {base_path: b}}\n";
    assert!(
        error("msc.yaml", text)
            .starts_with("msc.yaml: profiles.a/b: \"a/b\" must not contain \"/\"")
    );
}

#[test]
fn empty_file_is_an_empty_msc_config() {
    let loaded = parse("empty.yaml", "");
    assert!(loaded.config.backends.is_empty());
    assert_eq!(
        loaded.warnings,
        vec!["empty.yaml: profiles: no profile msfs can mount; the mount will be empty"]
    );
}

#[test]
fn opentelemetry_section_is_typed() {
    let text = r#"
opentelemetry:
  metrics:
    attributes:
      - type: static
        options:
          attributes:
            service.name: msc-posix
            replicas: 3
      - type: host
        options: {attributes: {node: name}}
      - type: process
    reader:
      type: periodic
      options: {export_interval_millis: 30000}
    exporter:
      type: otlp
      options: {endpoint: "http://otel-collector:4318", insecure: true}
profiles: {p: {storage_provider: {type: s3, options: {base_path: b}}}}
"#;
    let loaded = parse("msc.yaml", text);
    assert!(loaded.warnings.is_empty(), "{:?}", loaded.warnings);
    assert_eq!(
        loaded.config.telemetry,
        Some(TelemetryConfig {
            attributes: vec![
                AttributeProvider {
                    source: AttributeSource::Static,
                    attributes: BTreeMap::from([
                        ("replicas".to_string(), "3".to_string()),
                        ("service.name".to_string(), "msc-posix".to_string()),
                    ]),
                },
                AttributeProvider {
                    source: AttributeSource::Host,
                    attributes: BTreeMap::from([("node".to_string(), "name".to_string())]),
                },
                AttributeProvider {
                    source: AttributeSource::Process,
                    attributes: BTreeMap::new(),
                },
            ],
            reader: MetricsReaderConfig {
                export_interval: Duration::from_millis(30_000),
                export_timeout: Duration::from_millis(30_000),
            },
            exporter: Some(OtlpExporterConfig {
                endpoint: "http://otel-collector:4318".into(),
                insecure: true,
            }),
        })
    );
}

#[test]
fn unsupported_metrics_exporter_is_a_warning() {
    let text = "msfs_version: 1\nbackends: [{dir_name: r, backend_type: RAM}]\nopentelemetry:\n  metrics:\n    exporter: {type: console}\n";
    let loaded = parse("c.yaml", text);
    assert_eq!(
        loaded.config.telemetry.as_ref().map(|t| t.exporter.clone()),
        Some(None)
    );
    assert_eq!(
        loaded.warnings,
        vec![
            "c.yaml: opentelemetry.metrics.exporter.type: exporter \"console\" is not supported by msfs (supported: otlp); metrics will not be exported"
        ]
    );
}
