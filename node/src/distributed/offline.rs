//! Planning a model over a cluster without running it (`vkml-node plan`): the same planner
//! and the same cost graph the submitter uses, over a snapshot read from a live node or a
//! file.

use std::path::Path;

use vkml_planner::Snapshot;
use vkml_protocol::pb;

use super::DistError;
use crate::graph::{Graph, SpecializeError};
use crate::model::Dim;
use crate::ops::ValueType;
use crate::tensor::Tensor;
use crate::tuning::Tuning;

/// One op of the plan: its name, type, and where it runs.
pub struct PlacedOp {
    pub name: String,
    pub op_type: String,
    pub node: String,
    pub device: String,
    pub chunk: usize,
}

pub struct PlanReport {
    pub placement: pb::Placement,
    pub ops: Vec<PlacedOp>,
    /// Symbolic input sizes taken as 1 because no input fixed them.
    pub assumed: Vec<String>,
}

/// Plans `path` over `snapshot` with the plan settings of `tuning`. `inputs` (in graph order,
/// when given) fix symbolic sizes and the values a plan may depend on; without them symbolic
/// sizes are taken as 1.
pub fn plan_model(
    path: &Path,
    snapshot: &Snapshot,
    inputs: Option<&[Tensor]>,
    tuning: &Tuning,
) -> Result<PlanReport, DistError> {
    let model = crate::onnx::load(path).map_err(|e| DistError::Runtime(e.into()))?;
    let graph = Graph::from_model(&model)?;
    let mut assumed = Vec::new();
    let types: Vec<ValueType> = match inputs {
        Some(ins) => ins.iter().map(ValueType::of).collect(),
        None => graph
            .inputs
            .iter()
            .map(|(_, d)| {
                let dtype = d.dtype.ok_or_else(|| {
                    DistError::Unsupported(format!("input '{}' declares no element type", d.name))
                })?;
                let shape = d
                    .dims
                    .as_ref()
                    .ok_or_else(|| {
                        DistError::Unsupported(format!(
                            "input '{}' declares no shape: give it with --input",
                            d.name
                        ))
                    })?
                    .iter()
                    .map(|x| match x {
                        Dim::Fixed(n) => *n,
                        Dim::Sym(s) => {
                            if !assumed.contains(s) {
                                assumed.push(s.clone());
                            }
                            1
                        }
                    })
                    .collect();
                Ok(ValueType::new(dtype, shape))
            })
            .collect::<Result<_, DistError>>()?,
    };
    let known: Vec<Option<&Tensor>> = match inputs {
        Some(ins) => ins.iter().map(Some).collect(),
        None => Vec::new(),
    };
    let gpu = snapshot
        .devices()
        .any(|(_, d)| d.kind == vkml_planner::DeviceKind::Gpu);
    let fuse = tuning.fusion.for_plan(gpu);
    let limit = super::placement::value_limit(snapshot, tuning);
    let spec = match graph.specialize_with(&types, &known, fuse, limit) {
        Ok(s) => s,
        Err(SpecializeError::NeedsValues(which)) => {
            let names: Vec<&str> = which
                .iter()
                .filter_map(|&i| graph.inputs.get(i).map(|(_, d)| d.name.as_str()))
                .collect();
            return Err(DistError::Unsupported(format!(
                "the plan depends on the values of input(s) {}: give them with --input",
                names.join(", ")
            )));
        }
        Err(e) => return Err(DistError::Runtime(e.into())),
    };
    let (plan, cost, spec) = super::placement::plan_for(&graph, spec, snapshot, tuning)?;
    let placement = super::placement::describe(&graph, &cost, &plan, snapshot);
    let ops = placed_ops(&graph, &spec, &plan, snapshot);
    Ok(PlanReport {
        placement,
        ops,
        assumed,
    })
}

/// Where the plan put each live op, in plan order: what `plan` prints.
pub fn placed_ops(
    graph: &Graph,
    spec: &crate::graph::Specialized,
    plan: &vkml_planner::Plan,
    snapshot: &Snapshot,
) -> Vec<PlacedOp> {
    spec.live
        .iter()
        .enumerate()
        .map(|(p, &n)| {
            let d = &plan.placement[p];
            PlacedOp {
                name: spec.node(graph, n).name.clone(),
                op_type: spec.node(graph, n).op_type.clone(),
                node: d.node.clone(),
                device: snapshot
                    .device(d)
                    .map_or_else(|| format!("device {}", d.index), |x| x.name.clone()),
                chunk: plan.op_chunk[p],
            }
        })
        .collect()
}
