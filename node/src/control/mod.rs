//! Control flow: If, Loop and Scan. Their subgraphs ("bodies") are models of their own, run by
//! a CPU [`Session`] each, so that a body gets every op, specialisation and fold the runtime
//! has. A body may read values of the graphs around it: those are found when the model is
//! built ([`captured`]) and become extra inputs of the node, after its own, so the outer plan
//! orders and keeps them like any input.
//!
//! The node itself runs on the CPU backend (a Vulkan session runs its neighbours on the GPU);
//! a cluster keeps it, with its bodies, on one device.

mod body;
mod if_op;
mod loop_op;
mod scan_op;
mod slices;
#[cfg(test)]
mod tests;

use std::collections::BTreeSet;

use crate::model::{GraphDef, ModelDef, NodeDef};
use crate::ops::{AttrValue, Op, OpError};

/// A control-flow node's op and the outer values its bodies read, in the order they are
/// appended to its inputs.
pub type Built = (Box<dyn Op>, Vec<String>);

/// [`Built`] for a control-flow node, or `None` for any other node.
pub fn build(node: &NodeDef, model: &ModelDef) -> Option<Result<Built, OpError>> {
    if !node.domain.is_empty() {
        return None;
    }
    let make = match node.op_type.as_str() {
        "If" => if_op::build,
        "Loop" => loop_op::build,
        "Scan" => scan_op::build,
        _ => return None,
    };
    let mut names = BTreeSet::new();
    for v in node.attrs.0.values() {
        if let AttrValue::Graph(g) = v {
            names.extend(captured(g));
        }
    }
    let names: Vec<String> = names.into_iter().collect();
    Some(make(node, model, &names).map(|op| (op, names)))
}

/// The body attribute `name` of a node.
fn graph_attr<'a>(node: &'a NodeDef, name: &str) -> Result<&'a GraphDef, OpError> {
    match node.attrs.get(name) {
        Some(AttrValue::Graph(g)) => Ok(g),
        Some(_) => Err(OpError::invalid(format!(
            "{}: attribute '{name}' is not a graph",
            node.op_type
        ))),
        None => Err(OpError::invalid(format!(
            "{} has no '{name}' graph",
            node.op_type
        ))),
    }
}

/// Names a graph reads that it does not define (its inputs, initializers and nodes' outputs),
/// its subgraphs' included: values of the scopes around it.
pub fn captured(g: &GraphDef) -> BTreeSet<String> {
    let mut defined: BTreeSet<&str> = g.inputs.iter().map(|v| v.name.as_str()).collect();
    defined.extend(g.initializers.iter().map(|(n, _)| n.as_str()));
    defined.extend(g.deferred.iter().map(|d| d.name.as_str()));
    for n in &g.nodes {
        defined.extend(n.outputs.iter().map(String::as_str));
    }
    let mut used: BTreeSet<String> = BTreeSet::new();
    for n in &g.nodes {
        used.extend(n.inputs.iter().filter(|s| !s.is_empty()).cloned());
        for v in n.attrs.0.values() {
            if let AttrValue::Graph(sub) = v {
                used.extend(captured(sub));
            }
        }
    }
    used.extend(g.outputs.iter().map(|v| v.name.clone()));
    used.into_iter()
        .filter(|n| !defined.contains(n.as_str()))
        .collect()
}
