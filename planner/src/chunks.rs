//! From a placement to chunks: maximal runs of ops on one device, with no cycle between them,
//! and the transfers on the edges that cross devices.

use std::collections::{BTreeMap, BTreeSet};

use crate::types::{Chunk, ChunkId, CostGraph, DeviceRef, OpId, Transfer};

/// Groups ops into chunks. An op joins the open chunk of its device unless one of the chunks
/// feeding it depends, directly or not, on that open chunk: joining would make a cycle, so
/// it opens a new chunk instead. Chunks are returned in a topological order.
pub fn build(graph: &CostGraph, placement: &[DeviceRef]) -> (Vec<Chunk>, Vec<ChunkId>) {
    let producers = graph.producers();
    let mut devices: Vec<DeviceRef> = Vec::new();
    let mut ops: Vec<Vec<OpId>> = Vec::new();
    // Chunks each chunk depends on, transitively.
    let mut ancestors: Vec<BTreeSet<ChunkId>> = Vec::new();
    let mut open: BTreeMap<DeviceRef, ChunkId> = BTreeMap::new();
    let mut op_chunk: Vec<ChunkId> = Vec::with_capacity(graph.ops.len());

    for (o, op) in graph.ops.iter().enumerate() {
        let dev = &placement[o];
        let feeding: BTreeSet<ChunkId> = op
            .inputs
            .iter()
            .filter_map(|&v| producers[v])
            .map(|p| op_chunk[p])
            .collect();
        let chunk = match open.get(dev) {
            Some(&c)
                if feeding
                    .iter()
                    .all(|&f| f == c || !ancestors[f].contains(&c)) =>
            {
                c
            }
            _ => {
                let c = ops.len();
                devices.push(dev.clone());
                ops.push(Vec::new());
                ancestors.push(BTreeSet::new());
                open.insert(dev.clone(), c);
                c
            }
        };
        // Keep every ancestor set transitively closed: what `chunk` now depends on, so does
        // every chunk that depends on `chunk`.
        let mut gained = BTreeSet::new();
        for &f in &feeding {
            if f != chunk {
                gained.insert(f);
                gained.extend(ancestors[f].iter().copied());
            }
        }
        if !gained.is_empty() {
            for (d, anc) in ancestors.iter_mut().enumerate() {
                if d == chunk || anc.contains(&chunk) {
                    anc.extend(gained.iter().copied());
                }
            }
        }
        ops[chunk].push(o);
        op_chunk.push(chunk);
    }
    let n = ops.len();
    // Direct predecessors from the data edges.
    let mut preds: Vec<BTreeSet<ChunkId>> = vec![BTreeSet::new(); n];
    for (o, op) in graph.ops.iter().enumerate() {
        for &v in &op.inputs {
            if let Some(p) = producers[v]
                && op_chunk[p] != op_chunk[o]
            {
                preds[op_chunk[o]].insert(op_chunk[p]);
            }
        }
    }
    // Kahn's algorithm, lowest id first: a total, deterministic order.
    let mut indegree: Vec<usize> = preds.iter().map(|p| p.len()).collect();
    let mut succs: Vec<BTreeSet<ChunkId>> = vec![BTreeSet::new(); n];
    for (c, ps) in preds.iter().enumerate() {
        for &p in ps {
            succs[p].insert(c);
        }
    }
    let mut ready: BTreeSet<ChunkId> = (0..n).filter(|&c| indegree[c] == 0).collect();
    let mut order = Vec::with_capacity(n);
    while let Some(c) = ready.pop_first() {
        order.push(c);
        for &s in &succs[c] {
            indegree[s] -= 1;
            if indegree[s] == 0 {
                ready.insert(s);
            }
        }
    }
    assert_eq!(order.len(), n, "chunk grouping never makes a cycle");
    let mut rank = vec![0; n];
    for (new, &old) in order.iter().enumerate() {
        rank[old] = new;
    }
    let chunks = order
        .iter()
        .map(|&old| Chunk {
            device: devices[old].clone(),
            ops: ops[old].clone(),
            preds: preds[old]
                .iter()
                .map(|&p| rank[p])
                .collect::<BTreeSet<_>>()
                .into_iter()
                .collect(),
            succs: succs[old]
                .iter()
                .map(|&s| rank[s])
                .collect::<BTreeSet<_>>()
                .into_iter()
                .collect(),
        })
        .collect();
    let op_chunk = op_chunk.into_iter().map(|c| rank[c]).collect();
    (chunks, op_chunk)
}

/// One transfer per value and consuming chunk on another device.
pub fn transfers(
    graph: &CostGraph,
    placement: &[DeviceRef],
    op_chunk: &[ChunkId],
) -> Vec<Transfer> {
    let producers = graph.producers();
    let mut seen = BTreeSet::new();
    let mut out = Vec::new();
    for (o, op) in graph.ops.iter().enumerate() {
        for &v in &op.inputs {
            let Some(p) = producers[v] else { continue };
            if placement[p] == placement[o] || !seen.insert((v, op_chunk[o])) {
                continue;
            }
            out.push(Transfer {
                value: v,
                from_chunk: op_chunk[p],
                to_chunk: op_chunk[o],
                bytes: graph.values[v].bytes,
                cross_host: placement[p].node != placement[o].node,
            });
        }
    }
    out
}
