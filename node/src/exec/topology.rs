//! A plan's chunks seen from one node: which chunks are its own, how many events each of its
//! chunks waits for, and what leaves the node when a chunk finishes.
//!
//! A chunk waits for each local predecessor chunk to finish, and for each value that another
//! node produces for it to arrive. Arrival and local completion decrement the same counter,
//! so a chunk fed from three machines starts exactly when the last of its inputs is here,
//! with no one deciding when. A value crossing to a node is sent once however many of that
//! node's chunks read it.

use std::collections::{BTreeMap, BTreeSet};

use vkml_planner::Plan;

use crate::graph::{Graph, Specialized, ValueId};

pub struct Topology {
    /// Per chunk: runs on this node.
    local: Vec<bool>,
    /// Per chunk: events it waits for (meaningful for local chunks).
    pub initial: Vec<usize>,
    pub local_chunks: usize,
    /// Values other nodes produce for this one, with the local chunks that read them.
    pub remote_in: BTreeMap<ValueId, Vec<usize>>,
    /// Per local chunk: values it produces for other nodes, with those nodes.
    pub sends: BTreeMap<usize, Vec<(ValueId, Vec<String>)>>,
    /// Per local chunk: graph outputs (indices) it produces.
    pub outputs_after: BTreeMap<usize, Vec<usize>>,
    /// Graph inputs (indices) read by local ops.
    pub needed_inputs: Vec<usize>,
}

impl Topology {
    pub fn new(graph: &Graph, spec: &Specialized, plan: &Plan, node: &str) -> Topology {
        let local: Vec<bool> = plan.chunks.iter().map(|c| c.device.node == node).collect();
        let mut initial: Vec<usize> = plan
            .chunks
            .iter()
            .map(|c| c.preds.iter().filter(|&&p| local[p]).count())
            .collect();
        let mut remote_in: BTreeMap<ValueId, Vec<usize>> = BTreeMap::new();
        let mut sends: BTreeMap<usize, BTreeMap<ValueId, BTreeSet<String>>> = BTreeMap::new();
        for t in plan.transfers.iter().filter(|t| t.cross_host) {
            let (from, to) = (t.from_chunk, t.to_chunk);
            if local[to] && !local[from] {
                let readers = remote_in.entry(t.value).or_default();
                if !readers.contains(&to) {
                    readers.push(to);
                    initial[to] += 1;
                }
            }
            if local[from] && !local[to] {
                sends
                    .entry(from)
                    .or_default()
                    .entry(t.value)
                    .or_default()
                    .insert(plan.chunks[to].device.node.clone());
            }
        }
        let mut outputs_after: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
        let mut needed: BTreeSet<usize> = BTreeSet::new();
        for (p, &n) in spec.live.iter().enumerate() {
            let c = plan.op_chunk[p];
            if !local[c] {
                continue;
            }
            let node = spec.node(graph, n);
            for (i, (v, _)) in graph.outputs.iter().enumerate() {
                if node.outputs.contains(v) {
                    outputs_after.entry(c).or_default().push(i);
                }
            }
            for (i, (v, _)) in graph.inputs.iter().enumerate() {
                if node.inputs.contains(&Some(*v)) && spec.consts[*v].is_none() {
                    needed.insert(i);
                }
            }
        }
        Topology {
            local_chunks: local.iter().filter(|&&l| l).count(),
            local,
            initial,
            remote_in,
            sends: sends
                .into_iter()
                .map(|(c, vals)| {
                    (
                        c,
                        vals.into_iter()
                            .map(|(v, nodes)| (v, nodes.into_iter().collect()))
                            .collect(),
                    )
                })
                .collect(),
            outputs_after,
            needed_inputs: needed.into_iter().collect(),
        }
    }

    pub fn is_local(&self, c: usize) -> bool {
        self.local[c]
    }
}
