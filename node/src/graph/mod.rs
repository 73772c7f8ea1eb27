//! The graph IR: values by index, ops built from the registry, a topological order, and
//! specialisation to concrete input shapes (dtype and shape inference with constant folding,
//! which resolves the Shape -> Gather -> Unsqueeze -> Concat -> Reshape chains exporters emit),
//! and to the values of the graph inputs a shape rule needs (see specialize.rs).

mod expand;
mod fuse;
mod fuse_conv;
#[cfg(test)]
mod fuse_conv_tests;
mod fuse_norm;
#[cfg(test)]
mod fuse_norm_tests;
mod fuse_qdq;
#[cfg(test)]
mod fuse_qdq_tests;
#[cfg(test)]
mod fuse_tests;
mod specialize;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;

use crate::error::{Error, Result};
use crate::model::{ModelDef, ValueDef};
use crate::ops::{self, Attrs, NodeSpec, Op, ValueType};
use crate::tensor::Tensor;

pub use specialize::SpecializeError;

pub type ValueId = usize;

pub struct Node {
    pub name: String,
    pub op_type: String,
    /// "" for the default domain.
    pub domain: String,
    /// What the op was built from: a cluster fragment ships them, to rebuild the op elsewhere.
    pub attrs: Attrs,
    pub op: Box<dyn Op>,
    /// None for an omitted optional input.
    pub inputs: Vec<Option<ValueId>>,
    pub outputs: Vec<ValueId>,
}

pub struct Graph {
    /// Opset of the default domain: what the ops were built for (and which broadcasting and
    /// Clip rules its nodes follow).
    pub opset: i64,
    pub value_names: Vec<String>,
    /// In a topological order.
    pub nodes: Vec<Node>,
    /// Initializer values.
    pub initializers: Vec<Option<Tensor>>,
    /// Initializers whose bytes are not here (`GraphDef::deferred`), with their types: they
    /// count as weights when planned, and are never folded.
    pub deferred: BTreeMap<ValueId, ValueType>,
    pub inputs: Vec<(ValueId, ValueDef)>,
    pub outputs: Vec<(ValueId, ValueDef)>,
}

/// The graph at concrete input types: every value's type, the values known before running,
/// and the nodes left to run.
/// Which fusion passes specialisation runs (`Tuning::fusion`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum Fusion {
    /// None: every node as the model has it.
    Off,
    /// Elementwise chains only (graph/fuse.rs).
    Chains,
    /// Elementwise chains, row norms and SwiGLU activations into the products of a few rows
    /// that read them (graph/fuse_norm.rs), and QDQ convolutions into integer ones
    /// (graph/fuse_qdq.rs).
    #[default]
    All,
    /// The CPU backend's: convolutions with the Add and activation reading them
    /// (graph/fuse_conv.rs), whose fused op has no GPU kernel.
    Cpu,
}

impl Fusion {
    /// The passes for a plan as tuned (`self`): the CPU backend's where no GPU may run it,
    /// none where fusion is off.
    pub fn for_plan(self, gpu: bool) -> Fusion {
        match (self, gpu) {
            (Fusion::Off, _) => Fusion::Off,
            (tuned, true) => tuned,
            (_, false) => Fusion::Cpu,
        }
    }
}

pub struct Specialized {
    pub types: Vec<Option<ValueType>>,
    pub consts: Vec<Option<Tensor>>,
    /// Node indices, in topological order: below `Graph::nodes.len()` into `Graph::nodes`,
    /// from there into `extra`. Use [`Specialized::node`].
    pub live: Vec<usize>,
    /// Nodes made for this specialisation (fused elementwise chains, graph/fuse.rs), with the
    /// attributes `ops::build` rebuilds each from.
    pub extra: Vec<(Node, Attrs)>,
}

impl Graph {
    /// Whether `v` is one of the model's initializers (its bytes in the file, or deferred),
    /// rather than a constant folded from them: the same bytes under every specialisation.
    pub fn is_initializer(&self, v: ValueId) -> bool {
        self.initializers.get(v).is_some_and(Option::is_some) || self.deferred.contains_key(&v)
    }
}

impl Specialized {
    /// The node a `live` entry names.
    pub fn node<'a>(&'a self, graph: &'a Graph, i: usize) -> &'a Node {
        match i.checked_sub(graph.nodes.len()) {
            Some(k) => &self.extra[k].0,
            None => &graph.nodes[i],
        }
    }

    /// The attributes of a node made for this specialisation (`None` for the graph's own).
    pub fn extra_attrs(&self, graph: &Graph, i: usize) -> Option<&Attrs> {
        let k = i.checked_sub(graph.nodes.len())?;
        self.extra.get(k).map(|(_, a)| a)
    }
}

/// [`node_err`] for an op's own error, keeping an unsupported op or form apart.
pub(crate) fn op_err(node: &str, op_type: &str, e: crate::ops::OpError) -> Error {
    match e {
        crate::ops::OpError::Unsupported(message) => Error::UnsupportedNode {
            node: node.to_string(),
            op_type: op_type.to_string(),
            message,
        },
        e => node_err(node, op_type, e),
    }
}

fn node_err(node: &str, op_type: &str, e: impl std::fmt::Display) -> Error {
    Error::Node {
        node: node.to_string(),
        op_type: op_type.to_string(),
        message: e.to_string(),
    }
}

impl Graph {
    pub fn from_model(model: &ModelDef) -> Result<Graph> {
        let model = &*expand::functions(model)?;
        let g = &model.graph;
        let mut ids: BTreeMap<String, ValueId> = BTreeMap::new();
        let mut names: Vec<String> = Vec::new();
        let mut id = |name: &str, names: &mut Vec<String>| -> ValueId {
            *ids.entry(name.to_string()).or_insert_with(|| {
                names.push(name.to_string());
                names.len() - 1
            })
        };
        let mut init = BTreeMap::new();
        for (name, t) in &g.initializers {
            init.insert(id(name, &mut names), t.clone());
        }
        let deferred: BTreeMap<ValueId, ValueType> = g
            .deferred
            .iter()
            .map(|d| {
                let ty = ValueType::new(d.dtype, d.shape.clone());
                (id(&d.name, &mut names), ty)
            })
            .collect();
        let is_weight = |v: &ValueId| init.contains_key(v) || deferred.contains_key(v);
        let inputs: Vec<(ValueId, ValueDef)> = g
            .inputs
            .iter()
            .map(|v| (id(&v.name, &mut names), v.clone()))
            .collect();
        let mut producer: BTreeMap<ValueId, usize> = BTreeMap::new();
        let mut raw = Vec::new();
        for (n, node) in g.nodes.iter().enumerate() {
            // If, Loop and Scan: their bodies' reads of outer values become inputs.
            let (op, captured) = match crate::control::build(node, model) {
                Some(built) => built.map_err(|e| op_err(&node.name, &node.op_type, e))?,
                None => {
                    let op = ops::build_in(
                        &node.domain,
                        &NodeSpec {
                            name: &node.name,
                            op_type: &node.op_type,
                            attrs: &node.attrs,
                            opset: model.opset,
                            num_inputs: node.inputs.len(),
                            num_outputs: node.outputs.len(),
                        },
                    )
                    .map_err(|e| op_err(&node.name, &node.op_type, e))?;
                    (op, Vec::new())
                }
            };
            let ins: Vec<Option<ValueId>> = node
                .inputs
                .iter()
                .chain(&captured)
                .map(|s| (!s.is_empty()).then(|| id(s, &mut names)))
                .collect();
            // An omitted optional output ("") still gets a value of its own, which nothing
            // reads: ops see their outputs by position (Attention's Y, '', '', qk), and two
            // omitted ones must not count as one value produced twice.
            let outs: Vec<ValueId> = node
                .outputs
                .iter()
                .enumerate()
                .map(|(k, s)| match s.is_empty() {
                    true => id(&format!("\0omitted:{n}:{k}"), &mut names),
                    false => id(s, &mut names),
                })
                .collect();
            for &o in &outs {
                if producer.insert(o, n).is_some() || is_weight(&o) {
                    return Err(node_err(
                        &node.name,
                        &node.op_type,
                        format!("value '{}' is produced twice", names[o]),
                    ));
                }
            }
            raw.push((node, op, ins, outs));
        }
        let outputs: Vec<(ValueId, ValueDef)> = g
            .outputs
            .iter()
            .map(|v| (id(&v.name, &mut names), v.clone()))
            .collect();
        let is_input: Vec<bool> = {
            let mut v = vec![false; names.len()];
            for (i, _) in &inputs {
                v[*i] = true;
            }
            v
        };
        // Kahn's algorithm in file order, so a sorted file keeps its order.
        let mut pending: Vec<usize> = raw
            .iter()
            .map(|(_, _, ins, _)| {
                ins.iter()
                    .flatten()
                    .filter(|v| producer.contains_key(v))
                    .count()
            })
            .collect();
        let mut users: BTreeMap<ValueId, Vec<usize>> = BTreeMap::new();
        for (n, (node, _, ins, _)) in raw.iter().enumerate() {
            for &v in ins.iter().flatten() {
                if !producer.contains_key(&v) && !is_weight(&v) && !is_input[v] {
                    return Err(node_err(
                        &node.name,
                        &node.op_type,
                        format!(
                            "input '{}' is produced by no node, initializer or graph input",
                            names[v]
                        ),
                    ));
                }
                if producer.contains_key(&v) {
                    users.entry(v).or_default().push(n);
                }
            }
        }
        let mut ready: std::collections::BTreeSet<usize> =
            (0..raw.len()).filter(|&n| pending[n] == 0).collect();
        let mut order = Vec::with_capacity(raw.len());
        while let Some(n) = ready.pop_first() {
            order.push(n);
            for &o in &raw[n].3 {
                for &u in users.get(&o).map(Vec::as_slice).unwrap_or(&[]) {
                    pending[u] -= 1;
                    if pending[u] == 0 {
                        ready.insert(u);
                    }
                }
            }
        }
        if order.len() != raw.len() {
            return Err(Error::Unsupported("the graph has a cycle".into()));
        }
        for (v, def) in &outputs {
            if !producer.contains_key(v) && !is_weight(v) && !is_input[*v] {
                return Err(Error::Unsupported(format!(
                    "graph output '{}' is produced by nothing",
                    def.name
                )));
            }
        }
        let mut slots: Vec<Option<_>> = raw.into_iter().map(Some).collect();
        let nodes = order
            .into_iter()
            .map(|n| {
                let (node, op, inputs, outputs) = slots[n].take().expect("each node once");
                Node {
                    name: node.name.clone(),
                    op_type: node.op_type.clone(),
                    domain: node.domain.clone(),
                    attrs: node.attrs.clone(),
                    op,
                    inputs,
                    outputs,
                }
            })
            .collect();
        let mut initializers = vec![None; names.len()];
        for (v, t) in init {
            initializers[v] = Some(t);
        }
        Ok(Graph {
            value_names: names,
            nodes,
            initializers,
            deferred,
            inputs,
            outputs,
            opset: model.opset,
        })
    }
}
