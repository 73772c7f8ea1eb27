//! BatchNormalization (opsets 1, 6, 7, 9, 14, 15), inference mode only:
//! `Y = (X - mean) / sqrt(var + epsilon) * scale + B`, per channel (axis 1).
//!
//! Across opsets: before 9 the `spatial` attribute may be 0, and then the statistics are per
//! activation (shaped like one sample, C x D1 x ...); from 14, `training_mode` = 1 asks for
//! batch statistics, which this runtime does not compute; from 15 the scale/bias and the
//! mean/variance may have float types other than X's. `is_test` (before 7) is ignored.
//! Training mode (batch statistics and the updated running statistics) is in train.rs.

mod train;

use rayon::prelude::*;

use super::util::{groups_1d, req};
use super::{BufRef, Dispatch, GpuKernel, InferInput, NodeSpec, Op, OpError, Registry, ValueType};
use crate::numeric::float::{FLOAT_DTYPES, Float};
use crate::tensor::{DType, Tensor};
use vkml_shaders::batchnorm;

pub fn register(r: &mut Registry) {
    // f16 / bf16 run through f32 on the CPU.
    r.add("BatchNormalization", |s| {
        Ok(super::via_f32::ViaF32::half_mixed(build(s)?))
    });
}

const PARAM_NAMES: [&str; 4] = ["scale", "B", "input_mean", "input_var"];

fn build(spec: &NodeSpec<'_>) -> Result<Box<dyn Op>, OpError> {
    let a = spec.attrs;
    if spec.num_inputs != 5 {
        return Err(OpError::invalid(format!(
            "BatchNormalization takes 5 inputs (X, scale, B, input_mean, input_var), got {}",
            spec.num_inputs
        )));
    }
    if spec.opset >= 14 {
        if a.int("training_mode", 0)? != 0 {
            return train::build(spec);
        }
        if spec.num_outputs != 1 {
            return Err(OpError::invalid(format!(
                "BatchNormalization: running_mean and running_var are outputs of training mode \
                 only, but this node has {} outputs and training_mode=0",
                spec.num_outputs
            )));
        }
    } else if spec.num_outputs != 1 {
        return Err(OpError::unsupported(format!(
            "BatchNormalization with {} outputs (the training-mode statistics outputs)",
            spec.num_outputs
        )));
    }
    let spatial = a.int("spatial", 1)?;
    let per_activation = match (spatial, spec.opset) {
        (1, _) => false,
        (0, ..=8) => true,
        (0, _) => {
            return Err(OpError::invalid(
                "BatchNormalization: attribute 'spatial' was removed in opset 9",
            ));
        }
        (v, _) => {
            return Err(OpError::invalid(format!(
                "BatchNormalization: 'spatial' must be 0 or 1, got {v}"
            )));
        }
    };
    let epsilon = a.float("epsilon", 1e-5)?;
    if epsilon.is_nan() || epsilon < 0.0 {
        return Err(OpError::invalid(format!(
            "BatchNormalization: epsilon must be a non-negative number, got {epsilon}"
        )));
    }
    Ok(Box::new(BatchNorm {
        epsilon,
        per_activation,
    }))
}

#[derive(Debug, Clone, PartialEq)]
pub struct BatchNorm {
    epsilon: f32,
    /// `spatial` = 0 (opsets before 9): one statistic per element of a sample.
    per_activation: bool,
}

impl BatchNorm {
    /// Checks types and shapes; returns (channels, elements per channel per sample, and
    /// whether the statistics are per activation for these shapes).
    fn check(&self, x: &ValueType, params: &[&ValueType]) -> Result<(usize, usize, bool), OpError> {
        if !FLOAT_DTYPES.contains(&x.dtype) {
            return Err(OpError::unsupported(format!(
                "BatchNormalization on {} (implemented: float, double)",
                x.dtype
            )));
        }
        if x.shape.len() < 2 {
            return Err(OpError::invalid(format!(
                "BatchNormalization: X must be N x C x ..., got shape {:?}",
                x.shape
            )));
        }
        let c = x.shape[1];
        let sample = &x.shape[1..];
        let mut per_activation = false;
        for (name, p) in PARAM_NAMES.iter().zip(params) {
            if !p.dtype.is_float() {
                return Err(OpError::invalid(format!(
                    "BatchNormalization: {name} must be a float tensor, got {}",
                    p.dtype
                )));
            }
            if p.shape == [c] {
                continue;
            }
            if self.per_activation && p.shape == sample {
                per_activation = true;
                continue;
            }
            let want = if self.per_activation {
                format!("[{c}] or {sample:?} (spatial=0)")
            } else {
                format!("[{c}]")
            };
            return Err(OpError::invalid(format!(
                "BatchNormalization: {name} has shape {:?} but X has {c} channels (expected {want})",
                p.shape
            )));
        }
        if per_activation && params.iter().any(|p| p.shape != sample) {
            return Err(OpError::invalid(
                "BatchNormalization: with spatial=0, scale, B, input_mean and input_var must all \
                 have one sample's shape",
            ));
        }
        Ok((c, x.shape[2..].iter().product(), per_activation))
    }
}

/// Per statistic index: (multiplier, offset), so that y = x * a + b.
fn fold(epsilon: f32, p: &[Vec<f64>; 4]) -> Vec<(f64, f64)> {
    let [scale, bias, mean, var] = p;
    (0..scale.len())
        .map(|i| {
            let a = scale[i] / (var[i] + epsilon as f64).sqrt();
            (a, bias[i] - mean[i] * a)
        })
        .collect()
}

fn normalize<T: Float>(x: &[T], ab: &[(f64, f64)], c: usize, s: usize, per_act: bool) -> Vec<T> {
    let mut y = vec![T::default(); x.len()];
    // Per activation the statistics cycle every sample, else every channel plane.
    let chunk = if per_act { (c * s).max(1) } else { s.max(1) };
    y.par_chunks_mut(chunk)
        .zip(x.par_chunks(chunk))
        .enumerate()
        .for_each(|(i, (yc, xc))| {
            if per_act {
                for ((yv, &xv), &(a, b)) in yc.iter_mut().zip(xc).zip(ab) {
                    *yv = T::from_f64(xv.to_f64() * a + b);
                }
            } else {
                let (a, b) = ab[i % c];
                for (yv, &xv) in yc.iter_mut().zip(xc) {
                    *yv = T::from_f64(xv.to_f64() * a + b);
                }
            }
        });
    y
}

impl Op for BatchNorm {
    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<ValueType>, OpError> {
        let x = req(inputs, 0)?.ty;
        let params = (1..5)
            .map(|i| req(inputs, i).map(|p| p.ty))
            .collect::<Result<Vec<_>, _>>()?;
        self.check(x, &params)?;
        Ok(vec![x.clone()])
    }

    fn run_cpu(
        &self,
        inputs: &[Option<&Tensor>],
        _outputs: &[ValueType],
    ) -> Result<Vec<Tensor>, OpError> {
        let x = req(inputs, 0)?;
        let p: Vec<&Tensor> = (1..5).map(|i| req(inputs, i)).collect::<Result<_, _>>()?;
        let types: Vec<ValueType> = p.iter().map(|t| ValueType::of(t)).collect();
        let (c, s, per_act) = self.check(&ValueType::of(x), &types.iter().collect::<Vec<_>>())?;
        let err =
            |e: crate::tensor::TensorError| OpError::invalid(format!("BatchNormalization: {e}"));
        let values = [0, 1, 2, 3].map(|i| p[i].to_f64_vec());
        let [a, b, m, v] = values;
        let ab = fold(
            self.epsilon,
            &[
                a.map_err(err)?,
                b.map_err(err)?,
                m.map_err(err)?,
                v.map_err(err)?,
            ],
        );
        let shape = x.shape().to_vec();
        Ok(vec![match x.dtype() {
            DType::F32 => Tensor::from_vec(
                shape,
                normalize(&x.view::<f32>().map_err(err)?, &ab, c, s, per_act),
            ),
            _ => Tensor::from_vec(
                shape,
                normalize(&x.view::<f64>().map_err(err)?, &ab, c, s, per_act),
            ),
        }])
    }

    fn gpu(&self, inputs: &[Option<&ValueType>], _outputs: &[ValueType]) -> Option<GpuKernel> {
        let all: Vec<&ValueType> = (0..5)
            .map(|i| super::util::opt(inputs, i))
            .collect::<Option<_>>()?;
        // All f32 or all f16 (the CPU side runs f16 through f32, see via_f32.rs).
        let dtype = all[0].dtype;
        if !matches!(dtype, DType::F32 | DType::F16) || all.iter().any(|t| t.dtype != dtype) {
            return None;
        }
        // The shape rule knows f32 and f64 only; the shapes are what it checks here.
        let as_f32: Vec<ValueType> = all
            .iter()
            .map(|t| ValueType::new(DType::F32, t.shape.clone()))
            .collect();
        let refs: Vec<&ValueType> = as_f32.iter().collect();
        let (c, s, per_act) = self.check(refs[0], &refs[1..]).ok()?;
        let n = all[0].numel();
        if n > i32::MAX as usize || n == 0 {
            return None;
        }
        Some(GpuKernel {
            scratch: vec![],
            dispatches: vec![Dispatch::new(
                if dtype == DType::F16 {
                    batchnorm::Variant::F16
                } else {
                    batchnorm::Variant::F32
                },
                batchnorm::Buffers {
                    x: BufRef::Input(0),
                    scale: BufRef::Input(1),
                    bias: BufRef::Input(2),
                    mean: BufRef::Input(3),
                    var: BufRef::Input(4),
                    y: BufRef::Output(0),
                },
                batchnorm::Params {
                    n: n as u32,
                    channels: c as u32,
                    spatial: s as u32,
                    eps_bits: self.epsilon.to_bits(),
                    per_activation: per_act as u32,
                },
                groups_1d(n, 256),
            )],
        })
    }
}

#[cfg(test)]
mod gpu_tests;
#[cfg(test)]
mod tests;
