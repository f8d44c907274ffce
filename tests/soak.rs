//! Soak: a bounded run (`MSFS_SOAK_SECS`, default 600 s) of 8 readers and 4 writers over files of
//! mixed sizes, on one daemon mount and on four CSI volumes of one plugin at once, against a
//! real garage through real FUSE. It passes with zero I/O errors, zero corrupt bytes, exactly the
//! expected objects in the buckets at the end, no FUSE request left unanswered past the
//! no-progress watchdog's bound (`msfs_fuse_requests_stalled_total` stays 0), flat RSS, no growth
//! of file descriptors or threads under load, and everything the load took (connections, spill
//! files, threads) released once it is over (`soak/curve.rs` says how each is judged).
//!
//! Both tests are ignored by default (they are long):
//! `cargo nextest run --run-ignored ignored-only --test soak`. The daemon's footprint curve is
//! printed to stderr and, with `MSFS_SOAK_REPORT=FILE`, appended to FILE as CSV.
//! `MSFS_SOAK_SEED` replays a run's operation sequences.

mod common;
#[path = "soak/content.rs"]
mod content;
#[path = "soak/curve.rs"]
mod curve;
#[path = "soak/io.rs"]
mod io;
#[path = "soak/load.rs"]
mod load;
#[path = "soak/reader.rs"]
mod reader;
#[path = "soak/rng.rs"]
mod rng;
#[path = "soak/sampler.rs"]
mod sampler;
#[path = "soak/store.rs"]
mod store;
#[path = "soak/tally.rs"]
mod tally;
#[path = "soak/writer.rs"]
mod writer;

use std::time::Duration;

use common::csi::{
    CsiPlugin, garage_attributes, garage_secrets, publish_request, unpublish_request,
};
use common::{Garage, MsfsMount, config_yaml_with, free_port, http_get, s3_backend_yaml};
use content::{SeedFile, Volume};
use load::{Load, Outcome};
use rng::{Rng, SEED_ENV};

/// How long the load runs, in seconds.
const DURATION_ENV: &str = "MSFS_SOAK_SECS";
const DEFAULT_SECS: u64 = 600;
const MIB: u64 = 1 << 20;
/// Settings of the daemon and of the CSI node. A 32 MiB cache of 1 MiB lines against several
/// hundred MiB of seeded data, so lines are evicted all the time; multipart above 16 MiB, so the
/// writers' biggest files are uploaded in parts and patches into them copy the untouched parts
/// server-side; and the smallest dirty budget (64 MiB), so writers sometimes wait for commits.
const SETTINGS: &str = "cache_storage: ram\n\
    cache_line_size: 1048576\n\
    cache_lines: 32\n\
    cache_lines_to_prefetch: 4\n\
    multipart_upload_threshold_bytes: 16777216\n\
    write_dirty_limit_bytes: 67108864\n";
/// How long the writers' last objects may take to reach the bucket after the load stops.
const LANDING: Duration = Duration::from_secs(180);
const WRITERS: usize = 4;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "long: cargo nextest run --run-ignored ignored-only --test soak"]
async fn soak_one_mount() {
    let (duration, seed) = announce("soak_one_mount");
    let garage = Garage::start();
    garage.create_bucket("soak");
    let mut rng = Rng::new(seed);
    let files = content::seed_set(&mut rng, 240, &[64 * MIB + 3, 112 * MIB + 5]);
    content::upload(&garage, "soak", "", &files).await;

    let port = free_port();
    let top = format!("{SETTINGS}endpoint: http://127.0.0.1:{port}\n");
    let backend = format!(
        "{}    readonly: false\n",
        s3_backend_yaml("data", "soak", "", &garage)
    );
    let mut mount = MsfsMount::start(&config_yaml_with(&top, &[backend]), "yaml").expect("mount");
    let root = mount.path().join("data");
    let pid = mount.pid();
    let load = Load {
        volumes: vec![Volume {
            root: root.clone(),
            files: files.clone(),
        }],
        writer_dirs: (0..WRITERS).map(|w| root.join(format!("w{w}"))).collect(),
        pid,
        duration,
        seed,
    };
    let outcome = tokio::task::spawn_blocking(move || load::run(load))
        .await
        .expect("the load");
    let log = mount.stdout_text() + &mount.stderr_text();
    assert_clean("soak_one_mount", &outcome, &log_tail(&log));

    for (w, model) in outcome.models.iter().enumerate() {
        store::wait_until_stored(&garage, "soak", &format!("w{w}/"), model, LANDING).await;
    }
    store::assert_seed_untouched(&garage, "soak", "", &files).await;
    let probe = || sampler::sample(pid, outcome.started, Some(&outcome.tally));
    let end = probe().expect("the daemon lives");
    let settled = curve::settle(&outcome.before, probe, || sampler::descriptor_summary(pid)).await;
    judge(
        "soak_one_mount",
        &outcome,
        &outcome.before,
        &end,
        settled,
        port,
    );
    assert_eq!(mount.stop_with_umount().code(), Some(0), "msfs exit status");
}

/// Four volumes: two on one bucket under different prefixes, two on buckets of their own.
const VOLUMES: [(&str, &str); 4] = [
    ("soak-shared", "alpha/"),
    ("soak-shared", "beta/"),
    ("soak-two", ""),
    ("soak-three", ""),
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "long: cargo nextest run --run-ignored ignored-only --test soak"]
async fn soak_csi_four_volumes() {
    let (duration, seed) = announce("soak_csi_four_volumes");
    let garage = Garage::start();
    for bucket in ["soak-shared", "soak-two", "soak-three"] {
        garage.create_bucket(bucket);
    }
    let mut rng = Rng::new(seed);
    let mut seeded: Vec<Vec<SeedFile>> = Vec::new();
    for (i, (bucket, prefix)) in VOLUMES.iter().enumerate() {
        let bigs: &[u64] = match i {
            0 => &[64 * MIB + 1],
            2 => &[80 * MIB + 7],
            _ => &[],
        };
        let files = content::seed_set(&mut rng, 80, bigs);
        content::upload(&garage, bucket, prefix, &files).await;
        seeded.push(files);
    }

    let port = free_port();
    let plugin = CsiPlugin::start_with(
        Some(&format!("msfs_version: 1\n{SETTINGS}")),
        &[&format!("--metrics-address=127.0.0.1:{port}")],
    );
    let endpoint = format!("--endpoint=unix://{}", plugin.socket().display());
    let pid = sampler::find_process(&endpoint).expect("the plugin's process");
    let before_publish =
        sampler::sample(pid, std::time::Instant::now(), None).expect("sample the plugin");
    let mut node = plugin.node().await;
    let mut volumes = Vec::new();
    for (i, ((bucket, prefix), files)) in VOLUMES.iter().zip(&seeded).enumerate() {
        let target = plugin.target(&format!("pod-{i}"), &format!("pv-soak-{i}"));
        let mut context = garage_attributes(&garage, bucket);
        if !prefix.is_empty() {
            context.insert("prefix".into(), prefix.to_string());
        }
        node.node_publish_volume(publish_request(
            &format!("pv-soak-{i}"),
            &target,
            context,
            garage_secrets(&garage),
        ))
        .await
        .unwrap_or_else(|e| panic!("publish pv-soak-{i}: {e}\n{}", plugin.log_text()));
        volumes.push(Volume {
            root: target,
            files: files.clone(),
        });
    }
    // Writer `w` works in volume `w`; the readers read all four.
    let load = Load {
        writer_dirs: (0..WRITERS)
            .map(|w| volumes[w].root.join(format!("w{w}")))
            .collect(),
        volumes: volumes.clone(),
        pid,
        duration,
        seed,
    };
    let outcome = tokio::task::spawn_blocking(move || load::run(load))
        .await
        .expect("the load");
    assert_clean(
        "soak_csi_four_volumes",
        &outcome,
        &log_tail(&plugin.log_text()),
    );

    for (w, model) in outcome.models.iter().enumerate() {
        let (bucket, prefix) = VOLUMES[w];
        let dir_key = format!("{prefix}w{w}/");
        store::wait_until_stored(&garage, bucket, &dir_key, model, LANDING).await;
    }
    for ((bucket, prefix), files) in VOLUMES.iter().zip(&seeded) {
        store::assert_seed_untouched(&garage, bucket, prefix, files).await;
    }
    let probe = || sampler::sample(pid, outcome.started, Some(&outcome.tally));
    let end = probe().expect("the plugin lives");

    for (i, volume) in volumes.iter().enumerate() {
        node.node_unpublish_volume(unpublish_request(&format!("pv-soak-{i}"), &volume.root))
            .await
            .unwrap_or_else(|e| panic!("unpublish pv-soak-{i}: {e}\n{}", plugin.log_text()));
        assert!(
            !common::is_mounted(&volume.root),
            "pv-soak-{i} still mounted"
        );
    }
    // Unpublishing changed nothing that had landed.
    for (w, model) in outcome.models.iter().enumerate() {
        let (bucket, prefix) = VOLUMES[w];
        let dir_key = format!("{prefix}w{w}/");
        if let Err(e) = store::stored(&garage, bucket, &dir_key, model).await {
            panic!("after unpublish: {e}");
        }
    }
    // With every volume gone, the plugin is back to what it held before the first publish.
    let settled = curve::settle(&before_publish, probe, || sampler::descriptor_summary(pid)).await;
    judge(
        "soak_csi_four_volumes",
        &outcome,
        &before_publish,
        &end,
        settled,
        port,
    );
}

/// The run's duration and seed, printed so that a failure can be replayed.
fn announce(test: &str) -> (Duration, u64) {
    let secs = match std::env::var(DURATION_ENV) {
        Ok(text) => text
            .trim()
            .parse()
            .unwrap_or_else(|e| panic!("{DURATION_ENV}={text:?}: not a number of seconds: {e}")),
        Err(_) => DEFAULT_SECS,
    };
    let seed = rng::run_seed();
    eprintln!("{test}: {secs} s ({DURATION_ENV}), seed {seed} ({SEED_ENV} replays it)");
    (Duration::from_secs(secs), seed)
}

/// Zero errors and zero corrupt bytes, or the first of them with the curve so far and the
/// daemon's last words.
fn assert_clean(test: &str, outcome: &Outcome, daemon_log: &str) {
    let problems = outcome.tally.problems();
    if !problems.is_empty() {
        let table = curve::table(test, outcome.pid, &outcome.samples, &[]);
        panic!("{problems}\n{table}--- msfs log (tail) ---\n{daemon_log}");
    }
}

/// Prints and records the curve (with the process `before` the load, at its `end`, and once
/// `settled`), then fails if anything grew, if the process did not settle
/// back after the load, or if the cache never evicted (then the soak would not have tested what
/// it claims).
fn judge(
    test: &str,
    outcome: &Outcome,
    before: &sampler::Sample,
    end: &sampler::Sample,
    settled: Result<sampler::Sample, String>,
    port: u16,
) {
    let mut after = vec![("before", before), ("end", end)];
    after.extend(settled.as_ref().ok().map(|s| ("settled", s)));
    let table = curve::table(test, outcome.pid, &outcome.samples, &after);
    let metrics = http_get(port, "/metrics").map_or(String::new(), |(_, body)| body);
    let counters: Vec<String> = [
        "msfs_backend_operations_total",
        "msfs_cache_hits_total",
        "msfs_cache_misses_total",
        "msfs_cache_evictions_total",
        "msfs_write_commits_total",
        "msfs_write_commit_retries_total",
        "msfs_backend_errors_total",
    ]
    .iter()
    .map(|name| format!("{name} {}", metric_sum(&metrics, name) as u64))
    .collect();
    // Failures the daemon saw from the store (after its retries), by operation and class.
    let store_errors: Vec<&str> = metrics
        .lines()
        .filter(|line| line.starts_with("msfs_backend_errors_total{"))
        .collect();
    eprintln!(
        "{table}{}\nstore errors: {store_errors:?}",
        counters.join(", ")
    );
    curve::write_report(test, &outcome.samples, &after);
    // The no-progress watchdog: no request may wait past fuse_request_stall_warn_secs.
    let stalled = metric_sum(&metrics, "msfs_fuse_requests_stalled_total");
    let stalled_by_op: Vec<&str> = metrics
        .lines()
        .filter(|line| line.starts_with("msfs_fuse_requests_stalled_total{"))
        .collect();
    assert!(
        stalled == 0.0,
        "{stalled} FUSE requests went unanswered past fuse_request_stall_warn_secs \
         ({stalled_by_op:?}; the daemon's log names each)\n{table}"
    );
    let grew = curve::growth(&outcome.samples, end, outcome.duration);
    assert!(grew.is_empty(), "{}\n{table}", grew.join("\n"));
    if let Err(e) = settled {
        panic!("{e}\n{table}");
    }
    assert!(
        metric_sum(&metrics, "msfs_cache_evictions_total") > 0.0,
        "the cache never evicted a line:\n{metrics}"
    );
}

/// The sum of every series of metric `name` in a Prometheus text exposition.
fn metric_sum(text: &str, name: &str) -> f64 {
    text.lines()
        .filter(|line| {
            line.strip_prefix(name)
                .is_some_and(|rest| rest.starts_with(' ') || rest.starts_with('{'))
        })
        .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

fn log_tail(log: &str) -> String {
    let lines: Vec<&str> = log.lines().collect();
    lines[lines.len().saturating_sub(60)..].join("\n")
}
