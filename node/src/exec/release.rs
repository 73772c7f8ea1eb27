//! A run's values on the host, each set once and dropped after the last of this node's CPU ops
//! that reads it.
//!
//! The planner charges a CPU for a computed value from its op to its last reader
//! (planner/src/memory.rs, as a GPU's arena does), so a run must not hold it longer: holding
//! every value to the end made a CPU need the sum of a model's activations (SqueezeNet: three
//! times its weights). A value sent to other nodes counts its sending (when its chunk
//! finishes) as one more reader. Values something else still needs stay to the end: graph
//! outputs and inputs, and values a GPU chunk uploads (when it is submitted).

use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, Ordering};

use vkml_planner::Plan;

use super::Device;
use super::topology::Topology;
use crate::graph::{Graph, Specialized, ValueId};
use crate::tensor::Tensor;

/// Which values a run may drop, and when: worked out once per executable.
pub struct Release {
    /// Per value: how many of this node's CPU ops read it; 0 for values kept to the end.
    readers: Vec<u32>,
    /// Per plan position: the values whose count the op's completion decrements.
    after: Vec<Vec<ValueId>>,
}

impl Release {
    pub fn new(
        graph: &Graph,
        spec: &Specialized,
        plan: &Plan,
        topo: &Topology,
        devices: &[Device],
    ) -> Release {
        let n = graph.value_names.len();
        let mut kept = vec![false; n];
        for (v, _) in graph.outputs.iter().chain(&graph.inputs) {
            kept[*v] = true;
        }
        let mut after: Vec<Vec<ValueId>> = vec![Vec::new(); spec.live.len()];
        for (p, list) in after.iter_mut().enumerate() {
            if !topo.is_local(plan.op_chunk[p]) {
                continue;
            }
            let mut inputs: Vec<ValueId> = spec
                .node(graph, spec.live[p])
                .inputs
                .iter()
                .flatten()
                .copied()
                .collect();
            inputs.sort_unstable();
            inputs.dedup();
            let on_cpu = matches!(
                devices.get(plan.placement[p].index),
                Some(Device::Cpu | Device::CpuFallback)
            );
            if on_cpu {
                *list = inputs;
            } else {
                for v in inputs {
                    kept[v] = true;
                }
            }
        }
        let mut readers = vec![0u32; n];
        for (v, _) in topo.sends.values().flatten() {
            if !kept[*v] && spec.consts[*v].is_none() {
                readers[*v] += 1;
            }
        }
        for list in &mut after {
            list.retain(|&v| !kept[v] && spec.consts[v].is_none());
            for &v in list.iter() {
                readers[v] += 1;
            }
        }
        Release { readers, after }
    }

    /// Values op `p`'s completion is one reader less of.
    pub fn after(&self, p: usize) -> &[ValueId] {
        &self.after[p]
    }
}

enum Slot {
    Empty,
    Full(Tensor),
    Dropped,
}

/// One run's values on the host.
pub struct Slots {
    slots: Vec<Mutex<Slot>>,
    readers: Vec<AtomicU32>,
}

impl Slots {
    pub fn new(release: &Release) -> Slots {
        Slots {
            slots: release
                .readers
                .iter()
                .map(|_| Mutex::new(Slot::Empty))
                .collect(),
            readers: release.readers.iter().map(|&r| AtomicU32::new(r)).collect(),
        }
    }

    pub fn len(&self) -> usize {
        self.slots.len()
    }

    /// Sets value `v` once; false when it was set before (or is out of range).
    pub fn set(&self, v: ValueId, t: Tensor) -> bool {
        let Some(slot) = self.slots.get(v) else {
            return false;
        };
        let mut slot = slot.lock().expect("slot lock");
        if !matches!(*slot, Slot::Empty) {
            return false;
        }
        *slot = Slot::Full(t);
        true
    }

    /// Value `v`, if set and not dropped (a cheap clone: tensors share their bytes).
    pub fn get(&self, v: ValueId) -> Option<Tensor> {
        match &*self.slots.get(v)?.lock().expect("slot lock") {
            Slot::Full(t) => Some(t.clone()),
            Slot::Empty | Slot::Dropped => None,
        }
    }

    /// One reader of `v` is done; the last one drops it. Values kept to the end have no
    /// readers to count down.
    pub fn read(&self, v: ValueId) {
        let before =
            self.readers[v].fetch_update(Ordering::AcqRel, Ordering::Acquire, |r| r.checked_sub(1));
        if before == Ok(1) {
            let dropped = std::mem::replace(
                &mut *self.slots[v].lock().expect("slot lock"),
                Slot::Dropped,
            );
            drop(dropped);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn release(readers: Vec<u32>) -> Release {
        Release {
            readers,
            after: Vec::new(),
        }
    }

    #[test]
    fn the_last_reader_drops_a_value_and_it_is_never_set_again() {
        let slots = Slots::new(&release(vec![2, 0]));
        let t = Tensor::from_vec(vec![2], vec![1.0f32, 2.0]);
        assert!(slots.set(0, t.clone()));
        assert!(!slots.set(0, t.clone()), "set once");
        slots.read(0);
        assert!(slots.get(0).is_some(), "one reader left");
        slots.read(0);
        assert!(slots.get(0).is_none(), "dropped after the last");
        assert!(!slots.set(0, t.clone()), "a dropped value stays dropped");
        // Kept to the end: readers of it count nothing down.
        assert!(slots.set(1, t));
        slots.read(1);
        slots.read(1);
        assert!(slots.get(1).is_some());
        assert!(!slots.set(9, Tensor::from_vec(vec![0], Vec::<f32>::new())));
    }
}
