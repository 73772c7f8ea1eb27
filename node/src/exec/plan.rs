//! From a specialised graph and this machine's devices to the planner's input, and back.

use std::collections::BTreeMap;
use std::sync::Arc;

use vkml_planner::{
    CostGraph, DeviceInventory, DeviceKind, FALLBACK_OVERHEAD_NS, OpCost, Snapshot, ValueCost,
    ValueKind,
};

use crate::device::vulkan::{Gpu, ShaderNeeds};
use crate::graph::{Graph, Specialized};
use crate::ops::{GpuKernel, InferInput, KernelTuning, ValueType};

/// A device of this machine, in the planner's device order.
#[derive(Clone)]
pub enum Device {
    Gpu(Arc<Gpu>),
    Cpu,
    /// The CPU backend, used only for ops no GPU can run (`--device vulkan`).
    CpuFallback,
}

impl Device {
    pub fn name(&self) -> String {
        match self {
            Device::Gpu(g) => format!("vulkan:{}", g.info().index),
            Device::Cpu | Device::CpuFallback => "cpu".into(),
        }
    }
}

/// Bytes of memory the CPU backend may use: what the kernel says is available.
pub fn cpu_memory() -> u64 {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("MemAvailable:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
        })
        .map(|kib| kib * 1024)
        .unwrap_or(8 << 30)
}

/// A rough rate for the CPU backend: 10 GFLOP/s per core, for up to four cores (small ops
/// run on one core, large ones on all; the planner only needs the order of magnitude right
/// to weigh a tiny model's CPU run against a GPU submission).
fn cpu_flops_per_us() -> u64 {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get()) as u64;
    10_000 * cores.clamp(1, 4)
}

/// The name of this machine in a single-node plan.
pub const LOCAL_NODE: &str = "local";

/// This machine's devices with estimated figures (see [`inventory_measured`]).
pub fn inventory(devices: &[Device], limit: Option<u64>) -> Snapshot {
    inventory_measured(devices, limit, &[])
}

/// This machine's devices as the planner sees them, budgets capped at `limit`: with the
/// figures measured for them (`figures[i]` for `devices[i]`, see probe.rs) where there are
/// some, else estimated from the kind of device.
pub fn inventory_measured(
    devices: &[Device],
    limit: Option<u64>,
    figures: &[Option<super::probe::Figures>],
) -> Snapshot {
    let mut s = estimated(devices, limit);
    for (d, f) in s.nodes.values_mut().flatten().zip(figures) {
        if let Some(f) = f {
            d.flops_per_us = f.flops_per_us;
            d.op_overhead_ns = f.op_overhead_ns;
            d.bytes_per_us = f.bytes_per_us;
        }
    }
    s
}

fn estimated(devices: &[Device], limit: Option<u64>) -> Snapshot {
    let cap = |b: u64| limit.map_or(b, |l| b.min(l));
    let devs = devices
        .iter()
        .map(|d| match d {
            Device::Gpu(g) => {
                let info = g.info();
                // lavapipe is a GPU API over the CPU: far slower per op than real hardware.
                // On a real GPU a dependent dispatch costs about 2.5 us (benches/gpu.sh's add
                // chain on an H100: the barrier between dispatches is most of it).
                let (rate, overhead) = if info.is_cpu {
                    (5_000, 8_000)
                } else {
                    (20_000_000, 2_500)
                };
                DeviceInventory {
                    name: d.name(),
                    kind: DeviceKind::Gpu,
                    memory_budget: cap(info.memory_budget),
                    flops_per_us: rate,
                    op_overhead_ns: overhead,
                    bytes_per_us: 0,
                    features: info.shader_features.0,
                }
            }
            Device::Cpu | Device::CpuFallback => DeviceInventory {
                name: "cpu".into(),
                kind: DeviceKind::Cpu,
                memory_budget: cap(cpu_memory()),
                flops_per_us: cpu_flops_per_us(),
                // A fallback costs so much that the planner picks it only when nothing else can.
                op_overhead_ns: if matches!(d, Device::CpuFallback) {
                    FALLBACK_OVERHEAD_NS
                } else {
                    300
                },
                bytes_per_us: 0,
                features: 0,
            },
        })
        .collect();
    Snapshot::single(LOCAL_NODE, devs)
}

/// Each live op's GPU kernels: the one the planner costs and checks features with, and, for
/// some ops, faster ones for GPUs with optional features (tensor cores), best first.
#[derive(Debug, Clone, Default)]
pub struct Kernels {
    pub base: Vec<Option<GpuKernel>>,
    /// By position in the plan; see [`crate::ops::Op::gpu_preferred`].
    pub preferred: BTreeMap<usize, Vec<GpuKernel>>,
}

fn needs_of(k: &GpuKernel) -> ShaderNeeds {
    k.dispatches
        .iter()
        .map(|d| d.kernel().needs())
        .fold(ShaderNeeds::default(), ShaderNeeds::union)
}

impl Kernels {
    /// The kernels a GPU with features `have` runs: for each op the first preferred one it
    /// can, else the base one.
    pub fn for_gpu(&self, have: ShaderNeeds) -> Vec<Option<GpuKernel>> {
        let mut out = self.base.clone();
        for (&pos, list) in &self.preferred {
            if let Some(k) = list.iter().find(|k| needs_of(k).met_by(have)) {
                out[pos] = Some(k.clone());
            }
        }
        out
    }
}

/// The cost graph of the live ops, and each live op's GPU kernels (when it has some).
/// `tuning` picks among kernels that compute the same thing.
pub fn cost_graph(
    graph: &Graph,
    spec: &Specialized,
    tuning: &KernelTuning,
) -> (CostGraph, Kernels) {
    let inputs: Vec<usize> = graph.inputs.iter().map(|(v, _)| *v).collect();
    let n = graph.value_names.len();
    let mut values: Vec<ValueCost> = (0..n)
        .map(|v| ValueCost {
            bytes: spec.types[v].as_ref().map_or(0, |t| t.bytes() as u64),
            kind: if spec.consts[v].is_some() || graph.deferred.contains_key(&v) {
                ValueKind::Weight
            } else if inputs.contains(&v) {
                ValueKind::Input
            } else {
                ValueKind::Computed
            },
            output: false,
        })
        .collect();
    for (v, _) in &graph.outputs {
        values[*v].output = true;
    }
    let mut kernels = Vec::new();
    let mut preferred = BTreeMap::new();
    let ops = spec
        .live
        .iter()
        .map(|&i| {
            let node = spec.node(graph, i);
            let in_types = super::work::input_types(spec, node);
            let out_types: Vec<ValueType> = node
                .outputs
                .iter()
                .map(|&o| spec.types[o].clone().expect("typed"))
                .collect();
            let kernel = if node.op.is_view() {
                None
            } else {
                let planned: Vec<Option<InferInput<'_>>> = node
                    .inputs
                    .iter()
                    .map(|v| {
                        v.and_then(|v| {
                            spec.types[v].as_ref().map(|ty| InferInput {
                                ty,
                                value: spec.consts[v].as_ref(),
                            })
                        })
                    })
                    .collect();
                let faster = node.op.gpu_preferred(&planned, &out_types, tuning);
                let base = node.op.gpu_planned(&planned, &out_types, tuning);
                // An op with only preferred kernels is planned with the most widely
                // supported of them.
                let base = base.or_else(|| faster.last().cloned());
                if !faster.is_empty() {
                    preferred.insert(kernels.len(), faster);
                }
                base
            };
            let gpu = node.op.is_view() || kernel.is_some();
            let gpu_needs = kernel.as_ref().map_or(0, |k| needs_of(k).0);
            kernels.push(kernel);
            OpCost {
                name: node.name.clone(),
                inputs: node.inputs.iter().flatten().copied().collect(),
                outputs: node.outputs.clone(),
                flops: node.op.flops(&in_types, &out_types),
                gpu,
                gpu_needs,
                view: node.op.is_view(),
            }
        })
        .collect();
    (
        CostGraph { ops, values },
        Kernels {
            base: kernels,
            preferred,
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::{BufRef, Dispatch, Kernel};
    use vkml_shaders::{binary, gemm_coop_any, gemm_coop2, gemm_simple};

    /// A kernel of one dispatch of `$variant`, over input 0 as every buffer.
    macro_rules! kernel {
        ($module:ident :: $variant:ident, [$($buffer:ident),*]) => {
            GpuKernel {
                scratch: vec![],
                dispatches: vec![Dispatch::new(
                    $module::Variant::$variant,
                    $module::Buffers { $($buffer: BufRef::Input(0)),* },
                    Default::default(),
                    [1, 1, 1],
                )],
            }
        };
    }

    #[test]
    fn each_gpu_takes_the_first_preferred_kernel_it_can_run() {
        let kernels = Kernels {
            base: vec![
                Some(kernel!(gemm_simple::F16, [a, b, c, y])),
                Some(kernel!(binary::F32, [a, b, y])),
                None,
            ],
            preferred: BTreeMap::from([(
                0,
                vec![
                    kernel!(gemm_coop2::F16, [a, b, c, y]),
                    kernel!(gemm_coop_any::F16, [a, b, c, y]),
                ],
            )]),
        };
        let chosen = |have: ShaderNeeds| -> Vec<Option<Kernel>> {
            kernels
                .for_gpu(have)
                .iter()
                .map(|k| k.as_ref().map(|k| k.dispatches[0].kernel()))
                .collect()
        };
        let f16 = ShaderNeeds::FLOAT16.union(ShaderNeeds::STORAGE16);
        // No tensor cores (lavapipe): the base kernels.
        assert_eq!(
            chosen(f16),
            [
                Some(gemm_simple::Variant::F16.kernel()),
                Some(binary::Variant::F32.kernel()),
                None
            ]
        );
        // KHR cooperative matrices only: the second choice.
        let khr = f16.union(ShaderNeeds::COOPERATIVE_MATRIX);
        assert_eq!(chosen(khr)[0], Some(gemm_coop_any::Variant::F16.kernel()));
        // Both: the first.
        let both = khr.union(ShaderNeeds::COOPERATIVE_MATRIX2);
        assert_eq!(chosen(both)[0], Some(gemm_coop2::Variant::F16.kernel()));
        // The needs come from the shaders themselves.
        assert!(gemm_coop2::Variant::F16.kernel().needs().met_by(both));
        assert!(!gemm_coop_any::Variant::Bf16.kernel().needs().met_by(both));
    }
}
