//! Fusion of a convolution with what reads it, for the CPU backend: Conv + activation,
//! Conv + Add and Conv + Add + activation become one com.microsoft FusedConv node (as
//! onnxruntime's CPU provider fuses them), whose kernel adds the residual and applies the
//! activation to each block of output planes in the convolution's own tasks, instead of two
//! more ops each reading and writing the whole tensor and allocating another.
//!
//! Fused only where certainly equivalent:
//! - the Conv is a default-domain node with one f32 or f16 output;
//! - each value passed on (the Conv's, the Add's) has exactly one reader and is no graph
//!   output;
//! - the Add (opset 7 on) has two inputs, the running value one of them and the other of the
//!   running value's own type (dtype and shape: no broadcast), which becomes FusedConv's Z;
//! - the activation is Relu, Tanh, Sigmoid, LeakyRelu or HardSigmoid of the running value,
//!   or Clip (opset 11 on) with constant scalar (or absent) bounds, or SiLU as exporters
//!   write it (`Mul(v, Sigmoid(v))`, those two nodes the running value's only readers), with
//!   the output type unchanged.
//!
//! The fused node goes where the last replaced node was, since Z may be computed after the
//! Conv; its other inputs are the Conv's, which come earlier still.
//! FusedConv has no GPU kernel: plans that may use a GPU do not run this pass.

use std::collections::BTreeMap;

use super::{Graph, Node, Specialized, ValueId};
use crate::ops::{Activation, AttrValue, Attrs, FUSED_CONV, MS_DOMAIN, ValueType};
use crate::tensor::DType;

/// A Conv and what it absorbs.
struct Fusable {
    /// Live positions of the replaced nodes, the Conv's first.
    positions: Vec<usize>,
    z: Option<ValueId>,
    act: Option<Activation>,
    out: ValueId,
}

impl Graph {
    /// Replaces convolutions and their readers in `spec.live` by FusedConv nodes (see the
    /// module comment).
    pub fn fuse_convs(&self, spec: &mut Specialized) {
        let uses = self.readers(spec);
        let mut claimed = vec![false; spec.live.len()];
        let mut made: Vec<(usize, (Node, Attrs))> = Vec::new();
        for pos in 0..spec.live.len() {
            let Some(f) = self.fusable(spec, &uses, &claimed, pos) else {
                continue;
            };
            let Some(node) = self.fused_conv(spec, &f) else {
                continue;
            };
            for &p in &f.positions {
                claimed[p] = true;
            }
            made.push((*f.positions.last().expect("two nodes"), node));
        }
        if made.is_empty() {
            return;
        }
        let base = self.nodes.len() + spec.extra.len();
        let at: BTreeMap<usize, usize> = made.iter().enumerate().map(|(k, m)| (m.0, k)).collect();
        let live = std::mem::take(&mut spec.live);
        for (pos, i) in live.into_iter().enumerate() {
            if let Some(&k) = at.get(&pos) {
                spec.live.push(base + k);
            } else if !claimed[pos] {
                spec.live.push(i);
            }
        }
        tracing::debug!(convs = made.len(), "fused convolutions with their readers");
        spec.extra.extend(made.into_iter().map(|(_, node)| node));
    }

    /// The Conv at live position `pos` with the Add and activation it may absorb, if any.
    fn fusable(
        &self,
        spec: &Specialized,
        uses: &BTreeMap<ValueId, Vec<usize>>,
        claimed: &[bool],
        pos: usize,
    ) -> Option<Fusable> {
        let conv = spec.node(self, spec.live[pos]);
        if claimed[pos] || conv.op_type != "Conv" || !conv.domain.is_empty() {
            return None;
        }
        let [y] = conv.outputs[..] else { return None };
        let ty = spec.types[y].as_ref()?;
        if !matches!(ty.dtype, DType::F32 | DType::F16) {
            return None;
        }
        // The one reader of `v`, unclaimed, when `v` is no graph output.
        let reader = |v: ValueId| -> Option<(usize, &Node)> {
            let [u] = uses.get(&v)?.as_slice() else {
                return None;
            };
            let graph_output = self.outputs.iter().any(|(o, _)| *o == v);
            (!graph_output && !claimed[*u]).then(|| (*u, spec.node(self, spec.live[*u])))
        };
        let mut f = Fusable {
            positions: vec![pos],
            z: None,
            act: None,
            out: y,
        };
        if let Some((u, add)) = reader(f.out)
            && let Some(z) = self.residual(spec, add, f.out, ty)
        {
            (f.z, f.out) = (Some(z), add.outputs[0]);
            f.positions.push(u);
        }
        if let Some((u, node)) = reader(f.out)
            && let Some(act) = self.activation(spec, node, f.out, ty)
        {
            (f.act, f.out) = (Some(act), node.outputs[0]);
            f.positions.push(u);
        } else if let Some((at, out)) = self.silu(spec, uses, claimed, f.out, ty) {
            f.act = Some(Activation::silu());
            f.out = out;
            f.positions.extend(at);
        }
        f.positions.sort_unstable();
        (f.positions.len() > 1).then_some(f)
    }

    /// SiLU as exporters write it, `Mul(v, Sigmoid(v))` (either order), where those two nodes
    /// are all that read `v` and the Sigmoid's output is read by the Mul alone: their live
    /// positions and the Mul's output.
    fn silu(
        &self,
        spec: &Specialized,
        uses: &BTreeMap<ValueId, Vec<usize>>,
        claimed: &[bool],
        v: ValueId,
        ty: &ValueType,
    ) -> Option<([usize; 2], ValueId)> {
        let graph_output = |v: ValueId| self.outputs.iter().any(|(o, _)| *o == v);
        let &[p, q] = uses.get(&v)?.as_slice() else {
            return None;
        };
        let node = |pos: usize| spec.node(self, spec.live[pos]);
        let (sig, mul) = if node(p).op_type == "Sigmoid" {
            (p, q)
        } else {
            (q, p)
        };
        let (sn, mn) = (node(sig), node(mul));
        let plain =
            |n: &Node, op: &str| n.op_type == op && n.domain.is_empty() && n.outputs.len() == 1;
        if graph_output(v)
            || claimed[sig]
            || claimed[mul]
            || !plain(sn, "Sigmoid")
            || !plain(mn, "Mul")
        {
            return None;
        }
        let s = sn.outputs[0];
        let reads = |a: Option<ValueId>, b: Option<ValueId>| mn.inputs[..] == [a, b];
        let pair_ok = sn.inputs[..] == [Some(v)]
            && (reads(Some(v), Some(s)) || reads(Some(s), Some(v)))
            && uses.get(&s).map(Vec::as_slice) == Some(&[mul][..])
            && !graph_output(s);
        let out = mn.outputs[0];
        (pair_ok && spec.types[s].as_ref() == Some(ty) && spec.types[out].as_ref() == Some(ty))
            .then_some(([sig, mul], out))
    }

    /// The other operand of `node` when it is an Add of `v` and a value of `v`'s type `ty`.
    fn residual(
        &self,
        spec: &Specialized,
        node: &Node,
        v: ValueId,
        ty: &ValueType,
    ) -> Option<ValueId> {
        if node.op_type != "Add" || !node.domain.is_empty() || self.opset < 7 {
            return None;
        }
        let (&[Some(a), Some(b)], &[out]) = (&node.inputs[..], &node.outputs[..]) else {
            return None;
        };
        let other = match (a == v, b == v) {
            (true, false) => b,
            (false, true) => a,
            _ => return None,
        };
        (spec.types[other].as_ref() == Some(ty) && spec.types[out].as_ref() == Some(ty))
            .then_some(other)
    }

    /// `node` as an activation of `v` (of type `ty`), when it is one FusedConv applies.
    fn activation(
        &self,
        spec: &Specialized,
        node: &Node,
        v: ValueId,
        ty: &ValueType,
    ) -> Option<Activation> {
        let [out] = node.outputs[..] else { return None };
        if !node.domain.is_empty() || node.inputs.first() != Some(&Some(v)) {
            return None;
        }
        if spec.types[out].as_ref() != Some(ty) {
            return None;
        }
        if node.op_type != "Clip" {
            if node.inputs.len() != 1 {
                return None;
            }
            let float = |name: &str| node.attrs.float_opt(name).ok().flatten();
            return Activation::of_node(&node.op_type, float("alpha"), float("beta"));
        }
        // Before opset 11 the bounds are attributes with other defaults: left alone.
        if self.opset < 11 || node.inputs.len() > 3 {
            return None;
        }
        let bound = |i: usize, none: f32| match node.inputs.get(i).copied().flatten() {
            None => Some(none),
            Some(b) => super::fuse::scalar_value(spec, b),
        };
        let (lo, hi) = (bound(1, f32::NEG_INFINITY)?, bound(2, f32::INFINITY)?);
        Some(Activation::Clip(lo, hi))
    }

    /// The FusedConv node for `f`, or None where its rule refuses the types.
    fn fused_conv(&self, spec: &Specialized, f: &Fusable) -> Option<(Node, Attrs)> {
        let conv = spec.node(self, spec.live[f.positions[0]]);
        let mut attrs = conv.attrs.clone();
        if let Some(act) = f.act {
            let (name, params) = act.attrs();
            attrs
                .0
                .insert("activation".into(), AttrValue::String(name.into()));
            attrs
                .0
                .insert("activation_params".into(), AttrValue::Floats(params));
        }
        let mut inputs = conv.inputs.clone();
        if let Some(z) = f.z {
            inputs.resize(3, None);
            inputs.push(Some(z));
        }
        let last = &spec.node(self, spec.live[*f.positions.last()?]).name;
        let name = format!("fused({}..{last})", conv.name);
        self.made_node(
            spec,
            (MS_DOMAIN, FUSED_CONV),
            attrs,
            name,
            (inputs, vec![f.out]),
            false,
        )
    }
}
