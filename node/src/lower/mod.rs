//! Sequences and optionals, lowered to tensors when a model is planned.
//!
//! ONNX's sequence and optional values (SequenceConstruct, SplitToSequence, Optional...) are
//! lists and maybes of tensors. vkml plans for concrete inputs anyway (a plan per set of
//! input shapes), so it lowers them there: knowing how long each sequence fed in is and
//! which optionals hold a value, every sequence op becomes either nothing (SequenceAt,
//! SequenceInsert and the like only choose which tensors flow on) or tensor ops
//! (SplitToSequence to Slice, ConcatFromSequence to Concat), a SequenceMap or a Loop carrying
//! a sequence is unrolled, and an If making one takes its branch. What is left is a tensor
//! graph, planned and run like any model, on any device, the GPU included; the session keeps
//! one per input structure ([`Structured`]).
//!
//! A position, a condition or a trip count that decides structure must be known when
//! planning: a constant, or computed from graph inputs whose values then key the lowered
//! graph, as shape inputs key a plan (graph/specialize.rs).

mod engine;
mod rules;
mod structured;
#[cfg(test)]
mod tests;

pub use structured::Structured;

use crate::error::{Error, Result};
use crate::io::Value;
use crate::model::{GraphDef, Kind, NodeDef};
use crate::ops::{AttrValue, ValueType};
use crate::tensor::Tensor;

/// The ops lowered here (default domain). Identity, If and Loop are lowered too when they
/// carry a sequence or an optional.
pub const OPS: [&str; 12] = [
    "SequenceEmpty",
    "SequenceConstruct",
    "SequenceInsert",
    "SequenceAt",
    "SequenceErase",
    "SequenceLength",
    "SplitToSequence",
    "ConcatFromSequence",
    "SequenceMap",
    "Optional",
    "OptionalHasElement",
    "OptionalGetElement",
];

/// Whether a graph needs lowering: it takes or gives a sequence or optional, runs one of
/// [`OPS`], or has a subgraph that declares one (an If whose branches make sequences).
pub fn uses_structure(g: &GraphDef) -> bool {
    declares_structure(g) || structured_node(g).is_some()
}

/// The first node of `g` that is one of [`OPS`] or has a subgraph declaring a sequence or an
/// optional.
fn structured_node(g: &GraphDef) -> Option<&NodeDef> {
    g.nodes.iter().find(|n| {
        n.domain.is_empty() && OPS.contains(&n.op_type.as_str())
            || n.attrs.0.values().any(|a| match a {
                AttrValue::Graph(sub) => declares_structure(sub),
                _ => false,
            })
    })
}

fn declares_structure(g: &GraphDef) -> bool {
    g.inputs
        .iter()
        .chain(&g.outputs)
        .any(|v| !v.kind.is_tensor())
}

/// The structure and tensor types of a value: what a lowered graph is made for.
#[derive(Debug, Clone, PartialEq)]
pub enum Shape {
    Tensor(ValueType),
    Sequence(Vec<ValueType>),
    /// `None` is the empty optional.
    Optional(Option<Box<Shape>>),
}

impl Shape {
    /// The shape of a value given as input `name`; maps and sequences of anything but
    /// tensors are refused.
    pub fn of(name: &str, v: &Value) -> Result<Shape> {
        Ok(match v {
            Value::Tensor(t) => Shape::Tensor(ValueType::of(t)),
            Value::Sequence(items) => Shape::Sequence(
                items
                    .iter()
                    .map(|i| match i {
                        Value::Tensor(t) => Ok(ValueType::of(t)),
                        other => Err(Error::Input(format!(
                            "'{name}' is a sequence of {}s; vkml runs sequences of tensors",
                            other.kind()
                        ))),
                    })
                    .collect::<Result<_>>()?,
            ),
            Value::Optional(None) => Shape::Optional(None),
            Value::Optional(Some(v)) => Shape::Optional(Some(Box::new(Shape::of(name, v)?))),
            Value::Map { .. } => {
                return Err(Error::Input(format!(
                    "'{name}' is a map; vkml runs tensors, sequences and optionals"
                )));
            }
        })
    }

    /// Whether a value of this shape may be given where `kind` is declared. An optional
    /// takes a plain value too, as holding it.
    fn fits(&self, kind: &Kind) -> bool {
        match (self, kind) {
            (Shape::Tensor(_), Kind::Tensor) | (Shape::Sequence(_), Kind::Sequence(_)) => true,
            (Shape::Optional(None), Kind::Optional(_)) => true,
            (Shape::Optional(Some(s)), Kind::Optional(k)) => s.fits(k),
            (s, Kind::Optional(k)) => s.fits(k),
            _ => false,
        }
    }
}

/// The tensors of a value, in the order its [`Shape`] flattens them to the lowered graph's
/// inputs.
fn flatten(v: &Value, out: &mut Vec<Tensor>) {
    match v {
        Value::Tensor(t) => out.push(t.clone()),
        Value::Sequence(items) => items.iter().for_each(|i| flatten(i, out)),
        Value::Optional(Some(v)) => flatten(v, out),
        Value::Optional(None) | Value::Map { .. } => {}
    }
}

/// Where a graph output's tensors are among the lowered graph's outputs.
#[derive(Debug, Clone, PartialEq)]
enum Layout {
    Tensor(usize),
    Sequence(Vec<usize>),
    Optional(Option<Box<Layout>>),
}

impl Layout {
    /// The value this layout makes of the lowered graph's outputs.
    fn assemble(&self, outs: &[Tensor]) -> Value {
        match self {
            Layout::Tensor(i) => Value::Tensor(outs[*i].clone()),
            Layout::Sequence(items) => Value::Sequence(
                items
                    .iter()
                    .map(|&i| Value::Tensor(outs[i].clone()))
                    .collect(),
            ),
            Layout::Optional(None) => Value::Optional(None),
            Layout::Optional(Some(l)) => Value::Optional(Some(Box::new(l.assemble(outs)))),
        }
    }
}
