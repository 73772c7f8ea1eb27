//! A plan's fragments: what the submitter sends each participant, and how a participant turns
//! one back into a graph it can run.
//!
//! A fragment carries the model already specialised (every value's type, every live op with
//! its attributes) rather than the model file: specialisation folds constants computed from
//! weights, and a participant holding only some weights could not fold the same way. With the
//! cost graph and the frozen snapshot it also carries everything the planner needs, so the
//! participant recomputes the plan and checks its hash before it trusts the fragment. Of the
//! weights, only those its own ops read follow it.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use bytes::Bytes;
use vkml_planner::{CostGraph, DeviceRef, OpCost, Plan, Snapshot, ValueCost, ValueKind};
use vkml_protocol::pb;

use super::DistError;
use super::wire::{dtype_from_name, dtype_name};
use crate::cluster::inventory;
use crate::graph::{Graph, Node, Specialized, ValueId};
use crate::model::{Dim, ValueDef};
use crate::ops::{self, NodeSpec, ValueType};
use crate::tensor::Tensor;

/// The parts of a fragment that are the same for every participant of a plan.
pub struct Skeleton {
    pub snapshot: pb::ClusterSnapshot,
    pub cost: pb::PlanGraph,
    pub value_names: Vec<String>,
    pub types: Vec<pb::ValueType>,
    pub nodes: Vec<pb::FragmentNode>,
}

impl Skeleton {
    pub fn new(
        graph: &Graph,
        spec: &Specialized,
        cost: &CostGraph,
        snapshot: &Snapshot,
    ) -> Result<Skeleton, DistError> {
        let mut nodes = Vec::with_capacity(spec.live.len());
        for &n in &spec.live {
            let node = spec.node(graph, n);
            let def = crate::model::NodeDef {
                name: node.name.clone(),
                op_type: node.op_type.clone(),
                domain: node.domain.clone(),
                inputs: Vec::new(),
                outputs: Vec::new(),
                attrs: node.attrs.clone(),
            };
            nodes.push(pb::FragmentNode {
                onnx_node: crate::onnx::encode_node(&def)
                    .map_err(|e| DistError::Unsupported(e.to_string()))?
                    .into(),
                inputs: node
                    .inputs
                    .iter()
                    .map(|v| v.map_or(-1, |v| v as i64))
                    .collect(),
                outputs: node.outputs.iter().map(|&v| v as u64).collect(),
            });
        }
        Ok(Skeleton {
            snapshot: snapshot_to_wire(snapshot),
            cost: cost_to_wire(cost),
            value_names: graph.value_names.clone(),
            types: spec
                .types
                .iter()
                .map(|t| match t {
                    Some(t) => pb::ValueType {
                        dtype: dtype_name(t.dtype).to_string(),
                        shape: t.shape.iter().map(|&d| d as u64).collect(),
                    },
                    None => pb::ValueType::default(),
                })
                .collect(),
            nodes,
        })
    }

    /// Node `node`'s fragment, and the weights it needs (value id, tensor), in value order.
    /// Weights whose bytes are not here (the graph's deferred ones) travel by reference:
    /// `external` says where each is, and the fragment lists those its node reads.
    #[allow(clippy::too_many_arguments)]
    pub fn fragment(
        &self,
        graph: &Graph,
        spec: &Specialized,
        plan: &Plan,
        node: &str,
        model_id: u64,
        submitter: &str,
        external: &BTreeMap<ValueId, pb::WeightRange>,
    ) -> (pb::Fragment, Vec<(ValueId, Tensor)>) {
        let mut wanted: BTreeSet<ValueId> = BTreeSet::new();
        let mut refs: BTreeSet<ValueId> = BTreeSet::new();
        for (p, &n) in spec.live.iter().enumerate() {
            if plan.placement[p].node != node {
                continue;
            }
            for &v in spec.node(graph, n).inputs.iter().flatten() {
                if spec.consts[v].is_some() {
                    wanted.insert(v);
                } else if external.contains_key(&v) {
                    refs.insert(v);
                }
            }
        }
        let weights: Vec<(ValueId, Tensor)> = wanted
            .into_iter()
            .map(|v| (v, spec.consts[v].clone().expect("a const")))
            .collect();
        let external: Vec<pb::WeightRef> = refs
            .into_iter()
            .map(|v| pb::WeightRef {
                value: v as u64,
                range: Some(external[&v].clone()),
            })
            .collect();
        // The model's own initializers are the same bytes in every plan of it; a folded
        // constant with the same id may not be (a shape computed from the inputs').
        let shared: Vec<u64> = weights
            .iter()
            .map(|(v, _)| *v)
            .chain(external.iter().map(|r| r.value as ValueId))
            .filter(|&v| graph.is_initializer(v))
            .map(|v| v as u64)
            .collect();
        let inline: u64 = weights.iter().map(|(_, t)| t.bytes().len() as u64).sum();
        let by_ref: u64 = external
            .iter()
            .filter_map(|r| r.range.as_ref())
            .map(|r| r.length)
            .sum();
        let f = pb::Fragment {
            model_id,
            submitter: submitter.to_string(),
            plan_hash: plan.hash,
            snapshot: Some(self.snapshot.clone()),
            cost: Some(self.cost.clone()),
            opset: graph.opset,
            value_names: self.value_names.clone(),
            types: self.types.clone(),
            nodes: self.nodes.clone(),
            inputs: graph.inputs.iter().map(|(v, _)| *v as u64).collect(),
            outputs: graph.outputs.iter().map(|(v, _)| *v as u64).collect(),
            weight_count: weights.len() as u64,
            weight_bytes: inline + by_ref,
            // Set by the submitter, which knows its settings and the nodes' lives.
            tuning_fingerprint: 0,
            plan_settings: String::new(),
            lives: Vec::new(),
            external,
            bound: Vec::new(),
            // Set by the submitter, which knows which of its models the plan is of.
            weights_owner: 0,
            shared,
        };
        (f, weights)
    }
}

pub fn snapshot_to_wire(s: &Snapshot) -> pb::ClusterSnapshot {
    pb::ClusterSnapshot {
        version: s.version,
        nodes: s
            .nodes
            .iter()
            .map(|(name, devs)| pb::NodeDevices {
                node: name.clone(),
                devices: devs
                    .iter()
                    .map(|d| inventory::to_wire(d, String::new()))
                    .collect(),
            })
            .collect(),
        resident: s
            .resident
            .iter()
            .map(|(d, values)| pb::ResidentWeights {
                node: d.node.clone(),
                device: d.index as u32,
                values: values.iter().map(|&v| v as u64).collect(),
            })
            .collect(),
        origin: s.origin.clone().unwrap_or_default(),
    }
}

pub fn snapshot_from_wire(s: &pb::ClusterSnapshot) -> Snapshot {
    Snapshot {
        version: s.version,
        nodes: s
            .nodes
            .iter()
            .map(|n| {
                (
                    n.node.clone(),
                    n.devices.iter().map(inventory::to_planner).collect(),
                )
            })
            .collect(),
        resident: s
            .resident
            .iter()
            .map(|r| {
                let d = DeviceRef {
                    node: r.node.clone(),
                    index: r.device as usize,
                };
                (d, r.values.iter().map(|&v| v as usize).collect())
            })
            .collect(),
        origin: (!s.origin.is_empty()).then(|| s.origin.clone()),
    }
}

fn kind_code(k: ValueKind) -> u32 {
    match k {
        ValueKind::Input => 0,
        ValueKind::Weight => 1,
        ValueKind::Computed => 2,
    }
}

pub fn cost_to_wire(c: &CostGraph) -> pb::PlanGraph {
    pb::PlanGraph {
        ops: c
            .ops
            .iter()
            .map(|o| pb::PlanOp {
                name: o.name.clone(),
                inputs: o.inputs.iter().map(|&v| v as u64).collect(),
                outputs: o.outputs.iter().map(|&v| v as u64).collect(),
                flops: o.flops,
                gpu: o.gpu,
                gpu_needs: o.gpu_needs,
                view: o.view,
            })
            .collect(),
        values: c
            .values
            .iter()
            .map(|v| pb::PlanValue {
                bytes: v.bytes,
                kind: kind_code(v.kind),
                output: v.output,
            })
            .collect(),
    }
}

pub fn cost_from_wire(c: &pb::PlanGraph) -> Result<CostGraph, DistError> {
    let id = |v: u64| usize::try_from(v).map_err(|_| bad("a value id is out of range"));
    let ops = c
        .ops
        .iter()
        .map(|o| {
            Ok(OpCost {
                name: o.name.clone(),
                inputs: o.inputs.iter().map(|&v| id(v)).collect::<Result<_, _>>()?,
                outputs: o.outputs.iter().map(|&v| id(v)).collect::<Result<_, _>>()?,
                flops: o.flops,
                gpu: o.gpu,
                gpu_needs: o.gpu_needs,
                view: o.view,
            })
        })
        .collect::<Result<_, DistError>>()?;
    let values = c
        .values
        .iter()
        .map(|v| {
            Ok(ValueCost {
                bytes: v.bytes,
                kind: match v.kind {
                    0 => ValueKind::Input,
                    1 => ValueKind::Weight,
                    2 => ValueKind::Computed,
                    k => return Err(bad(&format!("unknown value kind {k}"))),
                },
                output: v.output,
            })
        })
        .collect::<Result<_, DistError>>()?;
    Ok(CostGraph { ops, values })
}

/// A value's declared type, refused when its size overflows or passes what any tensor may be.
fn checked_type(
    v: usize,
    dtype: crate::tensor::DType,
    shape: &[u64],
) -> Result<ValueType, DistError> {
    let dims: Vec<usize> = shape
        .iter()
        .map(|&d| usize::try_from(d).ok())
        .collect::<Option<_>>()
        .ok_or_else(|| {
            bad(&format!(
                "value {v} has a dimension too large for this machine"
            ))
        })?;
    let bytes = dims
        .iter()
        .try_fold(dtype.size() as u64, |acc, &d| acc.checked_mul(d as u64))
        .filter(|&b| b <= vkml_protocol::MAX_TENSOR_PAYLOAD);
    if bytes.is_none() {
        return Err(bad(&format!(
            "value {v} of shape {shape:?} is over the {}-byte limit on a tensor",
            vkml_protocol::MAX_TENSOR_PAYLOAD
        )));
    }
    Ok(ValueType::new(dtype, dims))
}

/// A fragment node's op. If, Loop and Scan are built with their bodies, as a model's graph
/// builds them: the outer values their bodies read are the node's last inputs, in the order
/// [`crate::control::build`] appends them, which the fragment must match.
fn rebuild_op(
    def: &crate::model::NodeDef,
    fnode: &pb::FragmentNode,
    f: &pb::Fragment,
) -> Result<Box<dyn ops::Op>, DistError> {
    let unsupported = |e: ops::OpError| {
        DistError::Unsupported(format!("node '{}' ({}): {e}", def.name, def.op_type))
    };
    let bodies: Vec<&crate::model::GraphDef> = def
        .attrs
        .0
        .values()
        .filter_map(|v| match v {
            ops::AttrValue::Graph(g) => Some(&**g),
            _ => None,
        })
        .collect();
    if bodies.is_empty() {
        return ops::build_in(
            &def.domain,
            &NodeSpec {
                name: &def.name,
                op_type: &def.op_type,
                attrs: &def.attrs,
                opset: f.opset,
                num_inputs: fnode.inputs.len(),
                num_outputs: fnode.outputs.len(),
            },
        )
        .map_err(unsupported);
    }
    let captured: BTreeSet<String> = bodies
        .into_iter()
        .flat_map(crate::control::captured)
        .collect();
    let name = |v: i64| -> Result<String, DistError> {
        match usize::try_from(v) {
            Err(_) => Ok(String::new()),
            Ok(v) => f
                .value_names
                .get(v)
                .cloned()
                .ok_or_else(|| bad(&format!("value id {v} out of range"))),
        }
    };
    let Some(formal) = fnode.inputs.len().checked_sub(captured.len()) else {
        return Err(bad(&format!(
            "node '{}' ({}) has fewer inputs than its bodies read outer values",
            def.name, def.op_type
        )));
    };
    let inputs: Vec<String> = fnode
        .inputs
        .iter()
        .map(|&v| name(v))
        .collect::<Result<_, _>>()?;
    if !inputs[formal..].iter().eq(captured.iter()) {
        return Err(bad(&format!(
            "node '{}' ({}): its last inputs are not the outer values its bodies read",
            def.name, def.op_type
        )));
    }
    let node = crate::model::NodeDef {
        inputs: inputs[..formal].to_vec(),
        outputs: fnode
            .outputs
            .iter()
            .map(|&v| name(v as i64))
            .collect::<Result<_, _>>()?,
        ..def.clone()
    };
    // Bodies are rebuilt at the fragment's opset; a fragment carries no IR version, and the
    // runtime reads it only when loading files.
    let model = crate::model::ModelDef {
        ir_version: 8,
        opset: f.opset,
        producer: String::new(),
        graph: Default::default(),
    };
    match crate::control::build(&node, &model) {
        Some(built) => built.map(|(op, _)| op).map_err(unsupported),
        None => Err(bad(&format!(
            "node '{}' ({}) has a graph attribute but is not If, Loop or Scan",
            def.name, def.op_type
        ))),
    }
}

fn bad(what: &str) -> DistError {
    DistError::Protocol(format!("malformed fragment: {what}"))
}

/// A fragment turned back into a graph and its specialisation: every live op (ops of other
/// nodes too: the chunk structure spans them), only this node's weights as constants.
pub fn rebuild(
    f: &pb::Fragment,
    weights: BTreeMap<ValueId, Tensor>,
) -> Result<(Arc<Graph>, Specialized), DistError> {
    let n = f.value_names.len();
    if f.types.len() != n {
        return Err(bad("one type per value expected"));
    }
    let value = |v: u64| -> Result<ValueId, DistError> {
        usize::try_from(v)
            .ok()
            .filter(|&v| v < n)
            .ok_or_else(|| bad(&format!("value id {v} out of range")))
    };
    let mut types: Vec<Option<ValueType>> = Vec::with_capacity(n);
    for (v, t) in f.types.iter().enumerate() {
        types.push(if t.dtype.is_empty() {
            None
        } else {
            Some(checked_type(v, dtype_from_name(&t.dtype)?, &t.shape)?)
        });
    }
    let mut nodes = Vec::with_capacity(f.nodes.len());
    for fnode in &f.nodes {
        let def = crate::onnx::decode_node(Bytes::clone(&fnode.onnx_node))
            .map_err(|e| bad(&e.to_string()))?;
        let op = rebuild_op(&def, fnode, f)?;
        let inputs: Vec<Option<ValueId>> = fnode
            .inputs
            .iter()
            .map(|&v| {
                if v < 0 {
                    Ok(None)
                } else {
                    value(v as u64).map(Some)
                }
            })
            .collect::<Result<_, _>>()?;
        let outputs: Vec<ValueId> = fnode
            .outputs
            .iter()
            .map(|&v| value(v))
            .collect::<Result<_, _>>()?;
        // The planner types every value an op reads or writes; a fragment that does not
        // (mutated, or from a buggy peer) is refused here rather than panicking in the plan.
        if let Some(v) = inputs
            .iter()
            .flatten()
            .chain(&outputs)
            .find(|&&v| types[v].is_none())
        {
            return Err(bad(&format!(
                "value {v} of node '{}' ({}) has no type",
                def.name, def.op_type
            )));
        }
        nodes.push(Node {
            name: def.name,
            op_type: def.op_type,
            domain: def.domain,
            attrs: def.attrs,
            op,
            inputs,
            outputs,
        });
    }
    let declared = |v: ValueId| -> ValueDef {
        ValueDef {
            name: f.value_names[v].clone(),
            dtype: types[v].as_ref().map(|t| t.dtype),
            dims: types[v]
                .as_ref()
                .map(|t| t.shape.iter().map(|&d| Dim::Fixed(d)).collect()),
            kind: Default::default(),
        }
    };
    let inputs = f
        .inputs
        .iter()
        .map(|&v| value(v).map(|v| (v, declared(v))))
        .collect::<Result<_, _>>()?;
    let outputs = f
        .outputs
        .iter()
        .map(|&v| value(v).map(|v| (v, declared(v))))
        .collect::<Result<_, _>>()?;
    let mut consts: Vec<Option<Tensor>> = vec![None; n];
    for (v, t) in weights {
        if v >= n || types[v].as_ref() != Some(&ValueType::of(&t)) {
            return Err(bad(&format!(
                "weight for value {v} does not match its type"
            )));
        }
        consts[v] = Some(t);
    }
    let live = (0..nodes.len()).collect();
    let graph = Graph {
        opset: f.opset,
        value_names: f.value_names.clone(),
        nodes,
        initializers: vec![None; n],
        deferred: BTreeMap::new(),
        inputs,
        outputs,
    };
    Ok((
        Arc::new(graph),
        Specialized {
            types,
            consts,
            live,
            extra: Vec::new(),
        },
    ))
}
