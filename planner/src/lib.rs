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
mod memory;
mod peak;
mod resident;
mod stages;
mod types;
mod whole;

use std::collections::BTreeMap;

pub use cost::{FALLBACK_OVERHEAD_NS, LinkCosts};

/// Runs in flight a pipeline plan is ranked for (see [`plan`]): a model split over machines is
/// there to serve many clients, so its throughput counts for far more than one run's latency,
/// but a split that saves a few percent of the busiest device's time still loses to one with
/// a cut edge fewer.
pub const PIPELINED_RUNS: u64 = 16;

/// Nanoseconds each device of `plan` is busy per run, as the planner estimates it (its ops'
/// compute and GPU submissions; transfers overlap other runs): the largest bounds the plan's
/// throughput, one run per that time with many runs in flight.
pub fn device_ns(
    graph: &CostGraph,
    snapshot: &Snapshot,
    links: &LinkCosts,
    plan: &Plan,
) -> BTreeMap<DeviceRef, u64> {
    whole::device_ns(
        graph,
        snapshot,
        links,
        &plan.placement,
        &plan.chunks,
        &plan.transfers,
    )
}
/// Nanoseconds one run of `plan` takes, as the planner estimates it when it ranks plans (every
/// op's compute, transfer and GPU submission, summed): comparable between plans of one graph
/// over different snapshots.
pub fn run_ns(graph: &CostGraph, snapshot: &Snapshot, links: &LinkCosts, plan: &Plan) -> u64 {
    whole::estimate_ns(
        graph,
        snapshot,
        links,
        &plan.placement,
        &plan.chunks,
        &plan.transfers,
    )
}

pub use memory::single_device as single_device_bytes;
pub use types::*;

/// Places every op of `graph` on a device of `snapshot`, splits the placement into chunks
/// (maximal runs of ops on one device) and lists the transfers between them. The candidates,
/// in order: greedy placement, every single device that holds the whole model (whole.rs),
/// contiguous stages sized to balance the devices' compute, in proportion to the budgets, or
/// filling each device (stages.rs, which says why), and the placement that follows the
/// weights the model's other plans hold (resident.rs). The one with the lowest estimated run time
/// wins, the earlier on a tie, so stages win only where the faster plans do not fit. Where no
/// single device holds the model, every plan is a pipeline, whose throughput under load is set
/// by its busiest device: plans are then ranked by the time [`PIPELINED_RUNS`] runs in flight
/// take, one run time plus that many less one of the busiest device's time per run, so an
/// evener split wins unless it costs more in transfers than it saves.
pub fn plan(graph: &CostGraph, snapshot: &Snapshot, links: &LinkCosts) -> Result<Plan, PlanError> {
    graph.validate()?;
    let greedy = greedy::place(graph, snapshot, links);
    let singles: Vec<_> = snapshot
        .devices()
        .filter_map(|(dref, _)| whole::on_one_device(graph, snapshot, &dref))
        .collect();
    let pipeline = singles.is_empty();
    let staged = [
        stages::Sizing::Balanced,
        stages::Sizing::Proportional,
        stages::Sizing::Filling,
    ]
    .into_iter()
    .filter_map(|sizing| stages::place(graph, snapshot, sizing));
    let following = resident::place(graph, snapshot);
    let candidates = greedy
        .clone()
        .ok()
        .into_iter()
        .chain(singles)
        .chain(staged)
        .chain(following);
    let mut best: Option<(u64, Candidate)> = None;
    for (placement, memory) in candidates {
        let (chunks, op_chunk) = chunks::build(graph, &placement);
        let transfers = chunks::transfers(graph, &placement, &op_chunk);
        let mut cost = whole::estimate_ns(graph, snapshot, links, &placement, &chunks, &transfers);
        if pipeline {
            let busiest = whole::device_ns(graph, snapshot, links, &placement, &chunks, &transfers)
                .into_values()
                .max()
                .unwrap_or(0);
            cost = cost.saturating_add(busiest.saturating_mul(PIPELINED_RUNS - 1));
        }
        if best.as_ref().is_none_or(|(c, _)| cost < *c) {
            best = Some((cost, (placement, memory, chunks, op_chunk, transfers)));
        }
    }
    let Some((_, (placement, memory, chunks, op_chunk, transfers))) = best else {
        // Greedy placement is a candidate whenever it succeeds: it failed.
        let e = greedy.expect_err("nothing fit, so greedy placement did not");
        return Err(no_fit(graph, snapshot, e));
    };
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

/// The error when no candidate fits: greedy's, with the totals that say how far off it is.
fn no_fit(graph: &CostGraph, snapshot: &Snapshot, greedy: PlanError) -> PlanError {
    match greedy {
        PlanError::OutOfMemory {
            op,
            needed,
            largest_free,
            ..
        } => {
            let roomiest_gpu = snapshot
                .devices()
                .max_by_key(|(_, d)| d.memory_budget)
                .is_some_and(|(_, d)| d.kind == DeviceKind::Gpu);
            PlanError::OutOfMemory {
                op,
                needed,
                largest_free,
                model_bytes: memory::single_device(graph, roomiest_gpu),
                cluster_bytes: snapshot
                    .devices()
                    .map(|(_, d)| d.memory_budget)
                    .fold(0, u64::saturating_add),
            }
        }
        e => e,
    }
}

type Candidate = (
    Vec<DeviceRef>,
    BTreeMap<DeviceRef, u64>,
    Vec<Chunk>,
    Vec<ChunkId>,
    Vec<Transfer>,
);

#[cfg(test)]
mod stage_tests;
#[cfg(test)]
mod tests;
