//! MaxUnpool (opsets 9, 11, 22): the partial inverse of MaxPool. Each input value goes to the
//! element its index names in a zero tensor, the rest stay 0. The indices are MaxPool's: flat
//! over the whole [N, C, D...] tensor of the size a pool with this kernel, these strides and
//! pads would have come from, (D_in - 1) x stride - pads + kernel per axis.
//!
//! An `output_shape` input (opset 11) only enlarges that tensor: as in ONNX's reference and
//! its test data, the indices still address the inferred shape, whose elements then sit at the
//! same coordinates of the larger output, and the rest of it is 0.
//!
//! Indices that repeat (overlapping pool windows pick one element twice) name one input
//! element twice, so it does not matter which write lands last; the GPU's order is unspecified.

use super::util::{const_input, groups_1d, opt, req};
use super::{BufRef, Dispatch, GpuKernel, InferInput, NodeSpec, Op, OpError, Registry, ValueType};
use crate::IndexFault;
use crate::numeric::from_f64;
use crate::tensor::{DType, Tensor, numel};
use crate::window::geometry::WindowAttrs;
use vkml_shaders::max_unpool;

pub fn register(r: &mut Registry) {
    r.add("MaxUnpool", build);
}

#[derive(Debug)]
struct MaxUnpool {
    kernel: Vec<usize>,
    window: WindowAttrs,
}

fn build(spec: &NodeSpec<'_>) -> Result<Box<dyn Op>, OpError> {
    let window = WindowAttrs::parse("MaxUnpool", spec.attrs)?;
    let Some(kernel) = window.kernel_shape.clone() else {
        return Err(OpError::invalid(
            "MaxUnpool has no kernel_shape attribute (it is required)",
        ));
    };
    if window.dilations.is_some() || spec.attrs.has("auto_pad") {
        return Err(OpError::invalid(
            "MaxUnpool takes kernel_shape, strides and pads only (no dilations, no auto_pad)",
        ));
    }
    Ok(Box::new(MaxUnpool { kernel, window }))
}

impl MaxUnpool {
    /// The shape the indices address: the input of the MaxPool they came from.
    fn unpooled(&self, x: &[usize]) -> Result<Vec<usize>, OpError> {
        let rank = x.len().saturating_sub(2);
        let w = &self.window;
        let bad_len = |v: &Option<Vec<usize>>, want| v.as_ref().is_some_and(|v| v.len() != want);
        if rank == 0
            || self.kernel.len() != rank
            || bad_len(&w.strides, rank)
            || bad_len(&w.pads, 2 * rank)
        {
            return Err(OpError::invalid(format!(
                "MaxUnpool: input {x:?} with kernel_shape {:?}, strides {:?}, pads {:?}; the \
                 input must be [N, C, D...] with one kernel size and stride, and two pads, per \
                 spatial axis",
                self.kernel, w.strides, w.pads
            )));
        }
        let mut shape = x[..2].to_vec();
        for i in 0..rank {
            let stride = w.strides.as_ref().map_or(1, |s| s[i]);
            let pads = w.pads.as_ref().map_or(0, |p| p[i] + p[rank + i]);
            let grown = x[2 + i]
                .saturating_sub(1)
                .checked_mul(stride)
                .and_then(|v| v.checked_add(self.kernel[i]))
                .filter(|&v| v > pads && x[2 + i] > 0);
            let Some(grown) = grown else {
                return Err(OpError::invalid(format!(
                    "MaxUnpool: spatial axis {i} of input {x:?} with kernel {}, stride \
                     {stride} and pads {pads} in all unpools to no elements",
                    self.kernel[i]
                )));
            };
            shape.push(grown - pads);
        }
        Ok(shape)
    }

    fn output_shape(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<usize>, OpError> {
        let x = req(inputs, 0)?.ty;
        let unpooled = self.unpooled(&x.shape)?;
        if opt(inputs, 2).is_none() {
            return Ok(unpooled);
        }
        let given = const_input(inputs, 2)?
            .to_i64_vec()
            .map_err(|e| OpError::invalid(format!("MaxUnpool: output_shape: {e}")))?;
        let fits = given.len() == unpooled.len()
            && given.iter().zip(&unpooled).all(|(&g, &u)| g >= u as i64);
        if !fits {
            return Err(OpError::invalid(format!(
                "MaxUnpool: output_shape {given:?} is smaller than {unpooled:?}, the shape \
                 its indices address; give one at least that large on every axis"
            )));
        }
        Ok(given.iter().map(|&g| g as usize).collect())
    }
}

/// Element `flat` of a tensor of shape `from`, at the same coordinates of one of shape `to`.
fn relocate(flat: usize, from: &[usize], to: &[usize]) -> usize {
    let (mut rest, mut out, mut stride) = (flat, 0, 1);
    for (&f, &t) in from.iter().zip(to).rev() {
        out += rest % f * stride;
        rest /= f;
        stride *= t;
    }
    out
}

fn index_error(index: i64, element: usize, total: usize) -> OpError {
    OpError::invalid(format!(
        "MaxUnpool: index {index} (element {element} of the indices) is out of range for the \
         {total} elements of the unpooled tensor"
    ))
}

impl Op for MaxUnpool {
    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<ValueType>, OpError> {
        let x = req(inputs, 0)?.ty;
        let i = req(inputs, 1)?.ty;
        if !x.dtype.is_float() {
            return Err(OpError::unsupported(format!("MaxUnpool of {}", x.dtype)));
        }
        if i.dtype != DType::I64 || i.shape != x.shape {
            return Err(OpError::invalid(format!(
                "MaxUnpool: indices {i} for input {x}; they must be int64 of the input's shape"
            )));
        }
        Ok(vec![ValueType::new(x.dtype, self.output_shape(inputs)?)])
    }

    fn run_cpu(
        &self,
        inputs: &[Option<&Tensor>],
        outputs: &[ValueType],
    ) -> Result<Vec<Tensor>, OpError> {
        let bad = |e: crate::tensor::TensorError| OpError::invalid(e.to_string());
        let x = req(inputs, 0)?;
        let xv = x.to_f64_vec().map_err(bad)?;
        let idx = req(inputs, 1)?.to_i64_vec().map_err(bad)?;
        let unpooled = self.unpooled(x.shape())?;
        let total = numel(&unpooled);
        let out = &outputs[0].shape;
        let mut y = vec![0.0; numel(out)];
        for (e, (&v, &i)) in xv.iter().zip(&idx).enumerate() {
            let at = usize::try_from(i)
                .ok()
                .filter(|&i| i < total)
                .ok_or_else(|| index_error(i, e, total))?;
            y[relocate(at, &unpooled, out)] = v;
        }
        Ok(vec![from_f64(x.dtype(), out.clone(), y)?])
    }

    fn gpu(&self, inputs: &[Option<&ValueType>], outputs: &[ValueType]) -> Option<GpuKernel> {
        let x = req(inputs, 0).ok()?;
        let out = &outputs[0];
        if x.dtype != DType::F32 || out.numel() == 0 {
            return None;
        }
        let unpooled = self.unpooled(&x.shape).ok()?;
        let w = |v: usize| u32::try_from(v).ok();
        let mut table = vec![w(unpooled.len())?];
        for d in unpooled.iter().chain(&out.shape) {
            table.push(w(*d)?);
        }
        let pass = |variant, n: usize| {
            Some(Dispatch::new(
                variant,
                max_unpool::Buffers {
                    x: BufRef::Input(0),
                    indices: BufRef::Input(1),
                    y: BufRef::Output(0),
                    fault: BufRef::Fault,
                    t: BufRef::Table(table.clone()),
                },
                max_unpool::Params {
                    n: w(n)?,
                    total: w(numel(&unpooled))?,
                },
                groups_1d(n, 256),
            ))
        };
        Some(GpuKernel {
            scratch: vec![],
            dispatches: vec![
                pass(max_unpool::Variant::Zero, out.numel())?,
                pass(max_unpool::Variant::Scatter, x.numel())?,
            ],
        })
    }

    fn index_fault(&self, _inputs: &[Option<&ValueType>], f: &IndexFault) -> OpError {
        index_error(f.index, f.element as usize, f.dim as usize)
    }

    fn flops(&self, inputs: &[Option<&ValueType>], outputs: &[ValueType]) -> u64 {
        let x = inputs.first().copied().flatten().map_or(0, |x| x.numel());
        (x + outputs[0].numel()) as u64
    }
}

#[cfg(test)]
mod tests;
