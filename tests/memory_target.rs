//! msfs inside a real memory cgroup takes its memory target from the cgroup's limit, sizes a RAM
//! cache that does not fit down to fit, and is not OOM-killed serving more bytes than the limit.
//! A control run that claims a target larger than the cgroup (`process_memory_limit`) is
//! OOM-killed in the same cgroup: the sizing, not luck or swap, is what keeps msfs alive.
//!
//! Each case prints the cgroup's peak charge and msfs's peak RSS against the target. Runs on
//! every cgroup version with a memory controller on the machine (v1, v2 or both); none: skipped.
//! `MSFS_MEMORY_FILE_MIB` sets the file's size (default 320 MiB, above the 256 MiB limit).

mod common;

use std::process::Command;
use std::time::Duration;

use common::cgroup::{MemoryCgroup, Version, peak_rss};
use common::{Garage, MsfsMount, config_yaml_with, pattern, read_direct, s3_backend_yaml};

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
        assert!(
            mount.try_exit_status().is_none(),
            "{v}: msfs exited:\n{}",
            mount.stderr_text()
        );
        assert_eq!(cgroup.oom_kills(), 0, "{v}: the OOM killer fired");
        eprintln!(
            "MEASURED {v} ram cache 1024 MiB asked, file {} MiB read twice: target 224 MiB, \
             cgroup limit 256 MiB, cgroup peak {} MiB, msfs peak RSS {} MiB, limit hits {}",
            body.len() as u64 / MIB,
            cgroup.peak() / MIB,
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
