//! What the CSI plugin leaves on the node is closed to other users: its socket (whoever connects
//! can publish volumes) is 0660, its state directory 0700, and the file remembering publishes
//! 0600 — and holds no secret of the requests it remembers.

use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::path::Path;

use crate::common::Garage;
use crate::common::csi::{
    CsiPlugin, garage_attributes, garage_secrets, publish_request, unpublish_request,
};

/// The permission bits of `path` (not following a symlink).
fn mode(path: &Path) -> u32 {
    std::fs::symlink_metadata(path)
        .unwrap_or_else(|e| panic!("stat {}: {e}", path.display()))
        .permissions()
        .mode()
        & 0o7777
}

fn assert_socket_is_owner_and_group_only(plugin: &CsiPlugin, when: &str) {
    let socket = plugin.socket();
    let file_type = std::fs::symlink_metadata(socket)
        .expect("stat the socket")
        .file_type();
    assert!(file_type.is_socket(), "{} is a socket", socket.display());
    assert_eq!(
        mode(socket),
        0o660,
        "socket mode {when} (no bits for other users)"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn socket_state_dir_and_state_file_are_closed_to_other_users() {
    let garage = Garage::start();
    garage.create_bucket("csi-perm");
    let mut plugin = CsiPlugin::start();
    assert_socket_is_owner_and_group_only(&plugin, "after start");
    assert_eq!(mode(plugin.state_dir()), 0o700, "state directory mode");

    let target = plugin.target("pod-1", "pv-perm");
    let secrets = garage_secrets(&garage);
    let mut node = plugin.node().await;
    node.node_publish_volume(publish_request(
        "pv-perm",
        &target,
        garage_attributes(&garage, "csi-perm"),
        secrets.clone(),
    ))
    .await
    .unwrap_or_else(|e| panic!("publish: {e}\n{}", plugin.log_text()));

    let state_file = plugin.state_dir().join("published.json");
    assert_eq!(mode(&state_file), 0o600, "state file mode");
    let state = std::fs::read_to_string(&state_file).expect("read the state file");
    assert!(
        state.contains("pv-perm"),
        "the publish is remembered: {state}"
    );
    for (name, value) in &secrets {
        assert!(
            !state.contains(value.as_str()),
            "the secret {name:?} reached {}",
            state_file.display()
        );
    }
    // No other file in the state directory (a temporary file of an update) is open either.
    // (Directories below it need not be: nobody else can enter the state directory.)
    for entry in std::fs::read_dir(plugin.state_dir()).expect("list the state directory") {
        let entry = entry.expect("state directory entry");
        if !entry.file_type().expect("file type").is_file() {
            continue;
        }
        let path = entry.path();
        assert_eq!(
            mode(&path) & 0o007,
            0,
            "{} is open to other users",
            path.display()
        );
    }

    // A restarted plugin binds its socket again: restricted again.
    plugin.restart();
    assert_socket_is_owner_and_group_only(&plugin, "after a restart");
    assert_eq!(
        mode(plugin.state_dir()),
        0o700,
        "state directory mode after a restart"
    );

    let mut node = plugin.node().await;
    node.node_unpublish_volume(unpublish_request("pv-perm", &target))
        .await
        .unwrap_or_else(|e| panic!("unpublish: {e}\n{}", plugin.log_text()));
    assert_eq!(mode(&state_file), 0o600, "state file mode after an update");
}
