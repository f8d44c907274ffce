//! Reloading the configuration of a live mount (SIGHUP and `auto_sighup_interval`): backends are
//! added, removed and changed in place, and a broken or unsafe reload leaves the mount as it was.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::{Duration, Instant};

use crate::common::{Garage, MsfsMount, config_yaml_with, s3_backend_yaml};

/// Polls `check` until it holds, for at most 60 s (a generous bound for a loaded 2-core CI
/// machine); reloads are asynchronous to the signal.
fn eventually(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !check() {
        assert!(Instant::now() < deadline, "never happened: {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .map(|e| e.expect("entry").file_name().into_string().expect("utf-8"))
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

async fn garage_with_two_buckets() -> Garage {
    let garage = Garage::start();
    for bucket in ["first", "second"] {
        garage.create_bucket(bucket);
        garage
            .put_object(bucket, "file.txt", format!("in {bucket}\n").into_bytes())
            .await;
    }
    garage
}

const TOP: &str = "entry_attr_ttl: 100\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_adds_removes_and_changes_backends() {
    let garage = garage_with_two_buckets().await;
    let one = s3_backend_yaml("one", "first", "", &garage);
    let two = s3_backend_yaml("two", "second", "", &garage);
    let mount = MsfsMount::start(&config_yaml_with(TOP, std::slice::from_ref(&one)), "yaml")
        .expect("mount");
    let root = mount.path().to_path_buf();
    assert_eq!(names(&root), ["one"]);

    // Add a backend.
    std::fs::write(
        mount.config_path(),
        config_yaml_with(TOP, &[one.clone(), two.clone()]),
    )
    .expect("write");
    mount.signal(libc::SIGHUP);
    eventually("backend two appears", || names(&root) == ["one", "two"]);
    assert_eq!(
        std::fs::read_to_string(root.join("two/file.txt")).expect("read"),
        "in second\n"
    );

    // Change one in place: its files' mode follows.
    let two_440 = format!("{two}    file_perm: \"440\"\n");
    std::fs::write(
        mount.config_path(),
        config_yaml_with(TOP, &[one.clone(), two_440]),
    )
    .expect("write");
    mount.signal(libc::SIGHUP);
    eventually("file mode becomes 440", || {
        std::fs::metadata(root.join("two/file.txt"))
            .is_ok_and(|m| m.permissions().mode() & 0o777 == 0o440)
    });

    // Remove one.
    std::fs::write(
        mount.config_path(),
        config_yaml_with(TOP, std::slice::from_ref(&two)),
    )
    .expect("write");
    mount.signal(libc::SIGHUP);
    eventually("backend one disappears", || names(&root) == ["two"]);
    assert!(!root.join("one/file.txt").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broken_config_or_a_busy_backend_keeps_the_mount_as_it_was() {
    let garage = garage_with_two_buckets().await;
    let one = s3_backend_yaml("one", "first", "", &garage);
    let two = s3_backend_yaml("two", "second", "", &garage);
    let mount = MsfsMount::start(&config_yaml_with(TOP, &[one.clone(), two.clone()]), "yaml")
        .expect("mount");
    let root = mount.path().to_path_buf();

    // A config that does not validate is refused whole, with the file and key in the log.
    std::fs::write(
        mount.config_path(),
        config_yaml_with(
            TOP,
            &[one.clone(), format!("{two}    prefix: \"no-slash\"\n")],
        ),
    )
    .expect("write");
    mount.signal(libc::SIGHUP);
    eventually("the refusal is logged", || {
        mount.stdout_text().contains("reload refused")
    });
    assert!(
        mount.stdout_text().contains("prefix"),
        "{}",
        mount.stdout_text()
    );
    assert_eq!(names(&root), ["one", "two"]);
    assert_eq!(
        std::fs::read_to_string(root.join("two/file.txt")).expect("read"),
        "in second\n"
    );

    // Removing a backend with an open file is refused too.
    let open = std::fs::File::open(root.join("one/file.txt")).expect("open");
    std::fs::write(
        mount.config_path(),
        config_yaml_with(TOP, std::slice::from_ref(&two)),
    )
    .expect("write");
    mount.signal(libc::SIGHUP);
    eventually("the busy refusal is logged", || {
        mount.stdout_text().contains("open files")
    });
    assert_eq!(names(&root), ["one", "two"]);
    drop(open);

    // Once closed, the same reload goes through. The kernel sends the handle's RELEASE after
    // close(2) has returned, so a SIGHUP right after the close may still find the file open
    // (and be refused, logged like the one above): signal again until it is not.
    let mut signalled: Option<Instant> = None;
    eventually("backend one disappears", || {
        if signalled.is_none_or(|at| at.elapsed() > Duration::from_secs(2)) {
            mount.signal(libc::SIGHUP);
            signalled = Some(Instant::now());
        }
        names(&root) == ["two"]
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_sighup_interval_picks_up_changes_without_a_signal() {
    let garage = garage_with_two_buckets().await;
    let one = s3_backend_yaml("one", "first", "", &garage);
    let two = s3_backend_yaml("two", "second", "", &garage);
    let top = format!("{TOP}auto_sighup_interval: 1\n");
    let mount = MsfsMount::start(&config_yaml_with(&top, std::slice::from_ref(&one)), "yaml")
        .expect("mount");
    std::fs::write(mount.config_path(), config_yaml_with(&top, &[one, two])).expect("write");
    eventually("backend two appears", || {
        names(mount.path()) == ["one", "two"]
    });
}
