//! Smoke tests of the shared fixtures themselves: garage answers S3 faithfully
//! and enforces signatures, and mount detection reads mountinfo correctly.
//! If these fail, every other integration test's failure is suspect.

use crate::common::{Garage, is_mounted};

/// 5 MiB of a non-repeating pattern, so a misplaced range cannot compare equal.
fn five_mib() -> Vec<u8> {
    let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
    (0..5 * 1024 * 1024)
        .map(|_| {
            // xorshift64
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state.to_le_bytes()[0]
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garage_round_trips_empty_unicode_and_large_objects() {
    let garage = Garage::start();
    garage.create_bucket("smoke");

    let objects: Vec<(&str, Vec<u8>)> = vec![
        ("empty", Vec::new()),
        ("dir/with space/ünïcödé ✓.txt", b"hello, garage\n".to_vec()),
        ("large/five-mib.bin", five_mib()),
    ];
    for (key, body) in &objects {
        garage.put_object("smoke", key, body.clone()).await;
    }

    let mut expected: Vec<String> = objects.iter().map(|(k, _)| k.to_string()).collect();
    expected.sort();
    assert_eq!(garage.list_keys("smoke", "").await, expected);
    assert_eq!(
        garage.list_keys("smoke", "dir/").await,
        vec!["dir/with space/ünïcödé ✓.txt".to_string()]
    );

    for (key, body) in &objects {
        let got = garage.get_object("smoke", key).await;
        assert_eq!(got.len(), body.len(), "length of {key:?}");
        assert!(got == *body, "bytes of {key:?} differ");
    }
    assert_eq!(garage.try_get_object("smoke", "missing").await, None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garage_rejects_a_wrong_secret_key() {
    let garage = Garage::start();
    garage.create_bucket("guarded");
    garage.put_object("guarded", "k", "v").await;

    let wrong_secret = "0".repeat(64);
    let intruder = garage.client_with_credentials(garage.access_key(), &wrong_secret);
    let err = intruder
        .get_object()
        .bucket("guarded")
        .key("k")
        .send()
        .await
        .expect_err("a request signed with the wrong secret must fail");
    let status = err.raw_response().map(|r| r.status().as_u16());
    assert_eq!(
        status,
        Some(403),
        "expected HTTP 403, got {}",
        crate::common::garage::error_text(&err)
    );

    // The right secret still works, so the 403 was about the signature.
    assert_eq!(garage.get_object("guarded", "k").await, b"v");
}

#[test]
fn is_mounted_sees_a_mount_whose_path_needs_escaping() {
    let dir = tempfile::tempdir().expect("tempdir");
    let target = dir.path().join("with space\tand tab");
    std::fs::create_dir(&target).expect("create mount target");
    assert!(!is_mounted(&target));

    let out = std::process::Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=1m", "msfs-smoke"])
        .arg(&target)
        .output()
        .expect("run mount");
    assert!(
        out.status.success(),
        "mount -t tmpfs failed (these tests need root): {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mounted = is_mounted(&target);
    let fstype = crate::common::mount::mount_fstype(&target);
    let out = std::process::Command::new("umount")
        .arg(&target)
        .output()
        .expect("run umount");
    assert!(out.status.success(), "umount failed");

    assert!(mounted, "tmpfs at {target:?} not found in mountinfo");
    assert_eq!(fstype.as_deref(), Some("tmpfs"));
    assert!(!is_mounted(&target));
}
