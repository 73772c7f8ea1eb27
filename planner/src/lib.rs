//! Pure placement: (cost graph, frozen cluster snapshot) -> plan.
//!
//! No clock, no randomness, no I/O, no hash maps: the same inputs give the same plan, byte for
//! byte, on every machine. That is what lets the nodes of a cluster agree on who runs what
//! without a coordinator: each recomputes the plan from the same snapshot and checks its hash.
//! A single machine is the one-node snapshot of the same function.

#![deny(unsafe_code)]

mod chunks;
mod cost;
mod greedy;
mod hash;
mod types;
mod whole;

pub use cost::LinkCosts;
pub use types::*;

/// Places every op of `graph` on a device of `snapshot` (greedily, or all on one device when
/// that is estimated faster: see whole.rs), splits the placement into chunks (maximal runs of
/// ops on one device) and lists the transfers between them.
pub fn plan(graph: &CostGraph, snapshot: &Snapshot, links: &LinkCosts) -> Result<Plan, PlanError> {
    graph.validate()?;
    let greedy = greedy::place(graph, snapshot, links)?;
    let mut best: Option<(u64, Candidate)> = None;
    let singles = snapshot
        .devices()
        .filter_map(|(dref, _)| whole::on_one_device(graph, snapshot, &dref));
    for (placement, memory) in std::iter::once(greedy).chain(singles) {
        let (chunks, op_chunk) = chunks::build(graph, &placement);
        let transfers = chunks::transfers(graph, &placement, &op_chunk);
        let cost = whole::estimate_ns(graph, snapshot, links, &placement, &chunks, &transfers);
        if best.as_ref().is_none_or(|(c, _)| cost < *c) {
            best = Some((cost, (placement, memory, chunks, op_chunk, transfers)));
        }
    }
    let (_, (placement, memory, chunks, op_chunk, transfers)) =
        best.expect("the greedy plan is always a candidate");
    let mut plan = Plan {
        snapshot_version: snapshot.version,
        placement,
        op_chunk,
        chunks,
        transfers,
        memory,
        hash: 0,
    };
    plan.hash = hash::plan_hash(&plan);
    Ok(plan)
}

type Candidate = (
    Vec<DeviceRef>,
    std::collections::BTreeMap<DeviceRef, u64>,
    Vec<Chunk>,
    Vec<ChunkId>,
    Vec<Transfer>,
);

#[cfg(test)]
mod tests;
