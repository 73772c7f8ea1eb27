//! Fusion of elementwise chains, after specialisation (every type concrete): a run of float
//! elementwise nodes, each consuming the previous one's output, becomes one FusedElementwise
//! node (ops/elementwise/fused.rs), so the GPU reads the input once, writes the result once and
//! records one dispatch instead of one per op.
//!
//! A chain is fused only where that is certainly equivalent:
//! - every step is a Relu Sigmoid Tanh Exp Log Neg Abs Sqrt Erf Clip Add Sub Mul Div Pow node
//!   with one output of the chain's type (f32 or f16, one shape), the running value as one of
//!   its operands;
//! - a binary step's other operand is a single-element constant (a scalar in the program) or a
//!   tensor of the dtype whose broadcast is a block of the output's dims (a bias `[C]`, a
//!   per-channel `[C,1,1]`, a full tensor); binary steps only from opset 7 (numpy broadcasting),
//!   Clip only from opset 11 with constant bounds (earlier bounds are attributes);
//! - every interior value has exactly one use (its next step) and is no graph output;
//! - the program fits the kernel's push constants (fused.rs `Program::fits`): longer chains
//!   split. At least two steps.
//!
//! The fused node goes where the chain's last node was; its inputs are all inputs of earlier
//! chain nodes, so the order stays topological. `VKML_FUSION=0` turns the pass off.

use std::collections::BTreeMap;

use super::{Graph, Node, Specialized, ValueId};
use crate::ops::fused::{self, Operand, Program, Step, block_broadcast, is_binary};
use crate::ops::{Attrs, InferInput, NodeSpec, ValueType};
use crate::tensor::DType;

/// A step's second operand as the graph has it.
enum Src {
    None,
    Scalar(f32),
    Bounds(f32, f32),
    Value(ValueId),
}

struct Chain {
    /// Live positions of the fused nodes, in order.
    positions: Vec<usize>,
    program: Program,
    /// The fused node's inputs; 0 is the chain's start value.
    inputs: Vec<ValueId>,
    out: ValueId,
}

impl Chain {
    /// Appends a step, or answers false (and leaves the chain as it was) when the program
    /// would no longer fit the kernel.
    fn push(&mut self, pos: usize, op: &'static str, src: Src, right: bool, out: ValueId) -> bool {
        let mut inputs = self.inputs.clone();
        let operand = match src {
            Src::None => Operand::None,
            Src::Scalar(c) => Operand::Scalar(c),
            Src::Bounds(lo, hi) => Operand::Bounds(lo, hi),
            Src::Value(v) => Operand::Input(match inputs.iter().position(|&w| w == v) {
                Some(k) => k,
                None => {
                    inputs.push(v);
                    inputs.len() - 1
                }
            }),
        };
        let mut program = self.program.clone();
        program.steps.push(Step {
            op,
            operand,
            chain_right: right,
        });
        if !program.fits() {
            return false;
        }
        self.program = program;
        self.inputs = inputs;
        self.positions.push(pos);
        self.out = out;
        true
    }
}

/// The single value of a one-element constant, as f32 (exact for f32 and f16 data).
pub(super) fn scalar_value(spec: &Specialized, v: ValueId) -> Option<f32> {
    let t = spec.consts[v].as_ref()?;
    (t.numel() == 1)
        .then(|| t.to_f64_vec().ok())
        .flatten()
        .map(|x| x[0] as f32)
}

impl Graph {
    /// Node `node` as a step whose running value is `chain` (of type `ty`): its op type, second
    /// operand and whether the running value is the second operand.
    fn as_step(
        &self,
        spec: &Specialized,
        node: &Node,
        chain: ValueId,
        ty: &ValueType,
    ) -> Option<(&'static str, Src, bool)> {
        let &(op, _) = fused::STEP_OPS.iter().find(|(n, _)| *n == node.op_type)?;
        if node.outputs.len() != 1 || spec.types[node.outputs[0]].as_ref() != Some(ty) {
            return None;
        }
        let ins = &node.inputs;
        if op == "Clip" {
            if self.opset < 11 || ins.len() > 3 || ins.first() != Some(&Some(chain)) {
                return None;
            }
            let bound = |i: usize, none: f32| match ins.get(i).copied().flatten() {
                None => Some(none),
                Some(v) if v == chain => None,
                Some(v) => scalar_value(spec, v),
            };
            return Some((
                op,
                Src::Bounds(bound(1, f32::NEG_INFINITY)?, bound(2, f32::INFINITY)?),
                false,
            ));
        }
        if !is_binary(op) {
            return (ins.len() == 1 && ins[0] == Some(chain)).then_some((op, Src::None, false));
        }
        if self.opset < 7 || ins.len() != 2 {
            return None;
        }
        let (Some(a), Some(b)) = (ins[0], ins[1]) else {
            return None;
        };
        let (other, right) = match (a == chain, b == chain) {
            (true, false) => (b, false),
            (false, true) => (a, true),
            _ => return None,
        };
        let oty = spec.types[other].as_ref()?;
        if oty.dtype != ty.dtype {
            return None;
        }
        if let Some(c) = scalar_value(spec, other) {
            return Some((op, Src::Scalar(c), right));
        }
        block_broadcast(&oty.shape, &ty.shape)?;
        Some((op, Src::Value(other), right))
    }

    /// Starts a chain at the node at live position `pos`: the running value is an input of the
    /// output's type (input 0 first).
    fn chain_head(&self, spec: &Specialized, pos: usize) -> Option<Chain> {
        let node = spec.node(self, spec.live[pos]);
        let &out = node.outputs.first()?;
        let ty = spec.types[out].as_ref()?;
        if !matches!(ty.dtype, DType::F32 | DType::F16) {
            return None;
        }
        for &c in node.inputs.iter().take(2).flatten() {
            if spec.types[c].as_ref() != Some(ty) {
                continue;
            }
            if let Some((op, src, right)) = self.as_step(spec, node, c, ty) {
                let mut chain = Chain {
                    positions: Vec::new(),
                    program: Program::default(),
                    inputs: vec![c],
                    out,
                };
                if chain.push(pos, op, src, right, out) {
                    return Some(chain);
                }
            }
        }
        None
    }

    /// The positions in `spec.live` of the nodes reading each value, in order.
    pub(super) fn readers(&self, spec: &Specialized) -> BTreeMap<ValueId, Vec<usize>> {
        let mut uses: BTreeMap<ValueId, Vec<usize>> = BTreeMap::new();
        for (pos, &i) in spec.live.iter().enumerate() {
            for &v in spec.node(self, i).inputs.iter().flatten() {
                uses.entry(v).or_default().push(pos);
            }
        }
        uses
    }

    /// Replaces the chains of `spec.live` by fused nodes (see the module comment).
    pub fn fuse_chains(&self, spec: &mut Specialized) {
        let live = &spec.live;
        let uses = self.readers(spec);
        let is_output = |v: ValueId| self.outputs.iter().any(|(o, _)| *o == v);
        let mut claimed = vec![false; live.len()];
        let mut chains: Vec<(Chain, (Node, Attrs))> = Vec::new();
        for pos in 0..live.len() {
            if claimed[pos] {
                continue;
            }
            let Some(mut chain) = self.chain_head(spec, pos) else {
                continue;
            };
            let ty = spec.types[chain.out].clone().expect("typed");
            loop {
                let v = chain.out;
                let users = uses.get(&v).map(Vec::as_slice).unwrap_or(&[]);
                let [u] = users else { break };
                if is_output(v) || claimed[*u] {
                    break;
                }
                let node = spec.node(self, live[*u]);
                let Some((op, src, right)) = self.as_step(spec, node, v, &ty) else {
                    break;
                };
                if !chain.push(*u, op, src, right, node.outputs[0]) {
                    break;
                }
            }
            if chain.positions.len() < 2 {
                continue;
            }
            if let Some(made) = self.fused_node(spec, &chain, &ty) {
                for &p in &chain.positions {
                    claimed[p] = true;
                }
                chains.push((chain, made));
            }
        }
        if chains.is_empty() {
            return;
        }
        let last_of: BTreeMap<usize, usize> = chains
            .iter()
            .enumerate()
            .map(|(k, (c, _))| (*c.positions.last().expect("two steps"), k))
            .collect();
        let base = self.nodes.len() + spec.extra.len();
        let mut new_live = Vec::with_capacity(live.len());
        for (pos, &i) in live.iter().enumerate() {
            if let Some(&k) = last_of.get(&pos) {
                new_live.push(base + k);
            } else if !claimed[pos] {
                new_live.push(i);
            }
        }
        tracing::debug!(
            chains = chains.len(),
            ops = chains.iter().map(|(c, _)| c.positions.len()).sum::<usize>(),
            "fused elementwise chains"
        );
        spec.live = new_live;
        spec.extra.extend(chains.into_iter().map(|(_, made)| made));
    }

    /// The fused node of a chain, built from its attributes as any node is; `None` when its
    /// rule or its GPU kernel refuses the types (then the chain stays as it is).
    fn fused_node(
        &self,
        spec: &Specialized,
        chain: &Chain,
        ty: &ValueType,
    ) -> Option<(Node, Attrs)> {
        let attrs = chain.program.to_attrs();
        let first = &spec.node(self, spec.live[chain.positions[0]]).name;
        let last = &spec.node(self, spec.live[*chain.positions.last()?]).name;
        let name = format!("fused({first}..{last})");
        let op = crate::ops::build(&NodeSpec {
            name: &name,
            op_type: fused::OP_TYPE,
            attrs: &attrs,
            opset: self.opset,
            num_inputs: chain.inputs.len(),
            num_outputs: 1,
        })
        .ok()?;
        let in_tys: Vec<&ValueType> = chain
            .inputs
            .iter()
            .map(|&v| spec.types[v].as_ref())
            .collect::<Option<_>>()?;
        let infer: Vec<Option<InferInput<'_>>> = in_tys
            .iter()
            .map(|&ty| Some(InferInput { ty, value: None }))
            .collect();
        if op.infer(&infer).ok()? != [ty.clone()] {
            return None;
        }
        let tys: Vec<Option<&ValueType>> = in_tys.iter().map(|&t| Some(t)).collect();
        op.gpu(&tys, std::slice::from_ref(ty))?;
        let node = Node {
            name,
            op_type: fused::OP_TYPE.to_string(),
            domain: String::new(),
            attrs: attrs.clone(),
            op,
            inputs: chain.inputs.iter().map(|&v| Some(v)).collect(),
            outputs: vec![chain.out],
        };
        Some((node, attrs))
    }
}
