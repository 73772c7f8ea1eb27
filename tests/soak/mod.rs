//! The soak: three loopback nodes under many clients for a long while, with a node killed and
//! restarted now and then and a partition between two nodes now and then. Shared by the
//! one-minute test (tests/cluster_soak.rs) and the ten-minute bench (benches/soak.rs).
//!
//! The load: a split model S (the MNIST CNN, capped so that it needs more than one node) held
//! by one owner connection and run from many threads at once; and clients that each load a
//! small model T (a Softmax), run it, and unload it or walk away from it (a client killed or
//! stopped with Ctrl-C), over and over; and a hostile client submitting and running the models
//! the fuzzer once crashed vkml with (fuzz/regressions/). Besides the kills and partitions, a
//! node is frozen (SIGSTOP) for a while halfway between two kills, long enough to be declared
//! dead. Every run must end: with the right outputs, retried, or failed with a message naming
//! a node; none may take 10 s, and no node may die of anything but the kills. Afterwards no
//! node may hold a model or a reservation, and no node's memory, threads or open files may
//! trend upward.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use vkml::Tensor;
use vkml::cluster::Secret;
use vkml::distributed::client::{ClusterClient, RemoteModel};

use crate::cluster_harness::{self as harness, Node};

/// What the soak does and for how long.
#[derive(Clone, Debug)]
pub struct Plan {
    pub duration: Duration,
    /// Threads running S through its owner's connection.
    pub s_threads: usize,
    /// Clients loading, running and dropping T, each on a connection of its own.
    pub t_clients: usize,
    /// A node is killed (SIGKILL) every so often, in turn, and restarted `down_for` later.
    pub kill_every: Duration,
    pub down_for: Duration,
    /// Two nodes are cut apart every so often, for `partition_for`.
    pub partition_every: Duration,
    pub partition_for: Duration,
    /// A node other than the next one to be killed is frozen (SIGSTOP, then SIGCONT) for
    /// this long, halfway between two kills.
    pub freeze_for: Duration,
}

/// How many runs ended which way, and what the nodes' processes looked like.
#[derive(Debug, Default)]
pub struct Report {
    pub runs: u64,
    pub ok: u64,
    pub retried: u64,
    /// Failed with a message naming a node.
    pub failed_named: u64,
    /// Runs of S (the split model) that succeeded.
    pub s_ok: u64,
    /// Refused because the model was being reloaded or the cluster had no room: not a run.
    pub refused: u64,
    pub refused_messages: Vec<String>,
    /// Any other failure, with its message (the first few).
    pub failed_other: u64,
    pub other_messages: Vec<String>,
    /// Outputs that differ from the reference.
    pub wrong: u64,
    pub slowest: Duration,
    pub over_10s: u64,
    /// How long each successful run took, in microseconds (for percentiles).
    pub latencies_us: Vec<u32>,
    pub loads: u64,
    pub unloads: u64,
    pub abandoned: u64,
    pub kills: Vec<String>,
    pub freezes: Vec<String>,
    pub partitions: usize,
    /// Bad models submitted (and run when they loaded), and the slowest of those.
    pub bad: u64,
    pub bad_slowest: Duration,
    /// Bad models that loaded and ran without an error.
    pub bad_accepted: Vec<String>,
    /// Nodes found exited that the soak had not killed, with the end of their logs.
    pub crashed: Vec<String>,
    pub samples: Vec<Sample>,
    /// What each node's status listed once everyone had gone.
    pub leftovers: Vec<String>,
}

/// One look at a node's process.
#[derive(Debug, Clone)]
pub struct Sample {
    /// Seconds since the soak began.
    pub at: f64,
    pub node: String,
    pub pid: u32,
    pub rss_kib: u64,
    /// RSS's anonymous part (the heap, not mapped files such as the weights).
    pub anon_kib: u64,
    /// Pages the process freed with MADV_FREE: counted in RSS until the kernel takes them.
    pub lazy_free_kib: u64,
    pub threads: u64,
    pub fds: u64,
}

/// How a node process changed from the end of its warmup to its last sample.
#[derive(Debug, Clone)]
pub struct Growth {
    pub node: String,
    pub pid: u32,
    /// Seconds of samples after the warmup.
    pub window: f64,
    /// Last RSS over RSS after the warmup.
    pub rss: f64,
    /// The rise of RSS over the window along its least-squares line, over its mean: the
    /// trend, which one step of load (a killed peer's share taken over) moves little.
    pub rss_trend: f64,
    /// Last anonymous RSS over that after the warmup, and the last sample's lazily freed
    /// KiB (what of a step is the allocator's freed pages, not memory in use).
    pub anon: f64,
    pub lazy_free_kib: u64,
    /// (Most in the first quarter after the warmup, fewest in the last quarter.)
    pub threads: (u64, u64),
    pub fds: (u64, u64),
}

impl Growth {
    /// Whether the life lasted long enough after its warmup to be judged.
    pub fn judged(&self, judged_from: Duration) -> bool {
        self.window >= judged_from.as_secs_f64()
    }

    /// Whether this life grew: RSS trending up by more than 10% over its window, or a thread
    /// or open-file floor above the early peak (threads: by more than 2). Lives whose window
    /// is shorter than `judged_from` are not judged: a node restarted late takes over the
    /// share of each peer killed after it, and in a short window that step is all one sees.
    pub fn grew(&self, judged_from: Duration) -> bool {
        self.judged(judged_from)
            && (self.rss_trend > 0.10
                || self.threads.1 > self.threads.0 + 2
                || self.fds.1 > self.fds.0)
    }
}

struct Model {
    split: bool,
    path: PathBuf,
    input: (String, Tensor),
    expected: Tensor,
}

impl Model {
    fn fixture(name: &str, split: bool) -> Model {
        let dir = repo().join("tests/fixtures").join(name);
        let (_, input) = vkml::io::read_pb(&dir.join("test_data_set_0/input_0.pb")).unwrap();
        let (_, expected) = vkml::io::read_pb(&dir.join("test_data_set_0/output_0.pb")).unwrap();
        let session = vkml::Session::load(dir.join("model.onnx"), Default::default()).unwrap();
        let name = session.inputs()[0].name.clone();
        Model {
            split,
            path: dir.join("model.onnx"),
            input: (name, input),
            expected,
        }
    }

    fn matches(&self, out: &Tensor) -> bool {
        let (Ok(a), Ok(b)) = (out.to_f64_vec(), self.expected.to_f64_vec()) else {
            return false;
        };
        out.shape() == self.expected.shape()
            && a.iter()
                .zip(&b)
                .all(|(x, y)| (x - y).abs() <= 1e-3 + 1e-3 * y.abs())
    }
}

/// The repository the fixtures are read from: where cargo built this, or, for a copy of the
/// binary run elsewhere (the GPU machine), the current directory.
fn repo() -> PathBuf {
    let built = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    if built.join("tests/fixtures").is_dir() {
        built
    } else {
        std::env::current_dir().unwrap_or(built)
    }
}

/// The three nodes, restartable on their ports.
struct Nodes {
    cluster: harness::Cluster,
    slots: Vec<Mutex<Option<Node>>>,
    ports: Vec<u16>,
    caps: Vec<u64>,
    start: Instant,
    plan: Plan,
}

const NAMES: [&str; 3] = ["n1", "n2", "n3"];

impl Nodes {
    fn addr(&self, i: usize) -> String {
        format!("127.0.0.1:{}", self.ports[i])
    }

    /// The fault plan of node `i` started now: it cuts itself from the next node during
    /// every `i`-th partition window of the soak (windows rotate over the three pairs).
    fn faults(&self, i: usize) -> String {
        let now = self.start.elapsed().as_secs_f64();
        let every = self.plan.partition_every.as_secs_f64();
        let len = self.plan.partition_for.as_secs_f64();
        let mut windows = Vec::new();
        let mut k = 1;
        while k as f64 * every < self.plan.duration.as_secs_f64() {
            let at = k as f64 * every;
            if k % 3 == i && at > now {
                windows.push(format!("[{:.1}, {:.1}]", at - now, at - now + len));
            }
            k += 1;
        }
        format!(
            "seed = {i}\n[[rule]]\npeer = \"{}\"\npartition = [{}]\n",
            NAMES[(i + 1) % 3],
            windows.join(", ")
        )
    }

    fn launch(&self, i: usize) -> Node {
        let faults = self.cluster.dir.join(format!("{}-faults.toml", NAMES[i]));
        std::fs::write(&faults, self.faults(i)).unwrap();
        let mut cmd = Command::new(harness::bin());
        cmd.args([
            "--listen",
            &self.addr(i),
            "--name",
            NAMES[i],
            "--device",
            "cpu",
        ])
        .arg("--cluster-key")
        .arg(&self.cluster.key)
        .args(["--device-memory-limit", &self.caps[i].to_string()])
        .env("VKML_FAULTS", &faults)
        .env("RUST_LOG", "info");
        for j in 0..3 {
            if j != i {
                cmd.args(["--join", &self.addr(j)]);
            }
        }
        harness::spawn(cmd, NAMES[i], self.ports[i])
    }
}

struct Shared {
    stop: AtomicBool,
    s_model: RwLock<Option<Arc<RemoteModel>>>,
    report: Mutex<Report>,
    runs_seen: AtomicU64,
}

fn record_run(
    shared: &Shared,
    model: &Model,
    took: Duration,
    result: Result<(Tensor, bool), String>,
) {
    let mut r = shared.report.lock().unwrap();
    r.slowest = r.slowest.max(took);
    if took > Duration::from_secs(10) {
        r.over_10s += 1;
    }
    match result {
        Ok((out, retried)) => {
            r.runs += 1;
            r.ok += 1;
            r.latencies_us
                .push(u32::try_from(took.as_micros()).unwrap_or(u32::MAX));
            r.s_ok += u64::from(model.split);
            r.retried += u64::from(retried);
            if !model.matches(&out) {
                r.wrong += 1;
            }
        }
        Err(e)
            if e.contains("unknown model") || e.contains("reserved") || e.contains("unloaded") =>
        {
            refused(&mut r, e);
        }
        Err(e) => {
            r.runs += 1;
            if NAMES.iter().any(|n| e.contains(n)) {
                r.failed_named += 1;
            } else {
                r.failed_other += 1;
                if r.other_messages.len() < 20 {
                    r.other_messages.push(e);
                }
            }
        }
    }
    shared.runs_seen.fetch_add(1, Ordering::Relaxed);
}

fn refused(r: &mut Report, message: String) {
    r.refused += 1;
    if r.refused_messages.len() < 5 {
        r.refused_messages.push(message);
    }
}

fn run_once(model: &RemoteModel, m: &Model) -> Result<(Tensor, bool), String> {
    let out = model
        .run(&[(m.input.0.as_str(), m.input.1.clone())])
        .map_err(|e| e.to_string())?;
    let retried = out.retried;
    let t = out.outputs.into_iter().next().ok_or("no output")?.1;
    Ok((t, retried))
}

/// Holds S: loads it through some live node, and reloads it when it fails or every so often.
fn owner(nodes: &Nodes, shared: &Shared, s: &Model, secret: &Secret) {
    let mut turn = 0;
    while !shared.stop.load(Ordering::Relaxed) {
        turn += 1;
        let i = turn % 3;
        let Ok(client) = ClusterClient::connect(&nodes.addr(i), secret) else {
            std::thread::sleep(Duration::from_millis(200));
            continue;
        };
        let model = match client.load(&s.path, |_| {}) {
            Ok(m) => m,
            Err(e) => {
                refused(
                    &mut shared.report.lock().unwrap(),
                    format!("loading S: {e}"),
                );
                std::thread::sleep(Duration::from_millis(500));
                continue;
            }
        };
        shared.report.lock().unwrap().loads += 1;
        let model = Arc::new(model);
        *shared.s_model.write().unwrap() = Some(model.clone());
        // Held for a while; given back early when a run through it fails.
        let until = Instant::now() + Duration::from_secs(40);
        let mut failures_seen = shared.report.lock().unwrap().failed_named;
        while Instant::now() < until && !shared.stop.load(Ordering::Relaxed) {
            std::thread::sleep(Duration::from_millis(200));
            let now = shared.report.lock().unwrap().failed_named;
            if now > failures_seen + 8 {
                break;
            }
            failures_seen = now;
        }
        *shared.s_model.write().unwrap() = None;
        // Runners may still hold it: the last one to let go unloads it (RemoteModel's drop).
        if let Ok(m) = Arc::try_unwrap(model)
            && m.unload().is_ok()
        {
            shared.report.lock().unwrap().unloads += 1;
        }
        client.close();
    }
}

fn s_runner(shared: &Shared, s: &Model) {
    while !shared.stop.load(Ordering::Relaxed) {
        let model = shared.s_model.read().unwrap().clone();
        let Some(model) = model else {
            std::thread::sleep(Duration::from_millis(50));
            continue;
        };
        let t0 = Instant::now();
        let result = run_once(&model, s);
        record_run(shared, s, t0.elapsed(), result);
    }
}

/// Loads T, runs it a few times, and then unloads it or walks away (the connection dropped
/// with the model loaded, as a killed client would).
fn t_client(nodes: &Nodes, shared: &Shared, t: &Model, secret: &Secret, id: usize) {
    let mut turn = id;
    while !shared.stop.load(Ordering::Relaxed) {
        turn += 1;
        let Ok(client) = ClusterClient::connect(&nodes.addr(turn % 3), secret) else {
            std::thread::sleep(Duration::from_millis(200));
            continue;
        };
        let model = match client.load(&t.path, |_| {}) {
            Ok(m) => m,
            Err(e) => {
                refused(&mut shared.report.lock().unwrap(), e.to_string());
                std::thread::sleep(Duration::from_millis(200));
                continue;
            }
        };
        shared.report.lock().unwrap().loads += 1;
        for _ in 0..20 {
            if shared.stop.load(Ordering::Relaxed) {
                break;
            }
            let t0 = Instant::now();
            let result = run_once(&model, t);
            let failed = result.is_err();
            record_run(shared, t, t0.elapsed(), result);
            if failed {
                break;
            }
        }
        if turn.is_multiple_of(4) {
            // Walks away as a killed client would: the connection closes first (dropping the
            // last client handle without close()), so the model's own unload on drop finds it
            // closed; the node must unload the model when its lease ends. (Forgetting the
            // model instead leaked its runtime and sockets here until the process ran out of
            // files, ten minutes in.)
            drop(client);
            drop(model);
            shared.report.lock().unwrap().abandoned += 1;
        } else {
            if model.unload().is_ok() {
                shared.report.lock().unwrap().unloads += 1;
            }
            client.close();
        }
    }
}

/// Kills a node in turn every `kill_every` and restarts it `down_for` later; halfway between
/// two kills, freezes another for `freeze_for`.
fn chaos(nodes: &Nodes, shared: &Shared) {
    let mut next = nodes.plan.kill_every;
    let mut next_freeze = nodes.plan.kill_every / 2;
    let mut victim = 2;
    while nodes.start.elapsed() < nodes.plan.duration {
        std::thread::sleep(Duration::from_millis(100));
        if nodes.start.elapsed() >= next_freeze {
            next_freeze += nodes.plan.kill_every;
            freeze(nodes, shared, (victim + 1) % 3);
        }
        if nodes.start.elapsed() < next {
            continue;
        }
        next += nodes.plan.kill_every;
        let i = victim;
        victim = (victim + 2) % 3;
        if let Some(mut n) = nodes.slots[i].lock().unwrap().take() {
            n.kill9();
        }
        shared.report.lock().unwrap().kills.push(format!(
            "{} at {:.0} s",
            NAMES[i],
            nodes.start.elapsed().as_secs_f64()
        ));
        std::thread::sleep(nodes.plan.down_for);
        *nodes.slots[i].lock().unwrap() = Some(nodes.launch(i));
    }
}

/// SIGSTOP node `i`, and SIGCONT `freeze_for` later (the slot's lock is not held meanwhile,
/// so the sampler goes on; the kill schedule never picks a frozen node).
fn freeze(nodes: &Nodes, shared: &Shared, i: usize) {
    let signal = |sig| {
        if let Some(n) = nodes.slots[i].lock().unwrap().as_ref() {
            n.signal(sig);
        }
    };
    signal(harness::Signal::STOP);
    shared.report.lock().unwrap().freezes.push(format!(
        "{} at {:.0} s",
        NAMES[i],
        nodes.start.elapsed().as_secs_f64()
    ));
    std::thread::sleep(nodes.plan.freeze_for);
    signal(harness::Signal::CONT);
}

/// Submits each model the fuzzer once crashed vkml with, runs it when it loads, and unloads
/// it, one after another, through the nodes in turn. Each must end within 10 s, like any run.
fn hostile(nodes: &Nodes, shared: &Shared, secret: &Secret) {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(repo().join("fuzz/regressions"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    dirs.sort();
    // Those whose expected outcome is success may load and run.
    let may_run: Vec<bool> = dirs
        .iter()
        .map(|d| {
            std::fs::read_to_string(d.join("expect"))
                .unwrap_or_default()
                .starts_with("ok")
        })
        .collect();
    let mut turn = 0;
    while !shared.stop.load(Ordering::Relaxed) {
        let (dir, may_run) = (&dirs[turn % dirs.len()], may_run[turn % dirs.len()]);
        turn += 1;
        let Ok(client) = ClusterClient::connect(&nodes.addr(turn % 3), secret) else {
            std::thread::sleep(Duration::from_millis(200));
            continue;
        };
        let t0 = Instant::now();
        let accepted = client
            .load(&dir.join("model.onnx"), |_| {})
            .is_ok_and(|model| {
                let feeds: Vec<(String, Tensor)> = (0..)
                    .map(|k| dir.join(format!("test_data_set_0/input_{k}.pb")))
                    .take_while(|p| p.exists())
                    .filter_map(|p| vkml::io::read_pb(&p).ok())
                    .collect();
                let feeds: Vec<(&str, Tensor)> =
                    feeds.iter().map(|(n, t)| (n.as_str(), t.clone())).collect();
                let ran = model.run(&feeds).is_ok();
                let _ = model.unload();
                ran
            });
        let took = t0.elapsed();
        client.close();
        let mut r = shared.report.lock().unwrap();
        r.bad += 1;
        r.bad_slowest = r.bad_slowest.max(took);
        if took > Duration::from_secs(10) {
            r.over_10s += 1;
            r.other_messages
                .push(format!("bad model {} took {took:?}", dir.display()));
        }
        let name = dir.file_name().unwrap().to_string_lossy().into_owned();
        if accepted && !may_run && !r.bad_accepted.contains(&name) {
            r.bad_accepted.push(name);
        }
        drop(r);
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// RSS, threads and open files of every running node, every few seconds.
fn sample(nodes: &Nodes, shared: &Shared) {
    while nodes.start.elapsed() < nodes.plan.duration {
        for (i, slot) in nodes.slots.iter().enumerate() {
            let pid = {
                let mut guard = slot.lock().unwrap();
                let Some(node) = guard.as_mut() else { continue };
                if !node.running() {
                    // Not one the chaos thread killed: it takes a node out of its slot first.
                    let tail: String = node
                        .log()
                        .lines()
                        .rev()
                        .take(5)
                        .collect::<Vec<_>>()
                        .join(" | ");
                    shared.report.lock().unwrap().crashed.push(format!(
                        "{} at {:.0} s: {tail}",
                        NAMES[i],
                        nodes.start.elapsed().as_secs_f64()
                    ));
                    *guard = Some(nodes.launch(i));
                    continue;
                }
                let Some(pid) = node.pid() else { continue };
                pid
            };
            let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
            let field = |k: &str| {
                status
                    .lines()
                    .find(|l| l.starts_with(k))
                    .and_then(|l| l.split_whitespace().nth(1))
                    .and_then(|v| v.parse::<u64>().ok())
                    .unwrap_or(0)
            };
            let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count() as u64);
            let rollup =
                std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup")).unwrap_or_default();
            let lazy_free = rollup
                .lines()
                .find(|l| l.starts_with("LazyFree:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse::<u64>().ok())
                .unwrap_or(0);
            shared.report.lock().unwrap().samples.push(Sample {
                at: nodes.start.elapsed().as_secs_f64(),
                node: NAMES[i].to_string(),
                pid,
                rss_kib: field("VmRSS:"),
                anon_kib: field("RssAnon:"),
                lazy_free_kib: lazy_free,
                threads: field("Threads:"),
                fds,
            });
        }
        std::thread::sleep(Duration::from_secs(2));
    }
}

/// Runs the soak; the report, checked by the caller.
pub fn soak(test: &str, plan: Plan) -> Report {
    let s = Model::fixture("mnist_cnn", true);
    let t = Model::fixture("op_softmax_opset11_axis0", false);
    // S must span nodes; T's copies fit in what is left.
    let mut caps = harness::caps_for_three(&s.path);
    for c in &mut caps {
        *c += (plan.t_clients as u64) * 2 * 1024;
    }
    let cluster = harness::Cluster::new(test);
    let secret = Secret::read(&cluster.key).unwrap();
    let nodes = Nodes {
        ports: (0..3).map(|_| harness::free_port()).collect(),
        slots: (0..3).map(|_| Mutex::new(None)).collect(),
        cluster,
        caps,
        start: Instant::now(),
        plan: plan.clone(),
    };
    for i in 0..3 {
        *nodes.slots[i].lock().unwrap() = Some(nodes.launch(i));
    }
    {
        let slots: Vec<_> = nodes.slots.iter().map(|s| s.lock().unwrap()).collect();
        let refs: Vec<&Node> = slots.iter().filter_map(|s| s.as_ref()).collect();
        harness::converged(&refs, nodes.start, Duration::from_secs(30))
            .unwrap_or_else(|| panic!("the soak's cluster did not form\n{}", harness::logs(&refs)));
    }
    let shared = Shared {
        stop: AtomicBool::new(false),
        s_model: RwLock::new(None),
        report: Mutex::new(Report::default()),
        runs_seen: AtomicU64::new(0),
    };
    std::thread::scope(|scope| {
        scope.spawn(|| owner(&nodes, &shared, &s, &secret));
        for _ in 0..plan.s_threads {
            scope.spawn(|| s_runner(&shared, &s));
        }
        for id in 0..plan.t_clients {
            let (nodes, shared, t, secret) = (&nodes, &shared, &t, &secret);
            scope.spawn(move || t_client(nodes, shared, t, secret, id));
        }
        scope.spawn(|| chaos(&nodes, &shared));
        scope.spawn(|| hostile(&nodes, &shared, &secret));
        scope.spawn(|| sample(&nodes, &shared));
        while nodes.start.elapsed() < plan.duration {
            std::thread::sleep(Duration::from_millis(200));
        }
        shared.stop.store(true, Ordering::Relaxed);
    });
    let mut report = shared.report.into_inner().unwrap();
    report.partitions = (plan.duration.as_secs_f64() / plan.partition_every.as_secs_f64()) as usize;
    report.leftovers = leftovers(&nodes);
    report
}

/// Models still loaded on any node once every client has gone (after the lease's grace).
fn leftovers(nodes: &Nodes) -> Vec<String> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let mut left = Vec::new();
        for slot in &nodes.slots {
            let guard = slot.lock().unwrap();
            let Some(n) = guard.as_ref() else { continue };
            let v = match harness::try_status(n, &nodes.cluster.key) {
                Ok(v) => v,
                Err(e) => {
                    let log = n.log();
                    let tail: Vec<&str> = log.lines().rev().take(40).collect();
                    let tail: Vec<&str> = tail.into_iter().rev().collect();
                    left.push(format!("{e}\n{}", tail.join("\n")));
                    continue;
                }
            };
            let Some(models) = v["models"].as_array() else {
                left.push(format!("{}: its status lists no models at all", n.name));
                continue;
            };
            for m in models {
                left.push(format!("{}: {m}", n.name));
            }
        }
        if left.is_empty() || Instant::now() >= deadline {
            return left;
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// Growth of each node process after its warmup: RSS as its last sample over its first, and
/// threads and open files as (the most in the first quarter of the samples, the fewest in the
/// last quarter). A pool that starts threads on demand and retires idle ones moves between two
/// samples; a leak raises the floor, so only a last-quarter floor above the first-quarter peak
/// counts as growth.
pub fn growth(report: &Report, warmup: Duration) -> Vec<Growth> {
    let mut by_pid: BTreeMap<u32, Vec<&Sample>> = BTreeMap::new();
    for s in &report.samples {
        by_pid.entry(s.pid).or_default().push(s);
    }
    let mut out = Vec::new();
    for (pid, samples) in by_pid {
        let start = samples[0].at;
        let post: Vec<&Sample> = samples
            .into_iter()
            .filter(|s| s.at >= start + warmup.as_secs_f64())
            .collect();
        let (Some(base), Some(last)) = (post.first(), post.last()) else {
            continue;
        };
        let q = (post.len() / 4).max(1);
        let (head, tail) = (&post[..q], &post[post.len() - q..]);
        let span = |f: fn(&Sample) -> u64| {
            (
                head.iter().map(|s| f(s)).max().unwrap_or(0),
                tail.iter().map(|s| f(s)).min().unwrap_or(0),
            )
        };
        out.push(Growth {
            node: last.node.clone(),
            pid,
            window: last.at - base.at,
            rss: last.rss_kib as f64 / base.rss_kib.max(1) as f64,
            rss_trend: trend(&post),
            anon: last.anon_kib as f64 / base.anon_kib.max(1) as f64,
            lazy_free_kib: last.lazy_free_kib,
            threads: span(|s| s.threads),
            fds: span(|s| s.fds),
        });
    }
    out
}

/// The rise of RSS from the first sample to the last along the least-squares line, over the
/// mean RSS.
fn trend(samples: &[&Sample]) -> f64 {
    let n = samples.len() as f64;
    let mean_t = samples.iter().map(|s| s.at).sum::<f64>() / n;
    let mean_r = samples.iter().map(|s| s.rss_kib as f64).sum::<f64>() / n;
    let (mut cov, mut var) = (0.0, 0.0);
    for s in samples {
        cov += (s.at - mean_t) * (s.rss_kib as f64 - mean_r);
        var += (s.at - mean_t) * (s.at - mean_t);
    }
    if var == 0.0 || mean_r == 0.0 {
        return 0.0;
    }
    let span = samples[samples.len() - 1].at - samples[0].at;
    cov / var * span / mean_r
}

/// A readable summary of a report.
/// The `p`-th percentile (0-100) of the successful runs' latencies, in milliseconds.
pub fn percentile_ms(report: &Report, p: f64) -> f64 {
    let mut v = report.latencies_us.clone();
    if v.is_empty() {
        return 0.0;
    }
    v.sort_unstable();
    let i = ((p / 100.0) * (v.len() - 1) as f64).round() as usize;
    f64::from(v[i]) / 1000.0
}

pub fn summary(report: &Report, warmup: Duration, judged_from: Duration) -> String {
    let mut s = format!(
        "latency of successful runs: p50 {:.2} ms, p99 {:.2} ms, p99.9 {:.2} ms\n",
        percentile_ms(report, 50.0),
        percentile_ms(report, 99.0),
        percentile_ms(report, 99.9)
    );
    s += &format!(
        "runs {} (ok {} of which the split model {}, retried {}, failed naming a node {}, failed \
         otherwise {}, wrong {}), refused {}, slowest {:.2} s, over 10 s {}\nloads {}, unloads \
         {}, abandoned {}, kills {:?}, freezes {:?}, partitions {}\nbad models {} (slowest \
         {:.2} s, accepted {:?})\n",
        report.runs,
        report.ok,
        report.s_ok,
        report.retried,
        report.failed_named,
        report.failed_other,
        report.wrong,
        report.refused,
        report.slowest.as_secs_f64(),
        report.over_10s,
        report.loads,
        report.unloads,
        report.abandoned,
        report.kills,
        report.freezes,
        report.partitions,
        report.bad,
        report.bad_slowest.as_secs_f64(),
        report.bad_accepted,
    );
    for g in growth(report, warmup) {
        let verdict = if !g.judged(judged_from) {
            "too short to judge"
        } else if g.grew(judged_from) {
            "GREW"
        } else {
            "stable"
        };
        s += &format!(
            "{} (pid {}): {:.0} s after warmup, RSS x{:.2} (trend {:+.1}%; anonymous x{:.2}, \
             {} KiB lazily freed), threads {} -> {}, open files {} -> {}: {verdict}\n",
            g.node,
            g.pid,
            g.window,
            g.rss,
            g.rss_trend * 100.0,
            g.anon,
            g.lazy_free_kib,
            g.threads.0,
            g.threads.1,
            g.fds.0,
            g.fds.1
        );
    }
    for c in &report.crashed {
        s += &format!("crashed: {c}\n");
    }
    for m in &report.refused_messages {
        s += &format!("refused: {m}\n");
    }
    for m in &report.other_messages {
        s += &format!("other failure: {m}\n");
    }
    for l in &report.leftovers {
        s += &format!("left loaded: {l}\n");
    }
    s
}
