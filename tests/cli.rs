//! The `vkml-node` program as a user runs it: output files, input files, device listing,
//! latency summary, and clean failures (a message on stderr, a non-zero exit, no panic).

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const BIN: &str = env!("CARGO_BIN_EXE_vkml-node");

fn vkml_node(args: &[&str]) -> Output {
    Command::new(BIN)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("starting {BIN}: {e}"))
}

fn text(out: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn assert_success(args: &[&str], out: &Output) {
    let (stdout, stderr) = text(out);
    assert!(
        out.status.success(),
        "vkml-node {args:?} failed ({}):\nstdout:\n{stdout}\nstderr:\n{stderr}",
        out.status
    );
}

/// Fails with a message on stderr and no panic (a panic exits with 101 and says "panicked").
fn assert_clean_failure(args: &[&str]) -> String {
    let out = vkml_node(args);
    let (stdout, stderr) = text(&out);
    assert!(
        !out.status.success(),
        "vkml-node {args:?} succeeded on bad input:\n{stdout}\n{stderr}"
    );
    assert_ne!(
        out.status.code(),
        Some(101),
        "vkml-node {args:?} panicked:\n{stderr}"
    );
    assert!(
        !stderr.contains("panicked") && !stdout.contains("panicked"),
        "vkml-node {args:?} panicked:\n{stderr}"
    );
    assert!(
        !stderr.trim().is_empty(),
        "vkml-node {args:?} failed silently"
    );
    stderr
}

/// A fresh, not yet existing directory under cargo's per-target scratch space.
fn out_dir(test: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("cli-{test}"));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

/// The file name the CLI gives an output: every character outside [A-Za-z0-9_.-] becomes '_'.
fn sanitised(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "_-.".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect()
}

fn fixture_str(rel: &str) -> String {
    common::fixtures_dir()
        .join(rel)
        .to_string_lossy()
        .into_owned()
}

/// Every reference output has its .npy in `dir` under its sanitised name, and nothing else is
/// there.
fn check_npy_outputs(dir: &Path, want: &[(String, vkml::Tensor)]) {
    let mut files: Vec<String> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    files.sort();
    let mut expected: Vec<String> = want
        .iter()
        .map(|(n, _)| format!("{}.npy", sanitised(n)))
        .collect();
    expected.sort();
    assert_eq!(files, expected, "files in {}", dir.display());
    for (name, reference) in want {
        let path = dir.join(format!("{}.npy", sanitised(name)));
        let got = vkml::io::read_npy(path.as_path())
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        common::assert_tensor_close(&path.display().to_string(), &got, reference);
    }
}

/// Runs a fixture's test data set with `extra` arguments, checks the written outputs against
/// its references, and returns (stdout, stderr).
fn run_test_data_with(
    test: &str,
    fixture: &str,
    set: usize,
    device: &str,
    extra: &[&str],
) -> (String, String) {
    let out = out_dir(test);
    let model = fixture_str(&format!("{fixture}/model.onnx"));
    let data = fixture_str(&format!("{fixture}/test_data_set_{set}"));
    let out_s = out.to_string_lossy().into_owned();
    let mut args = vec![
        "run",
        &model,
        "--test-data",
        &data,
        "--output-dir",
        &out_s,
        "--device",
        device,
    ];
    args.extend_from_slice(extra);
    let output = vkml_node(&args);
    assert_success(&args, &output);
    check_npy_outputs(&out, &common::data_sets(fixture)[set].outputs);
    text(&output)
}

fn run_test_data(test: &str, fixture: &str, set: usize, device: &str) {
    run_test_data_with(test, fixture, set, device, &[]);
}

#[test]
fn run_test_data_on_cpu_writes_npy_outputs() {
    run_test_data("test-data-cpu", "mnist_cnn", 0, "cpu");
}

#[test]
fn run_test_data_on_vulkan_writes_npy_outputs() {
    if common::skip_vulkan() {
        return;
    }
    run_test_data("test-data-vulkan", "mnist_cnn", 1, "vulkan");
    run_test_data("test-data-vulkan0", "mlp", 2, "vulkan:0");
}

#[test]
fn run_test_data_on_auto() {
    if common::skip_vulkan() {
        return;
    }
    run_test_data("test-data-auto", "mnist_cnn_dynamic", 1, "auto");
}

#[test]
fn output_names_with_slash_and_colon_are_sanitised() {
    run_test_data("sanitise", "output_names", 0, "cpu");
}

fn run_with_input(test: &str, fixture: &str, input: &str, file: &str, set: usize) {
    let out = out_dir(test);
    let model = fixture_str(&format!("{fixture}/model.onnx"));
    let spec = format!("{input}={}", fixture_str(file));
    let out_s = out.to_string_lossy().into_owned();
    let args = [
        "run",
        &model,
        "--input",
        &spec,
        "--output-dir",
        &out_s,
        "--device",
        "cpu",
    ];
    assert_success(&args, &vkml_node(&args));
    check_npy_outputs(&out, &common::data_sets(fixture)[set].outputs);
}

#[test]
fn input_from_npy() {
    run_with_input(
        "input-npy",
        "mnist_cnn",
        "input",
        "mnist_cnn/input_0.npy",
        0,
    );
}

#[test]
fn input_from_pb() {
    let file = "mnist_cnn/test_data_set_2/input_0.pb";
    run_with_input("input-pb", "mnist_cnn", "input", file, 2);
}

/// The name holds ':'; the file path follows the first '='.
#[test]
fn input_name_with_colon() {
    let file = "output_names/test_data_set_0/input_0.pb";
    run_with_input("input-colon", "output_names", "input:0", file, 0);
}

#[test]
fn devices_lists_cpu_and_lavapipe() {
    let args = ["devices"];
    let out = vkml_node(&args);
    assert_success(&args, &out);
    let listing = text(&out).0.to_lowercase();
    assert!(listing.contains("cpu"), "no CPU in:\n{listing}");
    if !common::skip_vulkan() {
        assert!(
            listing.contains("llvmpipe") || listing.contains("lavapipe"),
            "no lavapipe (llvmpipe) in:\n{listing}"
        );
    }
}

#[test]
fn repeat_prints_a_latency_summary() {
    let (stdout, stderr) = run_test_data_with("repeat", "mlp", 0, "cpu", &["--repeat", "5"]);
    let all = format!("{stdout}\n{stderr}").to_lowercase();
    assert!(
        ["median", "mean", "p50", "avg", "latency"]
            .iter()
            .any(|w| all.contains(w)),
        "no latency summary in:\n{all}"
    );
    assert!(
        ["ms", "µs", "us", "ns"].iter().any(|u| all.contains(u)),
        "no time unit in:\n{all}"
    );
}

#[test]
fn profile_lists_every_cpu_node_once_with_its_run_count() {
    let (stdout, _) = run_test_data_with(
        "profile",
        "mnist_cnn",
        0,
        "cpu",
        &["--repeat", "4", "--profile"],
    );
    assert!(
        stdout.contains("profile of the CPU ops over 4 runs"),
        "no profile header in:\n{stdout}"
    );
    // Every compute node of the model (generate_models.py names them) has one row, with
    // its op type, and the shares add up to about 100%.
    let rows: Vec<Vec<&str>> = stdout
        .lines()
        .filter(|l| l.trim_end().ends_with('%'))
        .map(|l| l.split_whitespace().collect())
        .collect();
    for (node, op) in [
        ("conv1", "Conv"),
        ("pool1", "MaxPool"),
        ("conv2", "Conv"),
        ("fc1", "Gemm"),
        ("fc2", "Gemm"),
    ] {
        let found: Vec<_> = rows.iter().filter(|r| r[0] == node).collect();
        assert_eq!(found.len(), 1, "{node} in:\n{stdout}");
        assert_eq!(found[0][1], op, "{stdout}");
    }
    let share: f64 = rows
        .iter()
        .map(|r| r[r.len() - 1].trim_end_matches('%').parse::<f64>().unwrap())
        .sum();
    assert!(
        (share - 100.0).abs() < 1.0,
        "shares add up to {share}:\n{stdout}"
    );
}

#[test]
fn missing_model_fails_cleanly() {
    let model = fixture_str("no_such_model.onnx");
    let err = assert_clean_failure(&["run", &model, "--device", "cpu"]);
    assert!(
        err.contains("no_such_model.onnx"),
        "stderr does not name the file:\n{err}"
    );
}

#[test]
fn truncated_model_fails_cleanly() {
    let model = fixture_str("malformed/truncated.onnx");
    let data = fixture_str("mnist_cnn/test_data_set_0");
    assert_clean_failure(&["run", &model, "--test-data", &data, "--device", "cpu"]);
}

#[test]
fn unsupported_op_fails_cleanly() {
    let out = out_dir("unsupported");
    let model = fixture_str("malformed/unsupported_op.onnx");
    let input = format!("x={}", fixture_str("mlp/test_data_set_0/input_0.pb"));
    let out_s = out.to_string_lossy().into_owned();
    let err = assert_clean_failure(&[
        "run",
        &model,
        "--input",
        &input,
        "--output-dir",
        &out_s,
        "--device",
        "cpu",
    ]);
    assert!(err.contains("'Det'"), "stderr does not name the op:\n{err}");
}

fn mnist_with_input(test: &str, spec: &str) -> String {
    let out = out_dir(test);
    let model = fixture_str("mnist_cnn/model.onnx");
    let out_s = out.to_string_lossy().into_owned();
    assert_clean_failure(&[
        "run",
        &model,
        "--input",
        spec,
        "--output-dir",
        &out_s,
        "--device",
        "cpu",
    ])
}

#[test]
fn input_that_is_not_a_tensor_fails_cleanly() {
    for file in ["malformed/not_a_tensor.pb", "malformed/not_a_tensor.npy"] {
        let err = mnist_with_input("not-tensor", &format!("input={}", fixture_str(file)));
        assert!(
            err.contains("not_a_tensor"),
            "stderr does not name the file:\n{err}"
        );
    }
}

#[test]
fn missing_input_file_fails_cleanly() {
    mnist_with_input(
        "no-file",
        &format!("input={}", fixture_str("no_such_input.npy")),
    );
}

#[test]
fn wrong_shape_input_fails_cleanly() {
    let spec = format!("input={}", fixture_str("malformed/wrong_shape_input.pb"));
    mnist_with_input("wrong-shape", &spec);
}

#[test]
fn wrong_dtype_input_fails_cleanly() {
    let spec = format!("input={}", fixture_str("malformed/wrong_dtype_input.pb"));
    mnist_with_input("wrong-dtype", &spec);
}

#[test]
fn unknown_input_name_fails_cleanly() {
    let spec = format!("no_such_input={}", fixture_str("mnist_cnn/input_0.npy"));
    let err = mnist_with_input("unknown-name", &spec);
    assert!(
        err.contains("no_such_input"),
        "stderr does not name the input:\n{err}"
    );
}

#[test]
fn input_without_equals_fails_cleanly() {
    mnist_with_input("no-equals", &fixture_str("mnist_cnn/input_0.npy"));
}

#[test]
fn missing_input_fails_cleanly() {
    let model = fixture_str("mnist_cnn/model.onnx");
    assert_clean_failure(&["run", &model, "--device", "cpu"]);
}

#[test]
fn bad_device_fails_cleanly() {
    let model = fixture_str("mnist_cnn/model.onnx");
    let data = fixture_str("mnist_cnn/test_data_set_0");
    for device in ["gpu-of-dreams", "vulkan:99", "vulkan:x"] {
        assert_clean_failure(&["run", &model, "--test-data", &data, "--device", device]);
    }
}

#[test]
fn missing_test_data_dir_fails_cleanly() {
    let model = fixture_str("mnist_cnn/model.onnx");
    let data = fixture_str("mnist_cnn/test_data_set_99");
    assert_clean_failure(&["run", &model, "--test-data", &data, "--device", "cpu"]);
}

#[test]
fn unknown_subcommand_fails_cleanly() {
    assert_clean_failure(&["frobnicate"]);
}

/// `VKML_FUSION=0` turns the fusion pass off: the 16-op elementwise chain plans as 16 ops,
/// fused as 2 where a GPU runs it, and both match onnxruntime's outputs. The CPU backend alone
/// never fuses (it would run the steps one by one anyway).
#[test]
fn fusion_switch_changes_the_plan_not_the_result() {
    let mut devices = vec!["cpu"];
    if !common::skip_vulkan() {
        devices.push("vulkan");
    }
    for device in devices {
        let fused = if device == "cpu" { 16 } else { 2 };
        for (fusion, ops) in [(Some("0"), 16), (None, fused), (Some("1"), fused)] {
            let out = out_dir(&format!("fusion-{device}-{}", fusion.unwrap_or("default")));
            let model = fixture_str("elementwise_chain/model.onnx");
            let data = fixture_str("elementwise_chain/test_data_set_0");
            let out_s = out.to_string_lossy().into_owned();
            let args = [
                "run",
                &model,
                "--test-data",
                &data,
                "--output-dir",
                &out_s,
                "--device",
                device,
            ];
            let mut cmd = Command::new(BIN);
            cmd.args(args);
            match fusion {
                Some(v) => cmd.env("VKML_FUSION", v),
                None => cmd.env_remove("VKML_FUSION"),
            };
            let result = cmd.output().unwrap();
            assert_success(&args, &result);
            let (stdout, stderr) = text(&result);
            let want = format!("plan: {ops} ops on");
            assert!(
                stdout.contains(&want) || stderr.contains(&want),
                "VKML_FUSION={fusion:?} on {device}: no '{want}' in\n{stdout}\n{stderr}"
            );
            check_npy_outputs(&out, &common::data_sets("elementwise_chain")[0].outputs);
        }
    }
}
