//! An application holding files open in a mount across a restart of its server: a process of
//! its own, as in a pod. (The test process itself must not hold files in a mount whose server
//! it restarts: starting the successor `exec`s, `exec` closes close-on-exec descriptors, and
//! each close is a FLUSH that waits for a server — the one being started.)
//!
//! It opens `big` and reads its head, starts listing `many/`, writes `new.bin` without closing
//! it, and prints `ready`; told to go on (after the restart), it reads on, lists on, writes on,
//! closes, and prints what it saw as JSON.

use std::io::{BufRead, BufReader, Read, Write};
use std::path::Path;
use std::process::{Child, ChildStdout, Command, ExitStatus, Stdio};

const APP: &str = r#"
import hashlib, json, os, sys
root, before, after = sys.argv[1], sys.argv[2], sys.argv[3]
big = open(os.path.join(root, "big"), "rb", buffering=0)
head = big.read(1 << 20)
listing = os.scandir(os.path.join(root, "many"))
names = [next(listing).name for _ in range(5)]
new = open(os.path.join(root, "new.bin"), "wb", buffering=0)
new.write(open(before, "rb").read())
print("ready", flush=True)
sys.stdin.readline()
rest = b""
while True:
    chunk = big.read(1 << 20)
    if not chunk:
        break
    rest += chunk
names += [entry.name for entry in listing]
new.write(open(after, "rb").read())
new.close()
print(json.dumps({"big_md5": hashlib.md5(head + rest).hexdigest(), "names": sorted(names)}), flush=True)
"#;

pub struct HoldingApp {
    child: Child,
    out: BufReader<ChildStdout>,
}

/// What the application saw.
#[derive(Debug, serde::Deserialize)]
pub struct Report {
    /// MD5 (hex) of `big` as read through the one descriptor, before and after.
    pub big_md5: String,
    /// Every name of `many/` listed through the one directory descriptor, sorted.
    pub names: Vec<String>,
}

impl HoldingApp {
    /// Starts it over `root`; it writes the bytes of file `before`, then those of `after`.
    pub fn start(root: &Path, before: &Path, after: &Path) -> HoldingApp {
        let mut child = Command::new("python3")
            .arg("-c")
            .arg(APP)
            .arg(root)
            .arg(before)
            .arg(after)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("spawn the application");
        let out = BufReader::new(child.stdout.take().expect("stdout"));
        HoldingApp { child, out }
    }

    /// Blocks until it holds its files (run under a hang guard).
    pub fn wait_ready(mut self) -> HoldingApp {
        let mut line = String::new();
        self.out
            .read_line(&mut line)
            .expect("read the application's ready");
        assert_eq!(line.trim(), "ready", "the application's first steps");
        self
    }

    /// Tells it to go on and blocks until it is done (run under a hang guard).
    pub fn go_on(mut self) -> (ExitStatus, Result<Report, String>) {
        let mut stdin = self.child.stdin.take().expect("stdin");
        stdin
            .write_all(b"go\n")
            .expect("tell the application to go on");
        drop(stdin);
        let mut text = String::new();
        let read = self.out.read_to_string(&mut text);
        let status = self.child.wait().expect("wait for the application");
        let report = read
            .map_err(|e| e.to_string())
            .and_then(|_| serde_json::from_str(&text).map_err(|e| format!("{e}: {text:?}")));
        (status, report)
    }
}

pub fn md5_hex(bytes: &[u8]) -> String {
    use md5::Digest;
    md5::Md5::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}
