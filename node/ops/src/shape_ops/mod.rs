//! Ops that describe bytes rather than compute them: the views (Reshape, Flatten, Squeeze,
//! Unsqueeze, Identity), whose output is their input under another shape, and the ops whose
//! output is known while planning (Constant, Shape), which the graph layer folds away.

mod constant;
mod reshape;
mod squeeze;
mod view;

use super::{NodeSpec, OpError, Registry};

pub(crate) use view::copy_kernel;

pub fn register(r: &mut Registry) {
    r.add("Reshape", reshape::build_reshape);
    r.add("Flatten", reshape::build_flatten);
    r.add("Squeeze", squeeze::build_squeeze);
    r.add("Unsqueeze", squeeze::build_unsqueeze);
    r.add("Identity", view::build_identity);
    r.add("Constant", constant::build_constant);
    r.add("Shape", constant::build_shape);
}

/// Rejects an attribute that the node's opset does not define yet: a model that carries one is
/// malformed, and silently ignoring it would compute something the author did not ask for.
pub(super) fn attr_since(spec: &NodeSpec<'_>, name: &str, since: i64) -> Result<(), OpError> {
    if spec.attrs.has(name) && spec.opset < since {
        return Err(OpError::invalid(format!(
            "attribute '{name}' of {} exists from opset {since}; this model declares opset {}",
            spec.op_type, spec.opset
        )));
    }
    Ok(())
}

/// Reads an axes-like list (Squeeze's and Unsqueeze's `axes` input, Reshape's `shape`) from a
/// tensor: a 1-D (or scalar) tensor of int64, or int32 which some exporters write.
pub(super) fn int_list(t: &crate::tensor::Tensor, what: &str) -> Result<Vec<i64>, OpError> {
    use crate::tensor::DType;
    if !matches!(t.dtype(), DType::I64 | DType::I32) {
        return Err(OpError::invalid(format!(
            "{what} must be a tensor of int64, found {}",
            t.dtype()
        )));
    }
    if t.rank() > 1 {
        return Err(OpError::invalid(format!(
            "{what} must be a 1-D tensor, found shape {:?}",
            t.shape()
        )));
    }
    t.to_i64_vec()
        .map_err(|e| OpError::invalid(format!("{what}: {e}")))
}

#[cfg(test)]
mod tests;
