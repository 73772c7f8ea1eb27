//! Bound state: graph outputs that become graph inputs of the next run (a language model's
//! `present` caches, fed back as its `past` ones), kept on the GPU between runs.
//!
//! When a plan runs as one GPU chunk, each bound pair gets one slot in a state buffer that the
//! caller owns (one per sequence): the input is read from the slot and the output is written
//! into the same slot, in place. Nothing is uploaded, read back or copied between runs, and
//! plans for other input shapes (a prompt, then single tokens) share the buffer, because a
//! slot's place depends only on the pairs' types. An op may write its output over the input it
//! reads only when its kernel says it can (`Op::writes_in_place`: GroupQueryAttention's cache
//! update writes just the new rows); the output's producer must also be the last reader of the
//! input, or a later reader would see the new value.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::device::vulkan::{Gpu, GpuBuffer, MemoryUse, Step};

use super::arena;
use super::gpu::dev_err;
use crate::error::{Error, Result};
use crate::graph::{Graph, Specialized, ValueId};
use crate::ops::ValueType;
use crate::tensor::Tensor;

/// One bound pair's place in the state buffer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Slot {
    pub input: ValueId,
    pub output: ValueId,
    pub ty: ValueType,
    pub offset: u64,
}

/// Where a plan keeps its bound values: on which device, and each pair's slot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateLayout {
    /// The device's index in the executable's devices.
    pub device: usize,
    pub slots: Vec<Slot>,
    pub bytes: u64,
}

impl StateLayout {
    /// Whether a state buffer made for `other` serves this layout too: same device, same
    /// slots in the same places (the values may differ, the types may not).
    pub fn compatible(&self, other: &StateLayout) -> bool {
        self.device == other.device
            && self.bytes == other.bytes
            && self.slots.len() == other.slots.len()
            && self
                .slots
                .iter()
                .zip(&other.slots)
                .all(|(a, b)| a.ty == b.ty && a.offset == b.offset)
    }

    pub(super) fn slot_of_input(&self, v: ValueId) -> Option<&Slot> {
        self.slots.iter().find(|s| s.input == v)
    }

    pub(super) fn slot_of_output(&self, v: ValueId) -> Option<&Slot> {
        self.slots.iter().find(|s| s.output == v)
    }
}

/// The state layout for `pairs` (input, output) in a plan whose ops at positions `ops` all run
/// on GPU `device`, or why the pairs cannot stay there.
pub(super) fn layout(
    graph: &Graph,
    spec: &Specialized,
    device: usize,
    ops: &[usize],
    pairs: &[(ValueId, ValueId)],
) -> std::result::Result<StateLayout, String> {
    let name = |v: ValueId| graph.value_names[v].as_str();
    // Readers of each value, through views: a view of the input is the input.
    let mut readers: BTreeMap<ValueId, Vec<usize>> = BTreeMap::new();
    let mut root: BTreeMap<ValueId, ValueId> = BTreeMap::new();
    let mut producer: BTreeMap<ValueId, (usize, bool)> = BTreeMap::new();
    for &p in ops {
        let node = spec.node(graph, spec.live[p]);
        for &v in node.inputs.iter().flatten() {
            let r = *root.get(&v).unwrap_or(&v);
            readers.entry(r).or_default().push(p);
        }
        let view = node.op.is_view();
        if view && let Some(src) = node.inputs.first().copied().flatten() {
            root.insert(node.outputs[0], *root.get(&src).unwrap_or(&src));
        }
        for &o in &node.outputs {
            producer.insert(o, (p, view));
        }
    }
    let mut slots = Vec::with_capacity(pairs.len());
    let mut bytes = 0;
    for &(input, output) in pairs {
        let ty = spec.types[input].clone().ok_or("an input has no type")?;
        if spec.types[output].as_ref() != Some(&ty) {
            return Err(format!(
                "'{}' is {ty} but '{}' is {}: a bound pair keeps one buffer, so their types \
                 must match",
                name(input),
                name(output),
                spec.types[output]
                    .as_ref()
                    .map_or("untyped".into(), ToString::to_string)
            ));
        }
        let Some(&(made_at, false)) = producer.get(&output) else {
            return Err(format!(
                "'{}' is not computed by a kernel of the plan",
                name(output)
            ));
        };
        let last_read = readers.get(&input).and_then(|r| r.iter().max().copied());
        if last_read.is_some_and(|r| r > made_at) {
            return Err(format!(
                "'{}' is read after '{}' is written",
                name(input),
                name(output)
            ));
        }
        // The op that writes the output over the input must be made for it.
        let writer = spec.node(graph, spec.live[made_at]);
        if readers.get(&input).is_some_and(|r| r.contains(&made_at)) {
            let at_in = writer
                .inputs
                .iter()
                .position(|v| v.is_some_and(|v| *root.get(&v).unwrap_or(&v) == input));
            let at_out = writer.outputs.iter().position(|&o| o == output);
            let in_place = matches!((at_in, at_out), (Some(i), Some(o))
                if writer.op.writes_in_place(i, o));
            if !in_place {
                return Err(format!(
                    "{} ({}) reads '{}' and writes '{}', and its kernel does not write in place",
                    writer.name,
                    writer.op_type,
                    name(input),
                    name(output)
                ));
            }
        }
        slots.push(Slot {
            input,
            output,
            offset: bytes,
            ty: ty.clone(),
        });
        bytes += (ty.bytes() as u64).div_ceil(arena::ALIGN).max(1) * arena::ALIGN;
    }
    Ok(StateLayout {
        device,
        slots,
        bytes,
    })
}

/// A new state buffer on `gpu` for `layout`, holding `values` (one per slot, in order).
pub fn upload(gpu: &Arc<Gpu>, layout: &StateLayout, values: &[&Tensor]) -> Result<GpuBuffer> {
    let state = gpu
        .create_buffer(layout.bytes.max(4), MemoryUse::Device, "bound state")
        .map_err(dev_err)?;
    upload_into(gpu, layout, &state, values)?;
    Ok(state)
}

/// Writes `values` (one per slot of `layout`, in order) into `state`, a buffer made for
/// `layout` (or one compatible with it).
pub fn upload_into(
    gpu: &Arc<Gpu>,
    layout: &StateLayout,
    state: &GpuBuffer,
    values: &[&Tensor],
) -> Result<()> {
    let staging = gpu
        .create_buffer(layout.bytes.max(4), MemoryUse::Upload, "state staging")
        .map_err(dev_err)?;
    let mut steps = Vec::new();
    for (slot, t) in layout.slots.iter().zip(values) {
        if ValueType::of(t) != slot.ty {
            return Err(Error::Input(format!(
                "a bound value is {}, its slot holds {}",
                ValueType::of(t),
                slot.ty
            )));
        }
        staging.write(slot.offset, t.bytes()).map_err(dev_err)?;
        if !t.bytes().is_empty() {
            steps.push(Step::Copy {
                src: &staging,
                src_offset: slot.offset,
                dst: state,
                dst_offset: slot.offset,
                bytes: t.bytes().len() as u64,
            });
        }
    }
    wait_for(gpu, &steps)
}

/// The values in `state`, one per slot of `layout`, copied to the host.
pub fn download(gpu: &Arc<Gpu>, layout: &StateLayout, state: &GpuBuffer) -> Result<Vec<Tensor>> {
    let all: Vec<usize> = (0..layout.slots.len()).collect();
    download_slots(gpu, layout, state, &all)
}

/// The values of slots `which` (indices into `layout.slots`), in that order, copied to the
/// host: a reader of one cache does not pay for the whole state.
pub fn download_slots(
    gpu: &Arc<Gpu>,
    layout: &StateLayout,
    state: &GpuBuffer,
    which: &[usize],
) -> Result<Vec<Tensor>> {
    let slots: Vec<&Slot> = which.iter().map(|&k| &layout.slots[k]).collect();
    let readback = gpu
        .create_buffer(layout.bytes.max(4), MemoryUse::Readback, "state readback")
        .map_err(dev_err)?;
    let steps: Vec<Step<'_>> = slots
        .iter()
        .filter(|s| s.ty.bytes() > 0)
        .map(|s| Step::Copy {
            src: state,
            src_offset: s.offset,
            dst: &readback,
            dst_offset: s.offset,
            bytes: s.ty.bytes() as u64,
        })
        .collect();
    wait_for(gpu, &steps)?;
    slots
        .iter()
        .map(|s| {
            let mut bytes = vec![0u8; s.ty.bytes()];
            readback.read(s.offset, &mut bytes).map_err(dev_err)?;
            Ok(Tensor::from_bytes(
                s.ty.dtype,
                s.ty.shape.clone(),
                bytes.into(),
            )?)
        })
        .collect()
}

fn wait_for(gpu: &Arc<Gpu>, steps: &[Step<'_>]) -> Result<()> {
    if steps.is_empty() {
        return Ok(());
    }
    let list = gpu.record(steps).map_err(dev_err)?;
    let value = gpu.submit(&list).map_err(dev_err)?;
    if !gpu
        .wait(value, super::completion::DEADLINE)
        .map_err(dev_err)?
    {
        return Err(Error::Device(format!(
            "{} did not finish copying bound state within {} s",
            gpu.info().name,
            super::completion::DEADLINE.as_secs()
        )));
    }
    Ok(())
}
