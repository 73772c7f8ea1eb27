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

/// `run --profile` on `device`: every compute node of the MNIST CNN has one row, with its op
/// type and where it ran (`on`), and the shares add up to about 100%.
fn profile_lists_every_node_once(device: &str, on: &str) {
    let (stdout, _) = run_test_data_with(
        &format!("profile-{on}"),
        "mnist_cnn",
        0,
        device,
        &["--repeat", "4", "--profile"],
    );
    assert!(
        stdout.contains("profile of the ops over 4 runs"),
        "no profile header in:\n{stdout}"
    );
    // generate_models.py names the nodes.
    let rows: Vec<Vec<&str>> = stdout
        .lines()
        .filter(|l| l.trim_end().ends_with('%'))
        .map(|l| l.split_whitespace().collect())
        .collect();
    // On the CPU alone each convolution and its Relu are one FusedConv (graph/fuse_conv.rs).
    let (conv1, conv2, conv) = if on == "cpu" {
        ("fused(conv1..relu1)", "fused(conv2..relu2)", "FusedConv")
    } else {
        ("conv1", "conv2", "Conv")
    };
    for (node, op) in [
        (conv1, conv),
        ("pool1", "MaxPool"),
        (conv2, conv),
        ("fc1", "Gemm"),
        ("fc2", "Gemm"),
    ] {
        let found: Vec<_> = rows.iter().filter(|r| r[0] == node).collect();
        assert_eq!(found.len(), 1, "{node} in:\n{stdout}");
        assert_eq!(found[0][1..3], [op, on], "{stdout}");
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
fn profile_lists_every_cpu_node_once_with_its_run_count() {
    profile_lists_every_node_once("cpu", "cpu");
}

#[test]
fn profile_times_gpu_ops_from_timestamps() {
    if common::skip_vulkan() {
        return;
    }
    profile_lists_every_node_once("vulkan:0", "gpu");
}

#[test]
fn missing_model_fails_cleanly() {
    let model = fixture_str("no_such_model.onnx");
    let err = assert_clean_failure(&["run", &model, "--device", "cpu"]);
    assert!(
        err.contains("no_such_model.onnx"),
        "stderr does not name the file:\n{err}"
    );
    // The cause once: the message quotes it, and the error chain printed whole said it again.
    assert_eq!(err.matches("No such file").count(), 1, "{err}");
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
    assert!(
        err.contains("'MaxRoiPool'"),
        "stderr does not name the op:\n{err}"
    );
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

use common::onnx as mk;

/// Runs `vkml-node args`, failing the test (not hanging the suite) when it takes longer than
/// `secs`: the cases below hung forever before.
fn run_within(args: &[&str], secs: u64) -> Output {
    let mut child = Command::new(BIN)
        .args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(secs);
    while child.try_wait().unwrap().is_none() {
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            panic!("vkml-node {args:?} hung for {secs} s:\n{}", text(&out).1);
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

fn clean_failure_within(args: &[&str], secs: u64) -> String {
    let out = run_within(args, secs);
    let (stdout, stderr) = text(&out);
    assert!(
        !out.status.success(),
        "{args:?} succeeded:\n{stdout}\n{stderr}"
    );
    assert_ne!(out.status.code(), Some(101), "{args:?} panicked:\n{stderr}");
    assert!(!stderr.contains("panicked"), "{args:?} panicked:\n{stderr}");
    stderr
}

/// y/0 = Relu(x) and y:0 = Neg(x), x: float[3]; written with x.npy beside it.
fn two_outputs_named_alike(dir: &Path) -> (String, String) {
    let g = mk::GraphProto {
        name: "g".into(),
        node: vec![
            mk::node("Relu", "relu", &["x"], &["y/0"]),
            mk::node("Neg", "neg", &["x"], &["y:0"]),
        ],
        input: vec![mk::value("x", mk::FLOAT, Some(&[3]))],
        output: vec![
            mk::value("y/0", mk::FLOAT, None),
            mk::value("y:0", mk::FLOAT, None),
        ],
        ..Default::default()
    };
    let model = mk::write(dir, "m.onnx", &mk::model(g, 17));
    let x = dir.join("x.npy");
    let t = vkml::Tensor::from_vec(vec![3], vec![-1.0f32, 0.5, 2.0]);
    vkml::io::write_npy(&x, &t).unwrap();
    (
        model.to_string_lossy().into_owned(),
        format!("x={}", x.display()),
    )
}

fn npy_values(path: &Path) -> Vec<f32> {
    let t = vkml::io::read_npy(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    t.view::<f32>().unwrap().to_vec()
}

/// `y/0` and `y:0` both became `y_0.npy`, and one output was lost with exit 0. Each now has a
/// file of its own: the first keeps `y_0.npy`, the second gets `y_0_2.npy`, every time.
#[test]
fn outputs_whose_names_sanitise_alike_each_get_a_file() {
    let dir = mk::scratch("alike");
    let (model, input) = two_outputs_named_alike(&dir);
    let out = dir.join("out");
    let out_s = out.to_string_lossy().into_owned();
    let args = [
        "run",
        &model,
        "--input",
        &input,
        "--output-dir",
        &out_s,
        "--device",
        "cpu",
    ];
    let result = vkml_node(&args);
    assert_success(&args, &result);
    assert_eq!(npy_values(&out.join("y_0.npy")), [0.0, 0.5, 2.0]);
    assert_eq!(npy_values(&out.join("y_0_2.npy")), [1.0, -0.5, -2.0]);
    let stdout = text(&result).0;
    assert!(stdout.contains("y_0_2.npy"), "{stdout}");
}

/// Outputs were written in place one by one: a failure on the second left the first written
/// (a half set) or truncated. Now nothing is renamed into place until every file is complete
/// and every destination is known to take it.
#[test]
fn a_failed_write_leaves_no_partial_set_and_no_truncated_file() {
    let dir = mk::scratch("partial");
    let (model, input) = two_outputs_named_alike(&dir);
    let out = dir.join("out");
    std::fs::create_dir_all(out.join("y_0_2.npy")).unwrap();
    std::fs::write(out.join("y_0.npy"), b"earlier run").unwrap();
    let out_s = out.to_string_lossy().into_owned();
    let err = clean_failure_within(
        &[
            "run",
            &model,
            "--input",
            &input,
            "--output-dir",
            &out_s,
            "--device",
            "cpu",
        ],
        120,
    );
    assert!(err.contains("y_0_2.npy"), "{err}");
    assert_eq!(std::fs::read(out.join("y_0.npy")).unwrap(), b"earlier run");
    let mut names: Vec<String> = std::fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, ["y_0.npy", "y_0_2.npy"], "no temporary file is left");
}

/// A FIFO given as the model, an input, an external-data file or a key file blocked forever
/// in open(); `--cluster-key /dev/zero` read until memory ran out. Each is now refused at once.
#[test]
fn fifos_and_devices_are_refused_not_waited_on() {
    let dir = mk::scratch("fifo");
    let (model, _) = two_outputs_named_alike(&dir);
    let fifo = dir.join("fifo.npy");
    if !mk::mkfifo(&fifo) {
        eprintln!("no mkfifo here: skipped");
        return;
    }
    let fifo_s = fifo.to_string_lossy().into_owned();
    let err = clean_failure_within(&["run", &fifo_s, "--device", "cpu"], 60);
    assert!(err.contains("FIFO"), "model: {err}");
    let input = format!("x={fifo_s}");
    let err = clean_failure_within(&["run", &model, "--input", &input, "--device", "cpu"], 60);
    assert!(err.contains("FIFO"), "input: {err}");
    let key = ["status", "--to", "127.0.0.1:9", "--cluster-key"];
    let err = clean_failure_within(&[&key[..], &[&fifo_s]].concat(), 60);
    assert!(err.contains("FIFO"), "key: {err}");
    let err = clean_failure_within(&[&key[..], &["/dev/zero"]].concat(), 60);
    assert!(err.contains("character device"), "key: {err}");

    // y = x + w, w in external data "w.bin", a FIFO.
    let ext = dir.join("ext");
    std::fs::create_dir_all(&ext).unwrap();
    assert!(mk::mkfifo(&ext.join("w.bin")));
    let mut w = mk::floats("w", &[3], &[]);
    w.data_location = 1;
    w.external_data = vec![mk::StringStringEntryProto {
        key: "location".into(),
        value: "w.bin".into(),
    }];
    let g = mk::GraphProto {
        name: "g".into(),
        node: vec![mk::node("Add", "add", &["x", "w"], &["y"])],
        initializer: vec![w],
        input: vec![mk::value("x", mk::FLOAT, Some(&[3]))],
        output: vec![mk::value("y", mk::FLOAT, None)],
    };
    let m = mk::write(&ext, "m.onnx", &mk::model(g, 17));
    let err = clean_failure_within(&["run", &m.to_string_lossy(), "--device", "cpu"], 60);
    assert!(
        err.contains("w.bin") && err.contains("FIFO"),
        "external data: {err}"
    );
}

/// `plan` with `--test-data` or `--input` folded the whole model (every input's value known)
/// and printed an empty "0 node(s)" plan with exit 0. It now plans at the inputs' shapes.
#[test]
fn plan_with_inputs_plans_the_model() {
    let dir = mk::scratch("plan-inputs");
    let cluster = dir.join("cluster.json");
    std::fs::write(
        &cluster,
        r#"{"members": [{"name": "n1", "devices": [
            {"name": "cpu", "kind": "cpu", "memory_budget": 8000000000, "flops_per_us": 10000}
        ]}]}"#,
    )
    .unwrap();
    let cluster = cluster.to_string_lossy().into_owned();
    let model = fixture_str("mnist_cnn/model.onnx");
    let data = fixture_str("mnist_cnn/test_data_set_0");
    let input = format!("input={}", fixture_str("mnist_cnn/input_0.npy"));
    for given in [["--test-data", &data], ["--input", &input]] {
        let args = [&["plan", &model, "--cluster", &cluster][..], &given[..]].concat();
        let out = vkml_node(&args);
        assert_success(&args, &out);
        let stdout = text(&out).0;
        // A CPU-only cluster plans the convolutions fused with their Relus.
        assert!(
            stdout.contains(": 1 node(s)") && stdout.contains("(FusedConv)"),
            "{given:?}:\n{stdout}"
        );
    }
}

/// ConstantOfShape [2^62 + 1, 4] has 2^64 + 4 elements, which wrapped to 4: `run` wrote an
/// .npy numpy cannot load, with exit 0. Now the run fails naming the node.
#[test]
fn a_shape_that_wraps_fails_the_run_naming_the_node() {
    let dir = mk::scratch("wrap");
    let g = mk::GraphProto {
        name: "g".into(),
        node: vec![mk::node("ConstantOfShape", "fill", &["shape"], &["y"])],
        initializer: vec![mk::int64s("shape", &[2], &[(1 << 62) + 1, 4])],
        output: vec![mk::value("y", mk::FLOAT, None)],
        ..Default::default()
    };
    let m = mk::write(&dir, "m.onnx", &mk::model(g, 17));
    let out = dir.join("out").to_string_lossy().into_owned();
    let err = clean_failure_within(
        &[
            "run",
            &m.to_string_lossy(),
            "--output-dir",
            &out,
            "--device",
            "cpu",
        ],
        120,
    );
    assert!(
        err.contains("'fill'") && err.contains("4611686018427387905"),
        "{err}"
    );
    assert!(!dir.join("out").join("y.npy").exists());
}
