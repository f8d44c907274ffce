//! `fuse_passthrough: true` (issue #20): a read-only open of an object every line of which is in
//! the line cache's per-object file is answered with that file, and the kernel reads it itself —
//! no FUSE READ reaches msfs, no GET reaches the store — while every other open of the same
//! name keeps working beside it (an `O_DIRECT` reader shares the file; a writer gets a new
//! inode), the lent lines survive a cache under pressure, and a replaced object is read new.
//!
//! Passthrough is seen from outside: `msfs_fuse_passthrough_opens_total` counts the opens
//! answered with a backing file, `msfs_fuse_request_seconds_count{op="read"}` the READs msfs
//! served, garage's own metrics the GETs.

use std::io::{Read, Seek, SeekFrom};
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::Duration;

use crate::common::app::md5_hex;
use crate::common::{
    Garage, MsfsMount, config_yaml_with, free_port, http_get, pattern, read_direct,
    s3_backend_yaml, wait_until,
};

const MIB: usize = 1 << 20;

/// A writable backend `data` over `bucket`, with per-object cache files of `lines` 1 MiB lines,
/// passthrough on, entries trusted for half a second and a metrics endpoint on `port`.
fn mount(garage: &Garage, bucket: &str, lines: u32, port: u16) -> MsfsMount {
    let top = format!(
        "fuse_passthrough: true\nendpoint: http://127.0.0.1:{port}\n\
         cache_storage: per-inode-file\ncache_line_size: {MIB}\ncache_lines: {lines}\n\
         cache_lines_to_prefetch: 4\nentry_attr_ttl: 500\n"
    );
    let backend = format!(
        "{}    readonly: false\n",
        s3_backend_yaml("data", bucket, "", garage)
    );
    MsfsMount::start(&config_yaml_with(&top, &[backend]), "yaml").expect("mount")
}

/// The value of the series `series` (name and labels) in the mount's metrics, 0 if absent.
fn metric(port: u16, series: &str) -> u64 {
    let (status, text) = http_get(port, "/metrics").expect("scrape /metrics");
    assert_eq!(status, 200, "{text}");
    text.lines()
        .find_map(|line| line.strip_prefix(series)?.strip_prefix(' '))
        .map_or(0, |v| v.trim().parse::<f64>().expect("a number") as u64)
}

fn passthrough_opens(port: u16) -> u64 {
    metric(port, "msfs_fuse_passthrough_opens_total")
}

fn reads_served(port: u16) -> u64 {
    metric(port, "msfs_fuse_request_seconds_count{op=\"read\"}")
}

/// The whole file, through the page cache (buffered reads: a passthrough open reads the
/// cache file's pages).
fn read_buffered(path: &Path) -> Vec<u8> {
    std::fs::read(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
}

fn open_buffered(path: &Path) -> std::fs::File {
    std::fs::File::open(path).unwrap_or_else(|e| panic!("open {}: {e}", path.display()))
}

/// Opens and closes `path` until an open is lent, and returns the count of lent opens then. A
/// read returns once its bytes are in, and its line is marked complete just after: an open in
/// between is (rightly) not lent.
async fn until_lent(path: &Path, port: u16) -> u64 {
    let before = passthrough_opens(port);
    wait_until(
        "an open is answered with the cache file",
        Duration::from_secs(10),
        async || {
            drop(open_buffered(path));
            passthrough_opens(port) > before
        },
    )
    .await;
    passthrough_opens(port)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wholly_cached_object_is_read_by_the_kernel_from_its_cache_file() {
    let garage = Garage::start();
    garage.create_bucket("lend");
    let body = pattern(3 * MIB + 12_345, 11);
    garage.put_object("lend", "obj", body.clone()).await;
    let port = free_port();
    let mut m = mount(&garage, "lend", 64, port);
    let path = m.path().join("data/obj");

    // The first open finds nothing cached: it is read through msfs, which fills the cache.
    assert!(read_buffered(&path) == body, "first read differs");
    assert_eq!(
        passthrough_opens(port),
        0,
        "nothing was cached at the first open"
    );
    let (gets, reads) = (garage.s3_requests("GetObject"), reads_served(port));
    assert!(reads > 0, "the first read went through msfs");

    // Now every line is cached: two opens share one backing file, and neither sends a READ.
    let lent = until_lent(&path, port).await;
    let mut first = open_buffered(&path);
    let mut second = open_buffered(&path);
    assert_eq!(passthrough_opens(port), lent + 2);
    let mut got = Vec::new();
    first.read_to_end(&mut got).expect("read first");
    assert!(got == body, "passthrough bytes differ");
    second.seek(SeekFrom::Start(MIB as u64 + 7)).expect("seek");
    let mut part = vec![0u8; 100_000];
    second.read_exact(&mut part).expect("read second");
    assert!(
        part[..] == body[MIB + 7..MIB + 7 + 100_000],
        "offset read differs"
    );

    // Beside them, an O_DIRECT open shares the cache file too (the kernel allows nothing else
    // beside a passthrough open): the kernel reads it with direct I/O, the same bytes.
    assert!(
        read_direct(&path) == body,
        "direct read beside passthrough differs"
    );
    assert_eq!(passthrough_opens(port), lent + 3);
    let mut again = Vec::new();
    first.seek(SeekFrom::Start(0)).expect("rewind");
    first.read_to_end(&mut again).expect("read again");
    assert!(again == body);
    drop((first, second));
    assert_eq!(reads_served(port), reads, "passthrough opens sent READs");
    assert_eq!(
        garage.s3_requests("GetObject"),
        gets,
        "a cached object was fetched again"
    );
    assert_eq!(m.stop_with_umount().code(), Some(0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_beside_a_passthrough_reader_lands_and_the_reader_keeps_its_version() {
    let garage = Garage::start();
    garage.create_bucket("rewrite");
    let old = pattern(2 * MIB + 5, 1);
    let new = pattern(MIB + 99, 2);
    garage.put_object("rewrite", "f", old.clone()).await;
    let port = free_port();
    let mut m = mount(&garage, "rewrite", 64, port);
    let path = m.path().join("data/f");
    assert!(read_buffered(&path) == old);
    let lent = until_lent(&path, port).await;
    let mut reader = open_buffered(&path);
    assert_eq!(passthrough_opens(port), lent + 1);
    // A writer of the same name while the kernel reads it from a backing file: no open but a
    // passthrough one may join that inode, so msfs gives the name a new inode and answers
    // ESTALE, and the kernel looks the name up again and opens the new one.
    let ino = std::fs::metadata(&path).expect("stat").ino();
    std::fs::write(&path, &new).expect("rewrite beside a passthrough reader");
    assert_ne!(
        std::fs::metadata(&path).expect("stat").ino(),
        ino,
        "a new inode"
    );
    wait_until(
        "the rewrite is committed",
        Duration::from_secs(60),
        async || garage.try_get_object("rewrite", "f").await.as_deref() == Some(&new[..]),
    )
    .await;
    // The open reader stays on the version it opened (as a handle through msfs is pinned to
    // its ETag), its lines kept in the cache however the object changed.
    let mut got = Vec::new();
    reader.read_to_end(&mut got).expect("read the old version");
    assert!(got == old, "the passthrough reader saw other bytes");
    drop(reader);
    // Once it is closed, opens see the new object, first through msfs, then from the cache.
    assert!(
        read_buffered(&path) == new,
        "the new version after the rewrite"
    );
    until_lent(&path, port).await;
    assert!(
        read_buffered(&path) == new,
        "the new version, from its cache file"
    );
    assert_eq!(m.stop_with_umount().code(), Some(0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lent_lines_outlast_a_cache_under_pressure_and_a_replaced_object_reads_new() {
    let garage = Garage::start();
    garage.create_bucket("pressure");
    let lent = pattern(6 * MIB + 3, 5);
    garage.put_object("pressure", "lent", lent.clone()).await;
    let others: Vec<Vec<u8>> = (0..3)
        .map(|i| pattern(10 * MIB + i, 20 + i as u64))
        .collect();
    for (i, body) in others.iter().enumerate() {
        garage
            .put_object("pressure", &format!("other{i}"), body.clone())
            .await;
    }
    let port = free_port();
    // 16 lines: the 7 lines lent are under half of them, and 30 MiB of other reads turn the
    // other 9 over several times.
    let mut m = mount(&garage, "pressure", 16, port);
    let path = m.path().join("data/lent");
    assert!(read_buffered(&path) == lent);
    let count = until_lent(&path, port).await;
    let mut reader = open_buffered(&path);
    assert_eq!(passthrough_opens(port), count + 1);
    for (i, body) in others.iter().enumerate() {
        let other = m.path().join(format!("data/other{i}"));
        assert!(read_direct(&other) == *body, "other{i} differs");
    }
    // Drop what the kernel cached of the backing file, so the read goes to the file itself:
    // lines punched out under pressure would read back as zeros.
    drop_page_cache();
    let mut got = Vec::new();
    reader
        .read_to_end(&mut got)
        .expect("read after the pressure");
    assert!(got == lent, "a lent line was evicted under the kernel");

    // Replaced behind the mount while the reader still holds the lent file: once the entry's
    // half second is over, an open sees the new object (on a new inode: no other version may
    // join the lent one), and the reader keeps the version it opened.
    let replaced = pattern(MIB + 1, 9);
    garage
        .put_object("pressure", "lent", replaced.clone())
        .await;
    wait_until(
        "the mount sees the replaced object",
        Duration::from_secs(30),
        async || read_buffered(&path) == replaced,
    )
    .await;
    got.clear();
    reader.seek(SeekFrom::Start(0)).expect("rewind");
    reader.read_to_end(&mut got).expect("read the old version");
    assert!(got == lent, "the lent reader saw other bytes");
    drop(reader);
    assert!(read_buffered(&path) == replaced);
    assert_eq!(m.stop_with_umount().code(), Some(0));
}

/// `echo 3 > /proc/sys/vm/drop_caches` (root).
fn drop_page_cache() {
    nix_sync();
    std::fs::write("/proc/sys/vm/drop_caches", "3").expect("drop caches");
}

fn nix_sync() {
    // SAFETY: sync(2) takes no arguments and cannot fail.
    unsafe { libc::sync() };
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_open_beside_a_page_cached_reader_is_not_lent_until_that_reader_closes() {
    let garage = Garage::start();
    garage.create_bucket("modes");
    let body = pattern(2 * MIB + 17, 3);
    garage.put_object("modes", "f", body.clone()).await;
    let port = free_port();
    let mut m = mount(&garage, "modes", 64, port);
    let path = m.path().join("data/f");
    // The first open finds nothing cached, so it reads through msfs and the page cache; it
    // fills the line cache and stays open.
    let mut first = open_buffered(&path);
    let mut got = Vec::new();
    first.read_to_end(&mut got).expect("read through msfs");
    assert!(got == body);
    // Everything is cached now, but the kernel refuses a passthrough open (EIO in the
    // application) while a page-cached one is live: this one goes through msfs too.
    let mut second = open_buffered(&path);
    assert_eq!(
        passthrough_opens(port),
        0,
        "lent beside a page-cached reader"
    );
    got.clear();
    second.read_to_end(&mut got).expect("read beside");
    assert!(got == body);
    drop((first, second));
    // Both closed: an open is lent again.
    until_lent(&path, port).await;
    assert!(read_buffered(&path) == body);
    assert_eq!(m.stop_with_umount().code(), Some(0));
}

/// Holds `argv[1]` open; at each line on stdin: reads it whole from the start and prints its
/// MD5, or, at `close`, closes it and exits.
const HOLDER: &str = r#"
import hashlib, sys
f = open(sys.argv[1], "rb", buffering=0)
print("ready", flush=True)
for line in sys.stdin:
    if line.strip() == "close":
        f.close()
        print("closed", flush=True)
        break
    f.seek(0)
    data = b""
    while True:
        chunk = f.read(1 << 20)
        if not chunk:
            break
        data += chunk
    print(hashlib.md5(data).hexdigest(), flush=True)
"#;

struct Holder {
    child: std::process::Child,
    out: std::io::BufReader<std::process::ChildStdout>,
}

impl Holder {
    /// A process of its own holding `path` open (the test process must not hold files in a
    /// mount whose server it restarts: see `crate::common::app`).
    fn open(path: &Path) -> Holder {
        use std::process::{Command, Stdio};
        let mut child = Command::new("python3")
            .args(["-c", HOLDER])
            .arg(path)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("start python3");
        let out = std::io::BufReader::new(child.stdout.take().expect("stdout"));
        let mut holder = Holder { child, out };
        assert_eq!(holder.answer(), "ready");
        holder
    }

    fn say(&mut self, line: &str) -> String {
        use std::io::Write;
        let stdin = self.child.stdin.as_mut().expect("stdin");
        writeln!(stdin, "{line}").expect("tell the holder");
        self.answer()
    }

    fn answer(&mut self) -> String {
        use std::io::BufRead;
        let mut line = String::new();
        self.out.read_line(&mut line).expect("the holder's answer");
        line.trim().to_string()
    }
}

impl Drop for Holder {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lent_file_is_read_while_no_msfs_runs_and_a_successor_serves_the_name_beside_it() {
    let garage = Garage::start();
    garage.create_bucket("survive");
    let old = pattern(4 * MIB + 333, 8);
    let new = pattern(MIB + 4, 9);
    garage.put_object("survive", "f", old.clone()).await;
    let port = free_port();
    let mut m = mount(&garage, "survive", 64, port);
    let path = m.path().join("data/f");
    assert!(read_buffered(&path) == old);
    let lent = until_lent(&path, port).await;
    let mut holder = Holder::open(&path);
    assert_eq!(passthrough_opens(port), lent + 1);

    // Nobody serves the mount: the kernel reads the lent file all the same.
    m.stop_with_signal(libc::SIGKILL);
    assert_eq!(holder.say("read"), md5_hex(&old), "read with no server");

    // The successor knows the handle only from the journal, not its backing file: a writer of
    // the name gets a new inode, and the holder reads on the version it opened.
    m.take_over().expect("take over");
    std::fs::write(&path, &new).expect("write beside the inherited handle");
    wait_until(
        "the write is committed",
        Duration::from_secs(60),
        async || garage.try_get_object("survive", "f").await.as_deref() == Some(&new[..]),
    )
    .await;
    assert_eq!(holder.say("read"), md5_hex(&old), "read after the takeover");
    assert_eq!(holder.say("close"), "closed");
    drop(holder);
    assert!(read_buffered(&path) == new);
    assert_eq!(m.stop_with_umount().code(), Some(0));
}
