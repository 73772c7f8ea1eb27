//! ArgMax and ArgMin: the index (int64) of the first, or with `select_last_index` the last,
//! extreme element along one axis. A NaN counts as the extreme, as in numpy.

use crate::numeric::{Wide, widen};
use crate::tensor::{DType, Tensor};
use crate::util::{axis as norm_axis, groups_1d, req};
use crate::{BufRef, Dispatch, GpuKernel, InferInput, NodeSpec, Op, OpError, Registry, ValueType};
use vkml_shaders::argmax;

pub fn register(r: &mut Registry) {
    r.add("ArgMax", |s| Arg::build(s, false));
    r.add("ArgMin", |s| Arg::build(s, true));
}

/// Rows at least this long get a workgroup each.
const ROW_MIN: usize = 512;

#[derive(Debug)]
struct Arg {
    min: bool,
    axis: i64,
    keepdims: bool,
    last: bool,
}

impl Arg {
    fn build(spec: &NodeSpec<'_>, min: bool) -> Result<Box<dyn Op>, OpError> {
        Ok(Box::new(Arg {
            min,
            axis: spec.attrs.int("axis", 0)?,
            keepdims: spec.attrs.int("keepdims", 1)? != 0,
            last: spec.attrs.int("select_last_index", 0)? != 0,
        }))
    }

    fn name(&self) -> &'static str {
        if self.min { "ArgMin" } else { "ArgMax" }
    }

    /// (outer, len, inner, output shape).
    fn geometry(&self, shape: &[usize]) -> Result<(usize, usize, usize, Vec<usize>), OpError> {
        if shape.is_empty() {
            return Err(OpError::invalid(format!(
                "{}: the input is a scalar, it has no axis",
                self.name()
            )));
        }
        let a = norm_axis(self.axis, shape.len())
            .map_err(|e| OpError::invalid(format!("{}: {e}", self.name())))?;
        let len = shape[a];
        if len == 0 {
            return Err(OpError::invalid(format!(
                "{}: axis {a} of {shape:?} is empty, it has no extreme element",
                self.name()
            )));
        }
        let mut out = shape.to_vec();
        if self.keepdims {
            out[a] = 1;
        } else {
            out.remove(a);
        }
        Ok((
            shape[..a].iter().product(),
            len,
            shape[a + 1..].iter().product(),
            out,
        ))
    }

    /// True when `v` should replace the current extreme `best`.
    fn better<T: PartialOrd + Copy>(&self, v: T, best: T, is_nan: impl Fn(T) -> bool) -> bool {
        if is_nan(best) {
            return self.last && is_nan(v);
        }
        if is_nan(v) {
            return true;
        }
        let strictly = if self.min { v < best } else { v > best };
        strictly || (self.last && v == best)
    }

    fn scan<T: PartialOrd + Copy>(
        &self,
        v: &[T],
        (outer, len, inner): (usize, usize, usize),
        is_nan: impl Fn(T) -> bool + Copy,
    ) -> Vec<i64> {
        let mut out = Vec::with_capacity(outer * inner);
        for o in 0..outer {
            for i in 0..inner {
                let at = |j: usize| v[(o * len + j) * inner + i];
                let mut best = 0;
                for j in 1..len {
                    if self.better(at(j), at(best), is_nan) {
                        best = j;
                    }
                }
                out.push(best as i64);
            }
        }
        out
    }
}

impl Op for Arg {
    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<ValueType>, OpError> {
        let x = req(inputs, 0)?.ty;
        if x.dtype == DType::Bool {
            return Err(OpError::unsupported(format!("{}: bool input", self.name())));
        }
        let (_, _, _, out) = self.geometry(&x.shape)?;
        Ok(vec![ValueType::new(DType::I64, out)])
    }

    fn run_cpu(
        &self,
        inputs: &[Option<&Tensor>],
        _outputs: &[ValueType],
    ) -> Result<Vec<Tensor>, OpError> {
        let x = req(inputs, 0)?;
        let (outer, len, inner, out) = self.geometry(x.shape())?;
        let g = (outer, len, inner);
        let idx = match widen(x)? {
            Wide::F(v) => self.scan(&v, g, f64::is_nan),
            Wide::I(v) => self.scan(&v, g, |_| false),
        };
        Ok(vec![Tensor::from_vec(out, idx)])
    }

    fn gpu(&self, inputs: &[Option<&ValueType>], _outputs: &[ValueType]) -> Option<GpuKernel> {
        let x = req(inputs, 0).ok()?;
        let (outer, len, inner, _) = self.geometry(&x.shape).ok()?;
        u32::try_from(x.numel()).ok()?;
        let n = outer * inner;
        // Long rows: a workgroup per output (the shader needs len >= its 256 invocations).
        let row = len >= ROW_MIN;
        let variant = if row {
            by_dtype!(x.dtype, argmax::Variant, [F32 => F32Row, F16 => F16Row, I32 => I32Row, I64 => I64Row, I8 => I8Row, U8 => U8Row])
        } else {
            by_dtype!(x.dtype, argmax::Variant, [F32, F16, I32, I64, I8, U8])
        }?;
        let groups = if row {
            let gy = n.div_ceil(65_535);
            [n.div_ceil(gy) as u32, u32::try_from(gy).ok()?, 1]
        } else {
            groups_1d(n, 256)
        };
        Some(GpuKernel {
            scratch: vec![],
            dispatches: vec![Dispatch::new(
                variant,
                argmax::Buffers {
                    x: BufRef::Input(0),
                    y: BufRef::Output(0),
                },
                argmax::Params {
                    n: n as u32,
                    len: len as u32,
                    inner: inner as u32,
                    is_min: self.min as u32,
                    last: self.last as u32,
                },
                groups,
            )],
        })
    }
}
