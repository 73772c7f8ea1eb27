//! NormMatMul: an LLM's RMS row norm and a MatMul that reads its output, as one node. The graph
//! pass that makes these (graph/fuse_norm.rs in the node crate) does so only for products of a
//! few rows (a decode step's projections), where gemv.comp normalises A's rows itself: the norm
//! then costs no dispatch and no barrier of its own before each layer's first products. The
//! node is rebuilt from its attributes alone, so a cluster fragment ships it as any other.
//!
//! Inputs: 0 `x` [..., K] (f32 or f16), 1 `skip` (optional, x's shape: SkipSimplified-
//! LayerNormalization's residual, added first), 2 `scale` [K], 3 `B` [K, N]; attribute
//! `epsilon`. Output 0: MatMul(v / sqrt(mean(v^2) + epsilon) * scale, B) with v = x (+ skip),
//! the norm over the last axis, of x's type and shape [..., N]; output 1 (optional): v itself,
//! the residual sum SkipSimplifiedLayerNormalization passes on (one of the norm's products
//! writes it, so that the norm needs no node of its own).
//!
//! The CPU kernel is the two ops' own: the norm in f64 rounded to x's type (as the norm's
//! output tensor would be), then MatMul. The GPU kernel keeps the normalised values in f32.

use super::MatMul;
use super::gemv::{self, Operands, RowNorm};
use crate::llm_norm::cpu::{f64s, normalize};
use crate::numeric::from_f64;
use crate::tensor::{DType, Tensor, numel};
use crate::tuning::Gemv;
use crate::util::{expect_dtype, opt, req, types_of};
use crate::via_f32::ViaF32;
use crate::{GpuKernel, InferInput, KernelTuning, NodeSpec, Op, OpError, ValueType};

/// The op type of a fused node.
pub const OP_TYPE: &str = "NormMatMul";

/// Input positions.
pub const X: usize = 0;
pub const SKIP: usize = 1;
pub const SCALE: usize = 2;
pub const B: usize = 3;

#[derive(Debug)]
pub struct NormMatMul {
    epsilon: f32,
    /// Output 1, v, is wanted.
    sum: bool,
}

impl NormMatMul {
    pub fn build(spec: &NodeSpec<'_>) -> Result<Box<dyn Op>, OpError> {
        if !(1..=2).contains(&spec.num_outputs) || !(3..=4).contains(&spec.num_inputs) {
            return Err(OpError::invalid(format!(
                "{OP_TYPE}: takes x, skip (or none), scale and B and gives the product and \
                 optionally the sum x + skip; this node has {} inputs and {} outputs",
                spec.num_inputs, spec.num_outputs
            )));
        }
        Ok(Box::new(NormMatMul {
            epsilon: spec.attrs.float("epsilon", 1e-5)?,
            sum: spec.num_outputs == 2,
        }))
    }

    /// (rows, K, N) after checking the operands' types against each other.
    fn check(inputs: &[Option<&ValueType>]) -> Result<(usize, usize, usize), OpError> {
        let x = req(inputs, X)?;
        let (scale, b) = (req(inputs, SCALE)?, req(inputs, B)?);
        expect_dtype(x, &[DType::F32, DType::F16], &format!("{OP_TYPE}: x"))?;
        let same = |v: &ValueType| v.dtype == x.dtype;
        let k = *x.shape.last().unwrap_or(&0);
        let skip_fits = opt(inputs, SKIP).is_none_or(|s| same(s) && s.shape == x.shape);
        if x.shape.is_empty()
            || !skip_fits
            || !same(scale)
            || scale.shape != [k]
            || !same(b)
            || b.shape.len() != 2
            || b.shape[0] != k
        {
            return Err(OpError::invalid(format!(
                "{OP_TYPE}: x {x}, skip {:?}, scale {scale} and B {b} do not fit: skip is x's \
                 type and shape, scale [K] and B [K, N] of x's type, K x's last dimension",
                opt(inputs, SKIP).map(ToString::to_string)
            )));
        }
        Ok((numel(&x.shape) / k.max(1), k, b.shape[1]))
    }
}

impl Op for NormMatMul {
    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<ValueType>, OpError> {
        let types = types_of(inputs);
        let (_, _, n) = Self::check(&types)?;
        let x = req(&types, X)?;
        let mut shape = x.shape.clone();
        *shape.last_mut().expect("checked: rank 1 or more") = n;
        let y = ValueType::new(x.dtype, shape);
        Ok(if self.sum {
            vec![y, x.clone()]
        } else {
            vec![y]
        })
    }

    fn run_cpu(
        &self,
        inputs: &[Option<&Tensor>],
        outputs: &[ValueType],
    ) -> Result<Vec<Tensor>, OpError> {
        let types: Vec<Option<ValueType>> = inputs.iter().map(|t| t.map(ValueType::of)).collect();
        let refs: Vec<Option<&ValueType>> = types.iter().map(Option::as_ref).collect();
        let (rows, k, _) = Self::check(&refs)?;
        let x = req(inputs, X)?;
        let mut v = f64s(x)?;
        if let Some(skip) = opt(inputs, SKIP) {
            for (e, s) in v.iter_mut().zip(f64s(skip)?) {
                *e += s;
            }
        }
        let scale = f64s(req(inputs, SCALE)?)?;
        let n = normalize(&v, rows, k, false, self.epsilon as f64, &scale, None);
        let normed = from_f64(x.dtype(), x.shape().to_vec(), n.y)?;
        let product = ViaF32::half(Box::new(MatMul));
        let mut out = product.run_cpu(&[Some(&normed), Some(req(inputs, B)?)], &outputs[..1])?;
        if self.sum {
            out.push(from_f64(x.dtype(), x.shape().to_vec(), v)?);
        }
        Ok(out)
    }

    fn gpu(&self, inputs: &[Option<&ValueType>], _outputs: &[ValueType]) -> Option<GpuKernel> {
        self.kernel(inputs, Gemv::Auto)
    }

    /// The tuning's lane counts apply; `Gemv::Off` does not (gemv::fused_kernel).
    fn gpu_planned(
        &self,
        inputs: &[Option<InferInput<'_>>],
        _outputs: &[ValueType],
        tuning: &KernelTuning,
    ) -> Option<GpuKernel> {
        self.kernel(&types_of(inputs), tuning.gemv)
    }

    fn flops(&self, inputs: &[Option<&ValueType>], _outputs: &[ValueType]) -> u64 {
        Self::check(inputs).map_or(0, |(m, k, n)| (2 * m * k * n + 4 * m * k) as u64)
    }
}

impl NormMatMul {
    /// gemv.comp with its norm prologue, for products it takes (at most four rows, N whole
    /// vectors); `None` for the others.
    fn kernel(&self, inputs: &[Option<&ValueType>], mode: Gemv) -> Option<GpuKernel> {
        let (rows, k, _) = Self::check(inputs).ok()?;
        let (x, b) = (req(inputs, X).ok()?, req(inputs, B).ok()?);
        let operands = Operands {
            a: X,
            b: B,
            norm: Some(RowNorm {
                skip: opt(inputs, SKIP).map(|_| SKIP),
                gamma: SCALE,
                eps: self.epsilon,
                sum: self.sum.then_some(1),
            }),
            swiglu_up: None,
        };
        gemv::fused_kernel((x.dtype, rows, k), b, mode, &operands)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::AttrValue;
    use crate::testkit::gpu::run_kernel_on;
    use crate::testkit::{Rng, assert_close, f64s as values};
    use vkml_testkit::test_gpu;

    const EPS: f32 = 1e-5;

    fn fused() -> Box<dyn Op> {
        crate::testkit::node(OP_TYPE, 1, vec![("epsilon", AttrValue::Float(EPS))], 4, 2).unwrap()
    }

    fn random(rng: &mut Rng, shape: &[usize], dtype: DType, lo: f64, hi: f64) -> Tensor {
        let v: Vec<f64> = (0..numel(shape))
            .map(|_| lo + (hi - lo) * (rng.next_u64() % 10_001) as f64 / 10_000.0)
            .collect();
        from_f64(dtype, shape.to_vec(), v).unwrap()
    }

    /// The norm and the product written out in f64 from the (rounded) inputs.
    fn reference(x: &Tensor, skip: Option<&Tensor>, scale: &Tensor, b: &Tensor) -> Vec<f64> {
        let k = *x.shape().last().unwrap();
        let n = b.shape()[1];
        let (xv, sv, bv) = (values(x), values(scale), values(b));
        let skip = skip.map(values);
        let mut y = Vec::new();
        for (r, row) in xv.chunks(k).enumerate() {
            let v: Vec<f64> = (0..k)
                .map(|j| row[j] + skip.as_ref().map_or(0.0, |s| s[r * k + j]))
                .collect();
            let inv = 1.0 / (v.iter().map(|e| e * e).sum::<f64>() / k as f64 + EPS as f64).sqrt();
            for c in 0..n {
                y.push((0..k).map(|j| v[j] * inv * sv[j] * bv[j * n + c]).sum());
            }
        }
        y
    }

    fn case(
        rng: &mut Rng,
        dtype: DType,
        (m, k, n): (usize, usize, usize),
        skip: bool,
    ) -> (Vec<Tensor>, [Vec<f64>; 2]) {
        let x = random(rng, &[1, m, k], dtype, -2.0, 2.0);
        let s = skip.then(|| random(rng, &[1, m, k], dtype, -1.0, 1.0));
        let scale = random(rng, &[k], dtype, 0.5, 1.5);
        let b = random(rng, &[k, n], dtype, -0.1, 0.1);
        let want = reference(&x, s.as_ref(), &scale, &b);
        let sum: Vec<f64> = match &s {
            Some(s) => values(&x)
                .iter()
                .zip(values(s))
                .map(|(a, b)| a + b)
                .collect(),
            None => values(&x),
        };
        let skip = s.unwrap_or_else(|| Tensor::from_vec(vec![0], Vec::<f32>::new()));
        (vec![x, skip, scale, b], [want, sum])
    }

    fn present(t: &[Tensor], skip: bool) -> Vec<Option<&Tensor>> {
        vec![Some(&t[0]), skip.then_some(&t[1]), Some(&t[2]), Some(&t[3])]
    }

    #[test]
    fn the_cpu_kernel_is_the_norm_then_the_product() {
        let mut rng = Rng::new(5);
        for dtype in [DType::F32, DType::F16] {
            for skip in [false, true] {
                let (t, want) = case(&mut rng, dtype, (3, 40, 24), skip);
                let ins = present(&t, skip);
                let types: Vec<Option<ValueType>> =
                    ins.iter().map(|t| t.map(ValueType::of)).collect();
                let infer: Vec<Option<InferInput<'_>>> = types
                    .iter()
                    .map(|t| t.as_ref().map(|ty| InferInput { ty, value: None }))
                    .collect();
                let out = fused().infer(&infer).unwrap();
                let (y, v) = (vec![1, 3, 24], vec![1, 3, 40]);
                assert_eq!(out, [ValueType::new(dtype, y), ValueType::new(dtype, v)]);
                let got = fused().run_cpu(&ins, &out).unwrap();
                // f16: the normalised row is rounded to 11 bits before the product.
                let tol = if dtype == DType::F16 { 5e-3 } else { 1e-5 };
                assert_close(&values(&got[0]), &want[0], tol);
                assert_close(&values(&got[1]), &want[1], tol);
            }
        }
    }

    #[test]
    fn the_gpu_kernel_normalises_a_s_rows_itself() {
        let Some(gpu) = test_gpu() else {
            eprintln!("no GPU: the NormMatMul kernel is not run");
            return;
        };
        let mut rng = Rng::new(9);
        // K past one round of a workgroup's invocations; one to four rows; both widths.
        let shapes = [(1, 48, 16), (2, 1_500, 40), (4, 300, 8), (1, 2_100, 64)];
        for dtype in [DType::F32, DType::F16] {
            for (m, k, n) in shapes {
                for skip in [false, true] {
                    let (t, want) = case(&mut rng, dtype, (m, k, n), skip);
                    let ins = present(&t, skip);
                    let types: Vec<Option<ValueType>> =
                        ins.iter().map(|t| t.map(ValueType::of)).collect();
                    let refs: Vec<Option<&ValueType>> = types.iter().map(Option::as_ref).collect();
                    let out = [
                        ValueType::new(dtype, vec![1, m, n]),
                        ValueType::new(dtype, vec![1, m, k]),
                    ];
                    for mode in [Gemv::Auto, Gemv::Lanes(2), Gemv::Wide(4), Gemv::Split(8, 4)] {
                        let fused = NormMatMul {
                            epsilon: EPS,
                            sum: true,
                        };
                        let kernel = fused
                            .kernel(&refs, mode)
                            .unwrap_or_else(|| panic!("{dtype} {m}x{k}x{n}: no kernel"));
                        let got = run_kernel_on(gpu, &kernel, &ins, &out).unwrap();
                        let tol = if dtype == DType::F16 { 3e-3 } else { 1e-4 };
                        assert_close(&values(&got[0]), &want[0], tol);
                        assert_close(&values(&got[1]), &want[1], tol);
                    }
                }
            }
        }
    }

    #[test]
    fn misfit_operands_are_refused_and_more_rows_have_no_gpu_kernel() {
        let t = |d, s: &[usize]| ValueType::new(d, s.to_vec());
        let f16 = DType::F16;
        let (x, scale, b) = (t(f16, &[1, 1, 64]), t(f16, &[64]), t(f16, &[64, 16]));
        let ok = [Some(&x), None, Some(&scale), Some(&b)];
        assert_eq!(NormMatMul::check(&ok).unwrap(), (1, 64, 16));
        let wrong_scale = t(f16, &[32]);
        let wrong_skip = t(f16, &[1, 64]);
        let f32_b = t(DType::F32, &[64, 16]);
        for bad in [
            [Some(&x), None, Some(&wrong_scale), Some(&b)],
            [Some(&x), Some(&wrong_skip), Some(&scale), Some(&b)],
            [Some(&x), None, Some(&scale), Some(&f32_b)],
        ] {
            let err = NormMatMul::check(&bad).unwrap_err().to_string();
            assert!(err.contains("do not fit"), "{err}");
        }
        let fused = NormMatMul {
            epsilon: EPS,
            sum: false,
        };
        let out = [t(f16, &[1, 1, 16])];
        assert!(fused.gpu(&ok, &out).is_some());
        let five = t(f16, &[5, 64]);
        let rows5 = [Some(&five), None, Some(&scale), Some(&b)];
        assert!(fused.gpu(&rows5, &[t(f16, &[5, 16])]).is_none());
    }
}
