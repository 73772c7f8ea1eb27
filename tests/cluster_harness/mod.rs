//! Loopback clusters of real `vkml-node` processes for the cluster_*.rs tests. Every wait is
//! bounded; every child is killed when its `Node` drops; ports are picked free on 127.0.0.1.
//! Times are read from the nodes' own log lines as they arrive (a reader thread stamps each
//! line), so "seen dead within 3 s" is measured from the event, not from a polling loop.

#![allow(dead_code)]

mod caps;

// Not every cluster test binary plans models.
#[allow(unused_imports)]
pub use caps::caps_for_three;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

pub use rustix::process::Signal;
use rustix::process::{Pid, kill_process};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The vkml-node binary cargo built with the tests.
pub const BIN: &str = env!("CARGO_BIN_EXE_vkml-node");

/// The vkml-node binary the harness starts: `VKML_NODE_BIN` where set (the soak staged on the
/// GPU machine, which has no cargo and no target folder), else the one cargo built.
pub fn bin() -> String {
    std::env::var("VKML_NODE_BIN").unwrap_or_else(|_| BIN.to_string())
}

/// How long a node may take to start on a loaded machine (it is not what is being measured).
pub const STARTUP: Duration = Duration::from_secs(30);

pub struct Cluster {
    pub dir: PathBuf,
    pub key: PathBuf,
}

static COUNTER: AtomicUsize = AtomicUsize::new(0);

impl Cluster {
    pub fn new(test: &str) -> Cluster {
        let dir = std::env::temp_dir().join(format!(
            "vkml-{test}-{}-{}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let key = dir.join("cluster.key");
        keygen(&key);
        Cluster { dir, key }
    }

    /// A node's default weight cache goes under the cluster's folder, never the user's (a
    /// --cache-dir among its flags still wins).
    /// Each node its own weight cache, and all of them one file of device figures, the one
    /// the tests' offline plans read (caps.rs): nodes measure their devices once per build
    /// and plan with the same figures as the tests.
    fn own_cache(&self, cmd: &mut Command, name: &str) {
        cmd.env(
            "XDG_CACHE_HOME",
            self.dir.join(format!("{name}-cache-home")),
        );
        cmd.arg("--probe-cache").arg(caps::probe_cache());
    }

    /// Starts `name` on a free port, joining through `seeds`.
    pub fn start(&self, name: &str, seeds: &[&Node]) -> Node {
        self.start_with(name, free_port(), seeds, &self.key, None)
    }

    /// Starts `name` on a free port with extra flags (say `--device-memory-limit N`).
    pub fn start_args(&self, name: &str, seeds: &[&Node], extra: &[String]) -> Node {
        let port = free_port();
        let addr = format!("127.0.0.1:{port}");
        let mut cmd = Command::new(bin());
        cmd.args(["--listen", &addr, "--name", name, "--device", "cpu"])
            .arg("--cluster-key")
            .arg(&self.key)
            .args(extra)
            .env("RUST_LOG", node_log());
        self.own_cache(&mut cmd, name);
        for s in seeds {
            cmd.args(["--join", &s.addr]);
        }
        spawn(cmd, name, port)
    }

    /// Starts `name` on a free port with extra flags, a fault plan (VKML_FAULTS) and
    /// environment variables.
    pub fn start_opts(
        &self,
        name: &str,
        seeds: &[&Node],
        extra: &[String],
        faults: Option<&str>,
        env: &[(&str, &str)],
    ) -> Node {
        let port = free_port();
        let addr = format!("127.0.0.1:{port}");
        let mut cmd = Command::new(bin());
        cmd.args(["--listen", &addr, "--name", name]);
        // The CPU unless the extra flags name the devices.
        if !extra.iter().any(|a| a == "--device") {
            cmd.args(["--device", "cpu"]);
        }
        cmd.arg("--cluster-key")
            .arg(&self.key)
            .args(extra)
            .env("RUST_LOG", node_log());
        self.own_cache(&mut cmd, name);
        for s in seeds {
            cmd.args(["--join", &s.addr]);
        }
        if let Some(f) = faults {
            let path = self.dir.join(format!("{name}-faults.toml"));
            std::fs::write(&path, f).unwrap();
            cmd.env("VKML_FAULTS", path);
        }
        for (k, v) in env {
            cmd.env(k, v);
        }
        spawn(cmd, name, port)
    }

    pub fn start_with(
        &self,
        name: &str,
        port: u16,
        seeds: &[&Node],
        key: &Path,
        faults: Option<&str>,
    ) -> Node {
        let addr = format!("127.0.0.1:{port}");
        let mut cmd = Command::new(bin());
        cmd.args(["--listen", &addr, "--name", name, "--device", "cpu"])
            .arg("--cluster-key")
            .arg(key)
            .env("RUST_LOG", node_log());
        self.own_cache(&mut cmd, name);
        for s in seeds {
            cmd.args(["--join", &s.addr]);
        }
        if let Some(f) = faults {
            let path = self.dir.join(format!("{name}-faults.toml"));
            std::fs::write(&path, f).unwrap();
            cmd.env("VKML_FAULTS", path);
        }
        spawn(cmd, name, port)
    }
}

/// Starts a prepared `vkml-node` command as node `name` (serving 127.0.0.1:`port`) and waits
/// until it serves.
pub fn spawn(mut cmd: Command, name: &str, port: u16) -> Node {
    let addr = format!("127.0.0.1:{port}");
    cmd.stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let mut child = cmd
        .spawn()
        .unwrap_or_else(|e| panic!("starting {}: {e}", bin()));
    let lines: Arc<Mutex<Vec<(Instant, String)>>> = Arc::default();
    let stderr = child.stderr.take().unwrap();
    let sink = lines.clone();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            sink.lock().unwrap().push((Instant::now(), line));
        }
    });
    let node = Node {
        name: name.to_string(),
        addr,
        port,
        child: Some(child),
        lines,
    };
    node.wait_line(|l| l.contains("listening on"), STARTUP)
        .unwrap_or_else(|| panic!("{name} did not start:\n{}", node.log()));
    node
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

pub fn keygen(path: &Path) {
    let out = Command::new(bin())
        .arg("keygen")
        .arg("--out")
        .arg(path)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

pub fn free_port() -> u16 {
    std::net::UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

pub struct Node {
    pub name: String,
    pub addr: String,
    pub port: u16,
    child: Option<Child>,
    lines: Arc<Mutex<Vec<(Instant, String)>>>,
}

impl Node {
    /// The process id while the node runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    pub fn log(&self) -> String {
        self.lines
            .lock()
            .unwrap()
            .iter()
            .map(|(_, l)| l.as_str())
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// When the first line matching `f` arrived (waiting up to `limit` for it).
    pub fn wait_line(&self, f: impl Fn(&str) -> bool, limit: Duration) -> Option<Instant> {
        let end = Instant::now() + limit;
        loop {
            if let Some((t, _)) = self.lines.lock().unwrap().iter().find(|(_, l)| f(l)) {
                return Some(*t);
            }
            if Instant::now() >= end {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// When this node logged `member` in `state` (after `since`), waiting up to `limit`.
    pub fn saw(
        &self,
        member: &str,
        state: &str,
        since: Instant,
        limit: Duration,
    ) -> Option<Instant> {
        let prefix = format!("member {member} at ");
        let suffix = format!(" is {state}");
        let end = Instant::now() + limit;
        loop {
            let hit = self
                .lines
                .lock()
                .unwrap()
                .iter()
                .find(|(t, l)| *t >= since && l.contains(&prefix) && l.ends_with(&suffix))
                .map(|(t, _)| *t);
            if hit.is_some() || Instant::now() >= end {
                return hit;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// SIGKILL, and reap the process. Panics when the process cannot be killed (it then would
    /// outlive the test and falsify what the test measures next).
    pub fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            // kill() fails only once the child has been reaped, which take() rules out.
            c.kill()
                .unwrap_or_else(|e| panic!("cannot kill node {}: {e}", self.name));
            c.wait()
                .unwrap_or_else(|e| panic!("cannot reap node {}: {e}", self.name));
        }
    }

    /// Sends `sig` to the node's process (SIGSTOP / SIGCONT for a frozen node).
    pub fn signal(&self, sig: Signal) {
        let c = self
            .child
            .as_ref()
            .unwrap_or_else(|| panic!("node {} is not running", self.name));
        signal(c, sig);
    }

    /// SIGTERM, then wait (bounded) for a clean exit. Panics when the signal cannot be sent:
    /// a test that meant to stop a node must not go on as if it had.
    pub fn terminate(&mut self) -> Option<std::process::ExitStatus> {
        let mut c = self.child.take()?;
        signal(&c, Signal::TERM);
        let end = Instant::now() + Duration::from_secs(10);
        while Instant::now() < end {
            if let Ok(Some(s)) = c.try_wait() {
                return Some(s);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = c.kill();
        let _ = c.wait();
        None
    }

    /// Waits (bounded) for the process to exit on its own.
    pub fn wait_exit(&mut self, limit: Duration) -> Option<std::process::ExitStatus> {
        let end = Instant::now() + limit;
        let c = self.child.as_mut()?;
        while Instant::now() < end {
            if let Ok(Some(s)) = c.try_wait() {
                self.child = None;
                return Some(s);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }

    pub fn running(&mut self) -> bool {
        matches!(self.child.as_mut().map(|c| c.try_wait()), Some(Ok(None)))
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        // Not kill9: a panic while unwinding from a failed assertion would abort the test
        // binary and hide the assertion's message.
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Sends a signal from Rust: the `kill` program is not on a minimal Debian (procps).
fn signal(child: &Child, sig: Signal) {
    let pid = i32::try_from(child.id())
        .ok()
        .and_then(Pid::from_raw)
        .expect("a child's pid is a positive i32");
    kill_process(pid, sig).unwrap_or_else(|e| panic!("cannot send {sig:?} to pid {pid:?}: {e}"));
}

/// The nodes' log filter: `VKML_TEST_NODE_LOG` (e.g. `vkml=debug` to see their planning in a
/// failing test's logs), else `info`.
fn node_log() -> String {
    std::env::var("VKML_TEST_NODE_LOG").unwrap_or_else(|_| "info".into())
}

/// `vkml-node status --json` against `node`.
pub fn status(node: &Node, key: &Path) -> serde_json::Value {
    try_status(node, key).unwrap_or_else(|e| panic!("{e}"))
}

/// `vkml-node status --json` against `node`, or why it failed.
pub fn try_status(node: &Node, key: &Path) -> Result<serde_json::Value, String> {
    let out = Command::new(bin())
        .args(["status", "--json", "--to", &node.addr])
        .arg("--cluster-key")
        .arg(key)
        .output()
        .unwrap();
    if !out.status.success() {
        return Err(format!(
            "status of {} failed: {}",
            node.name,
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    serde_json::from_slice(&out.stdout).map_err(|e| format!("status of {}: {e}", node.name))
}

/// Member name -> state, from a status reply.
pub fn states(v: &serde_json::Value) -> Vec<(String, String)> {
    v["members"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            (
                m["name"].as_str().unwrap().to_string(),
                m["state"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

/// Each node's log, for failure messages.
pub fn logs(nodes: &[&Node]) -> String {
    nodes
        .iter()
        .map(|n| format!("--- {} ---\n{}", n.name, n.log()))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Cluster tests measure timings: run them one at a time within a test binary.
pub fn serial() -> std::sync::MutexGuard<'static, ()> {
    static SERIAL: Mutex<()> = Mutex::new(());
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

/// Every node sees every other node alive (from its log); returns when the last one did.
pub fn converged(nodes: &[&Node], since: Instant, limit: Duration) -> Option<Instant> {
    let mut last = since;
    for a in nodes {
        for b in nodes {
            if a.name != b.name {
                last = last.max(a.saw(&b.name, "alive", since, limit)?);
            }
        }
    }
    Some(last)
}
