//! Who may use a mount, seen by a user who is not root (`nobody`, uid and gid 65534): without
//! `allow_other` nobody else gets in at all; with it, the kernel checks every access against the
//! owner, group and modes the mount shows (msfs always mounts with `default_permissions`), so
//! the `uid`, `gid`, `dir_perm` and `file_perm` keys decide who may read and write what.

use std::ffi::OsStr;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::common::{Garage, MsfsMount, config_yaml_with, s3_backend_yaml, wait_until};

/// `nobody`: present on every Debian system; no account is created for the test.
const NOBODY: u32 = 65534;
/// strerror(EACCES) in the C locale.
const EACCES_TEXT: &str = "Permission denied";
/// How long a background commit may take to land.
const LANDING: Duration = Duration::from_secs(60);

/// Runs `program args…` as `nobody` (uid and gid 65534, no supplementary groups: std drops
/// root's groups when it sets the uid) in the C locale. `Ok(stdout)`, or `Err(stderr)`.
fn as_nobody<S: AsRef<OsStr>>(program: &str, args: &[S]) -> Result<String, String> {
    let out = Command::new(program)
        .args(args)
        .uid(NOBODY)
        .gid(NOBODY)
        .env("LC_ALL", "C")
        // The test's own working directory may be closed to nobody.
        .current_dir("/")
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("run {program} as nobody: {e}"));
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

/// Writes `content` to `path` as nobody, through the shell's `>` (open with O_CREAT|O_TRUNC).
fn write_as_nobody(path: &Path, content: &str) -> Result<String, String> {
    let script = r#"printf %s "$2" > "$1""#;
    as_nobody(
        "sh",
        &[
            OsStr::new("-c"),
            OsStr::new(script),
            OsStr::new("sh"),
            path.as_os_str(),
            OsStr::new(content),
        ],
    )
}

#[track_caller]
fn assert_denied(result: Result<String, String>, what: &str) {
    match result {
        Ok(out) => panic!("{what}: allowed, expected EACCES (stdout: {out})"),
        Err(stderr) => assert!(
            stderr.contains(EACCES_TEXT),
            "{what}: expected EACCES, got: {stderr}"
        ),
    }
}

#[track_caller]
fn assert_allowed(result: Result<String, String>, what: &str) -> String {
    result.unwrap_or_else(|stderr| panic!("{what}: refused: {stderr}"))
}

/// The mount fixture keeps its mountpoint in a private (0700) temporary directory; open that
/// directory, so that what is refused below is refused by the mount, not on the way to it.
fn open_the_way_to(m: &MsfsMount) {
    let parent = m.path().parent().expect("the mountpoint has a parent");
    std::fs::set_permissions(parent, std::fs::Permissions::from_mode(0o755))
        .expect("open the mountpoint's parent");
    assert_allowed(
        as_nobody("stat", &[parent]),
        "stat of the mountpoint's parent as nobody",
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_allow_other_another_user_cannot_even_stat_the_mount() {
    let garage = Garage::start();
    garage.create_bucket("perm-closed");
    garage.put_object("perm-closed", "f.txt", "root only").await;
    let config = config_yaml_with(
        "allow_other: false\n",
        &[s3_backend_yaml("data", "perm-closed", "", &garage)],
    );
    let m = MsfsMount::start(&config, "yaml").expect("mount");
    open_the_way_to(&m);

    assert_denied(as_nobody("stat", &[m.path()]), "stat of the mount root");
    assert_denied(
        as_nobody("ls", &[m.path().join("data")]),
        "listing a backend",
    );
    assert_denied(
        as_nobody("cat", &[m.path().join("data/f.txt")]),
        "reading a file, even one whose mode allows everyone",
    );
    // The user who mounted (root here) is served as usual.
    assert_eq!(
        std::fs::read_to_string(m.path().join("data/f.txt")).expect("read as root"),
        "root only"
    );
    assert_eq!(
        std::fs::metadata(m.path().join("data/f.txt"))
            .expect("stat as root")
            .mode()
            & 0o777,
        0o444,
        "the file's mode would let anyone read: allow_other alone decides"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_allow_other_the_kernel_checks_owner_group_and_modes_of_each_backend() {
    let garage = Garage::start();
    garage.create_bucket("perm-open");
    for prefix in ["public", "private", "shared", "group"] {
        garage
            .put_object(
                "perm-open",
                &format!("{prefix}/f.txt"),
                format!("{prefix} data"),
            )
            .await;
    }
    let backend = |name: &str, keys: &str| {
        format!(
            "{}{keys}",
            s3_backend_yaml(name, "perm-open", &format!("{name}/"), &garage)
        )
    };
    let config = config_yaml_with(
        "allow_other: true\n",
        &[
            // Root's, readable by all, writable by root only.
            backend(
                "public",
                "    readonly: false\n    uid: 0\n    gid: 0\n    dir_perm: \"755\"\n    file_perm: \"644\"\n",
            ),
            // Root's alone.
            backend(
                "private",
                "    readonly: false\n    uid: 0\n    gid: 0\n    dir_perm: \"700\"\n    file_perm: \"600\"\n",
            ),
            // Owned by nobody.
            backend(
                "shared",
                "    readonly: false\n    uid: 65534\n    gid: 65534\n    dir_perm: \"755\"\n    file_perm: \"644\"\n",
            ),
            // Readable through the group only.
            backend(
                "group",
                "    uid: 0\n    gid: 65534\n    dir_perm: \"750\"\n    file_perm: \"640\"\n",
            ),
        ],
    );
    let m = MsfsMount::start(&config, "yaml").expect("mount");
    open_the_way_to(&m);
    let root = m.path();

    let meta = std::fs::metadata(root.join("public/f.txt")).expect("stat");
    assert_eq!(
        (meta.uid(), meta.gid(), meta.mode() & 0o777),
        (0, 0, 0o644),
        "owner and mode come from the backend's keys"
    );

    // Modes that allow it: nobody reads and lists.
    assert_eq!(
        assert_allowed(
            as_nobody("cat", &[root.join("public/f.txt")]),
            "read public"
        ),
        "public data"
    );
    assert_eq!(
        assert_allowed(as_nobody("ls", &[root.join("public")]), "list public"),
        "f.txt\n"
    );
    // Modes that forbid it: refused by the kernel before msfs sees a write.
    assert_denied(
        write_as_nobody(&root.join("public/f.txt"), "overwritten"),
        "writing a 0644 file of root's",
    );
    assert_denied(
        write_as_nobody(&root.join("public/new.txt"), "new"),
        "creating a file in a 0755 directory of root's",
    );
    assert_denied(
        as_nobody(
            "rm",
            &["-f".as_ref(), root.join("public/f.txt").as_os_str()],
        ),
        "removing a file from a 0755 directory of root's",
    );
    assert_denied(
        as_nobody("cat", &[root.join("private/f.txt")]),
        "reading a 0600 file of root's",
    );
    assert_denied(
        as_nobody("ls", &[root.join("private")]),
        "listing a 0700 directory of root's",
    );
    // The group's bits apply to nobody's group.
    assert_eq!(
        assert_allowed(as_nobody("cat", &[root.join("group/f.txt")]), "read group"),
        "group data"
    );
    // A backend owned by nobody: nobody writes, and the write lands.
    assert_allowed(
        write_as_nobody(&root.join("shared/by-nobody.txt"), "from nobody"),
        "creating a file in nobody's directory",
    );
    assert_eq!(
        assert_allowed(
            as_nobody("cat", &[root.join("shared/by-nobody.txt")]),
            "read back"
        ),
        "from nobody"
    );

    // Root passes the mode checks, as on any filesystem.
    std::fs::write(root.join("public/f.txt"), "root wrote this").expect("root writes");
    assert_eq!(
        std::fs::read_to_string(root.join("private/f.txt")).expect("root reads"),
        "private data"
    );

    wait_until("both writes landed", LANDING, async || {
        garage
            .try_get_object("perm-open", "shared/by-nobody.txt")
            .await
            .as_deref()
            == Some(b"from nobody".as_slice())
            && garage
                .try_get_object("perm-open", "public/f.txt")
                .await
                .as_deref()
                == Some(b"root wrote this".as_slice())
    })
    .await;
    // The refused attempts changed nothing.
    assert_eq!(
        garage.list_keys("perm-open", "public/").await,
        ["public/f.txt"]
    );
}
