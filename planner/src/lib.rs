//! Pure placement: (cost graph, frozen cluster snapshot) -> plan.
//!
//! No clock, no randomness, no I/O, no hash maps: the same inputs give the same plan, byte for
//! byte, on every machine. That is what lets the nodes of a cluster agree on who runs what
//! without a coordinator: each recomputes the plan from the same snapshot and checks its hash.
//! A single machine is the one-node snapshot of the same function.

mod chunks;
mod cost;
mod greedy;
mod hash;
mod types;

pub use cost::LinkCosts;
pub use types::*;

/// Places every op of `graph` on a device of `snapshot`, splits the placement into chunks
/// (maximal runs of ops on one device) and lists the transfers between them.
pub fn plan(graph: &CostGraph, snapshot: &Snapshot, links: &LinkCosts) -> Result<Plan, PlanError> {
    graph.validate()?;
    let (placement, memory) = greedy::place(graph, snapshot, links)?;
    let (chunks, op_chunk) = chunks::build(graph, &placement);
    let transfers = chunks::transfers(graph, &placement, &op_chunk);
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

#[cfg(test)]
mod tests;
