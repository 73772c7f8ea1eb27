//! Greedy placement is myopic: it places one op at a time, so it cannot weigh what a plan
//! costs per run as a whole (a GPU submission and its completion, tens of microseconds, is
//! paid once per chunk whatever the chunk holds). A tiny model is then faster on the CPU alone,
//! and a model whose first ops are cheap anywhere may start on the CPU and stay there. So the
//! greedy plan is compared with every single-device plan that fits, by an estimate of one
//! run's time, and the cheapest wins (the greedy plan on a tie, then snapshot order).

use std::collections::{BTreeMap, BTreeSet};

use crate::cost::{LinkCosts, compute_ns, is_gpu, local_move_ns, move_ns};
use crate::greedy::can_run;
use crate::memory::charge_placement;
use crate::types::{Chunk, CostGraph, DeviceRef, Snapshot, Transfer, ValueKind};

/// Nanoseconds one run of a plan takes, estimated as a sum (no overlap between devices, so
/// split plans are, if anything, overestimated): every op's compute on its device, every
/// transfer, every graph input uploaded to a GPU that reads it, and one submission per GPU
/// chunk.
pub fn estimate_ns(
    graph: &CostGraph,
    snapshot: &Snapshot,
    links: &LinkCosts,
    placement: &[DeviceRef],
    chunks: &[Chunk],
    transfers: &[Transfer],
) -> u64 {
    let mut total: u64 = 0;
    let mut uploaded = BTreeSet::new();
    for (op, dref) in graph.ops.iter().zip(placement) {
        let Some(dev) = snapshot.device(dref) else {
            return u64::MAX;
        };
        total = total.saturating_add(compute_ns(op, dev));
        if is_gpu(dev) {
            for &v in &op.inputs {
                let val = &graph.values[v];
                if val.kind == ValueKind::Input && uploaded.insert((dref.clone(), v)) {
                    total = total.saturating_add(move_ns(
                        val.bytes,
                        links.upload_latency_ns,
                        links.local_bytes_per_us,
                    ));
                }
            }
        }
    }
    for t in transfers {
        total = total.saturating_add(if t.cross_host {
            move_ns(t.bytes, links.remote_latency_ns, links.remote_bytes_per_us)
        } else {
            let gpu = |c: usize| snapshot.device(&chunks[c].device).is_some_and(is_gpu);
            local_move_ns(links, t.bytes, gpu(t.from_chunk) && gpu(t.to_chunk))
        });
    }
    for c in chunks {
        if snapshot.device(&c.device).is_some_and(is_gpu) {
            total = total.saturating_add(links.gpu_run_ns);
        }
    }
    total
}

/// Nanoseconds each device of a plan is busy per run: its ops' compute, one submission per
/// GPU chunk, and the host work of each cross-host transfer at both ends, the origin's relay
/// of the graph's inputs and outputs included (`relay`). A transfer's wait is left out: in a
/// pipeline it overlaps with other runs' compute. The largest is the plan's bottleneck: with
/// many runs in flight, one run in that time.
pub fn device_ns(
    graph: &CostGraph,
    snapshot: &Snapshot,
    links: &LinkCosts,
    placement: &[DeviceRef],
    chunks: &[Chunk],
    transfers: &[Transfer],
) -> BTreeMap<DeviceRef, u64> {
    let mut busy: BTreeMap<DeviceRef, u64> = BTreeMap::new();
    for (op, dref) in graph.ops.iter().zip(placement) {
        if let Some(dev) = snapshot.device(dref) {
            let t = busy.entry(dref.clone()).or_default();
            *t = t.saturating_add(compute_ns(op, dev));
        }
    }
    for c in chunks {
        if snapshot.device(&c.device).is_some_and(is_gpu) {
            let t = busy.entry(c.device.clone()).or_default();
            *t = t.saturating_add(links.gpu_run_ns);
        }
    }
    for tr in transfers.iter().filter(|t| t.cross_host) {
        let host = move_ns(tr.bytes, links.remote_cpu_ns, links.remote_cpu_bytes_per_us);
        for c in [tr.from_chunk, tr.to_chunk] {
            if let Some(chunk) = chunks.get(c) {
                let t = busy.entry(chunk.device.clone()).or_default();
                *t = t.saturating_add(host);
            }
        }
    }
    for (at, host) in relay(graph, snapshot, links, placement) {
        let t = busy.entry(at).or_default();
        *t = t.saturating_add(host);
    }
    busy
}

/// The host work of the origin's relay (`Snapshot::origin`, the node a model is submitted
/// to): every run's inputs come from it and its outputs return to it, so each graph input an
/// op of another node reads, and each graph output another node makes, crosses between that
/// node's device and the origin's first device, charged to both. Empty without an origin.
fn relay(
    graph: &CostGraph,
    snapshot: &Snapshot,
    links: &LinkCosts,
    placement: &[DeviceRef],
) -> Vec<(DeviceRef, u64)> {
    let Some(origin) = snapshot.origin.as_ref() else {
        return Vec::new();
    };
    let at = DeviceRef {
        node: origin.clone(),
        index: 0,
    };
    if snapshot.device(&at).is_none() {
        return Vec::new();
    }
    let mut crossing: BTreeSet<(usize, &DeviceRef)> = BTreeSet::new();
    for (op, d) in graph.ops.iter().zip(placement) {
        if d.node == *origin {
            continue;
        }
        let inputs = op
            .inputs
            .iter()
            .filter(|&&v| graph.values[v].kind == ValueKind::Input);
        let outputs = op.outputs.iter().filter(|&&v| graph.values[v].output);
        crossing.extend(inputs.chain(outputs).map(|&v| (v, d)));
    }
    let mut out = Vec::with_capacity(crossing.len() * 2);
    for (v, d) in crossing {
        let host = move_ns(
            graph.values[v].bytes,
            links.remote_cpu_ns,
            links.remote_cpu_bytes_per_us,
        );
        out.push((at.clone(), host));
        out.push((d.clone(), host));
    }
    out
}

/// Every op on `dref`, with the memory that takes, when the device can run them all and hold
/// them as the memory ledger charges it.
pub fn on_one_device(
    graph: &CostGraph,
    snapshot: &Snapshot,
    dref: &DeviceRef,
) -> Option<(Vec<DeviceRef>, BTreeMap<DeviceRef, u64>)> {
    let dev = snapshot.device(dref)?;
    if !graph.ops.iter().all(|op| can_run(op, dev)) {
        return None;
    }
    let placement = vec![dref.clone(); graph.ops.len()];
    let memory = charge_placement(graph, snapshot, &placement);
    if memory.get(dref).is_some_and(|&b| b > dev.memory_budget) {
        return None;
    }
    Some((placement, memory))
}
