//! Constant and Shape: ops whose output is known while planning. They run on the CPU only
//! (the graph layer folds them), so they have no GPU kernel.

use super::attr_since;
use crate::tensor::Tensor;
use crate::util::req;
use crate::{InferInput, NodeSpec, Op, OpError, ValueType};

#[derive(Debug)]
pub(super) struct Constant {
    value: Tensor,
}

/// Every attribute that can hold a Constant's value, with the opset that introduced it.
const VALUE_ATTRS: [(&str, i64); 8] = [
    ("value", 1),
    ("sparse_value", 11),
    ("value_float", 12),
    ("value_floats", 12),
    ("value_int", 12),
    ("value_ints", 12),
    ("value_string", 12),
    ("value_strings", 12),
];

pub(super) fn build_constant(spec: &NodeSpec<'_>) -> Result<Box<dyn Op>, OpError> {
    let present: Vec<&str> = VALUE_ATTRS
        .iter()
        .map(|&(name, _)| name)
        .filter(|name| spec.attrs.has(name))
        .collect();
    let name = match present.as_slice() {
        [one] => *one,
        [] => {
            return Err(OpError::invalid(
                "Constant needs one value attribute (value, value_float(s), value_int(s)...)",
            ));
        }
        many => {
            return Err(OpError::invalid(format!(
                "Constant must have exactly one value attribute, found {}",
                many.join(", ")
            )));
        }
    };
    for (attr, since) in VALUE_ATTRS {
        attr_since(spec, attr, since)?;
    }
    let attrs = spec.attrs;
    let value = match name {
        "value" => attrs
            .tensor_opt("value")?
            .cloned()
            .ok_or_else(|| OpError::invalid("attribute 'value' should be a tensor"))?,
        "value_float" => Tensor::scalar(attrs.float("value_float", 0.0)?),
        "value_floats" => {
            let v = attrs
                .floats_opt("value_floats")?
                .unwrap_or_default()
                .to_vec();
            Tensor::from_vec(vec![v.len()], v)
        }
        "value_int" => Tensor::scalar(attrs.int("value_int", 0)?),
        "value_ints" => {
            let v = attrs.ints_opt("value_ints")?.unwrap_or_default().to_vec();
            Tensor::from_vec(vec![v.len()], v)
        }
        "sparse_value" => {
            return Err(OpError::unsupported(
                "Constant with a sparse_value (sparse tensors are not implemented)",
            ));
        }
        other => {
            // value_string(s): there is no string element type in this runtime.
            return Err(OpError::unsupported(format!(
                "Constant with {other} (string tensors are not implemented)"
            )));
        }
    };
    Ok(Box::new(Constant { value }))
}

impl Op for Constant {
    fn infer(&self, _inputs: &[Option<InferInput<'_>>]) -> Result<Vec<ValueType>, OpError> {
        Ok(vec![ValueType::of(&self.value)])
    }

    fn run_cpu(
        &self,
        _inputs: &[Option<&Tensor>],
        _outputs: &[ValueType],
    ) -> Result<Vec<Tensor>, OpError> {
        Ok(vec![self.value.clone()])
    }

    fn flops(&self, _inputs: &[Option<&ValueType>], _outputs: &[ValueType]) -> u64 {
        0
    }
}

#[derive(Debug)]
pub(super) struct Shape {
    start: i64,
    end: Option<i64>,
}

pub(super) fn build_shape(spec: &NodeSpec<'_>) -> Result<Box<dyn Op>, OpError> {
    attr_since(spec, "start", 15)?;
    attr_since(spec, "end", 15)?;
    Ok(Box::new(Shape {
        start: spec.attrs.int("start", 0)?,
        end: spec.attrs.int_opt("end")?,
    }))
}

impl Shape {
    /// The slice of `shape` that start/end select: negative counts from the back, then both
    /// are clamped to [0, rank]; start past end selects nothing.
    fn dims(&self, shape: &[usize]) -> Vec<i64> {
        let r = shape.len() as i64;
        let clamp = |a: i64| (if a < 0 { a.saturating_add(r) } else { a }).clamp(0, r) as usize;
        let start = clamp(self.start);
        let end = clamp(self.end.unwrap_or(r));
        shape
            .get(start..end.max(start))
            .unwrap_or_default()
            .iter()
            .map(|&d| d as i64)
            .collect()
    }
}

impl Op for Shape {
    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<ValueType>, OpError> {
        let x = req(inputs, 0)?;
        let n = self.dims(&x.ty.shape).len();
        Ok(vec![ValueType::new(crate::tensor::DType::I64, vec![n])])
    }

    fn run_cpu(
        &self,
        inputs: &[Option<&Tensor>],
        _outputs: &[ValueType],
    ) -> Result<Vec<Tensor>, OpError> {
        let dims = self.dims(req(inputs, 0)?.shape());
        Ok(vec![Tensor::from_vec(vec![dims.len()], dims)])
    }

    fn known_outputs(&self, inputs: &[Option<&ValueType>]) -> Option<Vec<Tensor>> {
        let dims = self.dims(&inputs.first().copied().flatten()?.shape);
        Some(vec![Tensor::from_vec(vec![dims.len()], dims)])
    }

    fn flops(&self, _inputs: &[Option<&ValueType>], _outputs: &[ValueType]) -> u64 {
        0
    }
}
