//! ConvTranspose (opsets 1, 11, 22): the gradient of Conv with respect to its input. Each
//! input element scatters `x * w` onto the outputs `i * stride - pad_begin + k * dilation`.
//!
//! Output size per axis: `output_shape` when given (the padding then follows from it, split
//! by `auto_pad`: SAME_UPPER puts the smaller half first, anything else the larger), else
//! `stride * (in - 1) + output_padding + (kernel - 1) * dilation + 1 - pads`, where SAME_*
//! auto_pad asks for `in * stride`. Pads are signed: a negative total (an `output_shape`
//! larger than the input covers) leaves outputs that only get the bias.

mod cpu;
mod gpu;
#[cfg(test)]
mod tests;

use super::numeric::from_f64;
use super::util::{opt, req};
use super::{GpuKernel, InferInput, NodeSpec, Op, OpError, Registry, ValueType};
use crate::size::{self, Size};
use crate::tensor::{DType, Tensor};

pub fn register(r: &mut Registry) {
    r.add("ConvTranspose", build);
}

fn build(spec: &NodeSpec<'_>) -> Result<Box<dyn Op>, OpError> {
    let a = spec.attrs;
    // Every value a size (negative ones are refused per attribute below, with the rank known),
    // so the geometry's arithmetic cannot overflow.
    let list = |name: &str| -> Result<Option<Vec<i64>>, OpError> {
        let v = a.ints_opt(name)?.map(<[i64]>::to_vec);
        for &e in v.iter().flatten() {
            Size::new(
                e.unsigned_abs() as usize,
                format_args!("ConvTranspose: a value of '{name}'"),
            )?;
        }
        Ok(v)
    };
    let auto_pad = match a.string("auto_pad", "NOTSET")? {
        "NOTSET" | "" => AutoPad::NotSet,
        "SAME_UPPER" => AutoPad::SameUpper,
        "SAME_LOWER" => AutoPad::SameLower,
        "VALID" => AutoPad::Valid,
        other => {
            return Err(OpError::invalid(format!(
                "ConvTranspose: auto_pad '{other}' is unknown"
            )));
        }
    };
    let group = a.int("group", 1)?;
    if group < 1 {
        return Err(OpError::invalid(format!(
            "ConvTranspose: group must be at least 1, got {group}"
        )));
    }
    Ok(Box::new(ConvTranspose {
        auto_pad,
        group: Size::from_i64(group, "ConvTranspose: group")?.get(),
        kernel_shape: list("kernel_shape")?,
        strides: list("strides")?,
        dilations: list("dilations")?,
        pads: list("pads")?,
        output_padding: list("output_padding")?,
        output_shape: list("output_shape")?,
    }))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum AutoPad {
    NotSet,
    SameUpper,
    SameLower,
    Valid,
}

#[derive(Debug)]
struct ConvTranspose {
    auto_pad: AutoPad,
    group: usize,
    kernel_shape: Option<Vec<i64>>,
    strides: Option<Vec<i64>>,
    dilations: Option<Vec<i64>>,
    pads: Option<Vec<i64>>,
    output_padding: Option<Vec<i64>>,
    output_shape: Option<Vec<i64>>,
}

/// The problem resolved against concrete shapes.
#[derive(Debug, Clone, PartialEq)]
pub struct Geometry {
    pub n: usize,
    pub c: usize,
    pub m: usize,
    pub group: usize,
    pub input: Vec<usize>,
    pub output: Vec<usize>,
    pub kernel: Vec<usize>,
    pub stride: Vec<usize>,
    pub dilation: Vec<usize>,
    pub pad_begin: Vec<i64>,
}

impl ConvTranspose {
    fn geometry(&self, x: &[usize], w: &[usize], b: Option<&[usize]>) -> Result<Geometry, OpError> {
        let bad = |m: String| OpError::invalid(format!("ConvTranspose: {m} (X {x:?}, W {w:?})"));
        if x.len() < 3 || w.len() != x.len() {
            return Err(bad("X and W need the same rank, at least 3".into()));
        }
        let sp = x.len() - 2;
        let (n, c) = (x[0], x[1]);
        if w[0] != c || c % self.group != 0 {
            return Err(bad(format!(
                "W's first axis must be the {c} input channels, divisible by group {}",
                self.group
            )));
        }
        let m = Size::new(w[1], "W's output channels")?
            .mul(
                Size::new(self.group, "group")?,
                "ConvTranspose's output channels",
            )?
            .get();
        if let Some(b) = b
            && b != [m]
        {
            return Err(bad(format!("B must have shape [{m}], found {b:?}")));
        }
        let per_axis = |v: &Option<Vec<i64>>,
                        name: &str,
                        default: i64,
                        min: i64|
         -> Result<Vec<i64>, OpError> {
            let v = v.clone().unwrap_or_else(|| vec![default; sp]);
            if v.len() != sp || v.iter().any(|&e| e < min) {
                return Err(bad(format!(
                    "{name} {v:?} must have {sp} values of at least {min}"
                )));
            }
            Ok(v)
        };
        let kernel: Vec<usize> = w[2..].to_vec();
        if let Some(k) = &self.kernel_shape
            && k.iter().map(|&v| v as usize).collect::<Vec<_>>() != kernel
        {
            return Err(bad(format!(
                "kernel_shape {k:?} differs from W's spatial shape"
            )));
        }
        let stride = per_axis(&self.strides, "strides", 1, 1)?;
        let dilation = per_axis(&self.dilations, "dilations", 1, 1)?;
        let out_pad = per_axis(&self.output_padding, "output_padding", 0, 0)?;
        let pads = match &self.pads {
            Some(p) if p.len() == 2 * sp && p.iter().all(|&v| v >= 0) => p.clone(),
            Some(p) => {
                return Err(bad(format!(
                    "pads {p:?} must have {} non-negative values",
                    2 * sp
                )));
            }
            None => vec![0; 2 * sp],
        };
        let mut output = Vec::with_capacity(sp);
        let mut pad_begin = Vec::with_capacity(sp);
        // In i128: every term is a size (at most 2^60), so nothing here can overflow.
        let wide = |v: i64| v as i128;
        for i in 0..sp {
            let span = wide(stride[i]) * (x[2 + i] as i128 - 1)
                + wide(out_pad[i])
                + (kernel[i] as i128 - 1) * wide(dilation[i])
                + 1;
            let wanted = match (&self.output_shape, self.auto_pad) {
                (Some(os), _) => {
                    // Either the spatial sizes or the full shape.
                    let os = if os.len() == sp + 2 {
                        &os[2..]
                    } else {
                        &os[..]
                    };
                    if os.len() != sp {
                        return Err(bad(format!("output_shape {os:?} must have {sp} values")));
                    }
                    Some(wide(os[i]))
                }
                (None, AutoPad::SameUpper | AutoPad::SameLower) => {
                    Some(x[2 + i] as i128 * wide(stride[i]))
                }
                _ => None,
            };
            let (out, begin) = match wanted {
                Some(o) => {
                    let total = span - o;
                    let small = total.div_euclid(2);
                    let begin = if self.auto_pad == AutoPad::SameUpper {
                        small
                    } else {
                        total - small
                    };
                    (o, begin)
                }
                None if self.auto_pad == AutoPad::Valid => (span, 0),
                None => (span - wide(pads[i]) - wide(pads[sp + i]), wide(pads[i])),
            };
            if out < 0 {
                return Err(bad(format!(
                    "axis {i} would have a negative output size {out}"
                )));
            }
            let max = Size::MAX as i128;
            if out > max || begin.abs() > max {
                return Err(bad(format!(
                    "axis {i} would have an output size of {out} with a leading pad of {begin}, \
                     more than vkml handles ({max})"
                )));
            }
            output.push(out as usize);
            pad_begin.push(begin as i64);
        }
        let mut all = vec![n, m];
        all.extend(&output);
        size::check_shape(&all, "ConvTranspose's output")?;
        Ok(Geometry {
            n,
            c,
            m,
            group: self.group,
            input: x[2..].to_vec(),
            output,
            kernel,
            stride: stride.iter().map(|&v| v as usize).collect(),
            dilation: dilation.iter().map(|&v| v as usize).collect(),
            pad_begin,
        })
    }
}

impl Geometry {
    /// The output shape (its element count checked when the geometry is made).
    pub fn out_shape(&self) -> Vec<usize> {
        let mut s = vec![self.n, self.m];
        s.extend(&self.output);
        s
    }
}

fn f64s(t: &Tensor) -> Result<Vec<f64>, OpError> {
    t.to_f64_vec().map_err(|e| OpError::invalid(e.to_string()))
}

/// The definition as a scatter, in f64: the tests' reference for the GEMM and col2im kernel
/// of cpu.rs.
#[cfg(test)]
fn reference(g: &Geometry, x: &[f64], w: &[f64], b: Option<&[f64]>) -> Vec<f64> {
    let sp = g.input.len();
    let in_vol: usize = g.input.iter().product();
    let out_vol: usize = g.output.iter().product();
    let k_vol: usize = g.kernel.iter().product();
    let (cg, mg) = (g.c / g.group, g.m / g.group);
    let mut y = vec![0.0; g.n * g.m * out_vol];
    for n in 0..g.n {
        for m in 0..g.m {
            let bias = b.map_or(0.0, |b| b[m]);
            y[(n * g.m + m) * out_vol..(n * g.m + m + 1) * out_vol].fill(bias);
        }
    }
    let mut ii = vec![0usize; sp];
    let mut kk = vec![0usize; sp];
    for n in 0..g.n {
        for c in 0..g.c {
            let grp = c / cg;
            for iv in 0..in_vol {
                let mut r = iv;
                for a in (0..sp).rev() {
                    ii[a] = r % g.input[a];
                    r /= g.input[a];
                }
                let xv = x[(n * g.c + c) * in_vol + iv];
                for kv in 0..k_vol {
                    let mut r = kv;
                    for a in (0..sp).rev() {
                        kk[a] = r % g.kernel[a];
                        r /= g.kernel[a];
                    }
                    let mut ov = 0usize;
                    let mut inside = true;
                    for a in 0..sp {
                        let o =
                            (ii[a] * g.stride[a] + kk[a] * g.dilation[a]) as i64 - g.pad_begin[a];
                        if o < 0 || o >= g.output[a] as i64 {
                            inside = false;
                            break;
                        }
                        ov = ov * g.output[a] + o as usize;
                    }
                    if !inside {
                        continue;
                    }
                    for mo in 0..mg {
                        let m = grp * mg + mo;
                        let wv = w[(c * mg + mo) * k_vol + kv];
                        y[(n * g.m + m) * out_vol + ov] += xv * wv;
                    }
                }
            }
        }
    }
    y
}

impl Op for ConvTranspose {
    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<ValueType>, OpError> {
        let x = req(inputs, 0)?.ty;
        let w = req(inputs, 1)?.ty;
        let b = opt(inputs, 2).map(|b| b.ty);
        super::util::expect_dtype(
            x,
            &[DType::F32, DType::F16, DType::F64, DType::BF16],
            "ConvTranspose: X",
        )?;
        if w.dtype != x.dtype || b.is_some_and(|b| b.dtype != x.dtype) {
            return Err(OpError::invalid(
                "ConvTranspose: X, W and B must share one dtype",
            ));
        }
        let g = self.geometry(&x.shape, &w.shape, b.map(|b| &b.shape[..]))?;
        Ok(vec![ValueType::new(x.dtype, g.out_shape())])
    }

    fn run_cpu(
        &self,
        inputs: &[Option<&Tensor>],
        _outputs: &[ValueType],
    ) -> Result<Vec<Tensor>, OpError> {
        let x = req(inputs, 0)?;
        let w = req(inputs, 1)?;
        let b = opt(inputs, 2);
        let g = self.geometry(x.shape(), w.shape(), b.map(Tensor::shape))?;
        let err = |e| OpError::invalid(format!("ConvTranspose: {e}"));
        if x.dtype() == DType::F32 && w.dtype() == DType::F32 {
            let bv = b.map(|b| b.view::<f32>().map_err(err)).transpose()?;
            let (xv, wv) = (x.view::<f32>().map_err(err)?, w.view::<f32>().map_err(err)?);
            let y = cpu::conv_transpose(&g, &xv, &wv, bv.as_deref());
            return Ok(vec![Tensor::from_vec(g.out_shape(), y)]);
        }
        let bv = b.map(f64s).transpose()?;
        let y = cpu::conv_transpose(&g, &f64s(x)?, &f64s(w)?, bv.as_deref());
        Ok(vec![from_f64(x.dtype(), g.out_shape(), y)?])
    }

    fn gpu(&self, inputs: &[Option<&ValueType>], _outputs: &[ValueType]) -> Option<GpuKernel> {
        let x = req(inputs, 0).ok()?;
        let w = req(inputs, 1).ok()?;
        let b = opt(inputs, 2);
        let g = self
            .geometry(&x.shape, &w.shape, b.map(|b| &b.shape[..]))
            .ok()?;
        gpu::kernel(x.dtype, &g, b.is_some())
    }

    fn flops(&self, inputs: &[Option<&ValueType>], _outputs: &[ValueType]) -> u64 {
        match (req(inputs, 0), req(inputs, 1)) {
            (Ok(x), Ok(w)) => {
                2 * x.numel() as u64 * w.shape.iter().skip(1).product::<usize>() as u64
            }
            _ => 0,
        }
    }
}
