//! Fusion of an LLM's RMS row norms into the products that read them, after specialisation:
//! each MatMul whose A is the output of RMSNormalization, SimplifiedLayerNormalization or
//! SkipSimplifiedLayerNormalization becomes one NormMatMul node (ops/matmul/norm.rs) that
//! normalises A's rows itself. That pays on a GPU only where the product is a matrix-vector
//! one (a decode step's q, k, v and gate, up projections, and the head): each layer then waits
//! at two barriers fewer, the norms' own dispatches gone. So a norm is fused only when:
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
        let op = crate::ops::build(&NodeSpec {
            name: &name,
            op_type: norm_matmul::OP_TYPE,
            attrs: &attrs,
            opset: self.opset,
            num_inputs: 4,
            num_outputs: 1 + usize::from(sum.is_some()),
        })
        .ok()?;
        let inputs = [Some(norm.x), norm.skip, Some(norm.scale), Some(b)];
        let types: Vec<Option<&ValueType>> = inputs
            .iter()
            .map(|v| v.and_then(|v| spec.types.get(v)?.as_ref()))
            .collect();
        let infer: Vec<Option<InferInput<'_>>> = types
            .iter()
            .map(|t| t.map(|ty| InferInput { ty, value: None }))
            .collect();
        let outputs: Vec<ValueId> = std::iter::once(out).chain(sum).collect();
        let want: Vec<ValueType> = outputs
            .iter()
            .map(|&v| spec.types.get(v)?.clone())
            .collect::<Option<_>>()?;
        if op.infer(&infer).ok()? != want {
            return None;
        }
        op.gpu(&types, &want)?;
        let node = Node {
            name,
            op_type: norm_matmul::OP_TYPE.to_string(),
            domain: String::new(),
            attrs: attrs.clone(),
            op,
            inputs: inputs.to_vec(),
            outputs,
        };
        Some((node, attrs))
    }

    /// Replaces the norm-and-product pairs of `spec.live` by NormMatMul nodes (see the module
    /// comment).
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
                    let takes = m.op_type == "MatMul"
                        && m.domain.is_empty()
                        && m.inputs.first() == Some(&Some(y))
                        && m.inputs.get(1) != Some(&Some(y));
                    let sum = sum.filter(|_| u == first);
                    takes
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
            norms_gone = dropped.len(),
            "fused row norms into products"
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
