//! SwiGluMatMul: an LLM MLP's gated activation and the down projection that reads it, as one
//! node: MatMul(silu(gate) * up, B), silu(x) = x * sigmoid(x). The graph pass that makes these
//! (graph/fuse_norm.rs in the node crate, beside the norms) does so only for products of a few
//! rows, where gemv.comp computes the activation as it reads A: the activation then costs no
//! dispatch and no barrier of its own before each layer's down projection.
//!
//! Inputs: 0 `gate` [..., K] (f32 or f16), 1 `up` (gate's type and shape), 2 `B` [K, N] of
//! their type. Output: [..., N]. The CPU kernel is the separate ops' own: the activation in f64
//! rounded to the type (as the activation's output tensor would be), then MatMul; the GPU
//! kernel keeps the activation in f32.

use super::MatMul;
use super::gemv::{self, Operands};
use crate::llm_norm::cpu::f64s;
use crate::numeric::from_f64;
use crate::tensor::{DType, Tensor, numel};
use crate::tuning::Gemv;
use crate::util::{expect_dtype, req, types_of};
use crate::via_f32::ViaF32;
use crate::{GpuKernel, InferInput, KernelTuning, NodeSpec, Op, OpError, ValueType};

/// The op type of a fused node.
pub const OP_TYPE: &str = "SwiGluMatMul";

#[derive(Debug)]
pub struct SwiGluMatMul;

impl SwiGluMatMul {
    pub fn build(spec: &NodeSpec<'_>) -> Result<Box<dyn Op>, OpError> {
        if spec.num_inputs != 3 || spec.num_outputs != 1 {
            return Err(OpError::invalid(format!(
                "{OP_TYPE}: takes gate, up and B and gives one output; this node has {} \
                 inputs and {} outputs",
                spec.num_inputs, spec.num_outputs
            )));
        }
        Ok(Box::new(SwiGluMatMul))
    }

    /// (rows, K, N) after checking the operands' types against each other.
    fn check(inputs: &[Option<&ValueType>]) -> Result<(usize, usize, usize), OpError> {
        let (gate, up, b) = (req(inputs, 0)?, req(inputs, 1)?, req(inputs, 2)?);
        expect_dtype(gate, &[DType::F32, DType::F16], &format!("{OP_TYPE}: gate"))?;
        let k = *gate.shape.last().unwrap_or(&0);
        if gate.shape.is_empty()
            || up != gate
            || b.dtype != gate.dtype
            || b.shape.len() != 2
            || b.shape[0] != k
        {
            return Err(OpError::invalid(format!(
                "{OP_TYPE}: gate {gate}, up {up} and B {b} do not fit: up is gate's type and \
                 shape, B [K, N] of that type, K gate's last dimension"
            )));
        }
        Ok((numel(&gate.shape) / k.max(1), k, b.shape[1]))
    }

    /// gemv.comp reading silu(gate) * up as A, for products it takes (at most four rows, N
    /// whole vectors); `None` for the others.
    fn kernel(inputs: &[Option<&ValueType>], mode: Gemv) -> Option<GpuKernel> {
        let (rows, k, _) = Self::check(inputs).ok()?;
        let (gate, b) = (req(inputs, 0).ok()?, req(inputs, 2).ok()?);
        let operands = Operands {
            a: 0,
            b: 2,
            norm: None,
            swiglu_up: Some(1),
        };
        gemv::fused_kernel((gate.dtype, rows, k), b, mode, &operands)
    }
}

impl Op for SwiGluMatMul {
    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<ValueType>, OpError> {
        let types = types_of(inputs);
        let (_, _, n) = Self::check(&types)?;
        let gate = req(&types, 0)?;
        let mut shape = gate.shape.clone();
        *shape.last_mut().expect("checked: rank 1 or more") = n;
        Ok(vec![ValueType::new(gate.dtype, shape)])
    }

    fn run_cpu(
        &self,
        inputs: &[Option<&Tensor>],
        outputs: &[ValueType],
    ) -> Result<Vec<Tensor>, OpError> {
        let types: Vec<Option<ValueType>> = inputs.iter().map(|t| t.map(ValueType::of)).collect();
        let refs: Vec<Option<&ValueType>> = types.iter().map(Option::as_ref).collect();
        Self::check(&refs)?;
        let (gate, up) = (f64s(req(inputs, 0)?)?, f64s(req(inputs, 1)?)?);
        let act: Vec<f64> = gate
            .iter()
            .zip(&up)
            .map(|(&g, &u)| g / (1.0 + (-g).exp()) * u)
            .collect();
        let g = req(inputs, 0)?;
        let act = from_f64(g.dtype(), g.shape().to_vec(), act)?;
        ViaF32::half(Box::new(MatMul)).run_cpu(&[Some(&act), Some(req(inputs, 2)?)], outputs)
    }

    fn gpu(&self, inputs: &[Option<&ValueType>], _outputs: &[ValueType]) -> Option<GpuKernel> {
        Self::kernel(inputs, Gemv::Auto)
    }

    /// The tuning's lane counts apply; `Gemv::Off` does not (gemv::fused_kernel).
    fn gpu_planned(
        &self,
        inputs: &[Option<InferInput<'_>>],
        _outputs: &[ValueType],
        tuning: &KernelTuning,
    ) -> Option<GpuKernel> {
        Self::kernel(&types_of(inputs), tuning.gemv)
    }

    fn flops(&self, inputs: &[Option<&ValueType>], _outputs: &[ValueType]) -> u64 {
        Self::check(inputs).map_or(0, |(m, k, n)| (2 * m * k * n + 4 * m * k) as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testkit::gpu::run_kernel_on;
    use crate::testkit::{Rng, assert_close, f64s as values, op};
    use vkml_testkit::test_gpu;

    fn random(rng: &mut Rng, shape: &[usize], dtype: DType, lo: f64, hi: f64) -> Tensor {
        let v: Vec<f64> = (0..numel(shape))
            .map(|_| lo + (hi - lo) * (rng.next_u64() % 10_001) as f64 / 10_000.0)
            .collect();
        from_f64(dtype, shape.to_vec(), v).unwrap()
    }

    /// silu(gate) * up, then the product, written out in f64 from the (rounded) inputs.
    fn reference(gate: &Tensor, up: &Tensor, b: &Tensor) -> Vec<f64> {
        let (k, n) = (b.shape()[0], b.shape()[1]);
        let (g, u, bv) = (values(gate), values(up), values(b));
        let mut y = Vec::new();
        for r in 0..g.len() / k {
            for c in 0..n {
                y.push(
                    (0..k)
                        .map(|j| {
                            let x = g[r * k + j];
                            x * (1.0 / (1.0 + (-x).exp())) * u[r * k + j] * bv[j * n + c]
                        })
                        .sum(),
                );
            }
        }
        y
    }

    fn case(rng: &mut Rng, dtype: DType, (m, k, n): (usize, usize, usize)) -> [Tensor; 3] {
        [
            random(rng, &[1, m, k], dtype, -4.0, 4.0),
            random(rng, &[1, m, k], dtype, -1.0, 1.0),
            random(rng, &[k, n], dtype, -0.1, 0.1),
        ]
    }

    #[test]
    fn the_cpu_kernel_is_the_activation_then_the_product() {
        let mut rng = Rng::new(3);
        for dtype in [DType::F32, DType::F16] {
            let t = case(&mut rng, dtype, (2, 50, 16));
            let want = reference(&t[0], &t[1], &t[2]);
            let fused = op(OP_TYPE, 1, vec![], 3).unwrap();
            let types: Vec<ValueType> = t.iter().map(ValueType::of).collect();
            let infer: Vec<Option<InferInput<'_>>> = types
                .iter()
                .map(|ty| Some(InferInput { ty, value: None }))
                .collect();
            let out = fused.infer(&infer).unwrap();
            assert_eq!(out, [ValueType::new(dtype, vec![1, 2, 16])]);
            let got = fused.run_cpu(&[Some(&t[0]), Some(&t[1]), Some(&t[2])], &out);
            // f16: the activation is rounded to 11 bits before the product.
            let tol = if dtype == DType::F16 { 5e-3 } else { 1e-5 };
            assert_close(&values(&got.unwrap()[0]), &want, tol);
        }
    }

    #[test]
    fn the_gpu_kernel_computes_the_activation_as_it_reads_a() {
        let Some(gpu) = test_gpu() else {
            eprintln!("no GPU: the SwiGluMatMul kernel is not run");
            return;
        };
        let mut rng = Rng::new(4);
        for dtype in [DType::F32, DType::F16] {
            for (m, k, n) in [(1, 40, 16), (3, 2_100, 24), (1, 1_500, 64)] {
                let t = case(&mut rng, dtype, (m, k, n));
                let want = reference(&t[0], &t[1], &t[2]);
                let types: Vec<ValueType> = t.iter().map(ValueType::of).collect();
                let refs: Vec<Option<&ValueType>> = types.iter().map(Some).collect();
                let out = [ValueType::new(dtype, vec![1, m, n])];
                for mode in [Gemv::Auto, Gemv::Lanes(4), Gemv::Wide(2), Gemv::Split(8, 4)] {
                    let kernel = SwiGluMatMul::kernel(&refs, mode).expect("a few rows");
                    let ins = [Some(&t[0]), Some(&t[1]), Some(&t[2])];
                    let got = run_kernel_on(gpu, &kernel, &ins, &out).unwrap();
                    let tol = if dtype == DType::F16 { 3e-3 } else { 1e-4 };
                    assert_close(&values(&got[0]), &want, tol);
                }
            }
        }
    }

    #[test]
    fn misfit_operands_are_refused_and_more_rows_have_no_gpu_kernel() {
        let t = |d, s: &[usize]| ValueType::new(d, s.to_vec());
        let f16 = DType::F16;
        let (g, b) = (t(f16, &[1, 64]), t(f16, &[64, 16]));
        assert_eq!(
            SwiGluMatMul::check(&[Some(&g), Some(&g), Some(&b)]).unwrap(),
            (1, 64, 16)
        );
        let wrong_up = t(f16, &[1, 32]);
        let err = SwiGluMatMul::check(&[Some(&g), Some(&wrong_up), Some(&b)]).unwrap_err();
        assert!(err.to_string().contains("do not fit"), "{err}");
        let five = t(f16, &[5, 64]);
        assert!(SwiGluMatMul::kernel(&[Some(&five), Some(&five), Some(&b)], Gemv::Auto).is_none());
    }
}
