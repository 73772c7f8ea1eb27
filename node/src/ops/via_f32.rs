//! Runs an op written for f32 on f16 / bf16 (and, for ops where every value is exact in f32,
//! on 8-bit integers): the CPU kernel sees the inputs widened to f32, accumulates in f32, and
//! its outputs are rounded back once. The GPU side is the wrapped op's own: it sees the real
//! types and offers a kernel only for those its shaders handle.

use super::numeric::from_f64;
use super::{GpuKernel, InferInput, Op, OpError, ValueType};
use crate::tensor::{DType, Tensor};

#[derive(Debug)]
pub struct ViaF32 {
    inner: Box<dyn Op>,
    /// The dtypes widened, besides f16 and bf16.
    extra: &'static [DType],
    /// Float inputs may have different types (BatchNormalization's parameters); otherwise a
    /// widened input beside one of another type is refused, as the wrapped op would.
    mixed: bool,
}

impl ViaF32 {
    /// Wraps `inner` for f16 and bf16.
    pub fn half(inner: Box<dyn Op>) -> Box<dyn Op> {
        Box::new(ViaF32 {
            inner,
            extra: &[],
            mixed: false,
        })
    }

    /// Wraps `inner` for f16 and bf16, letting its float inputs differ in type.
    pub fn half_mixed(inner: Box<dyn Op>) -> Box<dyn Op> {
        Box::new(ViaF32 {
            inner,
            extra: &[],
            mixed: true,
        })
    }

    /// Wraps `inner` for f16, bf16 and the dtypes in `extra` (exact in f32).
    pub fn with(inner: Box<dyn Op>, extra: &'static [DType]) -> Box<dyn Op> {
        Box::new(ViaF32 {
            inner,
            extra,
            mixed: false,
        })
    }

    fn widened(&self, d: DType) -> bool {
        matches!(d, DType::F16 | DType::BF16) || self.extra.contains(&d)
    }

    /// The dtype inputs are narrowed back to, when some input is widened.
    fn narrow_to(&self, mut dtypes: impl Iterator<Item = DType>) -> Option<DType> {
        dtypes.find(|&d| self.widened(d))
    }
}

fn to_f32(t: &Tensor) -> Result<Tensor, OpError> {
    let v = t
        .to_f64_vec()
        .map_err(|e| OpError::invalid(e.to_string()))?;
    Ok(Tensor::from_vec(
        t.shape().to_vec(),
        v.into_iter().map(|x| x as f32).collect(),
    ))
}

impl Op for ViaF32 {
    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<ValueType>, OpError> {
        let Some(back) = self.narrow_to(inputs.iter().flatten().map(|i| i.ty.dtype)) else {
            return self.inner.infer(inputs);
        };
        if !self.mixed
            && let Some(other) = inputs
                .iter()
                .flatten()
                .map(|i| i.ty.dtype)
                .find(|&d| d != back && (d.is_float() || self.widened(d)))
        {
            return Err(OpError::invalid(format!(
                "inputs of types {back} and {other} do not mix"
            )));
        }
        let types: Vec<Option<ValueType>> = inputs
            .iter()
            .map(|i| {
                i.map(|i| {
                    let mut t = i.ty.clone();
                    if self.widened(t.dtype) {
                        t.dtype = DType::F32;
                    }
                    t
                })
            })
            .collect();
        let values: Vec<Option<Tensor>> = inputs
            .iter()
            .map(|i| {
                i.and_then(|i| i.value)
                    .map(|v| {
                        if self.widened(v.dtype()) {
                            to_f32(v)
                        } else {
                            Ok(v.clone())
                        }
                    })
                    .transpose()
            })
            .collect::<Result<_, _>>()?;
        let wide: Vec<Option<InferInput<'_>>> = types
            .iter()
            .zip(&values)
            .map(|(t, v)| {
                t.as_ref().map(|ty| InferInput {
                    ty,
                    value: v.as_ref(),
                })
            })
            .collect();
        let mut out = self.inner.infer(&wide)?;
        for o in &mut out {
            if o.dtype == DType::F32 {
                o.dtype = back;
            }
        }
        Ok(out)
    }

    fn run_cpu(
        &self,
        inputs: &[Option<&Tensor>],
        outputs: &[ValueType],
    ) -> Result<Vec<Tensor>, OpError> {
        if self
            .narrow_to(inputs.iter().flatten().map(|t| t.dtype()))
            .is_none()
        {
            return self.inner.run_cpu(inputs, outputs);
        }
        let wide: Vec<Option<Tensor>> = inputs
            .iter()
            .map(|t| {
                t.map(|t| {
                    if self.widened(t.dtype()) {
                        to_f32(t)
                    } else {
                        Ok(t.clone())
                    }
                })
                .transpose()
            })
            .collect::<Result<_, _>>()?;
        let refs: Vec<Option<&Tensor>> = wide.iter().map(Option::as_ref).collect();
        let wide_out: Vec<ValueType> = outputs
            .iter()
            .map(|o| {
                let mut o = o.clone();
                if self.widened(o.dtype) {
                    o.dtype = DType::F32;
                }
                o
            })
            .collect();
        let ys = self.inner.run_cpu(&refs, &wide_out)?;
        ys.into_iter()
            .zip(outputs)
            .map(|(y, o)| {
                if y.dtype() == o.dtype {
                    Ok(y)
                } else {
                    let v = y
                        .to_f64_vec()
                        .map_err(|e| OpError::invalid(e.to_string()))?;
                    from_f64(o.dtype, o.shape.clone(), v)
                }
            })
            .collect()
    }

    fn gpu(&self, inputs: &[Option<&ValueType>], outputs: &[ValueType]) -> Option<GpuKernel> {
        self.inner.gpu(inputs, outputs)
    }

    fn is_view(&self) -> bool {
        self.inner.is_view()
    }

    fn flops(&self, inputs: &[Option<&ValueType>], outputs: &[ValueType]) -> u64 {
        self.inner.flops(inputs, outputs)
    }
}

#[cfg(test)]
mod tests {
    use crate::ops::elementwise::testutil::{f64s, run};
    use crate::ops::{AttrValue, Attrs, NodeSpec, Op, OpError};
    use crate::tensor::{DType, Tensor};
    use half::f16;

    /// Builds with as many inputs as the pools take (one).
    fn build(
        op_type: &str,
        opset: i64,
        attrs: &[(&str, AttrValue)],
    ) -> Result<Box<dyn Op>, OpError> {
        let attrs = Attrs(
            attrs
                .iter()
                .map(|(k, v)| (k.to_string(), v.clone()))
                .collect(),
        );
        let num_inputs = if op_type.ends_with("Pool") { 1 } else { 3 };
        crate::ops::build(&NodeSpec {
            name: "t",
            op_type,
            attrs: &attrs,
            opset,
            num_inputs,
            num_outputs: 1,
        })
    }

    fn h(v: &[f32], shape: &[usize]) -> Tensor {
        Tensor::from_vec(
            shape.to_vec(),
            v.iter().map(|&x| f16::from_f32(x)).collect(),
        )
    }

    #[test]
    fn f16_matmul_gemm_conv_pool_round_once() {
        // [1 2; 3 4] x [1 1; 0 1] = [1 3; 3 7].
        let a = h(&[1., 2., 3., 4.], &[2, 2]);
        let b = h(&[1., 1., 0., 1.], &[2, 2]);
        let y = run(&*build("MatMul", 13, &[]).unwrap(), &[Some(&a), Some(&b)]).unwrap();
        assert_eq!(y[0].dtype(), DType::F16);
        assert_eq!(f64s(&y[0]), vec![1., 3., 3., 7.]);
        let c = h(&[0.5], &[1]);
        let op = build("Gemm", 13, &[("alpha", AttrValue::Float(2.0))]).unwrap();
        let y = run(&*op, &[Some(&a), Some(&b), Some(&c)]).unwrap();
        assert_eq!(f64s(&y[0]), vec![2.5, 6.5, 6.5, 14.5]);
        // 2048 + 1 + 1 in f16 steps would stay 2048 (spacing 2 there); in f32 it is 2050.
        let x = h(&[2048., 1., 1.], &[1, 1, 3]);
        let w = h(&[1., 1., 1.], &[1, 1, 3]);
        let y = run(&*build("Conv", 11, &[]).unwrap(), &[Some(&x), Some(&w)]).unwrap();
        assert_eq!(f64s(&y[0]), vec![2050.]);
        let op = build("MaxPool", 12, &[("kernel_shape", AttrValue::Ints(vec![2]))]).unwrap();
        let y = run(&*op, &[Some(&x)]).unwrap();
        assert_eq!((y[0].dtype(), f64s(&y[0])), (DType::F16, vec![2048., 1.]));
        let u = Tensor::from_vec(vec![1, 1, 3], vec![7u8, 255, 0]);
        let y = run(&*op, &[Some(&u)]).unwrap();
        assert_eq!(y[0].dtype(), DType::U8);
        assert_eq!(y[0].to_i64_vec().unwrap(), vec![255, 255]);
        // Integers are not widened where they would not be exact or meaningful.
        assert!(
            run(
                &*build(
                    "AveragePool",
                    11,
                    &[("kernel_shape", AttrValue::Ints(vec![2]))]
                )
                .unwrap(),
                &[Some(&u)]
            )
            .is_err()
        );
    }

    #[test]
    fn lp_pool_by_hand() {
        // Windows [3, 4] and [4, 0] with p = 2: 5 and 4; p = 1 with padding 1: |-1| alone first.
        let x = Tensor::from_vec(vec![1, 1, 3], vec![3f32, 4., 0.]);
        let op = build("LpPool", 18, &[("kernel_shape", AttrValue::Ints(vec![2]))]).unwrap();
        assert_eq!(f64s(&run(&*op, &[Some(&x)]).unwrap()[0]), vec![5., 4.]);
        let x = Tensor::from_vec(vec![1, 1, 2], vec![-1f32, 2.]);
        let op = build(
            "LpPool",
            18,
            &[
                ("kernel_shape", AttrValue::Ints(vec![2])),
                ("p", AttrValue::Int(1)),
                ("pads", AttrValue::Ints(vec![1, 1])),
            ],
        )
        .unwrap();
        assert_eq!(f64s(&run(&*op, &[Some(&x)]).unwrap()[0]), vec![1., 3., 2.]);
    }

    #[test]
    fn gpu_lp_pool_matches_cpu() {
        let mut rng = crate::ops::elementwise::testutil::Rng::new(4);
        for p in [1i64, 2, 3] {
            let op = build(
                "LpPool",
                18,
                &[
                    ("kernel_shape", AttrValue::Ints(vec![3, 2])),
                    ("p", AttrValue::Int(p)),
                    ("pads", AttrValue::Ints(vec![1, 0, 1, 1])),
                    ("strides", AttrValue::Ints(vec![2, 1])),
                ],
            )
            .unwrap();
            let x = rng.tensor_f32(&[2, 3, 9, 7]);
            crate::ops::elementwise::testutil::gpu_matches_cpu(&*op, &[Some(&x)], 1e-4);
        }
    }
}
