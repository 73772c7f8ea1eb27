//! Signal processing (opset 17, DFT also 20): DFT, STFT, the cosine-sum windows (HannWindow,
//! HammingWindow, BlackmanWindow) and MelWeightMatrix.
//!
//! DFT and STFT are one computation, a batch of direct 1-D transforms over strided lines of a
//! real or complex input ([`Lines`]): O(N) work per output bin, on the CPU in f64 (every float
//! type, rounded once to the output's), on the GPU in f32 by `shaders/dft.comp`, one invocation
//! per output element; f16, bf16 and f64 stay on the CPU. Twiddle factors come from the index
//! product reduced modulo N in integers, cut into quarter turns ([`twiddle`]), so that the
//! angle stays small and bins that are zero in exact arithmetic come out zero on both backends.
//!
//! The windows and MelWeightMatrix make a tensor whose shape is the value of a scalar input,
//! so their rules ask for those values (as Range does) and the graph folds them while
//! planning. They have no GPU kernel: a size that is a graph input makes the plan specialise
//! on its value and still folds the node, and only MelWeightMatrix's sample rate and band
//! edges, when they are run-time values, leave it to run, on the CPU backend.

mod dft;
mod mel;
mod stft;
mod window;

#[cfg(test)]
mod tests;

use super::util::groups_1d;
use super::{BufRef, Dispatch, GpuKernel, OpError, Registry};
use crate::tensor::Tensor;
use vkml_shaders::dft as shader;

pub fn register(r: &mut Registry) {
    dft::register(r);
    stft::register(r);
    window::register(r);
    mel::register(r);
}

/// The one integer of a scalar (or one-element) input, exactly.
fn int_scalar(t: &Tensor, what: &str) -> Result<i64, OpError> {
    if t.dtype().is_float() {
        return Err(OpError::invalid(format!(
            "{what} must be an integer, found {}",
            t.dtype()
        )));
    }
    let v = t
        .to_i64_vec()
        .map_err(|e| OpError::invalid(format!("{what}: {e}")))?;
    match v.as_slice() {
        [x] => Ok(*x),
        _ => Err(OpError::invalid(format!(
            "{what} must be a scalar, found shape {:?}",
            t.shape()
        ))),
    }
}

/// What a transform makes of each line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    /// y[k] = sum_j x[j] e^(-2 pi i k j / N).
    Forward,
    /// y[k] = 1/N sum_j x[j] e^(+2 pi i k j / N).
    Inverse,
    /// The real signal (IRFFT) whose spectrum is conjugate symmetric and held as its bins
    /// 0..=N/2: the inverse over the full spectrum, each bin other than 0 and N/2 standing
    /// for its mirror image too. Their imaginary parts do not reach the real output, as in
    /// numpy's irfft.
    InverseReal,
}

/// A batch of direct 1-D transforms. Line (b, f) starts at float b * batch_stride + f *
/// frame_stride of the input, and at each of `inner` positions (`channels` floats apart) it
/// reads `len` samples `inner * channels` floats apart; the rest of its `n_fft` count as zero.
/// The output is [batch, frames, bins, inner, out_channels].
#[derive(Clone, Debug, PartialEq, Eq)]
struct Lines {
    batch: usize,
    frames: usize,
    inner: usize,
    /// 1 for a real input, 2 for a complex one.
    channels: usize,
    batch_stride: usize,
    frame_stride: usize,
    len: usize,
    n_fft: usize,
    bins: usize,
    mode: Mode,
}

/// (cos, sin) of 2 pi t / n for t < n, as shaders/dft.comp computes it: the angle reduced to a
/// quarter turn in integers, multiples of a quarter turn exact.
fn twiddle(t: usize, n: usize) -> (f64, f64) {
    let r = 4 * t as u128;
    let q = r / n as u128;
    let rem = (r - q * n as u128) as f64;
    let (c, s) = if rem == 0.0 {
        (1.0, 0.0)
    } else {
        let a = std::f64::consts::FRAC_PI_2 * rem / n as f64;
        (a.cos(), a.sin())
    };
    match q {
        0 => (c, s),
        1 => (-s, c),
        2 => (-c, -s),
        _ => (s, -c),
    }
}

impl Lines {
    fn out_channels(&self) -> usize {
        if self.mode == Mode::InverseReal { 1 } else { 2 }
    }

    fn out_elements(&self) -> usize {
        self.batch * self.frames * self.bins * self.inner
    }

    fn scale(&self) -> f64 {
        match self.mode {
            Mode::Forward => 1.0,
            Mode::Inverse | Mode::InverseReal => 1.0 / self.n_fft as f64,
        }
    }

    /// The transform of `x` (floats as the input lays them out), with each line's samples
    /// weighted by `window` where there is one, in f64.
    fn run(&self, x: &[f64], window: Option<&[f64]>) -> Vec<f64> {
        let table: Vec<(f64, f64)> = (0..self.n_fft).map(|t| twiddle(t, self.n_fft)).collect();
        let sign = if self.mode == Mode::Forward {
            -1.0
        } else {
            1.0
        };
        let (oc, scale) = (self.out_channels(), self.scale());
        let step = self.inner * self.channels;
        let mut y = vec![0.0; self.out_elements() * oc];
        for (id, out) in y.chunks_exact_mut(oc).enumerate() {
            let (i, line) = (id % self.inner, id / self.inner);
            let (k, o) = (line % self.bins, line / self.bins);
            let base = (o / self.frames) * self.batch_stride
                + (o % self.frames) * self.frame_stride
                + i * self.channels;
            let (mut re, mut im) = (0.0, 0.0);
            let mut t = 0;
            for j in 0..self.len {
                let at = base + j * step;
                let w = window.map_or(1.0, |w| w[j]);
                let xr = x[at] * w;
                let xi = if self.channels == 2 {
                    x[at + 1] * w
                } else {
                    0.0
                };
                let (c, s) = table[t];
                if self.mode == Mode::InverseReal {
                    let weight = if j == 0 || 2 * j == self.n_fft {
                        1.0
                    } else {
                        2.0
                    };
                    re += weight * (xr * c - xi * s);
                } else {
                    let s = sign * s;
                    re += xr * c - xi * s;
                    im += xi * c + xr * s;
                }
                t += k;
                if t >= self.n_fft {
                    t -= self.n_fft;
                }
            }
            out[0] = re * scale;
            if oc == 2 {
                out[1] = im * scale;
            }
        }
        y
    }

    /// shaders/dft.comp over input 0 (`input_floats` long), with `window` weighting each
    /// line's samples; `None` where a size does not fit its 32-bit indices.
    fn gpu(&self, input_floats: usize, window: Option<BufRef>) -> Option<GpuKernel> {
        let n = self.out_elements();
        let fits = |v: usize| u32::try_from(v).ok();
        // twiddle() multiplies an index below n_fft by 4.
        if n == 0 || self.n_fft > 1 << 30 {
            return None;
        }
        fits(input_floats)?;
        fits(n * self.out_channels())?;
        let variant = match (self.mode, &window) {
            (Mode::InverseReal, None) => shader::Variant::RealOut,
            (Mode::InverseReal, Some(_)) => return None,
            (_, Some(_)) => shader::Variant::Windowed,
            (_, None) => shader::Variant::Complex,
        };
        let params = shader::Params {
            n: fits(n)?,
            frames: fits(self.frames)?,
            bins: fits(self.bins)?,
            inner: fits(self.inner)?,
            channels: fits(self.channels)?,
            batch_stride: fits(self.batch_stride)?,
            frame_stride: fits(self.frame_stride)?,
            len: fits(self.len)?,
            n_fft: fits(self.n_fft)?,
            sign: if self.mode == Mode::Forward {
                -1.0
            } else {
                1.0
            },
            scale: self.scale() as f32,
        };
        let buffers = shader::Buffers {
            x: BufRef::Input(0),
            // Never read by the unwindowed variants, which still take an address.
            w: window.unwrap_or(BufRef::Input(0)),
            y: BufRef::Output(0),
        };
        Some(GpuKernel {
            scratch: vec![],
            dispatches: vec![Dispatch::new(variant, buffers, params, groups_1d(n, 64))],
        })
    }
}
