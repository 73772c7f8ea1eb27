//! If: runs then_branch or else_branch on the captured values.

use super::body::{Body, Infer};
use crate::model::{ModelDef, NodeDef};
use crate::ops::util::req;
use crate::ops::{InferInput, Op, OpError, ValueType};
use crate::tensor::{DType, Tensor};

#[derive(Debug)]
struct If {
    then: Body,
    otherwise: Body,
}

pub fn build(
    node: &NodeDef,
    model: &ModelDef,
    captured: &[String],
) -> Result<Box<dyn Op>, OpError> {
    let then = Body::new(node, "then_branch", model, captured)?;
    let otherwise = Body::new(node, "else_branch", model, captured)?;
    for b in [&then, &otherwise] {
        if b.formal() != 0 || b.outputs() != node.outputs.len() {
            return Err(OpError::invalid(format!(
                "If: {b:?}: a branch takes no inputs and gives the node's {} outputs",
                node.outputs.len()
            )));
        }
    }
    Ok(Box::new(If { then, otherwise }))
}

fn cond_of(t: &Tensor) -> Result<bool, OpError> {
    match t.view_bool() {
        Ok(v) if v.len() == 1 => Ok(v[0]),
        _ => Err(OpError::invalid(format!(
            "If: the condition is {} {:?}; it must be one bool",
            t.dtype(),
            t.shape()
        ))),
    }
}

impl If {
    /// A branch's output types, or which of the node's inputs it needs the value of.
    fn branch(
        &self,
        b: &Body,
        inputs: &[Option<InferInput<'_>>],
    ) -> Result<Vec<ValueType>, OpError> {
        let rest = &inputs[1..];
        let types: Vec<ValueType> = rest
            .iter()
            .map(|i| i.map(|i| i.ty.clone()))
            .collect::<Option<_>>()
            .ok_or_else(|| OpError::invalid("If: a captured value is missing"))?;
        let known: Vec<Option<&Tensor>> = rest.iter().map(|i| i.and_then(|i| i.value)).collect();
        match b.infer(&types, &known)? {
            Infer::Types(t) => Ok(t),
            Infer::NeedsValues(v) => Err(OpError::NeedsValue(1 + v[0])),
        }
    }
}

impl Op for If {
    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<ValueType>, OpError> {
        let cond = req(inputs, 0)?;
        if cond.ty.dtype != DType::Bool || cond.ty.numel() != 1 {
            return Err(OpError::invalid(format!(
                "If: the condition is {}; it must be one bool",
                cond.ty
            )));
        }
        if let Some(v) = cond.value {
            let b = if cond_of(v)? {
                &self.then
            } else {
                &self.otherwise
            };
            return self.branch(b, inputs);
        }
        let a = self.branch(&self.then, inputs)?;
        let b = self.branch(&self.otherwise, inputs)?;
        if a == b {
            Ok(a)
        } else {
            // The branches give different types: the plan is made for the condition's value.
            Err(OpError::NeedsValue(0))
        }
    }

    fn run_cpu(
        &self,
        inputs: &[Option<&Tensor>],
        _outputs: &[ValueType],
    ) -> Result<Vec<Tensor>, OpError> {
        let b = if cond_of(req(inputs, 0)?)? {
            &self.then
        } else {
            &self.otherwise
        };
        let rest: Vec<Tensor> = inputs[1..]
            .iter()
            .map(|t| t.cloned())
            .collect::<Option<_>>()
            .ok_or_else(|| OpError::invalid("If: a captured value is missing"))?;
        b.run(&rest)
    }
}
