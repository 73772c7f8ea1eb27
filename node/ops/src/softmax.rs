//! Softmax, LogSoftmax and Hardmax. Before opset 13 the input is seen as a 2-D matrix split at `axis` (default 1) and
//! each of its rows is normalised; from opset 13 on, softmax runs along the single axis `axis`
//! (default -1). Both reduce to rows of `len` elements `inner` apart, `outer` blocks of them.

use rayon::prelude::*;

use super::elementwise::Real;
use super::util::{expect_dtype, req};
use super::{BufRef, Dispatch, GpuKernel, InferInput, NodeSpec, Op, OpError, Registry, ValueType};
use crate::tensor::{DType, Tensor};
use vkml_shaders::softmax;

pub fn register(r: &mut Registry) {
    r.add("Softmax", |s| Softmax::build(s, Kind::Softmax));
    r.add("LogSoftmax", |s| Softmax::build(s, Kind::LogSoftmax));
    r.add("Hardmax", |s| Softmax::build(s, Kind::Hardmax));
}

/// Which normalisation: the kinds are softmax.comp's `mode` codes, from shaders/opcodes.toml.
use vkml_shaders::op::Softmax as Kind;

#[derive(Debug)]
struct Softmax {
    kind: Kind,
    axis: i64,
    /// Opset < 13: the 2-D coercion.
    coerce_2d: bool,
}

/// `outer` blocks of `len * inner` elements; a row is `len` elements `inner` apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Rows {
    outer: usize,
    len: usize,
    inner: usize,
}

const PARALLEL_MIN: usize = 64 * 1024;

impl Softmax {
    fn build(spec: &NodeSpec<'_>, kind: Kind) -> Result<Box<dyn Op>, OpError> {
        let coerce_2d = spec.opset < 13;
        let axis = spec.attrs.int("axis", if coerce_2d { 1 } else { -1 })?;
        Ok(Box::new(Softmax {
            kind,
            axis,
            coerce_2d,
        }))
    }

    fn rows(&self, shape: &[usize]) -> Result<Rows, OpError> {
        let rank = shape.len() as i64;
        let prod = |s: &[usize]| s.iter().product::<usize>();
        if self.coerce_2d {
            // The split point may be the rank itself ([N, 1] rows of one element).
            if self.axis < -rank || self.axis > rank {
                return Err(OpError::invalid(format!(
                    "Softmax: axis {} is out of range for shape {shape:?}",
                    self.axis
                )));
            }
            let a = if self.axis < 0 {
                self.axis + rank
            } else {
                self.axis
            } as usize;
            Ok(Rows {
                outer: prod(&shape[..a]),
                len: prod(&shape[a..]),
                inner: 1,
            })
        } else {
            if self.axis < -rank || self.axis >= rank {
                return Err(OpError::invalid(format!(
                    "Softmax: axis {} is out of range for shape {shape:?}",
                    self.axis
                )));
            }
            let a = if self.axis < 0 {
                self.axis + rank
            } else {
                self.axis
            } as usize;
            Ok(Rows {
                outer: prod(&shape[..a]),
                len: shape[a],
                inner: prod(&shape[a + 1..]),
            })
        }
    }
}

/// Softmax of one block: `inner` rows of `len` elements, `inner` apart.
/// The maximum is subtracted first so exp never overflows; the sum is kept in f64.
fn block<T: Real>(kind: Kind, x: &[T], y: &mut [T], len: usize, inner: usize) {
    if kind == Kind::Hardmax {
        return hard_block(x, y, len, inner);
    }
    for i in 0..inner {
        let idx = |j: usize| j * inner + i;
        let mut max = x[idx(0)];
        for j in 1..len {
            let v = x[idx(j)];
            // NaN propagates: a NaN maximum makes every output of the row NaN.
            if v.is_nan() {
                max = v;
                break;
            }
            if v > max {
                max = v;
            }
        }
        let mut sum = 0f64;
        for j in 0..len {
            let e = x[idx(j)].sub(max).exp();
            y[idx(j)] = e;
            sum += e.to_f64();
        }
        if kind == Kind::LogSoftmax {
            let log_sum = sum.ln();
            for j in 0..len {
                y[idx(j)] = T::from_f64(x[idx(j)].sub(max).to_f64() - log_sum);
            }
            continue;
        }
        let inv = 1.0 / sum;
        for j in 0..len {
            y[idx(j)] = T::from_f64(y[idx(j)].to_f64() * inv);
        }
    }
}

fn hard_block<T: Real>(x: &[T], y: &mut [T], len: usize, inner: usize) {
    for i in 0..inner {
        let idx = |j: usize| j * inner + i;
        // numpy's argmax: the first maximum, a NaN counting as the maximum.
        let mut best = 0;
        for j in 1..len {
            let (v, b) = (x[idx(j)], x[idx(best)]);
            if !b.is_nan() && (v.is_nan() || v > b) {
                best = j;
            }
        }
        for j in 0..len {
            y[idx(j)] = if j == best { T::ONE } else { T::default() };
        }
    }
}

fn run_typed<T: Real>(kind: Kind, t: &Tensor, r: Rows) -> Result<Tensor, OpError> {
    let x = t.view::<T>().map_err(|e| OpError::invalid(e.to_string()))?;
    let mut y = vec![T::default(); x.len()];
    let bl = r.len * r.inner;
    if bl > 0 {
        if x.len() >= PARALLEL_MIN {
            y.par_chunks_mut(bl)
                .zip(x.par_chunks(bl))
                .for_each(|(yb, xb)| block(kind, xb, yb, r.len, r.inner));
        } else {
            y.chunks_mut(bl)
                .zip(x.chunks(bl))
                .for_each(|(yb, xb)| block(kind, xb, yb, r.len, r.inner));
        }
    }
    Ok(Tensor::from_vec(t.shape().to_vec(), y))
}

impl Op for Softmax {
    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<ValueType>, OpError> {
        let x = req(inputs, 0)?.ty;
        expect_dtype(x, &[DType::F32, DType::F64, DType::F16], "Softmax: input")?;
        self.rows(&x.shape)?;
        Ok(vec![x.clone()])
    }

    fn run_cpu(
        &self,
        inputs: &[Option<&Tensor>],
        _outputs: &[ValueType],
    ) -> Result<Vec<Tensor>, OpError> {
        let x = req(inputs, 0)?;
        let r = self.rows(x.shape())?;
        let y = match x.dtype() {
            DType::F32 => run_typed::<f32>(self.kind, x, r),
            DType::F64 => run_typed::<f64>(self.kind, x, r),
            // f16 computes in f32 and rounds once at the end.
            DType::F16 => {
                let v: Vec<f32> = x
                    .view::<half::f16>()
                    .map_err(|e| OpError::invalid(e.to_string()))?
                    .iter()
                    .map(|h| h.to_f32())
                    .collect();
                let y = run_typed::<f32>(self.kind, &Tensor::from_vec(x.shape().to_vec(), v), r)?;
                let y: Vec<half::f16> = y
                    .view::<f32>()
                    .map_err(|e| OpError::invalid(e.to_string()))?
                    .iter()
                    .map(|&f| half::f16::from_f32(f))
                    .collect();
                Ok(Tensor::from_vec(x.shape().to_vec(), y))
            }
            other => Err(OpError::unsupported(format!(
                "Softmax: input of type {other}"
            ))),
        }?;
        Ok(vec![y])
    }

    fn gpu(&self, inputs: &[Option<&ValueType>], _outputs: &[ValueType]) -> Option<GpuKernel> {
        let x = req(inputs, 0).ok()?;
        let variant = by_dtype!(x.dtype, softmax::Variant, [F32, F16])?;
        u32::try_from(x.numel()).ok()?;
        let r = self.rows(&x.shape).ok()?;
        let rows = r.outer * r.inner;
        if rows == 0 || r.len == 0 {
            return Some(GpuKernel {
                scratch: vec![],
                dispatches: vec![],
            });
        }
        // One workgroup per row, folded into y past the 65,535 limit on x.
        let gy = rows.div_ceil(65_535);
        let gx = rows.div_ceil(gy);
        Some(GpuKernel {
            scratch: vec![],
            dispatches: vec![Dispatch::new(
                variant,
                softmax::Buffers {
                    x: BufRef::Input(0),
                    y: BufRef::Output(0),
                },
                softmax::Params {
                    len: r.len as u32,
                    inner: r.inner as u32,
                    rows: rows as u32,
                    mode: self.kind.code(),
                },
                [gx as u32, u32::try_from(gy).ok()?, 1],
            )],
        })
    }

    fn flops(&self, _inputs: &[Option<&ValueType>], outputs: &[ValueType]) -> u64 {
        // max, subtract, exp, sum, scale.
        5 * outputs.iter().map(|o| o.numel() as u64).sum::<u64>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::AttrValue;
    use crate::testkit::{Rng, assert_close, build, f64s, gpu_matches_cpu, run1};

    /// Softmax over the flat groups `g(i)` of the elements, in f64, the textbook way.
    fn naive(x: &[f64], group: impl Fn(usize) -> usize) -> Vec<f64> {
        let mut sums = std::collections::BTreeMap::new();
        let mut maxs = std::collections::BTreeMap::new();
        for (i, &v) in x.iter().enumerate() {
            let m = maxs.entry(group(i)).or_insert(f64::NEG_INFINITY);
            *m = f64::max(*m, v);
        }
        for (i, &v) in x.iter().enumerate() {
            *sums.entry(group(i)).or_insert(0.0) += (v - maxs[&group(i)]).exp();
        }
        x.iter()
            .enumerate()
            .map(|(i, &v)| (v - maxs[&group(i)]).exp() / sums[&group(i)])
            .collect()
    }

    fn softmax(opset: i64, axis: Option<i64>, x: &Tensor) -> Result<Tensor, OpError> {
        let attrs: Vec<(&str, AttrValue)> = axis
            .map(|a| ("axis", AttrValue::Int(a)))
            .into_iter()
            .collect();
        run1(&*build("Softmax", opset, &attrs)?, &[x])
    }

    #[test]
    fn by_hand() {
        let x = Tensor::from_vec(vec![1, 3], vec![1f32, 2., 3.]);
        let y = softmax(13, None, &x).unwrap();
        let s = 1f64.exp() + 2f64.exp() + 3f64.exp();
        let want = [1f64.exp() / s, 2f64.exp() / s, 3f64.exp() / s];
        assert_close(&f64s(&y), &want, 1e-6);
        // Large inputs: without subtracting the max, exp would overflow to inf and give NaN.
        let x = Tensor::from_vec(vec![2], vec![1000f32, 1001.]);
        let y = softmax(13, None, &x).unwrap();
        let e = (-1f64).exp();
        assert_close(&f64s(&y), &[e / (1.0 + e), 1.0 / (1.0 + e)], 1e-6);
    }

    #[test]
    fn default_axis_changed_meaning_at_opset_13() {
        let mut rng = Rng::new(1);
        let x = rng.tensor_f32(&[2, 3, 4]);
        let xs: Vec<f64> = f64s(&x).iter().map(|v| v * 5.0).collect();
        let x = Tensor::from_vec(vec![2, 3, 4], xs.iter().map(|&v| v as f32).collect());
        // Opset 11: [2, 12] rows.
        let y = softmax(11, None, &x).unwrap();
        assert_close(&f64s(&y), &naive(&xs, |i| i / 12), 1e-6);
        // Opset 13: along the last axis.
        let y = softmax(13, None, &x).unwrap();
        assert_close(&f64s(&y), &naive(&xs, |i| i / 4), 1e-6);
        // Opset 13, axis 1: along the middle axis, elements 4 apart.
        let y = softmax(13, Some(1), &x).unwrap();
        assert_close(&f64s(&y), &naive(&xs, |i| (i / 12) * 4 + i % 4), 1e-6);
        // Opset 13, axis 0 and -3: the same.
        let want = naive(&xs, |i| i % 12);
        assert_close(&f64s(&softmax(13, Some(0), &x).unwrap()), &want, 1e-6);
        assert_close(&f64s(&softmax(13, Some(-3), &x).unwrap()), &want, 1e-6);
        // Opset 1: axis 0 is the whole tensor; axis -1 the last axis; axis 3 rows of one.
        let y = softmax(1, Some(0), &x).unwrap();
        assert_close(&f64s(&y), &naive(&xs, |_| 0), 1e-6);
        let y = softmax(1, Some(-1), &x).unwrap();
        assert_close(&f64s(&y), &naive(&xs, |i| i / 4), 1e-6);
        let y = softmax(1, Some(3), &x).unwrap();
        assert!(f64s(&y).iter().all(|&v| v == 1.0));
    }

    #[test]
    fn log_softmax_and_hardmax_by_hand() {
        let x = Tensor::from_vec(vec![2, 3], vec![1f32, 2., 3., 5., 5., -1.]);
        let y = run1(&*build("LogSoftmax", 13, &[]).unwrap(), &[&x]).unwrap();
        let l = (1f64.exp() + 2f64.exp() + 3f64.exp()).ln();
        let m = (2.0 * 5f64.exp() + (-1f64).exp()).ln();
        let want = [1. - l, 2. - l, 3. - l, 5. - m, 5. - m, -1. - m];
        assert_close(&f64s(&y), &want, 1e-6);
        // Opset 11 with axis 0: one row of six.
        let y = run1(
            &*build("LogSoftmax", 11, &[("axis", AttrValue::Int(0))]).unwrap(),
            &[&x],
        )
        .unwrap();
        let all = (1f64.exp() + 2f64.exp() + 3f64.exp() + 2.0 * 5f64.exp() + (-1f64).exp()).ln();
        let want: Vec<f64> = [1., 2., 3., 5., 5., -1.].iter().map(|v| v - all).collect();
        assert_close(&f64s(&y), &want, 1e-6);
        // Hardmax: the first maximum wins ties.
        let y = run1(&*build("Hardmax", 13, &[]).unwrap(), &[&x]).unwrap();
        assert_eq!(f64s(&y), vec![0., 0., 1., 1., 0., 0.]);
        let n = Tensor::from_vec(vec![4], vec![1f32, f32::NAN, 9., f32::NAN]);
        let y = run1(&*build("Hardmax", 13, &[]).unwrap(), &[&n]).unwrap();
        assert_eq!(f64s(&y), vec![0., 1., 0., 0.]);
        // Down the columns [1, 5], [2, 5], [3, -1].
        let y = run1(
            &*build("Hardmax", 13, &[("axis", AttrValue::Int(0))]).unwrap(),
            &[&x],
        )
        .unwrap();
        assert_eq!(f64s(&y), vec![0., 0., 1., 1., 1., 0.]);
        let y = run1(
            &*build("Hardmax", 1, &[("axis", AttrValue::Int(0))]).unwrap(),
            &[&x],
        )
        .unwrap();
        assert_eq!(f64s(&y), vec![0., 0., 0., 1., 0., 0.]);
        // f16 computes like f32 and rounds at the end.
        let h = Tensor::from_vec(
            vec![3],
            vec![
                half::f16::from_f32(0.),
                half::f16::from_f32(0.),
                half::f16::from_f32(0.),
            ],
        );
        let y = softmax(13, None, &h).unwrap();
        assert_eq!(y.dtype(), DType::F16);
        assert_close(&f64s(&y), &[0.333251953125; 3], 0.0);
    }

    #[test]
    fn gpu_log_softmax_hardmax_f16_match_cpu() {
        let mut rng = Rng::new(43);
        for op in ["LogSoftmax", "Hardmax", "Softmax"] {
            for (opset, axis, shape) in [
                (13, 1i64, vec![2usize, 3, 4]),
                (11, 1, vec![2, 3, 4]),
                (13, -1, vec![5, 700]),
            ] {
                let n = shape.iter().product();
                let v: Vec<f32> = rng.f32s(n).iter().map(|x| (x * 8.0).round()).collect();
                let o = build(op, opset, &[("axis", AttrValue::Int(axis))]).unwrap();
                let x = Tensor::from_vec(shape.clone(), v.clone());
                gpu_matches_cpu(&*o, &[Some(&x)], 1e-4);
                let h = Tensor::from_vec(
                    shape.clone(),
                    v.iter().map(|&f| half::f16::from_f32(f)).collect(),
                );
                gpu_matches_cpu(&*o, &[Some(&h)], 1e-2);
            }
            // A NaN in the second of two rows of 300.
            let mut v: Vec<f32> = rng.f32s(600).iter().map(|x| (x * 8.0).round()).collect();
            v[400] = f32::NAN;
            v[450] = f32::NAN;
            let x = Tensor::from_vec(vec![2, 300], v);
            gpu_matches_cpu(&*build(op, 13, &[]).unwrap(), &[Some(&x)], 1e-4);
        }
    }

    #[test]
    fn big_f64_and_parallel() {
        let mut rng = Rng::new(2);
        let xs: Vec<f64> = rng.f64s(300 * 301).iter().map(|v| v * 20.0).collect();
        let x = Tensor::from_vec(vec![300, 301], xs.clone());
        let y = softmax(13, Some(0), &x).unwrap();
        assert_close(&f64s(&y), &naive(&xs, |i| i % 301), 1e-12);
        let x32 = Tensor::from_vec(vec![300, 301], xs.iter().map(|&v| v as f32).collect());
        let xs32 = f64s(&x32);
        let y = softmax(13, None, &x32).unwrap();
        assert_close(&f64s(&y), &naive(&xs32, |i| i / 301), 1e-6);
    }

    #[test]
    fn nan_and_errors() {
        let x = Tensor::from_vec(vec![3], vec![1f32, f32::NAN, 2.]);
        assert!(
            f64s(&softmax(13, None, &x).unwrap())
                .iter()
                .all(|v| v.is_nan())
        );
        let x = Tensor::zeros(DType::F32, vec![2, 3]);
        let e = softmax(13, Some(2), &x).unwrap_err().to_string();
        assert!(e.contains("axis 2") && e.contains("[2, 3]"), "{e}");
        assert!(softmax(11, Some(3), &x).is_err());
        assert!(softmax(13, None, &Tensor::scalar(1f32)).is_err());
        assert!(softmax(13, None, &Tensor::zeros(DType::I32, vec![3])).is_err());
        let y = softmax(13, None, &Tensor::zeros(DType::F32, vec![0, 3])).unwrap();
        assert_eq!(y.shape(), &[0, 3]);
    }

    #[test]
    fn gpu_rows_and_strides() {
        let op = build("Softmax", 13, &[("axis", AttrValue::Int(1))]).unwrap();
        let x = ValueType::new(DType::F32, vec![2, 3, 4]);
        let k = op.gpu(&[Some(&x)], std::slice::from_ref(&x)).unwrap();
        assert_eq!(k.dispatches[0].params, vec![3, 4, 8, 0]);
        assert_eq!(k.dispatches[0].groups, [8, 1, 1]);
        let op = build("Softmax", 11, &[]).unwrap();
        let x = ValueType::new(DType::F32, vec![70_000, 3]);
        let k = op.gpu(&[Some(&x)], std::slice::from_ref(&x)).unwrap();
        assert_eq!(k.dispatches[0].params, vec![3, 1, 70_000, 0]);
        let g = k.dispatches[0].groups;
        assert!(g[0] <= 65_535 && g[0] * g[1] >= 70_000);
    }

    #[test]
    fn gpu_softmax_matches_cpu() {
        let mut rng = Rng::new(41);
        let cases: &[(i64, Option<i64>, &[usize])] = &[
            (13, None, &[1, 3]),
            (13, None, &[37, 1000]),
            (13, Some(1), &[2, 3, 4]),
            (13, Some(0), &[5, 7]),
            (11, None, &[2, 3, 4]),
            (11, Some(0), &[3, 300]),
            (13, None, &[70_000, 3]),
            (13, None, &[1]),
        ];
        for (opset, axis, shape) in cases {
            // Spread of +-50: exp without the max subtracted would lose everything.
            let v: Vec<f32> = rng
                .f32s(shape.iter().product())
                .iter()
                .map(|x| x * 50.0)
                .collect();
            let x = Tensor::from_vec(shape.to_vec(), v);
            let attrs: Vec<(&str, AttrValue)> = axis
                .map(|a| ("axis", AttrValue::Int(a)))
                .into_iter()
                .collect();
            let op = build("Softmax", *opset, &attrs).unwrap();
            gpu_matches_cpu(&*op, &[Some(&x)], 1e-4);
        }
    }
}
