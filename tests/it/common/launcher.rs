//! A launcher for server processes, started before the test opens any file in a FUSE mount, so
//! that the test can start a mount's next server while its own threads hold files open there.
//!
//! Starting a process from the test itself would not work then: the child `exec`s, `exec` closes
//! the close-on-exec descriptors it inherited (every file the test's threads hold open in the
//! mount), and each of those closes is a FUSE FLUSH, which waits for a server — the very process
//! being started. (`HoldingApp` in `app.rs` solves the same problem the other way round: there
//! the files are held by a process of their own.) The launcher is a small Python process that
//! holds nothing in any mount: asked over its stdin, it starts a process, SIGKILLs or SIGTERMs
//! one it started and reaps it, or says whether one has exited.

use std::ffi::OsString;
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::Duration;

use serde_json::{Value, json};

/// One request per line of JSON on stdin, one answer per line on stdout. On end of input it
/// stops what it still runs (SIGTERM, then SIGKILL after 10 s) and exits.
const LAUNCHER: &str = r#"
import json, os, subprocess, sys
children = {}
def stop(p, secs):
    p.terminate()
    try:
        p.wait(timeout=secs)
        return False
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()
        return True
for line in sys.stdin:
    req = json.loads(line)
    op = req["op"]
    if op == "start":
        env = dict(os.environ)
        env.update(req["env"])
        with open(req["log"], "ab") as log:
            p = subprocess.Popen(req["argv"], env=env, stdin=subprocess.DEVNULL,
                                 stdout=log, stderr=log)
        children[p.pid] = p
        answer = {"pid": p.pid}
    elif op == "kill":
        p = children.pop(req["pid"])
        p.kill()
        answer = {"status": p.wait()}
    elif op == "term":
        p = children.pop(req["pid"])
        killed = stop(p, req["secs"])
        answer = {"status": p.returncode, "killed": killed}
    elif op == "poll":
        p = children.get(req["pid"])
        answer = {"status": p.poll() if p else -1}
    else:
        answer = {"error": "unknown op " + op}
    print(json.dumps(answer), flush=True)
for p in children.values():
    stop(p, 10)
"#;

/// The running launcher; see the module docs. Dropping it stops what it still runs.
pub struct Launcher {
    child: Child,
    /// `None` once dropping has closed it.
    requests: Option<ChildStdin>,
    answers: BufReader<ChildStdout>,
}

impl Launcher {
    /// Starts the launcher. Call it before anything opens a file in the mounts whose servers
    /// it will start.
    pub fn start() -> Launcher {
        let mut child = Command::new("python3")
            .arg("-c")
            .arg(LAUNCHER)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("spawn the launcher (python3)");
        let requests = child.stdin.take().expect("the launcher's stdin");
        let answers = BufReader::new(child.stdout.take().expect("the launcher's stdout"));
        Launcher {
            child,
            requests: Some(requests),
            answers,
        }
    }

    /// Starts `program args…` with `env` added to the launcher's environment, stdin from
    /// `/dev/null`, stdout and stderr appended to `log`; returns its pid.
    pub fn spawn(
        &mut self,
        program: &Path,
        args: &[OsString],
        env: &[(String, String)],
        log: &Path,
    ) -> u32 {
        let argv: Vec<String> = std::iter::once(program.as_os_str())
            .chain(args.iter().map(|a| a.as_os_str()))
            .map(|a| a.to_str().expect("UTF-8 arguments").to_string())
            .collect();
        let env: serde_json::Map<String, Value> = env
            .iter()
            .map(|(k, v)| (k.clone(), Value::String(v.clone())))
            .collect();
        let log = log.to_str().expect("a UTF-8 log path");
        let answer = self.ask(json!({"op": "start", "argv": argv, "env": env, "log": log}));
        answer["pid"]
            .as_u64()
            .unwrap_or_else(|| panic!("the launcher did not start {argv:?}: {answer}"))
            as u32
    }

    /// SIGKILLs `pid` (started here) and returns once it is reaped.
    pub fn kill(&mut self, pid: u32) {
        self.ask(json!({"op": "kill", "pid": pid}));
    }

    /// SIGTERMs `pid` (started here) and waits up to `grace` for it to exit, then SIGKILLs it;
    /// returns whether it exited within `grace`.
    pub fn terminate(&mut self, pid: u32, grace: Duration) -> bool {
        let answer = self.ask(json!({"op": "term", "pid": pid, "secs": grace.as_secs_f64()}));
        answer["killed"] == Value::Bool(false)
    }

    /// The exit status of `pid` (negative: the signal that ended it) if it has exited.
    pub fn exited(&mut self, pid: u32) -> Option<i64> {
        self.ask(json!({"op": "poll", "pid": pid}))["status"].as_i64()
    }

    fn ask(&mut self, request: Value) -> Value {
        let requests = self.requests.as_mut().expect("the launcher's stdin");
        writeln!(requests, "{request}")
            .and_then(|()| requests.flush())
            .expect("write to the launcher");
        let mut line = String::new();
        self.answers
            .read_line(&mut line)
            .expect("read the launcher's answer");
        serde_json::from_str(&line)
            .unwrap_or_else(|e| panic!("the launcher's answer {line:?} to {request}: {e}"))
    }
}

impl Drop for Launcher {
    fn drop(&mut self) {
        // End of input: the launcher stops what it still runs and exits.
        drop(self.requests.take());
        let _ = self.child.wait();
    }
}
