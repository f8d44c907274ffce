//! One PutObject per file for the common ways files are written (issue #21): a shell redirect
//! (which closes a dup'd descriptor before anything is written), a redirected external command,
//! `cp`, `tar x`, `rsync`, Python's `open`/`write`/`close` and `touch`, each with
//! `flush_on_close` off and on.
//!
//! PutObjects are counted by garage itself, after an unmount, when no commit can still be on
//! its way. Contents are read back through the mount and from the bucket; with
//! `flush_on_close: true` every object must already be in the bucket when the writer returns
//! (close-to-open consistency).

use std::io::Write;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use crate::common::{Garage, MsfsMount, config_yaml_with, pattern, s3_backend_yaml, wait_until};

/// A writable backend `data` over `bucket`.
fn mount(garage: &Garage, bucket: &str, flush_on_close: bool) -> MsfsMount {
    let backend = format!(
        "{}    readonly: false\n    flush_on_close: {flush_on_close}\n",
        s3_backend_yaml("data", bucket, "", garage)
    );
    MsfsMount::start(&config_yaml_with("", &[backend]), "yaml").expect("mount")
}

fn run(cmd: &mut Command) {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("spawn {cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `bash -c script DIR`: the script finds the directory in `$0`.
fn bash(script: &str, dir: &Path) {
    run(Command::new("bash").arg("-c").arg(script).arg(dir));
}

/// Files of mixed sizes, all below the multipart threshold: (name, bytes).
fn sample_files(prefix: &str, count: usize) -> Vec<(String, Vec<u8>)> {
    (0..count)
        .map(|i| {
            let body = match i % 4 {
                0 => Vec::new(),
                1 => format!("line {i}\n").into_bytes(),
                2 => pattern(4096, i as u64),
                _ => pattern(100_000 + i * 37, i as u64),
            };
            (format!("{prefix}{i:02}"), body)
        })
        .collect()
}

/// Writes `files` into a local directory (the source of `cp`, `tar` and `rsync`).
fn local_tree(files: &[(String, Vec<u8>)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    for (name, body) in files {
        std::fs::write(dir.path().join(name), body).expect("write source file");
    }
    dir
}

/// Mounts `bucket` with each `flush_on_close` setting (a bucket of its own for each), lets
/// `write` put `files` into the backend's directory, and checks that each file cost exactly
/// one PutObject and reads back as written. `before` runs against the bucket before the mount
/// (objects that already exist).
async fn one_put_each(
    garage: &Garage,
    name: &str,
    files: &[(String, Vec<u8>)],
    before: impl AsyncFn(&Garage, &str),
    write: impl Fn(&Path),
) {
    for flush_on_close in [false, true] {
        let bucket = format!("{name}-{}", if flush_on_close { "flush" } else { "bg" });
        garage.create_bucket(&bucket);
        before(garage, &bucket).await;
        let mut m = mount(garage, &bucket, flush_on_close);
        let dir = m.path().join("data");
        let puts = garage.s3_requests("PutObject");
        write(&dir);
        if flush_on_close {
            // The last close returned: the store has every file.
            for (key, body) in files {
                let stored = garage.try_get_object(&bucket, key).await;
                assert!(
                    stored.as_deref() == Some(body.as_slice()),
                    "{name}, flush_on_close: {key} is not in the store when the writer returns"
                );
            }
        }
        for (key, body) in files {
            let got = std::fs::read(dir.join(key)).unwrap_or_else(|e| panic!("read {key}: {e}"));
            assert!(got == *body, "{name}: {key} reads back other bytes");
        }
        assert_eq!(m.stop_with_umount().code(), Some(0), "{}", m.stderr_text());
        assert_eq!(
            garage.s3_requests("PutObject") - puts,
            files.len() as u64,
            "{name}, flush_on_close: {flush_on_close}: one PutObject per file"
        );
        for (key, body) in files {
            assert!(
                garage.get_object(&bucket, key).await == *body,
                "{name}, flush_on_close: {flush_on_close}: {key} holds other bytes in the store"
            );
        }
    }
}

async fn nothing_before(_: &Garage, _: &str) {}

/// bash opens the file, dup2s it to stdout and closes the first descriptor before `echo`
/// writes: that close must not commit an empty object that the last close replaces.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shell_redirect_costs_one_put_per_file() {
    let garage = Garage::start();
    let files: Vec<_> = (1..=40)
        .map(|i| (format!("s{i}"), format!("file {i}\n").into_bytes()))
        .collect();
    one_put_each(&garage, "redirect", &files, nothing_before, |dir| {
        bash(
            "for i in $(seq 40); do echo \"file $i\" > \"$0/s$i\"; done",
            dir,
        )
    })
    .await;
}

/// The redirect of an external command: the forked shell opens, dup2s and closes, then the
/// command writes and its exit closes the last descriptor.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redirected_external_command_costs_one_put_per_file() {
    let garage = Garage::start();
    let files: Vec<_> = (1..=20)
        .map(|i| (format!("e{i}"), format!("external {i}\n").into_bytes()))
        .collect();
    one_put_each(&garage, "external", &files, nothing_before, |dir| {
        bash(
            "for i in $(seq 20); do /bin/echo \"external $i\" > \"$0/e$i\"; done",
            dir,
        )
    })
    .await;
}

/// A redirect over an existing object truncates it at open; the new content is the only PUT.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shell_redirect_over_existing_files_costs_one_put_per_file() {
    let garage = Garage::start();
    let files: Vec<_> = (1..=20)
        .map(|i| (format!("o{i}"), format!("new {i}\n").into_bytes()))
        .collect();
    let existing = async |garage: &Garage, bucket: &str| {
        for i in 1..=20 {
            let old = format!("old content of o{i}, longer than the new\n");
            garage.put_object(bucket, &format!("o{i}"), old).await;
        }
    };
    one_put_each(&garage, "overwrite", &files, existing, |dir| {
        bash(
            "for i in $(seq 20); do echo \"new $i\" > \"$0/o$i\"; done",
            dir,
        )
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cp_costs_one_put_per_file() {
    let garage = Garage::start();
    let files = sample_files("c", 20);
    let source = local_tree(&files);
    one_put_each(&garage, "cp", &files, nothing_before, |dir| {
        let mut cp = Command::new("cp");
        cp.arg("-t").arg(dir);
        for (name, _) in &files {
            cp.arg(source.path().join(name));
        }
        run(&mut cp);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tar_x_costs_one_put_per_file() {
    let garage = Garage::start();
    let files = sample_files("t", 20);
    let source = local_tree(&files);
    let archive = tempfile::NamedTempFile::new().expect("temp archive");
    // Files only: a directory entry would add its marker object.
    let mut tar = Command::new("tar");
    tar.arg("-cf")
        .arg(archive.path())
        .arg("-C")
        .arg(source.path());
    tar.args(files.iter().map(|(name, _)| name));
    run(&mut tar);
    one_put_each(&garage, "tar", &files, nothing_before, |dir| {
        run(Command::new("tar")
            .arg("-xf")
            .arg(archive.path())
            .arg("-C")
            .arg(dir));
    })
    .await;
}

/// rsync writes each file under a temporary name and renames it: one PUT, then a server-side
/// copy (CopyObject) to the final name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rsync_costs_one_put_per_file() {
    if Command::new("rsync").arg("--version").output().is_err() {
        eprintln!("skipped: rsync is not installed (scripts/install-test-deps.sh installs it)");
        return;
    }
    let garage = Garage::start();
    let files = sample_files("r", 20);
    let source = local_tree(&files);
    one_put_each(&garage, "rsync", &files, nothing_before, |dir| {
        run(Command::new("rsync")
            .arg("-a")
            .arg(format!("{}/", source.path().display()))
            .arg(format!("{}/", dir.display())));
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_open_write_close_costs_one_put_per_file() {
    let garage = Garage::start();
    let files: Vec<_> = (0..20)
        .map(|i| {
            (
                format!("p{i:02}"),
                format!("python {i}\n").repeat(i + 1).into_bytes(),
            )
        })
        .collect();
    let script = "import sys\n\
                  d = sys.argv[1]\n\
                  for i in range(20):\n\
                  \x20   with open(f'{d}/p{i:02}', 'w') as f:\n\
                  \x20       f.write(f'python {i}\\n' * (i + 1))\n";
    one_put_each(&garage, "python", &files, nothing_before, |dir| {
        run(Command::new("python3").arg("-c").arg(script).arg(dir));
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn touch_costs_one_put_per_file() {
    let garage = Garage::start();
    let files: Vec<_> = (0..20).map(|i| (format!("n{i:02}"), Vec::new())).collect();
    one_put_each(&garage, "touch", &files, nothing_before, |dir| {
        let mut touch = Command::new("touch");
        touch.args(files.iter().map(|(name, _)| dir.join(name)));
        run(&mut touch);
    })
    .await;
}

/// Without `flush_on_close`, a close while a duplicate of the descriptor stays open only
/// schedules the commit: it lands once the file has been idle for a moment, and the last close
/// then has nothing left to send.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_closed_while_a_duplicate_stays_open_is_committed_once_idle() {
    let garage = Garage::start();
    garage.create_bucket("idle");
    let mut m = mount(&garage, "idle", false);
    let puts = garage.s3_requests("PutObject");
    let mut file = std::fs::File::create(m.path().join("data/kept-open")).expect("create");
    file.write_all(b"written, then closed once\n")
        .expect("write");
    let duplicate = file.try_clone().expect("dup");
    drop(file);
    wait_until(
        "the file reached the store while a duplicate descriptor is still open",
        Duration::from_secs(60),
        async || {
            garage.try_get_object("idle", "kept-open").await.as_deref()
                == Some(b"written, then closed once\n".as_slice())
        },
    )
    .await;
    drop(duplicate);
    assert_eq!(m.stop_with_umount().code(), Some(0), "{}", m.stderr_text());
    assert_eq!(garage.s3_requests("PutObject") - puts, 1, "one PutObject");
}

/// With `flush_on_close`, bytes written before a close are in the store when that close
/// returns, even while a duplicate of the descriptor stays open: only a descriptor nothing was
/// written through leaves its commit to another one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_flush_on_close_a_close_after_writing_commits_though_a_duplicate_stays_open() {
    let garage = Garage::start();
    garage.create_bucket("written-dup");
    let mut m = mount(&garage, "written-dup", true);
    let puts = garage.s3_requests("PutObject");
    let mut file = std::fs::File::create(m.path().join("data/f")).expect("create");
    file.write_all(b"before the first close\n").expect("write");
    let mut duplicate = file.try_clone().expect("dup");
    drop(file);
    assert_eq!(
        garage.try_get_object("written-dup", "f").await.as_deref(),
        Some(b"before the first close\n".as_slice()),
        "committed when the first close returned"
    );
    duplicate.write_all(b"after it\n").expect("write");
    drop(duplicate);
    assert_eq!(
        garage.get_object("written-dup", "f").await,
        b"before the first close\nafter it\n"
    );
    assert_eq!(m.stop_with_umount().code(), Some(0), "{}", m.stderr_text());
    assert_eq!(
        garage.s3_requests("PutObject") - puts,
        2,
        "one PUT per close"
    );
}
