//! Weights shared between the plans of one model on a GPU.
//!
//! A model runs under one plan per set of input shapes (a language model: one for its prompt,
//! one for each token after), and each plan has a GPU layout of its own. Were each to upload
//! its own copy of the weights, two plans of a model that fills a GPU would not fit beside
//! each other and would evict one another at every turn of a generation loop. Instead a
//! node's [`SharedWeights`] holds, per model (its owner) and device, the buffers of weights
//! its plans uploaded; a new plan claims the copies that are there and uploads only the rest,
//! into a buffer registered for the plans after it. A buffer goes once no plan uses it, or,
//! when its last plan made way for another plan of the model (a language model's prompt plan
//! and its one-token plan taking turns where both do not fit), a while later: the plan after
//! it then finds the weights still there. Only the model's own initializers are shared: a
//! constant folded from them has the same value id in every plan but not the same bytes.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use crate::device::vulkan::GpuBuffer;
use crate::graph::ValueId;

/// Whose weights: a submitter's name and its id of the model (a local session: its own id).
pub type WeightOwner = (String, u64);

/// A copy of a weight on a GPU: its buffer and its offset there.
pub type Copy = (Arc<GpuBuffer>, u64);

/// A buffer of shared weights a plan uploaded, with its values (value, offset).
pub type Uploaded = (Arc<GpuBuffer>, Vec<(ValueId, u64)>);

/// One buffer of shared weights.
struct Held {
    owner: WeightOwner,
    device: usize,
    buffer: Arc<GpuBuffer>,
    /// Value, offset in `buffer`.
    values: BTreeMap<ValueId, u64>,
    /// Bytes reserved for it on `device`, released when it goes.
    charge: u64,
    /// Kept this long once no plan uses it (the plan that did made way for another of its
    /// model); None: freed as soon as no plan does.
    kept_until: Option<Instant>,
}

/// A node's copies of shared weights on its GPUs; clones are the same registry. It holds each
/// buffer itself, and lets one go when no plan uses it ([`SharedWeights::sweep`]).
#[derive(Clone, Default)]
pub struct SharedWeights {
    held: Arc<Mutex<Vec<Held>>>,
}

impl SharedWeights {
    /// The copies of `values` that `owner` has on `device`, held for as long as the result is.
    pub fn claim(
        &self,
        owner: &WeightOwner,
        device: usize,
        values: &BTreeSet<ValueId>,
    ) -> BTreeMap<ValueId, Copy> {
        let mut held = self.held.lock().expect("shared weights");
        let mut copies = BTreeMap::new();
        for h in held
            .iter_mut()
            .filter(|h| &h.owner == owner && h.device == device)
        {
            let mut used = false;
            for (v, &offset) in &h.values {
                if values.contains(v) && !copies.contains_key(v) {
                    copies.insert(*v, (h.buffer.clone(), offset));
                    used = true;
                }
            }
            if used {
                h.kept_until = None;
            }
        }
        copies
    }

    /// Takes `buffer` on `device`, holding `values` (value, offset) of `owner`, for which
    /// `charge` bytes are reserved there.
    pub fn register(
        &self,
        owner: &WeightOwner,
        device: usize,
        buffer: Arc<GpuBuffer>,
        values: &[(ValueId, u64)],
        charge: u64,
    ) {
        self.held.lock().expect("shared weights").push(Held {
            owner: owner.clone(),
            device,
            buffer,
            values: values.iter().copied().collect(),
            charge,
            kept_until: None,
        });
    }

    /// `owner`'s copies stay until `until` once no plan uses them.
    pub fn keep(&self, owner: &WeightOwner, until: Instant) {
        let mut held = self.held.lock().expect("shared weights");
        for h in held.iter_mut().filter(|h| &h.owner == owner) {
            h.kept_until = Some(until);
        }
    }

    /// Lets go of the copies no plan uses and none keeps at `now` (every one no plan uses,
    /// with `now` None: to make room); what was reserved for them, per device.
    pub fn sweep(&self, now: Option<Instant>) -> Vec<(usize, u64)> {
        let mut held = self.held.lock().expect("shared weights");
        let mut freed = Vec::new();
        held.retain(|h| {
            let unused = Arc::strong_count(&h.buffer) == 1;
            let kept = match (h.kept_until, now) {
                (Some(t), Some(now)) => now < t,
                _ => false,
            };
            if unused && !kept {
                freed.push((h.device, h.charge));
                return false;
            }
            true
        });
        freed
    }

    /// Buffers of copies held.
    pub fn buffers(&self) -> usize {
        self.held.lock().expect("shared weights").len()
    }

    /// Bytes reserved for the copies held.
    pub fn bytes(&self) -> u64 {
        let held = self.held.lock().expect("shared weights");
        held.iter().map(|h| h.charge).sum()
    }

    /// When the next kept copy no plan uses expires.
    pub fn next_expiry(&self) -> Option<Instant> {
        let held = self.held.lock().expect("shared weights");
        held.iter()
            .filter(|h| Arc::strong_count(&h.buffer) == 1)
            .filter_map(|h| h.kept_until)
            .min()
    }
}

/// What a plan shares: which of its weights may be shared, and the copies it claimed per
/// device before its memory was reserved.
pub struct Sharing {
    pub values: BTreeSet<ValueId>,
    pub claimed: BTreeMap<usize, BTreeMap<ValueId, Copy>>,
}

impl Sharing {
    /// Claims `owner`'s copies of `values` on each GPU of `devices` (their indices).
    pub fn claim(
        pool: &SharedWeights,
        owner: &WeightOwner,
        values: BTreeSet<ValueId>,
        devices: impl IntoIterator<Item = usize>,
    ) -> Sharing {
        let claimed = devices
            .into_iter()
            .map(|d| (d, pool.claim(owner, d, &values)))
            .collect();
        Sharing { values, claimed }
    }

    /// The copy of `v` claimed on `device`, if any.
    pub fn copy(&self, device: usize, v: ValueId) -> Option<&Copy> {
        self.claimed.get(&device)?.get(&v)
    }
}
