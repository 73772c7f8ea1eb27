//! The GPU kernel: rnn_init.comp sets the state up (and checks sequence_lens), then
//! rnn_step.comp runs once per time step, twice for GRU.

use super::{Cell, Direction, Recurrent};
use crate::tensor::DType;
use crate::util::{groups_1d, opt, req};
use crate::{BufRef, Dispatch, GpuKernel, ValueType};
use vkml_shaders::{rnn_init, rnn_step};

pub fn kernel(op: &Recurrent, inputs: &[Option<&ValueType>]) -> Option<GpuKernel> {
    let d = op.dims(inputs).ok()?;
    // Rows are the grid's y dimension, which Vulkan guarantees up to 65,535.
    if req(inputs, 0).ok()?.dtype != DType::F32 || d.batch > 65_535 {
        return None;
    }
    let w32 = |v: usize| u32::try_from(v).ok();
    let n = d.dirs * d.batch * d.hidden;
    // Two hidden slots, the cell state and GRU's two gates (rnn_step.comp).
    let scratch = vec![(5 * n * 4) as u64];
    let state = BufRef::Scratch(0);
    let has = |i: usize| opt(inputs, i).is_some();
    // An absent input is never read: its flag is off, and input 0 stands in for its address.
    let input_or_x = |i: usize| BufRef::Input(if has(i) { i } else { 0 });
    let layout = u32::from(op.batch_first);
    let mut dispatches = vec![Dispatch::new(
        rnn_init::Variant::Main,
        rnn_init::Buffers {
            h0: input_or_x(5),
            c0: input_or_x(6),
            lens: input_or_x(4),
            state: state.clone(),
            fault: BufRef::Fault,
        },
        rnn_init::Params {
            n: w32(n)?,
            batch: w32(d.batch)?,
            hidden: w32(d.hidden)?,
            dirs: w32(d.dirs)?,
            seq: w32(d.seq)?,
            flags: u32::from(has(5))
                | u32::from(has(6)) << 1
                | u32::from(has(4)) << 2
                | layout << 3,
        },
        groups_1d(n, 64),
    )];
    let mut codes = 0u32;
    let mut acts = Vec::new();
    for (dir, list) in op.activations.iter().enumerate() {
        for (k, a) in list.iter().enumerate() {
            codes |= a.code() << (4 * (dir * 3 + k));
            acts.extend([a.alpha.to_bits(), a.beta.to_bits()]);
        }
        acts.resize(6 * (dir + 1), 0);
    }
    let cell = match op.cell {
        Cell::Rnn => 0,
        Cell::Gru => 1,
        Cell::Lstm => 2,
    };
    let flags = cell
        | u32::from(has(3)) << 2
        | u32::from(has(7)) << 3
        | u32::from(has(4)) << 4
        | u32::from(op.outputs > 1) << 5
        | u32::from(op.outputs > 2) << 6
        | layout << 7
        | u32::from(op.linear_before_reset) << 8
        | u32::from(op.input_forget) << 9
        | u32::from(op.direction == Direction::Both) << 11
        | u32::from(op.direction == Direction::Reverse) << 12
        | u32::from(op.clip.is_some()) << 13;
    let phases: &[u32] = if op.cell == Cell::Gru {
        &[0, 1 << 10]
    } else {
        &[0]
    };
    let output_or_y = |k: usize| BufRef::Output(if op.outputs > k { k } else { 0 });
    for t in 0..d.seq {
        for &phase in phases {
            dispatches.push(Dispatch::new(
                rnn_step::Variant::Main,
                rnn_step::Buffers {
                    x: BufRef::Input(0),
                    w: BufRef::Input(1),
                    r: BufRef::Input(2),
                    bias: input_or_x(3),
                    peep: input_or_x(7),
                    lens: input_or_x(4),
                    state: state.clone(),
                    y: BufRef::Output(0),
                    yh: output_or_y(1),
                    yc: output_or_y(2),
                    acts: BufRef::Table(acts.clone()),
                },
                rnn_step::Params {
                    batch: w32(d.batch)?,
                    inputs: w32(d.input)?,
                    hidden: w32(d.hidden)?,
                    seq: w32(d.seq)?,
                    t: w32(t)?,
                    flags: flags | phase,
                    clip: op.clip.unwrap_or(0.0),
                    codes,
                },
                [w32(d.hidden.div_ceil(64))?, w32(d.batch)?, w32(d.dirs)?],
            ));
        }
    }
    Some(GpuKernel {
        scratch,
        dispatches,
    })
}
