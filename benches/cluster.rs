//! The same model on one node and split over three, on loopback, in the same run: latency,
//! the overhead per cut edge, and throughput at concurrency 1, 4 and 16. Real `vkml-node`
//! processes, the real client API.
//!
//!     cargo bench --bench cluster            # prints a table; BENCHMARKS.md has results
//!
//! Environment: VKML_NODE_BIN (the vkml-node to start), VKML_BENCH_DEVICE (the nodes' --device, default cpu), VKML_BENCH_SECS
//! (seconds per throughput point, default 3), VKML_BENCH_MODELS (comma-separated paths
//! relative to the repository; default the MNIST CNN, the MLP and the BERT-style encoder).
//!
//! Scaling (issue 20): VKML_BENCH_SCALING=MODEL runs MODEL (a compute-bound one, e.g.
//! `benches/big/make_chain.py --blocks 12 --dim 2048 --batch 32`) on 1, 2 and 3 CPU nodes, each
//! pinned with taskset to VKML_BENCH_CORES cores of its own (default 5), at 1, 4, 16 and 64
//! callers, and prints runs/s against one node. VKML_BENCH_DEVICE=vulkan:{i} gives node i the
//! i-th GPU instead (a machine with three or more). VKML_BENCH_ENTRY=i submits to node i
//! (default 2: the second, which relays the inputs to the first stage).
//!
//! Two GPUs (issue 26): VKML_BENCH_MULTI_GPU=MODEL runs MODEL on one GPU and over two, in one
//! process and as two nodes of one GPU each (see `multi_gpu`).
//!
//! Language models (issue 21): VKML_BENCH_LLM=DIR generates with the model folder DIR on one
//! node and split over VKML_BENCH_LLM_NODES (three; see `llm` for its settings), and prints
//! the cost per cut.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use vkml::cluster::Secret;
use vkml::distributed::client::{ClusterClient, RemoteModel};
use vkml::{DeviceSelection, Session, SessionOptions, Tensor};

#[path = "../tests/cluster_harness/caps.rs"]
mod caps;
use caps::caps_for_three;

/// The node program: the one cargo built, or VKML_NODE_BIN (the GPU machine runs a staged copy).
fn bin() -> String {
    std::env::var("VKML_NODE_BIN").unwrap_or_else(|_| env!("CARGO_BIN_EXE_vkml-node").into())
}

struct Nodes {
    children: Vec<Child>,
    addrs: Vec<String>,
}

impl Drop for Nodes {
    fn drop(&mut self) {
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn free_port() -> u16 {
    std::net::UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Starts the nodes; with `cores`, node i runs on cores [i * cores, (i + 1) * cores) only
/// (taskset), so that its CPU backend's pool and its network threads have those and no more.
fn start_pinned(caps: &[Option<u64>], device: &str, cores: Option<usize>) -> Nodes {
    let mut nodes = Nodes {
        children: Vec::new(),
        addrs: Vec::new(),
    };
    for (i, cap) in caps.iter().enumerate() {
        let addr = format!("127.0.0.1:{}", free_port());
        let mut cmd = match cores {
            Some(k) => {
                let mut c = Command::new("taskset");
                c.args(["-c", &format!("{}-{}", i * k, (i + 1) * k - 1)])
                    .arg(bin());
                c
            }
            None => Command::new(bin()),
        };
        cmd.args([
            "--listen",
            &addr,
            "--name",
            &format!("n{}", i + 1),
            "--insecure",
        ])
        // `vulkan:{i}`: node i serves GPU i.
        .args(["--device", &device.replace("{i}", &i.to_string())])
        .arg("--probe-cache")
        .arg(caps::probe_cache())
        .stdout(Stdio::null());
        // VKML_BENCH_NODE_LOGS=DIR: each node's log in DIR/n<i>-of-<N>.log, with the trace events
        // that time a run hop by hop (participant.rs, submitter.rs, exec/run.rs).
        match std::env::var("VKML_BENCH_NODE_LOGS")
            .ok()
            .filter(|d| !d.is_empty())
        {
            Some(dir) => {
                let name = format!("n{}-of-{}.log", i + 1, caps.len());
                let file =
                    std::fs::File::create(Path::new(&dir).join(name)).expect("a node log file");
                cmd.env("RUST_LOG", "warn,vkml::distributed=trace,vkml::exec=trace")
                    .stderr(file);
            }
            None => {
                cmd.env("RUST_LOG", "warn").stderr(Stdio::null());
            }
        }
        if let Some(c) = cap {
            cmd.args(["--device-memory-limit", &c.to_string()]);
        }
        if let Some(first) = nodes.addrs.first() {
            cmd.args(["--join", first]);
        }
        nodes.children.push(cmd.spawn().expect("start vkml-node"));
        nodes.addrs.push(addr);
    }
    nodes
}

fn inputs(dir: &Path) -> Vec<(String, Tensor)> {
    let mut out = Vec::new();
    for i in 0.. {
        let p = dir.join("test_data_set_0").join(format!("input_{i}.pb"));
        if !p.exists() {
            break;
        }
        out.push(vkml::io::read_pb(&p).unwrap());
    }
    out
}

fn connect(addr: &str) -> Arc<ClusterClient> {
    let end = Instant::now() + Duration::from_secs(30);
    loop {
        match ClusterClient::connect(addr, &Secret::insecure()) {
            Ok(c) => return c,
            Err(e) if Instant::now() > end => panic!("cannot reach {addr}: {e}"),
            Err(_) => std::thread::sleep(Duration::from_millis(200)),
        }
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// The environment variable `name` parsed, or `default` when it is unset or does not parse.
fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

fn gap_ms() -> Option<u64> {
    std::env::var("VKML_BENCH_GAP_MS").ok()?.parse().ok()
}

/// Median latency (us) of `n` runs one at a time.
fn latency(run: &(dyn Fn() + Sync), n: usize) -> f64 {
    for _ in 0..5 {
        run();
    }
    median(
        (0..n)
            .map(|_| {
                let t = Instant::now();
                run();
                t.elapsed().as_secs_f64() * 1e6
            })
            .collect(),
    )
}

/// Runs per second with `k` threads running back to back for `secs`.
fn throughput(run: &(dyn Fn() + Sync), k: usize, secs: f64) -> f64 {
    let stop = AtomicBool::new(false);
    let done = AtomicU64::new(0);
    let t = Instant::now();
    std::thread::scope(|s| {
        for _ in 0..k {
            s.spawn(|| {
                while !stop.load(Ordering::Relaxed) {
                    run();
                    done.fetch_add(1, Ordering::Relaxed);
                }
            });
        }
        std::thread::sleep(Duration::from_secs_f64(secs));
        stop.store(true, Ordering::Relaxed);
    });
    done.load(Ordering::Relaxed) as f64 / t.elapsed().as_secs_f64()
}

struct Row {
    model: String,
    setup: String,
    /// Loading the model and its first run, seconds.
    load_s: f64,
    edges: usize,
    cut_bytes: u64,
    latency_us: f64,
    rates: Vec<f64>,
}

fn measure_cluster(
    model: &Path,
    caps: &[Option<u64>],
    device: &str,
    secs: f64,
    label: &str,
) -> Row {
    measure_pinned(model, caps, device, secs, label, None, &[1, 4, 16])
}

fn measure_pinned(
    model: &Path,
    caps: &[Option<u64>],
    device: &str,
    secs: f64,
    label: &str,
    cores: Option<usize>,
    concurrency: &[usize],
) -> Row {
    let nodes = start_pinned(caps, device, cores);
    // The node the model is submitted to: the second when there is one, or
    // VKML_BENCH_ENTRY's (1-based; the last when there are fewer).
    let entry = &nodes.addrs[nodes.addrs.len().min(env_or("VKML_BENCH_ENTRY", 2)).max(1) - 1];
    let client = connect(entry);
    // Membership and inventories settle before planning.
    let want = caps.len();
    let end = Instant::now() + Duration::from_secs(30);
    let (remote, loaded): (RemoteModel, Instant) = loop {
        std::thread::sleep(Duration::from_millis(300));
        let loaded = Instant::now();
        match client.load(model, |_| {}) {
            Ok(m) => {
                let used = m.placement.as_ref().map_or(0, |p| {
                    p.parts
                        .iter()
                        .map(|x| &x.node)
                        .collect::<BTreeSet<_>>()
                        .len()
                });
                if used == want || Instant::now() > end {
                    break (m, loaded);
                }
                let _ = m.unload();
            }
            Err(e) if Instant::now() > end => panic!("{}: {e}", model.display()),
            Err(_) => {}
        }
    };
    let p = remote.placement.clone().unwrap_or_default();
    let ins = inputs(model.parent().unwrap());
    let feeds: Vec<(&str, Tensor)> = ins.iter().map(|(n, t)| (n.as_str(), t.clone())).collect();
    let run = || {
        remote.run(&feeds).expect("run");
    };
    run();
    let load_s = loaded.elapsed().as_secs_f64();
    let latency_us = latency(&run, if cores.is_some() { 40 } else { 200 });
    // VKML_BENCH_GAP_MS: the latency again with a pause before each run, as a stage of a split
    // run sees between its runs at one caller (does a device idle for that long run slower?).
    if let (Some(gap), Some(_)) = (gap_ms(), cores) {
        let mut took = Vec::new();
        for _ in 0..40 {
            std::thread::sleep(Duration::from_millis(gap));
            let t = Instant::now();
            run();
            took.push(t.elapsed().as_secs_f64() * 1e3);
        }
        println!(
            "{label}: latency {:.2} ms back to back, {:.2} ms after a {gap} ms pause (medians)",
            latency_us / 1e3,
            median(took)
        );
    }
    let rates = concurrency
        .iter()
        .map(|&k| throughput(&run, k, secs))
        .collect();
    let _ = remote.unload();
    drop(nodes);
    Row {
        model: model
            .parent()
            .unwrap()
            .file_name()
            .unwrap()
            .to_string_lossy()
            .into(),
        setup: label.into(),
        load_s,
        edges: p.edges.len(),
        cut_bytes: p.edges.iter().map(|e| e.bytes).sum(),
        latency_us,
        rates,
    }
}

fn measure_local(model: &Path, device: &str, secs: f64) -> Row {
    // `vulkan:{i}` (a GPU per node): the process alone takes the first.
    let sel: DeviceSelection = device.replace("{i}", "0").parse().unwrap();
    let options = SessionOptions {
        devices: sel,
        ..Default::default()
    };
    measure_in_process(model, options, secs, "in process (no cluster)")
}

fn measure_in_process(model: &Path, options: SessionOptions, secs: f64, label: &str) -> Row {
    let loaded = Instant::now();
    let session = Session::load(model, options).unwrap();
    let ins = inputs(model.parent().unwrap());
    let feeds: Vec<(&str, Tensor)> = ins.iter().map(|(n, t)| (n.as_str(), t.clone())).collect();
    let run = || {
        session.run(&feeds).expect("run");
    };
    run();
    let load_s = loaded.elapsed().as_secs_f64();
    let plan = session.plan_summary(&feeds).unwrap();
    Row {
        model: model
            .parent()
            .unwrap()
            .file_name()
            .unwrap()
            .to_string_lossy()
            .into(),
        setup: label.into(),
        load_s,
        edges: plan.transfers,
        cut_bytes: 0,
        latency_us: latency(&run, 200),
        rates: [1, 4, 16]
            .iter()
            .map(|&k| throughput(&run, k, secs))
            .collect(),
    }
}

/// Issue 20's scaling: the same compute-bound model on 1, 2 and 3 nodes, each pinned to
/// `cores` cores of its own, split by memory caps that leave no fewer nodes room (a node
/// holds 1/N of the weights plus 15%), at 1, 4, 16 and 64 callers.
fn scaling(model: &Path, device: &str, cores: usize, secs: f64) {
    let weights: u64 = std::fs::read_dir(model.parent().unwrap())
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| {
            e.path()
                .extension()
                .is_some_and(|x| x == "data" || x == "bin")
        })
        .map(|e| e.metadata().unwrap().len())
        .sum();
    let concurrency = [1, 4, 16, 64];
    // VKML_BENCH_CAP_EXTRA: the headroom over 1/N of the weights, in percent (default 15).
    let extra: u64 = env_or("VKML_BENCH_CAP_EXTRA", 15);
    let mut rows = Vec::new();
    for n in 1..=3u64 {
        let cap = (n > 1).then(|| weights / n + weights * extra / 100);
        let caps = vec![cap; n as usize];
        let label = format!("{n} node(s) x {cores} cores");
        rows.push(measure_pinned(
            model,
            &caps,
            device,
            secs,
            &label,
            Some(cores),
            &concurrency,
        ));
    }
    println!(
        "\n{:<24} {:>5} {:>10} {:>12} {:>9} {:>9} {:>9} {:>9} {:>8}",
        "setup", "edges", "cut bytes", "latency us", "c1", "c4", "c16", "c64", "c16 x1"
    );
    let base = rows[0].rates[2];
    for r in &rows {
        println!(
            "{:<24} {:>5} {:>10} {:>12.0} {:>9.1} {:>9.1} {:>9.1} {:>9.1} {:>8.2}",
            r.setup,
            r.edges,
            r.cut_bytes,
            r.latency_us,
            r.rates[0],
            r.rates[1],
            r.rates[2],
            r.rates[3],
            r.rates[2] / base
        );
    }
}

/// Issue 26, on a machine with two GPUs: MODEL (weights in .data/.bin files beside it) on one
/// GPU, split over both in one process by a cap of VKML_BENCH_PERCENT (60) percent of its
/// bytes per device (values between the GPUs through shared host memory, then with
/// `Tuning::bridge` off through the host's copies), on one node, and over two nodes of one GPU
/// each under the same cap: load time, latency, runs/s at 1, 4 and 16 callers.
fn multi_gpu(model: &Path, secs: f64) {
    let bytes: u64 = std::fs::read_dir(model.parent().unwrap())
        .unwrap()
        .filter_map(|e| e.ok()?.metadata().ok())
        .filter(|m| m.is_file())
        .map(|m| m.len())
        .sum();
    let cap = bytes * env_or::<u64>("VKML_BENCH_PERCENT", 60) / 100;
    let local = |devices: &str, limit: Option<u64>, bridge: bool| {
        let mut options = SessionOptions {
            devices: devices.parse().unwrap(),
            device_memory_limit: limit,
            ..Default::default()
        };
        options.tuning.bridge = bridge;
        options
    };
    let rows = [
        measure_in_process(
            model,
            local("vulkan:0", None, true),
            secs,
            "1 GPU, in process",
        ),
        measure_in_process(
            model,
            local("vulkan", Some(cap), true),
            secs,
            "2 GPUs, in process",
        ),
        measure_in_process(
            model,
            local("vulkan", Some(cap), false),
            secs,
            "2 GPUs, in process, no bridge",
        ),
        measure_cluster(model, &[None], "vulkan:0", secs, "1 node, 1 GPU"),
        measure_cluster(
            model,
            &[Some(cap); 2],
            "vulkan:{i}",
            secs,
            "2 nodes, 1 GPU each",
        ),
    ];
    println!(
        "\nmodel {} ({bytes} bytes), cap {cap} bytes per device",
        model.display()
    );
    println!(
        "{:<30} {:>7} {:>5} {:>11} {:>9} {:>9} {:>9}",
        "setup", "load s", "edges", "latency us", "c1", "c4", "c16"
    );
    for r in &rows {
        println!(
            "{:<30} {:>7.2} {:>5} {:>11.0} {:>9.1} {:>9.1} {:>9.1}",
            r.setup, r.load_s, r.edges, r.latency_us, r.rates[0], r.rates[1], r.rates[2]
        );
    }
}

/// VKML_BENCH_LLM=DIR (a folder benches/llm/llama.py made): greedy generation through the
/// cluster API on one node, then split over VKML_BENCH_LLM_NODES nodes (3) by memory caps
/// (each node's budget VKML_BENCH_LLM_PERCENT of the model's bytes, default 45, so that with
/// three no two hold it), at VKML_BENCH_LLM_PROMPT tokens of prompt (128) and
/// VKML_BENCH_LLM_DECODE steps (32). Prints a JSON line per setup and the cost per cut per
/// token: the decode step's time on the split less one node's, over its cuts.
fn llm(dir: &Path, device: &str) {
    use vkml::generate::{GenerateOptions, ModelFolder, generate};
    let folder = ModelFolder::open(dir).unwrap_or_else(|e| panic!("{e}"));
    let bytes: u64 = std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| e.ok()?.metadata().ok())
        .filter(|m| m.is_file())
        .map(|m| m.len())
        .sum();
    let nodes: usize = env_or("VKML_BENCH_LLM_NODES", 3);
    let percent: u64 = env_or("VKML_BENCH_LLM_PERCENT", 45);
    let prompt: usize = env_or("VKML_BENCH_LLM_PROMPT", 128);
    let decode: usize = env_or("VKML_BENCH_LLM_DECODE", 32);
    let ids: Vec<u32> = (0..prompt as u32).map(|i| 3 + (i * 7919) % 1000).collect();
    let options = GenerateOptions {
        max_new_tokens: decode,
        sampling: Default::default(),
        eos: Vec::new(),
        max_seq_len: Some(prompt + decode),
    };
    let mut step_ms = Vec::new();
    for (label, caps) in [
        ("1 node".to_string(), vec![None]),
        (
            format!("{nodes} nodes"),
            vec![Some(bytes * percent / 100); nodes],
        ),
    ] {
        let nodes = start_pinned(&caps, device, None);
        let client = connect(&nodes.addrs[0]);
        // Every node has joined and told the others its devices before the first run plans.
        std::thread::sleep(Duration::from_secs(3));
        let t = Instant::now();
        // As `vkml-node generate --to` loads it (generate/window.rs).
        let (model, io) = folder
            .load_on(&client, |_| {})
            .unwrap_or_else(|e| panic!("{label}: {e}"));
        let load_s = t.elapsed().as_secs_f64();
        // The gaps between tokens after the first two: a decode step as it runs once its plan
        // is loaded (the rate over the whole decode also counts the load of the single-token
        // plan, which a memory-capped split makes again for every sequence).
        let mut gaps: Vec<f64> = Vec::new();
        let mut run = || {
            let mut at: Vec<Instant> = Vec::new();
            let g = generate(&model, &io, &ids, &options, |_| {
                at.push(Instant::now());
                true
            })
            .unwrap_or_else(|e| panic!("{e}"));
            gaps.extend(
                at.windows(2)
                    .skip(1)
                    .map(|w| (w[1] - w[0]).as_secs_f64() * 1e3),
            );
            g
        };
        let t = Instant::now();
        let first = run();
        let first_s = t.elapsed().as_secs_f64();
        let runs: Vec<_> = (0..2).map(|_| run()).collect();
        assert_eq!(runs[0].tokens, first.tokens, "{label}: generations differ");
        let decode_tps = median(runs.iter().map(|g| g.decode_tokens_per_s()).collect());
        let prefill_tps = median(runs.iter().map(|g| g.prompt_tokens_per_s()).collect());
        let step = median(gaps);
        step_ms.push(step);
        println!(
            "{}",
            serde_json::json!({
                "model": dir.display().to_string(),
                "setup": label,
                "device": device,
                "cap_bytes": caps[0],
                "model_bytes": bytes,
                "prompt": prompt,
                "decode_tokens": decode,
                "load_s": load_s,
                "first_generation_s": first_s,
                "prefill_tokens_per_s": prefill_tps,
                "decode_tokens_per_s": decode_tps,
                "decode_step_ms": step,
            })
        );
        let _ = model.unload();
        client.close();
        drop(nodes);
    }
    println!(
        "cost per cut per token: {:.2} ms (median decode step {:.2} ms on {nodes} nodes, {:.2} on 1)",
        (step_ms[1] - step_ms[0]) / (nodes - 1).max(1) as f64,
        step_ms[1],
        step_ms[0]
    );
}

fn main() {
    // `cargo bench` passes --bench; `cargo test --benches` runs us with no flag: stay quick.
    if !std::env::args().any(|a| a == "--bench") {
        println!("cluster bench: skipped (run with `cargo bench --bench cluster`)");
        return;
    }
    let device = std::env::var("VKML_BENCH_DEVICE").unwrap_or_else(|_| "cpu".into());
    if let Ok(model) = std::env::var("VKML_BENCH_MULTI_GPU") {
        multi_gpu(Path::new(&model), env_or("VKML_BENCH_SECS", 3.0));
        return;
    }
    if let Ok(dir) = std::env::var("VKML_BENCH_LLM") {
        llm(Path::new(&dir), &device);
        return;
    }
    if let Ok(model) = std::env::var("VKML_BENCH_SCALING") {
        let cores = env_or("VKML_BENCH_CORES", 5);
        scaling(
            Path::new(&model),
            &device,
            cores,
            env_or("VKML_BENCH_SECS", 5.0),
        );
        return;
    }
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let secs: f64 = env_or("VKML_BENCH_SECS", 3.0);
    let models: Vec<PathBuf> = std::env::var("VKML_BENCH_MODELS")
        .unwrap_or_else(|_| {
            "tests/fixtures/mnist_cnn/model.onnx,tests/fixtures/mlp/model.onnx,tests/models/bert_static/model.onnx".into()
        })
        .split(',')
        .map(|p| root.join(p))
        .collect();
    let mut rows = Vec::new();
    for m in &models {
        rows.push(measure_local(m, &device, secs));
        rows.push(measure_cluster(m, &[None], &device, secs, "1 node"));
        let caps: Vec<Option<u64>> = caps_for_three(m).into_iter().map(Some).collect();
        rows.push(measure_cluster(
            m,
            &caps,
            &device,
            secs,
            "3 nodes, split by caps",
        ));
    }
    println!(
        "\n{:<14} {:<26} {:>5} {:>10} {:>12} {:>10} {:>10} {:>10}",
        "model", "setup", "edges", "cut bytes", "latency us", "runs/s c1", "c4", "c16"
    );
    for r in &rows {
        println!(
            "{:<14} {:<26} {:>5} {:>10} {:>12.0} {:>10.0} {:>10.0} {:>10.0}",
            r.model,
            r.setup,
            r.edges,
            r.cut_bytes,
            r.latency_us,
            r.rates[0],
            r.rates[1],
            r.rates[2]
        );
    }
    println!("\noverhead per cut edge (3-node latency - 1-node latency) / edges:");
    for w in rows.chunks(3) {
        let (one, three) = (&w[1], &w[2]);
        if three.edges > 0 {
            println!(
                "  {:<14} {:.0} us per edge ({} edges)",
                one.model,
                (three.latency_us - one.latency_us) / three.edges as f64,
                three.edges
            );
        }
    }
}
