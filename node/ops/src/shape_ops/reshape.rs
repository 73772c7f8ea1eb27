//! Reshape and Flatten: views whose output shape comes from a shape list or an axis.

use super::view::{copy_kernel, reshape_to};
use super::{attr_since, int_list};
use crate::tensor::{Tensor, numel};
use crate::util::{const_input, req};
use crate::{GpuKernel, InferInput, NodeSpec, Op, OpError, ValueType};

/// Where Reshape finds its target shape: an attribute before opset 5, input 1 from then on.
#[derive(Debug, Clone, PartialEq)]
enum ShapeSource {
    Attr(Vec<i64>),
    Input,
}

#[derive(Debug)]
pub(super) struct Reshape {
    source: ShapeSource,
    /// Opset 14: a 0 in the shape means size zero rather than "keep the input's size".
    allowzero: bool,
}

pub(super) fn build_reshape(spec: &NodeSpec<'_>) -> Result<Box<dyn Op>, OpError> {
    attr_since(spec, "allowzero", 14)?;
    let source = if spec.opset < 5 {
        let shape = spec.attrs.ints_opt("shape")?.ok_or_else(|| {
            OpError::invalid("Reshape before opset 5 needs its 'shape' attribute")
        })?;
        ShapeSource::Attr(shape.to_vec())
    } else {
        if spec.attrs.has("shape") {
            return Err(OpError::invalid(
                "Reshape from opset 5 takes its shape as input 1, not as an attribute",
            ));
        }
        ShapeSource::Input
    };
    let allowzero = match spec.attrs.int("allowzero", 0)? {
        0 => false,
        1 => true,
        other => {
            return Err(OpError::invalid(format!(
                "attribute 'allowzero' must be 0 or 1, found {other}"
            )));
        }
    };
    Ok(Box::new(Reshape { source, allowzero }))
}

/// The output shape of reshaping `input` to the ONNX shape list `spec` (0 = keep the input's
/// size unless `allowzero`, -1 = whatever makes the element counts match).
pub(super) fn reshape_shape(
    input: &[usize],
    spec: &[i64],
    allowzero: bool,
) -> Result<Vec<usize>, OpError> {
    let fail =
        |why: String| OpError::invalid(format!("cannot reshape {input:?} to {spec:?}: {why}"));
    let mut out = Vec::with_capacity(spec.len());
    let mut inferred = None;
    for (i, &v) in spec.iter().enumerate() {
        let dim = match v {
            -1 => {
                if inferred.replace(i).is_some() {
                    return Err(fail("at most one dimension may be -1".into()));
                }
                1
            }
            0 if allowzero => 0,
            0 => *input.get(i).ok_or_else(|| {
                fail(format!(
                    "a 0 at position {i} copies input dimension {i}, but the input has rank {}",
                    input.len()
                ))
            })?,
            v if v < 0 => return Err(fail(format!("dimension {v} is negative"))),
            v => crate::size::Size::from_i64(v, format_args!("dimension {i}"))
                .map_err(|e| fail(e.to_string()))?
                .get(),
        };
        out.push(dim);
    }
    let total = numel(input);
    let known = out
        .iter()
        .try_fold(1usize, |acc, &d| acc.checked_mul(d))
        .ok_or_else(|| fail("the shape's element count overflows".into()))?;
    if let Some(i) = inferred {
        if allowzero && spec.contains(&0) {
            return Err(fail(
                "with allowzero=1 a shape may not hold both 0 and -1".into(),
            ));
        }
        if known == 0 {
            // Any size would fit: numpy and onnxruntime both refuse to guess.
            return Err(fail(
                "the other dimensions hold zero elements, so -1 is ambiguous".into(),
            ));
        }
        if !total.is_multiple_of(known) {
            return Err(fail(format!(
                "{total} elements do not divide into rows of {known}"
            )));
        }
        out[i] = total / known;
    } else if known != total {
        return Err(fail(format!(
            "the input has {total} elements, the shape {known}"
        )));
    }
    Ok(out)
}

impl Reshape {
    fn shape_for(&self, input: &[usize], shape: Option<&Tensor>) -> Result<Vec<usize>, OpError> {
        match (&self.source, shape) {
            (ShapeSource::Attr(s), _) => reshape_shape(input, s, self.allowzero),
            (ShapeSource::Input, Some(t)) => {
                reshape_shape(input, &int_list(t, "Reshape's shape")?, self.allowzero)
            }
            (ShapeSource::Input, None) => Err(OpError::invalid("input 1 (shape) is required")),
        }
    }
}

impl Op for Reshape {
    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<ValueType>, OpError> {
        let x = req(inputs, 0)?;
        let shape = match self.source {
            ShapeSource::Attr(_) => None,
            ShapeSource::Input => Some(const_input(inputs, 1)?),
        };
        Ok(vec![ValueType::new(
            x.ty.dtype,
            self.shape_for(&x.ty.shape, shape)?,
        )])
    }

    fn run_cpu(
        &self,
        inputs: &[Option<&Tensor>],
        outputs: &[ValueType],
    ) -> Result<Vec<Tensor>, OpError> {
        // Recomputed from the actual shape input rather than trusted from `outputs`, so a
        // caller that passes mismatched types gets an error, not a silently different view.
        let x = req(inputs, 0)?;
        let shape = match self.source {
            ShapeSource::Attr(_) => None,
            ShapeSource::Input => Some(req(inputs, 1)?),
        };
        let out = ValueType::new(x.dtype(), self.shape_for(x.shape(), shape)?);
        if outputs.first().is_some_and(|o| *o != out) {
            return Err(OpError::invalid(format!(
                "the output was planned as {} but the inputs give {out}",
                outputs[0]
            )));
        }
        reshape_to(inputs, &[out])
    }

    fn gpu(&self, _inputs: &[Option<&ValueType>], outputs: &[ValueType]) -> Option<GpuKernel> {
        copy_kernel(outputs.first()?)
    }

    fn is_view(&self) -> bool {
        true
    }

    fn flops(&self, _inputs: &[Option<&ValueType>], _outputs: &[ValueType]) -> u64 {
        0
    }
}

#[derive(Debug)]
pub(super) struct Flatten {
    axis: i64,
    /// Opset 11 allows a negative axis (counted from the back).
    negative_ok: bool,
}

pub(super) fn build_flatten(spec: &NodeSpec<'_>) -> Result<Box<dyn Op>, OpError> {
    Ok(Box::new(Flatten {
        axis: spec.attrs.int("axis", 1)?,
        negative_ok: spec.opset >= 11,
    }))
}

impl Flatten {
    fn shape_for(&self, input: &[usize]) -> Result<Vec<usize>, OpError> {
        let r = input.len() as i64;
        let lo = if self.negative_ok { -r } else { 0 };
        if self.axis < lo || self.axis > r {
            return Err(OpError::invalid(format!(
                "Flatten axis {} is outside [{lo}, {r}] for an input of shape {input:?}",
                self.axis
            )));
        }
        let axis = if self.axis < 0 {
            self.axis + r
        } else {
            self.axis
        } as usize;
        Ok(vec![numel(&input[..axis]), numel(&input[axis..])])
    }
}

impl Op for Flatten {
    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<ValueType>, OpError> {
        let x = req(inputs, 0)?;
        Ok(vec![ValueType::new(
            x.ty.dtype,
            self.shape_for(&x.ty.shape)?,
        )])
    }

    fn run_cpu(
        &self,
        inputs: &[Option<&Tensor>],
        _outputs: &[ValueType],
    ) -> Result<Vec<Tensor>, OpError> {
        let x = req(inputs, 0)?;
        reshape_to(
            inputs,
            &[ValueType::new(x.dtype(), self.shape_for(x.shape())?)],
        )
    }

    fn gpu(&self, _inputs: &[Option<&ValueType>], outputs: &[ValueType]) -> Option<GpuKernel> {
        copy_kernel(outputs.first()?)
    }

    fn is_view(&self) -> bool {
        true
    }

    fn flops(&self, _inputs: &[Option<&ValueType>], _outputs: &[ValueType]) -> u64 {
        0
    }
}
