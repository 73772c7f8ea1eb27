//! STFT (opset 17): the DFT of each frame of `frame_length` samples, `frame_step` apart, of a
//! [batch, length, 1 or 2] signal, weighted by `window` where given; [batch, frames, bins, 2]
//! out, bins 0..=frame_length/2 when `onesided` (the default; real signals only).

use super::{Lines, Mode, int_scalar};
use crate::size::Size;
use crate::tensor::{DType, Tensor};
use crate::util::{const_input, opt, req};
use crate::{BufRef, GpuKernel, InferInput, NodeSpec, Op, OpError, Registry, ValueType};

pub fn register(r: &mut Registry) {
    r.add("STFT", build);
}

#[derive(Debug)]
struct Stft {
    onesided: bool,
}

fn build(spec: &NodeSpec<'_>) -> Result<Box<dyn Op>, OpError> {
    let onesided = match spec.attrs.int("onesided", 1)? {
        0 => false,
        1 => true,
        v => {
            return Err(OpError::invalid(format!(
                "STFT: onesided is {v}; it must be 0 or 1"
            )));
        }
    };
    Ok(Box::new(Stft { onesided }))
}

impl Stft {
    /// The frames' transform and the output type, from the signal's and window's types and
    /// the values of frame_step and frame_length.
    fn geometry(
        &self,
        signal: &ValueType,
        step: &Tensor,
        window: Option<&ValueType>,
        frame_length: Option<&Tensor>,
    ) -> Result<(Lines, ValueType), OpError> {
        if !signal.dtype.is_float() {
            return Err(OpError::unsupported(format!(
                "STFT of {} (float, float16, bfloat16, double only)",
                signal.dtype
            )));
        }
        let [batch, len, channels] = signal.shape[..] else {
            return Err(OpError::invalid(format!(
                "STFT: the signal has shape {:?}; it must be [batch, length, 1 or 2]",
                signal.shape
            )));
        };
        if !(1..=2).contains(&channels) {
            return Err(OpError::invalid(format!(
                "STFT: the signal has shape {:?}; its last dimension must be 1 (real) or 2 \
                 (complex)",
                signal.shape
            )));
        }
        if self.onesided && channels == 2 {
            return Err(OpError::invalid(
                "STFT: a complex signal has no one-sided spectrum; set onesided=0",
            ));
        }
        let step = int_scalar(step, "STFT's frame_step")?;
        if step <= 0 {
            return Err(OpError::invalid(format!(
                "STFT: frame_step is {step}; it must be positive"
            )));
        }
        let step = Size::from_i64(step, "STFT's frame_step")?.get();
        let given = match frame_length {
            Some(t) => Some(Size::from_i64(
                int_scalar(t, "STFT's frame_length")?,
                "STFT's frame_length",
            )?),
            None => None,
        };
        let window_len = match window {
            None => None,
            Some(w) if w.shape.len() == 1 && w.dtype == signal.dtype => Some(w.shape[0]),
            Some(w) => {
                return Err(OpError::invalid(format!(
                    "STFT: the window is {w}; it must be a vector of the signal's type ({})",
                    signal.dtype
                )));
            }
        };
        let frame = match (given.map(Size::get), window_len) {
            (Some(f), Some(w)) if f != w => {
                return Err(OpError::invalid(format!(
                    "STFT: frame_length {f} differs from the window's length {w}"
                )));
            }
            (Some(f), _) | (None, Some(f)) => f,
            (None, None) => len,
        };
        if frame == 0 || frame > len {
            return Err(OpError::invalid(format!(
                "STFT: a frame of {frame} samples does not fit a signal of {len} (it must be \
                 1 to the signal's length)"
            )));
        }
        let frames = (len - frame) / step + 1;
        let bins = if self.onesided { frame / 2 + 1 } else { frame };
        let lines = Lines {
            batch,
            frames,
            inner: 1,
            channels,
            batch_stride: len * channels,
            frame_stride: step * channels,
            len: frame,
            n_fft: frame,
            bins,
            mode: Mode::Forward,
        };
        Ok((
            lines,
            ValueType::new(signal.dtype, vec![batch, frames, bins, 2]),
        ))
    }
}

impl Op for Stft {
    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<ValueType>, OpError> {
        let signal = req(inputs, 0)?.ty;
        let step = const_input(inputs, 1)?;
        let window = opt(inputs, 2).map(|w| w.ty);
        let length = match opt(inputs, 3) {
            Some(_) => Some(const_input(inputs, 3)?),
            None => None,
        };
        Ok(vec![self.geometry(signal, step, window, length)?.1])
    }

    fn run_cpu(
        &self,
        inputs: &[Option<&Tensor>],
        _outputs: &[ValueType],
    ) -> Result<Vec<Tensor>, OpError> {
        let signal = req(inputs, 0)?;
        let window = opt(inputs, 2);
        let (lines, out) = self.geometry(
            &ValueType::of(signal),
            req(inputs, 1)?,
            window.map(ValueType::of).as_ref(),
            opt(inputs, 3),
        )?;
        let floats = |t: &Tensor| t.to_f64_vec().map_err(|e| OpError::invalid(e.to_string()));
        let w = window.map(floats).transpose()?;
        let y = lines.run(&floats(signal)?, w.as_deref());
        Ok(vec![crate::numeric::from_f64(out.dtype, out.shape, y)?])
    }

    // frame_step and frame_length decide the frames, so only `gpu_planned` can build this.
    fn gpu_planned(
        &self,
        inputs: &[Option<InferInput<'_>>],
        _outputs: &[ValueType],
        _tuning: &crate::KernelTuning,
    ) -> Option<GpuKernel> {
        let signal = req(inputs, 0).ok()?.ty;
        if signal.dtype != DType::F32 {
            return None;
        }
        let step = opt(inputs, 1)?.value?;
        let window = opt(inputs, 2).map(|w| w.ty);
        let length = match opt(inputs, 3) {
            Some(l) => Some(l.value?),
            None => None,
        };
        let (lines, _) = self.geometry(signal, step, window, length).ok()?;
        lines.gpu(signal.numel(), window.map(|_| BufRef::Input(2)))
    }

    fn flops(&self, _inputs: &[Option<&ValueType>], outputs: &[ValueType]) -> u64 {
        // A frame's length is at most twice its bins.
        let bins = outputs[0].shape.get(2).copied().unwrap_or(1) as u64;
        (outputs[0].numel() as u64).saturating_mul(bins * 8)
    }
}
