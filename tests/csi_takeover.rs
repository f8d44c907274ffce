//! The CSI plugin with an fd holder beside it (`--fd-holder-socket`, as the chart's holder
//! container): a SIGKILL of the plugin is invisible to the pod. The holder keeps the volume's
//! FUSE connection (and the publish's secrets, in memory), the restarted plugin takes it over
//! before the kubelet calls again, and a pod's open files, open directory and written bytes
//! carry on (real garage, real FUSE, real gRPC on the CSI socket).

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::app::{HoldingApp, md5_hex};
use common::csi::{
    CsiPlugin, garage_attributes, garage_secrets, publish_request, unpublish_request,
};
use common::mount::{abort_fuse_connection, guarded};
use common::{Garage, pattern, wait_until};
use msfs::holder::HolderClient;

const MIB: usize = 1 << 20;
const BUCKET: &str = "csi-takeover";
const HANG_LIMIT: Duration = Duration::from_secs(120);
const LANDING: Duration = Duration::from_secs(120);

/// `msfs fd-holder` as the chart runs it: a process of its own, stopped by PID at the end.
struct Holder {
    child: Child,
    socket: PathBuf,
    _dir: tempfile::TempDir,
}

impl Holder {
    fn start() -> Holder {
        let dir = tempfile::tempdir().expect("tempdir");
        let socket = dir.path().join("fd-holder.sock");
        let child = Command::new(env!("CARGO_BIN_EXE_msfs"))
            .arg("fd-holder")
            .arg("--socket")
            .arg(&socket)
            .stdin(Stdio::null())
            .spawn()
            .expect("spawn the fd holder");
        let holder = Holder {
            child,
            socket,
            _dir: dir,
        };
        for _ in 0..500 {
            if HolderClient::connect(&holder.socket).is_ok() {
                return holder;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!(
            "the fd holder did not answer at {}",
            holder.socket.display()
        );
    }

    fn held(&self) -> Vec<String> {
        HolderClient::connect(&self.socket)
            .and_then(|mut c| c.list())
            .expect("list the holder")
            .into_iter()
            .map(|held| held.name)
            .collect()
    }
}

impl Drop for Holder {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn aborting(target: &Path) -> impl FnOnce() -> String + '_ {
    move || abort_fuse_connection(target)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_plugin_is_taken_over_and_the_pod_sees_no_error() {
    let garage = Garage::start();
    garage.create_bucket(BUCKET);
    let big = pattern(8 * MIB, 21);
    garage.put_object(BUCKET, "big", big.clone()).await;
    let names: Vec<String> = (0..300).map(|i| format!("file-{i:04}")).collect();
    for name in &names {
        garage
            .put_object(BUCKET, &format!("many/{name}"), b"x".to_vec())
            .await;
    }
    let holder = Holder::start();
    let mut plugin = CsiPlugin::start_with(
        None,
        &[&format!("--fd-holder-socket={}", holder.socket.display())],
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

    let local = tempfile::tempdir().expect("tempdir");
    let (before, after) = (pattern(3 * MIB, 22), pattern(MIB, 23));
    std::fs::write(local.path().join("before"), &before).expect("before");
    std::fs::write(local.path().join("after"), &after).expect("after");
    let app = HoldingApp::start(
        &target,
        &local.path().join("before"),
        &local.path().join("after"),
    );
    let app = guarded(
        HANG_LIMIT,
        "the pod's first steps",
        aborting(&target),
        move || app.wait_ready(),
    );

    plugin.kill_and_restart();
    let (status, report) = guarded(
        HANG_LIMIT,
        "the pod carrying on",
        aborting(&target),
        move || app.go_on(),
    );
    assert!(
        status.success(),
        "the pod's application failed across the kill:\n{}",
        plugin.log_text()
    );
    let report = report.expect("the application's report");
    assert_eq!(report.big_md5, md5_hex(&big), "big read across the kill");
    assert_eq!(report.names, names, "many/ listed across the kill");
    let mut expected = before;
    expected.extend_from_slice(&after);
    wait_until("new.bin lands whole", LANDING, async || {
        garage.try_get_object(BUCKET, "new.bin").await.as_deref() == Some(&expected[..])
    })
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
