//! A plan as the submitter and `vkml-node plan` see it: made from a specialised graph and a
//! snapshot, and described for people.

use std::collections::{BTreeMap, BTreeSet};

use vkml_planner::{CostGraph, LinkCosts, Plan, Snapshot};
use vkml_protocol::pb;

use super::DistError;
use crate::graph::{Graph, Specialized};
use crate::model::Dim;
use crate::ops::ValueType;
use crate::tuning::Tuning;

/// The declared input types when every size is fixed.
pub fn static_types(graph: &Graph) -> Option<Vec<ValueType>> {
    graph
        .inputs
        .iter()
        .map(|(_, d)| {
            let dims = d.dims.as_ref()?;
            let shape = dims
                .iter()
                .map(|x| match x {
                    Dim::Fixed(n) => Some(*n),
                    Dim::Sym(_) => None,
                })
                .collect::<Option<Vec<usize>>>()?;
            Some(ValueType::new(d.dtype?, shape))
        })
        .collect()
}

/// The most bytes one value may take when planning over `snapshot`: what the tuning says, or
/// else the largest device's budget there (a larger value could live nowhere), and never more
/// than this host's free memory, which folding constants spends while planning.
pub fn value_limit(snapshot: &Snapshot, tuning: &Tuning) -> u64 {
    tuning.max_value_bytes.unwrap_or_else(|| {
        let largest = snapshot.devices().map(|(_, d)| d.memory_budget).max();
        largest.unwrap_or(0).min(crate::exec::cpu_memory())
    })
}

/// Plans a specialised graph over a snapshot (blocking; pure).
pub fn plan_for(
    graph: &Graph,
    spec: Specialized,
    snapshot: &Snapshot,
    tuning: &Tuning,
) -> Result<(Plan, CostGraph, Specialized), DistError> {
    let (cost, _) = crate::exec::cost_graph(graph, &spec, &tuning.kernels);
    let plan = vkml_planner::plan(&cost, snapshot, &LinkCosts::default())
        .map_err(|e| DistError::Placement(e.to_string()))?;
    Ok((plan, cost, spec))
}

/// Where a plan puts a model, for people: ops, memory and estimated busy time per run per node
/// and device, and the values that cross between nodes (once per value and receiving node, as
/// they are sent).
pub fn describe(
    graph: &Graph,
    cost: &CostGraph,
    plan: &Plan,
    snapshot: &Snapshot,
) -> pb::Placement {
    let mut parts: BTreeMap<(String, usize), (u32, u64, u64)> = BTreeMap::new();
    for d in &plan.placement {
        parts.entry((d.node.clone(), d.index)).or_default().0 += 1;
    }
    for (d, &bytes) in &plan.memory {
        parts.entry((d.node.clone(), d.index)).or_default().1 = bytes;
    }
    for (d, ns) in vkml_planner::device_ns(cost, snapshot, &LinkCosts::default(), plan) {
        parts.entry((d.node.clone(), d.index)).or_default().2 = ns;
    }
    let mut edges = BTreeSet::new();
    let mut cut = Vec::new();
    for t in plan.transfers.iter().filter(|t| t.cross_host) {
        let from = &plan.chunks[t.from_chunk].device.node;
        let to = &plan.chunks[t.to_chunk].device.node;
        if edges.insert((t.value, to.clone())) {
            cut.push(pb::CutEdge {
                value: graph.value_names[t.value].clone(),
                from_node: from.clone(),
                to_node: to.clone(),
                bytes: t.bytes,
            });
        }
    }
    pb::Placement {
        plan_hash: plan.hash,
        snapshot_version: plan.snapshot_version,
        chunks: plan.chunks.len() as u32,
        parts: parts
            .into_iter()
            .map(
                |((node, index), (ops, memory_bytes, busy_ns))| pb::PlacedPart {
                    device: snapshot
                        .nodes
                        .get(&node)
                        .and_then(|d| d.get(index))
                        .map_or_else(|| format!("device {index}"), |d| d.name.clone()),
                    node,
                    ops,
                    memory_bytes,
                    busy_ns,
                },
            )
            .collect(),
        edges: cut,
    }
}
