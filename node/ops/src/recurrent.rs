//! RNN, GRU and LSTM (opsets 7 to 22): every direction, sequence_lens, initial states,
//! LSTM's peepholes and input_forget, clip, layout 1 (batch first), and any of the activation
//! functions ONNX lists. X is [seq, batch, input] (layout 0); Y is [seq, dirs, batch, hidden],
//! Y_h and Y_c [dirs, batch, hidden] (layout 1 puts batch first in each).
//!
//! sequence_lens follow ONNX Runtime: row b runs its first len[b] steps (the reverse direction
//! runs them from len[b] - 1 down), Y is zero past them and Y_h/Y_c hold the last state. The
//! CPU computes in f64; the GPU (f32) runs one dispatch per step (two for GRU), every
//! direction at once (rnn_step.comp).

mod activation;
mod gpu;

use activation::{Activation, Kind};

use super::numeric::from_f64;
use super::util::{opt, req};
use super::{GpuKernel, InferInput, NodeSpec, Op, OpError, Registry, ValueType};
use crate::tensor::{DType, Tensor, TensorError};

pub fn register(r: &mut Registry) {
    r.add("RNN", |s| build(s, Cell::Rnn));
    r.add("GRU", |s| build(s, Cell::Gru));
    r.add("LSTM", |s| build(s, Cell::Lstm));
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Cell {
    Rnn,
    Gru,
    Lstm,
}

impl Cell {
    fn gates(self) -> usize {
        match self {
            Cell::Rnn => 1,
            Cell::Gru => 3,
            Cell::Lstm => 4,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Cell::Rnn => "RNN",
            Cell::Gru => "GRU",
            Cell::Lstm => "LSTM",
        }
    }

    fn default_activations(self) -> &'static [Kind] {
        match self {
            Cell::Rnn => &[Kind::Tanh],
            Cell::Gru => &[Kind::Sigmoid, Kind::Tanh],
            Cell::Lstm => &[Kind::Sigmoid, Kind::Tanh, Kind::Tanh],
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Direction {
    Forward,
    Reverse,
    Both,
}

#[derive(Debug)]
struct Recurrent {
    cell: Cell,
    direction: Direction,
    hidden: Option<usize>,
    clip: Option<f32>,
    /// Per direction: f (all cells), g (GRU, LSTM), h (LSTM).
    activations: Vec<Vec<Activation>>,
    batch_first: bool,
    linear_before_reset: bool,
    input_forget: bool,
    outputs: usize,
}

fn build(spec: &NodeSpec<'_>, cell: Cell) -> Result<Box<dyn Op>, OpError> {
    let a = spec.attrs;
    let name = cell.name();
    let direction = match a.string("direction", "forward")? {
        "forward" => Direction::Forward,
        "reverse" => Direction::Reverse,
        "bidirectional" => Direction::Both,
        other => {
            return Err(OpError::invalid(format!(
                "{name}: direction '{other}' is not forward, reverse or bidirectional"
            )));
        }
    };
    let dirs = if direction == Direction::Both { 2 } else { 1 };
    let hidden = match a.int_opt("hidden_size")? {
        Some(h) if h <= 0 => {
            return Err(OpError::invalid(format!(
                "{name}: hidden_size {h} is not positive"
            )));
        }
        h => h.map(|h| h as usize),
    };
    let clip = a.float_opt("clip")?;
    if clip.is_some_and(|c| c.is_nan() || c <= 0.0) {
        return Err(OpError::invalid(format!(
            "{name}: clip {} is not a positive threshold",
            clip.unwrap_or_default()
        )));
    }
    let activations = activation::parse(
        name,
        a.strings_opt("activations")?,
        a.floats_opt("activation_alpha")?.unwrap_or(&[]),
        a.floats_opt("activation_beta")?.unwrap_or(&[]),
        dirs,
        cell.default_activations(),
    )?;
    let outputs = spec.num_outputs;
    let most = if cell == Cell::Lstm { 3 } else { 2 };
    if outputs > most || spec.num_inputs > if cell == Cell::Lstm { 8 } else { 6 } {
        return Err(OpError::invalid(format!(
            "{name} has {} inputs and {outputs} outputs; it takes at most {} and {most}",
            spec.num_inputs,
            if cell == Cell::Lstm { 8 } else { 6 }
        )));
    }
    Ok(Box::new(Recurrent {
        cell,
        direction,
        hidden,
        clip,
        activations,
        batch_first: a.int("layout", 0)? != 0,
        linear_before_reset: a.int("linear_before_reset", 0)? != 0,
        input_forget: a.int("input_forget", 0)? != 0,
        outputs,
    }))
}

/// The sizes of one run.
#[derive(Clone, Copy, Debug)]
struct Dims {
    seq: usize,
    batch: usize,
    input: usize,
    hidden: usize,
    dirs: usize,
}

fn bad(e: TensorError) -> OpError {
    OpError::invalid(e.to_string())
}

impl Recurrent {
    fn dirs(&self) -> usize {
        if self.direction == Direction::Both {
            2
        } else {
            1
        }
    }

    fn err(&self, msg: String) -> OpError {
        OpError::invalid(format!("{}: {msg}", self.cell.name()))
    }

    /// Checks every input's shape against X, W and R, and returns the sizes.
    fn dims(&self, types: &[Option<&ValueType>]) -> Result<Dims, OpError> {
        let x = req(types, 0)?;
        // W's presence; its shape is checked with the others below.
        req(types, 1)?;
        let r = req(types, 2)?;
        let dirs = self.dirs();
        let gates = self.cell.gates();
        if !matches!(x.dtype, DType::F32 | DType::F64 | DType::F16) {
            return Err(OpError::unsupported(format!(
                "{} of {}",
                self.cell.name(),
                x.dtype
            )));
        }
        if x.shape.len() != 3 {
            return Err(self.err(format!("X has shape {:?}; it must be 3-D", x.shape)));
        }
        let (seq, batch) = if self.batch_first {
            (x.shape[1], x.shape[0])
        } else {
            (x.shape[0], x.shape[1])
        };
        let input = x.shape[2];
        let hidden = match (self.hidden, r.shape.get(2)) {
            (Some(h), _) => h,
            (None, Some(&h)) => h,
            (None, None) => return Err(self.err(format!("R has shape {:?}", r.shape))),
        };
        if seq == 0 {
            return Err(self.err("X has no time steps".into()));
        }
        let dims = Dims {
            seq,
            batch,
            input,
            hidden,
            dirs,
        };
        let same = |i: usize, what: &str, shape: Vec<usize>, dtype: DType| match opt(types, i) {
            Some(t) if t.shape != shape || t.dtype != dtype => Err(self.err(format!(
                "{what} is {} {:?}; with X {:?}, {dirs} direction(s) and hidden size {hidden} \
                 it must be {dtype} {shape:?}",
                t.dtype, t.shape, x.shape
            ))),
            _ => Ok(()),
        };
        let f = x.dtype;
        // hidden_size is the model's word: a size no weight can have fails here, not by
        // overflow below.
        let gh = gates
            .checked_mul(hidden)
            .filter(|g| g.checked_mul(2).is_some())
            .ok_or_else(|| self.err(format!("hidden size {hidden} is too large")))?;
        same(1, "W", vec![dirs, gh, input], f)?;
        same(2, "R", vec![dirs, gh, hidden], f)?;
        same(3, "B", vec![dirs, 2 * gh], f)?;
        same(4, "sequence_lens", vec![batch], DType::I32)?;
        let state = if self.batch_first {
            vec![batch, dirs, hidden]
        } else {
            vec![dirs, batch, hidden]
        };
        same(5, "initial_h", state.clone(), f)?;
        same(6, "initial_c", state, f)?;
        same(7, "P", vec![dirs, 3 * hidden], f)?;
        Ok(dims)
    }

    fn output_types(&self, dtype: DType, d: Dims) -> Vec<ValueType> {
        let (y, state) = if self.batch_first {
            (
                vec![d.batch, d.seq, d.dirs, d.hidden],
                vec![d.batch, d.dirs, d.hidden],
            )
        } else {
            (
                vec![d.seq, d.dirs, d.batch, d.hidden],
                vec![d.dirs, d.batch, d.hidden],
            )
        };
        let mut out = vec![ValueType::new(dtype, y)];
        out.extend((1..self.outputs).map(|_| ValueType::new(dtype, state.clone())));
        out.truncate(self.outputs);
        out
    }

    fn check_lens(&self, lens: &[i64], seq: usize) -> Result<(), OpError> {
        match lens
            .iter()
            .enumerate()
            .find(|(_, l)| **l < 0 || **l > seq as i64)
        {
            Some((b, l)) => Err(self.err(format!(
                "sequence_lens[{b}] is {l}; it must be in 0..={seq} (the time steps of X)"
            ))),
            None => Ok(()),
        }
    }
}

impl Op for Recurrent {
    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<ValueType>, OpError> {
        let types = super::util::types_of(inputs);
        let d = self.dims(&types)?;
        Ok(self.output_types(req(&types, 0)?.dtype, d))
    }

    fn check_values(&self, inputs: &[Option<InferInput<'_>>]) -> Result<(), OpError> {
        let (Some(x), Some(Some(lens))) = (
            req(inputs, 0).ok(),
            inputs.get(4).map(|l| l.and_then(|l| l.value)),
        ) else {
            return Ok(());
        };
        let seq = x.ty.shape[usize::from(!self.batch_first)];
        self.check_lens(&lens.to_i64_vec().map_err(bad)?, seq)
    }

    fn run_cpu(
        &self,
        inputs: &[Option<&Tensor>],
        outputs: &[ValueType],
    ) -> Result<Vec<Tensor>, OpError> {
        let types: Vec<Option<ValueType>> = inputs.iter().map(|t| t.map(ValueType::of)).collect();
        let refs: Vec<Option<&ValueType>> = types.iter().map(Option::as_ref).collect();
        let d = self.dims(&refs)?;
        let vals = |i: usize| -> Result<Option<Vec<f64>>, OpError> {
            opt(inputs, i)
                .map(|t| t.to_f64_vec())
                .transpose()
                .map_err(bad)
        };
        let lens = match opt(inputs, 4) {
            Some(l) => {
                let l = l.to_i64_vec().map_err(bad)?;
                self.check_lens(&l, d.seq)?;
                l.into_iter().map(|v| v as usize).collect()
            }
            None => vec![d.seq; d.batch],
        };
        let run = cpu::Run {
            op: self,
            d,
            x: vals(0)?.unwrap_or_default(),
            w: vals(1)?.unwrap_or_default(),
            r: vals(2)?.unwrap_or_default(),
            b: vals(3)?,
            lens,
            h0: vals(5)?,
            c0: vals(6)?,
            p: vals(7)?,
        };
        let (y, yh, yc) = run.all();
        let dtype = req(inputs, 0)?.dtype();
        [y, yh, yc]
            .into_iter()
            .zip(outputs)
            .map(|(v, t)| from_f64(dtype, t.shape.clone(), v))
            .collect()
    }

    fn gpu(&self, inputs: &[Option<&ValueType>], _outputs: &[ValueType]) -> Option<GpuKernel> {
        gpu::kernel(self, inputs)
    }

    fn index_fault(&self, _inputs: &[Option<&ValueType>], f: &super::IndexFault) -> OpError {
        self.err(format!(
            "sequence_lens[{}] is {}; it must be in 0..={} (the time steps of X)",
            f.element, f.index, f.dim
        ))
    }

    fn flops(&self, inputs: &[Option<&ValueType>], _outputs: &[ValueType]) -> u64 {
        match self.dims(inputs) {
            Ok(d) => {
                let per_step =
                    d.dirs * d.batch * self.cell.gates() * d.hidden * (d.input + d.hidden);
                2 * (d.seq * per_step) as u64
            }
            Err(_) => 0,
        }
    }
}

mod cpu;

#[cfg(test)]
mod tests;
