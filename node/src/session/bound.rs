//! Bound runs: graph outputs fed back as graph inputs of the next run, one [`BoundState`] per
//! sequence (a language model's `present.N.key` -> `past_key_values.N.key`).
//!
//! Where the plan is one GPU chunk and each pair can share one buffer (exec/bound.rs: same
//! type, and the output written by the input's last reader, as GroupQueryAttention does with
//! a cache that past and present share), the values live in a GPU buffer of the state's own
//! and never come back to the host: the output is written over the input, in place. Otherwise
//! (the CPU backend, a plan over several devices, a cache that grows by concatenation) they
//! come back with the outputs and go out again with the next run's inputs, as the caller
//! would do by hand. A state moves between the two homes when plans of both kinds run on it.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use super::Session;
use crate::device::vulkan::{Gpu, GpuBuffer};
use crate::error::{Error, Result};
use crate::exec::bound::{StateLayout, download, download_slots, upload, upload_into};
use crate::exec::{BoundContext, BoundContexts, Executable};
use crate::ops::ValueType;
use crate::tensor::Tensor;

/// The bound values of one sequence of runs: see [`Session::bind`].
pub struct BoundState {
    /// (graph input index, graph output index) per pair, in the order they were bound.
    pairs: Vec<(usize, usize)>,
    home: Home,
    /// Where a GPU home goes when the sequence ends: its session's idle homes.
    idle: Arc<IdleHomes>,
}

enum Home {
    /// One value per pair.
    Host(Vec<Tensor>),
    Gpu(GpuHome),
}

/// A state buffer on a GPU and the execution contexts recorded against it.
struct GpuHome {
    layout: StateLayout,
    gpu: Arc<Gpu>,
    buffer: Arc<GpuBuffer>,
    contexts: BoundContexts,
}

/// The GPU homes of a session's ended sequences, for its next ones. A context holds a whole
/// run's memory (a 2,048-token prompt's logits are 525 MB of readback memory for a Llama-1B
/// shape), and allocating and recording it again for every sequence took most of a long
/// prompt's time; a new sequence whose layout is compatible takes an idle home and only
/// writes its initial values into the buffer.
#[derive(Default)]
pub(crate) struct IdleHomes(Mutex<Vec<GpuHome>>);

impl IdleHomes {
    /// Homes kept at most: beyond, the least recently ended one is freed.
    const KEPT: usize = 2;

    fn take(&self, layout: &StateLayout, gpu: &Arc<Gpu>) -> Option<GpuHome> {
        let mut homes = self.0.lock().expect("idle homes");
        let at = homes
            .iter()
            .position(|h| h.layout.compatible(layout) && Arc::ptr_eq(&h.gpu, gpu))?;
        Some(homes.remove(at))
    }

    fn give(&self, home: GpuHome) {
        let mut homes = self.0.lock().expect("idle homes");
        homes.insert(0, home);
        homes.truncate(Self::KEPT);
    }

    /// Homes kept now (tests).
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.0.lock().expect("idle homes").len()
    }
}

impl Drop for BoundState {
    fn drop(&mut self) {
        if let Home::Gpu(home) = std::mem::replace(&mut self.home, Home::Host(Vec::new())) {
            self.idle.give(home);
        }
    }
}

impl BoundState {
    /// Whether the values are in a GPU buffer now (else on the host).
    pub fn on_gpu(&self) -> bool {
        matches!(self.home, Home::Gpu(_))
    }

    /// The bound values, in the order they were bound, copied to the host.
    pub fn values(&self) -> Result<Vec<Tensor>> {
        match &self.home {
            Home::Host(v) => Ok(v.clone()),
            Home::Gpu(h) => download(&h.gpu, &h.layout, &h.buffer),
        }
    }

    /// Value `k` (in the order they were bound), copied to the host; on a GPU only its own
    /// bytes come back.
    pub fn value(&self, k: usize) -> Result<Tensor> {
        let value = match &self.home {
            Home::Host(v) => v.get(k).cloned(),
            Home::Gpu(h) if k < h.layout.slots.len() => {
                download_slots(&h.gpu, &h.layout, &h.buffer, &[k])?.pop()
            }
            Home::Gpu(_) => None,
        };
        value.ok_or_else(|| {
            Error::Input(format!(
                "the state holds {} values; there is no value {k}",
                self.pairs.len()
            ))
        })
    }

    /// The bound values' types and shapes, in the order they were bound (nothing is copied).
    pub fn types(&self) -> Vec<ValueType> {
        match &self.home {
            Home::Host(v) => v.iter().map(ValueType::of).collect(),
            Home::Gpu(h) => h.layout.slots.iter().map(|s| s.ty.clone()).collect(),
        }
    }

    /// Brings the values to the host.
    fn move_to_host(&mut self) -> Result<&[Tensor]> {
        if let Home::Gpu(_) = self.home {
            let values = self.values()?;
            if let Home::Gpu(home) = std::mem::replace(&mut self.home, Home::Host(values)) {
                self.idle.give(home);
            }
        }
        match &self.home {
            Home::Host(v) => Ok(v),
            Home::Gpu(_) => unreachable!("moved to the host above"),
        }
    }

    /// Puts the values in a buffer laid out as `exe` wants, and returns `exe`'s context for it.
    fn move_to_gpu(&mut self, exe: &Arc<Executable>) -> Result<&BoundContext> {
        let layout = exe.state_layout().expect("a bound plan");
        let gpu = exe.state_gpu().expect("state on a GPU");
        let fits = matches!(&self.home, Home::Gpu(h)
            if h.layout.compatible(layout) && Arc::ptr_eq(&h.gpu, gpu));
        if !fits {
            let values = self.move_to_host()?.to_vec();
            let refs: Vec<&Tensor> = values.iter().collect();
            let home = match self.idle.take(layout, gpu) {
                Some(home) => {
                    upload_into(gpu, layout, &home.buffer, &refs)?;
                    home
                }
                None => GpuHome {
                    layout: layout.clone(),
                    gpu: gpu.clone(),
                    buffer: Arc::new(upload(gpu, layout, &refs)?),
                    contexts: BoundContexts::default(),
                },
            };
            self.home = Home::Gpu(home);
        }
        let Home::Gpu(home) = &mut self.home else {
            unreachable!("on the GPU now");
        };
        home.contexts.for_plan(exe, &home.buffer)
    }
}

impl Session {
    /// A state for runs in which each output of `pairs` (output name, input name) becomes
    /// that input of the next run, starting from `initial` (one value per pair). Run with
    /// [`Session::run_bound`]; one state per sequence, dropped when the sequence ends.
    pub fn bind(&self, pairs: &[(&str, &str)], initial: Vec<Tensor>) -> Result<BoundState> {
        if self.structured.is_some() {
            return Err(Error::Unsupported(
                "bound state is for models of tensors; this one has sequences or optionals".into(),
            ));
        }
        if pairs.len() != initial.len() {
            return Err(Error::Input(format!(
                "{} bound pairs but {} initial values",
                pairs.len(),
                initial.len()
            )));
        }
        let mut seen = BTreeMap::new();
        let mut indices = Vec::with_capacity(pairs.len());
        for (&(output, input), value) in pairs.iter().zip(&initial) {
            let i = self
                .graph
                .inputs
                .iter()
                .position(|(_, d)| d.name == input)
                .ok_or_else(|| Error::Input(format!("the model has no input named '{input}'")))?;
            let o = self
                .graph
                .outputs
                .iter()
                .position(|(_, d)| d.name == output)
                .ok_or_else(|| Error::Input(format!("the model has no output named '{output}'")))?;
            if seen.insert(i, output).is_some() {
                return Err(Error::Input(format!("input '{input}' is bound twice")));
            }
            let declared = self.graph.inputs[i].1.dtype;
            if declared.is_some_and(|d| d != value.dtype()) {
                return Err(Error::Input(format!(
                    "the initial value of '{input}' is {}, the model declares {}",
                    value.dtype(),
                    declared.expect("checked")
                )));
            }
            indices.push((i, o));
        }
        Ok(BoundState {
            pairs: indices,
            home: Home::Host(initial),
            idle: Arc::clone(&self.idle_homes),
        })
    }

    /// Runs once with `inputs` (every input that is not bound) and the state's bound values;
    /// the bound outputs become the state's values, the other outputs come back in graph order.
    pub fn run_bound(
        &self,
        state: &mut BoundState,
        inputs: &[(&str, Tensor)],
    ) -> Result<Vec<(String, Tensor)>> {
        self.files.check()?;
        let given = self.order_bound(state, inputs)?;
        let mut types = Vec::with_capacity(given.len());
        let bound_types = state.types();
        for (i, t) in given.iter().enumerate() {
            match t {
                Some(t) => types.push(ValueType::of(t)),
                None => {
                    let k = state
                        .pairs
                        .iter()
                        .position(|&(b, _)| b == i)
                        .expect("bound");
                    types.push(bound_types[k].clone());
                }
            }
        }
        let host_values: Option<Vec<Tensor>> = match &state.home {
            Home::Host(v) => Some(v.clone()),
            Home::Gpu(_) => None,
        };
        let known: Vec<Option<&Tensor>> = (0..given.len())
            .map(|i| {
                given[i].or_else(|| {
                    let k = state.pairs.iter().position(|&(b, _)| b == i)?;
                    host_values.as_ref().map(|v| &v[k])
                })
            })
            .collect();
        let exe = self.executable_for(types, &known, &state.pairs)?;
        self.value_checks.check(&self.graph, exe.spec(), &known)?;
        let names = self.graph.outputs.iter().map(|(_, d)| d.name.clone());
        if exe.state_layout().is_some() {
            let unbound: Vec<(usize, Tensor)> = given
                .iter()
                .enumerate()
                .filter_map(|(i, t)| t.map(|t| (i, t.clone())))
                .collect();
            let ctx = state.move_to_gpu(&exe)?;
            let outs = exe.run_bound(ctx, unbound)?;
            return Ok(names
                .zip(outs)
                .filter_map(|(n, t)| t.map(|t| (n, t)))
                .collect());
        }
        let values = state.move_to_host()?.to_vec();
        let full: Vec<Tensor> = (0..given.len())
            .map(|i| match given[i] {
                Some(t) => t.clone(),
                None => {
                    let k = state
                        .pairs
                        .iter()
                        .position(|&(b, _)| b == i)
                        .expect("bound");
                    values[k].clone()
                }
            })
            .collect();
        drop(values);
        let mut outs: Vec<Option<Tensor>> = exe.run(full)?.into_iter().map(Some).collect();
        let next: Vec<Tensor> = state
            .pairs
            .iter()
            .map(|&(_, o)| outs[o].take().expect("each output bound once"))
            .collect();
        state.home = Home::Host(next);
        Ok(names
            .zip(outs)
            .filter_map(|(n, t)| t.map(|t| (n, t)))
            .collect())
    }

    /// `inputs` in graph order, `None` for the bound ones; errors name a missing, unknown,
    /// repeated or bound input.
    fn order_bound<'a>(
        &self,
        state: &BoundState,
        inputs: &'a [(&str, Tensor)],
    ) -> Result<Vec<Option<&'a Tensor>>> {
        let mut by_name: BTreeMap<&str, &Tensor> = BTreeMap::new();
        for (name, t) in inputs {
            if by_name.insert(name, t).is_some() {
                return Err(Error::Input(format!("'{name}' is given twice")));
            }
        }
        let mut ordered = Vec::with_capacity(self.graph.inputs.len());
        for (i, (_, d)) in self.graph.inputs.iter().enumerate() {
            let bound = state.pairs.iter().find(|&&(b, _)| b == i);
            match (bound, by_name.remove(d.name.as_str())) {
                (Some(&(_, o)), Some(_)) => {
                    return Err(Error::Input(format!(
                        "'{}' is bound to output '{}': its value comes from the state",
                        d.name, self.graph.outputs[o].1.name
                    )));
                }
                (Some(_), None) => ordered.push(None),
                (None, Some(t)) => ordered.push(Some(t)),
                (None, None) => return Err(Error::Input(format!("missing input '{}'", d.name))),
            }
        }
        if let Some(name) = by_name.keys().next() {
            return Err(Error::Input(format!(
                "the model has no input named '{name}'"
            )));
        }
        Ok(ordered)
    }
}
