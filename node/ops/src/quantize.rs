//! QuantizeLinear and DequantizeLinear (opsets 10-25): per tensor, per axis and blocked
//! (opset 21), into and out of every integer and low-precision type ONNX quantizes to.
//!
//! The arithmetic is ONNX's reference (numpy): QuantizeLinear divides in the wider of x's and
//! the scale's type (so in f16 when both are f16: f32's quotient rounded to f16 is the same,
//! as f32 carries more than twice f16's bits plus two), rounds half to even, adds the zero
//! point and clips to the type's range; to float8 it rounds the quotient (saturating by
//! default) and ignores the zero point, to float4 it adds it first. DequantizeLinear computes
//! (x - zero point) x scale in f64, which holds both factors exactly, and rounds once to the
//! output type, as numpy's promotions do; float8 zero points must be zero, float4's are
//! ignored, as the reference does.

use super::util::{axis as norm_axis, opt, req};
use super::{GpuKernel, InferInput, NodeSpec, Op, OpError, Registry, ValueType};
use crate::lowp::{self, Float};
use crate::numeric::from_f64;
use crate::tensor::{DType, Tensor, TensorError};

mod dynamic;
mod gpu;

pub fn register(r: &mut Registry) {
    r.add("QuantizeLinear", build_quantize);
    r.add("DequantizeLinear", build_dequantize);
    dynamic::register(r);
}

/// Which scale (and zero point) an element of x takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    Tensor,
    Axis,
    Blocked,
}

/// x's shape around the quantization axis: element i has axis index `(i / inner) % dim`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Layout {
    pub kind: Kind,
    pub inner: usize,
    pub dim: usize,
    pub block: usize,
    /// Blocks along the axis (the scale's size there).
    pub blocks: usize,
}

impl Layout {
    /// Checks the scale's shape against x's and the attributes.
    fn new(x: &[usize], scale: &[usize], axis: i64, block: i64) -> Result<Layout, OpError> {
        let bad = |why: String| Err(OpError::invalid(why));
        let one = Layout {
            kind: Kind::Tensor,
            inner: 1,
            dim: 1,
            block: 1,
            blocks: 1,
        };
        if scale.iter().product::<usize>() == 1 && scale.len() <= 1 {
            return Ok(one);
        }
        let a = norm_axis(axis, x.len())?;
        let inner = x[a + 1..].iter().product();
        let dim = x[a];
        if block <= 0 {
            if scale != [dim] {
                return bad(format!(
                    "the scale has shape {scale:?}: per-axis quantization along axis {a} of \
                     {x:?} needs [{dim}] (or one value, per tensor)"
                ));
            }
            return Ok(Layout {
                kind: Kind::Axis,
                inner,
                dim,
                block: 1,
                blocks: dim,
            });
        }
        let block = block as usize;
        let blocks = dim.div_ceil(block);
        let mut want = x.to_vec();
        want[a] = blocks;
        if scale != want {
            return bad(format!(
                "the scale has shape {scale:?}: blocks of {block} along axis {a} of {x:?} \
                 need {want:?}"
            ));
        }
        Ok(Layout {
            kind: Kind::Blocked,
            inner,
            dim,
            block,
            blocks,
        })
    }

    /// The scale's element for x's element `i`.
    fn at(&self, i: usize) -> usize {
        match self.kind {
            Kind::Tensor => 0,
            Kind::Axis => (i / self.inner) % self.dim,
            Kind::Blocked => {
                let outer = i / (self.dim * self.inner);
                let along = (i / self.inner) % self.dim / self.block;
                (outer * self.blocks + along) * self.inner + i % self.inner
            }
        }
    }
}

/// Whether a zero point of shape `z` goes with a scale of shape `s`: the same shape, or
/// one value each (a scalar or a vector of one, which ONNX's models mix).
fn same_place(z: &[usize], s: &[usize]) -> bool {
    let one = |d: &[usize]| d.len() <= 1 && d.iter().product::<usize>() == 1;
    z == s || (one(z) && one(s))
}

/// The attributes both ops share.
#[derive(Debug)]
struct Common {
    axis: i64,
    block: i64,
}

impl Common {
    /// Where x's elements find their scales, checked.
    fn layout(&self, x: &[usize], scale: &[usize]) -> Result<Layout, OpError> {
        Layout::new(x, scale, self.axis, self.block)
    }
}

fn common(spec: &NodeSpec<'_>) -> Result<Common, OpError> {
    let block = spec.attrs.int("block_size", 0)?;
    if block < 0 {
        return Err(OpError::invalid(format!(
            "{}: block_size {block} is negative",
            spec.op_type
        )));
    }
    Ok(Common {
        axis: spec.attrs.int("axis", 1)?,
        block,
    })
}

/// A float attribute's type code (`output_dtype`), 0 meaning unset.
fn dtype_attr(spec: &NodeSpec<'_>, name: &str) -> Result<Option<DType>, OpError> {
    match spec.attrs.int(name, 0)? {
        0 => Ok(None),
        code => i32::try_from(code)
            .ok()
            .and_then(DType::from_onnx_code)
            .map(Some)
            .ok_or_else(|| OpError::unsupported(format!("{}: {name} {code}", spec.op_type))),
    }
}

fn bad(e: TensorError) -> OpError {
    OpError::invalid(e.to_string())
}

/// The inclusive range of an integer type quantized to.
fn int_range(d: DType) -> Option<(i64, i64)> {
    Some(match d {
        DType::U8 => (0, 255),
        DType::I8 => (-128, 127),
        DType::U16 => (0, 65535),
        DType::I16 => (-32768, 32767),
        DType::U4 => (0, 15),
        DType::I4 => (-8, 7),
        DType::U2 => (0, 3),
        DType::I2 => (-2, 1),
        _ => return None,
    })
}

fn quantizable(d: DType) -> bool {
    int_range(d).is_some()
        || matches!(
            d,
            DType::F8E4M3FN | DType::F8E4M3FNUZ | DType::F8E5M2 | DType::F8E5M2FNUZ | DType::F4E2M1
        )
}

#[derive(Debug)]
struct Quantize {
    common: Common,
    saturate: bool,
    output: Option<DType>,
}

fn build_quantize(spec: &NodeSpec<'_>) -> Result<Box<dyn Op>, OpError> {
    if let Some(p) = dtype_attr(spec, "precision")?
        && p != DType::F32
    {
        return Err(OpError::unsupported(format!(
            "QuantizeLinear: precision {p} (vkml divides in float)"
        )));
    }
    Ok(Box::new(Quantize {
        common: common(spec)?,
        saturate: spec.attrs.int("saturate", 1)? != 0,
        output: dtype_attr(spec, "output_dtype")?,
    }))
}

impl Quantize {
    fn out_type(&self, zp: Option<&ValueType>) -> Result<DType, OpError> {
        let d = match (zp, self.output) {
            (Some(z), Some(o)) if z.dtype != o => {
                return Err(OpError::invalid(format!(
                    "QuantizeLinear: output_dtype {o} but the zero point is {}",
                    z.dtype
                )));
            }
            (Some(z), _) => z.dtype,
            (None, Some(o)) => o,
            (None, None) => DType::U8,
        };
        if !quantizable(d) {
            return Err(OpError::unsupported(format!("QuantizeLinear to {d}")));
        }
        Ok(d)
    }
}

/// The quotients x / scale, rounded as numpy would in the wider of the two types.
fn quotients(x: &Tensor, scale: &Tensor, l: &Layout) -> Result<Vec<f32>, OpError> {
    let xs = crate::cast::cast_tensor(x, DType::F32)?;
    let ss = crate::cast::cast_tensor(scale, DType::F32)?;
    let xs = xs.view::<f32>().map_err(bad)?;
    let ss = ss.view::<f32>().map_err(bad)?;
    let narrow = x.dtype() == scale.dtype() && matches!(x.dtype(), DType::F16 | DType::BF16);
    Ok(xs
        .iter()
        .enumerate()
        .map(|(i, &v)| {
            let q = v / ss[l.at(i)];
            match (narrow, x.dtype()) {
                (true, DType::F16) => half::f16::from_f32(q).to_f32(),
                (true, _) => half::bf16::from_f32(q).to_f32(),
                _ => q,
            }
        })
        .collect())
}

/// Integer values of `t` in its type's own terms: the zero point.
fn zero_points(zp: Option<&Tensor>) -> Result<Option<Vec<i64>>, OpError> {
    zp.filter(|z| Float::of(z.dtype()).is_none())
        .map(|z| z.to_i64_vec().map_err(bad))
        .transpose()
}

fn quantize(
    q: &[f32],
    zp: Option<&Tensor>,
    out: DType,
    l: &Layout,
    saturate: bool,
) -> Result<Vec<u8>, OpError> {
    let zi = zero_points(zp)?;
    if let Some((lo, hi)) = int_range(out) {
        let z = |i: usize| zi.as_ref().map_or(0, |z| z[l.at(i)]);
        let v = q
            .iter()
            .enumerate()
            .map(|(i, &v)| (v.round_ties_even() as i32 as i64 + z(i)).clamp(lo, hi));
        return Ok(match out.size() {
            2 => v.flat_map(|v| (v as u16).to_le_bytes()).collect(),
            // Clipped to the range, so the low byte is the value as memory holds it (the
            // narrow integers sign-extended).
            _ => v.map(|v| v as u8).collect(),
        });
    }
    let f =
        Float::of(out).ok_or_else(|| OpError::unsupported(format!("QuantizeLinear to {out}")))?;
    if f == Float::E2M1 {
        let zf = zp.map(lowp::to_f32_vec);
        let z = |i: usize| zf.as_ref().map_or(0.0, |z| z[l.at(i)]);
        return Ok(q
            .iter()
            .enumerate()
            .map(|(i, &v)| f.encode(f64::from(v + z(i)), true))
            .collect());
    }
    Ok(q.iter()
        .map(|&v| f.encode(f64::from(v), saturate))
        .collect())
}

impl Op for Quantize {
    fn low_precision(&self) -> bool {
        true
    }

    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<ValueType>, OpError> {
        let x = req(inputs, 0)?.ty;
        let scale = req(inputs, 1)?.ty;
        let zp = opt(inputs, 2).map(|z| z.ty);
        if !matches!(x.dtype, DType::F32 | DType::F16 | DType::BF16 | DType::I32) {
            return Err(OpError::unsupported(format!(
                "QuantizeLinear of {}",
                x.dtype
            )));
        }
        self.common.layout(&x.shape, &scale.shape)?;
        if let Some(z) = zp
            && !same_place(&z.shape, &scale.shape)
        {
            return Err(OpError::invalid(format!(
                "QuantizeLinear: the zero point has shape {:?}, the scale {:?}",
                z.shape, scale.shape
            )));
        }
        Ok(vec![ValueType::new(self.out_type(zp)?, x.shape.clone())])
    }

    fn run_cpu(
        &self,
        inputs: &[Option<&Tensor>],
        outputs: &[ValueType],
    ) -> Result<Vec<Tensor>, OpError> {
        let x = req(inputs, 0)?;
        let scale = req(inputs, 1)?;
        let zp = opt(inputs, 2);
        let l = self.common.layout(x.shape(), scale.shape())?;
        let out = outputs[0].dtype;
        let q = quotients(x, scale, &l)?;
        let bytes = quantize(&q, zp, out, &l, self.saturate)?;
        let y = Tensor::from_bytes(out, x.shape().to_vec(), bytes.into()).map_err(bad)?;
        Ok(vec![y])
    }

    fn gpu(&self, inputs: &[Option<&ValueType>], outputs: &[ValueType]) -> Option<GpuKernel> {
        gpu::quantize(self, inputs, outputs)
    }
}

#[derive(Debug)]
struct Dequantize {
    common: Common,
    output: Option<DType>,
}

fn build_dequantize(spec: &NodeSpec<'_>) -> Result<Box<dyn Op>, OpError> {
    Ok(Box::new(Dequantize {
        common: common(spec)?,
        output: dtype_attr(spec, "output_dtype")?,
    }))
}

fn dequantizable(d: DType) -> bool {
    quantizable(d) || d == DType::I32
}

impl Op for Dequantize {
    fn low_precision(&self) -> bool {
        true
    }

    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<ValueType>, OpError> {
        let x = req(inputs, 0)?.ty;
        let scale = req(inputs, 1)?.ty;
        let zp = opt(inputs, 2).map(|z| z.ty);
        if !dequantizable(x.dtype) {
            return Err(OpError::unsupported(format!(
                "DequantizeLinear of {}",
                x.dtype
            )));
        }
        if !matches!(scale.dtype, DType::F32 | DType::F16 | DType::BF16) {
            return Err(OpError::invalid(format!(
                "DequantizeLinear: the scale is {}, not a float",
                scale.dtype
            )));
        }
        self.common.layout(&x.shape, &scale.shape)?;
        if let Some(z) = zp {
            if !same_place(&z.shape, &scale.shape) {
                return Err(OpError::invalid(format!(
                    "DequantizeLinear: the zero point has shape {:?}, the scale {:?}",
                    z.shape, scale.shape
                )));
            }
            if z.dtype != x.dtype {
                return Err(OpError::invalid(format!(
                    "DequantizeLinear: x is {} and its zero point {}",
                    x.dtype, z.dtype
                )));
            }
        }
        let out = self.output.unwrap_or(scale.dtype);
        if !matches!(out, DType::F32 | DType::F16 | DType::BF16) {
            return Err(OpError::unsupported(format!("DequantizeLinear to {out}")));
        }
        Ok(vec![ValueType::new(out, x.shape.clone())])
    }

    fn run_cpu(
        &self,
        inputs: &[Option<&Tensor>],
        outputs: &[ValueType],
    ) -> Result<Vec<Tensor>, OpError> {
        let x = req(inputs, 0)?;
        let scale = req(inputs, 1)?;
        let zp = opt(inputs, 2);
        let l = self.common.layout(x.shape(), scale.shape())?;
        let float = Float::of(x.dtype());
        let xs: Vec<f64> = match float {
            Some(_) => lowp::to_f32_vec(x).into_iter().map(f64::from).collect(),
            None => x
                .to_i64_vec()
                .map_err(bad)?
                .into_iter()
                .map(|v| v as f64)
                .collect(),
        };
        let zs: Option<Vec<f64>> = match (zp, float) {
            (None, _) | (Some(_), Some(Float::E2M1)) => None,
            (Some(z), None) => Some(
                z.to_i64_vec()
                    .map_err(bad)?
                    .into_iter()
                    .map(|v| v as f64)
                    .collect(),
            ),
            (Some(z), Some(_)) => {
                if lowp::to_f32_vec(z).iter().any(|&v| v != 0.0) {
                    return Err(OpError::invalid(format!(
                        "DequantizeLinear: a {} zero point must be zero",
                        x.dtype()
                    )));
                }
                None
            }
        };
        let ss = scale.to_f64_vec().map_err(bad)?;
        let y: Vec<f64> = xs
            .iter()
            .enumerate()
            .map(|(i, &v)| {
                let k = l.at(i);
                (v - zs.as_ref().map_or(0.0, |z| z[k])) * ss[k]
            })
            .collect();
        Ok(vec![from_f64(outputs[0].dtype, x.shape().to_vec(), y)?])
    }

    fn gpu(&self, inputs: &[Option<&ValueType>], outputs: &[ValueType]) -> Option<GpuKernel> {
        gpu::dequantize(self, inputs, outputs)
    }
}

#[cfg(test)]
mod tests;
