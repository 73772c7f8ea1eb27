//! Runs an op written for f32 on f16 / bf16 (and, for ops where every value is exact in f32,
//! on 8-bit integers): the CPU kernel sees the inputs widened to f32, accumulates in f32, and
//! its outputs are rounded back once. The GPU side is the wrapped op's own: it sees the real
//! types and offers a kernel only for those its shaders handle.

use super::numeric::from_f64;
use super::{GpuKernel, InferInput, Op, OpError, ValueType};
use crate::tensor::{DType, Tensor};
use half::slice::HalfFloatSliceExt;

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
    let v = match t.dtype() {
        DType::F16 => widen(&t.view::<half::f16>().map_err(invalid)?),
        DType::BF16 => widen(&t.view::<half::bf16>().map_err(invalid)?),
        _ => t
            .to_f64_vec()
            .map_err(invalid)?
            .into_iter()
            .map(|x| x as f32)
            .collect(),
    };
    Ok(Tensor::from_vec(t.shape().to_vec(), v))
}

/// An f32 output rounded once to `dtype`.
fn narrow(y: Tensor, o: &ValueType) -> Result<Tensor, OpError> {
    let shape = o.shape.clone();
    match (y.dtype(), o.dtype) {
        (DType::F32, DType::F16) => {
            let v = y.view::<f32>().map_err(invalid)?;
            Ok(Tensor::from_vec(shape, round_to::<half::f16>(&v)))
        }
        (DType::F32, DType::BF16) => {
            let v = y.view::<f32>().map_err(invalid)?;
            Ok(Tensor::from_vec(shape, round_to::<half::bf16>(&v)))
        }
        _ => from_f64(o.dtype, shape, y.to_f64_vec().map_err(invalid)?),
    }
}

fn invalid(e: crate::tensor::TensorError) -> OpError {
    OpError::invalid(e.to_string())
}

// half's slice conversions use the CPU's F16C instructions where it has them.

fn widen<H: Sync>(src: &[H]) -> Vec<f32>
where
    [H]: HalfFloatSliceExt,
{
    convert(src, |s: &[H], d: &mut [f32]| s.convert_to_f32_slice(d))
}

fn round_to<H: Copy + Default + Send>(src: &[f32]) -> Vec<H>
where
    [H]: HalfFloatSliceExt,
{
    convert(src, |s: &[f32], d: &mut [H]| d.convert_from_f32_slice(s))
}

/// Elements converted per task: the conversions run at memory speed, so only tensors of
/// millions of elements are worth splitting.
const CONVERT_CHUNK: usize = 1 << 16;

/// `f(part of src, part of the result)` over `src`, in parallel for large tensors.
fn convert<S: Sync, D: Copy + Default + Send>(
    src: &[S],
    f: impl Fn(&[S], &mut [D]) + Sync + Send,
) -> Vec<D> {
    let mut y = vec![D::default(); src.len()];
    crate::window::par::for_each_chunk(&mut y, CONVERT_CHUNK, CONVERT_CHUNK / 16, |i, d| {
        f(&src[i * CONVERT_CHUNK..][..d.len()], d)
    });
    y
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
        // The wrapped ops' rules read no values of their float inputs: a widened input goes
        // without its value, which spares converting large weights while planning.
        let wide: Vec<Option<InferInput<'_>>> = types
            .iter()
            .zip(inputs)
            .map(|(t, i)| {
                t.as_ref().map(|ty| InferInput {
                    ty,
                    value: i.and_then(|i| i.value).filter(|v| !self.widened(v.dtype())),
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
                    narrow(y, o)
                }
            })
            .collect()
    }

    fn gpu(&self, inputs: &[Option<&ValueType>], outputs: &[ValueType]) -> Option<GpuKernel> {
        self.inner.gpu(inputs, outputs)
    }

    fn gpu_planned(
        &self,
        inputs: &[Option<InferInput<'_>>],
        outputs: &[ValueType],
        tuning: &crate::KernelTuning,
    ) -> Option<GpuKernel> {
        self.inner.gpu_planned(inputs, outputs, tuning)
    }

    fn gpu_preferred(
        &self,
        inputs: &[Option<InferInput<'_>>],
        outputs: &[ValueType],
        tuning: &crate::KernelTuning,
    ) -> Vec<GpuKernel> {
        self.inner.gpu_preferred(inputs, outputs, tuning)
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
    use crate::tensor::{DType, Tensor};
    use crate::testkit::{f64s, run};
    use crate::{AttrValue, Attrs, NodeSpec, Op, OpError};
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
        crate::build(&NodeSpec {
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
        let op = build(
            "LpPool",
            1,
            &[
                ("kernel_shape", AttrValue::Ints(vec![2])),
                ("p", AttrValue::Float(2.0)),
            ],
        )
        .unwrap();
        assert_eq!(f64s(&run(&*op, &[Some(&x)]).unwrap()[0]), vec![5., 4.]);
        assert!(
            build(
                "LpPool",
                1,
                &[
                    ("kernel_shape", AttrValue::Ints(vec![2])),
                    ("p", AttrValue::Float(1.5))
                ]
            )
            .is_err()
        );
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
        let mut rng = crate::testkit::Rng::new(4);
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
            crate::testkit::gpu_matches_cpu(&*op, &[Some(&x)], 1e-4);
        }
    }
}

#[cfg(test)]
mod gpu_tests {
    //! The f16 variants of the Conv, pool, BatchNormalization and GEMM shaders against the CPU
    //! (f32 arithmetic rounded once, so the two differ by at most an f16 rounding step).
    use crate::tensor::Tensor;
    use crate::testkit::{Rng, gpu_matches_cpu};
    use crate::{AttrValue, Attrs, NodeSpec, Op};
    use half::f16;

    fn node(
        op_type: &str,
        attrs: &[(&str, AttrValue)],
        num_inputs: usize,
        num_outputs: usize,
    ) -> Box<dyn Op> {
        let attrs = Attrs(
            attrs
                .iter()
                .map(|(k, v)| (k.to_string(), v.clone()))
                .collect(),
        );
        let spec = NodeSpec {
            name: "t",
            op_type,
            attrs: &attrs,
            opset: 15,
            num_inputs,
            num_outputs,
        };
        crate::build(&spec).unwrap()
    }

    fn h(rng: &mut Rng, shape: &[usize]) -> Tensor {
        let n = shape.iter().product();
        Tensor::from_vec(
            shape.to_vec(),
            rng.f32s(n).into_iter().map(f16::from_f32).collect(),
        )
    }

    #[test]
    fn f16_shaders_match_cpu() {
        let mut rng = Rng::new(21);
        let tol = 1e-2;
        // Conv: a depthwise one (direct shader) and a wide one (implicit GEMM).
        let dw = node(
            "Conv",
            &[
                ("group", AttrValue::Int(4)),
                ("pads", AttrValue::Ints(vec![1, 1, 1, 1])),
            ],
            3,
            1,
        );
        let (x, w, b) = (
            h(&mut rng, &[2, 4, 7, 6]),
            h(&mut rng, &[4, 1, 3, 3]),
            h(&mut rng, &[4]),
        );
        gpu_matches_cpu(&*dw, &[Some(&x), Some(&w), Some(&b)], tol);
        let wide = node("Conv", &[], 3, 1);
        let (x, w) = (h(&mut rng, &[1, 8, 9, 9]), h(&mut rng, &[32, 8, 3, 3]));
        gpu_matches_cpu(&*wide, &[Some(&x), Some(&w)], tol);
        // Pools.
        let x = h(&mut rng, &[2, 3, 9, 8]);
        let k = ("kernel_shape", AttrValue::Ints(vec![3, 2]));
        for (op, outs) in [
            ("MaxPool", 1),
            ("MaxPool", 2),
            ("AveragePool", 1),
            ("LpPool", 1),
        ] {
            gpu_matches_cpu(
                &*node(op, std::slice::from_ref(&k), 1, outs),
                &[Some(&x)],
                tol,
            );
        }
        for op in ["GlobalAveragePool", "GlobalMaxPool"] {
            gpu_matches_cpu(&*node(op, &[], 1, 1), &[Some(&x)], tol);
        }
        // BatchNormalization, with a positive variance.
        let bn = node("BatchNormalization", &[], 5, 1);
        let p: Vec<Tensor> = (0..4).map(|_| h(&mut rng, &[3])).collect();
        let var = Tensor::from_vec(
            vec![3],
            vec![f16::from_f32(0.5), f16::from_f32(1.0), f16::from_f32(2.0)],
        );
        gpu_matches_cpu(
            &*bn,
            &[Some(&x), Some(&p[0]), Some(&p[1]), Some(&p[2]), Some(&var)],
            tol,
        );
        // MatMul with a broadcast batch, Gemm with transposes and C.
        let mm = node("MatMul", &[], 2, 1);
        let (a, bm) = (h(&mut rng, &[3, 70, 20]), h(&mut rng, &[20, 65]));
        gpu_matches_cpu(&*mm, &[Some(&a), Some(&bm)], tol);
        let gemm = node(
            "Gemm",
            &[
                ("transA", AttrValue::Int(1)),
                ("transB", AttrValue::Int(1)),
                ("alpha", AttrValue::Float(0.5)),
                ("beta", AttrValue::Float(2.0)),
            ],
            3,
            1,
        );
        let (a, bm, c) = (
            h(&mut rng, &[20, 70]),
            h(&mut rng, &[65, 20]),
            h(&mut rng, &[65]),
        );
        gpu_matches_cpu(&*gemm, &[Some(&a), Some(&bm), Some(&c)], tol);
    }
}
