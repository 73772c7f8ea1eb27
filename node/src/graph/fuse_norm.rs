//! Fusion of an LLM's RMS row norms and gated activations into the products that read them,
//! after specialisation (and after graph/fuse.rs): each MatMul whose A is the output of
//! RMSNormalization, SimplifiedLayerNormalization or SkipSimplifiedLayerNormalization becomes
//! one NormMatMul node (ops/matmul/norm.rs) that normalises A's rows itself, and a MatMul whose
//! A is a fused silu(gate) * up chain (the MLP's down projection) one SwiGluMatMul node
//! (ops/matmul/swiglu.rs) that computes the activation as it reads A. That pays on a GPU only where the product is a matrix-vector
//! one (a decode step's q, k, v and gate, up projections, and the head): each layer then waits
//! at three barriers fewer, the norms' and the activation's own dispatches gone. The
//! activation is fused where its chain is exactly Sigmoid, Mul by its start value, Mul by a
//! second input of the same type and shape, read by that one MatMul alone, whose kernel takes
//! it. A norm is fused only when:
//! - it normalises the last axis alone, of f32 or f16, with a scale of that axis' length and
//!   of x's type, and (SkipSimplified) a skip of x's shape and no bias;
//! - its normalised output is no graph output and every reader is a MatMul taking it as A;
//! - every such MatMul gets a NormMatMul GPU kernel (at most four rows, N whole 16-byte
//!   vectors): otherwise the norm and its readers stay as they are.
//!
//! The fused nodes go where the MatMuls were; their inputs are the norm's, which come before
//! it, so the order stays topological. SkipSimplified's residual sum (its output 3, which the
//! next layer reads) becomes the second output of the first fused product, where everything
//! that reads it comes after that product; the norm then goes, as it does where no other
//! output of it is read. Otherwise (a mean or inv_std_var read) it stays and runs beside the
//! products. `VKML_FUSION=chains` turns this pass off alone, `VKML_FUSION=0` both.

use std::collections::{BTreeMap, BTreeSet};

use super::{Graph, Node, Specialized, ValueId};
use crate::ops::norm_matmul;
use crate::ops::{AttrValue, Attrs, InferInput, MS_DOMAIN, NodeSpec, ValueType};
use crate::tensor::DType;

/// A norm that may be fused: its operands and epsilon.
struct Norm {
    x: ValueId,
    skip: Option<ValueId>,
    scale: ValueId,
    epsilon: f32,
}

impl Graph {
    /// The norm `node` computes, where it is one this pass fuses (see the module comment).
    fn fusable_norm(&self, spec: &Specialized, node: &Node) -> Option<Norm> {
        let ms = node.domain == MS_DOMAIN;
        let (skip_at, epsilon) = match (node.op_type.as_str(), node.domain.as_str()) {
            ("RMSNormalization", "") => (None, node.attrs.float("epsilon", 1e-5).ok()?),
            ("SimplifiedLayerNormalization", _) => (None, node.attrs.float("epsilon", 1e-5).ok()?),
            ("SkipSimplifiedLayerNormalization", _) if ms => {
                // Its bias (input 3) is not fused.
                if node.inputs.get(3).is_some_and(Option::is_some) {
                    return None;
                }
                (Some(1), node.attrs.float("epsilon", 1e-12).ok()?)
            }
            _ => return None,
        };
        let ty = |v: ValueId| spec.types.get(v)?.as_ref();
        let x = (*node.inputs.first()?)?;
        let scale = (*node.inputs.get(if skip_at.is_some() { 2 } else { 1 })?)?;
        let skip = match skip_at {
            Some(at) => Some((*node.inputs.get(at)?)?),
            None => None,
        };
        let (xt, st) = (ty(x)?, ty(scale)?);
        let k = *xt.shape.last()?;
        let last_axis = skip_at.is_some() || {
            let axis = node.attrs.int("axis", -1).ok()?;
            axis == -1 || axis == xt.shape.len() as i64 - 1
        };
        let fits = matches!(xt.dtype, DType::F32 | DType::F16)
            && last_axis
            && st.dtype == xt.dtype
            && st.shape == [k]
            && skip.is_none_or(|s| ty(s).is_some_and(|s| s == xt));
        fits.then_some(Norm {
            x,
            skip,
            scale,
            epsilon,
        })
    }

    /// The NormMatMul node replacing `matmul` (whose A is `norm`'s output), also writing the
    /// residual sum to `sum` where given, built from its attributes as any node is; `None`
    /// when its GPU kernel refuses the types.
    fn norm_matmul(
        &self,
        spec: &Specialized,
        norm: &Norm,
        norm_name: &str,
        matmul: &Node,
        sum: Option<ValueId>,
    ) -> Option<(Node, Attrs)> {
        let b = (*matmul.inputs.get(1)?)?;
        let out = *matmul.outputs.first()?;
        let mut attrs = Attrs::default();
        attrs
            .0
            .insert("epsilon".to_string(), AttrValue::Float(norm.epsilon));
        let name = format!("fused({norm_name}..{})", matmul.name);
        let inputs = vec![Some(norm.x), norm.skip, Some(norm.scale), Some(b)];
        let outputs = std::iter::once(out).chain(sum).collect();
        self.product_node(spec, norm_matmul::OP_TYPE, attrs, name, inputs, outputs)
    }

    /// A node of `op_type` built from `attrs` as any node is, checked against the types the
    /// graph has for its inputs and outputs; `None` where its rule or its GPU kernel refuses
    /// them.
    pub(super) fn product_node(
        &self,
        spec: &Specialized,
        op_type: &str,
        attrs: Attrs,
        name: String,
        inputs: Vec<Option<ValueId>>,
        outputs: Vec<ValueId>,
    ) -> Option<(Node, Attrs)> {
        self.product_node_in(spec, "", op_type, attrs, name, (inputs, outputs))
    }

    /// [`Graph::product_node`] of an op of `domain`.
    pub(super) fn product_node_in(
        &self,
        spec: &Specialized,
        domain: &str,
        op_type: &str,
        attrs: Attrs,
        name: String,
        io: (Vec<Option<ValueId>>, Vec<ValueId>),
    ) -> Option<(Node, Attrs)> {
        self.made_node(spec, (domain, op_type), attrs, name, io, true)
    }

    /// A node made by a fusion pass, built from its attributes as any node is; `None` when its
    /// rule refuses the types or gives others than the nodes it replaces had, or, with
    /// `gpu`, when it has no GPU kernel for them.
    pub(super) fn made_node(
        &self,
        spec: &Specialized,
        (domain, op_type): (&str, &str),
        attrs: Attrs,
        name: String,
        (inputs, outputs): (Vec<Option<ValueId>>, Vec<ValueId>),
        gpu: bool,
    ) -> Option<(Node, Attrs)> {
        let op = crate::ops::build_in(
            domain,
            &NodeSpec {
                name: &name,
                op_type,
                attrs: &attrs,
                opset: self.opset,
                num_inputs: inputs.len(),
                num_outputs: outputs.len(),
            },
        )
        .ok()?;
        let types: Vec<Option<&ValueType>> = inputs
            .iter()
            .map(|v| v.and_then(|v| spec.types.get(v)?.as_ref()))
            .collect();
        // Constant inputs with their values: a Reshape's shape, a Slice's bounds.
        let infer: Vec<Option<InferInput<'_>>> = types
            .iter()
            .zip(&inputs)
            .map(|(t, v)| {
                t.map(|ty| InferInput {
                    ty,
                    value: v.and_then(|v| spec.consts.get(v)?.as_ref()),
                })
            })
            .collect();
        let want: Vec<ValueType> = outputs
            .iter()
            .map(|&v| spec.types.get(v)?.clone())
            .collect::<Option<_>>()?;
        if op.infer(&infer).ok()? != want {
            return None;
        }
        if gpu {
            op.gpu(&types, &want)?;
        }
        let node = Node {
            name,
            op_type: op_type.to_string(),
            domain: domain.to_string(),
            attrs: attrs.clone(),
            op,
            inputs,
            outputs,
        };
        Some((node, attrs))
    }

    /// The SwiGluMatMul node replacing `matmul`, whose A is `node`'s output, where `node` is
    /// a FusedElementwise computing silu(gate) * up (x * sigmoid(x) * up, as exporters write
    /// it) of two inputs of one type and shape.
    fn swiglu_matmul(
        &self,
        spec: &Specialized,
        node: &Node,
        matmul: &Node,
    ) -> Option<(Node, Attrs)> {
        use crate::ops::fused::{OP_TYPE, Operand, Program};
        if node.op_type != OP_TYPE || node.inputs.len() != 2 {
            return None;
        }
        let steps = Program::from_attrs(&node.attrs).ok()?.steps;
        let is = |i: usize, op: &str, operand: Operand| {
            steps
                .get(i)
                .is_some_and(|s| s.op == op && s.operand == operand)
        };
        let silu = steps.len() == 3
            && is(0, "Sigmoid", Operand::None)
            && is(1, "Mul", Operand::Input(0))
            && is(2, "Mul", Operand::Input(1));
        let (gate, up) = (node.inputs[0]?, node.inputs[1]?);
        let same = spec.types.get(gate)?.as_ref()? == spec.types.get(up)?.as_ref()?;
        if !silu || !same {
            return None;
        }
        let name = format!("fused({}..{})", node.name, matmul.name);
        let inputs = vec![Some(gate), Some(up), *matmul.inputs.get(1)?];
        let outputs = vec![*matmul.outputs.first()?];
        let op_type = crate::ops::swiglu_matmul::OP_TYPE;
        self.product_node(spec, op_type, Attrs::default(), name, inputs, outputs)
    }

    /// Replaces the norm-and-product and activation-and-product pairs of `spec.live` by
    /// NormMatMul and SwiGluMatMul nodes (see the module comment).
    pub fn fuse_norms(&self, spec: &mut Specialized) {
        let live = &spec.live;
        let uses = self.readers(spec);
        let is_output = |v: ValueId| self.outputs.iter().any(|(o, _)| *o == v);
        let read = |v: ValueId| is_output(v) || uses.contains_key(&v);
        // Position of each replaced MatMul -> its fused node; norms no longer needed.
        let mut fused: BTreeMap<usize, (Node, Attrs)> = BTreeMap::new();
        let mut dropped: BTreeSet<usize> = BTreeSet::new();
        for (pos, &i) in live.iter().enumerate() {
            let node = spec.node(self, i);
            let out = node.outputs[0];
            if let (Some([u]), false) = (uses.get(&out).map(Vec::as_slice), is_output(out)) {
                let m = spec.node(self, live[*u]);
                let made = reads_as_a(m, out)
                    .then(|| self.swiglu_matmul(spec, node, m))
                    .flatten();
                if let Some(made) = made {
                    fused.insert(*u, made);
                    dropped.insert(pos);
                    continue;
                }
            }
            let Some(norm) = self.fusable_norm(spec, node) else {
                continue;
            };
            let y = node.outputs[0];
            let Some(users) = uses.get(&y) else {
                continue;
            };
            if is_output(y) {
                continue;
            }
            let others: Vec<usize> = (1..node.outputs.len())
                .filter(|&o| read(node.outputs[o]))
                .collect();
            // The residual sum goes to the first product where all its readers come later.
            let first = *users.iter().min().expect("a use");
            let sum = (norm.skip.is_some() && others == [3])
                .then(|| node.outputs[3])
                .filter(|s| uses.get(s).is_none_or(|r| r.iter().all(|&p| p > first)));
            let made: Option<Vec<(usize, (Node, Attrs))>> = users
                .iter()
                .map(|&u| {
                    let m = spec.node(self, live[u]);
                    let sum = sum.filter(|_| u == first);
                    reads_as_a(m, y)
                        .then(|| self.norm_matmul(spec, &norm, &node.name, m, sum))?
                        .map(|n| (u, n))
                })
                .collect();
            let Some(made) = made else {
                continue;
            };
            if others.is_empty() || sum.is_some() {
                dropped.insert(pos);
            }
            fused.extend(made);
        }
        if fused.is_empty() {
            return;
        }
        tracing::debug!(
            products = fused.len(),
            nodes_gone = dropped.len(),
            "fused row norms and gated activations into products"
        );
        let base = self.nodes.len() + spec.extra.len();
        let mut new_live = Vec::with_capacity(live.len());
        let mut extra = Vec::with_capacity(fused.len());
        for (pos, &i) in live.iter().enumerate() {
            if let Some(made) = fused.remove(&pos) {
                new_live.push(base + extra.len());
                extra.push(made);
            } else if !dropped.contains(&pos) {
                new_live.push(i);
            }
        }
        spec.live = new_live;
        spec.extra.extend(extra);
    }
}

/// Whether `m` is a MatMul reading `v` as its A (and only there).
fn reads_as_a(m: &Node, v: ValueId) -> bool {
    m.op_type == "MatMul"
        && m.domain.is_empty()
        && m.inputs.first() == Some(&Some(v))
        && m.inputs.get(1) != Some(&Some(v))
}
