//! `vkml-node plan` and `vkml-node submit` against a loopback cluster of real nodes: what a
//! user types, with outputs checked against onnxruntime's and clear failures for bad input.

mod cluster_harness;
mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use cluster_harness::{BIN, Cluster, Node, caps_for_three};

fn vkml(args: &[&str]) -> Output {
    Command::new(BIN).args(args).output().unwrap()
}

fn text(o: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

fn ok(args: &[&str]) -> String {
    let o = vkml(args);
    let (out, err) = text(&o);
    assert!(
        o.status.success(),
        "vkml-node {args:?} failed:\n{out}\n{err}"
    );
    out
}

fn fails(args: &[&str], says: &str) {
    let o = vkml(args);
    let (out, err) = text(&o);
    assert!(
        !o.status.success(),
        "vkml-node {args:?} should fail:\n{out}"
    );
    assert!(
        err.starts_with("error: "),
        "a clean error, not a panic: {err}"
    );
    assert!(err.contains(says), "the error should say '{says}': {err}");
}

fn s(p: &Path) -> String {
    p.to_string_lossy().into_owned()
}

#[test]
fn plan_and_submit_from_the_command_line() {
    let _serial = cluster_harness::serial();
    let model = common::fixture("mlp").join("model.onnx");
    let caps = caps_for_three(&model);
    let cluster = Cluster::new("cli-submit");
    let mut nodes: Vec<Node> = Vec::new();
    for (i, cap) in caps.iter().enumerate() {
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
    .expect("the cluster converges");
    std::thread::sleep(Duration::from_millis(500));
    let key = s(&cluster.key);
    let to = nodes[1].addr.clone();
    let m = s(&model);

    // Where it would go, asked live and offline (over `status --json`, planned from the node
    // asked): the same plan.
    let live = ok(&["plan", &m, "--to", &to, "--cluster-key", &key]);
    assert!(live.contains("3 node(s)"), "{live}");
    assert!(
        live.contains("cut edges") && live.contains("layer1 (Gemm)"),
        "{live}"
    );
    let status = ok(&["status", "--json", "--to", &to, "--cluster-key", &key]);
    let file: PathBuf = cluster.dir.join("cluster.json");
    std::fs::write(&file, status).unwrap();
    let offline = ok(&["plan", &m, "--cluster", &s(&file), "--from", "n2"]);
    assert_eq!(
        live.lines().next(),
        offline.lines().next(),
        "the same membership gives the same plan (hash) live and offline"
    );
    // A member that is not there is named as such.
    fails(
        &["plan", &m, "--cluster", &s(&file), "--from", "n9"],
        "no alive member",
    );

    // Submitted to the second node: outputs as `run` writes them, equal to onnxruntime's.
    let set = &common::data_sets("mlp")[1];
    let out = cluster.dir.join("out");
    let printed = ok(&[
        "submit",
        &m,
        "--to",
        &to,
        "--cluster-key",
        &key,
        "--test-data",
        &s(&set.dir),
        "--output-dir",
        &s(&out),
        "--repeat",
        "6",
        "--concurrency",
        "3",
    ]);
    assert!(
        printed.contains("3 node(s)"),
        "submit prints where each part ran: {printed}"
    );
    assert!(
        printed.contains("latency over 6 runs (concurrency 3)"),
        "{printed}"
    );
    for (name, want) in &set.outputs {
        let got = vkml::io::read_npy(&out.join(format!("{name}.npy"))).unwrap();
        common::assert_tensor_close(&format!("submitted output {name}"), &got, want);
    }

    // Bad input: clear errors, never a panic or a hang.
    fails(&["submit", &m, "--to", &to], "--cluster-key");
    fails(
        &[
            "submit",
            "/nonexistent.onnx",
            "--to",
            &to,
            "--cluster-key",
            &key,
        ],
        "nonexistent.onnx",
    );
    let garbage = cluster.dir.join("garbage.onnx");
    std::fs::write(&garbage, b"not a model").unwrap();
    fails(
        &["submit", &s(&garbage), "--to", &to, "--cluster-key", &key],
        "cannot load",
    );
    fails(
        &[
            "submit",
            &m,
            "--to",
            &to,
            "--cluster-key",
            &key,
            "--input",
            "nope=x.npy",
        ],
        "",
    );
    fails(&["plan", &m], "--to");
}
