//! Manifest-backed mounts end to end: a real garage server, real `msfs` processes, real FUSE.
//! A read-only backend generates its manifest at mount and is then browsed without one LIST or
//! HEAD; a writable one records its changes in the delta log, which a remount replays (and
//! whose torn last record it ignores).

use std::path::Path;
use std::process::Command;

use crate::common::{Garage, MsfsMount, config_yaml, pattern, s3_backend_yaml, yaml_str};

/// A hybrid layout: a deep chain, a wide flat directory, awkward names, an empty marker.
fn tree() -> Vec<(String, usize)> {
    let mut keys: Vec<(String, usize)> = vec![
        ("top.txt".into(), 11),
        ("a/one.bin".into(), 4096),
        ("a/b/c/d/deep.bin".into(), 3),
        ("names/with space.txt".into(), 17),
        ("names/ünïcödé ✓.txt".into(), 23),
        ("empty-dir/".into(), 0),
    ];
    keys.extend((0..150).map(|i| (format!("flat/item-{i:04}.dat"), 100 + i)));
    keys
}

async fn seed(garage: &Garage, bucket: &str) {
    garage.create_bucket(bucket);
    let puts = tree()
        .into_iter()
        .enumerate()
        .map(|(i, (key, len))| async move {
            garage
                .put_object(bucket, &key, pattern(len, i as u64))
                .await;
        });
    futures::future::join_all(puts).await;
}

/// `relative-path size` of every entry under `root`, sorted: what a user's `find` sees.
fn find(root: &Path) -> Vec<String> {
    let out = Command::new("find")
        .arg(root)
        .args(["-mindepth", "1", "-printf", "%P %s %y\n"])
        .output()
        .expect("run find");
    assert!(
        out.status.success(),
        "find: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut lines: Vec<String> = String::from_utf8(out.stdout)
        .expect("utf-8")
        .lines()
        // Directory sizes are not comparable between two views; keep their kind only.
        .map(|l| match l.strip_suffix(" d") {
            Some(dir) => format!("{} d", dir.rsplit_once(' ').map_or(dir, |(p, _)| p)),
            None => l.to_string(),
        })
        .collect();
    lines.sort();
    lines
}

fn manifest_backend(garage: &Garage, bucket: &str, manifest: &Path, readonly: bool) -> String {
    format!(
        "{}    readonly: {readonly}\n    flush_on_close: true\n    manifest_path: {}\n",
        s3_backend_yaml("data", bucket, "", garage),
        yaml_str(manifest.to_str().expect("utf-8 path"))
    )
}

fn namespace_requests(garage: &Garage) -> u64 {
    garage.s3_requests("ListObjectsV2") + garage.s3_requests("HeadObject")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_only_mount_generates_its_manifest_and_browses_without_listing() {
    let garage = Garage::start();
    seed(&garage, "bootstrap").await;
    let state = tempfile::tempdir().expect("tempdir");
    let manifest = state.path().join("manifest");

    let mounted = MsfsMount::start(
        &config_yaml(&[manifest_backend(&garage, "bootstrap", &manifest, true)]),
        "yaml",
    )
    .expect("mount with manifest");
    assert!(
        manifest.join("manifest_index.json").exists(),
        "generated at mount; stderr:\n{}",
        mounted.stderr_text()
    );
    let before = namespace_requests(&garage);
    let seen = find(&mounted.path().join("data"));
    let deep = std::fs::read(mounted.path().join("data/a/b/c/d/deep.bin")).expect("read");
    assert_eq!(
        namespace_requests(&garage) - before,
        0,
        "browsing a manifest-backed mount sends no LIST or HEAD"
    );
    let index = tree()
        .iter()
        .position(|(k, _)| k == "a/b/c/d/deep.bin")
        .expect("in tree");
    assert_eq!(deep, pattern(3, index as u64));

    let live = MsfsMount::start(
        &config_yaml(&[s3_backend_yaml("data", "bootstrap", "", &garage)]),
        "yaml",
    )
    .expect("live mount");
    assert_eq!(
        seen,
        find(&live.path().join("data")),
        "manifest view == live listing"
    );
    assert!(seen.iter().any(|l| l == "empty-dir d"), "{seen:?}");
    assert_eq!(seen.iter().filter(|l| l.starts_with("flat/")).count(), 150);
}

fn generate(config: &Path, output: &Path) {
    let out = Command::new(env!("CARGO_BIN_EXE_msfs"))
        .args(["generate-manifest", "--backend", "data", "--output"])
        .arg(output)
        .arg(config)
        .output()
        .expect("run generate-manifest");
    assert!(
        out.status.success(),
        "generate-manifest failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn sh(script: &str) {
    let out = Command::new("sh")
        .args(["-ec", script])
        .output()
        .expect("sh");
    assert!(
        out.status.success(),
        "{script}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writable_manifest_mount_keeps_its_changes_in_the_delta_log() {
    let garage = Garage::start();
    seed(&garage, "delta").await;
    let state = tempfile::tempdir().expect("tempdir");
    let manifest = state.path().join("manifest");
    let writable = config_yaml(&[manifest_backend(&garage, "delta", &manifest, false)]);
    let config = state.path().join("config.yaml");
    std::fs::write(&config, &writable).expect("write config");
    generate(&config, &manifest);

    {
        let mut mount = MsfsMount::start(&writable, "yaml").expect("writable mount");
        let d = mount.path().join("data");
        let d = d.display();
        sh(&format!(
            "echo created > '{d}/a/new.txt'
             echo overwritten > '{d}/top.txt'
             rm '{d}/flat/item-0000.dat'
             mv '{d}/flat/item-0001.dat' '{d}/a/moved.dat'
             mkdir '{d}/made'
             echo inside > '{d}/made/file'
             mkdir '{d}/last-change'"
        ));
        assert!(
            mount.stop_with_umount().success(),
            "{}",
            mount.stderr_text()
        );
    }
    let live = MsfsMount::start(
        &config_yaml(&[s3_backend_yaml("data", "delta", "", &garage)]),
        "yaml",
    )
    .expect("live mount");
    let truth = find(&live.path().join("data"));
    assert!(
        truth.contains(&"a/moved.dat 101 f".to_string()),
        "{truth:?}"
    );

    let read_only = config_yaml(&[manifest_backend(&garage, "delta", &manifest, true)]);
    {
        let mount = MsfsMount::start(&read_only, "yaml").expect("remount");
        let before = namespace_requests(&garage);
        assert_eq!(
            find(&mount.path().join("data")),
            truth,
            "remount replays the delta log"
        );
        let text = std::fs::read_to_string(mount.path().join("data/top.txt")).expect("read");
        assert_eq!(text, "overwritten\n");
        assert_eq!(namespace_requests(&garage) - before, 0);
    }

    // A crash while appending tears the last record: it is ignored, the earlier ones stay.
    let log = manifest.join("_msfs_delta/delta.log");
    let len = std::fs::metadata(&log).expect("delta log").len();
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(&log)
        .expect("open log");
    file.set_len(len - 3).expect("tear the last record");
    drop(file);
    let mount = MsfsMount::start(&read_only, "yaml").expect("remount after a torn record");
    let expected: Vec<String> = truth.into_iter().filter(|l| l != "last-change d").collect();
    assert_eq!(find(&mount.path().join("data")), expected);
    assert!(
        mount.stdout_text().contains("torn record"),
        "the torn record is reported in the log: {}",
        mount.stdout_text()
    );
}
