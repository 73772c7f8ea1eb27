//! Greedy placement in topological order: each op goes to the cheapest device that can run it
//! and has room, where cheap weighs the device's speed for the op against the bytes its
//! inputs must cross to get there. Ties break on the device's place in the snapshot's order.

use std::collections::{BTreeMap, BTreeSet};

use crate::cost::{LinkCosts, compute_ns, is_gpu, move_ns};
use crate::types::{CostGraph, DeviceRef, PlanError, Snapshot, ValueId, ValueKind};

pub fn place(
    graph: &CostGraph,
    snapshot: &Snapshot,
    links: &LinkCosts,
) -> Result<(Vec<DeviceRef>, BTreeMap<DeviceRef, u64>), PlanError> {
    let devices: Vec<_> = snapshot.devices().collect();
    if devices.is_empty() {
        return Err(PlanError::NoDevices);
    }
    let mut used: BTreeMap<DeviceRef, u64> = BTreeMap::new();
    // Weights and inputs already charged to a device: charged once however many ops use them.
    let mut resident: BTreeSet<(DeviceRef, ValueId)> = BTreeSet::new();
    let mut location: Vec<Option<DeviceRef>> = vec![None; graph.values.len()];
    let mut placement = Vec::with_capacity(graph.ops.len());

    for op in &graph.ops {
        let mut best: Option<(u64, &DeviceRef)> = None;
        let mut largest_free = 0u64;
        let mut any_capable = false;
        let mut needed_min = u64::MAX;
        for (dref, dev) in &devices {
            if is_gpu(dev) && (!op.gpu || op.gpu_needs & !dev.features != 0) {
                continue;
            }
            any_capable = true;
            let mut need: u64 = 0;
            let mut cost = compute_ns(op, dev);
            let mut seen = BTreeSet::new();
            for &v in &op.inputs {
                if !seen.insert(v) {
                    continue;
                }
                let val = &graph.values[v];
                match val.kind {
                    ValueKind::Weight | ValueKind::Input => {
                        if !resident.contains(&(dref.clone(), v)) {
                            need = need.saturating_add(val.bytes);
                        }
                        if val.kind == ValueKind::Input && is_gpu(dev) {
                            cost = cost.saturating_add(move_ns(
                                val.bytes,
                                links.upload_latency_ns,
                                links.local_bytes_per_us,
                            ));
                        }
                    }
                    ValueKind::Computed => {
                        let from = location[v]
                            .as_ref()
                            .expect("validated: produced before use");
                        if from != dref {
                            cost = cost.saturating_add(if from.node == dref.node {
                                move_ns(val.bytes, links.local_latency_ns, links.local_bytes_per_us)
                            } else {
                                move_ns(
                                    val.bytes,
                                    links.remote_latency_ns,
                                    links.remote_bytes_per_us,
                                )
                            });
                            // The copy that arrives needs room too.
                            need = need.saturating_add(val.bytes);
                        }
                    }
                }
            }
            if !op.view {
                for &v in &op.outputs {
                    need = need.saturating_add(graph.values[v].bytes);
                }
            }
            let free = dev
                .memory_budget
                .saturating_sub(used.get(dref).copied().unwrap_or(0));
            // Report what the roomiest device would have needed: the same device's numbers.
            if free > largest_free || needed_min == u64::MAX {
                largest_free = free;
                needed_min = need;
            }
            if need > free {
                continue;
            }
            // Strictly lower cost wins; on a tie the earlier device in the snapshot's order.
            if best.is_none_or(|(c, _)| cost < c) {
                best = Some((cost, dref));
            }
        }
        let Some((_, dref)) = best else {
            return Err(if any_capable {
                PlanError::OutOfMemory {
                    op: op.name.clone(),
                    needed: needed_min,
                    largest_free,
                }
            } else {
                PlanError::NoCapableDevice {
                    op: op.name.clone(),
                }
            });
        };
        let dref = dref.clone();
        let mut charge = 0u64;
        for &v in &op.inputs {
            let val = &graph.values[v];
            match val.kind {
                ValueKind::Weight | ValueKind::Input => {
                    if resident.insert((dref.clone(), v)) {
                        charge = charge.saturating_add(val.bytes);
                    }
                }
                ValueKind::Computed => {
                    if location[v].as_ref() != Some(&dref) && resident.insert((dref.clone(), v)) {
                        charge = charge.saturating_add(val.bytes);
                    }
                }
            }
        }
        for &v in &op.outputs {
            if !op.view {
                charge = charge.saturating_add(graph.values[v].bytes);
            }
            location[v] = Some(dref.clone());
        }
        *used.entry(dref.clone()).or_default() += charge;
        placement.push(dref);
    }
    Ok((placement, used))
}
