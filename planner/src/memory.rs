//! What a placement costs each device in memory, charged as the runtime spends it.
//!
//! Weights, graph inputs and values received from other devices stay for the model's (or the
//! run's) whole life: they are resident. A computed value lives from its op to its last reader
//! (through the views that alias it; a graph output to the end): a GPU assigns its
//! intermediate buffers by lifetime (node/src/exec/arena.rs), so two values whose lives do not
//! overlap share bytes, and a CPU run drops a value after its last reader there
//! (node/src/exec/release.rs). A device's footprint is then its widest cut, not the sum of
//! its outputs: charging the sum refused models that fit three times over (SqueezeNet: 33 MB
//! charged against 11 MB used). On a GPU each value takes whole units of the arena's
//! alignment. The last reader is the last anywhere: a value read on another device is sent
//! when its chunk finishes, which is no later than its reader there starts.
//!
//! The ledger answers "how much would this device need if this op went there" without
//! changing anything, so greedy placement can ask it of every device, and records the answer
//! for the one chosen.

use std::collections::{BTreeMap, BTreeSet};

use crate::cost::is_gpu;
use crate::peak::PeakTree;
use crate::types::{CostGraph, DeviceRef, OpId, Snapshot, ValueId, ValueKind};

/// A GPU's buffers are aligned to this (the arena's `ALIGN`), so a value takes whole units.
pub const GPU_ALIGN: u64 = 256;

/// The position of the last op that reads each value, through the views that alias it; a
/// graph output lives to the end (`ops.len()`).
pub fn last_uses(graph: &CostGraph) -> Vec<usize> {
    let n = graph.ops.len();
    let mut last = vec![0usize; graph.values.len()];
    for (v, val) in graph.values.iter().enumerate() {
        if val.output {
            last[v] = n;
        }
    }
    for (p, op) in graph.ops.iter().enumerate().rev() {
        for &v in &op.inputs {
            last[v] = last[v].max(p);
        }
        // A view's output is its input's bytes: they live as long as either is read.
        if op.view
            && let Some(&src) = op.inputs.first()
        {
            for &o in &op.outputs {
                last[src] = last[src].max(last[o]);
            }
        }
    }
    last
}

/// What placing one op on one device adds there.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Charge {
    /// Bytes that stay: weights, inputs and received values not already on the device.
    pub resident: u64,
    resident_values: Vec<ValueId>,
    /// Computed outputs: bytes live from the op to the end of the range, both inclusive.
    live: Vec<(usize, usize, u64)>,
}

struct DeviceBook {
    /// An op was committed here (asking about a device opens its book too).
    placed: bool,
    resident: u64,
    live: PeakTree,
}

/// Memory charged so far, per device, as ops are placed in topological order.
pub struct Ledger<'g> {
    graph: &'g CostGraph,
    last: Vec<usize>,
    books: BTreeMap<DeviceRef, DeviceBook>,
    held: BTreeSet<(DeviceRef, ValueId)>,
    /// The device each computed value was made on, once its op is placed.
    location: Vec<Option<DeviceRef>>,
}

impl<'g> Ledger<'g> {
    /// An empty ledger, but for the weights each device already holds (`resident`, from
    /// [`Snapshot::resident`]): those are charged nothing there.
    pub fn new(
        graph: &'g CostGraph,
        resident: &BTreeMap<DeviceRef, BTreeSet<ValueId>>,
    ) -> Ledger<'g> {
        let held = resident
            .iter()
            .flat_map(|(d, vs)| vs.iter().map(move |&v| (d.clone(), v)))
            .filter(|&(_, v)| {
                graph
                    .values
                    .get(v)
                    .is_some_and(|x| x.kind == ValueKind::Weight)
            })
            .collect();
        Ledger {
            graph,
            last: last_uses(graph),
            books: BTreeMap::new(),
            held,
            location: vec![None; graph.values.len()],
        }
    }

    /// Where value `v` was computed, if its producer is placed.
    pub fn location(&self, v: ValueId) -> Option<&DeviceRef> {
        self.location[v].as_ref()
    }

    /// What op `o` would add on `dref`, whose device `gpu` says how it holds values.
    pub fn charge(&self, o: OpId, dref: &DeviceRef, gpu: bool) -> Charge {
        let op = &self.graph.ops[o];
        let mut c = Charge::default();
        for &v in &op.inputs {
            let val = &self.graph.values[v];
            let arrives = match val.kind {
                ValueKind::Weight | ValueKind::Input => true,
                ValueKind::Computed => self.location[v].as_ref() != Some(dref),
            };
            if arrives && !self.held.contains(&(dref.clone(), v)) && !c.resident_values.contains(&v)
            {
                c.resident = c.resident.saturating_add(val.bytes);
                c.resident_values.push(v);
            }
        }
        if !op.view {
            for &v in &op.outputs {
                let mut bytes = self.graph.values[v].bytes;
                if gpu {
                    bytes = bytes.div_ceil(GPU_ALIGN).max(1).saturating_mul(GPU_ALIGN);
                }
                c.live.push((o, self.last[v].max(o), bytes));
            }
        }
        c
    }

    /// Bytes `dref` would hold at its peak with `c` added.
    pub fn footprint_with(&mut self, dref: &DeviceRef, c: &Charge) -> u64 {
        let n = self.graph.ops.len();
        let book = self
            .books
            .entry(dref.clone())
            .or_insert_with(|| DeviceBook {
                placed: false,
                resident: 0,
                live: PeakTree::new(n + 1),
            });
        for &(a, b, bytes) in &c.live {
            book.live.add(a, b, i128::from(bytes));
        }
        let peak = book.live.max();
        for &(a, b, bytes) in &c.live {
            book.live.add(a, b, -i128::from(bytes));
        }
        book.resident
            .saturating_add(c.resident)
            .saturating_add(peak)
    }

    /// Bytes `dref` holds at its peak so far.
    pub fn used(&self, dref: &DeviceRef) -> u64 {
        self.books
            .get(dref)
            .map_or(0, |b| b.resident.saturating_add(b.live.max()))
    }

    /// Places op `o` on `dref`, recording what `c` (from [`Ledger::charge`]) adds.
    pub fn commit(&mut self, o: OpId, dref: &DeviceRef, c: Charge) {
        let n = self.graph.ops.len();
        let book = self
            .books
            .entry(dref.clone())
            .or_insert_with(|| DeviceBook {
                placed: false,
                resident: 0,
                live: PeakTree::new(n + 1),
            });
        book.placed = true;
        book.resident = book.resident.saturating_add(c.resident);
        for &(a, b, bytes) in &c.live {
            book.live.add(a, b, i128::from(bytes));
        }
        for v in c.resident_values {
            self.held.insert((dref.clone(), v));
        }
        for &v in &self.graph.ops[o].outputs {
            self.location[v] = Some(dref.clone());
        }
    }

    /// [`Ledger::totals`], if every device's is within its budget in `snapshot`.
    pub fn totals_within(&self, snapshot: &Snapshot) -> Option<BTreeMap<DeviceRef, u64>> {
        let memory = self.totals();
        let within = memory.iter().all(|(d, &used)| {
            snapshot
                .device(d)
                .is_some_and(|dev| used <= dev.memory_budget)
        });
        within.then_some(memory)
    }

    /// Every device charged, with its peak.
    pub fn totals(&self) -> BTreeMap<DeviceRef, u64> {
        self.books
            .iter()
            .filter(|(_, b)| b.placed)
            .map(|(d, _)| (d.clone(), self.used(d)))
            .collect()
    }
}

/// The memory a complete placement takes on each device it uses.
pub fn charge_placement(
    graph: &CostGraph,
    snapshot: &Snapshot,
    placement: &[DeviceRef],
) -> BTreeMap<DeviceRef, u64> {
    let mut ledger = Ledger::new(graph, &snapshot.resident);
    for (o, dref) in placement.iter().enumerate() {
        let gpu = snapshot.device(dref).is_some_and(is_gpu);
        let c = ledger.charge(o, dref, gpu);
        ledger.commit(o, dref, c);
    }
    ledger.totals()
}

/// What the whole model needs on one device of the given kind: the figure a cluster's
/// devices must beat together.
pub fn single_device(graph: &CostGraph, gpu: bool) -> u64 {
    let dref = DeviceRef {
        node: String::new(),
        index: 0,
    };
    let mut ledger = Ledger::new(graph, &BTreeMap::new());
    for o in 0..graph.ops.len() {
        let c = ledger.charge(o, &dref, gpu);
        ledger.commit(o, &dref, c);
    }
    ledger.used(&dref)
}
