//! Reference kernels: every dtype computed in f64 (floats) or i64 (integers, wrapping).

use super::{Kind, Plan};
use crate::OpError;
use crate::numeric::{Wide, from_f64, int_range, narrow, offsets, widen};
use crate::tensor::Tensor;

fn reduce_f(kind: Kind, v: impl Iterator<Item = f64> + Clone, n: usize) -> f64 {
    let sum = |f: fn(f64) -> f64| v.clone().map(f).sum::<f64>();
    match kind {
        Kind::Sum => sum(|x| x),
        Kind::Mean => sum(|x| x) / n as f64,
        Kind::Max => v.fold(f64::NEG_INFINITY, |a, x| {
            if a.is_nan() || x.is_nan() {
                f64::NAN
            } else {
                a.max(x)
            }
        }),
        Kind::Min => v.fold(f64::INFINITY, |a, x| {
            if a.is_nan() || x.is_nan() {
                f64::NAN
            } else {
                a.min(x)
            }
        }),
        Kind::Prod => v.product(),
        Kind::L1 => sum(f64::abs),
        Kind::L2 => sum(|x| x * x).sqrt(),
        Kind::LogSum => sum(|x| x).ln(),
        Kind::LogSumExp => {
            let m = reduce_f(Kind::Max, v.clone(), n);
            if m.is_infinite() || m.is_nan() {
                m
            } else {
                m + v.map(|x| (x - m).exp()).sum::<f64>().ln()
            }
        }
        Kind::SumSquare => sum(|x| x * x),
    }
}

fn reduce_i(kind: Kind, v: impl Iterator<Item = i64> + Clone, n: usize, range: (i64, i64)) -> i64 {
    let wsum = |f: fn(i64) -> i64| v.clone().fold(0i64, |a, x| a.wrapping_add(f(x)));
    match kind {
        Kind::Sum => wsum(|x| x),
        // numpy's mean of integers, truncated back to the integer type.
        Kind::Mean => (wsum(|x| x) as f64 / n as f64) as i64,
        Kind::Max => v.fold(range.0, i64::max),
        Kind::Min => v.fold(range.1, i64::min),
        Kind::Prod => v.fold(1i64, i64::wrapping_mul),
        Kind::L1 => wsum(i64::abs),
        Kind::L2 => (wsum(|x| x.wrapping_mul(x)) as f64).sqrt() as i64,
        Kind::LogSum => (wsum(|x| x) as f64).ln() as i64,
        Kind::LogSumExp => reduce_f(kind, v.map(|x| x as f64), n) as i64,
        Kind::SumSquare => wsum(|x| x.wrapping_mul(x)),
    }
}

pub fn reduce(kind: Kind, x: &Tensor, plan: &Plan) -> Result<Tensor, OpError> {
    // With no axes (noop_with_empty_axes) every element is its own set: the sums pass it
    // through, while the composite reductions still apply their steps (ReduceSumSquare
    // squares, ReduceLogSum takes the log), as ONNX specifies.
    let outer = offsets(&plan.shape, &plan.kept());
    let inner = offsets(&plan.shape, &plan.axes);
    let n = inner.len();
    let w = match widen(x)? {
        Wide::F(v) => Wide::F(
            outer
                .iter()
                .map(|&o| reduce_f(kind, inner.iter().map(|&i| v[o + i]), n))
                .collect(),
        ),
        Wide::I(v) => {
            let range = int_range(x.dtype());
            Wide::I(
                outer
                    .iter()
                    .map(|&o| reduce_i(kind, inner.iter().map(|&i| v[o + i]), n, range))
                    .collect(),
            )
        }
    };
    from_wide(x, plan, w)
}

fn from_wide(x: &Tensor, plan: &Plan, w: Wide) -> Result<Tensor, OpError> {
    match w {
        Wide::F(v) => from_f64(x.dtype(), plan.out_shape.clone(), v),
        w => narrow(x.dtype(), plan.out_shape.clone(), w),
    }
}
