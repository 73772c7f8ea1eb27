//! RMSNormalization (ONNX opset 23) and SimplifiedLayerNormalization (onnxruntime's, the same
//! norm with an optional inv_std_var output): `y = x / sqrt(mean(x^2) + eps) * scale` over
//! the axes from `axis` on, the scale broadcast to the input. Y has the scale's type.

use super::cpu::{expand, f64s, normalize};
use super::gpu::{RowNorm, kernel, scale_block};
use super::{FLOATS, stash_type};
use crate::numeric::from_f64;
use crate::tensor::{DType, Tensor, numel};
use crate::util::{broadcast_shapes, expect_dtype, req};
use crate::{GpuKernel, InferInput, NodeSpec, Op, OpError, ValueType};

#[derive(Debug)]
pub struct Rms {
    name: &'static str,
    axis: i64,
    epsilon: f32,
    /// The dtype of inv_std_var.
    stash: DType,
    num_outputs: usize,
}

impl Rms {
    fn build(spec: &NodeSpec<'_>, name: &'static str, max_outputs: usize) -> Result<Rms, OpError> {
        let a = spec.attrs;
        if spec.num_outputs > max_outputs {
            return Err(OpError::invalid(format!(
                "{name}: {} outputs, at most {max_outputs} exist",
                spec.num_outputs
            )));
        }
        Ok(Rms {
            name,
            axis: a.int("axis", -1)?,
            epsilon: a.float("epsilon", 1e-5)?,
            stash: stash_type(name, a.int("stash_type", 1)?)?,
            num_outputs: spec.num_outputs.max(1),
        })
    }

    pub fn build_onnx(spec: &NodeSpec<'_>) -> Result<Box<dyn Op>, OpError> {
        Ok(Box::new(Self::build(spec, "RMSNormalization", 1)?))
    }

    pub fn build_simplified(spec: &NodeSpec<'_>) -> Result<Box<dyn Op>, OpError> {
        Ok(Box::new(Self::build(
            spec,
            "SimplifiedLayerNormalization",
            2,
        )?))
    }

    /// The first normalised axis, after checking that the scale broadcasts to the input.
    fn axis_for(&self, x: &[usize], scale: &[usize]) -> Result<usize, OpError> {
        let axis = crate::util::axis(self.axis, x.len())
            .map_err(|e| OpError::invalid(format!("{}: {e}", self.name)))?;
        let fits = scale.len() <= x.len() && broadcast_shapes(scale, x).is_ok_and(|b| b == x);
        if !fits {
            return Err(OpError::invalid(format!(
                "{}: scale {scale:?} does not broadcast to the input {x:?}",
                self.name
            )));
        }
        Ok(axis)
    }

    fn stats_shape(x: &[usize], axis: usize) -> Vec<usize> {
        x.iter()
            .enumerate()
            .map(|(i, &d)| if i < axis { d } else { 1 })
            .collect()
    }
}

impl Op for Rms {
    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<ValueType>, OpError> {
        let x = req(inputs, 0)?.ty;
        let scale = req(inputs, 1)?.ty;
        expect_dtype(x, FLOATS, &format!("{}: input X", self.name))?;
        expect_dtype(scale, FLOATS, &format!("{}: scale", self.name))?;
        let axis = self.axis_for(&x.shape, &scale.shape)?;
        let mut out = vec![ValueType::new(scale.dtype, x.shape.clone())];
        if self.num_outputs > 1 {
            out.push(ValueType::new(
                self.stash,
                Self::stats_shape(&x.shape, axis),
            ));
        }
        Ok(out)
    }

    fn run_cpu(
        &self,
        inputs: &[Option<&Tensor>],
        outputs: &[ValueType],
    ) -> Result<Vec<Tensor>, OpError> {
        let x = req(inputs, 0)?;
        let scale = req(inputs, 1)?;
        let axis = self.axis_for(x.shape(), scale.shape())?;
        let shape = x.shape();
        let (rows, len) = (numel(&shape[..axis]), numel(&shape[axis..]));
        let s = f64s(scale)?;
        // A scale that is the same for every row is expanded to one row only.
        let lead = scale.rank().saturating_sub(shape.len() - axis);
        let gamma = if scale.shape()[..lead].iter().all(|&d| d == 1) {
            expand(&s, &scale.shape()[lead..], &shape[axis..])
        } else {
            expand(&s, scale.shape(), shape)
        };
        let n = normalize(
            &f64s(x)?,
            rows,
            len,
            false,
            self.epsilon as f64,
            &gamma,
            None,
        );
        let mut out = vec![from_f64(scale.dtype(), shape.to_vec(), n.y)?];
        if let Some(o) = outputs.get(1) {
            out.push(from_f64(o.dtype, o.shape.clone(), n.inv)?);
        }
        Ok(out)
    }

    fn gpu(&self, inputs: &[Option<&ValueType>], outputs: &[ValueType]) -> Option<GpuKernel> {
        let x = req(inputs, 0).ok()?;
        let scale = req(inputs, 1).ok()?;
        if scale.dtype != x.dtype || (outputs.len() > 1 && self.stash != DType::F32) {
            return None;
        }
        let axis = self.axis_for(&x.shape, &scale.shape).ok()?;
        let (gd, gs) = scale_block(&scale.shape, &x.shape[axis..])?;
        let k = RowNorm {
            rows: numel(&x.shape[..axis]),
            len: numel(&x.shape[axis..]),
            layer: false,
            eps: self.epsilon,
            gd,
            gs,
            x: 0,
            skip: None,
            gamma: 1,
            beta: None,
            bias: None,
            mean: None,
            inv: (outputs.len() > 1).then_some(1),
            sum: None,
        };
        kernel(x.dtype, &k)
    }

    fn flops(&self, inputs: &[Option<&ValueType>], _outputs: &[ValueType]) -> u64 {
        inputs
            .first()
            .copied()
            .flatten()
            .map_or(0, |x| 4 * x.numel() as u64)
    }
}
