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
use vkml::generate::{GenerateOptions, LlmIo, ModelFolder, StepModel, generate};
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
    let session = Session::load(
        &f.model,
        SessionOptions {
            devices,
            ..Default::default()
        },
    )
    .unwrap_or_else(|e| panic!("{name} on {devices:?}: {e}"));
    let io = LlmIo::detect_with(&session.inputs(), &session.outputs(), &f.hints).unwrap();
    greedy_on(&session, &io, &r, &format!("{name} on {devices:?}"));
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

/// `percent` of the model's bytes per node: under half, so that it takes all three nodes,
/// and enough for its largest weight (the GenAI form's f32 embedding is 45% of its bytes).
fn split_over_three_nodes(name: &str, percent: u64) {
    let _serial = cluster_harness::serial();
    let dir = folder(name);
    let r = reference(&dir);
    let model_path = dir.join("model.onnx");
    let (cluster, nodes) = three_nodes(
        &format!("llm-split-{name}"),
        model_bytes(&dir) * percent / 100,
    );
    let secret = Secret::read(&cluster.key).unwrap();
    let client = ClusterClient::connect(&nodes[1].addr, &secret).unwrap();
    let model = client.load(&model_path, |_| {}).unwrap();
    let def = vkml::onnx::load(&model_path).unwrap();
    let hints = ModelFolder::open(&dir).unwrap().hints;
    let io = LlmIo::detect_with(&def.graph.inputs, &def.graph.outputs, &hints).unwrap();
    greedy_on(&model, &io, &r, &format!("{name} over three nodes"));
    // Every node ran a part of every step (the members' loads, as n1 asked them).
    let refs: Vec<&Node> = nodes.iter().collect();
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
    split_over_three_nodes("llama_genai", 48);
}
