//! Ops that make tensors from shapes and a few values: Size, ConstantOfShape, Range, EyeLike
//! (known from types or planning-time values, so the graph layer folds them), and Trilu and
//! OneHot, which move real data on both backends. NonZero's output shape is its input's
//! values, so its rule needs that value.

use super::util::{const_input, groups_1d, opt, req};
use super::{BufRef, Dispatch, GpuKernel, InferInput, NodeSpec, Op, OpError, Registry, ValueType};
use crate::size::{self, Size as Count};
use crate::tensor::{DType, Tensor, numel};
use vkml_shaders::{onehot, trilu};

pub fn register(r: &mut Registry) {
    r.add("Size", build_size);
    r.add("ConstantOfShape", build_constant_of_shape);
    r.add("Range", build_range);
    r.add("EyeLike", build_eye_like);
    r.add("Trilu", build_trilu);
    r.add("OneHot", build_one_hot);
    r.add("NonZero", build_non_zero);
}

fn tensor(dtype: DType, shape: Vec<usize>, data: Vec<u8>) -> Result<Tensor, OpError> {
    Tensor::from_bytes(dtype, shape, data.into()).map_err(|e| OpError::invalid(e.to_string()))
}

/// A scalar of `t` as f64 (any numeric dtype).
fn scalar_f64(t: &Tensor, what: &str) -> Result<f64, OpError> {
    let v = t
        .to_f64_vec()
        .map_err(|e| OpError::invalid(format!("{what}: {e}")))?;
    match v.as_slice() {
        [x] => Ok(*x),
        _ => Err(OpError::invalid(format!(
            "{what} must hold one value, found shape {:?}",
            t.shape()
        ))),
    }
}

fn shape_only_flops() -> u64 {
    0
}

#[derive(Debug)]
struct Size;

fn build_size(_spec: &NodeSpec<'_>) -> Result<Box<dyn Op>, OpError> {
    Ok(Box::new(Size))
}

impl Op for Size {
    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<ValueType>, OpError> {
        req(inputs, 0)?;
        Ok(vec![ValueType::new(DType::I64, vec![])])
    }

    fn run_cpu(
        &self,
        inputs: &[Option<&Tensor>],
        _outputs: &[ValueType],
    ) -> Result<Vec<Tensor>, OpError> {
        Ok(vec![Tensor::scalar(req(inputs, 0)?.numel() as i64)])
    }

    fn known_outputs(&self, inputs: &[Option<&ValueType>]) -> Option<Vec<Tensor>> {
        Some(vec![Tensor::scalar(
            inputs.first().copied().flatten()?.numel() as i64,
        )])
    }

    fn flops(&self, _inputs: &[Option<&ValueType>], _outputs: &[ValueType]) -> u64 {
        shape_only_flops()
    }
}

#[derive(Debug)]
struct ConstantOfShape {
    value: Tensor,
}

fn build_constant_of_shape(spec: &NodeSpec<'_>) -> Result<Box<dyn Op>, OpError> {
    let value = match spec.attrs.tensor_opt("value")? {
        Some(t) if t.numel() == 1 => t.clone(),
        Some(t) => {
            return Err(OpError::invalid(format!(
                "ConstantOfShape value must hold one element, found shape {:?}",
                t.shape()
            )));
        }
        None => Tensor::scalar(0f32),
    };
    Ok(Box::new(ConstantOfShape { value }))
}

impl ConstantOfShape {
    fn shape(t: &Tensor) -> Result<Vec<usize>, OpError> {
        let v = super::shape_ops::int_list(t, "ConstantOfShape's shape")?;
        Ok(size::shape_from_i64(&v, "ConstantOfShape's shape")?)
    }
}

impl Op for ConstantOfShape {
    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<ValueType>, OpError> {
        let shape = ConstantOfShape::shape(const_input(inputs, 0)?)?;
        Ok(vec![ValueType::new(self.value.dtype(), shape)])
    }

    fn run_cpu(
        &self,
        inputs: &[Option<&Tensor>],
        _outputs: &[ValueType],
    ) -> Result<Vec<Tensor>, OpError> {
        let shape = ConstantOfShape::shape(req(inputs, 0)?)?;
        let data = self.value.bytes().repeat(size::numel(&shape)?);
        Ok(vec![tensor(self.value.dtype(), shape, data)?])
    }
}

#[derive(Debug)]
struct Range;

fn build_range(_spec: &NodeSpec<'_>) -> Result<Box<dyn Op>, OpError> {
    Ok(Box::new(Range))
}

/// Range's three scalars, read in their own type.
#[derive(Clone, Copy)]
enum Bounds {
    Float(f64, f64, f64),
    Int(i64, i64, i64),
}

impl Range {
    fn bounds(start: &Tensor, limit: &Tensor, delta: &Tensor) -> Result<Bounds, OpError> {
        let dtype = start.dtype();
        if limit.dtype() != dtype || delta.dtype() != dtype {
            return Err(OpError::invalid(
                "Range start, limit and delta share one type",
            ));
        }
        let b = match dtype {
            DType::F32 | DType::F64 | DType::F16 | DType::BF16 => Bounds::Float(
                scalar_f64(start, "Range start")?,
                scalar_f64(limit, "Range limit")?,
                scalar_f64(delta, "Range delta")?,
            ),
            // Read exactly: through f64, the ends of the int64 range round.
            DType::I16 | DType::I32 | DType::I64 => Bounds::Int(
                scalar_i64(start, "Range start")?,
                scalar_i64(limit, "Range limit")?,
                scalar_i64(delta, "Range delta")?,
            ),
            other => {
                return Err(OpError::invalid(format!(
                    "Range of {other} (floats, int16, int32, int64 only)"
                )));
            }
        };
        Ok(b)
    }

    /// max(ceil((limit - start) / delta), 0), as a checked size: a NaN or infinite bound, or
    /// a count past what vkml handles, is an error rather than a huge or empty range.
    fn count(b: &Bounds) -> Result<usize, OpError> {
        let n = match *b {
            Bounds::Float(s, l, d) => {
                if d == 0.0 {
                    return Err(OpError::invalid("Range delta must not be 0"));
                }
                // Not `max(0.0)`, which would turn a NaN into an empty range.
                let q = (l - s) / d;
                Count::from_f64_ceil(
                    if q < 0.0 { 0.0 } else { q },
                    format_args!("the length of Range({s}, {l}, {d})"),
                )?
            }
            Bounds::Int(s, l, d) => {
                if d == 0 {
                    return Err(OpError::invalid("Range delta must not be 0"));
                }
                // In i128: limit - start spans up to 2^64.
                let (span, d) = (l as i128 - s as i128, d as i128);
                let n = if (span > 0) == (d > 0) && span != 0 {
                    (span.abs() + d.abs() - 1) / d.abs()
                } else {
                    0
                };
                let what = format_args!("the length of Range({s}, {l}, {d})");
                match u64::try_from(n) {
                    Ok(n) => Count::new(n as usize, what)?,
                    Err(_) => Count::new(usize::MAX, what)?,
                }
            }
        };
        Ok(n.get())
    }

    fn values(b: &Bounds, dtype: DType) -> Result<Tensor, OpError> {
        let n = Range::count(b)?;
        Ok(match (*b, dtype) {
            (Bounds::Float(s, _, d), DType::F32) => {
                // Accumulated in the element type, as the spec's loop does.
                let (s, d) = (s as f32, d as f32);
                Tensor::from_vec(vec![n], (0..n).map(|i| s + i as f32 * d).collect())
            }
            (Bounds::Float(s, _, d), DType::F64) => {
                Tensor::from_vec(vec![n], (0..n).map(|i| s + i as f64 * d).collect())
            }
            (Bounds::Float(s, _, d), DType::F16) => Tensor::from_vec(
                vec![n],
                (0..n)
                    .map(|i| half::f16::from_f32(s as f32 + i as f32 * d as f32))
                    .collect(),
            ),
            (Bounds::Float(s, _, d), _) => Tensor::from_vec(
                vec![n],
                (0..n)
                    .map(|i| half::bf16::from_f32(s as f32 + i as f32 * d as f32))
                    .collect(),
            ),
            (Bounds::Int(s, _, d), _) => {
                // Every element lies between start and limit, so none overflows; wrapping
                // arithmetic only keeps the step itself from tripping on the last one.
                let v: Vec<i64> = (0..n as i64)
                    .map(|i| s.wrapping_add(i.wrapping_mul(d)))
                    .collect();
                match dtype {
                    DType::I16 => Tensor::from_vec(vec![n], v.iter().map(|&x| x as i16).collect()),
                    DType::I32 => Tensor::from_vec(vec![n], v.iter().map(|&x| x as i32).collect()),
                    _ => Tensor::from_vec(vec![n], v),
                }
            }
        })
    }
}

/// A scalar of an integer tensor, exactly.
fn scalar_i64(t: &Tensor, what: &str) -> Result<i64, OpError> {
    let v = t
        .to_i64_vec()
        .map_err(|e| OpError::invalid(format!("{what}: {e}")))?;
    match v.as_slice() {
        [x] => Ok(*x),
        _ => Err(OpError::invalid(format!(
            "{what} must hold one value, found shape {:?}",
            t.shape()
        ))),
    }
}

impl Op for Range {
    /// Only the length: the values are computed when the node is folded or run, after the
    /// graph layer has checked the output's size.
    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<ValueType>, OpError> {
        let start = const_input(inputs, 0)?;
        let b = Range::bounds(start, const_input(inputs, 1)?, const_input(inputs, 2)?)?;
        Ok(vec![ValueType::new(start.dtype(), vec![Range::count(&b)?])])
    }

    fn run_cpu(
        &self,
        inputs: &[Option<&Tensor>],
        _outputs: &[ValueType],
    ) -> Result<Vec<Tensor>, OpError> {
        let start = req(inputs, 0)?;
        let b = Range::bounds(start, req(inputs, 1)?, req(inputs, 2)?)?;
        Ok(vec![Range::values(&b, start.dtype())?])
    }
}

#[derive(Debug)]
struct EyeLike {
    dtype: Option<DType>,
    k: i64,
}

fn build_eye_like(spec: &NodeSpec<'_>) -> Result<Box<dyn Op>, OpError> {
    let dtype = match spec.attrs.int_opt("dtype")? {
        None => None,
        Some(c) => Some(
            i32::try_from(c)
                .ok()
                .and_then(DType::from_onnx_code)
                .ok_or_else(|| OpError::unsupported(format!("EyeLike dtype code {c}")))?,
        ),
    };
    Ok(Box::new(EyeLike {
        dtype,
        k: spec.attrs.int("k", 0)?,
    }))
}

impl EyeLike {
    fn out(&self, x: &ValueType) -> Result<ValueType, OpError> {
        if x.shape.len() != 2 {
            return Err(OpError::invalid(format!(
                "EyeLike needs a 2-D input, found {:?}",
                x.shape
            )));
        }
        Ok(ValueType::new(
            self.dtype.unwrap_or(x.dtype),
            x.shape.clone(),
        ))
    }

    fn make(&self, x: &ValueType) -> Result<Tensor, OpError> {
        let out = self.out(x)?;
        let (r, c) = (out.shape[0], out.shape[1]);
        let es = out.dtype.size();
        let one = super::pad::value_bits(out.dtype, 1.0).to_le_bytes();
        let mut data = vec![0u8; out.bytes()];
        for i in 0..r {
            let j = i as i64 + self.k;
            if (0..c as i64).contains(&j) {
                let at = (i * c + j as usize) * es;
                data[at..at + es].copy_from_slice(&one[..es]);
            }
        }
        tensor(out.dtype, out.shape, data)
    }
}

impl Op for EyeLike {
    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<ValueType>, OpError> {
        Ok(vec![self.out(req(inputs, 0)?.ty)?])
    }

    fn run_cpu(
        &self,
        inputs: &[Option<&Tensor>],
        _outputs: &[ValueType],
    ) -> Result<Vec<Tensor>, OpError> {
        Ok(vec![self.make(&ValueType::of(req(inputs, 0)?))?])
    }

    fn known_outputs(&self, inputs: &[Option<&ValueType>]) -> Option<Vec<Tensor>> {
        Some(vec![self.make(inputs.first().copied().flatten()?).ok()?])
    }
}

#[derive(Debug)]
struct Trilu {
    upper: bool,
}

fn build_trilu(spec: &NodeSpec<'_>) -> Result<Box<dyn Op>, OpError> {
    Ok(Box::new(Trilu {
        upper: spec.attrs.int("upper", 1)? != 0,
    }))
}

impl Op for Trilu {
    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<ValueType>, OpError> {
        let x = req(inputs, 0)?.ty;
        if x.shape.len() < 2 {
            return Err(OpError::invalid(format!(
                "Trilu needs rank 2 or more, found {:?}",
                x.shape
            )));
        }
        if let Some(k) = opt(inputs, 1)
            && (k.ty.dtype != DType::I64 || k.ty.numel() != 1)
        {
            return Err(OpError::invalid("Trilu k must be an int64 scalar"));
        }
        Ok(vec![x.clone()])
    }

    fn run_cpu(
        &self,
        inputs: &[Option<&Tensor>],
        _outputs: &[ValueType],
    ) -> Result<Vec<Tensor>, OpError> {
        let x = req(inputs, 0)?;
        let k = match opt(inputs, 1) {
            Some(t) => scalar_f64(t, "Trilu k")? as i64,
            None => 0,
        };
        let s = x.shape();
        let (rows, cols) = (s[s.len() - 2], s[s.len() - 1]);
        let es = x.dtype().size();
        let mut data = x.bytes().to_vec();
        for e in 0..x.numel() {
            let (j, i) = ((e % cols) as i64, ((e / cols) % rows) as i64);
            let keep = if self.upper { j - i >= k } else { j - i <= k };
            if !keep {
                data[e * es..(e + 1) * es].fill(0);
            }
        }
        Ok(vec![tensor(x.dtype(), s.to_vec(), data)?])
    }

    fn gpu(&self, inputs: &[Option<&ValueType>], _outputs: &[ValueType]) -> Option<GpuKernel> {
        let x = inputs.first().copied().flatten()?;
        let has_k = inputs.get(1).copied().flatten().is_some();
        let n = x.numel();
        let s = &x.shape;
        i32::try_from(n).ok()?;
        let dispatches = if n == 0 {
            vec![]
        } else {
            vec![Dispatch::new(
                by_width!(x.dtype.size(), trilu::Variant)?,
                trilu::Buffers {
                    x: BufRef::Input(0),
                    // Without k the slot repeats x, so every address is a valid one.
                    k: BufRef::Input(if has_k { 1 } else { 0 }),
                    y: BufRef::Output(0),
                },
                trilu::Params {
                    n: n as u32,
                    rows: s[s.len() - 2] as u32,
                    cols: s[s.len() - 1] as u32,
                    has_k: has_k as u32,
                    upper: self.upper as u32,
                },
                groups_1d(n, 256),
            )]
        };
        Some(GpuKernel {
            scratch: vec![],
            dispatches,
        })
    }
}

#[derive(Debug)]
struct OneHot {
    axis: i64,
    /// Opset 11 lets negative indices count from the back of depth.
    negative_ok: bool,
}

fn build_one_hot(spec: &NodeSpec<'_>) -> Result<Box<dyn Op>, OpError> {
    Ok(Box::new(OneHot {
        axis: spec.attrs.int("axis", -1)?,
        negative_ok: spec.opset >= 11,
    }))
}

impl OneHot {
    /// (output shape, axis, depth).
    fn layout(
        &self,
        indices: &[usize],
        depth: &Tensor,
    ) -> Result<(Vec<usize>, usize, usize), OpError> {
        let d = scalar_f64(depth, "OneHot depth")?;
        if d < 1.0 {
            return Err(OpError::invalid(format!(
                "OneHot depth {d} must be positive"
            )));
        }
        let depth = Count::from_f64_ceil(d.trunc(), "OneHot depth")?.get();
        let axis = super::util::axis(self.axis, indices.len() + 1)?;
        let mut shape = indices.to_vec();
        shape.insert(axis, depth);
        size::check_shape(&shape, "OneHot's output")?;
        Ok((shape, axis, depth))
    }
}

impl Op for OneHot {
    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<ValueType>, OpError> {
        let idx = req(inputs, 0)?.ty;
        let values = req(inputs, 2)?.ty;
        if values.numel() != 2 {
            return Err(OpError::invalid("OneHot values must hold [off, on]"));
        }
        let (shape, _, _) = self.layout(&idx.shape, const_input(inputs, 1)?)?;
        Ok(vec![ValueType::new(values.dtype, shape)])
    }

    fn run_cpu(
        &self,
        inputs: &[Option<&Tensor>],
        _outputs: &[ValueType],
    ) -> Result<Vec<Tensor>, OpError> {
        let (idx, values) = (req(inputs, 0)?, req(inputs, 2)?);
        let (shape, axis, depth) = self.layout(idx.shape(), req(inputs, 1)?)?;
        let iv = idx
            .to_f64_vec()
            .map_err(|e| OpError::invalid(format!("OneHot indices: {e}")))?;
        let es = values.dtype().size();
        let vb = values.bytes();
        let (off, on) = (&vb[..es], &vb[es..2 * es]);
        let inner = numel(&idx.shape()[axis..]);
        let mut data = Vec::with_capacity(numel(&shape) * es);
        for e in 0..numel(&shape) {
            let i = e % inner;
            let t = e / inner;
            let (d, o) = (t % depth, t / depth);
            let mut v = iv[o * inner + i].trunc() as i64;
            if v < 0 && self.negative_ok {
                v += depth as i64;
            }
            data.extend_from_slice(if v == d as i64 { on } else { off });
        }
        Ok(vec![tensor(values.dtype(), shape, data)?])
    }

    fn gpu(&self, inputs: &[Option<&ValueType>], outputs: &[ValueType]) -> Option<GpuKernel> {
        let idx = inputs.first().copied().flatten()?;
        let values = inputs.get(2).copied().flatten()?;
        let y = outputs.first()?;
        let axis = super::util::axis(self.axis, idx.shape.len() + 1).ok()?;
        let depth = y.shape[axis];
        let n = y.numel();
        i32::try_from(n).ok()?;
        i32::try_from(depth).ok()?;
        let dispatches = if n == 0 {
            vec![]
        } else {
            vec![Dispatch::new(
                by_width!(values.dtype.size(), onehot::Variant)?,
                onehot::Buffers {
                    indices: BufRef::Input(0),
                    values: BufRef::Input(2),
                    y: BufRef::Output(0),
                },
                onehot::Params {
                    n: n as u32,
                    depth: depth as u32,
                    inner: numel(&idx.shape[axis..]) as u32,
                    idx_words: match idx.dtype {
                        DType::F32 => 0,
                        d => super::gather_nd::index_words(d)?,
                    },
                    wrap: self.negative_ok as u32,
                },
                groups_1d(n, 256),
            )]
        };
        Some(GpuKernel {
            scratch: vec![],
            dispatches,
        })
    }
}

#[derive(Debug)]
struct NonZero;

fn build_non_zero(_spec: &NodeSpec<'_>) -> Result<Box<dyn Op>, OpError> {
    Ok(Box::new(NonZero))
}

/// Row-major positions of the non-zero elements of `t`, as [rank, count] int64.
fn non_zero(t: &Tensor) -> Result<Tensor, OpError> {
    let es = t.dtype().size();
    let hits: Vec<usize> = match t.dtype() {
        // -0.0 is zero: compare values for floats, bytes otherwise.
        d if d.is_float() => t
            .to_f64_vec()
            .map_err(|e| OpError::invalid(e.to_string()))?
            .iter()
            .enumerate()
            .filter(|(_, v)| **v != 0.0)
            .map(|(i, _)| i)
            .collect(),
        _ => t
            .bytes()
            .chunks_exact(es)
            .enumerate()
            .filter(|(_, c)| c.iter().any(|&b| b != 0))
            .map(|(i, _)| i)
            .collect(),
    };
    let st = crate::tensor::strides(t.shape());
    let r = t.rank();
    let mut out = vec![0i64; r * hits.len()];
    for (j, &h) in hits.iter().enumerate() {
        for k in 0..r {
            out[k * hits.len() + j] = ((h / st[k]) % t.shape()[k]) as i64;
        }
    }
    Ok(Tensor::from_vec(vec![r, hits.len()], out))
}

impl Op for NonZero {
    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<ValueType>, OpError> {
        Ok(vec![ValueType::of(&non_zero(const_input(inputs, 0)?)?)])
    }

    fn run_cpu(
        &self,
        inputs: &[Option<&Tensor>],
        _outputs: &[ValueType],
    ) -> Result<Vec<Tensor>, OpError> {
        Ok(vec![non_zero(req(inputs, 0)?)?])
    }
}

#[cfg(test)]
mod tests;
