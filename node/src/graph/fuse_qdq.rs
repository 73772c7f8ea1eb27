//! Integer convolutions from QDQ models, after specialisation: a Conv whose input is
//! DequantizeLinear(x_q), whose weights (and bias) are constants dequantized from integers,
//! and whose only reader is QuantizeLinear, becomes one QLinearConv node over x_q and the
//! integer weights (ops/qlinear.rs, run by shaders/conv_q8.comp): int8 products accumulated in
//! int32 and requantized once, instead of a float convolution of dequantized values. Between
//! two such convolutions activations then stay 8-bit in memory. This is the rewrite ONNX
//! Runtime makes of the same pattern (its QDQ selectors), so results follow its integer
//! kernels rather than the float graph.
//!
//! The rewrite is made only where it computes the same function:
//! - x's scale and zero point are one-value constants; the weights are a constant
//!   DequantizeLinear of int8 or uint8 values with one scale (and zero point) or one per output
//!   channel along axis 0, no blocks; the bias, when present, is a constant DequantizeLinear of
//!   int32 with zero points 0 and scales exactly x_scale x w_scale (as quantizers write it),
//!   so its integers are the int32 bias QLinearConv adds;
//! - the Conv is f32, its output is no graph output and QuantizeLinear (one-value constant
//!   scale and zero point, 8-bit output) is its one reader;
//! - the QLinearConv built from them has a GPU kernel for these types.
//!
//! A residual sum of the same form, QuantizeLinear(DequantizeLinear(a) + DequantizeLinear(b))
//! with one-value constant scales and zero points, a and b of one 8-bit type and one shape,
//! becomes com.microsoft QLinearAdd (ops/qlinear_add.rs, also ONNX Runtime's rewrite), whose
//! f32 arithmetic is the three ops' own: the same bytes in a third of the dispatches.
//!
//! The fused node takes the QuantizeLinear's place (its inputs all come earlier). A
//! DequantizeLinear of an input left with no reader goes. Plans for the CPU alone stay unfused, as
//! with the other passes: the CPU's integer convolution is its reference kernel, not a fast
//! one.

use std::collections::{BTreeMap, BTreeSet};

use super::{Graph, Node, Specialized, ValueId};
use crate::ops::Attrs;
use crate::tensor::{DType, Tensor};

/// The pieces of one fusable Conv.
struct Parts {
    dq_x: usize,
    inputs: Vec<Option<ValueId>>,
    out: ValueId,
}

fn one_value(t: Option<&Tensor>) -> bool {
    t.is_some_and(|t| t.numel() == 1)
}

impl Graph {
    /// The producer of each value among the graph's own nodes (folded ones included).
    fn producers(&self) -> BTreeMap<ValueId, usize> {
        let mut by = BTreeMap::new();
        for (i, n) in self.nodes.iter().enumerate() {
            for &o in &n.outputs {
                by.insert(o, i);
            }
        }
        by
    }

    /// The constant DequantizeLinear that made `v`: its (integers, scale, zero point).
    fn dequantized_const(
        &self,
        spec: &Specialized,
        producers: &BTreeMap<ValueId, usize>,
        v: ValueId,
    ) -> Option<(ValueId, ValueId, Option<ValueId>, i64)> {
        let n = &self.nodes[*producers.get(&v)?];
        if n.op_type != "DequantizeLinear" || !n.domain.is_empty() {
            return None;
        }
        if n.attrs.int("block_size", 0).ok()? != 0 {
            return None;
        }
        let q = (*n.inputs.first()?)?;
        let s = (*n.inputs.get(1)?)?;
        let z = n.inputs.get(2).copied().flatten();
        let known = |v: ValueId| spec.consts.get(v).is_some_and(Option::is_some);
        if !known(q) || !known(s) || z.is_some_and(|z| !known(z)) {
            return None;
        }
        Some((q, s, z, n.attrs.int("axis", 1).ok()?))
    }

    /// Whether the bias DequantizeLinear's integers are QLinearConv's bias: int32, zero
    /// points 0, scale[oc] == fl(x_scale x w_scale[oc]).
    fn bias_is_exact(
        spec: &Specialized,
        (q, s, z): (ValueId, ValueId, Option<ValueId>),
        x_scale: f32,
        w_scale: &[f32],
    ) -> bool {
        let c = |v: ValueId| spec.consts[v].as_ref();
        let (Some(q), Some(s)) = (c(q), c(s)) else {
            return false;
        };
        if q.dtype() != DType::I32 || s.dtype() != DType::F32 {
            return false;
        }
        let zero_ok = z.is_none_or(|z| {
            c(z).and_then(|t| t.to_i64_vec().ok())
                .is_some_and(|v| v.iter().all(|&x| x == 0))
        });
        let Ok(s) = s.view::<f32>() else { return false };
        let want = |oc: usize| x_scale * w_scale[if w_scale.len() == 1 { 0 } else { oc }];
        zero_ok
            && (s.len() == 1 && w_scale.len() == 1 || s.len() == q.numel())
            && s.iter().enumerate().all(|(oc, &v)| v == want(oc))
    }

    /// The QLinearConv inputs for the Conv at `live[pos]`, read only by the QuantizeLinear
    /// `q`.
    fn qdq_conv_parts(
        &self,
        spec: &Specialized,
        producers: &BTreeMap<ValueId, usize>,
        live_of: &BTreeMap<usize, usize>,
        conv: &Node,
        q: &Node,
    ) -> Option<Parts> {
        let c = |v: ValueId| spec.consts.get(v)?.as_ref();
        let f32_of = |v: ValueId| c(v).filter(|t| t.dtype() == DType::F32);
        // x: a live DequantizeLinear with one scale and zero point.
        let (dq_x, [xq, xs, xz]) =
            self.live_dequantize(spec, producers, live_of, (*conv.inputs.first()?)?)?;
        let (xq, xs) = (xq?, xs?);
        let x_scale = f32_of(xs)?.view::<f32>().ok()?[0];
        // W: a constant DequantizeLinear, per tensor or per output channel.
        let (wq, ws, wz, axis) =
            self.dequantized_const(spec, producers, (*conv.inputs.get(1)?)?)?;
        let w_scale: Vec<f32> = f32_of(ws)?.view::<f32>().ok()?.to_vec();
        if w_scale.len() != 1 && axis != 0 {
            return None;
        }
        // The bias: integers QLinearConv can add as they are.
        let bias = match conv.inputs.get(2).copied().flatten() {
            None => None,
            Some(b) => {
                let (bq, bs, bz, _) = self.dequantized_const(spec, producers, b)?;
                Self::bias_is_exact(spec, (bq, bs, bz), x_scale, &w_scale).then_some(bq)?;
                Some(bq)
            }
        };
        // y: QuantizeLinear with one scale and zero point.
        let ys = (*q.inputs.get(1)?)?;
        let yz = q.inputs.get(2).copied().flatten();
        if !one_value(f32_of(ys)) || yz.is_some_and(|z| !one_value(c(z))) {
            return None;
        }
        let mut inputs = vec![Some(xq), Some(xs), xz, Some(wq), Some(ws), wz, Some(ys), yz];
        if bias.is_some() {
            inputs.push(bias);
        }
        Some(Parts {
            dq_x,
            inputs,
            out: *q.outputs.first()?,
        })
    }

    /// (integers, scale, zero point) of the live one-value DequantizeLinear making `v`, and
    /// its index.
    fn live_dequantize(
        &self,
        spec: &Specialized,
        producers: &BTreeMap<ValueId, usize>,
        live_of: &BTreeMap<usize, usize>,
        v: ValueId,
    ) -> Option<(usize, [Option<ValueId>; 3])> {
        let c = |v: ValueId| spec.consts.get(v)?.as_ref();
        let i = *producers.get(&v)?;
        live_of.get(&i)?;
        let n = &self.nodes[i];
        if n.op_type != "DequantizeLinear" || !n.domain.is_empty() {
            return None;
        }
        let q = (*n.inputs.first()?)?;
        let s = (*n.inputs.get(1)?)?;
        let z = n.inputs.get(2).copied().flatten();
        let scale_ok = one_value(c(s).filter(|t| t.dtype() == DType::F32));
        if !scale_ok || z.is_some_and(|z| !one_value(c(z))) {
            return None;
        }
        Some((i, [Some(q), Some(s), z]))
    }

    /// The QLinearAdd inputs for the Add `add`, read only by the QuantizeLinear `q`, and the
    /// DequantizeLinear nodes it reads.
    fn qdq_add_parts(
        &self,
        spec: &Specialized,
        producers: &BTreeMap<ValueId, usize>,
        live_of: &BTreeMap<usize, usize>,
        add: &Node,
        q: &Node,
    ) -> Option<(Vec<Option<ValueId>>, [usize; 2])> {
        let c = |v: ValueId| spec.consts.get(v)?.as_ref();
        let (a, b) = ((*add.inputs.first()?)?, (*add.inputs.get(1)?)?);
        if spec.types[a] != spec.types[b] {
            return None;
        }
        let (da, ia) = self.live_dequantize(spec, producers, live_of, a)?;
        let (db, ib) = self.live_dequantize(spec, producers, live_of, b)?;
        let ys = (*q.inputs.get(1)?)?;
        let yz = q.inputs.get(2).copied().flatten();
        if !one_value(c(ys).filter(|t| t.dtype() == DType::F32))
            || yz.is_some_and(|z| !one_value(c(z)))
        {
            return None;
        }
        let mut inputs: Vec<Option<ValueId>> = ia.into_iter().chain(ib).collect();
        inputs.extend([Some(ys), yz]);
        if yz.is_none() {
            inputs.pop();
        }
        Some((inputs, [da, db]))
    }

    /// Replaces QDQ convolutions and sums of `spec.live` by QLinearConv and QLinearAdd nodes
    /// (see the module comment).
    pub fn fuse_qdq(&self, spec: &mut Specialized) {
        let uses = self.readers(spec);
        let is_output = |v: ValueId| self.outputs.iter().any(|(o, _)| *o == v);
        let producers = self.producers();
        let live_of: BTreeMap<usize, usize> =
            spec.live.iter().enumerate().map(|(p, &i)| (i, p)).collect();
        // Position of each QuantizeLinear replaced -> its fused node; Convs gone.
        let mut fused: BTreeMap<usize, (Node, Attrs)> = BTreeMap::new();
        let mut gone: BTreeSet<usize> = BTreeSet::new();
        let mut dq_x: BTreeSet<usize> = BTreeSet::new();
        for (pos, &i) in spec.live.iter().enumerate() {
            let node = spec.node(self, i);
            let is = |t: &str| node.op_type == t && node.domain.is_empty();
            if !is("Conv") && !is("Add") {
                continue;
            }
            let y = node.outputs[0];
            let f32_out = spec.types[y]
                .as_ref()
                .is_some_and(|t| t.dtype == DType::F32);
            let Some([u]) = uses.get(&y).map(Vec::as_slice) else {
                continue;
            };
            let q = spec.node(self, spec.live[*u]);
            if !f32_out || is_output(y) || q.op_type != "QuantizeLinear" || !q.domain.is_empty() {
                continue;
            }
            let made = if is("Conv") {
                self.qdq_conv_parts(spec, &producers, &live_of, node, q)
                    .and_then(|parts| {
                        let made = self.product_node(
                            spec,
                            "QLinearConv",
                            node.attrs.clone(),
                            format!("qlinear({})", node.name),
                            parts.inputs,
                            vec![parts.out],
                        )?;
                        dq_x.insert(parts.dq_x);
                        Some(made)
                    })
            } else {
                self.qdq_add_parts(spec, &producers, &live_of, node, q)
                    .and_then(|(inputs, dqs)| {
                        let made = self.product_node_in(
                            spec,
                            crate::ops::MS_DOMAIN,
                            "QLinearAdd",
                            Attrs::default(),
                            format!("qlinear({})", node.name),
                            (inputs, q.outputs.clone()),
                        )?;
                        dq_x.extend(dqs);
                        Some(made)
                    })
            };
            if let Some(made) = made {
                fused.insert(*u, made);
                gone.insert(pos);
            }
        }
        if fused.is_empty() {
            return;
        }
        tracing::debug!(nodes = fused.len(), "fused QDQ convolutions and sums");
        let base = self.nodes.len() + spec.extra.len();
        let mut live = Vec::with_capacity(spec.live.len());
        let mut extra = Vec::with_capacity(fused.len());
        for (pos, &i) in spec.live.iter().enumerate() {
            if let Some(made) = fused.remove(&pos) {
                live.push(base + extra.len());
                extra.push(made);
            } else if !gone.contains(&pos) {
                live.push(i);
            }
        }
        spec.live = live;
        spec.extra.extend(extra);
        // The DequantizeLinear nodes of x that nothing reads any more.
        let uses = self.readers(spec);
        spec.live.retain(|&i| {
            !dq_x.contains(&i)
                || self.nodes[i]
                    .outputs
                    .iter()
                    .any(|&o| is_output(o) || uses.contains_key(&o))
        });
    }
}
