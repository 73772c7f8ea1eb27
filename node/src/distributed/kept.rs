//! What a participant keeps for the sequences of its submitters: the bound outputs of one step
//! (a language model's `present` caches), held on the node that made them as the inputs of
//! the sequence's next step, so that they never cross the network between steps
//! (docs/CLUSTER.md, "Sequences").
//!
//! Where this node's part of the plan can keep a binding on its GPU (the fragment's
//! [`Executable::state_layout`]: GroupQueryAttention or TensorScatter writing its cache in
//! place), the values
//! live in a GPU buffer of the sequence's own and never leave it between steps; the others
//! are kept on the host. A sequence is its submitter's: two submitters may use the same
//! number, so values are keyed by both. What a sequence keeps goes when its submitter ends it, when a step of it
//! fails here (its values may be half updated), or after it has been idle for the node's
//! `sequence_idle` (a client that vanished without ending its sequences).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::lock;
use crate::device::vulkan::{Gpu, GpuBuffer};
use crate::error::{Error, Result};
use crate::exec::bound::{StateLayout, download, upload};
use crate::exec::{BoundContext, BoundContexts, Executable};
use crate::tensor::Tensor;

/// A sequence's values held in a GPU buffer.
struct OnGpu {
    layout: StateLayout,
    gpu: Arc<Gpu>,
    buffer: Arc<GpuBuffer>,
    /// The graph input each slot of `layout` is.
    inputs: Vec<usize>,
    contexts: BoundContexts,
}

impl OnGpu {
    /// The values, back on the host, by graph input.
    fn download(&self) -> Result<Vec<(usize, Tensor)>> {
        let values = download(&self.gpu, &self.layout, &self.buffer)?;
        Ok(self.inputs.iter().copied().zip(values).collect())
    }
}

/// What a step on a GPU needs of a sequence: the context to run in, and its state buffer,
/// which the step must hold until it ends (its kernels write it).
pub struct GpuStep {
    pub ctx: BoundContext,
    pub buffer: Arc<GpuBuffer>,
    /// The graph inputs the buffer holds.
    pub inputs: Vec<usize>,
}

/// A sequence: its submitter and its number there.
pub type SeqKey = (String, u64);

struct Held {
    /// By graph input index: the value the next step reads there.
    values: BTreeMap<usize, Tensor>,
    gpu: Option<OnGpu>,
    used: Instant,
}

impl Held {
    fn new(now: Instant) -> Held {
        Held {
            values: BTreeMap::new(),
            gpu: None,
            used: now,
        }
    }

    /// Brings what the GPU holds to the host.
    fn bring_to_host(&mut self) -> Result<()> {
        if let Some(g) = self.gpu.take() {
            self.values.extend(g.download()?);
        }
        Ok(())
    }
}

pub struct Kept {
    idle: Duration,
    seqs: Mutex<BTreeMap<SeqKey, Held>>,
}

impl Kept {
    pub fn new(idle: Duration) -> Kept {
        Kept {
            idle,
            seqs: Mutex::new(BTreeMap::new()),
        }
    }

    /// Keeps `t` as input `input` of the sequence's next step.
    pub fn keep(&self, key: &SeqKey, input: usize, t: Tensor, now: Instant) {
        let mut seqs = lock(&self.seqs);
        let held = seqs.entry(key.clone()).or_insert_with(|| Held::new(now));
        held.values.insert(input, t);
        held.used = now;
    }

    /// Takes the values of `inputs` out (a step reads them, or another node will): all of
    /// them, or an error naming the first one not here. Values a GPU holds come back to the
    /// host first.
    pub fn take(
        &self,
        key: &SeqKey,
        inputs: &[usize],
        now: Instant,
    ) -> std::result::Result<Vec<(usize, Tensor)>, usize> {
        let mut seqs = lock(&self.seqs);
        let Some(held) = seqs.get_mut(key) else {
            return match inputs.first() {
                Some(&i) => Err(i),
                None => Ok(Vec::new()),
            };
        };
        let on_gpu = held
            .gpu
            .as_ref()
            .is_some_and(|g| inputs.iter().any(|i| g.inputs.contains(i)));
        if on_gpu && let Err(e) = held.bring_to_host() {
            tracing::warn!("a sequence's values could not be read back from the GPU: {e}");
            return Err(inputs[0]);
        }
        if let Some(&i) = inputs.iter().find(|i| !held.values.contains_key(i)) {
            return Err(i);
        }
        held.used = now;
        Ok(inputs
            .iter()
            .map(|&i| (i, held.values.remove(&i).expect("checked above")))
            .collect())
    }

    /// Puts the values a step of `exe` keeps on its GPU in the sequence's state buffer
    /// (the one they are in, when its layout serves `exe`'s; else a new one, filled from the
    /// old buffer, from what the host keeps, or from `given`, the step's own inputs, which
    /// lose them), and returns the context the step runs in. An error names an input whose
    /// value is nowhere.
    pub fn on_gpu(
        &self,
        key: &SeqKey,
        exe: &Arc<Executable>,
        given: &mut Vec<(usize, Tensor)>,
        now: Instant,
    ) -> Result<GpuStep> {
        let (Some(layout), Some(gpu)) = (exe.state_layout(), exe.state_gpu()) else {
            return Err(Error::Device("this plan keeps no bound values".into()));
        };
        let inputs: Vec<usize> = layout
            .slots
            .iter()
            .map(|s| {
                exe.graph()
                    .inputs
                    .iter()
                    .position(|(v, _)| *v == s.input)
                    .ok_or_else(|| Error::Device("a bound value that is no graph input".into()))
            })
            .collect::<Result<_>>()?;
        let mut seqs = lock(&self.seqs);
        let held = seqs.entry(key.clone()).or_insert_with(|| Held::new(now));
        held.used = now;
        let fits = held.gpu.as_ref().is_some_and(|g| {
            g.layout.compatible(layout) && Arc::ptr_eq(&g.gpu, gpu) && g.inputs == inputs
        });
        if !fits {
            held.bring_to_host()?;
            let mut values = Vec::with_capacity(inputs.len());
            for &i in &inputs {
                let t = match given.iter().position(|(g, _)| *g == i) {
                    Some(at) => given.swap_remove(at).1,
                    None => held.values.remove(&i).ok_or_else(|| {
                        let name = &exe.graph().inputs[i].1.name;
                        Error::Input(format!(
                            "the value of '{name}' is not kept here (the sequence ended, was \
                             idle too long, or a step of it failed): begin it again"
                        ))
                    })?,
                };
                values.push(t);
            }
            let refs: Vec<&Tensor> = values.iter().collect();
            let buffer = Arc::new(upload(gpu, layout, &refs)?);
            held.gpu = Some(OnGpu {
                layout: layout.clone(),
                gpu: gpu.clone(),
                buffer,
                inputs: inputs.clone(),
                contexts: BoundContexts::default(),
            });
        }
        let g = held.gpu.as_mut().expect("on the GPU now");
        Ok(GpuStep {
            ctx: g.contexts.for_plan(exe, &g.buffer)?.clone(),
            buffer: g.buffer.clone(),
            inputs,
        })
    }

    /// Forgets the sequence.
    pub fn end(&self, key: &SeqKey) -> bool {
        lock(&self.seqs).remove(key).is_some()
    }

    /// Forgets the sequences idle for longer than the node's `sequence_idle`; returns how many.
    pub fn sweep(&self, now: Instant) -> usize {
        let mut seqs = lock(&self.seqs);
        let before = seqs.len();
        seqs.retain(|_, h| now.saturating_duration_since(h.used) < self.idle);
        before - seqs.len()
    }

    /// When the next sequence becomes idle, if one is kept.
    pub fn next_expiry(&self) -> Option<Instant> {
        lock(&self.seqs).values().map(|h| h.used + self.idle).min()
    }

    /// Sequences kept here, their bytes (on the host and in GPU buffers), and those of the
    /// bytes in GPU buffers, for `status`.
    pub fn usage(&self) -> (usize, u64, u64) {
        let seqs = lock(&self.seqs);
        let host: u64 = seqs
            .values()
            .flat_map(|h| h.values.values())
            .map(|t| t.bytes().len() as u64)
            .sum();
        let gpu: u64 = seqs
            .values()
            .filter_map(|h| h.gpu.as_ref())
            .map(|g| g.layout.bytes)
            .sum();
        (seqs.len(), host + gpu, gpu)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(x: f32) -> Tensor {
        Tensor::from_vec(vec![1], vec![x])
    }

    #[test]
    fn values_are_taken_once_and_a_missing_one_is_named() {
        let k = Kept::new(Duration::from_secs(10));
        let now = Instant::now();
        let key = ("n1".to_string(), 7);
        k.keep(&key, 3, t(1.0), now);
        k.keep(&key, 5, t(2.0), now);
        assert_eq!(k.take(&key, &[3, 9], now).unwrap_err(), 9);
        let got = k.take(&key, &[5, 3], now).unwrap();
        assert_eq!(got.iter().map(|(i, _)| *i).collect::<Vec<_>>(), [5, 3]);
        assert_eq!(got[0].1.to_f64_vec().unwrap(), [2.0]);
        assert_eq!(k.take(&key, &[3], now).unwrap_err(), 3);
        // Another submitter's sequence of the same number is another sequence.
        assert_eq!(k.take(&("n2".to_string(), 7), &[3], now).unwrap_err(), 3);
    }

    #[test]
    fn idle_sequences_are_swept_and_ended_ones_are_gone() {
        let k = Kept::new(Duration::from_secs(10));
        let t0 = Instant::now();
        let (a, b) = (("n1".to_string(), 1), ("n1".to_string(), 2));
        k.keep(&a, 0, t(1.0), t0);
        k.keep(&b, 0, t(1.0), t0 + Duration::from_secs(5));
        assert_eq!(k.next_expiry(), Some(t0 + Duration::from_secs(10)));
        assert_eq!(k.sweep(t0 + Duration::from_secs(11)), 1);
        assert_eq!(k.usage(), (1, 4, 0));
        assert!(k.end(&b));
        assert!(!k.end(&b));
        assert_eq!(k.usage(), (0, 0, 0));
    }
}
