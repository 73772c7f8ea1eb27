//! Language models end to end: greedy generation by `vkml::generate`'s loop on the tiny Llama
//! exports of tests/models/llama_* (tests/generate/llama.py: Optimum's torch export, and ONNX
//! Runtime GenAI's model builder with GroupQueryAttention and int4 MatMulNBits) is token for
//! token onnxruntime's own loop (the ids in each folder's reference.json), on the CPU backend,
//! on Vulkan, through `vkml-node generate`, and split over three loopback nodes. The logits of
//! each step are checked against onnxruntime's by tests/models.rs (the folders' data sets).

mod cluster_harness;
mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use cluster_harness::{BIN, Cluster, Node};
use vkml::cluster::Secret;
use vkml::distributed::client::ClusterClient;
use vkml::generate::{
    GenerateOptions, LlmIo, ModelFolder, Sequence, SharedCache, StepModel, generate,
};
use vkml::{DeviceSelection, Session, SessionOptions};

struct Reference {
    prompt: String,
    prompt_ids: Vec<u32>,
    greedy_ids: Vec<u32>,
}

fn folder(name: &str) -> PathBuf {
    common::real_model_dir(name)
}

fn reference(dir: &Path) -> Reference {
    let text = std::fs::read_to_string(dir.join("reference.json")).unwrap();
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    let ids = |k: &str| -> Vec<u32> {
        v[k].as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_u64().unwrap() as u32)
            .collect()
    };
    Reference {
        prompt: v["prompt"].as_str().unwrap().to_string(),
        prompt_ids: ids("prompt_ids"),
        greedy_ids: ids("greedy_ids"),
    }
}

/// onnxruntime's loop ran the whole length (no end-of-sequence token came): so does ours.
fn greedy_options(r: &Reference) -> GenerateOptions {
    GenerateOptions {
        max_new_tokens: r.greedy_ids.len(),
        sampling: Default::default(),
        eos: Vec::new(),
        max_seq_len: None,
    }
}

fn greedy_on<M: StepModel>(model: &M, io: &LlmIo, r: &Reference, what: &str) {
    let out = generate(model, io, &r.prompt_ids, &greedy_options(r), |_| true)
        .unwrap_or_else(|e| panic!("{what}: {e}"));
    assert_eq!(out.tokens, r.greedy_ids, "{what}: greedy tokens");
}

fn greedy_in_process(name: &str, devices: DeviceSelection) {
    let dir = folder(name);
    let r = reference(&dir);
    let f = ModelFolder::open(&dir).unwrap();
    assert_eq!(
        f.encode(&r.prompt).unwrap(),
        r.prompt_ids,
        "{name}: tokenizer"
    );
    let (session, io) = f
        .load_session(SessionOptions {
            devices,
            ..Default::default()
        })
        .unwrap_or_else(|e| panic!("{name} on {devices:?}: {e}"));
    greedy_on(&session, &io, &r, &format!("{name} on {devices:?}"));
}

/// The Optimum export as exported, without the rewrite the loop makes (generate/window.rs):
/// its caches grow by a row a step, a plan per length, and generation is still onnxruntime's.
#[test]
fn optimum_export_with_growing_caches_generates_onnxruntime_s_tokens() {
    let dir = folder("llama_optimum");
    let r = reference(&dir);
    let f = ModelFolder::open(&dir).unwrap();
    let session = Session::load(
        &f.model,
        SessionOptions {
            devices: DeviceSelection::Cpu,
            ..Default::default()
        },
    )
    .unwrap();
    let io = LlmIo::detect_with(&session.inputs(), &session.outputs(), &f.hints).unwrap();
    assert_eq!(io.shared_cache, SharedCache::No);
    assert_eq!(io.write_index, None);
    greedy_on(&session, &io, &r, "llama_optimum as exported");
}

/// The loop rewrites Optimum's growing caches into a buffer that past and present share
/// (generate/window.rs): the prompt's rows at its end, each later token's from its start.
/// After the prompt and the three steps of test_data_set_1..3 (onnxruntime's own loop's), the
/// rows in use hold what onnxruntime's present caches hold, the rest are still zero, the
/// logits are onnxruntime's, and on Vulkan the buffer never left the GPU.
#[test]
fn optimum_caches_rewritten_in_place_hold_onnxruntime_s_rows() {
    let dir = folder("llama_optimum");
    let f = ModelFolder::open(&dir).unwrap();
    let sets = common::data_sets_in(&dir);
    let tensor = |set: &common::DataSet, name: &str| {
        let all = set.inputs.iter().chain(&set.outputs);
        all.into_iter().find(|(n, _)| n == name).unwrap().1.clone()
    };
    let ids = |set: &common::DataSet| -> Vec<u32> {
        let t = tensor(set, "input_ids").to_f64_vec().unwrap();
        t.into_iter().map(|x| x as u32).collect()
    };
    let mut devices = vec![DeviceSelection::Cpu];
    if !common::skip_vulkan() {
        devices.push(DeviceSelection::Vulkan);
    }
    const ROWS: usize = 24;
    for d in devices {
        let (session, io) = f
            .load_session(SessionOptions {
                devices: d,
                ..Default::default()
            })
            .unwrap();
        assert_eq!(io.shared_cache, SharedCache::Yes);
        assert!(io.write_index.is_some());
        // The loop's model makes the last position's logits only (generate/last_logits.rs).
        let logits = session.outputs().into_iter().find(|o| o.name == "logits");
        let dims = logits.unwrap().dims.unwrap();
        assert_eq!(dims[1], vkml::model::Dim::Fixed(1), "{dims:?}");
        let mut seq = Sequence::new(&session, &io, Some(ROWS)).unwrap();
        let prompt = ids(&sets[0]).len();
        let mut logits = Vec::new();
        for set in &sets[..4] {
            logits = seq.feed(&ids(set)).unwrap();
        }
        let last = &sets[3];
        let want = tensor(last, "logits").to_f64_vec().unwrap();
        let want = &want[want.len() - logits.len()..];
        let worst = logits
            .iter()
            .zip(want)
            .map(|(&a, b)| (f64::from(a) - b).abs())
            .fold(0.0, f64::max);
        assert!(worst < 1e-3, "{d:?}: logits differ by {worst}");
        assert_eq!(seq.state().on_gpu(), d == DeviceSelection::Vulkan, "{d:?}");
        let used = prompt + 3;
        // Each cache read alone (on a GPU, its own bytes copied back), its type known without
        // a copy.
        let types = seq.state().types();
        assert_eq!(types.len(), io.caches.len());
        let past_end = seq.state().value(io.caches.len()).unwrap_err();
        assert!(past_end.to_string().contains("no value"), "{past_end}");
        for (k, c) in io.caches.iter().enumerate() {
            let got = seq.state().value(k).unwrap();
            assert_eq!(got.shape(), [1, 2, ROWS, 16]);
            assert_eq!(types[k].shape, got.shape());
            let want = tensor(last, &c.present);
            assert_eq!(want.shape(), [1, 2, used, 16]);
            let (got, want) = (got.to_f64_vec().unwrap(), want.to_f64_vec().unwrap());
            for h in 0..2 {
                let row = |v: &[f64], len: usize, i: usize| -> Vec<f64> {
                    v[(h * len + i) * 16..(h * len + i + 1) * 16].to_vec()
                };
                for t in 0..ROWS {
                    // Token t's row: the prompt's at the end, the steps' from the start.
                    let token = match t {
                        t if t >= ROWS - prompt => Some(t - (ROWS - prompt)),
                        t if t < 3 => Some(prompt + t),
                        _ => None,
                    };
                    let g = row(&got, ROWS, t);
                    match token {
                        Some(k) => {
                            let w = row(&want, used, k);
                            let diff = g.iter().zip(&w).map(|(a, b)| (a - b).abs());
                            let worst = diff.fold(0.0, f64::max);
                            assert!(worst < 1e-4, "{d:?} {} head {h} row {t}: {worst}", c.past);
                        }
                        None => assert!(g.iter().all(|&x| x == 0.0), "{d:?} row {t} written"),
                    }
                }
            }
        }
    }
}

#[test]
fn optimum_export_generates_onnxruntime_s_tokens_on_the_cpu() {
    greedy_in_process("llama_optimum", DeviceSelection::Cpu);
}

#[test]
fn optimum_export_generates_onnxruntime_s_tokens_on_vulkan() {
    if common::skip_vulkan() {
        return;
    }
    greedy_in_process("llama_optimum", DeviceSelection::Vulkan);
}

#[test]
fn genai_int4_export_generates_onnxruntime_s_tokens_on_the_cpu() {
    greedy_in_process("llama_genai", DeviceSelection::Cpu);
}

#[test]
fn genai_int4_export_generates_onnxruntime_s_tokens_on_vulkan() {
    if common::skip_vulkan() {
        return;
    }
    greedy_in_process("llama_genai", DeviceSelection::Vulkan);
}

/// The GenAI form's caches are one buffer that past and present share (its genai_config.json
/// says so): on Vulkan a session keeps them on the GPU and writes each step's rows in place.
/// They hold what the CPU backend's caches hold, fed back through the host, after the same
/// prompt and three greedy steps.
#[test]
fn genai_caches_stay_on_the_gpu_in_place_and_match_the_cpu_backend_s() {
    if common::skip_vulkan() {
        return;
    }
    let dir = folder("llama_genai");
    let r = reference(&dir);
    let f = ModelFolder::open(&dir).unwrap();
    let run = |devices: DeviceSelection| {
        let session = Session::load(
            &f.model,
            SessionOptions {
                devices,
                ..Default::default()
            },
        )
        .unwrap();
        let io = LlmIo::detect_with(&session.inputs(), &session.outputs(), &f.hints).unwrap();
        assert_eq!(io.shared_cache, SharedCache::Yes);
        let mut seq = Sequence::new(&session, &io, Some(48)).unwrap();
        seq.feed(&r.prompt_ids).unwrap();
        for &t in &r.greedy_ids[..3] {
            seq.feed(&[t]).unwrap();
        }
        assert_eq!(seq.len(), r.prompt_ids.len() + 3);
        (seq.state().on_gpu(), seq.state().values().unwrap())
    };
    let (gpu_home, on_vulkan) = run(DeviceSelection::Vulkan);
    let (cpu_home, on_cpu) = run(DeviceSelection::Cpu);
    assert!(gpu_home, "on Vulkan the caches stay on the GPU");
    assert!(!cpu_home);
    assert_eq!(on_vulkan.len(), 8);
    for (k, (a, b)) in on_vulkan.iter().zip(&on_cpu).enumerate() {
        assert_eq!(a.shape(), [1, 2, 48, 16]);
        assert_eq!(a.shape(), b.shape());
        let (a, b) = (a.to_f64_vec().unwrap(), b.to_f64_vec().unwrap());
        let worst = a
            .iter()
            .zip(&b)
            .map(|(x, y)| (x - y).abs())
            .fold(0.0, f64::max);
        assert!(worst < 1e-3, "cache {k}: differs by {worst}");
        // Rows past the sequence's length were never written.
        let row = |i: usize| &a[i * 16..(i + 1) * 16];
        let used = r.prompt_ids.len() + 3;
        assert!(
            row(used - 1).iter().any(|&x| x != 0.0),
            "cache {k}: the last row is empty"
        );
        assert!(
            (used..48).all(|i| row(i).iter().all(|&x| x == 0.0)),
            "cache {k}"
        );
    }
}

#[test]
fn the_generate_command_prints_onnxruntime_s_tokens() {
    let dir = folder("llama_optimum");
    let r = reference(&dir);
    let out = Command::new(BIN)
        .arg("generate")
        .arg(&dir)
        .args([
            "--prompt",
            &r.prompt,
            "--json",
            "--ignore-eos",
            "--device",
            "cpu",
        ])
        .args(["--max-tokens", &r.greedy_ids.len().to_string()])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let ids = |k: &str| -> Vec<u32> {
        v[k].as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_u64().unwrap() as u32)
            .collect()
    };
    assert_eq!(ids("prompt_ids"), r.prompt_ids);
    assert_eq!(ids("ids"), r.greedy_ids);
    // Streaming: the prompt, then the generated text, on stdout.
    let out = Command::new(BIN)
        .arg("generate")
        .arg(&dir)
        .args([
            "--prompt",
            &r.prompt,
            "--max-tokens",
            "4",
            "--device",
            "cpu",
        ])
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.starts_with(&r.prompt), "{text}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("tokens/s"), "{err}");
}

#[test]
fn a_folder_without_a_tokenizer_or_with_an_unknown_input_is_refused_by_name() {
    let tmp = std::env::temp_dir().join(format!("vkml-llm-no-tok-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).unwrap();
    std::fs::copy(
        folder("llama_optimum").join("model.onnx"),
        tmp.join("model.onnx"),
    )
    .unwrap();
    let out = Command::new(BIN)
        .arg("generate")
        .arg(&tmp)
        .args(["--prompt", "hi"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("tokenizer.json"),
        "{err}"
    );
    std::fs::remove_dir_all(&tmp).unwrap();
    // A model that is not a language model: named inputs it cannot feed.
    let mnist = common::fixture("mnist_cnn").join("model.onnx");
    let session = Session::load(&mnist, Default::default()).unwrap();
    let e = LlmIo::detect(&session.inputs(), &session.outputs()).unwrap_err();
    assert!(e.to_string().contains("input_ids"), "{e}");
}

/// Three CPU nodes (the harness's default device), each capped below half the weights: the plan needs all three.
fn three_nodes(test: &str, cap: u64) -> (Cluster, Vec<Node>) {
    let cluster = Cluster::new(test);
    let mut nodes: Vec<Node> = Vec::new();
    for i in 0..3 {
        let extra = vec!["--device-memory-limit".to_string(), cap.to_string()];
        let seeds: Vec<&Node> = nodes.first().into_iter().collect();
        nodes.push(cluster.start_args(&format!("n{}", i + 1), &seeds, &extra));
    }
    let refs: Vec<&Node> = nodes.iter().collect();
    cluster_harness::converged(
        &refs,
        Instant::now() - Duration::from_secs(60),
        Duration::from_secs(20),
    )
    .unwrap_or_else(|| panic!("{test}: no convergence\n{}", cluster_harness::logs(&refs)));
    std::thread::sleep(Duration::from_millis(500));
    (cluster, nodes)
}

/// The model's bytes: its .onnx file and any external data beside it.
fn model_bytes(dir: &Path) -> u64 {
    ["model.onnx", "model.onnx.data"]
        .iter()
        .filter_map(|f| std::fs::metadata(dir.join(f)).ok())
        .map(|m| m.len())
        .sum()
}

/// What the nodes report of sequences and traffic: bytes of tensors received (all nodes
/// together), sequences kept on each node, and the bytes those keep.
fn kept_and_traffic(nodes: &[Node], key: &Path) -> (u64, Vec<u64>, u64) {
    let mut received = 0;
    let mut kept = Vec::new();
    let mut kept_bytes = 0;
    for n in nodes {
        let s = cluster_harness::status(n, key);
        received += s["tensor_bytes_received"].as_u64().unwrap();
        kept.push(s["sequences_kept"].as_u64().unwrap());
        kept_bytes += s["sequence_bytes"].as_u64().unwrap();
    }
    (received, kept, kept_bytes)
}

/// `percent` of the model's bytes per node: too little for two nodes to hold the model and
/// its caches, so that it takes all three (the test checks that each ran every step), and
/// enough for its largest weight (the GenAI form's f32 embedding is 45% of its bytes; its
/// shared caches are as long as the whole generation).
///
/// The caches stay on the nodes that run their layers: between two of the last steps the
/// nodes together receive less than a step's caches would weigh (8 caches of 2 heads x 16 x
/// about 40 rows of f32: 40 KiB, where the token's hidden states and logits are under 4),
/// and once the sequence is over no node keeps anything of it.
fn split_over_three_nodes(name: &str, percent: u64) {
    let _serial = cluster_harness::serial();
    let dir = folder(name);
    let r = reference(&dir);
    let (cluster, nodes) = three_nodes(
        &format!("llm-split-{name}"),
        model_bytes(&dir) * percent / 100,
    );
    let secret = Secret::read(&cluster.key).unwrap();
    let client = ClusterClient::connect(&nodes[1].addr, &secret).unwrap();
    let (model, io) = ModelFolder::open(&dir)
        .unwrap()
        .load_on(&client, |_| {})
        .unwrap();
    let what = format!("{name} over three nodes");
    let last = r.greedy_ids.len() - 2;
    let mut samples = Vec::new();
    let mut made = 0;
    let out = generate(&model, &io, &r.prompt_ids, &greedy_options(&r), |_| {
        made += 1;
        if made >= last {
            samples.push(kept_and_traffic(&nodes, &cluster.key));
        }
        true
    })
    .unwrap_or_else(|e| panic!("{what}: {e}"));
    assert_eq!(out.tokens, r.greedy_ids, "{what}: greedy tokens");
    let refs: Vec<&Node> = nodes.iter().collect();
    let ((before, kept, kept_bytes), (after, ..)) = (&samples[0], &samples[1]);
    let step = after - before;
    assert!(
        step < 8 << 10,
        "{what}: the nodes received {step} bytes in one decode step: the caches travel\n{}",
        cluster_harness::logs(&refs)
    );
    assert!(
        kept.iter().sum::<u64>() >= 1 && *kept_bytes > 0,
        "{what}: no node keeps the sequence's caches ({kept:?}, {kept_bytes} bytes)"
    );
    // The sequence ended with the generation: its caches are freed everywhere.
    let freed = (0..50).any(|_| {
        std::thread::sleep(Duration::from_millis(100));
        kept_and_traffic(&nodes, &cluster.key)
            .1
            .iter()
            .all(|&k| k == 0)
    });
    assert!(freed, "{what}: the nodes still keep the ended sequence");
    // Every node ran a part of every step (the members' loads, as n1 asked them).
    let s = cluster_harness::status(&nodes[0], &cluster.key);
    let members = s["members"].as_array().unwrap();
    assert_eq!(members.len(), 3);
    for m in members {
        let ran = m["load"]["runs_finished"].as_u64().unwrap_or(0);
        assert!(
            ran >= r.greedy_ids.len() as u64,
            "{} ran {ran} parts\n{}",
            m["name"],
            cluster_harness::logs(&refs)
        );
    }
    model.unload().unwrap();
    client.close();
}

#[test]
fn optimum_export_split_over_three_nodes_generates_onnxruntime_s_tokens() {
    split_over_three_nodes("llama_optimum", 45);
}

#[test]
fn genai_int4_export_split_over_three_nodes_generates_onnxruntime_s_tokens() {
    split_over_three_nodes("llama_genai", 55);
}

/// A client that vanishes without ending its sequence leaves nothing behind: the node frees
/// the caches it keeps once the sequence has been idle for `VKML_SEQUENCE_IDLE` seconds; a
/// step of it after that is an error that says so, not a hang.
#[test]
fn an_abandoned_sequence_is_freed_after_the_idle_time() {
    let _serial = cluster_harness::serial();
    let dir = folder("llama_genai");
    let r = reference(&dir);
    let cluster = Cluster::new("llm-idle");
    let node = cluster.start_opts("n1", &[], &[], None, &[("VKML_SEQUENCE_IDLE", "1")]);
    let secret = Secret::read(&cluster.key).unwrap();
    let client = ClusterClient::connect(&node.addr, &secret).unwrap();
    let model = client.load(&dir.join("model.onnx"), |_| {}).unwrap();
    let f = ModelFolder::open(&dir).unwrap();
    let def = vkml::onnx::load(&f.model).unwrap();
    let io = LlmIo::detect_with(&def.graph.inputs, &def.graph.outputs, &f.hints).unwrap();
    let mut seq = Sequence::new(&model, &io, Some(48)).unwrap();
    seq.feed(&r.prompt_ids).unwrap();
    seq.feed(&r.greedy_ids[..1]).unwrap();
    let kept = || cluster_harness::status(&node, &cluster.key)["sequences_kept"].as_u64();
    assert_eq!(kept(), Some(1));
    std::thread::sleep(Duration::from_millis(2500));
    assert_eq!(kept(), Some(0), "{}", cluster_harness::logs(&[&node]));
    let e = seq.feed(&r.greedy_ids[1..2]).unwrap_err().to_string();
    assert!(e.contains("begin it again"), "{e}");
    // The sequence is over on the client's side too: dropping it sends nothing.
    drop(seq);
    model.unload().unwrap();
    client.close();
}

/// On GPU nodes the caches that are updated in place on a GPU (GroupQueryAttention's, and
/// Optimum's once the loop has rewritten them: generate/window.rs) stay in a GPU buffer of
/// the sequence's on the node that runs their layer (two lavapipe nodes, each capped below
/// the model): greedy generation is still onnxruntime's. (On lavapipe the planner may run
/// some of a tiny model's attention ops on the CPU, whose caches the host keeps: both homes
/// are exercised.)
#[test]
fn genai_caches_stay_on_the_gpus_of_the_nodes_that_run_their_layers() {
    caches_stay_on_the_gpus("llama_genai");
}

#[test]
fn optimum_caches_stay_on_the_gpus_of_the_nodes_that_run_their_layers() {
    caches_stay_on_the_gpus("llama_optimum");
}

fn caches_stay_on_the_gpus(name: &str) {
    if common::skip_vulkan() {
        return;
    }
    let _serial = cluster_harness::serial();
    let dir = folder(name);
    let r = reference(&dir);
    let cluster = Cluster::new(&format!("llm-gpu-split-{name}"));
    let cap = (model_bytes(&dir) * 80 / 100).to_string();
    let extra = |_: usize| {
        vec![
            "--device".to_string(),
            "vulkan:0".to_string(),
            "--device-memory-limit".to_string(),
            cap.clone(),
        ]
    };
    let n1 = cluster.start_opts("n1", &[], &extra(1), None, &[]);
    let n2 = cluster.start_opts("n2", &[&n1], &extra(2), None, &[]);
    let nodes = vec![n1, n2];
    let refs: Vec<&Node> = nodes.iter().collect();
    cluster_harness::converged(
        &refs,
        Instant::now() - Duration::from_secs(60),
        Duration::from_secs(20),
    )
    .unwrap_or_else(|| panic!("no convergence\n{}", cluster_harness::logs(&refs)));
    let secret = Secret::read(&cluster.key).unwrap();
    let client = ClusterClient::connect(&nodes[0].addr, &secret).unwrap();
    let (model, io) = ModelFolder::open(&dir)
        .unwrap()
        .load_on(&client, |_| {})
        .unwrap();
    let mut seen = Vec::new();
    let mut made = 0;
    let out = generate(&model, &io, &r.prompt_ids, &greedy_options(&r), |_| {
        made += 1;
        if made == 3 {
            for n in &nodes {
                let s = cluster_harness::status(n, &cluster.key);
                let get = |k: &str| s[k].as_u64().unwrap();
                seen.push((get("sequence_bytes"), get("sequence_gpu_bytes")));
            }
        }
        true
    })
    .unwrap_or_else(|e| panic!("{e}\n{}", cluster_harness::logs(&refs)));
    assert_eq!(out.tokens, r.greedy_ids, "greedy tokens over two GPU nodes");
    // The prompt's plan and the one-token plan share each node's GPU copy of the weights:
    // where both do not fit (each node holds about half the model and may take 80% of it),
    // they take turns, and the one coming back finds the weights still there.
    let s = cluster_harness::status(&nodes[0], &cluster.key);
    for m in s["members"].as_array().unwrap() {
        let load = &m["load"];
        eprintln!("{}: {load}", m["name"]);
        assert!(
            load["weight_bytes_reused"].as_u64().unwrap() > 0,
            "{}: no plan reused the weights another left on its GPU\n{}",
            m["name"],
            cluster_harness::logs(&refs)
        );
    }
    let on_gpu: u64 = seen.iter().map(|&(_, gpu)| gpu).sum();
    assert!(
        on_gpu > 0,
        "no cache stays on a GPU: {seen:?}\n{}",
        cluster_harness::logs(&refs)
    );
    model.unload().unwrap();
    client.close();
}
