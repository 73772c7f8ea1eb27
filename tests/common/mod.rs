//! Shared by the integration tests: reading fixtures in ONNX's test layout, running them through
//! a `Session`, and comparing with onnxruntime's reference outputs.
//!
//! Each test binary uses a different subset of these helpers.
#![allow(dead_code)]

pub mod onnx;

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use vkml::{DType, DeviceSelection, Session, SessionOptions, Tensor};

/// Relative and absolute tolerance for float outputs: |got - want| <= REL * |want| + ABS.
pub const REL: f64 = 1e-4;
pub const ABS: f64 = 1e-5;

pub fn fixtures_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests")
        .join("fixtures")
}

pub fn fixture(name: &str) -> PathBuf {
    fixtures_dir().join(name)
}

pub fn model_path(name: &str) -> PathBuf {
    fixture(name).join("model.onnx")
}

pub fn malformed(file: &str) -> PathBuf {
    fixtures_dir().join("malformed").join(file)
}

/// Set VKML_SKIP_VULKAN=1 on a machine with no Vulkan driver; otherwise a missing device fails
/// the Vulkan tests rather than silently passing them.
pub fn skip_vulkan() -> bool {
    let skip = std::env::var("VKML_SKIP_VULKAN").is_ok_and(|v| v == "1");
    if skip {
        eprintln!("VKML_SKIP_VULKAN=1: skipping a Vulkan test");
    }
    skip
}

/// One `test_data_set_<k>`: inputs and reference outputs, each in index order with its name.
#[derive(Debug, Clone)]
pub struct DataSet {
    pub dir: PathBuf,
    pub inputs: Vec<(String, Tensor)>,
    pub outputs: Vec<(String, Tensor)>,
}

impl DataSet {
    /// The inputs in the shape `Session::run` takes.
    pub fn feeds(&self) -> Vec<(&str, Tensor)> {
        feeds(&self.inputs)
    }
}

pub fn feeds(inputs: &[(String, Tensor)]) -> Vec<(&str, Tensor)> {
    inputs
        .iter()
        .map(|(n, t)| (n.as_str(), t.clone()))
        .collect()
}

/// `<prefix>_0.pb`, `<prefix>_1.pb`, ... until the first missing index.
fn read_numbered(dir: &Path, prefix: &str) -> Vec<(String, Tensor)> {
    let mut out = Vec::new();
    for i in 0.. {
        let path = dir.join(format!("{prefix}_{i}.pb"));
        if !path.exists() {
            break;
        }
        let tensor = vkml::io::read_pb(path.as_path())
            .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
        out.push(tensor);
    }
    out
}

pub fn read_data_set(dir: &Path) -> DataSet {
    let inputs = read_numbered(dir, "input");
    let outputs = read_numbered(dir, "output");
    assert!(!outputs.is_empty(), "{}: no output_<j>.pb", dir.display());
    DataSet {
        dir: dir.to_path_buf(),
        inputs,
        outputs,
    }
}

/// Every `test_data_set_<k>` of a fixture, in numeric order.
pub fn data_sets(name: &str) -> Vec<DataSet> {
    data_sets_in(&fixture(name))
}

/// Every `test_data_set_<k>` of the folder `dir`, in numeric order.
pub fn data_sets_in(dir: &Path) -> Vec<DataSet> {
    let dir = dir.to_path_buf();
    let mut sets: Vec<(usize, PathBuf)> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .filter_map(|e| {
            let e = e.ok()?;
            let k = e
                .file_name()
                .to_str()?
                .strip_prefix("test_data_set_")?
                .parse()
                .ok()?;
            Some((k, e.path()))
        })
        .collect();
    sets.sort();
    assert!(!sets.is_empty(), "{}: no test_data_set_<k>", dir.display());
    sets.iter().map(|(_, p)| read_data_set(p)).collect()
}

/// The fixture folders that hold a model and reference data (all but `malformed/`).
pub fn all_fixture_names() -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(fixtures_dir())
        .expect("tests/fixtures")
        .filter_map(|e| {
            let e = e.ok()?;
            e.path()
                .join("model.onnx")
                .exists()
                .then(|| e.file_name().to_string_lossy().into_owned())
        })
        .collect();
    names.sort();
    names
}

/// Session options for a test. On a machine with several GPUs (benches/multi-gpu.sh),
/// VKML_TEST_VULKAN=vulkan:1 points the tests that ask for `vulkan` at that GPU instead.
pub fn options(devices: DeviceSelection, device_memory_limit: Option<u64>) -> SessionOptions {
    let devices = match std::env::var("VKML_TEST_VULKAN") {
        Ok(s) if devices == DeviceSelection::Vulkan => s
            .parse()
            .unwrap_or_else(|e| panic!("VKML_TEST_VULKAN={s}: {e}")),
        _ => devices,
    };
    SessionOptions {
        devices,
        device_memory_limit,
        ..Default::default()
    }
}

pub fn load(name: &str, devices: DeviceSelection) -> Session {
    let path = model_path(name);
    Session::load(&path, options(devices, None))
        .unwrap_or_else(|e| panic!("loading {} on {devices:?}: {e}", path.display()))
}

/// Runs one data set and compares every output with its reference.
pub fn run_and_check(session: &Session, set: &DataSet, context: &str) {
    let got = session
        .run(&set.feeds())
        .unwrap_or_else(|e| panic!("{context}: running {}: {e}", set.dir.display()));
    assert_outputs_match(
        &format!("{context} {}", set.dir.display()),
        &got,
        &set.outputs,
    );
}

/// Loads a fixture on `devices` and checks every data set against the references.
pub fn check_fixture(name: &str, devices: DeviceSelection) {
    check_dir(&fixture(name), devices);
}

/// The same for a fixture folder anywhere (model.onnx beside its test_data_set_<k>).
pub fn check_dir(dir: &Path, devices: DeviceSelection) {
    let path = dir.join("model.onnx");
    let session = Session::load(&path, options(devices, test_split_limit(dir, devices)))
        .unwrap_or_else(|e| panic!("loading {} on {devices:?}: {e}", path.display()));
    for set in data_sets_in(dir) {
        run_and_check(&session, &set, &format!("{} on {devices:?}", dir.display()));
    }
}

/// VKML_TEST_SPLIT=1, on a machine with several GPUs (benches/multi-gpu.sh): the `vulkan` tests
/// cap each device at the smallest of a quarter of the model's folder and each step a quarter
/// larger under which its first data set plans, and that plan must use two GPUs or more
/// (printed, for the record).
fn test_split_limit(dir: &Path, devices: DeviceSelection) -> Option<u64> {
    if std::env::var("VKML_TEST_SPLIT").ok()? != "1" || devices != DeviceSelection::Vulkan {
        return None;
    }
    let path = dir.join("model.onnx");
    let bytes: u64 = std::fs::read_dir(dir)
        .ok()?
        .filter_map(|e| e.ok()?.metadata().ok())
        .filter(|m| m.is_file())
        .map(|m| m.len())
        .sum();
    let sets = data_sets_in(dir);
    let mut cap = (bytes / 4).max(1);
    for _ in 0..60 {
        // Every data set must plan under the cap (a dynamic model's sets differ in size); the
        // largest plan is the one reported.
        let planned: Result<Vec<_>, _> = Session::load(&path, options(devices, Some(cap)))
            .and_then(|s| {
                sets.iter()
                    .map(|set| s.plan_summary(&set.feeds()))
                    .collect()
            });
        if let Ok(summaries) = planned {
            let summary = summaries
                .into_iter()
                .max_by_key(|s| s.chunks)
                .expect("a data set");
            let gpus = summary.ops_per_device.keys();
            let gpus = gpus.filter(|d| d.starts_with("vulkan:")).count();
            // A model of sequences or optionals is planned per input structure and reports no
            // tensor plan here: nothing to assert of it.
            assert!(
                gpus >= 2 || summary.ops_per_device.is_empty(),
                "{}: the smallest cap that plans, {cap} bytes, uses {summary:?}",
                dir.display()
            );
            eprintln!("split {}: cap {cap} bytes: {summary:?}", dir.display());
            return Some(cap);
        }
        cap += cap / 4;
    }
    panic!("{}: no cap up to {cap} bytes plans", dir.display())
}

/// tests/models/: the PyTorch-exported models of tests/generate/generate_models.py.
pub fn real_model_dir(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests")
        .join("models")
        .join(name)
}

/// Same names, in the same order, and each tensor within tolerance.
pub fn assert_outputs_match(context: &str, got: &[(String, Tensor)], want: &[(String, Tensor)]) {
    let got_names: Vec<&str> = got.iter().map(|(n, _)| n.as_str()).collect();
    let want_names: Vec<&str> = want.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(got_names, want_names, "{context}: output names and order");
    for ((name, g), (_, w)) in got.iter().zip(want) {
        assert_tensor_close(&format!("{context}: output '{name}'"), g, w);
    }
}

/// Same dtype and shape; floats within REL/ABS, everything else exact.
pub fn assert_tensor_close(context: &str, got: &Tensor, want: &Tensor) {
    assert_eq!(got.dtype(), want.dtype(), "{context}: dtype");
    assert_eq!(got.shape(), want.shape(), "{context}: shape");
    if want.dtype().is_float() {
        let g = got.to_f64_vec().expect("float tensor");
        let w = want.to_f64_vec().expect("float tensor");
        if let Some(report) = float_mismatches(&g, &w, want.shape()) {
            panic!("{context}: {report}");
        }
    } else if want.dtype() == DType::Bool {
        assert_eq!(
            got.view_bool().unwrap(),
            want.view_bool().unwrap(),
            "{context}: values"
        );
    } else {
        let g = got.to_i64_vec().expect("integer tensor");
        let w = want.to_i64_vec().expect("integer tensor");
        if g != w {
            let first = g.iter().zip(&w).position(|(a, b)| a != b).unwrap();
            panic!(
                "{context}: integer values differ, first at flat index {first}: got {} want {}\n got {g:?}\nwant {w:?}",
                g[first], w[first]
            );
        }
    }
}

/// None when every element is within tolerance; otherwise a report of the worst ones.
fn float_mismatches(got: &[f64], want: &[f64], shape: &[usize]) -> Option<String> {
    let mut bad: Vec<(usize, f64, f64, f64)> = Vec::new();
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        let ok = if w.is_nan() {
            g.is_nan()
        } else if w.is_infinite() {
            g == w
        } else {
            (g - w).abs() <= REL * w.abs() + ABS
        };
        if !ok {
            let excess = (g - w).abs() - (REL * w.abs() + ABS);
            bad.push((
                i,
                g,
                w,
                if excess.is_nan() {
                    f64::INFINITY
                } else {
                    excess
                },
            ));
        }
    }
    if bad.is_empty() {
        return None;
    }
    let count = bad.len();
    bad.sort_by(|a, b| b.3.total_cmp(&a.3));
    let mut report = format!(
        "{count} of {} elements outside |got - want| <= {REL:e}*|want| + {ABS:e} (shape {shape:?}); worst:",
        want.len()
    );
    for (i, g, w, _) in bad.iter().take(8) {
        let _ = write!(report, "\n  [{}] got {g} want {w}", unravel(*i, shape));
    }
    Some(report)
}

fn unravel(mut flat: usize, shape: &[usize]) -> String {
    let mut idx = vec![0; shape.len()];
    for (d, &n) in shape.iter().enumerate().rev() {
        if n > 0 {
            idx[d] = flat % n;
            flat /= n;
        }
    }
    idx.iter()
        .map(|i| i.to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

/// Float tensors stacked along axis 0 (for batching single-image references).
pub fn concat_batch(parts: &[&Tensor]) -> Tensor {
    let mut shape = parts[0].shape().to_vec();
    shape[0] = parts.iter().map(|t| t.shape()[0]).sum();
    let mut values = Vec::new();
    for t in parts {
        assert_eq!(t.shape()[1..], parts[0].shape()[1..]);
        values.extend(t.view::<f32>().expect("f32 tensor").iter().copied());
    }
    Tensor::from_vec(shape, values)
}

/// The devices a session may use and a memory cap that makes the plan use both the CPU and the
/// first Vulkan GPU.
pub struct Split {
    pub limit: u64,
    pub summary: vkml::session::PlanSummary,
}

/// Caps tried, as fractions of the model file's size (weights dominate it). Which of them
/// splits depends on how the planner accounts for activations and where the big weights sit,
/// so several are tried; the caller asserts that at least one splits.
const SPLIT_FRACTIONS: [(u64, u64); 6] = [(7, 8), (3, 4), (1, 2), (1, 3), (1, 5), (1, 10)];

/// Every cap of `SPLIT_FRACTIONS` under which the model loads on Auto, with the plan it gets.
/// A cap so tight that no device can hold some op must fail with `Error::Placement`; any other
/// error fails the test.
pub fn plans_under_caps(name: &str, set: &DataSet) -> Vec<Split> {
    let path = model_path(name);
    let file_len = std::fs::metadata(&path).expect("model file").len();
    let mut plans = Vec::new();
    for (num, den) in SPLIT_FRACTIONS {
        let limit = file_len * num / den;
        let session = match Session::load(&path, options(DeviceSelection::Auto, Some(limit))) {
            Ok(s) => s,
            Err(vkml::Error::Placement(_)) => continue,
            Err(e) => panic!("{name}: load with device_memory_limit {limit}: {e}"),
        };
        let summary = match session.plan_summary(&set.feeds()) {
            Ok(s) => s,
            Err(vkml::Error::Placement(_)) => continue,
            Err(e) => panic!("{name}: plan_summary with device_memory_limit {limit}: {e}"),
        };
        // Whatever the placement, the results must not change.
        run_and_check(
            &session,
            set,
            &format!("{name} with device_memory_limit {limit}"),
        );
        plans.push(Split { limit, summary });
    }
    plans
}

pub fn is_split(summary: &vkml::session::PlanSummary) -> bool {
    let on = |d: &str| summary.ops_per_device.get(d).copied().unwrap_or(0) > 0;
    on("cpu") && on("vulkan:0")
}

/// A device-memory cap under which the model runs on both the CPU and vulkan:0.
pub fn split_limit(name: &str) -> u64 {
    let set = &data_sets(name)[0];
    let plans = plans_under_caps(name, set);
    let tried: Vec<String> = plans
        .iter()
        .map(|p| format!("{} -> {:?}", p.limit, p.summary))
        .collect();
    plans
        .iter()
        .find(|p| is_split(&p.summary))
        .map(|p| p.limit)
        .unwrap_or_else(|| {
            panic!("{name}: no device_memory_limit split the plan over cpu and vulkan:0; tried {tried:#?}")
        })
}

/// `graph`'s plan over CPU-only nodes of these names and memory caps, for inputs of `types`,
/// and the executable of the part that node `pick` (given the plan) runs: a cluster node's
/// fragment, run in process.
pub fn cpu_fragment(
    graph: vkml::graph::Graph,
    types: &[vkml::ops::ValueType],
    nodes: &[(&str, Option<u64>)],
    pick: impl FnOnce(&vkml_planner::Plan) -> String,
) -> std::sync::Arc<vkml::exec::Executable> {
    use vkml::exec::{Device, Executable, cost_graph, inventory};
    let spec = graph.specialize(types, &[]).unwrap();
    let (cost, kernels) = cost_graph(&graph, &spec, &Default::default());
    let mut snapshot = vkml_planner::Snapshot::default();
    for &(name, cap) in nodes {
        let devs = inventory(&[Device::Cpu], cap);
        snapshot
            .nodes
            .insert(name.into(), devs.nodes.into_values().next().unwrap());
    }
    let plan = vkml_planner::plan(&cost, &snapshot, &Default::default()).unwrap();
    let node = pick(&plan);
    std::sync::Arc::new(
        Executable::with_plan(
            std::sync::Arc::new(graph),
            spec,
            vec![Device::Cpu],
            plan,
            kernels,
            &node,
            vkml::exec::Launch {
                arm: false,
                bridge: true,
            },
            &[],
            None,
        )
        .unwrap(),
    )
}
