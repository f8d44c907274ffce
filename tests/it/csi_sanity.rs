//! kubernetes-csi's conformance suite, csi-sanity, against `msfs csi --controller` and a node
//! plugin on a real garage: its identity, controller and node specs, with a StorageClass's
//! parameters and the provisioner, delete, validate and node publish secrets. Every spec that
//! applies to a driver with CREATE_DELETE_VOLUME (and no snapshots, expansion, listing or
//! staging) must pass; the others it skips itself.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::common::csi::CsiPlugin;
use crate::common::garage::Garage;

/// csi-sanity, from `shared/tools` beside the repository (see its README there).
fn csi_sanity() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/tools/csi-sanity")
}

/// `(tests, failures, skipped)` of a JUnit report.
fn junit_counts(report: &str) -> (usize, usize, usize) {
    let tests = report.matches("<testcase ").count();
    let failures = report.matches("<failure").count() + report.matches("<error").count();
    let skipped = report.matches("<skipped").count();
    (tests, failures, skipped)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn csi_sanity_passes_every_spec_that_applies() {
    let tool = csi_sanity();
    assert!(tool.exists(), "csi-sanity not found at {}", tool.display());
    let garage = Garage::start();
    garage.create_bucket("sanity");
    let controller = CsiPlugin::start_with(None, &["--controller"]);
    let node = CsiPlugin::start_with(None, &["--with-controller"]);
    let work = tempfile::tempdir().expect("temp dir");
    let parameters = work.path().join("parameters.yaml");
    std::fs::write(
        &parameters,
        format!(
            "bucketName: sanity\nprefix: sanity/\nendpoint: {}\nregion: {}\n\
             authenticationSource: secret\n",
            garage.endpoint(),
            garage.region()
        ),
    )
    .expect("write parameters");
    let keys = format!(
        "  access_key_id: {}\n  secret_access_key: {}\n",
        garage.access_key(),
        garage.secret_key()
    );
    let secrets = work.path().join("secrets.yaml");
    let sections = [
        "CreateVolumeSecret",
        "DeleteVolumeSecret",
        "ControllerValidateVolumeCapabilitiesSecret",
        "NodePublishVolumeSecret",
    ];
    let text: String = sections.iter().map(|s| format!("{s}:\n{keys}")).collect();
    std::fs::write(&secrets, text).expect("write secrets");
    // Targets must lie in the kubelet's pods directory; csi-sanity makes the last component.
    let pod = node
        .kubelet_dir()
        .join("pods/5e1f0c8e-sanity/volumes/kubernetes.io~csi");
    std::fs::create_dir_all(&pod).expect("pod dir");
    let report = work.path().join("junit.xml");
    let output = Command::new(&tool)
        .arg(format!("-csi.endpoint=unix://{}", node.socket().display()))
        .arg(format!(
            "-csi.controllerendpoint=unix://{}",
            controller.socket().display()
        ))
        .arg(format!("-csi.mountdir={}", pod.join("mnt").display()))
        .arg(format!("-csi.stagingdir={}", pod.join("stage").display()))
        .arg(format!(
            "-csi.testvolumeparameters={}",
            parameters.display()
        ))
        .arg(format!("-csi.secrets={}", secrets.display()))
        .arg("-csi.testvolumesize=1073741824")
        .arg("-ginkgo.skip=\\[GroupController")
        .arg(format!("-ginkgo.junit-report={}", report.display()))
        .output()
        .expect("run csi-sanity");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let junit = std::fs::read_to_string(&report).unwrap_or_default();
    let (tests, failures, skipped) = junit_counts(&junit);
    println!(
        "csi-sanity: {tests} specs, {} passed, {failures} failed, {skipped} skipped",
        tests - failures - skipped
    );
    assert!(
        output.status.success() && failures == 0 && tests > 0,
        "csi-sanity failed ({failures} of {tests}):\n{stdout}\n{}\n--- controller\n{}\n--- node\n{}",
        String::from_utf8_lossy(&output.stderr),
        controller.log_text(),
        node.log_text()
    );
    // The publish lifecycle (create, publish, write, unpublish, delete) ran, not skipped.
    for spec in [
        "Node Service should work",
        "Node Service should be idempotent",
    ] {
        let ran = junit.split("<testcase ").any(|case| {
            let head = case.split('>').next().unwrap_or("");
            head.contains(spec) && head.contains("status=\"passed\"")
        });
        assert!(ran, "csi-sanity skipped {spec:?}");
    }
    assert!(
        garage.list_keys("sanity", "").await.is_empty(),
        "csi-sanity deletes every volume it creates"
    );
}
