//! Contiguous stages: the plan for a model that greedy placement cannot fit.
//!
//! Greedy placement puts each op where it runs fastest while there is room, so the fastest
//! devices fill first, and the tail of the graph may find every device too full for its next
//! op although the cluster as a whole has room to spare. Splitting a model the way llama.cpp
//! and exo split layers avoids that for any ONNX graph: the ops, in topological order, are cut
//! into one contiguous stage per device. Three sizings are tried:
//! - balanced: the stages' compute times on their devices are as even as they can be, so the
//!   slowest stage, which sets a pipeline's throughput, is as fast as it can be (a device twice
//!   as fast takes twice the work), within each device's memory;
//! - proportional: each device's stage holds a share of the weights in proportion to its
//!   budget;
//! - filling: each device takes as much as fits (it fits where proportional shares do not,
//!   e.g. when one op's activations are large next to a small device).
//!
//! The devices take the stages in the snapshot's order, the origin's (the node the model was
//! submitted to) moved to the end: see `Snapshot::origin`.
//!
//! Each cut lands on the narrowest edge (fewest bytes crossing) among the last quarter of the
//! positions that reach the stage's size, and each stage keeps room for its own peak
//! activations: the memory ledger charges a stage exactly as it charges greedy placement. An
//! op the stage's GPU cannot run goes to the first device of the same node that can.

use std::collections::{BTreeMap, BTreeSet};

use crate::cost::{compute_ns, is_gpu};
use crate::greedy::can_run;
use crate::memory::{Ledger, last_uses};
use crate::types::{CostGraph, DeviceInventory, DeviceRef, OpId, Snapshot, ValueId, ValueKind};

type Resident = BTreeMap<DeviceRef, BTreeSet<ValueId>>;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sizing {
    Balanced,
    Proportional,
    Filling,
}

/// A stage placement of the whole graph, with each device's memory, or None when it does not
/// fit.
pub fn place(
    graph: &CostGraph,
    snapshot: &Snapshot,
    sizing: Sizing,
) -> Option<(Vec<DeviceRef>, BTreeMap<DeviceRef, u64>)> {
    // The snapshot's order, the origin's devices moved to the end (Snapshot::origin says why).
    let (mut devices, at_origin): (Vec<_>, Vec<_>) = snapshot
        .devices()
        .filter(|(_, d)| d.memory_budget > 0)
        .partition(|(r, _)| snapshot.origin.as_ref() != Some(&r.node));
    devices.extend(at_origin);
    let devices: Vec<(DeviceRef, &DeviceInventory)> = devices;
    let n = graph.ops.len();
    if devices.is_empty() || n == 0 {
        return None;
    }
    let weight = weight_prefix(graph);
    let cut = cut_widths(graph);
    let total_budget: u128 = devices
        .iter()
        .map(|(_, d)| u128::from(d.memory_budget))
        .sum();
    let mut budget_before: u128 = 0;
    let mut ledger = Ledger::new(graph, &snapshot.resident);
    let mut placement: Vec<DeviceRef> = Vec::with_capacity(n);
    let balanced = match sizing {
        Sizing::Balanced => Some(balanced_ends(graph, &devices, &snapshot.resident)?),
        _ => None,
    };
    let mut start = 0;
    for (i, (dref, dev)) in devices.iter().enumerate() {
        if start == n {
            break;
        }
        budget_before += u128::from(dev.memory_budget);
        let end = if let Some(ends) = &balanced {
            ends[i]
        } else if i + 1 == devices.len() {
            n
        } else {
            let fits = fitting_end(graph, start, dref, dev, &snapshot.resident);
            let hi = match sizing {
                Sizing::Filling | Sizing::Balanced => fits,
                Sizing::Proportional => {
                    let share = weight[n] * budget_before / total_budget;
                    let target = weight.partition_point(|&w| w < share).min(n);
                    target.min(fits)
                }
            };
            if hi <= start {
                continue;
            }
            narrowest_cut(&cut, start, hi)
        };
        if end <= start {
            continue;
        }
        for o in start..end {
            let on = if can_run(&graph.ops[o], dev) {
                dref.clone()
            } else {
                helper(snapshot, &graph.ops[o], dref)?
            };
            let gpu = snapshot.device(&on).is_some_and(is_gpu);
            let charge = ledger.charge(o, &on, gpu);
            ledger.commit(o, &on, charge);
            placement.push(on);
        }
        start = end;
    }
    if placement.len() != n {
        return None;
    }
    let memory = ledger.totals_within(snapshot)?;
    Some((placement, memory))
}

/// Where each device's stage ends (`ends[i]` for the i-th of `devices`; a device whose stage
/// is empty ends where the one before it did), for the stages whose slowest is fastest: the
/// least time `t` for which, in device order, each device taking every op that fits its
/// budget and its share of `t` covers the graph. Taking all it can is the best a device can do
/// for the ones after it, so for a given `t` that pass finds a cover when any exists, and a
/// binary search over `t` finds the best. None when no `t` covers the graph (memory).
fn balanced_ends(
    graph: &CostGraph,
    devices: &[(DeviceRef, &DeviceInventory)],
    resident: &Resident,
) -> Option<Vec<usize>> {
    let n = graph.ops.len();
    // Each device's compute time over the first `e` ops it runs (an op it cannot run goes to
    // a helper and costs it nothing).
    let prefix: Vec<Vec<u64>> = devices
        .iter()
        .map(|(_, dev)| {
            let mut p = Vec::with_capacity(n + 1);
            let mut sum = 0u64;
            p.push(0);
            for op in &graph.ops {
                if can_run(op, dev) {
                    sum = sum.saturating_add(compute_ns(op, dev));
                }
                p.push(sum);
            }
            p
        })
        .collect();
    let mut fits: BTreeMap<(usize, usize), usize> = BTreeMap::new();
    let mut cover = |t: u64| -> Option<Vec<usize>> {
        let mut ends = Vec::with_capacity(devices.len());
        let mut start = 0;
        for (i, (dref, dev)) in devices.iter().enumerate() {
            if start < n {
                let hi = *fits
                    .entry((i, start))
                    .or_insert_with(|| fitting_end(graph, start, dref, dev, resident));
                let p = &prefix[i];
                // The last end within the device's share of `t`, no further than fits.
                let within = p.partition_point(|&x| x <= p[start].saturating_add(t)) - 1;
                start = within.min(hi).max(start);
            }
            ends.push(start);
        }
        (start == n).then_some(ends)
    };
    let slowest = prefix.iter().map(|p| p[n]).max().unwrap_or(0);
    let mut best = cover(slowest)?;
    let (mut lo, mut hi) = (0u64, slowest);
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        match cover(mid) {
            Some(ends) => {
                best = ends;
                hi = mid;
            }
            None => lo = mid + 1,
        }
    }
    Some(best)
}

/// The end of the longest run of ops from `start` whose share on `dref` fits its budget; ops
/// the device cannot run are charged to their helper, not here.
fn fitting_end(
    graph: &CostGraph,
    start: OpId,
    dref: &DeviceRef,
    dev: &DeviceInventory,
    resident: &Resident,
) -> usize {
    // Values from earlier stages are not located in this ledger, so it charges them as
    // received, which is what they will be.
    let mut alone = Ledger::new(graph, resident);
    let gpu = is_gpu(dev);
    for o in start..graph.ops.len() {
        if !can_run(&graph.ops[o], dev) {
            continue;
        }
        let charge = alone.charge(o, dref, gpu);
        if alone.footprint_with(dref, &charge) > dev.memory_budget {
            return o;
        }
        alone.commit(o, dref, charge);
    }
    graph.ops.len()
}

/// Among the last quarter of `start+1..=hi`, the cut position with the fewest bytes crossing
/// it; the later one on a tie (the stage closest to its size).
fn narrowest_cut(cut: &[u64], start: usize, hi: usize) -> usize {
    let lo = (start + (hi - start) * 3 / 4).max(start + 1);
    (lo..=hi)
        .min_by_key(|&e| (cut[e], std::cmp::Reverse(e)))
        .unwrap_or(hi)
}

/// The first device of `dref`'s node that runs `op`, then any device of the cluster.
pub(crate) fn helper(
    snapshot: &Snapshot,
    op: &crate::types::OpCost,
    dref: &DeviceRef,
) -> Option<DeviceRef> {
    let capable: Vec<DeviceRef> = snapshot
        .devices()
        .filter(|(_, d)| can_run(op, d))
        .map(|(r, _)| r)
        .collect();
    capable
        .iter()
        .find(|r| r.node == dref.node)
        .or(capable.first())
        .cloned()
}

/// `w[e]`: bytes of weights and inputs first read by the ops before position `e`, plus one per
/// op (so a graph without weights is still cut by its ops); `w.len()` is ops + 1.
fn weight_prefix(graph: &CostGraph) -> Vec<u128> {
    let mut seen = vec![false; graph.values.len()];
    let mut w = Vec::with_capacity(graph.ops.len() + 1);
    let mut sum: u128 = 0;
    w.push(0);
    for op in &graph.ops {
        sum += 1;
        for &v in &op.inputs {
            if graph.values[v].kind != ValueKind::Computed && !seen[v] {
                seen[v] = true;
                sum += u128::from(graph.values[v].bytes);
            }
        }
        w.push(sum);
    }
    w
}

/// `cut[e]`: bytes of computed values made before position `e` and read at `e` or later.
fn cut_widths(graph: &CostGraph) -> Vec<u64> {
    let n = graph.ops.len();
    let last = last_uses(graph);
    let mut delta = vec![0i128; n + 2];
    for (p, op) in graph.ops.iter().enumerate() {
        for &v in &op.outputs {
            // Read after its maker; a graph output counts as read at the end, which only
            // shifts every later cut alike.
            if last[v] > p {
                delta[p + 1] += i128::from(graph.values[v].bytes);
                delta[last[v].min(n) + 1] -= i128::from(graph.values[v].bytes);
            }
        }
    }
    let mut cut = Vec::with_capacity(n + 1);
    let mut run: i128 = 0;
    for d in delta.iter().take(n + 1) {
        run += d;
        cut.push(u64::try_from(run.max(0)).unwrap_or(u64::MAX));
    }
    cut
}
