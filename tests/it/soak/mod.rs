//! Soak: a bounded run (`MSFS_SOAK_SECS`, default 600 s) of 8 readers and 4 writers over files of
//! mixed sizes, on one daemon mount and on four CSI volumes of one plugin at once, against a
//! real garage through real FUSE. It passes with zero I/O errors, zero corrupt bytes, exactly the
//! expected objects in the buckets at the end, no FUSE request left unanswered past the
//! no-progress watchdog's bound (`msfs_fuse_requests_stalled_total` stays 0), flat RSS, no growth
//! of file descriptors or threads under load, and everything the load took (connections, spill
//! files, threads) released once it is over (`soak/curve.rs` says how each is judged).
//!
//! A third runs the same load on the four CSI volumes while the plugin, served by an fd holder,
//! is replaced every 20 s (`MSFS_KILL_SOAK_SECS`, default 180 s), in turn SIGKILLed and started
//! again, and upgraded (a successor started beside it, then SIGTERM): every operation must
//! still succeed and every byte be right, descriptors held open across the kills included, and
//! it reports the longest stall a reader saw.
//!
//! All three are ignored by default (they are long):
//! `cargo nextest run --run-ignored ignored-only --test it soak::`. The daemon's footprint curve is
//! printed to stderr and, with `MSFS_SOAK_REPORT=FILE`, appended to FILE as CSV.
//! `MSFS_SOAK_SEED` replays a run's operation sequences.

mod content;
mod curve;
mod held;
mod io;
mod kills;
mod load;
mod reader;
mod rng;
mod sampler;
mod store;
mod tally;
mod writer;

use std::sync::atomic::Ordering;
use std::time::Duration;

use crate::common::csi::{
    CsiPlugin, garage_attributes, garage_secrets, publish_request, unpublish_request,
};
use crate::common::holder::FdHolder;
use crate::common::{Garage, MsfsMount, config_yaml_with, free_port, http_get, s3_backend_yaml};
use content::{SeedFile, Volume};
use load::{Load, Outcome};
use rng::{Rng, SEED_ENV};

/// How long the load runs, in seconds.
const DURATION_ENV: &str = "MSFS_SOAK_SECS";
const DEFAULT_SECS: u64 = 600;
/// How long the load of the kill soak runs, in seconds, and how often it kills the plugin.
const KILL_DURATION_ENV: &str = "MSFS_KILL_SOAK_SECS";
const KILL_DEFAULT_SECS: u64 = 180;
const KILL_PERIOD_ENV: &str = "MSFS_KILL_SOAK_PERIOD_SECS";
const KILL_DEFAULT_PERIOD: u64 = 20;
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
#[ignore = "long: cargo nextest run --run-ignored ignored-only --test it soak::"]
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
        held_readers: 0,
        held_writer_dirs: Vec::new(),
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
#[ignore = "long: cargo nextest run --run-ignored ignored-only --test it soak::"]
async fn soak_csi_four_volumes() {
    let (duration, seed) = announce("soak_csi_four_volumes");
    let garage = Garage::start();
    let seeded = seed_volumes(&garage, seed).await;

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
    let volumes = publish_volumes(&plugin, &garage, &seeded).await;
    // Writer `w` works in volume `w`; the readers read all four.
    let load = Load {
        writer_dirs: (0..WRITERS)
            .map(|w| volumes[w].root.join(format!("w{w}")))
            .collect(),
        volumes: volumes.clone(),
        held_readers: 0,
        held_writer_dirs: Vec::new(),
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

    unpublish_all(&mut node, &volumes, &plugin).await;
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

/// The four CSI volumes under the soak's load while the plugin, its volumes' FUSE connections
/// kept by an fd holder, is SIGKILLed every `MSFS_KILL_SOAK_PERIOD_SECS` (20 s) for
/// `MSFS_KILL_SOAK_SECS` (180 s) and started again each time: every operation completes without
/// an error, every read is correct, descriptors held open for the whole run keep working, the
/// buckets equal what was written, and every successor took all four volumes over. It prints
/// the longest stall a reader saw and what each kill cost; no time is asserted.
///
/// The load runs on threads of this test process, so the process holds files open in the volumes
/// at every kill, and it must not start the successor itself: the child would `exec`, `exec`
/// closes the close-on-exec descriptors it inherited, and each of those closes is a FUSE FLUSH
/// that waits for a server — the one being started. The plugin is therefore started, every
/// time, by a launcher (`common/launcher.rs`): a small process started before anything is
/// opened in the volumes, which holds nothing there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "long: cargo nextest run --run-ignored ignored-only --test it soak::"]
async fn csi_volumes_survive_a_kill_every_20_seconds() {
    const TEST: &str = "csi_volumes_survive_a_kill_every_20_seconds";
    let (duration, seed) = announce_from(TEST, KILL_DURATION_ENV, KILL_DEFAULT_SECS);
    let period = Duration::from_secs(secs_from_env(KILL_PERIOD_ENV, KILL_DEFAULT_PERIOD).max(1));
    let garage = Garage::start();
    let seeded = seed_volumes(&garage, seed).await;

    let mut holder = FdHolder::start();
    let port = free_port();
    let mut plugin = CsiPlugin::start_launched(
        Some(&format!("msfs_version: 1\n{SETTINGS}")),
        &[
            &format!("--metrics-address=127.0.0.1:{port}"),
            &format!("--fd-holder-socket={}", holder.socket().display()),
        ],
    );
    let volumes = publish_volumes(&plugin, &garage, &seeded).await;
    assert_eq!(
        holder.held().len(),
        VOLUMES.len(),
        "the holder keeps every volume"
    );
    // Should a successor never serve, the killer aborts the connections through fusectl: mount
    // it now, while running `mount` cannot hang.
    mount_fusectl();
    // Writer `w` works in volume `w`, held writer `i` in volume `i`; the readers read all four.
    let load = Load {
        writer_dirs: (0..WRITERS)
            .map(|w| volumes[w].root.join(format!("w{w}")))
            .collect(),
        held_readers: 1,
        held_writer_dirs: (0..VOLUMES.len())
            .map(|i| volumes[i].root.join(format!("h{i}")))
            .collect(),
        volumes: volumes.clone(),
        // The plugin changes at every kill; the holder stays.
        pid: holder.pid(),
        duration,
        seed,
    };
    let targets = volumes.iter().map(|v| v.root.clone()).collect();
    let killer = kills::start(plugin, period, duration, port, targets);
    let outcome = tokio::task::spawn_blocking(move || load::run(load))
        .await
        .expect("the load");
    let kills;
    (plugin, kills) = tokio::task::spawn_blocking(move || killer.finish())
        .await
        .expect("the killer");
    let log = plugin.log_text();
    let failed = !outcome.tally.problems().is_empty() || kills.is_err();
    let kept = failed.then(|| keep_log(TEST, &log));
    let kills = kills.unwrap_or_else(|e| panic!("{e}\n{}{kept:?}", outcome.tally.problems()));
    report_kills(TEST, &outcome, &kills);
    if failed {
        // What the failures left in the buckets, to tell a lost write from a wrong answer.
        let left = bucket_differences(&garage, &outcome).await;
        let log = format!("{}\n(all of it: {kept:?})", log_tail(&log));
        assert_clean(TEST, &outcome, &format!("{left}\n{log}"));
    }
    // Kills at every period strictly inside the run.
    let expected = (duration.as_secs().saturating_sub(1) / period.as_secs()) as usize;
    assert_eq!(kills.len(), expected, "kills during the run");
    assert_eq!(
        log.matches("took over a volume's live connection").count(),
        VOLUMES.len() * kills.len(),
        "volumes taken over, per the plugins' log"
    );

    for (w, model) in outcome.models.iter().enumerate() {
        let (bucket, prefix) = VOLUMES[w];
        let dir_key = format!("{prefix}w{w}/");
        store::wait_until_stored(&garage, bucket, &dir_key, model, LANDING).await;
    }
    for (i, model) in outcome.held_models.iter().enumerate() {
        assert!(
            model
                .get(held::HELD_FILE)
                .is_some_and(|body| !body.is_empty()),
            "held writer {i} wrote nothing"
        );
        let (bucket, prefix) = VOLUMES[i];
        let dir_key = format!("{prefix}h{i}/");
        store::wait_until_stored(&garage, bucket, &dir_key, model, LANDING).await;
    }
    for ((bucket, prefix), files) in VOLUMES.iter().zip(&seeded) {
        store::assert_seed_untouched(&garage, bucket, prefix, files).await;
    }
    let metrics = http_get(port, "/metrics").map_or(String::new(), |(_, body)| body);
    assert_eq!(
        metric_sum(&metrics, "msfs_fuse_requests_stalled_total"),
        0.0,
        "FUSE requests unanswered past the watchdog's bound (the last plugin's log names each)"
    );

    let mut node = plugin.node().await;
    unpublish_all(&mut node, &volumes, &plugin).await;
    assert!(holder.held().is_empty(), "the holder let every volume go");
    assert!(plugin.stop(), "the last plugin exits on SIGTERM");
    assert!(
        holder.stop(),
        "the fd holder exits on SIGTERM once it holds nothing"
    );
}

/// Prints the longest call a reader made in the whole run and, for each kill, how long the
/// successor took to serve and to take every volume over, the longest reader call under way
/// meanwhile (the stall the kill caused) and how long after the kill the last of them was
/// answered.
fn report_kills(test: &str, outcome: &Outcome, kills: &[kills::Kill]) {
    let tally = &outcome.tally;
    let stalls = kills::stalls(kills, &tally.slow_reader_calls());
    let ms = |d: Duration| d.as_millis();
    let show = |d: Option<Duration>| d.map_or("-".to_string(), |d| format!("{} ms", ms(d)));
    let kind = |kill: &kills::Kill| if kill.upgrade { "upgrade" } else { "kill" };
    let mut lines = vec![format!(
        "{test}: {} kills and upgrades (SIGTERM, a successor waiting) in turn",
        kills.len()
    )];
    for (i, (kill, stall)) in kills.iter().zip(&stalls).enumerate() {
        lines.push(format!(
            "  {} {} at {:>5.1} s: serving after {} ms, every volume taken over after {} ms; \
             longest reader call under way {}, the last answered {} after it",
            kind(kill),
            i + 1,
            (kill.at - outcome.started).as_secs_f64(),
            ms(kill.serving - kill.at),
            ms(kill.taken_over - kill.at),
            show(stall.longest),
            show(stall.answered_after)
        ));
    }
    let summary = |name: &str, mut values: Vec<Duration>| {
        values.sort();
        match (values.get(values.len() / 2), values.last()) {
            (Some(median), Some(max)) => {
                format!("  {name}: median {} ms, max {} ms", ms(*median), ms(*max))
            }
            _ => format!("  {name}: none"),
        }
    };
    for upgrade in [false, true] {
        let what = if upgrade { "upgrade" } else { "kill" };
        let of_kind = || {
            kills
                .iter()
                .zip(&stalls)
                .filter(move |(kill, _)| kill.upgrade == upgrade)
        };
        lines.push(summary(
            &format!("serving after the {what}"),
            of_kind().map(|(k, _)| k.serving - k.at).collect(),
        ));
        lines.push(summary(
            &format!("every volume taken over after the {what}"),
            of_kind().map(|(k, _)| k.taken_over - k.at).collect(),
        ));
        // "-" above: no reader call of 100 ms or more was under way; they count as 0 here.
        lines.push(summary(
            &format!("stall per {what} (the longest reader call under way)"),
            of_kind()
                .map(|(_, s)| s.longest.unwrap_or_default())
                .collect(),
        ));
        lines.push(summary(
            &format!("readers answered after the {what} (the last call under way)"),
            of_kind()
                .map(|(_, s)| s.answered_after.unwrap_or_default())
                .collect(),
        ));
    }
    if let Some(longest) = tally.longest_reader_call() {
        lines.push(format!(
            "  longest reader call of the run: {} ms, from {:.1} s: {}",
            ms(longest.took),
            (longest.start - outcome.started).as_secs_f64(),
            longest.what
        ));
    }
    lines.push(format!(
        "  {} operations, {} reader calls timed, {} MiB read and checked, {} MiB written, in {} s",
        tally.ops.load(Ordering::Relaxed),
        tally.reader_calls.load(Ordering::Relaxed),
        tally.bytes_read.load(Ordering::Relaxed) >> 20,
        tally.bytes_written.load(Ordering::Relaxed) >> 20,
        outcome.duration.as_secs()
    ));
    lines.push(curve::table(test, outcome.pid, &outcome.samples, &[]));
    eprintln!("{}", lines.join("\n"));
}

/// How each writer's directory in the buckets differs from its model, once commits had a while
/// to land (for a failure's message).
async fn bucket_differences(garage: &Garage, outcome: &Outcome) -> String {
    tokio::time::sleep(Duration::from_secs(15)).await;
    let dirs = outcome.models.iter().enumerate().map(|(w, m)| (w, 'w', m));
    let held = outcome
        .held_models
        .iter()
        .enumerate()
        .map(|(i, m)| (i, 'h', m));
    let mut lines = vec!["--- the buckets against the writers' models ---".to_string()];
    for (i, kind, model) in dirs.chain(held) {
        let (bucket, prefix) = VOLUMES[i];
        let dir_key = format!("{prefix}{kind}{i}/");
        let verdict = store::stored(garage, bucket, &dir_key, model).await;
        lines.push(verdict.map_or_else(|e| e, |()| format!("s3://{bucket}/{dir_key}: as written")));
    }
    lines.join("\n")
}

/// Saves the plugins' log (the test's directories go at its end) for a failure's message.
fn keep_log(test: &str, log: &str) -> std::path::PathBuf {
    let path = std::env::temp_dir().join(format!("{test}-{}.log", std::process::id()));
    match std::fs::write(&path, log) {
        Ok(()) => path,
        Err(e) => format!("(cannot write {}: {e})", path.display()).into(),
    }
}

/// Mounts the kernel's FUSE control filesystem unless it is there.
fn mount_fusectl() {
    let connections = std::path::Path::new("/sys/fs/fuse/connections");
    if std::fs::read_dir(connections).map_or(true, |mut d| d.next().is_none()) {
        let _ = std::process::Command::new("mount")
            .args(["-t", "fusectl", "none"])
            .arg(connections)
            .status();
    }
}

/// The four volumes' seeded files, uploaded (the buckets are created here).
async fn seed_volumes(garage: &Garage, seed: u64) -> Vec<Vec<SeedFile>> {
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
        content::upload(garage, bucket, prefix, &files).await;
        seeded.push(files);
    }
    seeded
}

/// Publishes `pv-soak-<i>` for pod `pod-<i>`, volume `i` of [`VOLUMES`], seeded with `seeded[i]`.
async fn publish_volumes(
    plugin: &CsiPlugin,
    garage: &Garage,
    seeded: &[Vec<SeedFile>],
) -> Vec<Volume> {
    let mut node = plugin.node().await;
    let mut volumes = Vec::new();
    for (i, ((bucket, prefix), files)) in VOLUMES.iter().zip(seeded).enumerate() {
        let target = plugin.target(&format!("pod-{i}"), &format!("pv-soak-{i}"));
        let mut context = garage_attributes(garage, bucket);
        if !prefix.is_empty() {
            context.insert("prefix".into(), prefix.to_string());
        }
        node.node_publish_volume(publish_request(
            &format!("pv-soak-{i}"),
            &target,
            context,
            garage_secrets(garage),
        ))
        .await
        .unwrap_or_else(|e| panic!("publish pv-soak-{i}: {e}\n{}", plugin.log_text()));
        volumes.push(Volume {
            root: target,
            files: files.clone(),
        });
    }
    volumes
}

/// The run's duration and seed, printed so that a failure can be replayed.
fn announce(test: &str) -> (Duration, u64) {
    announce_from(test, DURATION_ENV, DEFAULT_SECS)
}

/// As [`announce`], with the duration from `env` (`default` seconds when unset).
fn announce_from(test: &str, env: &str, default: u64) -> (Duration, u64) {
    let secs = secs_from_env(env, default);
    let seed = rng::run_seed();
    eprintln!("{test}: {secs} s ({env}), seed {seed} ({SEED_ENV} replays it)");
    (Duration::from_secs(secs), seed)
}

fn secs_from_env(env: &str, default: u64) -> u64 {
    match std::env::var(env) {
        Ok(text) => text
            .trim()
            .parse()
            .unwrap_or_else(|e| panic!("{env}={text:?}: not a number of seconds: {e}")),
        Err(_) => default,
    }
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

/// Unpublishes every soak volume and checks that none stays mounted.
async fn unpublish_all(
    node: &mut msfs::csi::proto::node_client::NodeClient<tonic::transport::Channel>,
    volumes: &[Volume],
    plugin: &CsiPlugin,
) {
    for (i, volume) in volumes.iter().enumerate() {
        node.node_unpublish_volume(unpublish_request(&format!("pv-soak-{i}"), &volume.root))
            .await
            .unwrap_or_else(|e| panic!("unpublish pv-soak-{i}: {e}\n{}", plugin.log_text()));
        assert!(
            !crate::common::is_mounted(&volume.root),
            "pv-soak-{i} still mounted"
        );
    }
}
