//! How fast this machine's devices are, measured: the figures the planner costs ops with
//! (`flops_per_us`, `op_overhead_ns`) and a memory bandwidth, from three small models run
//! through the same executor the node runs models with, on one device at a time:
//! - a matrix product `(W0 + x) x W1` summed to a scalar, at doubling sizes (256 or more)
//!   until a run takes a few milliseconds more than at size 8: flops per microsecond, as the
//!   marginal rate between the last two sizes;
//! - a chain of 33 one-element additions against a chain of 1: the cost of one more op (a
//!   dispatch and barrier on a GPU, a kernel call on the CPU);
//! - `W + x` summed, over growing vectors: bytes moved per microsecond.
//!
//! A node measures when it starts and advertises the figures, so that pipeline stages are
//! balanced by what the devices do rather than by a guess from the core count. The result is
//! cached in a JSON file by device identity (the CPU's model and the cores this process may
//! use; a GPU's name, driver and index), so a restart, or another node on the same machine
//! with the same devices, measures nothing.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use prost::Message;
use serde::{Deserialize, Serialize};

use super::{Device, Executable};
use crate::error::{Error, Result};
use crate::graph::{Fusion, Graph};
use crate::onnx::proto::{
    GraphProto, ModelProto, NodeProto, OperatorSetIdProto, TensorProto, TensorShapeProto,
    TypeProto, ValueInfoProto, tensor_shape_proto, type_proto,
};
use crate::ops::ValueType;
use crate::tensor::Tensor;
use crate::tuning::Tuning;

/// What a device was measured to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Figures {
    pub flops_per_us: u64,
    pub op_overhead_ns: u64,
    pub bytes_per_us: u64,
}

/// A size is measured when its run takes at least this much longer than the smallest.
const ENOUGH: Duration = Duration::from_millis(4);
/// Timed runs per size; the fastest counts (the others met interference).
const REPEATS: usize = 3;
const ONNX_FLOAT: i32 = 1;
/// The smallest matrix product measured for a rate: smaller ones leave a GPU mostly idle.
const MIN_GEMM: u64 = 256;

/// The name a device's figures are cached under: what decides its speed.
pub fn identity(device: &Device) -> Option<String> {
    match device {
        Device::Gpu(g) => {
            let i = g.info();
            Some(format!(
                "vulkan:{} {} {} {} {}",
                i.index, i.vendor, i.name, i.driver, i.api_version
            ))
        }
        Device::Cpu => {
            let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
            let model = std::fs::read_to_string("/proc/cpuinfo")
                .ok()
                .and_then(|s| {
                    s.lines()
                        .find(|l| l.starts_with("model name"))
                        .and_then(|l| l.split(':').nth(1))
                        .map(|m| m.trim().to_string())
                })
                .unwrap_or_else(|| std::env::consts::ARCH.to_string());
            Some(format!("cpu {model} x{cores}"))
        }
        // A fallback is costed as a last resort whatever it measures.
        Device::CpuFallback => None,
    }
}

/// The figures of each of `devices` (None for a fallback CPU, and for a device whose probe
/// failed: it keeps its estimated figures), from `cache` where it has them, measured and
/// written back otherwise. A cache that cannot be read or written is only logged.
pub fn figures(devices: &[Device], cache: Option<&Path>, tuning: &Tuning) -> Vec<Option<Figures>> {
    let mut known = cache.map(read_cache).unwrap_or_default();
    let mut changed = false;
    let out = devices
        .iter()
        .map(|d| {
            let id = identity(d)?;
            if let Some(f) = known.get(&id) {
                return Some(*f);
            }
            let started = Instant::now();
            match measure(d, tuning) {
                Ok(f) => {
                    tracing::info!(
                        "measured {}: {:.1} GFLOP/s, {:.1} us an op, {:.1} GB/s ({:.1} s)",
                        d.name(),
                        f.flops_per_us as f64 / 1e3,
                        f.op_overhead_ns as f64 / 1e3,
                        f.bytes_per_us as f64 / 1e3,
                        started.elapsed().as_secs_f64()
                    );
                    known.insert(id, f);
                    changed = true;
                    Some(f)
                }
                Err(e) => {
                    tracing::warn!(
                        "cannot measure {}: {e}; its figures are estimates",
                        d.name()
                    );
                    None
                }
            }
        })
        .collect();
    if let (true, Some(path)) = (changed, cache)
        && let Err(e) = write_cache(path, &known)
    {
        tracing::warn!("cannot keep the device figures in {}: {e}", path.display());
    }
    out
}

/// The default cache file: `$XDG_CACHE_HOME/vkml/devices.json`, else
/// `~/.cache/vkml/devices.json` (the binary resolves it; the library takes the path as a value).
pub fn default_file(xdg_cache_home: Option<&Path>, home: Option<&Path>) -> Option<PathBuf> {
    crate::cache::vkml_cache_home(xdg_cache_home, home).map(|c| c.join("devices.json"))
}

fn read_cache(path: &Path) -> BTreeMap<String, Figures> {
    match std::fs::read(path) {
        Ok(data) => serde_json::from_slice(&data).unwrap_or_else(|e| {
            tracing::warn!(
                "{} is not a device figures file ({e}): measuring again",
                path.display()
            );
            BTreeMap::new()
        }),
        Err(_) => BTreeMap::new(),
    }
}

/// Written whole under another name and renamed: a reader never sees half a file.
fn write_cache(path: &Path, known: &BTreeMap<String, Figures>) -> std::io::Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let tmp: PathBuf = path.with_extension(format!("tmp{}", std::process::id()));
    let text = serde_json::to_vec_pretty(known).map_err(std::io::Error::other)?;
    std::fs::write(&tmp, text)?;
    std::fs::rename(&tmp, path)
}

/// Measures one device (see the module's comment).
pub fn measure(device: &Device, tuning: &Tuning) -> Result<Figures> {
    let probe = Probe { device, tuning };
    // The marginal rate between the last two sizes: fixed costs and the poor occupancy of
    // small products cancel out.
    let base = probe.time(&gemm(8))?;
    let mut last = (8u64, base);
    let mut flops_per_us = 0;
    let mut n = 64u64;
    while n <= 4096 {
        let t = probe.time(&gemm(n as i64))?;
        let enough = n >= MIN_GEMM && t.saturating_sub(base) >= ENOUGH;
        if enough || n == 4096 {
            let flops = 2 * (n.pow(3) - last.0.pow(3));
            let took = t.saturating_sub(last.1).as_micros() as u64;
            flops_per_us = flops / took.max(1);
            break;
        }
        last = (n, t);
        n *= 2;
    }
    let one = probe.time(&chain(1))?;
    let many = probe.time(&chain(33))?;
    let op_overhead_ns = (many.saturating_sub(one).as_nanos() as u64 / 32).max(1);
    let small = probe.time(&stream(1 << 10))?;
    let mut bytes_per_us = 0;
    let mut len = 1 << 16;
    while len <= 1 << 24 {
        let t = probe.time(&stream(len))?;
        if t.saturating_sub(small) >= ENOUGH || len == 1 << 24 {
            // W read, the sum written, then read by the reduction: three passes of 4 bytes.
            let moved = 12 * len as u64;
            bytes_per_us = moved / (t.saturating_sub(small).as_micros() as u64).max(1);
            break;
        }
        len *= 4;
    }
    Ok(Figures {
        flops_per_us: flops_per_us.max(1),
        op_overhead_ns,
        bytes_per_us: bytes_per_us.max(1),
    })
}

struct Probe<'a> {
    device: &'a Device,
    tuning: &'a Tuning,
}

impl Probe<'_> {
    /// The fastest of a few runs of `model` on the device alone (after one untimed run,
    /// which makes the execution context and warms caches).
    fn time(&self, model: &ModelProto) -> Result<Duration> {
        let data = Bytes::from(model.encode_to_vec());
        let def = crate::onnx::load_from_bytes(data, None)?;
        let graph = Arc::new(Graph::from_model(&def)?);
        let x = Tensor::from_vec(vec![1], vec![0.5f32]);
        let spec = graph
            .specialize_with(&[ValueType::of(&x)], &[None], Fusion::Off, u64::MAX)
            .map_err(Error::from)?;
        let exe = Arc::new(
            Executable::new(graph, spec, vec![self.device.clone()], None, self.tuning)?.unmetered(),
        );
        exe.run(vec![x.clone()])?;
        let mut best = Duration::MAX;
        for _ in 0..REPEATS {
            let start = Instant::now();
            exe.run(vec![x.clone()])?;
            best = best.min(start.elapsed());
        }
        Ok(best)
    }
}

fn value(name: &str, dims: &[i64]) -> ValueInfoProto {
    let dim = dims
        .iter()
        .map(|&d| tensor_shape_proto::Dimension {
            value: Some(tensor_shape_proto::dimension::Value::DimValue(d)),
            denotation: String::new(),
        })
        .collect();
    ValueInfoProto {
        name: name.into(),
        r#type: Some(TypeProto {
            value: Some(type_proto::Value::TensorType(type_proto::Tensor {
                elem_type: ONNX_FLOAT,
                shape: Some(TensorShapeProto { dim }),
            })),
            denotation: String::new(),
        }),
        ..Default::default()
    }
}

/// A weight of `dims` filled with small values (any will do: the kernels' speed does not
/// depend on them, and these stay far from denormals and overflow).
fn weight(name: &str, dims: &[i64]) -> TensorProto {
    let n: i64 = dims.iter().product();
    let raw: Vec<u8> = (0..n)
        .flat_map(|i| (((i % 7) as f32 + 1.0) / 64.0).to_le_bytes())
        .collect();
    TensorProto {
        name: name.into(),
        data_type: ONNX_FLOAT,
        dims: dims.to_vec(),
        raw_data: Bytes::from(raw),
        ..Default::default()
    }
}

fn node(op: &str, inputs: &[&str], output: &str) -> NodeProto {
    NodeProto {
        op_type: op.into(),
        name: output.into(),
        input: inputs.iter().map(|s| s.to_string()).collect(),
        output: vec![output.into()],
        ..Default::default()
    }
}

/// Input `x` [1] to a scalar-shaped `y` through `nodes`, with `weights`.
fn model(nodes: Vec<NodeProto>, weights: Vec<TensorProto>, out_dims: &[i64]) -> ModelProto {
    ModelProto {
        ir_version: 8,
        opset_import: vec![OperatorSetIdProto {
            domain: String::new(),
            version: 17,
        }],
        producer_name: "vkml-probe".into(),
        graph: Some(GraphProto {
            name: "probe".into(),
            node: nodes,
            initializer: weights,
            input: vec![value("x", &[1])],
            output: vec![value("y", out_dims)],
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// `sum((W0 + x) x W1)`, n x n: the input keeps the product from being folded at planning.
fn gemm(n: i64) -> ModelProto {
    model(
        vec![
            node("Add", &["w0", "x"], "a"),
            node("MatMul", &["a", "w1"], "c"),
            node("ReduceSum", &["c"], "y"),
        ],
        vec![weight("w0", &[n, n]), weight("w1", &[n, n])],
        &[1, 1],
    )
}

/// `x + 1 + 1 ...`, `len` additions.
fn chain(len: usize) -> ModelProto {
    let mut nodes = Vec::with_capacity(len);
    for i in 0..len {
        let from = if i == 0 {
            "x".to_string()
        } else {
            format!("v{i}")
        };
        let to = if i + 1 == len {
            "y".to_string()
        } else {
            format!("v{}", i + 1)
        };
        nodes.push(node("Add", &[&from, "one"], &to));
    }
    model(nodes, vec![weight("one", &[1])], &[1])
}

/// `sum(W + x)` over `len` elements.
fn stream(len: i64) -> ModelProto {
    model(
        vec![
            node("Add", &["w", "x"], "s"),
            node("ReduceSum", &["s"], "y"),
        ],
        vec![weight("w", &[len])],
        &[1],
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cpu_is_measured_once_then_read_from_the_cache() {
        let dir = std::env::temp_dir().join(format!("vkml-probe-{}", std::process::id()));
        let path = dir.join("devices.json");
        let _ = std::fs::remove_file(&path);
        let tuning = Tuning::default();
        let first = figures(&[Device::Cpu, Device::CpuFallback], Some(&path), &tuning);
        let f = first[0].expect("the CPU was measured");
        assert!(
            first[1].is_none(),
            "a fallback keeps its last-resort figures"
        );
        // A CPU core does between 0.1 and 1,000 GFLOP/s, moves 0.1 to 1,000 GB/s, and takes
        // between 10 ns and 1 ms an op: anything outside is a broken measurement.
        assert!((100..1_000_000).contains(&f.flops_per_us), "{f:?}");
        assert!((100..1_000_000).contains(&f.bytes_per_us), "{f:?}");
        assert!((10..1_000_000).contains(&f.op_overhead_ns), "{f:?}");
        // The cache now answers, whatever it says.
        let planted = Figures {
            flops_per_us: 7,
            op_overhead_ns: 8,
            bytes_per_us: 9,
        };
        let id = identity(&Device::Cpu).unwrap();
        write_cache(&path, &BTreeMap::from([(id, planted)])).unwrap();
        assert_eq!(
            figures(&[Device::Cpu], Some(&path), &tuning),
            [Some(planted)]
        );
        // A damaged cache is measured over, not an error.
        std::fs::write(&path, b"{not json").unwrap();
        assert!(figures(&[Device::Cpu], Some(&path), &tuning)[0].is_some());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn the_probe_models_compute_what_they_say() {
        let tuning = Tuning::default();
        let probe = Probe {
            device: &Device::Cpu,
            tuning: &tuning,
        };
        // Each model runs; the GEMM's sum checked against its definition at n = 8.
        for m in [gemm(8), chain(3), stream(16)] {
            probe.time(&m).unwrap();
        }
        let def = crate::onnx::load_from_bytes(Bytes::from(gemm(8).encode_to_vec()), None).unwrap();
        let graph = Arc::new(Graph::from_model(&def).unwrap());
        let x = Tensor::from_vec(vec![1], vec![0.5f32]);
        let spec = graph
            .specialize_with(&[ValueType::of(&x)], &[None], Fusion::Off, u64::MAX)
            .unwrap();
        let exe = Arc::new(Executable::new(graph, spec, vec![Device::Cpu], None, &tuning).unwrap());
        let got = exe.run(vec![x]).unwrap()[0].to_f64_vec().unwrap()[0];
        let w = |i: usize| ((i % 7) as f64 + 1.0) / 64.0;
        let mut want = 0.0;
        for r in 0..8 {
            for c in 0..8 {
                for k in 0..8 {
                    want += (w(r * 8 + k) + 0.5) * w(k * 8 + c);
                }
            }
        }
        assert!((got - want).abs() < 1e-4 * want, "{got} vs {want}");
    }
}
