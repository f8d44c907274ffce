//! msfs inside a real memory cgroup takes its memory target from the cgroup's limit, sizes a RAM
//! cache that does not fit down to fit, and is not OOM-killed serving more bytes than the limit.
//! A control run that claims a target larger than the cgroup (`process_memory_limit`) is
//! OOM-killed in the same cgroup: the sizing, not luck or swap, is what keeps msfs alive.
//!
//! Each case prints the cgroup's peak charge and msfs's peak RSS against the target. Runs on
//! every cgroup version with a memory controller on the machine (v1, v2 or both); none: skipped.
//! `MSFS_MEMORY_FILE_MIB` sets the file's size (default 320 MiB, above the 256 MiB limit).
//!
//! And the CSI plugin: many volumes, each listing a large directory while a writer and a reader
//! run, in one cgroup: the inodes of all volumes share one pool under the target.

use std::process::Command;
use std::time::Duration;

use crate::common::cgroup::{MemoryCgroup, Version, peak_rss};
use crate::common::csi::{
    CsiPlugin, garage_attributes, garage_secrets, publish_request, unpublish_request,
};
use crate::common::{Garage, MsfsMount, config_yaml_with, pattern, read_direct, s3_backend_yaml};

const MIB: u64 = 1 << 20;
const LIMIT: u64 = 256 * MIB;

fn file_size() -> usize {
    let mib: usize = std::env::var("MSFS_MEMORY_FILE_MIB")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(320);
    mib << 20
}

/// A RAM cache of 128 lines of 8 MiB (1 GiB), four times the cgroup's limit.
fn ram_cache_config(garage: &Garage, bucket: &str, extra: &str) -> String {
    let top = format!(
        "cache_storage: ram\ncache_line_size: {}\ncache_lines: 128\ncache_lines_to_prefetch: 4\n{extra}",
        8 * MIB
    );
    config_yaml_with(&top, &[s3_backend_yaml("data", bucket, "", garage)])
}

fn label(version: Version) -> &'static str {
    match version {
        Version::V1 => "v1",
        Version::V2 => "v2",
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ram_cache_larger_than_the_cgroup_is_sized_down_and_serves_a_larger_file_twice() {
    let versions = MemoryCgroup::available();
    if versions.is_empty() {
        eprintln!("SKIP: no cgroup memory controller on this machine");
        return;
    }
    let garage = Garage::start();
    garage.create_bucket("big");
    let body = pattern(file_size(), 57);
    garage.put_object("big", "file", body.clone()).await;
    for version in versions {
        let v = label(version);
        let cgroup = MemoryCgroup::create(version, "msfs-ram-cache", LIMIT);
        let config = ram_cache_config(&garage, "big", "");
        let mut mount =
            MsfsMount::start_in_cgroup(&config, "yaml", &[], Some(&cgroup.procs())).expect("mount");
        let log = mount.stdout_text() + &mount.stderr_text();
        let source = match version {
            Version::V1 => "cgroup v1 memory.limit_in_bytes 256 MiB less headroom",
            Version::V2 => "cgroup v2 memory.max 256 MiB less headroom",
        };
        assert!(
            log.contains(&format!("memory target 224 MiB ({source})")),
            "{v}: the target and its source are logged at start:\n{log}"
        );
        assert!(
            log.contains(
                "cache_storage: ram, cache_lines x cache_line_size (1024 MiB) does not fit"
            ),
            "{v}: the sizing-down is warned about, naming the keys:\n{log}"
        );
        let anon = cgroup.sample_anon();
        let path = mount.path().join("data/file");
        for pass in 1..=2 {
            let read = read_direct(&path);
            assert!(
                read.len() == body.len() && read == body,
                "{v}: pass {pass}: {} bytes read of {}, or different bytes",
                read.len(),
                body.len()
            );
        }
        let rss = peak_rss(mount.pid());
        let anon = anon.peak();
        assert!(
            mount.try_exit_status().is_none(),
            "{v}: msfs exited:\n{}",
            mount.stderr_text()
        );
        assert_eq!(cgroup.oom_kills(), 0, "{v}: the OOM killer fired");
        eprintln!(
            "MEASURED {v} ram cache 1024 MiB asked, file {} MiB read twice: target 224 MiB, \
             cgroup limit 256 MiB, cgroup peak {} MiB (anonymous {} MiB), msfs peak RSS {} MiB, \
             limit hits {}",
            body.len() as u64 / MIB,
            cgroup.peak() / MIB,
            anon / MIB,
            rss / MIB,
            cgroup.limit_hit(),
        );
        mount.stop_with_umount();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_target_above_the_cgroup_ends_in_an_oom_kill() {
    let versions = MemoryCgroup::available();
    if versions.is_empty() {
        eprintln!("SKIP: no cgroup memory controller on this machine");
        return;
    }
    let garage = Garage::start();
    garage.create_bucket("control");
    let body = pattern(file_size(), 58);
    garage.put_object("control", "file", body).await;
    for version in versions {
        let v = label(version);
        let cgroup = MemoryCgroup::create(version, "msfs-control", LIMIT);
        // The target claims 1 GiB: the RAM cache keeps 108 of its 128 lines, 864 MiB.
        let config = ram_cache_config(&garage, "control", "process_memory_limit: 1073741824\n");
        // No fd holder: the connection must end with the process, so the reader sees an error
        // instead of waiting for a successor.
        let mut mount =
            MsfsMount::start_in_cgroup(&config, "yaml", &["--no-fd-holder"], Some(&cgroup.procs()))
                .expect("mount");
        let path = mount.path().join("data/file");
        for _ in 0..2 {
            let out = Command::new("dd")
                .arg(format!("if={}", path.display()))
                .args(["of=/dev/null", "bs=1M", "iflag=direct", "status=none"])
                .output()
                .expect("run dd");
            if !out.status.success() {
                break;
            }
        }
        let mut exited = None;
        for _ in 0..100 {
            exited = mount.try_exit_status();
            if exited.is_some() {
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        eprintln!(
            "MEASURED {v} control, target 1024 MiB claimed in a 256 MiB cgroup: exit {exited:?}, \
             OOM kills {}, cgroup peak {} MiB",
            cgroup.oom_kills(),
            cgroup.peak() / MIB,
        );
        assert!(
            cgroup.oom_kills() > 0 && exited.is_some(),
            "{v}: a cache larger than the cgroup should have been OOM-killed (exit {exited:?})"
        );
    }
}

/// A size from the environment, or the scaled-down default.
/// The value of the first sample of `name` (a Prometheus line `name VALUE` or `name{…} VALUE`).
fn metric(metrics: &str, name: &str) -> Option<u64> {
    metrics
        .lines()
        .find(|l| l.starts_with(name) && l[name.len()..].starts_with([' ', '{']))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse::<f64>().ok())
        .map(|v| v as u64)
}

/// Over its target, msfs gives memory back rather than growing or failing: a RAM cache whose
/// floor (two lines of 32 MiB) fills the whole 64 MiB target (`process_memory_limit`) puts the
/// process over it as soon as a read fills both lines. The watcher stops read-ahead and the
/// cache gives lines back (`msfs_memory_shed_bytes_total`), then the inode shares halve and
/// new fetches and commits wait; a file larger than the cgroup's limit is read twice, exactly,
/// and a file written meanwhile reaches the store, in a cgroup the process is not OOM-killed
/// in. Without the pressure stages (the code before them) nothing is given back and the shed
/// counter does not exist.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_its_target_msfs_gives_cache_lines_back_and_loses_no_byte() {
    let Some(&version) = MemoryCgroup::available().first() else {
        eprintln!("SKIP: no cgroup memory controller on this machine");
        return;
    };
    let garage = Garage::start();
    garage.create_bucket("pressed");
    let size = 256 * MIB as usize;
    let body = pattern(size, 61);
    garage.put_object("pressed", "file", body.clone()).await;
    let limit = 192 * MIB;
    let cgroup = MemoryCgroup::create(version, "msfs-pressed", limit);
    let port = crate::common::free_port();
    let top = format!(
        "endpoint: http://127.0.0.1:{port}\nprocess_memory_limit: {}\ncache_storage: ram\n\
         cache_line_size: {}\ncache_lines: 16\ncache_lines_to_prefetch: 4\n",
        64 * MIB,
        32 * MIB
    );
    let backend = s3_backend_yaml("data", "pressed", "", &garage) + "    readonly: false\n";
    let config = config_yaml_with(&top, &[backend]);
    let mut mount =
        MsfsMount::start_in_cgroup(&config, "yaml", &[], Some(&cgroup.procs())).expect("mount");
    let anon = cgroup.sample_anon();
    let written = pattern(24 * MIB as usize, 62);
    let writer = {
        let (path, written) = (mount.path().join("data/written"), written.clone());
        std::thread::spawn(move || std::fs::write(path, written).expect("write under pressure"))
    };
    let path = mount.path().join("data/file");
    for pass in 1..=2 {
        let read = read_direct(&path);
        assert!(
            read.len() == body.len() && read == body,
            "pass {pass}: {} bytes read of {}, or different bytes",
            read.len(),
            body.len()
        );
    }
    writer.join().expect("writer");
    crate::common::wait_until(
        "the written file is in the store",
        Duration::from_secs(120),
        async || garage.try_get_object("pressed", "written").await.as_deref() == Some(&written[..]),
    )
    .await;
    let anon = anon.peak();
    let rss = peak_rss(mount.pid());
    let metrics = crate::common::http_get(port, "/metrics")
        .map(|(_, body)| body)
        .unwrap_or_default();
    assert!(
        mount.try_exit_status().is_none(),
        "msfs exited:\n{}",
        mount.stderr_text()
    );
    assert_eq!(cgroup.oom_kills(), 0, "the OOM killer fired");
    let over = metric(&metrics, "msfs_memory_over_target_total");
    assert!(
        over.is_some_and(|n| n >= 1),
        "the cache's lines put msfs over its target: {over:?}\n{metrics}"
    );
    let shed = metric(&metrics, "msfs_memory_shed_bytes_total");
    assert!(
        shed.is_some_and(|b| b >= 32 * MIB),
        "the RAM cache gave lines back: {shed:?}"
    );
    let log = mount.stdout_text() + &mount.stderr_text();
    assert!(
        log.contains("over the memory target: no read-ahead, the RAM cache gives back lines"),
        "the first stage is logged:\n{log}"
    );
    eprintln!(
        "MEASURED {} pressed: ram cache 2 x 32 MiB under a 64 MiB target, {} MiB read twice and \
         24 MiB written: cgroup limit {} MiB, cgroup peak {} MiB (anonymous {} MiB), msfs peak \
         RSS {} MiB; over the target {} times, {} MiB of lines given back, {} waits, \
         prefetches {}",
        label(version),
        size as u64 / MIB,
        limit / MIB,
        cgroup.peak() / MIB,
        anon / MIB,
        rss / MIB,
        over.unwrap_or(0),
        shed.unwrap_or(0) / MIB,
        metric(&metrics, "msfs_memory_waits_total").unwrap_or(0),
        metric(&metrics, "msfs_cache_prefetches_total").unwrap_or(0),
    );
    mount.stop_with_umount();
}

fn env_or(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Every volume of a CSI plugin lists the same large directory with `stat` of each entry (as
/// `ls -l` does) at once, while a writer and a reader run in two of them, in one memory cgroup.
/// The plugin is not OOM-killed; every listing is whole, every byte read is right and every
/// file written is in the store after unpublish. Scaled for CI: 10 volumes of 20,000 entries
/// in 256 MiB (the 50 x 200,000 in 1 GiB: `MSFS_MEMORY_VOLUMES=50
/// MSFS_MEMORY_ENTRIES=200000 MSFS_MEMORY_CSI_LIMIT_MIB=1024`, with `cargo test --test
/// memory_target -- --nocapture a_csi_plugin`: storing 200,000 objects in garage alone takes
/// about 17 minutes on 2 cores, past nextest's 10-minute hang bound). Without the process-wide inode
/// pool each volume would keep up to its own `evictable_inode_limit` (65,536, as the chart
/// sets): 10 x 20,000 inodes, about 200 MiB, on top of the rest.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_csi_plugin_with_many_volumes_listing_large_directories_stays_in_its_cgroup() {
    let Some(&version) = MemoryCgroup::available().first() else {
        eprintln!("SKIP: no cgroup memory controller on this machine");
        return;
    };
    let volumes = env_or("MSFS_MEMORY_VOLUMES", 10).max(2);
    let entries = env_or("MSFS_MEMORY_ENTRIES", 20_000);
    let limit = env_or("MSFS_MEMORY_CSI_LIMIT_MIB", 256) as u64 * MIB;
    let garage = Garage::start();
    garage.create_bucket("many");
    let started = std::time::Instant::now();
    {
        use futures::StreamExt;
        let garage = &garage;
        futures::stream::iter(0..entries)
            .map(|i| async move {
                garage
                    .put_object("many", &format!("dir/entry-{i:07}"), Vec::new())
                    .await
            })
            .buffer_unordered(64)
            .collect::<Vec<()>>()
            .await;
    }
    let read_body = pattern(32 * MIB as usize, 59);
    garage
        .put_object("many", "read/object", read_body.clone())
        .await;
    eprintln!(
        "{entries} entries stored in {:.1}s",
        started.elapsed().as_secs_f64()
    );

    let cgroup = MemoryCgroup::create(version, "msfs-csi", limit);
    let port = crate::common::free_port();
    let node_config = "msfs_version: 1\nevictable_inode_limit: 65536\ncache_line_size: 1048576\n\
                       cache_lines: 128\n";
    let plugin = CsiPlugin::start_in_cgroup(
        Some(node_config),
        &[&format!("--metrics-address=127.0.0.1:{port}")],
        &cgroup.procs(),
    );
    let mut node = plugin.node().await;
    let idle_anon = cgroup.anon();
    let mut targets = Vec::new();
    for i in 0..volumes {
        let id = format!("vol-{i}");
        let target = plugin.target(&format!("pod-{i}"), &id);
        node.node_publish_volume(publish_request(
            &id,
            &target,
            garage_attributes(&garage, "many"),
            garage_secrets(&garage),
        ))
        .await
        .unwrap_or_else(|e| panic!("publish {id}: {e}\n{}", plugin.log_text()));
        targets.push((id, target));
    }
    let log = plugin.log_text();
    assert!(
        log.contains("memory target"),
        "the target is logged:\n{log}"
    );
    let published_anon = cgroup.anon();
    // A published volume that serves nothing yet costs its session and store client, not a
    // read buffer of 16 MiB per FUSE worker (fuser's, before msfs mapped it lazily: about
    // 15 MiB per volume here, 150 MiB for ten).
    let per_volume = published_anon.saturating_sub(idle_anon) / volumes as u64;
    assert!(
        per_volume < 8 * MIB,
        "{} KiB of memory per published volume",
        per_volume >> 10
    );

    let started = std::time::Instant::now();
    let anon = cgroup.sample_anon();
    // A writer in the first volume, a reader in the second, listers in all.
    const WRITTEN: usize = 16;
    let write_root = targets[0].1.join("out");
    let writer = std::thread::spawn(move || {
        std::fs::create_dir_all(&write_root).expect("mkdir out");
        for i in 0..WRITTEN {
            std::fs::write(
                write_root.join(format!("f{i}")),
                pattern(4 * MIB as usize, i as u64),
            )
            .expect("write");
        }
    });
    let read_path = targets[1].1.join("read/object");
    let reader = std::thread::spawn(move || {
        for pass in 0..4 {
            assert!(
                read_direct(&read_path) == read_body,
                "read pass {pass}: bytes differ"
            );
        }
    });
    let listers: Vec<_> = targets
        .iter()
        .map(|(id, target)| {
            let (id, dir) = (id.clone(), target.join("dir"));
            std::thread::spawn(move || {
                let mut listed = 0;
                for entry in std::fs::read_dir(&dir).expect("opendir") {
                    let entry = entry.expect("readdir");
                    entry.metadata().expect("stat");
                    listed += 1;
                }
                (id, listed)
            })
        })
        .collect();
    for lister in listers {
        let (id, listed) = lister.join().expect("lister");
        assert_eq!(listed, entries, "{id}: the listing is not whole");
    }
    writer.join().expect("writer");
    reader.join().expect("reader");
    let elapsed = started.elapsed();

    let anon = anon.peak();
    let pid = plugin.pid().expect("the plugin runs");
    let rss = peak_rss(pid);
    let metrics = crate::common::http_get(port, "/metrics")
        .map(|(_, body)| body)
        .unwrap_or_default();
    let gauge = |name: &str| {
        metrics
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.rsplit(' ').next())
            .unwrap_or("?")
            .to_string()
    };
    let target_bytes = gauge("msfs_memory_target_bytes");
    let pressed = format!(
        "over the target {} times, {} MiB of cache lines given back, {} waits",
        metric(&metrics, "msfs_memory_over_target_total").unwrap_or(0),
        metric(&metrics, "msfs_memory_shed_bytes_total").unwrap_or(0) / MIB,
        metric(&metrics, "msfs_memory_waits_total").unwrap_or(0),
    );
    let share = gauge("msfs_memory_inode_limit_per_mount");
    assert_eq!(cgroup.oom_kills(), 0, "the OOM killer fired");
    assert_eq!(
        target_bytes,
        (limit - (limit / 8).max(32 * MIB)).to_string(),
        "the target gauge"
    );
    let share: usize = share.parse().expect("the per-mount inode share gauge");
    assert!(
        share < 65_536 && share > 0,
        "the per-mount inode limit is a share of the pool: {share}"
    );
    eprintln!(
        "MEASURED {} csi {volumes} volumes x {entries} entries listed with stat, 1 writer \
         ({WRITTEN} x 4 MiB), 1 reader (4 x 32 MiB) in {:.1}s: cgroup limit {} MiB, target {} \
         MiB, per-volume inode limit {share}, anonymous {} MiB idle and {} MiB once published, cgroup peak {} \
         MiB (anonymous {} MiB), plugin peak RSS {} MiB; {pressed}",
        label(version),
        elapsed.as_secs_f64(),
        limit / MIB,
        target_bytes.parse::<u64>().unwrap_or(0) / MIB,
        idle_anon / MIB,
        published_anon / MIB,
        cgroup.peak() / MIB,
        anon / MIB,
        rss / MIB,
    );

    for (id, target) in &targets {
        node.node_unpublish_volume(unpublish_request(id, target))
            .await
            .unwrap_or_else(|e| panic!("unpublish {id}: {e}"));
    }
    for i in 0..WRITTEN {
        let key = format!("out/f{i}");
        assert!(
            garage.get_object("many", &key).await == pattern(4 * MIB as usize, i as u64),
            "{key} lost or wrong"
        );
    }
    assert_eq!(cgroup.oom_kills(), 0, "the OOM killer fired");
}

/// `ls -l` of a directory of a million files (a generated PSEUDO tree, so no store has to hold
/// them) under a 256 MiB target (`process_memory_limit`), in a cgroup of 256 MiB plus headroom:
/// the listing is whole and msfs is not OOM-killed, though a standalone mount's own
/// `evictable_inode_limit` (262,144, so up to 524,288 inodes while `readdirplus` fills them)
/// would hold about 450 MiB of inodes. `MSFS_MEMORY_LS_ENTRIES` sets the count.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ls_l_of_a_million_entries_under_a_256_mib_target() {
    let Some(&version) = MemoryCgroup::available().first() else {
        eprintln!("SKIP: no cgroup memory controller on this machine");
        return;
    };
    let files = env_or("MSFS_MEMORY_LS_ENTRIES", 1_000_000);
    let cgroup = MemoryCgroup::create(version, "msfs-ls", 288 * MIB);
    let port = crate::common::free_port();
    let config = config_yaml_with(
        &format!("endpoint: http://127.0.0.1:{port}\nprocess_memory_limit: 268435456\n"),
        &[format!(
            "  - dir_name: flat\n    backend_type: PSEUDO\n    PSEUDO:\n      \
             files_at_depth_0: {files}\n      file_size: 100\n"
        )],
    );
    let mut mount =
        MsfsMount::start_in_cgroup(&config, "yaml", &[], Some(&cgroup.procs())).expect("mount");
    let anon = cgroup.sample_anon();
    let started = std::time::Instant::now();
    let out = Command::new("ls")
        .arg("-l")
        .arg(mount.path().join("flat"))
        .output()
        .expect("run ls");
    let elapsed = started.elapsed();
    let anon = anon.peak();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let listed = out
        .stdout
        .split(|b| *b == b'\n')
        .filter(|l| l.starts_with(b"-"))
        .count();
    assert_eq!(listed, files, "every file listed once");
    let rss = peak_rss(mount.pid());
    assert!(
        mount.try_exit_status().is_none(),
        "msfs exited:\n{}",
        mount.stderr_text()
    );
    assert_eq!(cgroup.oom_kills(), 0, "the OOM killer fired");
    let share = crate::common::http_get(port, "/metrics")
        .map(|(_, body)| body)
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("msfs_memory_inode_limit_per_mount "))
        .unwrap_or("?")
        .to_string();
    eprintln!(
        "MEASURED {} ls -l of {files} entries in {:.1}s: target 256 MiB (cgroup limit 288 MiB), \
         inode limit {share}, cgroup peak {} MiB (anonymous {} MiB), msfs peak RSS {} MiB",
        label(version),
        elapsed.as_secs_f64(),
        cgroup.peak() / MIB,
        anon / MIB,
        rss / MIB,
    );
    mount.stop_with_umount();
}
