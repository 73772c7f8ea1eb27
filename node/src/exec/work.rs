//! How much work an op and a chunk of a plan do, from their specialised types: what decides
//! which chunks are armed ahead on a GPU and which CPU chunks run where they become ready.

use vkml_planner::Plan;

use crate::graph::{Graph, Node, Specialized};
use crate::ops::ValueType;

/// The specialised types of `node`'s inputs (`None` for an absent or untyped one).
pub(super) fn input_types<'a>(spec: &'a Specialized, node: &Node) -> Vec<Option<&'a ValueType>> {
    node.inputs
        .iter()
        .map(|v| v.and_then(|v| spec.types[v].as_ref()))
        .collect()
}

/// The arithmetic work of the op at plan position `p`.
pub(super) fn op_flops(graph: &Graph, spec: &Specialized, p: usize) -> u64 {
    let node = spec.node(graph, spec.live[p]);
    let in_types = input_types(spec, node);
    let out_types: Vec<ValueType> = node
        .outputs
        .iter()
        .filter_map(|&o| spec.types[o].clone())
        .collect();
    node.op.flops(&in_types, &out_types)
}

/// Chunk `c`'s work: its ops' arithmetic plus the bytes of their outputs.
pub(super) fn chunk_work(graph: &Graph, spec: &Specialized, plan: &Plan, c: usize) -> u64 {
    plan.chunks[c]
        .ops
        .iter()
        .map(|&p| {
            let written: u64 = spec
                .node(graph, spec.live[p])
                .outputs
                .iter()
                .filter_map(|&o| spec.types[o].as_ref())
                .map(|t| t.bytes() as u64)
                .sum();
            op_flops(graph, spec, p).saturating_add(written)
        })
        .fold(0u64, u64::saturating_add)
}
