//! Another client replaces an object while this mount has it open and partly rewritten (issue
//! #21): the commit copies the ranges nobody wrote with `x-amz-copy-source-if-match`, so garage
//! refuses to copy them from the other version, and msfs reports a conflict instead of
//! stitching the two versions together. Their object stays; ours stays local
//! until the whole file is rewritten.

use std::os::unix::fs::FileExt;
use std::time::Duration;

use crate::common::{Garage, MsfsMount, config_yaml_with, pattern, s3_backend_yaml};

const MIB: usize = 1 << 20;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_base_replaced_by_another_client_fails_the_commit_and_keeps_both_versions() {
    let garage = Garage::start();
    garage.create_bucket("contended");
    let ours_base = pattern(24 * MIB, 1);
    garage
        .put_object("contended", "shared", ours_base.clone())
        .await;
    // Multipart from 8 MiB: rewriting the first 8 MiB part of the 24 MiB object whole uploads
    // it and copies the other two, so nothing but the part copies reads the old version.
    let backend = format!(
        "{}    readonly: false\n",
        s3_backend_yaml("data", "contended", "", &garage)
    );
    let top = "multipart_upload_threshold_bytes: 8388608\ncache_storage: ram\n";
    let mut m = MsfsMount::start(&config_yaml_with(top, &[backend]), "yaml").expect("mount");
    let path = m.path().join("data/shared");

    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .expect("open for writing");
    file.write_all_at(&pattern(8 * MIB, 3), 0).expect("write");
    let theirs = pattern(24 * MIB, 2);
    garage
        .put_object("contended", "shared", theirs.clone())
        .await;
    let copies = garage.s3_requests("UploadPartCopy");

    let err = file.sync_all().expect_err("the commit must fail");
    assert_eq!(err.raw_os_error(), Some(libc::EIO), "{err}");
    assert!(
        garage.s3_requests("UploadPartCopy") > copies,
        "a part copy was tried (and refused: no read of the old version was needed)"
    );
    assert!(
        garage.get_object("contended", "shared").await == theirs,
        "the other client's object stands, nothing of ours mixed in"
    );
    drop(file);
    // The close's background commit meets the same conflict and gives up for good (no retry
    // can bring the old version back), saying so once.
    crate::common::wait_until(
        "the conflict is logged",
        Duration::from_secs(30),
        async || {
            m.stdout_text()
                .contains("this file cannot be committed and is no longer retried")
        },
    )
    .await;
    assert!(
        m.stdout_text()
            .contains("shared: another writer replaced the object"),
        "the log names the file and the conflict: {}",
        m.stdout_text()
    );
    assert!(
        garage.get_object("contended", "shared").await == theirs,
        "closing does not commit over it either"
    );
    // The way out the error names: rewriting the whole file commits it.
    std::fs::write(&path, b"rewritten whole").expect("rewrite");
    assert_eq!(m.stop_with_umount().code(), Some(0), "{}", m.stderr_text());
    assert_eq!(
        garage.get_object("contended", "shared").await,
        b"rewritten whole"
    );
}
