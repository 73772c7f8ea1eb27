//! Following the weights: a candidate for a model whose other plans already hold its weights
//! ([`Snapshot::resident`]). Each op that reads a resident weight goes where that weight is,
//! and the ops between go with the op before them, so a language model's plan for one token
//! lands layer for layer where its plan for the prompt is and needs room only for its own
//! activations. The balanced stages may cut elsewhere (they balance the one-token plan's
//! dispatch counts, the prompt's flops), which a cluster filled by the first plan cannot hold.

use std::collections::BTreeMap;

use crate::cost::is_gpu;
use crate::greedy::can_run;
use crate::memory::Ledger;
use crate::stages::helper;
use crate::types::{CostGraph, DeviceRef, OpCost, Snapshot};

/// The placement that follows the resident weights, with each device's memory, or None when
/// nothing is resident or it does not fit.
pub fn place(
    graph: &CostGraph,
    snapshot: &Snapshot,
) -> Option<(Vec<DeviceRef>, BTreeMap<DeviceRef, u64>)> {
    let home = |op: &OpCost| -> Option<DeviceRef> {
        op.inputs.iter().find_map(|v| {
            snapshot
                .resident
                .iter()
                .find(|(d, held)| {
                    held.contains(v) && snapshot.device(d).is_some_and(|dev| can_run(op, dev))
                })
                .map(|(d, _)| d.clone())
        })
    };
    // The ops before the first that reads a resident weight go where that one does.
    let mut current = graph.ops.iter().find_map(home)?;
    let mut ledger = Ledger::new(graph, &snapshot.resident);
    let mut placement = Vec::with_capacity(graph.ops.len());
    for (o, op) in graph.ops.iter().enumerate() {
        if let Some(d) = home(op) {
            current = d;
        }
        let dev = snapshot.device(&current)?;
        let on = if can_run(op, dev) {
            current.clone()
        } else {
            helper(snapshot, op, &current)?
        };
        let gpu = snapshot.device(&on).is_some_and(is_gpu);
        let charge = ledger.charge(o, &on, gpu);
        ledger.commit(o, &on, charge);
        placement.push(on);
    }
    let memory = ledger.totals_within(snapshot)?;
    Some((placement, memory))
}
