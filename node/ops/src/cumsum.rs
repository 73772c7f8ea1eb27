//! CumSum (opsets 11, 14) and CumProd (opset 26): running sums or products along the axis
//! given as input 1, optionally `exclusive` (each output leaves its own element out) and
//! `reverse` (from the end). Integers wrap; f16 accumulates in float on the GPU and in f64
//! on the CPU.

use super::numeric::{Wide, narrow, widen};
use super::util::{axis as norm_axis, const_input, groups_1d, req};
use super::{BufRef, Dispatch, GpuKernel, InferInput, NodeSpec, Op, OpError, Registry, ValueType};
use crate::tensor::{DType, Tensor};
use vkml_shaders::cumsum;

pub fn register(r: &mut Registry) {
    r.add("CumSum", |s| build(s, false));
    r.add("CumProd", |s| build(s, true));
}

fn build(spec: &NodeSpec<'_>, product: bool) -> Result<Box<dyn Op>, OpError> {
    Ok(Box::new(CumSum {
        exclusive: spec.attrs.int("exclusive", 0)? != 0,
        reverse: spec.attrs.int("reverse", 0)? != 0,
        product,
    }))
}

/// Lines at least this long get a workgroup each.
const ROW_MIN: usize = 512;

#[derive(Debug)]
struct CumSum {
    exclusive: bool,
    reverse: bool,
    /// CumProd.
    product: bool,
}

fn axis_of(op: &str, x: &[usize], a: &Tensor) -> Result<usize, OpError> {
    let v = a
        .to_i64_vec()
        .map_err(|e| OpError::invalid(e.to_string()))?;
    if x.is_empty() {
        return Err(OpError::invalid(format!(
            "{op}: the input is a scalar, it has no axis"
        )));
    }
    match v[..] {
        [a] => norm_axis(a, x.len()).map_err(|e| OpError::invalid(format!("{op}: {e}"))),
        _ => Err(OpError::invalid(format!(
            "{op}: axis must hold one value, found {}",
            v.len()
        ))),
    }
}

/// (outer, len, inner) around axis `a`.
fn split(shape: &[usize], a: usize) -> (usize, usize, usize) {
    (
        shape[..a].iter().product(),
        shape[a],
        shape[a + 1..].iter().product(),
    )
}

fn scan<T: Copy>(
    v: &mut [T],
    (outer, len, inner): (usize, usize, usize),
    excl: bool,
    rev: bool,
    zero: T,
    add: impl Fn(T, T) -> T,
) {
    for o in 0..outer {
        for i in 0..inner {
            let mut acc = zero;
            for step in 0..len {
                let j = if rev { len - 1 - step } else { step };
                let k = (o * len + j) * inner + i;
                let x = v[k];
                if excl {
                    v[k] = acc;
                    acc = add(acc, x);
                } else {
                    acc = add(acc, x);
                    v[k] = acc;
                }
            }
        }
    }
}

impl CumSum {
    fn name(&self) -> &'static str {
        if self.product { "CumProd" } else { "CumSum" }
    }
}

impl Op for CumSum {
    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<ValueType>, OpError> {
        let x = req(inputs, 0)?.ty;
        if matches!(x.dtype, DType::Bool) {
            return Err(OpError::unsupported(format!("{}: bool input", self.name())));
        }
        axis_of(self.name(), &x.shape, const_input(inputs, 1)?)?;
        Ok(vec![x.clone()])
    }

    fn run_cpu(
        &self,
        inputs: &[Option<&Tensor>],
        _outputs: &[ValueType],
    ) -> Result<Vec<Tensor>, OpError> {
        let x = req(inputs, 0)?;
        let a = axis_of(self.name(), x.shape(), req(inputs, 1)?)?;
        let g = split(x.shape(), a);
        let w = match widen(x)? {
            Wide::F(mut v) if self.product => {
                scan(&mut v, g, self.exclusive, self.reverse, 1.0, |a, b| a * b);
                Wide::F(v)
            }
            Wide::F(mut v) => {
                scan(&mut v, g, self.exclusive, self.reverse, 0.0, |a, b| a + b);
                Wide::F(v)
            }
            Wide::I(mut v) => {
                let (unit, op): (i64, fn(i64, i64) -> i64) = if self.product {
                    (1, i64::wrapping_mul)
                } else {
                    (0, i64::wrapping_add)
                };
                scan(&mut v, g, self.exclusive, self.reverse, unit, op);
                Wide::I(v)
            }
        };
        Ok(vec![narrow(x.dtype(), x.shape().to_vec(), w)?])
    }

    // The scan axis is an input's value, so only `gpu_planned` can build a kernel.
    fn gpu_planned(
        &self,
        inputs: &[Option<InferInput<'_>>],
        _outputs: &[ValueType],
        _tuning: &crate::KernelTuning,
    ) -> Option<GpuKernel> {
        let x = req(inputs, 0).ok()?.ty;
        u32::try_from(x.numel()).ok()?;
        let a = axis_of(
            self.name(),
            &x.shape,
            inputs.get(1).copied().flatten()?.value?,
        )
        .ok()?;
        let (outer, len, inner) = split(&x.shape, a);
        let lines = outer * inner;
        // Long lines: a workgroup per line, scanning in shared memory.
        let row = len >= ROW_MIN;
        let variant = match (x.dtype, row) {
            (DType::F32, false) => cumsum::Variant::F32,
            (DType::F16, false) => cumsum::Variant::F16,
            (DType::F64, false) => cumsum::Variant::F64,
            (DType::I32, false) => cumsum::Variant::I32,
            (DType::I64, false) => cumsum::Variant::I64,
            (DType::F32, true) => cumsum::Variant::F32Row,
            (DType::F16, true) => cumsum::Variant::F16Row,
            (DType::F64, true) => cumsum::Variant::F64Row,
            (DType::I32, true) => cumsum::Variant::I32Row,
            (DType::I64, true) => cumsum::Variant::I64Row,
            _ => return None,
        };
        let groups = if row {
            let gy = lines.div_ceil(65_535).max(1);
            [lines.div_ceil(gy) as u32, u32::try_from(gy).ok()?, 1]
        } else {
            groups_1d(lines, 256)
        };
        Some(GpuKernel {
            scratch: vec![],
            dispatches: vec![Dispatch::new(
                variant,
                cumsum::Buffers {
                    x: BufRef::Input(0),
                    y: BufRef::Output(0),
                },
                cumsum::Params {
                    lines: lines as u32,
                    len: len as u32,
                    inner: inner as u32,
                    exclusive: self.exclusive as u32,
                    reverse: self.reverse as u32,
                    product: self.product as u32,
                },
                groups,
            )],
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::AttrValue;
    use crate::testkit::{Rng, build, gpu_matches_cpu, run};

    fn cumsum(x: &Tensor, axis: i64, excl: i64, rev: i64) -> Tensor {
        let op = build(
            "CumSum",
            14,
            &[
                ("exclusive", AttrValue::Int(excl)),
                ("reverse", AttrValue::Int(rev)),
            ],
        )
        .unwrap();
        run(&*op, &[Some(x), Some(&Tensor::scalar(axis as i32))])
            .unwrap()
            .remove(0)
    }

    #[test]
    fn by_hand() {
        let x = Tensor::from_vec(vec![5], vec![1f64, 2., 3., 4., 5.]);
        assert_eq!(
            cumsum(&x, 0, 0, 0).to_f64_vec().unwrap(),
            vec![1., 3., 6., 10., 15.]
        );
        assert_eq!(
            cumsum(&x, 0, 1, 0).to_f64_vec().unwrap(),
            vec![0., 1., 3., 6., 10.]
        );
        assert_eq!(
            cumsum(&x, 0, 0, 1).to_f64_vec().unwrap(),
            vec![15., 14., 12., 9., 5.]
        );
        assert_eq!(
            cumsum(&x, 0, 1, 1).to_f64_vec().unwrap(),
            vec![14., 12., 9., 5., 0.]
        );
        let m = Tensor::from_vec(vec![2, 3], vec![1i32, 2, 3, 4, 5, 6]);
        assert_eq!(
            cumsum(&m, 0, 0, 0).to_i64_vec().unwrap(),
            vec![1, 2, 3, 5, 7, 9]
        );
        assert_eq!(
            cumsum(&m, -1, 0, 0).to_i64_vec().unwrap(),
            vec![1, 3, 6, 4, 9, 15]
        );
        let w = Tensor::from_vec(vec![2], vec![i32::MAX, 1]);
        assert_eq!(
            cumsum(&w, 0, 0, 0).to_i64_vec().unwrap(),
            vec![i32::MAX as i64, i32::MIN as i64]
        );
        let op = build("CumSum", 14, &[]).unwrap();
        assert!(run(&*op, &[Some(&x), Some(&Tensor::scalar(1i64))]).is_err());
        let s = Tensor::scalar(1f32);
        assert!(run(&*op, &[Some(&s), Some(&Tensor::scalar(0i64))]).is_err());
    }

    #[test]
    fn gpu_matches() {
        let mut rng = Rng::new(3);
        // Long lines (the shared-memory scan), an infinity among them.
        for (excl, rev) in [(0, 0), (1, 0), (0, 1), (1, 1)] {
            let op = build(
                "CumSum",
                14,
                &[
                    ("exclusive", AttrValue::Int(excl)),
                    ("reverse", AttrValue::Int(rev)),
                ],
            )
            .unwrap();
            let mut v: Vec<f32> = rng
                .f32s(2 * 1300)
                .iter()
                .map(|f| (f * 8.0).round())
                .collect();
            v[700] = f32::INFINITY;
            let a = Tensor::scalar(1i64);
            gpu_matches_cpu(
                &*op,
                &[Some(&Tensor::from_vec(vec![2, 1300], v.clone())), Some(&a)],
                1e-5,
            );
            let i = Tensor::from_vec(
                vec![2, 1300],
                v.iter()
                    .map(|&f| if f.is_finite() { f as i64 } else { 1 << 40 })
                    .collect(),
            );
            gpu_matches_cpu(&*op, &[Some(&i), Some(&a)], 0.0);
            let t = Tensor::from_vec(
                vec![1300, 2],
                v.iter()
                    .map(|&f| if f.is_finite() { f as i32 } else { i32::MAX })
                    .collect(),
            );
            gpu_matches_cpu(&*op, &[Some(&t), Some(&Tensor::scalar(0i64))], 0.0);
            // f64, long lines and short ones: sums of small integers are exact.
            let d: Vec<f64> = v.iter().map(|&f| f64::from(f)).collect();
            gpu_matches_cpu(
                &*op,
                &[Some(&Tensor::from_vec(vec![2, 1300], d.clone())), Some(&a)],
                0.0,
            );
            gpu_matches_cpu(
                &*op,
                &[
                    Some(&Tensor::from_vec(vec![1300, 2], d)),
                    Some(&Tensor::scalar(0i64)),
                ],
                0.0,
            );
        }
        for (axis, excl, rev) in [(0, 0, 0), (1, 1, 0), (-1, 0, 1), (2, 1, 1)] {
            let op = build(
                "CumSum",
                14,
                &[
                    ("exclusive", AttrValue::Int(excl)),
                    ("reverse", AttrValue::Int(rev)),
                ],
            )
            .unwrap();
            let x = rng.tensor_f32(&[3, 40, 5]);
            let a = Tensor::scalar(axis as i64);
            gpu_matches_cpu(&*op, &[Some(&x), Some(&a)], 1e-4);
            let v: Vec<i32> = rng.f32s(600).iter().map(|f| (f * 1000.0) as i32).collect();
            let i = Tensor::from_vec(vec![3, 40, 5], v.clone());
            gpu_matches_cpu(&*op, &[Some(&i), Some(&a)], 0.0);
            let l = Tensor::from_vec(vec![3, 40, 5], v.iter().map(|&x| x as i64).collect());
            gpu_matches_cpu(&*op, &[Some(&l), Some(&a)], 0.0);
            let h = Tensor::from_vec(
                vec![3, 40, 5],
                rng.f32s(600)
                    .iter()
                    .map(|&f| half::f16::from_f32(f))
                    .collect(),
            );
            gpu_matches_cpu(&*op, &[Some(&h), Some(&a)], 1e-2);
        }
    }

    #[test]
    fn products_by_hand_and_on_the_gpu() {
        let op = |excl: i64, rev: i64| {
            build(
                "CumProd",
                26,
                &[
                    ("exclusive", AttrValue::Int(excl)),
                    ("reverse", AttrValue::Int(rev)),
                ],
            )
            .unwrap()
        };
        let x = Tensor::from_vec(vec![4], vec![1f32, 2., 3., 4.]);
        let a = Tensor::scalar(0i64);
        let got = |excl, rev| {
            run(&*op(excl, rev), &[Some(&x), Some(&a)]).unwrap()[0]
                .to_f64_vec()
                .unwrap()
        };
        assert_eq!(got(0, 0), [1., 2., 6., 24.]);
        assert_eq!(got(1, 0), [1., 1., 2., 6.]);
        assert_eq!(got(0, 1), [24., 24., 12., 4.]);
        assert_eq!(got(1, 1), [24., 12., 4., 1.]);
        // Long lines (the shared-memory scan) of factors whose products are exact: +-1, 2
        // and 0.5 in floats; integers wrap the same way in any order.
        let mut rng = Rng::new(5);
        let f: Vec<f32> = rng
            .f32s(2 * 1300)
            .iter()
            .map(|r| match (r * 8.0) as i32 {
                0 => 2.0,
                1 => 0.5,
                k if k < 0 => -1.0,
                _ => 1.0,
            })
            .collect();
        let i: Vec<i64> = f
            .iter()
            .map(|&v| if v == 0.5 { 3 } else { v as i64 })
            .collect();
        let one = Tensor::scalar(1i64);
        for (excl, rev) in [(0, 0), (1, 1)] {
            let op = op(excl, rev);
            gpu_matches_cpu(
                &*op,
                &[
                    Some(&Tensor::from_vec(vec![2, 1300], f.clone())),
                    Some(&one),
                ],
                0.0,
            );
            gpu_matches_cpu(
                &*op,
                &[
                    Some(&Tensor::from_vec(vec![2, 1300], i.clone())),
                    Some(&one),
                ],
                0.0,
            );
            gpu_matches_cpu(
                &*op,
                &[Some(&Tensor::from_vec(vec![26, 100], f.clone())), Some(&a)],
                0.0,
            );
        }
    }
}
