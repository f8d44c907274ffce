//! Writes through a mount whose store fails: a fault-injecting proxy sits between msfs and
//! garage. Close still succeeds, the failure reaches fsync once, and nothing written is lost.

use std::io::Write;
use std::time::Duration;

use crate::common::fault_proxy::{Fault, FaultPlan, FaultProxy, Match, S3Op};
use crate::common::{Garage, MsfsMount, config_yaml_with, wait_until};

/// How long a retried commit may take to land once the store is back.
const LANDING: Duration = Duration::from_secs(90);

/// A writable backend through `proxy`, retrying fast so that a failed commit attempt (ten
/// tries) takes well under a second.
fn mount_through(proxy: &FaultProxy, garage: &Garage, bucket: &str) -> MsfsMount {
    mount_through_with(proxy, garage, bucket, "", "")
}

/// As `mount_through`, with top-level keys `top` and backend keys `extra` (4-space indented).
fn mount_through_with(
    proxy: &FaultProxy,
    garage: &Garage,
    bucket: &str,
    top: &str,
    extra: &str,
) -> MsfsMount {
    let backend = format!(
        "{}      retry_base_delay: 5\n      retry_max_delay: 20\n    readonly: false\n{extra}",
        proxy.s3_backend_yaml("data", bucket, "", garage)
    );
    MsfsMount::start(&config_yaml_with(top, &[backend]), "yaml").expect("mount")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_background_commit_is_reported_to_fsync_once_and_lands_after_recovery() {
    let garage = Garage::start();
    garage.create_bucket("faulty");
    let proxy = FaultProxy::in_front_of(&garage);
    let m = mount_through(&proxy, &garage, "faulty");
    let path = m.path().join("data/precious");

    proxy.set(
        FaultPlan::always(Fault::service_unavailable()).only(Match::any().op(S3Op::PutObject)),
    );
    std::fs::write(&path, b"do not lose me").expect("write and close succeed");
    // One commit attempt is ten tries; an eleventh failure means the background retry loop
    // has recorded the first attempt's failure and gone round again.
    wait_until("the commit failed and was retried", LANDING, async || {
        proxy.stats().errors >= 11
    })
    .await;
    assert_eq!(
        std::fs::read(&path).expect("read while failing"),
        b"do not lose me",
        "the mount serves the kept data"
    );
    assert_eq!(garage.try_get_object("faulty", "precious").await, None);

    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .expect("open");
    let err = file.sync_all().expect_err("the failure is reported");
    assert_eq!(err.raw_os_error(), Some(libc::EIO));

    proxy.pass_through();
    wait_until("the retry landed the data", LANDING, async || {
        garage.try_get_object("faulty", "precious").await.as_deref() == Some(b"do not lose me")
    })
    .await;
    file.sync_all()
        .expect("once reported and since landed: no error again");
    drop(file);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_flush_on_close_a_failing_store_fails_the_close_and_keeps_the_data() {
    let garage = Garage::start();
    garage.create_bucket("close-fails");
    let proxy = FaultProxy::in_front_of(&garage);
    let backend = format!(
        "{}      retry_base_delay: 5\n      retry_max_delay: 20\n    readonly: false\n    flush_on_close: true\n",
        proxy.s3_backend_yaml("data", "close-fails", "", &garage)
    );
    let m = MsfsMount::start(&config_yaml_with("", &[backend]), "yaml").expect("mount");
    let path = m.path().join("data/f");
    proxy.set(
        FaultPlan::always(Fault::service_unavailable()).only(Match::any().op(S3Op::PutObject)),
    );
    let mut file = std::fs::File::create(&path).expect("create");
    file.write_all(b"kept").expect("write");
    // close(2) reports flush errors; std drops them, so flush through the descriptor.
    let fd = std::os::fd::IntoRawFd::into_raw_fd(file);
    // SAFETY: `fd` was just taken from a File that no longer owns it.
    let rc = unsafe { libc::close(fd) };
    assert_eq!(rc, -1, "close reports the failed commit");
    assert_eq!(
        std::io::Error::last_os_error().raw_os_error(),
        Some(libc::EIO)
    );
    proxy.pass_through();
    wait_until(
        "the background retry landed the data",
        LANDING,
        async || garage.try_get_object("close-fails", "f").await.as_deref() == Some(b"kept"),
    )
    .await;
}

/// A writable backend through `proxy` with `flush_on_close`, so the close returns the commit's
/// outcome, and a 5 MiB multipart threshold.
fn mount_flushing_through(proxy: &FaultProxy, garage: &Garage, bucket: &str) -> MsfsMount {
    mount_through_with(
        proxy,
        garage,
        bucket,
        "multipart_upload_threshold_bytes: 5242880\n",
        "    flush_on_close: true\n",
    )
}

/// Closes `file` through close(2), which reports a failed commit (std's drop ignores it).
fn close_reporting(file: std::fs::File) -> Result<(), i32> {
    let fd = std::os::fd::IntoRawFd::into_raw_fd(file);
    // SAFETY: `fd` was just taken from a File that no longer owns it.
    match unsafe { libc::close(fd) } {
        0 => Ok(()),
        _ => Err(std::io::Error::last_os_error().raw_os_error().unwrap_or(0)),
    }
}

/// The answer to CompleteMultipartUpload is lost after the server completed the upload: the
/// retry finds the upload gone (NoSuchUpload). The object the parts make is there, so the
/// commit landed and the close succeeds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_completed_upload_whose_answer_was_lost_counts_as_landed() {
    let garage = Garage::start();
    garage.create_bucket("lost-answer");
    let proxy = FaultProxy::in_front_of(&garage);
    let m = mount_flushing_through(&proxy, &garage, "lost-answer");
    let body = crate::common::pattern(12 << 20, 41);
    proxy.set(
        FaultPlan::once(Fault::ResetMidBody { after: 0 })
            .only(Match::any().op(S3Op::CompleteMultipartUpload)),
    );
    let mut file = std::fs::File::create(m.path().join("data/big")).expect("create");
    file.write_all(&body).expect("write");
    assert_eq!(close_reporting(file), Ok(()), "the commit landed");
    assert_eq!(
        proxy.stats().resets_mid_body,
        1,
        "the completion's answer was cut"
    );
    assert!(
        garage.try_get_object("lost-answer", "big").await.as_deref() == Some(&body[..]),
        "the object holds what was written"
    );
}

/// A commit the store refuses for good (403 AccessDenied) is not retried in a loop: it is
/// reported, its data is kept, and the next fsync tries again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_refused_for_good_is_not_retried_and_is_reported_with_the_data_kept() {
    let garage = Garage::start();
    garage.create_bucket("refused");
    let proxy = FaultProxy::in_front_of(&garage);
    let m = mount_through(&proxy, &garage, "refused");
    let path = m.path().join("data/denied");
    proxy.set(
        FaultPlan::always(Fault::Error {
            status: 403,
            code: "AccessDenied",
        })
        .only(Match::any().op(S3Op::PutObject).key_prefix("denied")),
    );
    std::fs::write(&path, b"keep me").expect("write and close");
    wait_until("the commit was refused", LANDING, async || {
        proxy.stats().errors >= 1
    })
    .await;
    wait_until("the daemon says it gave up", LANDING, async || {
        m.stdout_text().contains("cannot be committed")
    })
    .await;
    let refused = proxy.stats().errors;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        proxy.stats().errors,
        refused,
        "no retry loop against a final error"
    );
    std::fs::write(m.path().join("data/other"), b"unaffected").expect("another file");
    assert_eq!(std::fs::read(&path).expect("read"), b"keep me");

    proxy.pass_through();
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .expect("open");
    let err = file.sync_all().expect_err("the failure is reported");
    assert_eq!(err.raw_os_error(), Some(libc::EIO));
    assert_eq!(
        garage.try_get_object("refused", "denied").await.as_deref(),
        Some(&b"keep me"[..]),
        "the fsync that reported it tried again, and landed"
    );
    file.sync_all().expect("reported once");
    wait_until("the other file landed", LANDING, async || {
        garage.try_get_object("refused", "other").await.as_deref() == Some(b"unaffected")
    })
    .await;
}
