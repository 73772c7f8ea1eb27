use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

pub type OpId = usize;
pub type ValueId = usize;
pub type ChunkId = usize;

/// What the planner needs to know of a model: ops in a topological order and the values
/// between them, with sizes and costs already reduced to integers.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CostGraph {
    pub ops: Vec<OpCost>,
    pub values: Vec<ValueCost>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpCost {
    /// For messages and plan printouts only.
    pub name: String,
    pub inputs: Vec<ValueId>,
    pub outputs: Vec<ValueId>,
    /// Arithmetic work, in floating-point operations.
    pub flops: u64,
    /// Whether a GPU can run this op (the CPU always can).
    pub gpu: bool,
    /// Optional GPU features its kernels need (opaque bits, matched against
    /// [`DeviceInventory::features`]): an f16 kernel stays off a GPU without f16.
    pub gpu_needs: u32,
    /// The output aliases the input's bytes (Reshape and friends): no kernel, no new memory.
    pub view: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ValueKind {
    /// Fed by the caller at every run.
    Input,
    /// Known at load time (initializers, folded constants): resident on each device using it.
    Weight,
    /// Produced by an op.
    Computed,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ValueCost {
    pub bytes: u64,
    pub kind: ValueKind,
    /// A graph output: read back to the caller after every run.
    pub output: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum DeviceKind {
    Cpu,
    Gpu,
}

/// One device as the snapshot describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceInventory {
    /// "cpu", "vulkan:0"...
    pub name: String,
    pub kind: DeviceKind,
    /// Bytes this device may use for the model.
    pub memory_budget: u64,
    /// Sustained arithmetic rate, in flops per microsecond.
    pub flops_per_us: u64,
    /// Fixed cost of one op on this device, in nanoseconds (a dispatch, a kernel call).
    pub op_overhead_ns: u64,
    /// Memory bandwidth, in bytes per microsecond, as measured (0: not measured). Reported,
    /// not yet used in costs.
    pub bytes_per_us: u64,
    /// Optional features this device has, in the bits of [`OpCost::gpu_needs`].
    pub features: u32,
}

/// A frozen view of the cluster: its version is part of every plan made from it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Snapshot {
    pub version: u64,
    /// Node name to its devices, in the node's own order.
    pub nodes: BTreeMap<String, Vec<DeviceInventory>>,
    /// Weights of the model being planned that its other plans already hold on a device
    /// (a language model's plan for its prompt, when its plan for one token is made): they
    /// cost nothing more there, because the plans share them (node/src/exec/shared.rs).
    pub resident: BTreeMap<DeviceRef, BTreeSet<ValueId>>,
    /// The node a run's inputs come from and its outputs return to (the node the model was
    /// submitted to), when known. Contiguous stages give its devices the last stage: its
    /// outputs are then made where they are wanted, and it passes on only the inputs, where
    /// a middle stage would pass on both (one hop more, and the busiest node of a pipeline).
    pub origin: Option<String>,
}

impl Snapshot {
    /// The degenerate cluster: one machine.
    pub fn single(node: &str, devices: Vec<DeviceInventory>) -> Snapshot {
        Snapshot {
            version: 0,
            nodes: BTreeMap::from([(node.to_string(), devices)]),
            resident: BTreeMap::new(),
            origin: None,
        }
    }

    pub fn device(&self, r: &DeviceRef) -> Option<&DeviceInventory> {
        self.nodes.get(&r.node)?.get(r.index)
    }

    /// Every device, in the snapshot's total order (node name, then index).
    pub fn devices(&self) -> impl Iterator<Item = (DeviceRef, &DeviceInventory)> {
        self.nodes.iter().flat_map(|(node, devs)| {
            devs.iter().enumerate().map(move |(index, d)| {
                (
                    DeviceRef {
                        node: node.clone(),
                        index,
                    },
                    d,
                )
            })
        })
    }
}

/// A device of the cluster: node name and index among that node's devices.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct DeviceRef {
    pub node: String,
    pub index: usize,
}

impl fmt::Display for DeviceRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.node, self.index)
    }
}

/// A maximal run of ops on one device: one command buffer on a GPU, one task on the CPU.
/// It may start once every chunk in `preds` has finished (its dependency count is
/// `preds.len()`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chunk {
    pub device: DeviceRef,
    /// In topological order.
    pub ops: Vec<OpId>,
    pub preds: Vec<ChunkId>,
    pub succs: Vec<ChunkId>,
}

/// A value crossing from one chunk's device to another's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transfer {
    pub value: ValueId,
    pub from_chunk: ChunkId,
    pub to_chunk: ChunkId,
    pub bytes: u64,
    /// Crosses machines (a network transfer), not just devices of one machine.
    pub cross_host: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    pub snapshot_version: u64,
    /// Device of each op.
    pub placement: Vec<DeviceRef>,
    /// Chunk of each op.
    pub op_chunk: Vec<ChunkId>,
    /// In an order where every chunk comes after its predecessors.
    pub chunks: Vec<Chunk>,
    pub transfers: Vec<Transfer>,
    /// Bytes charged to each device used.
    pub memory: BTreeMap<DeviceRef, u64>,
    /// Hash of everything above: nodes compare it to agree on a plan.
    pub hash: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    #[error("the graph is malformed: {0}")]
    BadGraph(String),
    #[error("the cluster snapshot has no device")]
    NoDevices,
    #[error(
        "the model does not fit: it needs {model_bytes} bytes on one device and the cluster's \
         devices allow {cluster_bytes} in all{}; placed greedily, op '{op}' fit on no device: \
         the one with the most room had {largest_free} bytes free and needed {needed} (its \
         outputs, and inputs and weights not already there){}; contiguous stages did not fit \
         either; use more or larger devices, or raise the memory limits",
        shortfall(*model_bytes, *cluster_bytes),
        shortfall(*needed, *largest_free)
    )]
    OutOfMemory {
        op: String,
        needed: u64,
        largest_free: u64,
        /// What the whole model takes on one device (the roomiest device's kind).
        model_bytes: u64,
        /// Every device's budget, summed.
        cluster_bytes: u64,
    },
    #[error("op '{op}' can run only on a GPU and the cluster has none")]
    NoCapableDevice { op: String },
}

fn shortfall(model: u64, cluster: u64) -> String {
    if model > cluster {
        format!(" ({} bytes short)", model - cluster)
    } else {
        String::new()
    }
}

impl CostGraph {
    /// Ids in range, each value produced at most once and before it is used.
    pub fn validate(&self) -> Result<(), PlanError> {
        let mut produced = vec![false; self.values.len()];
        for (v, val) in self.values.iter().enumerate() {
            if val.kind != ValueKind::Computed {
                produced[v] = true;
            }
        }
        for op in &self.ops {
            for &v in &op.inputs {
                if v >= self.values.len() {
                    return Err(PlanError::BadGraph(format!(
                        "op '{}' reads value {v}, out of range",
                        op.name
                    )));
                }
                if !produced[v] {
                    return Err(PlanError::BadGraph(format!(
                        "op '{}' reads value {v} before anything produces it",
                        op.name
                    )));
                }
            }
            for &v in &op.outputs {
                if v >= self.values.len()
                    || self.values[v].kind != ValueKind::Computed
                    || produced[v]
                {
                    return Err(PlanError::BadGraph(format!(
                        "op '{}' writes value {v}, which is out of range, not computed, or written twice",
                        op.name
                    )));
                }
                produced[v] = true;
            }
        }
        Ok(())
    }

    /// The op producing each value, if any.
    pub fn producers(&self) -> Vec<Option<OpId>> {
        let mut p = vec![None; self.values.len()];
        for (o, op) in self.ops.iter().enumerate() {
            for &v in &op.outputs {
                p[v] = Some(o);
            }
        }
        p
    }
}
