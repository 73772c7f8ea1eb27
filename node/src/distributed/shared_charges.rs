//! What a fragment reserves on this node when the model's other plans here hold some of its
//! weights (exec/shared.rs shares the GPU copies).
//!
//! The plan's memory per device counts every weight its ops there read, but for those its
//! snapshot says are resident there already (the submitter's view of the model's plans). What
//! this node holds may differ (a plan unloaded since, or one not known to the submitter yet),
//! so the reservation is made from what it does hold: the fragment's own charge is the plan's
//! less the shareable weights the plan counted, and the shareable weights it must upload are
//! charged to the model (the owner), once, for as long as any of its fragments is loaded.

use std::collections::{BTreeMap, BTreeSet};

use vkml_planner::{DeviceRef, Plan, Snapshot};
use vkml_protocol::pb;

use crate::exec::Device;
use crate::exec::shared::{SharedWeights, Sharing, WeightOwner};
use crate::graph::{Graph, Specialized, ValueId};

/// A load's reservation: its own charges per device, and the shared weights it uploads; with
/// the copies it claimed, and whose they are.
pub struct Charges {
    pub own: Vec<(usize, u64)>,
    pub shared: Vec<(usize, u64)>,
    pub sharing: Option<(WeightOwner, Sharing)>,
}

/// The fragment as checked: its plan over `snapshot`, and its graph.
pub struct Planned<'a> {
    pub plan: &'a Plan,
    pub snapshot: &'a Snapshot,
    pub graph: &'a Graph,
    pub spec: &'a Specialized,
}

/// What node `me` reserves to load `f`, claiming the copies of its shareable weights that the
/// model's other plans hold in `pool`.
pub fn charges(
    me: &str,
    f: &pb::Fragment,
    p: &Planned<'_>,
    devices: &[Device],
    pool: &SharedWeights,
) -> Charges {
    let planned: Vec<(usize, u64)> = p
        .plan
        .memory
        .iter()
        .filter(|(d, _)| d.node == me)
        .map(|(d, &b)| (d.index, b))
        .collect();
    let values: BTreeSet<ValueId> = f.shared.iter().map(|&v| v as ValueId).collect();
    if f.weights_owner == 0 || values.is_empty() {
        return Charges {
            own: planned,
            shared: Vec::new(),
            sharing: None,
        };
    }
    let gpus = |d: usize| matches!(devices.get(d), Some(Device::Gpu(_)));
    let read = shareable_read(me, p, &values, gpus);
    let owner: WeightOwner = (f.submitter.clone(), f.weights_owner);
    let sharing = Sharing::claim(pool, &owner, values, read.keys().copied());
    let bytes = |v: ValueId| p.spec.types[v].as_ref().map_or(0, |t| t.bytes() as u64);
    let mut own = Vec::new();
    let mut fresh = Vec::new();
    for (d, b) in planned {
        let Some(vs) = read.get(&d) else {
            own.push((d, b));
            continue;
        };
        let dref = DeviceRef {
            node: me.to_string(),
            index: d,
        };
        let held = p.snapshot.resident.get(&dref);
        let counted: u64 = vs
            .iter()
            .filter(|v| held.is_none_or(|h| !h.contains(v)))
            .map(|&v| bytes(v))
            .sum();
        let upload: u64 = vs
            .iter()
            .filter(|&&v| sharing.copy(d, v).is_none())
            .map(|&v| bytes(v))
            .sum();
        own.push((d, b.saturating_sub(counted)));
        if upload > 0 {
            fresh.push((d, upload));
        }
    }
    Charges {
        own,
        shared: fresh,
        sharing: Some((owner, sharing)),
    }
}

/// Per GPU of this node, the shareable weights its ops there read.
fn shareable_read(
    me: &str,
    p: &Planned<'_>,
    values: &BTreeSet<ValueId>,
    gpu: impl Fn(usize) -> bool,
) -> BTreeMap<usize, BTreeSet<ValueId>> {
    let mut read: BTreeMap<usize, BTreeSet<ValueId>> = BTreeMap::new();
    for (pos, &n) in p.spec.live.iter().enumerate() {
        let d = &p.plan.placement[pos];
        if d.node != me || !gpu(d.index) {
            continue;
        }
        for &v in p.spec.node(p.graph, n).inputs.iter().flatten() {
            if values.contains(&v) {
                read.entry(d.index).or_default().insert(v);
            }
        }
    }
    read
}
