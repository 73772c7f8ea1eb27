//! com.microsoft QLinearAdd, ONNX Runtime's quantized sum: C = quantize(dequantize(A) +
//! dequantize(B)) with numpy broadcasting, A, B and C of one 8-bit type, scales and zero points
//! one value each (zero points optional). The arithmetic is DequantizeLinear's, Add's and
//! QuantizeLinear's in f32, so that a QDQ residual sum fused into this op (graph/fuse_qdq.rs)
//! gives the bytes the three ops give. GPU: one shape for A and B (shaders/qlinear_add.comp).

use super::util::{broadcast_shapes, broadcast_strides, groups_1d, opt, req};
use super::{
    BufRef, Dispatch, GpuKernel, InferInput, MS_DOMAIN, NodeSpec, Op, OpError, Registry, ValueType,
};
use crate::tensor::{DType, Tensor};
use vkml_shaders::qlinear_add;

pub fn register(r: &mut Registry) {
    r.add_in(MS_DOMAIN, "QLinearAdd", build);
}

fn build(spec: &NodeSpec<'_>) -> Result<Box<dyn Op>, OpError> {
    if !(7..=8).contains(&spec.num_inputs) || spec.num_outputs != 1 {
        return Err(OpError::invalid(format!(
            "QLinearAdd takes 7 or 8 inputs (A, A_scale, A_zero_point, B, B_scale, \
             B_zero_point, C_scale, optional C_zero_point) and gives 1 output, got {} and {}",
            spec.num_inputs, spec.num_outputs
        )));
    }
    Ok(Box::new(QLinearAdd))
}

#[derive(Debug)]
struct QLinearAdd;

/// A one-value scale (f32) or zero point (of `dtype`), or the reason it is not one.
fn check_one(t: &ValueType, dtype: Option<DType>, what: &str) -> Result<(), OpError> {
    if t.numel() != 1 {
        return Err(OpError::unsupported(format!(
            "QLinearAdd: {what} with {} values (one is implemented)",
            t.numel()
        )));
    }
    match dtype {
        None if t.dtype != DType::F32 => Err(OpError::invalid(format!(
            "QLinearAdd: {what} must be float, found {}",
            t.dtype
        ))),
        Some(d) if t.dtype != d => Err(OpError::invalid(format!(
            "QLinearAdd: {what} must be {d} as A is, found {}",
            t.dtype
        ))),
        _ => Ok(()),
    }
}

fn bad(e: crate::tensor::TensorError) -> OpError {
    OpError::invalid(format!("QLinearAdd: {e}"))
}

impl Op for QLinearAdd {
    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<ValueType>, OpError> {
        let (a, b) = (req(inputs, 0)?.ty, req(inputs, 3)?.ty);
        if !matches!(a.dtype, DType::U8 | DType::I8) || b.dtype != a.dtype {
            return Err(OpError::invalid(format!(
                "QLinearAdd: A and B must both be uint8 or both int8, found {} and {}",
                a.dtype, b.dtype
            )));
        }
        check_one(req(inputs, 1)?.ty, None, "A_scale")?;
        check_one(req(inputs, 4)?.ty, None, "B_scale")?;
        check_one(req(inputs, 6)?.ty, None, "C_scale")?;
        for (i, what) in [
            (2, "A_zero_point"),
            (5, "B_zero_point"),
            (7, "C_zero_point"),
        ] {
            if let Some(z) = opt(inputs, i) {
                check_one(z.ty, Some(a.dtype), what)?;
            }
        }
        let shape = broadcast_shapes(&a.shape, &b.shape)?;
        Ok(vec![ValueType::new(a.dtype, shape)])
    }

    fn run_cpu(
        &self,
        inputs: &[Option<&Tensor>],
        outputs: &[ValueType],
    ) -> Result<Vec<Tensor>, OpError> {
        let (a, b) = (req(inputs, 0)?, req(inputs, 3)?);
        let scale = |i: usize| -> Result<f32, OpError> {
            Ok(req(inputs, i)?.view::<f32>().map_err(bad)?[0])
        };
        let zero = |i: usize| -> Result<i64, OpError> {
            opt(inputs, i).map_or(Ok(0), |z| Ok(z.to_i64_vec().map_err(bad)?[0]))
        };
        let (sa, sb, sc) = (scale(1)?, scale(4)?, scale(6)?);
        let (za, zb, zc) = (zero(2)?, zero(5)?, zero(7)?);
        let (av, bv) = (a.to_i64_vec().map_err(bad)?, b.to_i64_vec().map_err(bad)?);
        let out = &outputs[0];
        let (lo, hi) = if out.dtype == DType::I8 {
            (-128, 127)
        } else {
            (0, 255)
        };
        let (sa_strides, sb_strides) = (
            broadcast_strides(a.shape(), &out.shape),
            broadcast_strides(b.shape(), &out.shape),
        );
        let dims = crate::tensor::strides(&out.shape);
        let at = |i: usize, st: &[usize]| -> usize {
            dims.iter()
                .zip(st)
                .zip(&out.shape)
                .map(|((&d, &s), &n)| (i / d.max(1)) % n.max(1) * s)
                .sum()
        };
        let c: Vec<u8> = (0..out.numel())
            .map(|i| {
                let x = (av[at(i, &sa_strides)] - za) as f32 * sa;
                let y = (bv[at(i, &sb_strides)] - zb) as f32 * sb;
                let q = ((x + y) / sc).round_ties_even();
                let q = if q.is_nan() { 0.0 } else { q.clamp(-1e9, 1e9) };
                (q as i64 + zc).clamp(lo, hi) as u8
            })
            .collect();
        Ok(vec![
            Tensor::from_bytes(out.dtype, out.shape.clone(), c.into()).map_err(bad)?,
        ])
    }

    fn gpu(&self, inputs: &[Option<&ValueType>], outputs: &[ValueType]) -> Option<GpuKernel> {
        let (a, b) = (opt(inputs, 0)?, opt(inputs, 3)?);
        let n = outputs.first()?.numel();
        if a.shape != b.shape || n > u32::MAX as usize {
            return None;
        }
        let variant = match a.dtype {
            DType::U8 => qlinear_add::Variant::U8,
            DType::I8 => qlinear_add::Variant::I8,
            _ => return None,
        };
        let zero = |i: usize| {
            if opt(inputs, i).is_some() {
                BufRef::Input(i)
            } else {
                BufRef::Table(vec![0])
            }
        };
        Some(GpuKernel {
            scratch: vec![],
            dispatches: vec![Dispatch::new(
                variant,
                qlinear_add::Buffers {
                    a: BufRef::Input(0),
                    sa: BufRef::Input(1),
                    za: zero(2),
                    b: BufRef::Input(3),
                    sb: BufRef::Input(4),
                    zb: zero(5),
                    sc: BufRef::Input(6),
                    zc: zero(7),
                    c: BufRef::Output(0),
                },
                qlinear_add::Params { n: n as u32 },
                groups_1d(n, 256),
            )],
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testkit::{Rng, gpu_matches_cpu, run};

    fn op(n: usize) -> Box<dyn Op> {
        let attrs = crate::Attrs::default();
        crate::build_in(
            MS_DOMAIN,
            &NodeSpec {
                name: "t",
                op_type: "QLinearAdd",
                attrs: &attrs,
                opset: 1,
                num_inputs: n,
                num_outputs: 1,
            },
        )
        .unwrap()
    }

    #[test]
    fn by_hand() {
        // (10 - 2) x 0.5 + (3 - 1) x 0.25 = 4.5; / 0.5 = 9, + 100.
        let a = Tensor::from_vec(vec![1], vec![10u8]);
        let b = Tensor::from_vec(vec![1], vec![3u8]);
        let f = Tensor::scalar;
        let z = Tensor::scalar;
        let y = run(
            &*op(8),
            &[
                Some(&a),
                Some(&f(0.5f32)),
                Some(&z(2u8)),
                Some(&b),
                Some(&f(0.25f32)),
                Some(&z(1u8)),
                Some(&f(0.5f32)),
                Some(&z(100u8)),
            ],
        )
        .unwrap();
        assert_eq!(y[0].to_i64_vec().unwrap(), [109]);
        // Broadcast, int8, no output zero point: (-4 - 0) x 1 + (2 - 1) x 1 = -3, / 2 = -1.5
        // -> -2 (half to even); (-4) + (3 - 1) = -2, / 2 = -1.
        let a = Tensor::from_vec(vec![1], vec![-4i8]);
        let b = Tensor::from_vec(vec![2], vec![2i8, 3]);
        let y = run(
            &*op(7),
            &[
                Some(&a),
                Some(&f(1.0f32)),
                Some(&Tensor::scalar(0i8)),
                Some(&b),
                Some(&f(1.0f32)),
                Some(&Tensor::scalar(1i8)),
                Some(&f(2.0f32)),
            ],
        )
        .unwrap();
        assert_eq!(y[0].to_i64_vec().unwrap(), [-2, -1]);
    }

    #[test]
    fn gpu_matches_cpu_bytes() {
        let mut rng = Rng::new(5);
        for dt in [DType::U8, DType::I8] {
            let bytes = |rng: &mut Rng, n: usize| -> Tensor {
                let v: Vec<u8> = (0..n).map(|_| rng.next_u64() as u8).collect();
                Tensor::from_bytes(dt, vec![3, 257], v.into()).unwrap()
            };
            let (a, b) = (bytes(&mut rng, 771), bytes(&mut rng, 771));
            let z = |v: u8| Tensor::from_bytes(dt, vec![], vec![v].into()).unwrap();
            let f = Tensor::scalar;
            let (sa, sb, sc) = (f(0.031f32), f(0.017f32), f(0.043f32));
            let (za, zb, zc) = (z(130), z(7), z(121));
            let ins = [
                Some(&a),
                Some(&sa),
                Some(&za),
                Some(&b),
                Some(&sb),
                Some(&zb),
                Some(&sc),
                Some(&zc),
            ];
            gpu_matches_cpu(&*op(8), &ins, 0.0);
            gpu_matches_cpu(&*op(7), &ins[..7], 0.0);
        }
    }
}
