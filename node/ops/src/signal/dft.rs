//! DFT (opset 17: `axis` an attribute, default 1; opset 20: an input, default -2) over one axis
//! of a real ([..., 1]) or complex ([..., 2]) input. `dft_length` crops or zero-pads the
//! signal; `onesided` keeps bins 0..=N/2 of a real input's spectrum (RFFT) or, with
//! `inverse`, makes the real signal of such a half spectrum (IRFFT, N = 2 (bins - 1) unless
//! given).

use super::{Lines, Mode, int_scalar};
use crate::size;
use crate::tensor::{DType, Tensor};
use crate::util::{opt, req};
use crate::{GpuKernel, InferInput, NodeSpec, Op, OpError, Registry, ValueType};

pub fn register(r: &mut Registry) {
    r.add("DFT", build);
}

#[derive(Debug)]
struct Dft {
    /// Opset 20 and later take the axis as input 2.
    axis_input: bool,
    axis_attr: i64,
    inverse: bool,
    onesided: bool,
}

fn flag(spec: &NodeSpec<'_>, name: &str) -> Result<bool, OpError> {
    match spec.attrs.int(name, 0)? {
        0 => Ok(false),
        1 => Ok(true),
        v => Err(OpError::invalid(format!(
            "DFT: {name} is {v}; it must be 0 or 1"
        ))),
    }
}

fn build(spec: &NodeSpec<'_>) -> Result<Box<dyn Op>, OpError> {
    Ok(Box::new(Dft {
        axis_input: spec.opset >= 20,
        axis_attr: spec.attrs.int("axis", 1)?,
        inverse: flag(spec, "inverse")?,
        onesided: flag(spec, "onesided")?,
    }))
}

/// The value of optional input `i` for a rule: `None` when absent, an error asking for it when
/// present but only known at run time.
fn planned<'a>(inputs: &[Option<InferInput<'a>>], i: usize) -> Result<Option<&'a Tensor>, OpError> {
    match opt(inputs, i) {
        None => Ok(None),
        Some(input) => input.value.map(Some).ok_or(OpError::NeedsValue(i)),
    }
}

impl Dft {
    /// The transform and the output type for input `x`, given the values of dft_length and
    /// (opset 20) axis where present.
    fn geometry(
        &self,
        x: &ValueType,
        length: Option<&Tensor>,
        axis: Option<&Tensor>,
    ) -> Result<(Lines, ValueType), OpError> {
        if !x.dtype.is_float() {
            return Err(OpError::unsupported(format!(
                "DFT of {} (float, float16, bfloat16, double only)",
                x.dtype
            )));
        }
        let rank = x.shape.len();
        let channels = x.shape.last().copied().unwrap_or(0);
        if rank < 2 || !(1..=2).contains(&channels) {
            return Err(OpError::invalid(format!(
                "DFT: the input has shape {:?}; it must be [..., signal, 1] (real) or \
                 [..., signal, 2] (complex)",
                x.shape
            )));
        }
        let a = match (self.axis_input, axis) {
            (true, Some(t)) => int_scalar(t, "DFT's axis")?,
            (true, None) => -2,
            (false, _) => self.axis_attr,
        };
        let r = rank as i64;
        if a < -r || a == -1 || a >= r - 1 {
            return Err(OpError::invalid(format!(
                "DFT: axis {a} is out of range for rank {rank}: it must be in [-{rank}, -2] or \
                 [0, {}] (the last axis holds the real and imaginary parts)",
                rank - 2
            )));
        }
        let axis = if a < 0 { (a + r) as usize } else { a as usize };
        let len = x.shape[axis];
        let mode = match (self.inverse, self.onesided) {
            (false, _) => Mode::Forward,
            (true, false) => Mode::Inverse,
            (true, true) => Mode::InverseReal,
        };
        if self.onesided && (channels == 2) != self.inverse {
            return Err(OpError::invalid(format!(
                "DFT: onesided with inverse={} takes a {} input (last dimension {}), found \
                 shape {:?}",
                self.inverse as u8,
                if self.inverse { "complex" } else { "real" },
                if self.inverse { 2 } else { 1 },
                x.shape
            )));
        }
        let n_fft = match length {
            Some(t) => {
                size::Size::from_i64(int_scalar(t, "DFT's dft_length")?, "DFT's dft_length")?.get()
            }
            None if mode == Mode::InverseReal => 2 * len.saturating_sub(1),
            None => len,
        };
        if n_fft == 0 {
            return Err(OpError::invalid(format!(
                "DFT: the transform length is 0 (input shape {:?}, axis {axis}); give a \
                 positive dft_length",
                x.shape
            )));
        }
        let (bins, read) = match mode {
            Mode::Forward if self.onesided => (n_fft / 2 + 1, len.min(n_fft)),
            Mode::InverseReal => (n_fft, len.min(n_fft / 2 + 1)),
            _ => (n_fft, len.min(n_fft)),
        };
        let mut out = x.shape.clone();
        out[axis] = bins;
        out[rank - 1] = if mode == Mode::InverseReal { 1 } else { 2 };
        size::check_shape(&out, "DFT's output")?;
        let inner: usize = x.shape[axis + 1..rank - 1].iter().product();
        let lines = Lines {
            batch: x.shape[..axis].iter().product(),
            frames: 1,
            inner,
            channels,
            batch_stride: len * inner * channels,
            frame_stride: 0,
            len: read,
            n_fft,
            bins,
            mode,
        };
        Ok((lines, ValueType::new(x.dtype, out)))
    }

    fn axis_slot(&self) -> usize {
        if self.axis_input { 2 } else { usize::MAX }
    }
}

impl Op for Dft {
    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<ValueType>, OpError> {
        let x = req(inputs, 0)?.ty;
        let length = planned(inputs, 1)?;
        let axis = planned(inputs, self.axis_slot())?;
        Ok(vec![self.geometry(x, length, axis)?.1])
    }

    fn run_cpu(
        &self,
        inputs: &[Option<&Tensor>],
        _outputs: &[ValueType],
    ) -> Result<Vec<Tensor>, OpError> {
        let x = req(inputs, 0)?;
        let axis = opt(inputs, self.axis_slot());
        let (lines, out) = self.geometry(&ValueType::of(x), opt(inputs, 1), axis)?;
        let v = x
            .to_f64_vec()
            .map_err(|e| OpError::invalid(e.to_string()))?;
        let y = lines.run(&v, None);
        Ok(vec![crate::numeric::from_f64(out.dtype, out.shape, y)?])
    }

    // dft_length and axis decide the transform, so only `gpu_planned` sees enough to build it.
    fn gpu_planned(
        &self,
        inputs: &[Option<InferInput<'_>>],
        _outputs: &[ValueType],
        _tuning: &crate::KernelTuning,
    ) -> Option<GpuKernel> {
        let x = req(inputs, 0).ok()?.ty;
        if x.dtype != DType::F32 {
            return None;
        }
        let length = planned(inputs, 1).ok()?;
        let axis = planned(inputs, self.axis_slot()).ok()?;
        let (lines, _) = self.geometry(x, length, axis).ok()?;
        lines.gpu(x.numel(), None)
    }

    fn flops(&self, inputs: &[Option<&ValueType>], outputs: &[ValueType]) -> u64 {
        // Without the axis's value, as the planner would have had to fold it: a bound.
        let x_len = inputs.first().copied().flatten().map_or(1, |x| {
            x.shape.iter().rev().skip(1).copied().max().unwrap_or(1)
        });
        (outputs[0].numel() as u64).saturating_mul(x_len as u64 * 4)
    }
}
