//! Greedy placement in topological order: each op goes to the cheapest device that can run it
//! and has room, where cheap weighs the device's speed for the op against the bytes its
//! inputs must cross to get there. Ties break on the device's place in the snapshot's order.
//! Room is what the memory ledger says the device would need at its peak (memory.rs).

use std::collections::{BTreeMap, BTreeSet};

use crate::cost::{LinkCosts, compute_ns, is_gpu, local_move_ns, move_ns};
use crate::memory::Ledger;
use crate::types::{CostGraph, DeviceInventory, DeviceRef, OpCost, PlanError, Snapshot, ValueKind};

pub fn place(
    graph: &CostGraph,
    snapshot: &Snapshot,
    links: &LinkCosts,
) -> Result<(Vec<DeviceRef>, BTreeMap<DeviceRef, u64>), PlanError> {
    let devices: Vec<_> = snapshot.devices().collect();
    if devices.is_empty() {
        return Err(PlanError::NoDevices);
    }
    let mut ledger = Ledger::new(graph, &snapshot.resident);
    let mut placement = Vec::with_capacity(graph.ops.len());

    for (o, op) in graph.ops.iter().enumerate() {
        let mut best: Option<(u64, &DeviceRef)> = None;
        let mut roomiest: Option<(u64, u64)> = None;
        let mut any_capable = false;
        for (dref, dev) in &devices {
            if !can_run(op, dev) {
                continue;
            }
            any_capable = true;
            let charge = ledger.charge(o, dref, is_gpu(dev));
            let before = ledger.used(dref);
            let after = ledger.footprint_with(dref, &charge);
            let free = dev.memory_budget.saturating_sub(before);
            // Report what the roomiest device would have needed: the same device's numbers.
            if roomiest.is_none_or(|(f, _)| free > f) {
                roomiest = Some((free, after.saturating_sub(before)));
            }
            if after > dev.memory_budget {
                continue;
            }
            let cost = op_cost(graph, snapshot, &ledger, links, op, dref, dev);
            // Strictly lower cost wins; on a tie the earlier device in the snapshot's order.
            if best.is_none_or(|(c, _)| cost < c) {
                best = Some((cost, dref));
            }
        }
        let Some((_, dref)) = best else {
            return Err(if any_capable {
                let (largest_free, needed) = roomiest.unwrap_or_default();
                PlanError::OutOfMemory {
                    op: op.name.clone(),
                    needed,
                    largest_free,
                    model_bytes: 0,
                    cluster_bytes: 0,
                }
            } else {
                PlanError::NoCapableDevice {
                    op: op.name.clone(),
                }
            });
        };
        let dref = dref.clone();
        let gpu = snapshot.device(&dref).is_some_and(is_gpu);
        let charge = ledger.charge(o, &dref, gpu);
        ledger.commit(o, &dref, charge);
        placement.push(dref);
    }
    Ok((placement, ledger.totals()))
}

/// Whether `dev` has kernels for `op` (the CPU runs everything).
pub fn can_run(op: &OpCost, dev: &DeviceInventory) -> bool {
    !is_gpu(dev) || (op.gpu && op.gpu_needs & !dev.features == 0)
}

/// Nanoseconds `op` would take on `dref`: its compute, its inputs' uploads to a GPU, and the
/// values it reads that were made on other devices.
fn op_cost(
    graph: &CostGraph,
    snapshot: &Snapshot,
    ledger: &Ledger<'_>,
    links: &LinkCosts,
    op: &OpCost,
    dref: &DeviceRef,
    dev: &DeviceInventory,
) -> u64 {
    let mut cost = compute_ns(op, dev);
    let mut seen = BTreeSet::new();
    for &v in &op.inputs {
        if !seen.insert(v) {
            continue;
        }
        let val = &graph.values[v];
        match val.kind {
            ValueKind::Input if is_gpu(dev) => {
                cost = cost.saturating_add(move_ns(
                    val.bytes,
                    links.upload_latency_ns,
                    links.local_bytes_per_us,
                ));
            }
            ValueKind::Weight | ValueKind::Input => {}
            ValueKind::Computed => {
                let from = ledger.location(v).expect("validated: produced before use");
                if from != dref {
                    cost = cost.saturating_add(if from.node == dref.node {
                        let gpus = is_gpu(dev) && snapshot.device(from).is_some_and(is_gpu);
                        local_move_ns(links, val.bytes, gpus)
                    } else {
                        move_ns(
                            val.bytes,
                            links.remote_latency_ns,
                            links.remote_bytes_per_us,
                        )
                    });
                }
            }
        }
    }
    cost
}
