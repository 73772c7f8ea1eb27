//! GridSample (opsets 16, 20, 22): each output point reads the input at the location its grid
//! entry names (normalized to [-1, 1], x first), interpolated (nearest, linear, cubic with
//! Keys' a = -0.75) over any number of spatial axes (opset 16: two), with zeros, border or
//! reflection padding, and align_corners. The interpolation is separable: a sum over taps of
//! the product of each axis's weight, as ONNX's nested one-axis form computes it.

use super::numeric::from_f64;
use super::util::{groups_1d, req};
use super::{BufRef, Dispatch, GpuKernel, InferInput, NodeSpec, Op, OpError, Registry, ValueType};
use crate::tensor::{DType, Tensor};
use vkml_shaders::grid_sample;

pub fn register(r: &mut Registry) {
    r.add("GridSample", build);
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    Nearest = 0,
    Linear = 1,
    Cubic = 2,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Padding {
    Zeros = 0,
    Border = 1,
    Reflection = 2,
}

#[derive(Debug)]
struct GridSample {
    mode: Mode,
    padding: Padding,
    align: bool,
}

fn build(spec: &NodeSpec<'_>) -> Result<Box<dyn Op>, OpError> {
    let a = spec.attrs;
    let mode = match a.string(
        "mode",
        if spec.opset >= 20 {
            "linear"
        } else {
            "bilinear"
        },
    )? {
        "nearest" => Mode::Nearest,
        "linear" | "bilinear" => Mode::Linear,
        "cubic" | "bicubic" => Mode::Cubic,
        m => {
            return Err(OpError::invalid(format!(
                "GridSample: mode '{m}' is not nearest, linear or cubic"
            )));
        }
    };
    let padding = match a.string("padding_mode", "zeros")? {
        "zeros" => Padding::Zeros,
        "border" => Padding::Border,
        "reflection" => Padding::Reflection,
        p => {
            return Err(OpError::invalid(format!(
                "GridSample: padding_mode '{p}' is not zeros, border or reflection"
            )));
        }
    };
    Ok(Box::new(GridSample {
        mode,
        padding,
        align: a.int("align_corners", 0)? != 0,
    }))
}

/// Reflects `x` into [lo, hi] by its nearer border, again and again.
fn reflect(x: f64, lo: f64, hi: f64) -> f64 {
    let range = hi - lo;
    if x < lo {
        let dx = lo - x;
        let n = (dx / range).trunc();
        let r = dx - n * range;
        if n % 2.0 == 0.0 { lo + r } else { hi - r }
    } else if x > hi {
        let dx = x - hi;
        let n = (dx / range).trunc();
        let r = dx - n * range;
        if n % 2.0 == 0.0 { hi - r } else { lo + r }
    } else {
        x
    }
}

fn cubic(t: f64) -> [f64; 4] {
    let a = -0.75;
    let far = |x: f64| ((a * x - 5.0 * a) * x + 8.0 * a) * x - 4.0 * a;
    let near = |x: f64| ((a + 2.0) * x - (a + 3.0)) * x * x + 1.0;
    [far(t + 1.0), near(t), near(1.0 - t), far(2.0 - t)]
}

impl GridSample {
    /// The borders of an axis of `len` (where reflection turns).
    fn borders(&self, len: usize) -> (f64, f64) {
        if self.align {
            (0.0, len as f64 - 1.0)
        } else {
            (-0.5, len as f64 - 0.5)
        }
    }

    /// The taps along one axis for normalized coordinate `g`: (index, weight), indices before
    /// padding.
    fn taps(&self, g: f64, len: usize) -> Vec<(i64, f64)> {
        let mut x = if self.align {
            (g + 1.0) / 2.0 * (len as f64 - 1.0)
        } else {
            ((g + 1.0) * len as f64 - 1.0) / 2.0
        };
        if self.mode == Mode::Nearest {
            // numpy's rint: halves to even.
            x = x.round_ties_even();
        }
        let (lo, hi) = self.borders(len);
        if x < lo || x > hi {
            match self.padding {
                Padding::Border => x = x.clamp(0.0, len as f64 - 1.0),
                Padding::Reflection => x = reflect(x, lo, hi),
                Padding::Zeros => {}
            }
        }
        match self.mode {
            Mode::Nearest => vec![(x.trunc() as i64, 1.0)],
            Mode::Linear => {
                let x0 = x.floor();
                let t = x - x0;
                vec![(x0 as i64, 1.0 - t), (x0 as i64 + 1, t)]
            }
            Mode::Cubic => {
                let x0 = x.floor();
                let w = cubic(x - x0);
                (0..4).map(|k| (x0 as i64 - 1 + k, w[k as usize])).collect()
            }
        }
    }

    /// A tap's index after padding, or `None` for a zero.
    fn pad(&self, i: i64, len: usize) -> Option<usize> {
        let d = len as i64;
        match self.padding {
            Padding::Zeros => (0..d).contains(&i).then_some(i as usize),
            Padding::Border => Some(i.clamp(0, d - 1) as usize),
            Padding::Reflection => {
                let (lo, hi) = self.borders(len);
                Some((reflect(i as f64, lo, hi) as i64).clamp(0, d - 1) as usize)
            }
        }
    }
}

impl Op for GridSample {
    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<ValueType>, OpError> {
        let x = req(inputs, 0)?.ty;
        let g = req(inputs, 1)?.ty;
        if !x.dtype.is_float() || !g.dtype.is_float() {
            return Err(OpError::unsupported(format!(
                "GridSample of {} with a {} grid",
                x.dtype, g.dtype
            )));
        }
        let k = x.shape.len().saturating_sub(2);
        if k == 0 || g.shape.len() != k + 2 || g.shape[0] != x.shape[0] || g.shape[k + 1] != k {
            return Err(OpError::invalid(format!(
                "GridSample: input {:?} and grid {:?}; the grid of an [N, C, D1..Dk] input is \
                 [N, E1..Ek, k]",
                x.shape, g.shape
            )));
        }
        let mut shape = x.shape[..2].to_vec();
        shape.extend(&g.shape[1..=k]);
        Ok(vec![ValueType::new(x.dtype, shape)])
    }

    fn run_cpu(
        &self,
        inputs: &[Option<&Tensor>],
        outputs: &[ValueType],
    ) -> Result<Vec<Tensor>, OpError> {
        let bad = |e: crate::tensor::TensorError| OpError::invalid(e.to_string());
        let x = req(inputs, 0)?;
        let xv = x.to_f64_vec().map_err(bad)?;
        let gv = req(inputs, 1)?.to_f64_vec().map_err(bad)?;
        let dims = &x.shape()[2..];
        let k = dims.len();
        let (n, c) = (x.shape()[0], x.shape()[1]);
        let plane: usize = dims.iter().product();
        let points: usize = outputs[0].shape[2..].iter().product();
        let mut y = vec![0.0; n * c * points];
        for b in 0..n {
            for p in 0..points {
                let g = &gv[(b * points + p) * k..][..k];
                // Grid entries run x first; axes run outermost first.
                let taps: Vec<Vec<(i64, f64)>> =
                    (0..k).map(|a| self.taps(g[k - 1 - a], dims[a])).collect();
                let mut combos: Vec<(Option<usize>, f64)> = vec![(Some(0), 1.0)];
                for (a, t) in taps.iter().enumerate() {
                    combos = combos
                        .iter()
                        .flat_map(|&(off, w)| {
                            t.iter().map(move |&(i, wi)| {
                                (
                                    off.zip(self.pad(i, dims[a])).map(|(o, i)| o * dims[a] + i),
                                    w * wi,
                                )
                            })
                        })
                        .collect();
                }
                for ch in 0..c {
                    let src = &xv[(b * c + ch) * plane..][..plane];
                    y[(b * c + ch) * points + p] = combos
                        .iter()
                        .map(|&(o, w)| o.map_or(0.0, |o| src[o] * w))
                        .sum();
                }
            }
        }
        Ok(vec![from_f64(x.dtype(), outputs[0].shape.clone(), y)?])
    }

    fn gpu(&self, inputs: &[Option<&ValueType>], outputs: &[ValueType]) -> Option<GpuKernel> {
        let x = req(inputs, 0).ok()?;
        let g = req(inputs, 1).ok()?;
        let k = x.shape.len() - 2;
        if x.dtype != DType::F32 || g.dtype != DType::F32 || k > 3 || outputs[0].numel() == 0 {
            return None;
        }
        let w = |v: usize| u32::try_from(v).ok();
        let mut d = [1u32; 3];
        for (a, &len) in x.shape[2..].iter().enumerate() {
            d[a] = w(len)?;
        }
        Some(GpuKernel {
            scratch: vec![],
            dispatches: vec![Dispatch::new(
                grid_sample::Variant::Main,
                grid_sample::Buffers {
                    x: BufRef::Input(0),
                    grid: BufRef::Input(1),
                    y: BufRef::Output(0),
                },
                grid_sample::Params {
                    n: w(outputs[0].numel())?,
                    points: w(outputs[0].shape[2..].iter().product())?,
                    channels: w(x.shape[1])?,
                    axes: w(k)?,
                    d0: d[0],
                    d1: d[1],
                    d2: d[2],
                    mode: self.mode as u32,
                    padding: self.padding as u32,
                    align: u32::from(self.align),
                },
                groups_1d(outputs[0].numel(), 128),
            )],
        })
    }
}

#[cfg(test)]
mod tests;
