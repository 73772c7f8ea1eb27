//! com.microsoft QGemm, ONNX Runtime's quantized Gemm: Y = alpha x A' x B' + C over 8-bit A
//! and B with zero points subtracted (A' and B' transposed when transA / transB say), C an
//! int32 bias in the product's scale (alpha x a_scale x b_scale), then, with y_scale, the
//! integers requantized as QLinearMatMul's are (times fl(fl(alpha x a_scale x b_scale) /
//! y_scale), rounded half to even, plus y's zero point, clipped); without y_scale, the f32
//! value fl(alpha x a_scale x b_scale) x the integers. b's scale and zero point may be one
//! value or one per output column.
//!
//! ONNX Runtime writes it for QDQ Gemms; graph/fuse_qdq.rs makes it of the same pattern. On
//! the GPU (conv/q8.rs's MatMul layouts): A not transposed, alpha 1, y_scale given, C absent
//! or one value per column; otherwise the CPU's reference kernel.

use super::conv::q8;
use super::integer::{int8_signed, per_channel_input};
use super::util::{opt, req, types_of};
use super::{
    BufRef, GpuKernel, InferInput, KernelTuning, MS_DOMAIN, NodeSpec, Op, OpError, Registry,
    ValueType,
};
use crate::splitk::SplitK;
use crate::tensor::{DType, Tensor, TensorError};

pub fn register(r: &mut Registry) {
    r.add_in(MS_DOMAIN, "QGemm", build);
}

// Input positions.
const A: usize = 0;
const A_SCALE: usize = 1;
const A_ZERO: usize = 2;
const B: usize = 3;
const B_SCALE: usize = 4;
const B_ZERO: usize = 5;
const C: usize = 6;
const Y_SCALE: usize = 7;
const Y_ZERO: usize = 8;

#[derive(Debug)]
struct QGemm {
    alpha: f32,
    trans_a: bool,
    trans_b: bool,
}

fn build(spec: &NodeSpec<'_>) -> Result<Box<dyn Op>, OpError> {
    let a = spec.attrs;
    Ok(Box::new(QGemm {
        alpha: a.float("alpha", 1.0)?,
        trans_a: a.int("transA", 0)? != 0,
        trans_b: a.int("transB", 0)? != 0,
    }))
}

fn bad(e: TensorError) -> OpError {
    OpError::invalid(e.to_string())
}

fn invalid(what: impl std::fmt::Display) -> OpError {
    OpError::invalid(format!("QGemm: {what}"))
}

impl QGemm {
    /// (M, K, N) of A' x B', checked.
    fn dims(&self, a: &[usize], b: &[usize]) -> Result<(usize, usize, usize), OpError> {
        let (&[a0, a1], &[b0, b1]) = (a, b) else {
            return Err(invalid(format!(
                "A {a:?} and B {b:?} must both be matrices"
            )));
        };
        let (m, k) = if self.trans_a { (a1, a0) } else { (a0, a1) };
        let (kb, n) = if self.trans_b { (b1, b0) } else { (b0, b1) };
        if k != kb {
            return Err(invalid(format!(
                "A' has {k} columns but B' has {kb} rows (A {a:?}, B {b:?}, transA {}, transB {})",
                self.trans_a as u8, self.trans_b as u8
            )));
        }
        Ok((m, k, n))
    }

    /// The integer products A' x B' (zero points subtracted) plus C, M x N row major.
    fn products(&self, inputs: &[Option<&Tensor>]) -> Result<(Vec<i64>, usize), OpError> {
        let (a, b) = (req(inputs, A)?, req(inputs, B)?);
        let (m, k, n) = self.dims(a.shape(), b.shape())?;
        let (av, bv) = (a.to_i64_vec().map_err(bad)?, b.to_i64_vec().map_err(bad)?);
        let one = |i: usize| -> Result<i64, OpError> {
            match opt(inputs, i)
                .map(|t| t.to_i64_vec())
                .transpose()
                .map_err(bad)?
            {
                None => Ok(0),
                Some(v) if v.len() == 1 => Ok(v[0]),
                Some(_) => Err(invalid("a_zero_point must hold one value")),
            }
        };
        let za = one(A_ZERO)?;
        let zb = per_column(opt(inputs, B_ZERO), n, "b_zero_point")?;
        let at = |i: usize, p: usize| av[if self.trans_a { p * m + i } else { i * k + p }];
        let bt = |p: usize, j: usize| bv[if self.trans_b { j * k + p } else { p * n + j }];
        let c = bias(opt(inputs, C), m, n)?;
        let mut y = vec![0i64; m * n];
        for i in 0..m {
            for j in 0..n {
                let zbj = zb
                    .as_ref()
                    .map_or(0, |z| z[if z.len() == 1 { 0 } else { j }]);
                let dot: i64 = (0..k).map(|p| (at(i, p) - za) * (bt(p, j) - zbj)).sum();
                y[i * n + j] = dot + c.as_ref().map_or(0, |c| c(i, j));
            }
        }
        Ok((y, n))
    }

    fn gpu_kernel(
        &self,
        inputs: &[Option<&ValueType>],
        outputs: &[ValueType],
        dot: bool,
        mode: SplitK,
    ) -> Option<GpuKernel> {
        let (a, b) = (opt(inputs, A)?, opt(inputs, B)?);
        if self.trans_a || self.alpha != 1.0 || opt(inputs, Y_SCALE).is_none() {
            return None;
        }
        let (m, k, n) = self.dims(&a.shape, &b.shape).ok()?;
        // The kernel adds one int32 per output column.
        let c = opt(inputs, C);
        if c.is_some_and(|c| c.dtype != DType::I32 || c.numel() != n || c.shape.len() > 2) {
            return None;
        }
        if c.is_some_and(|c| c.shape.len() == 2 && c.shape[0] != 1) {
            return None;
        }
        let f = DType::F32;
        let y = outputs.first()?.dtype;
        let requant = q8::Requant {
            x_scale: per_channel_input(inputs, A_SCALE, f, 1)??.0,
            w_scale: per_channel_input(inputs, B_SCALE, f, n)??,
            y_scale: per_channel_input(inputs, Y_SCALE, f, 1)??.0,
            y_zero: per_channel_input(inputs, Y_ZERO, y, 1)?.map(|z| z.0),
            y_signed: int8_signed(y)?,
        };
        let io = q8::Io {
            x_signed: int8_signed(a.dtype)?,
            w_signed: int8_signed(b.dtype)?,
            x: BufRef::Input(A),
            w: BufRef::Input(B),
            bias: c.map(|_| BufRef::Input(C)),
            x_zero: per_channel_input(inputs, A_ZERO, a.dtype, 1)?.map(|z| z.0),
            w_zero: per_channel_input(inputs, B_ZERO, b.dtype, n)?,
            requant: Some(requant),
        };
        let layout = if self.trans_b {
            q8::Layout::MatMulBt
        } else {
            q8::Layout::MatMul
        };
        q8::kernel(&q8::matmul_shape(m, k, n), &io, (dot, layout), mode)
    }
}

/// A per-column input (b's zero point): absent, one value, or `n` values.
fn per_column(t: Option<&Tensor>, n: usize, what: &str) -> Result<Option<Vec<i64>>, OpError> {
    let Some(t) = t else { return Ok(None) };
    let v = t.to_i64_vec().map_err(bad)?;
    if v.len() != 1 && v.len() != n {
        return Err(invalid(format!(
            "{what} has {} values; it must have 1 or {n} (one per output column)",
            v.len()
        )));
    }
    Ok(Some(v))
}

/// C as a function of (row, column): unidirectionally broadcast to M x N.
type Bias = Box<dyn Fn(usize, usize) -> i64>;

fn bias(c: Option<&Tensor>, m: usize, n: usize) -> Result<Option<Bias>, OpError> {
    let Some(c) = c else { return Ok(None) };
    if c.dtype() != DType::I32 {
        return Err(invalid(format!("C is {}; it must be int32", c.dtype())));
    }
    let v = c.to_i64_vec().map_err(bad)?;
    let dims: Vec<usize> = c.shape().to_vec();
    let (rows, cols) = match dims[..] {
        [] => (1, 1),
        [cn] => (1, cn),
        [cm, cn] => (cm, cn),
        _ => {
            return Err(invalid(format!(
                "C has shape {dims:?}; it must have rank 0 to 2"
            )));
        }
    };
    if (rows != 1 && rows != m) || (cols != 1 && cols != n) {
        return Err(invalid(format!(
            "C has shape {dims:?}, which does not broadcast to [{m}, {n}]"
        )));
    }
    Ok(Some(Box::new(move |i, j| {
        v[(if rows == 1 { 0 } else { i }) * cols + if cols == 1 { 0 } else { j }]
    })))
}

/// One value of a scale input, as f64.
fn scale(inputs: &[Option<&Tensor>], i: usize, what: &str) -> Result<Vec<f64>, OpError> {
    let v = req(inputs, i)?.to_f64_vec().map_err(bad)?;
    if v.is_empty() {
        return Err(invalid(format!("{what} is empty")));
    }
    Ok(v)
}

impl Op for QGemm {
    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<ValueType>, OpError> {
        let (a, b) = (req(inputs, A)?.ty, req(inputs, B)?.ty);
        for (t, what) in [(a, "A"), (b, "B")] {
            if int8_signed(t.dtype).is_none() {
                return Err(OpError::unsupported(format!(
                    "QGemm: {what} is {}; it must be int8 or uint8",
                    t.dtype
                )));
            }
        }
        let (m, _, n) = self.dims(&a.shape, &b.shape)?;
        let y = match (opt(inputs, Y_SCALE), opt(inputs, Y_ZERO)) {
            (None, _) => DType::F32,
            (Some(_), Some(z)) => z.ty.dtype,
            (Some(_), None) => DType::U8,
        };
        if y != DType::F32 && int8_signed(y).is_none() {
            return Err(invalid(format!(
                "y_zero_point is {y}; it must be int8 or uint8"
            )));
        }
        Ok(vec![ValueType::new(y, vec![m, n])])
    }

    fn run_cpu(
        &self,
        inputs: &[Option<&Tensor>],
        outputs: &[ValueType],
    ) -> Result<Vec<Tensor>, OpError> {
        let (acc, n) = self.products(inputs)?;
        let sa = scale(inputs, A_SCALE, "a_scale")?;
        let sb = scale(inputs, B_SCALE, "b_scale")?;
        if sa.len() != 1 || (sb.len() != 1 && sb.len() != n) {
            return Err(invalid(format!(
                "a_scale has {} values and b_scale {}; they must have 1, and 1 or {n}",
                sa.len(),
                sb.len()
            )));
        }
        let f = |v: f64| v as f32 as f64;
        let ab: Vec<f64> = sb
            .iter()
            .map(|&s| f(f(f64::from(self.alpha) * sa[0]) * s))
            .collect();
        let at = |j: usize| ab[if ab.len() == 1 { 0 } else { j }];
        let shape = outputs[0].shape.clone();
        let Some(sy) = opt(inputs, Y_SCALE) else {
            let y: Vec<f32> = (0..acc.len())
                .map(|i| (acc[i] as f64 * at(i % n)) as f32)
                .collect();
            return Ok(vec![Tensor::from_vec(shape, y)]);
        };
        let sy = match sy.to_f64_vec().map_err(bad)?[..] {
            [v] => v,
            _ => return Err(invalid("y_scale must hold one value")),
        };
        let zy = match opt(inputs, Y_ZERO)
            .map(|z| z.to_i64_vec())
            .transpose()
            .map_err(bad)?
        {
            None => 0,
            Some(v) if v.len() == 1 => v[0],
            Some(_) => return Err(invalid("y_zero_point must hold one value")),
        };
        let out = outputs[0].dtype;
        let (lo, hi) = if out == DType::I8 {
            (-128.0, 127.0)
        } else {
            (0.0, 255.0)
        };
        let y: Vec<u8> = (0..acc.len())
            .map(|i| {
                let d = acc[i] as f64 * f(at(i % n) / sy) + zy as f64;
                d.round_ties_even().clamp(lo, hi) as i64 as u8
            })
            .collect();
        Ok(vec![Tensor::from_bytes(out, shape, y.into()).map_err(bad)?])
    }

    fn gpu(&self, inputs: &[Option<&ValueType>], outputs: &[ValueType]) -> Option<GpuKernel> {
        self.gpu_kernel(inputs, outputs, false, SplitK::Auto)
    }

    fn gpu_planned(
        &self,
        inputs: &[Option<InferInput<'_>>],
        outputs: &[ValueType],
        tuning: &KernelTuning,
    ) -> Option<GpuKernel> {
        self.gpu_kernel(&types_of(inputs), outputs, false, tuning.conv_splitk)
    }

    fn gpu_preferred(
        &self,
        inputs: &[Option<InferInput<'_>>],
        outputs: &[ValueType],
        tuning: &KernelTuning,
    ) -> Vec<GpuKernel> {
        self.gpu_kernel(&types_of(inputs), outputs, true, tuning.conv_splitk)
            .into_iter()
            .collect()
    }

    fn flops(&self, inputs: &[Option<&ValueType>], _outputs: &[ValueType]) -> u64 {
        let (Some(a), Some(b)) = (opt(inputs, A), opt(inputs, B)) else {
            return 0;
        };
        self.dims(&a.shape, &b.shape)
            .map_or(0, |(m, k, n)| 2 * (m * k * n) as u64)
    }
}

#[cfg(test)]
#[path = "qgemm_tests.rs"]
mod tests;
