//! Ops of the ai.onnx.ml domain (version 1 of each): Binarizer, y = x > threshold ? 1 : 0 in x's
//! type, and ArrayFeatureExtractor, a gather along the last axis whose output is [..., len(Y)]
//! (a 1-D X gives [1, len(Y)], as ONNX Runtime and the ONNX reference do). TreeEnsemble
//! (opset 5) lives in tree_ensemble.rs.

use super::gather::Gather;
use super::util::{groups_1d, req};
use super::{BufRef, Dispatch, GpuKernel, InferInput, NodeSpec, Op, OpError, Registry, ValueType};
use crate::tensor::{DType, Tensor, numel};
use vkml_shaders::binarizer;

/// The domain of the classical machine-learning ops (scikit-learn exports).
pub const ML_DOMAIN: &str = "ai.onnx.ml";

pub fn register(r: &mut Registry) {
    r.add_in(ML_DOMAIN, "Binarizer", build_binarizer);
    r.add_in(ML_DOMAIN, "ArrayFeatureExtractor", build_extractor);
    r.add_in(ML_DOMAIN, "TreeEnsemble", super::tree_ensemble::build);
}

#[derive(Debug)]
struct Binarizer {
    threshold: f32,
}

fn build_binarizer(spec: &NodeSpec<'_>) -> Result<Box<dyn Op>, OpError> {
    Ok(Box::new(Binarizer {
        threshold: spec.attrs.float("threshold", 0.0)?,
    }))
}

impl Op for Binarizer {
    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<ValueType>, OpError> {
        let x = req(inputs, 0)?.ty;
        if !matches!(x.dtype, DType::F32 | DType::F64 | DType::I64 | DType::I32) {
            return Err(OpError::invalid(format!(
                "Binarizer takes float, double, int64 or int32, found {}; cast the input first",
                x.dtype
            )));
        }
        Ok(vec![x.clone()])
    }

    fn run_cpu(
        &self,
        inputs: &[Option<&Tensor>],
        _outputs: &[ValueType],
    ) -> Result<Vec<Tensor>, OpError> {
        let x = req(inputs, 0)?;
        let t = f64::from(self.threshold);
        let shape = x.shape().to_vec();
        let bad = |e: crate::TensorError| OpError::invalid(format!("Binarizer: {e}"));
        // Integers compare in f64 too: x > t for an integer x whatever t's fraction, and the
        // int64 values where f64 rounds are far beyond any f32 threshold but infinity.
        let y = match x.dtype() {
            DType::I64 | DType::I32 => {
                let v: Vec<i64> = x.to_i64_vec().map_err(bad)?;
                let y = v.iter().map(|&a| i64::from((a as f64) > t)).collect();
                super::numeric::from_i64(x.dtype(), shape, y)?
            }
            _ => {
                let v = x.to_f64_vec().map_err(bad)?;
                let y = v.iter().map(|&a| if a > t { 1.0 } else { 0.0 }).collect();
                super::numeric::from_f64(x.dtype(), shape, y)?
            }
        };
        Ok(vec![y])
    }

    fn gpu(&self, inputs: &[Option<&ValueType>], _outputs: &[ValueType]) -> Option<GpuKernel> {
        let x = req(inputs, 0).ok()?;
        let variant = by_dtype!(x.dtype, binarizer::Variant, [F32, F64])?;
        let dispatches = if x.numel() == 0 {
            Vec::new()
        } else {
            vec![Dispatch::new(
                variant,
                binarizer::Buffers {
                    x: BufRef::Input(0),
                    y: BufRef::Output(0),
                },
                binarizer::Params {
                    n: u32::try_from(x.numel()).ok()?,
                    threshold: self.threshold,
                },
                groups_1d(x.numel(), 256),
            )]
        };
        Some(GpuKernel {
            scratch: Vec::new(),
            dispatches,
        })
    }
}

/// ArrayFeatureExtractor: Gather along the last axis with the indices flattened, so the
/// kernels are Gather's and only the output shape is this op's.
#[derive(Debug)]
struct Extractor {
    gather: Gather,
}

fn build_extractor(_spec: &NodeSpec<'_>) -> Result<Box<dyn Op>, OpError> {
    Ok(Box::new(Extractor {
        gather: Gather::along(-1),
    }))
}

impl Extractor {
    fn shape(x: &[usize], indices: &ValueType) -> Result<Vec<usize>, OpError> {
        if indices.dtype != DType::I64 {
            return Err(OpError::invalid(format!(
                "ArrayFeatureExtractor indices (Y) must be int64, found {}",
                indices.dtype
            )));
        }
        let picks = numel(&indices.shape);
        Ok(match x {
            [] => {
                return Err(OpError::invalid(
                    "ArrayFeatureExtractor: X is a scalar; it needs at least one axis to pick from",
                ));
            }
            [_] => vec![1, picks],
            [outer @ .., _] => [outer, &[picks]].concat(),
        })
    }

    /// Negative indices are refused as ONNX Runtime refuses them (Gather would count them
    /// from the end).
    fn check_indices(indices: &Tensor) -> Result<(), OpError> {
        let v = indices
            .to_i64_vec()
            .map_err(|e| OpError::invalid(format!("ArrayFeatureExtractor indices: {e}")))?;
        match v.iter().position(|&i| i < 0) {
            Some(k) => Err(OpError::invalid(format!(
                "ArrayFeatureExtractor index {} (element {k} of Y) is negative; indices must \
                 lie in [0, size of X's last axis)",
                v[k]
            ))),
            None => Ok(()),
        }
    }
}

impl Op for Extractor {
    fn check_values(&self, inputs: &[Option<InferInput<'_>>]) -> Result<(), OpError> {
        if let Some(t) = req(inputs, 1)?.value {
            Extractor::check_indices(t)?;
        }
        self.gather.check_values(inputs)
    }

    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<ValueType>, OpError> {
        let (x, y) = (req(inputs, 0)?, req(inputs, 1)?);
        let shape = Extractor::shape(&x.ty.shape, y.ty)?;
        if let Some(t) = y.value {
            Extractor::check_indices(t)?;
        }
        self.gather.infer(inputs)?;
        Ok(vec![ValueType::new(x.ty.dtype, shape)])
    }

    fn run_cpu(
        &self,
        inputs: &[Option<&Tensor>],
        outputs: &[ValueType],
    ) -> Result<Vec<Tensor>, OpError> {
        Extractor::check_indices(req(inputs, 1)?)?;
        let y = self.gather.run_cpu(inputs, outputs)?.remove(0);
        let y = y
            .reshaped(outputs[0].shape.clone())
            .map_err(|e| OpError::invalid(format!("ArrayFeatureExtractor: {e}")))?;
        Ok(vec![y])
    }

    /// Gather's kernel: it sizes itself from the input types, and the bytes it writes are this
    /// op's output under Gather's shape.
    fn gpu(&self, inputs: &[Option<&ValueType>], outputs: &[ValueType]) -> Option<GpuKernel> {
        self.gather.gpu(inputs, outputs)
    }

    fn index_fault(&self, inputs: &[Option<&ValueType>], f: &super::IndexFault) -> OpError {
        self.gather.index_fault(inputs, f)
    }

    fn flops(&self, _inputs: &[Option<&ValueType>], _outputs: &[ValueType]) -> u64 {
        0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::AttrValue;
    use crate::testkit::{Rng, gpu_matches_cpu, gpu_same_bytes, run_one};

    fn op(op_type: &str, attrs: Vec<(&str, AttrValue)>, inputs: usize) -> Box<dyn Op> {
        crate::testkit::node_in(ML_DOMAIN, op_type, 1, attrs, (inputs, 1)).unwrap()
    }

    #[test]
    fn binarizer_by_hand_and_on_the_gpu() {
        let b = op("Binarizer", vec![("threshold", AttrValue::Float(0.5))], 1);
        let x = Tensor::from_vec(vec![5], vec![-1.0f32, 0.5, 0.51, 2.0, f32::NAN]);
        let y = run_one(&*b, &[Some(&x)]).unwrap();
        assert_eq!(y.to_f64_vec().unwrap(), [0.0, 0.0, 1.0, 1.0, 0.0]);
        let x = Tensor::from_vec(vec![4], vec![-3i64, 0, 1, 7]);
        let y = run_one(&*b, &[Some(&x)]).unwrap();
        assert_eq!(y.to_i64_vec().unwrap(), [0, 0, 1, 1]);
        let x = Rng::new(5).tensor_f32(&[3, 7, 13]);
        gpu_matches_cpu(&*b, &[Some(&x)], 0.0);
        let x = Tensor::from_vec(vec![257], Rng::new(6).f64s(257));
        gpu_matches_cpu(&*b, &[Some(&x)], 0.0);
    }

    #[test]
    fn extractor_shapes_values_and_gpu() {
        let e = op("ArrayFeatureExtractor", vec![], 2);
        let x = Tensor::from_vec(vec![2, 3], vec![1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0]);
        let y = run_one(
            &*e,
            &[Some(&x), Some(&Tensor::from_vec(vec![2], vec![2i64, 0]))],
        );
        let y = y.unwrap();
        assert_eq!(y.shape(), [2, 2]);
        assert_eq!(y.to_f64_vec().unwrap(), [3.0, 1.0, 6.0, 4.0]);
        // A 1-D X gives one row; 2-D indices are flattened.
        let x = Tensor::from_vec(vec![4], vec![10i64, 11, 12, 13]);
        let idx = Tensor::from_vec(vec![1, 3], vec![3i64, 3, 1]);
        let y = run_one(&*e, &[Some(&x), Some(&idx)]).unwrap();
        assert_eq!(y.shape(), [1, 3]);
        assert_eq!(y.to_i64_vec().unwrap(), [13, 13, 11]);
        let neg = Tensor::from_vec(vec![1], vec![-1i64]);
        assert!(run_one(&*e, &[Some(&x), Some(&neg)]).is_err());
        let x = Rng::new(7).tensor_f32(&[3, 5, 7]);
        let idx = Tensor::from_vec(vec![5], vec![6i64, 0, 3, 3, 1]);
        gpu_same_bytes(&*e, &[Some(&x), Some(&idx)], "ArrayFeatureExtractor");
    }
}
