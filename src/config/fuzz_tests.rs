//! Property tests (the config parser's fuzz targets): whatever text a config file holds, the
//! parser answers with a config or an error that names the file and, for content, the key;
//! never a panic, never a secret in the message.
//!
//! Inputs are arbitrary bytes, text over YAML's structural characters, and documents built
//! from the real key names with values of random types at random depths (rendered as YAML
//! and as JSON, which must agree). Cases per property: the `with_cases` count, which
//! `PROPTEST_CASES` overrides (the `proptest!` macro lays the environment over the config).
//! Failures are saved under `proptest-regressions/` and replayed first; inputs that once failed
//! are also kept below as named tests.

use std::io::Write as _;
use std::path::Path;

use proptest::prelude::*;
use proptest::test_runner::Config as ProptestConfig;
use serde_json::{Map, Value};

use super::expand::expand;
use super::{ConfigError, Loaded, load, parse_str};

/// Marks secret values, so a leak is a substring search. Never produced by other strategies.
const SECRET_MARK: &str = "S3CR3T";

/// Keys whose values are credentials, kept in `config::Secret`. (Access key ids are not
/// secret: the MSC format's `access_key` is one.)
const SECRET_KEYS: [&str; 5] = [
    "secret_access_key",
    "session_token",
    "authn_token",
    "api_key",
    "secret_key",
];

const TOP_KEYS: &[&str] = &[
    "msfs_version",
    "mountname",
    "mountpoint",
    "fuse_workers",
    "uid",
    "gid",
    "dir_perm",
    "allow_other",
    "lock_code_in_memory",
    "max_write",
    "fuse_writeback_cache",
    "fuse_passthrough",
    "fuse_io_uring",
    "fuse_io_uring_poll_us",
    "entry_attr_ttl",
    "evictable_inode_ttl",
    "virtual_dir_ttl",
    "virtual_file_ttl",
    "ttl_check_interval",
    "evictable_inode_limit",
    "cache_storage",
    "cache_backend",
    "mapped_cache",
    "cache_line_size",
    "cache_lines",
    "cache_ram_lines",
    "cache_lines_to_prefetch",
    "cache_dir_path",
    "cache_persistent",
    "write_cache_promotion",
    "multipart_upload_threshold_bytes",
    "write_commit_workers",
    "write_dirty_limit_bytes",
    "write_buffer_limit_bytes",
    "process_memory_limit",
    "auto_sighup_interval",
    "fuse_request_stall_warn_secs",
    "endpoint",
    "opentelemetry",
    "backends",
    "pebble_cache_size",
    // The MSC format's top level.
    "posix",
    "profiles",
    "cache",
    "include",
];
const BACKEND_KEYS: &[&str] = &[
    "dir_name",
    "backend_type",
    "bucket_container_name",
    "prefix",
    "readonly",
    "flush_on_close",
    "posix_metadata",
    "uid",
    "gid",
    "dir_perm",
    "file_perm",
    "directory_page_size",
    "trace_level",
    "max_key_bytes",
    "manifest_path",
    "manifest_gen_workers",
    "flat_dir_confirmation_pages",
    "flat_dir_hints",
    "S3",
    "AIStore",
    "GCS",
    "RAM",
    "PSEUDO",
    "upload_part_concurrency",
];
const S3_KEYS: &[&str] = &[
    "use_config_env",
    "use_credentials_env",
    "anonymous",
    "config_credentials_profile",
    "config_file_path",
    "credentials_file_path",
    "endpoint",
    "region",
    "access_key_id",
    "secret_access_key",
    "session_token",
    "skip_tls_certificate_verify",
    "virtual_hosted_style_request",
    "retry_base_delay",
    "retry_next_delay_multiplier",
    "retry_max_delay",
    "unsigned_payload",
    // AIStore and GCS share this sub-section shape.
    "authn_token",
    "authn_token_file",
    "provider",
    "timeout",
    "manifest_gen_backend",
    "api_key",
];
const RAM_KEYS: &[&str] = &[
    "max_list_page_size",
    "max_total_objects",
    "max_total_object_space",
];
const PSEUDO_KEYS: &[&str] = &[
    "dir_name_format",
    "file_name_format",
    "files_at_depth_0",
    "files_at_depth_1",
    "files_at_depth_2",
    "files_at_depth_3",
    "subdirectories_at_depth_0",
    "subdirectories_at_depth_1",
    "subdirectories_at_depth_2",
    "max_list_page_size",
    "dir_starting_number",
    "file_starting_number",
    "file_size",
    "min_latency_read_file",
];
const HINT_KEYS: &[&str] = &["path", "key_prefix_chars", "split_depth"];
const OTEL_KEYS: &[&str] = &["metrics"];
const METRICS_KEYS: &[&str] = &["attributes", "reader", "exporter"];
const TYPED_KEYS: &[&str] = &["type", "options"];
const READER_OPTION_KEYS: &[&str] = &[
    "collect_interval_millis",
    "collect_timeout_millis",
    "export_interval_millis",
    "export_timeout_millis",
];
const EXPORTER_OPTION_KEYS: &[&str] = &["endpoint", "insecure", "attributes"];
const POSIX_KEYS: &[&str] = &[
    "mountname",
    "mountpoint",
    "allow_other",
    "auto_sighup_interval",
    "readonly",
];
const PROFILE_KEYS: &[&str] = &[
    "storage_provider",
    "credentials_provider",
    "caching_enabled",
    "comment",
];
const PROVIDER_OPTION_KEYS: &[&str] = &[
    "base_path",
    "endpoint_url",
    "region_name",
    "access_key_id",
    "secret_access_key",
    "session_token",
    "access_key",
    "secret_key",
];

/// The keys a mapping under `key` is read with.
fn child_keys(key: &str) -> Option<&'static [&'static str]> {
    Some(match key {
        "S3" | "AIStore" | "GCS" => S3_KEYS,
        "RAM" => RAM_KEYS,
        "PSEUDO" => PSEUDO_KEYS,
        "opentelemetry" => OTEL_KEYS,
        "metrics" => METRICS_KEYS,
        "reader" | "exporter" | "storage_provider" | "credentials_provider" => TYPED_KEYS,
        "posix" => POSIX_KEYS,
        _ => return None,
    })
}

/// Scalars of every type, including the edges of each.
fn any_scalar() -> BoxedStrategy<Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        prop_oneof![
            Just(0.5),
            Just(-1.0),
            Just(1e20),
            Just(10.0),
            Just(f64::MAX),
            any::<f64>().prop_filter("finite", |f| f.is_finite()),
        ]
        .prop_map(Value::from),
        Just(Value::from("")),
        "[ -~]{0,12}".prop_map(Value::from),
        any::<String>().prop_map(Value::from),
    ]
    .boxed()
}

/// Anything at all: scalars, lists and mappings with junk keys, nested a few levels.
fn any_value() -> BoxedStrategy<Value> {
    any_scalar()
        .prop_recursive(3, 24, 4, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                prop::collection::vec(("[a-z_]{1,8}", inner), 0..4)
                    .prop_map(|pairs| Value::Object(pairs.into_iter().collect())),
            ]
        })
        .boxed()
}

fn strings(options: &'static [&'static str]) -> BoxedStrategy<Value> {
    prop::sample::select(options).prop_map(Value::from).boxed()
}

/// Mostly one of `good`, sometimes one of `bad`: enough valid values that a document gets past
/// its first keys to the deeper checks, enough invalid ones that every check gets its turn.
fn good_or_bad(good: BoxedStrategy<Value>, bad: BoxedStrategy<Value>) -> BoxedStrategy<Value> {
    prop_oneof![8 => good, 1 => bad].boxed()
}

/// A plausible value for `key`: right or almost right in type and range.
fn plausible(key: &str) -> BoxedStrategy<Value> {
    if SECRET_KEYS.contains(&key) {
        return "[A-Za-z0-9]{0,6}"
            .prop_map(|s| Value::from(format!("{SECRET_MARK}{s}")))
            .boxed();
    }
    let pick = |good: &'static [&'static str], bad: &'static [&'static str]| {
        good_or_bad(strings(good), strings(bad))
    };
    match key {
        "msfs_version" => good_or_bad(
            Just(Value::from(1)).boxed(),
            prop::sample::select(vec![
                Value::from(0),
                Value::from(2),
                Value::from("1"),
                Value::from(-1),
                Value::from(1.0),
            ])
            .boxed(),
        ),
        "backend_type" => pick(
            &[
                "S3", "s3", "AIStore", "GCS", "RAM", "ram", "PSEUDO", "file", " S3 ",
            ],
            &["Swift", ""],
        ),
        "type" => pick(
            &[
                "s3",
                "s8k",
                "file",
                "S3Credentials",
                "static",
                "host",
                "process",
                "environment_variables",
                "periodic",
                "diperiodic",
                "otlp",
            ],
            &["console", "", "Static"],
        ),
        "cache_storage" => pick(
            &["ram", "mapped-file", "per-inode-file", " ram "],
            &["disk"],
        ),
        "cache_backend" => pick(&["disk", "memory"], &["ssd"]),
        "dir_perm" | "file_perm" => good_or_bad(
            prop_oneof![
                strings(&["755", "0644", "0777", "000"]),
                Just(Value::from(755)),
            ]
            .boxed(),
            prop_oneof![
                strings(&["999", "rwx", "", "7777", "1777", "0o755"]),
                prop::sample::select(vec![1777u64, 8]).prop_map(Value::from),
            ]
            .boxed(),
        ),
        "endpoint" | "endpoint_url" => pick(
            &["http://127.0.0.1:9000", "https://s3.example.com", ""],
            &[
                "htp://x",
                "https://",
                "http:///x",
                "http://a b",
                "${AWS_ENDPOINT}",
            ],
        ),
        "dir_name" | "manifest_gen_backend" => pick(
            &["a", "b", "data", "é", "_root"],
            &[".", "..", "a/b", "", "\0"],
        ),
        "mountname" => pick(&["msfs", "é"], &["x,y", "", "\0"]),
        "prefix" | "path" => pick(&["", "p/", "a/b/"], &["p", "/"]),
        "mountpoint"
        | "cache_dir_path"
        | "manifest_path"
        | "config_file_path"
        | "credentials_file_path"
        | "authn_token_file" => pick(&["/mnt/x", "/var/lib/m", ""], &["relative", "~/x"]),
        "bucket_container_name" | "base_path" => {
            pick(&["b", "b/p", "/srv/b", "bucket-1"], &["", "s3://b", "/b"])
        }
        "dir_name_format" | "file_name_format" => pick(
            &["dir_%08X", "file_%08X", "f%d.bin", "%%%4x%%", "é%o"],
            &[
                "%",
                "%q",
                "no-conversion",
                "%d%d",
                "a/%d",
                "%65d",
                "%99999999999999999999d",
                "%064d",
            ],
        ),
        "key_prefix_chars" => pick(&["0123456789", "ab", "é日"], &["aa", ""]),
        "region" | "region_name" | "provider" | "config_credentials_profile" => {
            pick(&["us-east-1", "ais"], &["", " ", "${AWS_REGION}"])
        }
        // Sections and lists, when `value_for` has run out of depth.
        _ if child_keys(key).is_some() || key == "backends" || key == "profiles" => any_value(),
        // Booleans are read from booleans or "true"/"false" strings.
        "allow_other"
        | "lock_code_in_memory"
        | "mapped_cache"
        | "write_cache_promotion"
        | "cache_persistent"
        | "readonly"
        | "flush_on_close"
        | "posix_metadata"
        | "use_config_env"
        | "use_credentials_env"
        | "anonymous"
        | "skip_tls_certificate_verify"
        | "virtual_hosted_style_request"
        | "insecure" => good_or_bad(
            prop_oneof![
                any::<bool>().prop_map(Value::from),
                strings(&["true", "FALSE", " true "]),
            ]
            .boxed(),
            strings(&["yes", "", "1"]),
        ),
        // Everything else in the schema is a number.
        _ => good_or_bad(
            prop_oneof![
                prop::sample::select(vec![0u64, 1, 2, 16, 100, 4096, 1 << 26, 1 << 30, 1 << 33])
                    .prop_map(Value::from),
                strings(&["1", " 7 ", "42", "10.0"]),
                Just(Value::from(20.0)),
            ]
            .boxed(),
            prop_oneof![
                strings(&["-1", "1.5", "", "x", "${N}", "1e3", "0x10"]),
                prop::sample::select(vec![u64::MAX, u64::from(u32::MAX) + 1]).prop_map(Value::from),
                Just(Value::from(-5)),
                Just(Value::from(2.5)),
                Just(Value::from(1e20)),
            ]
            .boxed(),
        ),
    }
}

/// A mapping read with `keys`: a random few of them (plus, sometimes, a junk key), each with a
/// plausible value or, one time in twenty, a value of any type.
fn mapping(keys: &'static [&'static str], depth: u32) -> BoxedStrategy<Value> {
    mapping_with(&[], keys, depth)
}

/// [`mapping`], with each of `required` present nine times in ten, so the sections that need
/// them (a backend's `dir_name`, `backend_type`, bucket) usually get past them.
fn mapping_with(
    required: &'static [&'static str],
    keys: &'static [&'static str],
    depth: u32,
) -> BoxedStrategy<Value> {
    let entry = move |key: &'static str| {
        let value = prop_oneof![19 => value_for(key, depth), 1 => any_value()];
        (Just(key.to_string()), value)
    };
    let required: Vec<_> = required
        .iter()
        .map(|key| prop::option::weighted(0.9, entry(key)))
        .collect();
    (
        required,
        prop::collection::vec(prop::sample::select(keys).prop_flat_map(entry), 0..4),
        prop::option::weighted(0.1, ("[a-z_]{1,10}", any_scalar())),
    )
        .prop_map(|(required, pairs, junk)| {
            let mut map: Map<String, Value> = required.into_iter().flatten().collect();
            for (key, value) in pairs {
                map.entry(key).or_insert(value);
            }
            if let Some((key, value)) = junk {
                map.entry(key).or_insert(value);
            }
            Value::Object(map)
        })
        .boxed()
}

/// The value for `key` as the schema has it: a nested mapping or list where the parser expects
/// one (down to a bounded depth), a plausible scalar otherwise.
fn value_for(key: &'static str, depth: u32) -> BoxedStrategy<Value> {
    if depth >= 4 {
        return plausible(key);
    }
    let list_of = |item: BoxedStrategy<Value>| {
        prop::collection::vec(item, 0..=3)
            .prop_map(Value::Array)
            .boxed()
    };
    match key {
        "backends" => list_of(mapping_with(
            &["dir_name", "backend_type", "bucket_container_name"],
            BACKEND_KEYS,
            depth + 1,
        )),
        "flat_dir_hints" => list_of(mapping_with(&["path"], HINT_KEYS, depth + 1)),
        // `metrics.attributes` is a list of providers; `options.attributes` a string map.
        "attributes" => prop_oneof![
            list_of(mapping_with(TYPED_KEYS, TYPED_KEYS, depth + 1)),
            prop::collection::btree_map("[a-z]{1,4}", any_scalar(), 0..3)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
        .boxed(),
        "options" => prop_oneof![
            mapping(READER_OPTION_KEYS, depth + 1),
            mapping(EXPORTER_OPTION_KEYS, depth + 1),
            mapping(PROVIDER_OPTION_KEYS, depth + 1),
        ]
        .boxed(),
        "profiles" => prop::collection::vec(
            (
                prop::sample::select(&["p", "q", "_x", "a/b", "..", ""][..]),
                mapping_with(&["storage_provider"], PROFILE_KEYS, depth + 1),
            ),
            0..3,
        )
        .prop_map(|pairs| {
            Value::Object(
                pairs
                    .into_iter()
                    .map(|(name, v)| (name.to_string(), v))
                    .collect(),
            )
        })
        .boxed(),
        _ => match child_keys(key) {
            // Providers, readers and exporters are nothing without their `type`.
            Some(TYPED_KEYS) => mapping_with(TYPED_KEYS, TYPED_KEYS, depth + 1),
            Some(keys) => mapping(keys, depth + 1),
            None => plausible(key),
        },
    }
}

/// A whole document: mostly `msfs_version: 1` with backends, sometimes the MSC format.
fn document() -> impl Strategy<Value = Value> {
    prop_oneof![
        1 => mapping(TOP_KEYS, 0),
        4 => (mapping(TOP_KEYS, 0), value_for("backends", 0)).prop_map(|(mut doc, backends)| {
            if let Value::Object(map) = &mut doc {
                map.insert("msfs_version".into(), Value::from(1));
                map.insert("backends".into(), backends);
            }
            doc
        }),
        1 => mapping_with(&["profiles"], &["posix", "profiles", "opentelemetry", "include"], 0),
    ]
}

fn no_env(_: &str) -> Option<String> {
    None
}

/// The checks every parse outcome must pass, whatever the input.
fn check_outcome(
    source: &Path,
    outcome: &Result<Loaded, ConfigError>,
) -> Result<(), TestCaseError> {
    let file = format!("{}: ", source.display());
    match outcome {
        Ok(loaded) => {
            for warning in &loaded.warnings {
                prop_assert!(warning.starts_with(&file), "warning {warning:?}");
                prop_assert!(!warning.contains(SECRET_MARK), "warning {warning:?}");
            }
            let debug = format!("{:?}", loaded.config);
            prop_assert!(!debug.contains(SECRET_MARK), "a secret in {debug}");
        }
        Err(error) => {
            let text = error.to_string();
            prop_assert!(text.starts_with(&file), "error without the file: {text:?}");
            prop_assert!(!text.contains(SECRET_MARK), "a secret in {text:?}");
            if let ConfigError::Invalid { key, message, .. } = error {
                prop_assert!(!key.is_empty() && !message.is_empty(), "{text:?}");
            }
        }
    }
    Ok(())
}

/// The first segment of a key path: `backends` of `backends[1].S3.region`.
fn top_segment(key: &str) -> &str {
    key.split(['.', '[']).next().unwrap_or(key)
}

/// Checks that each `[i]` in `key` indexes an element that exists, as far as the document has
/// the path at all (an absent section reads as empty, so errors may name keys below it).
fn check_indices(doc: &Value, key: &str) -> Result<(), TestCaseError> {
    let mut node = Some(doc);
    for part in key.split('.') {
        let (name, indices) = match part.find('[') {
            Some(at) => (&part[..at], &part[at..]),
            None => (part, ""),
        };
        node = node.and_then(|n| n.get(name));
        for index in indices.split('[').filter(|s| !s.is_empty()) {
            let Ok(i) = index.trim_end_matches(']').parse::<usize>() else {
                return Err(TestCaseError::fail(format!("bad index in {key:?}")));
            };
            if let Some(Value::Array(items)) = node {
                prop_assert!(i < items.len(), "{key:?} indexes past the list");
            }
            node = node.and_then(|n| n.get(i));
        }
    }
    Ok(())
}

/// `(key, message)` of an error, or the config's Debug form; the file name taken out so the
/// YAML and JSON renderings of one document compare equal.
fn comparable(outcome: &Result<Loaded, ConfigError>, source: &Path) -> String {
    let file = source.display().to_string();
    match outcome {
        Ok(loaded) => format!("{:?}", loaded).replace(&file, "FILE"),
        Err(ConfigError::Invalid { key, message, .. }) => format!("invalid {key}: {message}"),
        Err(other) => format!("other: {}", other.to_string().replace(&file, "FILE")),
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Any bytes in a file: `load` answers, naming the file in any error.
    #[test]
    fn load_survives_arbitrary_bytes(
        bytes in prop::collection::vec(any::<u8>(), 0..512),
        json in any::<bool>(),
    ) {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join(if json { "c.json" } else { "c.yaml" });
        std::fs::File::create(&path)
            .and_then(|mut f| f.write_all(&bytes))
            .expect("write");
        check_outcome(&path, &load(&path))?;
    }

    /// Arbitrary text, and text made of YAML's structural characters (flow collections,
    /// anchors, aliases, merges, tags, block scalars), as YAML and as JSON.
    #[test]
    fn parse_survives_arbitrary_text(
        text in prop_oneof![
            any::<String>(),
            r#"([-:{}\[\],&*!|>?#'" \n\t<]|[a-z_]{1,12}|msfs_version|backends|1|\$\{X\}){0,40}"#,
        ],
    ) {
        for name in ["c.yaml", "c.json", "c.toml"] {
            let source = Path::new(name);
            check_outcome(source, &parse_str(&text, source, &no_env))?;
        }
    }

    /// Documents built from the real keys with mutated values: an answer that names the file,
    /// keys that exist, no secret, and the same answer from the YAML and the JSON rendering.
    #[test]
    fn mutated_documents_get_errors_that_name_their_key(doc in document()) {
        let yaml_text = serde_yaml_ng::to_string(&doc).expect("render YAML");
        let json_text = serde_json::to_string(&doc).expect("render JSON");
        let (yaml, json) = (Path::new("c.yaml"), Path::new("c.json"));
        let from_yaml = parse_str(&yaml_text, yaml, &no_env);
        let from_json = parse_str(&json_text, json, &no_env);
        check_outcome(yaml, &from_yaml)?;
        check_outcome(json, &from_json)?;
        if let Err(error) = &from_json {
            let ConfigError::Invalid { key, .. } = error else {
                return Err(TestCaseError::fail(format!("well-formed JSON rejected as {error}")));
            };
            let top = top_segment(key);
            prop_assert!(
                doc.get(top).is_some() || TOP_KEYS.contains(&top),
                "{error} names no key of the document"
            );
            check_indices(&doc, key)?;
        }
        // Both libraries may be one unit off in the last digit of a float they read back;
        // compare the renderings only where each reads back as the document it was made from.
        let yaml_reread = serde_yaml_ng::from_str::<serde_yaml_ng::Value>(&yaml_text)
            .ok()
            .and_then(|v| serde_json::to_value(v).ok());
        let json_reread = serde_json::from_str::<Value>(&json_text).ok();
        if yaml_reread.as_ref() == Some(&doc) && json_reread.as_ref() == Some(&doc) {
            prop_assert_eq!(comparable(&from_yaml, yaml), comparable(&from_json, json));
        }
    }
}

/// What C's printf makes of `%[0][width]conv` for `n`, for the conversions msfs accepts.
fn printf(zero: bool, width: usize, conv: char, n: u64) -> String {
    let digits = match conv {
        'x' => format!("{n:x}"),
        'X' => format!("{n:X}"),
        'o' => format!("{n:o}"),
        _ => n.to_string(),
    };
    let pad = if zero { "0" } else { " " };
    format!("{}{digits}", pad.repeat(width.saturating_sub(digits.len())))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// A PSEUDO name format is accepted exactly when it is one printf conversion of an integer
    /// with a width of at most 64, and then names expand as printf would.
    #[test]
    fn pseudo_name_formats_follow_printf(
        before in "[a-e_.-]{0,4}",
        zero in any::<bool>(),
        width in prop_oneof!["[1-9][0-9]{0,2}", "[0-9]{0,25}"],
        conv in prop::sample::select(vec!['d', 'u', 'x', 'X', 'o', 'q', 's']),
        after in "[a-z.]{0,4}",
        n in prop_oneof![Just(0u64), Just(u64::MAX), any::<u64>()],
    ) {
        let format = format!("{before}%{}{width}{conv}{after}", if zero { "0" } else { "" });
        let doc = serde_json::json!({
            "msfs_version": 1,
            "backends": [{
                "dir_name": "p",
                "backend_type": "PSEUDO",
                "PSEUDO": {"dir_name_format": format, "dir_starting_number": n},
            }],
        });
        let source = Path::new("c.json");
        let outcome = parse_str(&doc.to_string(), source, &no_env);
        check_outcome(source, &outcome)?;
        // The width as a number, however many digits it has.
        let digits = width.trim_start_matches('0');
        let width_value = if digits.len() > 3 { None } else { Some(digits.parse().unwrap_or(0)) };
        let valid = "duxXo".contains(conv) && width_value.is_some_and(|w: usize| w <= 64);
        match outcome {
            Ok(loaded) => {
                prop_assert!(valid, "{format:?} accepted");
                let super::BackendKind::Pseudo(pseudo) = &loaded.config.backends[0].kind else {
                    return Err(TestCaseError::fail("not a PSEUDO backend"));
                };
                // A width written with a leading 0 is the 0 flag too, as in C.
                let zero = zero || width.starts_with('0');
                let expected = format!(
                    "{before}{}{after}",
                    printf(zero, width_value.unwrap_or(0), conv, n)
                );
                prop_assert_eq!(pseudo.dir_name(0), expected);
            }
            Err(error) => {
                prop_assert!(!valid, "{format:?} rejected: {error}");
                prop_assert!(
                    error.to_string().starts_with("c.json: backends[0].PSEUDO.dir_name_format: "),
                    "{error}"
                );
            }
        }
    }
}

/// An environment whose values carry a mark the inputs never contain, so an error that quotes a
/// value is a substring search.
fn marked_env(name: &str) -> Option<String> {
    match name {
        "A" => Some("§a".into()),
        "EMPTY" => Some(String::new()),
        // A value that looks like a reference must come out literally, not be expanded again.
        "DOLLAR" => Some("§${A}$$".into()),
        _ => None,
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// `$VAR`, `${VAR…}` and `$$` in any arrangement: an answer, never a panic, and errors
    /// never quote a variable's value.
    #[test]
    fn expansion_survives_arbitrary_references(
        text in prop_oneof![
            r"(\$|\{|\}|:|-|=|A|EMPTY|DOLLAR|B|_|1|x|\$\{|:-|\$\$| ){0,40}",
            any::<String>().prop_map(|s| s.replace('§', "")),
        ],
    ) {
        match expand(&text, &marked_env) {
            Ok(out) => {
                if !text.contains('$') {
                    prop_assert_eq!(out, text);
                }
            }
            Err(message) => prop_assert!(!message.contains('§'), "{message:?}"),
        }
    }

    /// Doubling every `$` makes any string literal: what the CSI plugin relies on to pass
    /// volume attributes through the config parser unexpanded.
    #[test]
    fn doubled_dollars_expand_to_the_original(text in any::<String>()) {
        prop_assert_eq!(expand(&text.replace('$', "$$"), &marked_env), Ok(text));
    }

    /// Defaults nested to any depth: an answer, not a stack overflow.
    #[test]
    fn deeply_nested_defaults_are_answered(depth in prop_oneof![0usize..64, 64usize..4_000]) {
        let text = format!("{}x{}", "${UNSET:-".repeat(depth), "}".repeat(depth));
        let _ = expand(&text, &marked_env);
    }
}

/// Sanity check of the marked environment: its values would be visible if quoted.
#[test]
fn marked_env_values_expand() {
    assert_eq!(expand("$A-${DOLLAR}", &marked_env), Ok("§a-§${A}$$".into()));
}

// Regressions: inputs the properties above once failed on, kept as plain tests.

/// `deeply_nested_defaults_are_answered`: ~2,000 nested defaults (a 20 KB value) overflowed
/// the stack of a test thread and aborted the process.
#[test]
fn defaults_nested_thousands_deep_are_an_error_not_a_stack_overflow() {
    let text = format!("{}x{}", "${UNSET:-".repeat(3000), "}".repeat(3000));
    let error = expand(&text, &marked_env).expect_err("too deep");
    assert!(error.contains("16 levels"), "{error}");
    // Through a whole file, the error names the key as usual.
    let doc = format!("msfs_version: 1\nmountname: \"{text}\"\n");
    let error = parse_str(&doc, Path::new("c.yaml"), &no_env).expect_err("too deep");
    assert!(
        error.to_string().starts_with("c.yaml: mountname: "),
        "{error}"
    );
    // Sixteen levels still expand.
    let sixteen = format!("{}x{}", "${UNSET:-".repeat(16), "}".repeat(16));
    assert_eq!(expand(&sixteen, &marked_env), Ok("x".into()));
}

/// `pseudo_name_formats_follow_printf`: a width too long for `usize` was read as 0 and the
/// format accepted, while `%65d` was refused as wider than 64.
#[test]
fn pseudo_format_with_an_overflowing_width_is_rejected() {
    let doc = r#"{"msfs_version": 1, "backends": [{"dir_name": "p", "backend_type": "PSEUDO",
        "PSEUDO": {"dir_name_format": "%18447000000000000000d"}}]}"#;
    let error = parse_str(doc, Path::new("c.json"), &no_env).expect_err("too wide");
    assert_eq!(
        error.to_string(),
        "c.json: backends[0].PSEUDO.dir_name_format: \"%18447000000000000000d\": \
         field width is larger than 64"
    );
}
