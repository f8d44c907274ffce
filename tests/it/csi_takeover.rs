//! The CSI plugin with an fd holder beside it (`--fd-holder-socket`, as the chart's holder
//! container): a SIGKILL of the plugin is invisible to the pod. The holder keeps the volume's
//! FUSE connection (and the publish's secrets, in memory), the restarted plugin takes it over
//! before the kubelet calls again, and a pod's open files, open directory and written bytes
//! carry on (real garage, real FUSE, real gRPC on the CSI socket).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::common::app::{HoldingApp, md5_hex};
use crate::common::csi::{
    CsiPlugin, garage_attributes, garage_secrets, publish_request, unpublish_request,
};
use crate::common::holder::FdHolder;
use crate::common::mount::{abort_fuse_connection, guarded};
use crate::common::{Garage, pattern, wait_until};

const MIB: usize = 1 << 20;
const BUCKET: &str = "csi-takeover";
const HANG_LIMIT: Duration = Duration::from_secs(120);
const LANDING: Duration = Duration::from_secs(120);

fn aborting(target: &Path) -> impl FnOnce() -> String + '_ {
    move || abort_fuse_connection(target)
}

/// A pod's application across a restart of the plugin (see `HoldingApp`): what it reads is
/// seeded in the bucket, what it writes is kept locally, and [`PodApp::carried_on`] checks
/// both once it is done.
struct PodApp {
    big: Vec<u8>,
    names: Vec<String>,
    written: Vec<u8>,
    local: tempfile::TempDir,
}

impl PodApp {
    /// Seeds `big` (`big_mib` MiB) and `files` names under `many/`.
    async fn seed(garage: &Garage, big_mib: usize, files: usize, seed: u64) -> PodApp {
        let big = pattern(big_mib * MIB, seed);
        garage.put_object(BUCKET, "big", big.clone()).await;
        let names: Vec<String> = (0..files).map(|i| format!("file-{i:04}")).collect();
        for name in &names {
            garage
                .put_object(BUCKET, &format!("many/{name}"), b"x".to_vec())
                .await;
        }
        let local = tempfile::tempdir().expect("tempdir");
        let (before, after) = (pattern(MIB, seed + 1), pattern(MIB, seed + 2));
        std::fs::write(local.path().join("before"), &before).expect("before");
        std::fs::write(local.path().join("after"), &after).expect("after");
        let written = [before, after].concat();
        PodApp {
            big,
            names,
            written,
            local,
        }
    }

    /// Starts the application in the volume at `target` and waits until it holds its files.
    fn start(&self, target: &Path) -> HoldingApp {
        let app = HoldingApp::start(
            target,
            &self.local.path().join("before"),
            &self.local.path().join("after"),
        );
        guarded(
            HANG_LIMIT,
            "the pod's first steps",
            aborting(target),
            move || app.wait_ready(),
        )
    }

    /// Lets `app` finish after the restart (`across` names it) and checks that it saw no error,
    /// read and listed everything, and that what it wrote landed whole.
    async fn carried_on(
        &self,
        app: HoldingApp,
        target: &Path,
        across: &str,
        garage: &Garage,
        log: impl Fn() -> String,
    ) {
        let (status, report) = guarded(
            HANG_LIMIT,
            "the pod carrying on",
            aborting(target),
            move || app.go_on(),
        );
        assert!(
            status.success(),
            "the pod's application failed across the {across}:\n{}",
            log()
        );
        let report = report.expect("the application's report");
        assert_eq!(
            report.big_md5,
            md5_hex(&self.big),
            "big read across the {across}"
        );
        assert_eq!(report.names, self.names, "many/ listed across the {across}");
        wait_until("new.bin lands whole", LANDING, async || {
            garage.try_get_object(BUCKET, "new.bin").await.as_deref() == Some(&self.written[..])
        })
        .await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_plugin_is_taken_over_and_the_pod_sees_no_error() {
    let garage = Garage::start();
    garage.create_bucket(BUCKET);
    let pod = PodApp::seed(&garage, 8, 300, 21).await;
    let holder = FdHolder::start();
    let mut plugin = CsiPlugin::start_with(
        None,
        &[&format!("--fd-holder-socket={}", holder.socket().display())],
    );
    let target = plugin.target("pod-1", "pv-take");
    let mut node = plugin.node().await;
    // Secret credentials: without a holder, a restarted plugin could not serve this volume
    // until the kubelet's republish brought them back.
    node.node_publish_volume(publish_request(
        "pv-take",
        &target,
        garage_attributes(&garage, BUCKET),
        garage_secrets(&garage),
    ))
    .await
    .unwrap_or_else(|e| panic!("publish: {e}\n{}", plugin.log_text()));
    assert_eq!(holder.held(), [target.display().to_string()]);

    let app = pod.start(&target);

    plugin.kill_and_restart();
    pod.carried_on(app, &target, "kill", &garage, || plugin.log_text())
        .await;
    assert!(
        plugin
            .log_text()
            .contains("took over a volume's live connection"),
        "{}",
        plugin.log_text()
    );

    let mut node = plugin.node().await;
    node.node_unpublish_volume(unpublish_request("pv-take", &target))
        .await
        .unwrap_or_else(|e| panic!("unpublish: {e}\n{}", plugin.log_text()));
    assert!(!target.exists(), "the target is removed at unpublish");
    assert!(holder.held().is_empty(), "the holder let the volume go");
}

/// `msfs csi` as the chart's new pod runs it during an upgrade: over the same state, socket and
/// kubelet directories as the plugin it replaces, with a holder of its own.
struct Successor {
    child: Child,
    log: PathBuf,
}

impl Successor {
    fn start(plugin: &CsiPlugin, holder: &Path, log: PathBuf) -> Successor {
        let log_file = std::fs::File::create(&log).expect("successor log");
        let child = Command::new(env!("CARGO_BIN_EXE_msfs"))
            .arg("csi")
            .arg(format!("--endpoint=unix://{}", plugin.socket().display()))
            .arg("--node-id=test-node")
            .arg(format!("--state-dir={}", plugin.state_dir().display()))
            .arg(format!("--kubelet-dir={}", plugin.kubelet_dir().display()))
            .arg(format!("--fd-holder-socket={}", holder.display()))
            .env("RUST_LOG", "info,msfs=debug")
            .stdin(Stdio::null())
            .stdout(log_file.try_clone().expect("log fd"))
            .stderr(log_file)
            .spawn()
            .expect("spawn the successor");
        Successor { child, log }
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Waits (bounded) until its log shows `text` at least `times` times.
    fn wait_for(&mut self, text: &str, times: usize) {
        for _ in 0..1500 {
            if self.log_text().matches(text).count() >= times {
                return;
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!("the successor exited ({status}):\n{}", self.log_text());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!(
            "the successor never logged {text:?} {times}x:\n{}",
            self.log_text()
        );
    }
}

impl Drop for Successor {
    fn drop(&mut self) {
        // SAFETY: signalling our own child by its pid.
        unsafe { libc::kill(self.child.id() as libc::pid_t, libc::SIGTERM) };
        for _ in 0..1500 {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// An upgrade as the chart does it (`maxSurge: 1`): the new plugin starts beside the old one,
/// each with its own fd holder in one directory; it waits; the old plugin's SIGTERM hands every
/// volume over instead of unmounting; the new plugin moves each connection from the old holder
/// into its own, and the old holder, holding nothing, exits at its SIGTERM. The pods see no
/// error: one holds files and a directory open, one reads in a loop all along.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upgrade_hands_every_volume_to_the_new_plugin_and_the_pods_see_no_error() {
    let garage = Garage::start();
    garage.create_bucket(BUCKET);
    let pod = PodApp::seed(&garage, 8, 100, 31).await;
    garage
        .put_object(BUCKET, "small.txt", b"read all along\n".to_vec())
        .await;
    let holders = tempfile::tempdir().expect("tempdir");
    let old_socket = holders.path().join("fd-holder/old-pod.sock");
    let new_socket = holders.path().join("fd-holder/new-pod.sock");
    let mut old_holder = FdHolder::start_at(old_socket.clone());
    let mut plugin = CsiPlugin::start_with(
        None,
        &[&format!("--fd-holder-socket={}", old_socket.display())],
    );
    let targets = [
        plugin.target("pod-1", "pv-a"),
        plugin.target("pod-2", "pv-b"),
    ];
    let mut node = plugin.node().await;
    for (volume, target) in ["pv-a", "pv-b"].iter().zip(&targets) {
        node.node_publish_volume(publish_request(
            volume,
            target,
            garage_attributes(&garage, BUCKET),
            garage_secrets(&garage),
        ))
        .await
        .unwrap_or_else(|e| panic!("publish: {e}\n{}", plugin.log_text()));
    }
    drop(node);
    assert_eq!(old_holder.held().len(), 2);

    let app = pod.start(&targets[0]);
    let mut reader = Command::new("bash")
        .arg("-c")
        .arg("for i in $(seq 400); do cat \"$1\" > /dev/null || exit 1; done")
        .arg("reader")
        .arg(targets[1].join("small.txt"))
        .spawn()
        .expect("spawn the second pod's reader");

    // A file the second pod writes and holds open, its bytes not committed at the upgrade.
    let held_path = targets[1].join("held.bin");
    let (first, second) = (pattern(2 * MIB, 41), pattern(MIB + 3, 42));
    let mut held = std::fs::File::create(&held_path).expect("create held.bin");
    held.write_all(&first).expect("write before the upgrade");

    let new_holder = FdHolder::start_at(new_socket.clone());
    let mut successor = Successor::start(&plugin, &new_socket, holders.path().join("new.log"));
    successor.wait_for("waiting to succeed", 1);
    plugin.signal_stop();
    successor.wait_for("took over a volume's live connection", 2);
    assert!(plugin.stop(), "the old plugin exits at SIGTERM");

    // The successor took the held file's unsaved bytes over before it served.
    let seen = guarded(HANG_LIMIT, "read held.bin", aborting(&targets[1]), {
        let path = held_path.clone();
        move || std::fs::read(&path)
    })
    .expect("read held.bin after the upgrade");
    assert!(
        seen == first,
        "after the upgrade held.bin holds {} bytes, not the {} written before it:\n{}",
        seen.len(),
        first.len(),
        successor.log_text()
    );
    let expected_held = [first, second.clone()].concat();
    guarded(
        HANG_LIMIT,
        "write on held.bin",
        aborting(&targets[1]),
        move || {
            held.write_all(&second)?;
            held.sync_all()
        },
    )
    .expect("write on and fsync held.bin after the upgrade");
    assert!(
        garage.try_get_object(BUCKET, "held.bin").await.as_deref() == Some(&expected_held[..]),
        "held.bin in the store is not what was written across the upgrade"
    );
    let old_log = plugin.log_text();
    assert_eq!(
        old_log.matches("handed the volume over").count(),
        2,
        "{old_log}"
    );
    assert!(!old_log.contains("cannot unmount"), "{old_log}");

    pod.carried_on(app, &targets[0], "upgrade", &garage, || {
        successor.log_text()
    })
    .await;
    let read = guarded(
        HANG_LIMIT,
        "the second pod's reader",
        aborting(&targets[1]),
        move || reader.wait(),
    );
    assert!(
        read.expect("reader").success(),
        "a read failed across the upgrade"
    );

    let mut held = new_holder.held();
    held.sort();
    let mut expected_held: Vec<String> = targets.iter().map(|t| t.display().to_string()).collect();
    expected_held.sort();
    assert_eq!(
        held, expected_held,
        "the new pod's holder keeps both volumes"
    );
    assert!(
        old_holder.held().is_empty(),
        "the old pod's holder let them go"
    );
    assert!(old_holder.stop(), "the old holder, empty, exits at SIGTERM");

    let mut node = plugin.node().await;
    for (volume, target) in ["pv-a", "pv-b"].iter().zip(&targets) {
        node.node_unpublish_volume(unpublish_request(volume, target))
            .await
            .unwrap_or_else(|e| panic!("unpublish: {e}\n{}", successor.log_text()));
    }
    assert!(
        new_holder.held().is_empty(),
        "the new holder let the volumes go"
    );
}

/// The kubelet restarting the plugin's container alone (after failed liveness probes) sends it
/// SIGTERM, not SIGKILL: with its pod's fd holder still running, that must not unmount the
/// pods' volumes either. Once the holder is told to stop too (the pod going away), a SIGTERM
/// unmounts them as before, and the holder, emptied, exits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sigterm_of_the_plugin_container_alone_leaves_the_volumes_to_the_restarted_plugin() {
    let garage = Garage::start();
    garage.create_bucket(BUCKET);
    let pod = PodApp::seed(&garage, 4, 20, 41).await;
    let mut holder = FdHolder::start();
    let mut plugin = CsiPlugin::start_with(
        None,
        &[&format!("--fd-holder-socket={}", holder.socket().display())],
    );
    let target = plugin.target("pod-1", "pv-restart");
    let mut node = plugin.node().await;
    node.node_publish_volume(publish_request(
        "pv-restart",
        &target,
        garage_attributes(&garage, BUCKET),
        garage_secrets(&garage),
    ))
    .await
    .unwrap_or_else(|e| panic!("publish: {e}\n{}", plugin.log_text()));
    drop(node);

    let app = pod.start(&target);
    plugin.restart();
    assert!(
        plugin
            .log_text()
            .contains("SIGTERM for this container alone"),
        "{}",
        plugin.log_text()
    );
    pod.carried_on(app, &target, "restart", &garage, || plugin.log_text())
        .await;

    // The pod goes away: the kubelet signals the holder and the plugin.
    holder.terminate();
    assert!(plugin.stop(), "the plugin exits at SIGTERM");
    assert!(
        !crate::common::csi::mounted(&target),
        "a pod going away unmounts its volumes:\n{}",
        plugin.log_text()
    );
    assert!(holder.stop(), "the holder, emptied, exits");
}
