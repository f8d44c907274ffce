//! The per-store sub-sections: S3 credentials, AIStore, GCS, PSEUDO, backend types.

use super::*;

const S3_ONLY: &str =
    "msfs_version: 1\nbackends:\n  - {dir_name: b, backend_type: S3, bucket_container_name: k}\n";

#[test]
fn s3_defaults_come_from_the_aws_environment() {
    let loaded = parse_with(
        "c.yaml",
        S3_ONLY,
        &[
            ("AWS_ENDPOINT", "http://minio:9000"),
            ("AWS_REGION", "ap-south-1"),
            ("AWS_ACCESS_KEY_ID", "AKIAENV"),
            ("AWS_SECRET_ACCESS_KEY", "envsecret"),
            ("AWS_SESSION_TOKEN", "envtoken"),
        ],
    )
    .expect("parses");
    let s = s3(only_backend(&loaded));
    assert_eq!(s.endpoint.as_deref(), Some("http://minio:9000"));
    assert_eq!(s.region, "ap-south-1");
    assert_eq!(
        s.credentials,
        S3Credentials::Static {
            access_key_id: "AKIAENV".into(),
            secret_access_key: Secret::new("envsecret"),
            session_token: Some(Secret::new("envtoken")),
        }
    );
}

#[test]
fn env_session_token_is_not_paired_with_keys_written_in_the_file() {
    let text = "msfs_version: 1\nbackends:\n  - dir_name: b\n    backend_type: S3\n    bucket_container_name: k\n    S3: {access_key_id: A, secret_access_key: B}\n";
    let loaded = parse_with("c.yaml", text, &[("AWS_SESSION_TOKEN", "stale")]).expect("parses");
    assert!(matches!(
        &s3(only_backend(&loaded)).credentials,
        S3Credentials::Static {
            session_token: None,
            ..
        }
    ));
}

#[test]
fn half_given_static_credentials_are_rejected() {
    let text = "msfs_version: 1\nbackends:\n  - dir_name: b\n    backend_type: S3\n    bucket_container_name: k\n    S3: {access_key_id: A}\n";
    assert_eq!(
        error("c.yaml", text),
        "c.yaml: backends[0].S3.secret_access_key: missing or empty while access_key_id is set; give both or neither"
    );
}

#[test]
fn use_credentials_env_reads_the_shared_files() {
    let text = "msfs_version: 1\nbackends:\n  - dir_name: b\n    backend_type: S3\n    bucket_container_name: k\n    S3: {use_credentials_env: true}\n";
    let loaded = parse_with(
        "c.yaml",
        text,
        &[("HOME", "/home/u"), ("AWS_PROFILE", "prod")],
    )
    .expect("parses");
    let s = s3(only_backend(&loaded));
    assert_eq!(
        s.credentials,
        S3Credentials::Files {
            config_file: None,
            credentials_file: Some("/home/u/.aws/credentials".into()),
            profile: "prod".into(),
        }
    );
    assert_eq!(s.config_profile, None);
}

#[test]
fn use_config_env_takes_region_and_endpoint_from_the_profile() {
    let text = "msfs_version: 1\nbackends:\n  - dir_name: b\n    backend_type: S3\n    bucket_container_name: k\n    S3: {use_config_env: true, config_file_path: /etc/aws.cfg}\n";
    let loaded = parse("c.yaml", text);
    let s = s3(only_backend(&loaded));
    assert_eq!(
        s.config_profile,
        Some(AwsProfile {
            config_file: "/etc/aws.cfg".into(),
            name: "default".into(),
        })
    );
    assert_eq!(
        s.credentials,
        S3Credentials::Files {
            config_file: Some("/etc/aws.cfg".into()),
            credentials_file: None,
            profile: "default".into(),
        }
    );
}

#[test]
fn anonymous_s3_signs_nothing() {
    let text = "msfs_version: 1\nbackends:\n  - dir_name: b\n    backend_type: S3\n    bucket_container_name: k\n    S3: {anonymous: true}\n";
    let loaded = parse_with(
        "c.yaml",
        text,
        &[
            ("AWS_ACCESS_KEY_ID", "ignored"),
            ("AWS_SECRET_ACCESS_KEY", "x"),
        ],
    )
    .expect("parses");
    assert_eq!(
        s3(only_backend(&loaded)).credentials,
        S3Credentials::Anonymous
    );
}

#[test]
fn anonymous_with_explicit_keys_is_rejected() {
    let text = "msfs_version: 1\nbackends:\n  - dir_name: b\n    backend_type: S3\n    bucket_container_name: k\n    S3: {anonymous: true, access_key_id: A, secret_access_key: B}\n";
    assert_eq!(
        error("c.yaml", text),
        "c.yaml: backends[0].S3.access_key_id: cannot be combined with anonymous: true"
    );
}

#[test]
fn aistore_backend_reads_its_section_and_environment() {
    let text = "msfs_version: 1\nbackends:\n  - dir_name: ais\n    backend_type: AIStore\n    bucket_container_name: k\n    AIStore: {provider: ais}\n";
    let loaded = parse_with(
        "c.yaml",
        text,
        &[
            ("AIS_ENDPOINT", "https://ais:51080"),
            ("AIS_AUTHN_TOKEN", "tok"),
            ("HOME", "/h"),
        ],
    )
    .expect("parses");
    let s = s3(only_backend(&loaded));
    assert_eq!(s.flavor, S3Flavor::AIStore);
    assert_eq!(s.endpoint.as_deref(), Some("https://ais:51080"));
    assert_eq!(
        s.aistore,
        Some(AIStoreOptions {
            authn_token: Some(Secret::new("tok")),
            authn_token_file: Some("/h/.config/ais/cli/auth.token".into()),
            timeout: Duration::from_millis(30_000),
            manifest_gen_backend: None,
        })
    );
}

#[test]
fn skipping_certificate_verification_is_refused_where_it_is_written() {
    for (ty, section) in [
        ("S3", "S3: {region: r, skip_tls_certificate_verify: true}"),
        (
            "AIStore",
            "AIStore: {endpoint: 'https://ais', skip_tls_certificate_verify: true}",
        ),
        ("GCS", "GCS: {skip_tls_certificate_verify: true}"),
    ] {
        let text = format!(
            "msfs_version: 1\nbackends:\n  - {{dir_name: a, backend_type: {ty}, \
             bucket_container_name: k, {section}}}\n"
        );
        let message = error("c.yaml", &text);
        assert!(
            message.starts_with(&format!(
                "c.yaml: backends[0].{ty}.skip_tls_certificate_verify: msfs always verifies"
            )),
            "{message}"
        );
        assert!(message.contains("SSL_CERT_FILE"), "{message}");
        let allowed = text.replace(
            "skip_tls_certificate_verify: true",
            "skip_tls_certificate_verify: false",
        );
        assert!(
            parse_with("c.yaml", &allowed, &[]).is_ok(),
            "{ty}: false is accepted"
        );
    }
}

#[test]
fn aistore_without_endpoint_is_rejected() {
    let text = "msfs_version: 1\nbackends:\n  - {dir_name: ais, backend_type: AIStore, bucket_container_name: k}\n";
    assert_eq!(
        error("c.yaml", text),
        "c.yaml: backends[0].AIStore.endpoint: required; set it here or in AIS_ENDPOINT"
    );
}

#[test]
fn gcs_backend_defaults_to_the_interoperability_endpoint() {
    let text = "msfs_version: 1\nbackends:\n  - dir_name: g\n    backend_type: GCS\n    bucket_container_name: k\n    GCS: {api_key: key123}\n";
    let loaded = parse("c.yaml", text);
    let s = s3(only_backend(&loaded));
    assert_eq!(s.flavor, S3Flavor::Gcs);
    assert_eq!(
        s.endpoint.as_deref(),
        Some("https://storage.googleapis.com")
    );
    assert!(loaded.warnings[0].contains("api_key: accepted for compatibility"));
    assert_eq!(s.credentials, S3Credentials::Anonymous);
}

#[test]
fn pseudo_backend_reads_every_key() {
    let text = r#"
msfs_version: 1
backends:
  - dir_name: p
    backend_type: PSEUDO
    PSEUDO:
      dir_name_format: "d%04d"
      file_name_format: "f%04d"
      dir_starting_number: 3
      file_starting_number: 7
      file_size: 4096
      files_at_depth_0: 1
      files_at_depth_1: 2
      subdirectories_at_depth_0: 3
      max_list_page_size: 10
      min_latency_read_file: 5
      min_latency_stat_file: 6
"#;
    let loaded = parse("c.yaml", text);
    let BackendKind::Pseudo(p) = &only_backend(&loaded).kind else {
        panic!("expected PSEUDO");
    };
    assert_eq!(
        *p,
        PseudoConfig {
            dir_name_format: "d%04d".into(),
            file_name_format: "f%04d".into(),
            dir_starting_number: 3,
            file_starting_number: 7,
            file_size: 4096,
            files_at_depth: [1, 2, 0, 0],
            subdirectories_at_depth: [3, 0, 0],
            max_list_page_size: 10,
            min_latency: PseudoLatencies {
                read_file: Duration::from_millis(5),
                stat_file: Duration::from_millis(6),
                ..PseudoLatencies::default()
            },
        }
    );
    assert_eq!(p.dir_name(0), "d0003");
    assert_eq!(p.file_name(5), "f0012");
}

#[test]
fn pseudo_files_below_a_level_without_directories_are_rejected() {
    let text = "msfs_version: 1\nbackends:\n  - dir_name: p\n    backend_type: PSEUDO\n    PSEUDO: {files_at_depth_1: 4}\n";
    assert!(
        error("c.yaml", text)
            .starts_with("c.yaml: backends[0].PSEUDO.subdirectories_at_depth_0: is 0"),
        "{}",
        error("c.yaml", text)
    );
}

#[test]
fn pseudo_names_must_sort_directories_first() {
    let text = "msfs_version: 1\nbackends:\n  - dir_name: p\n    backend_type: PSEUDO\n    PSEUDO: {dir_name_format: \"z%d\"}\n";
    assert_eq!(
        error("c.yaml", text),
        "c.yaml: backends[0].PSEUDO.file_name_format: generated directory names must sort before generated file names"
    );
}

#[test]
fn read_only_store_types_cannot_be_made_writable() {
    let text =
        "msfs_version: 1\nbackends:\n  - {dir_name: p, backend_type: PSEUDO, readonly: false}\n";
    assert!(
        error("c.yaml", text)
            .starts_with("c.yaml: backends[0].readonly: backend_type PSEUDO is read-only")
    );
}

#[test]
fn backend_type_is_case_insensitive() {
    let loaded = parse(
        "c.yaml",
        "msfs_version: 1\nbackends:\n  - {dir_name: a, backend_type: s3, bucket_container_name: k}\n  - {dir_name: b, backend_type: ram}\n  - {dir_name: c, backend_type: FILE, bucket_container_name: /srv}\n",
    );
    let kinds: Vec<&BackendKind> = loaded.config.backends.iter().map(|b| &b.kind).collect();
    assert!(matches!(
        kinds[..],
        [BackendKind::S3(_), BackendKind::Ram(_), BackendKind::File]
    ));
}

#[test]
fn a_metrics_endpoint_msfs_cannot_serve_is_refused_at_load() {
    let message = error(
        "c.yaml",
        "msfs_version: 1\nendpoint: https://0.0.0.0:9100\nbackends: []\n",
    );
    assert!(
        message.starts_with(
            "c.yaml: endpoint: \"https://0.0.0.0:9100\": msfs serves /metrics over plain HTTP"
        ),
        "{message}"
    );
}
