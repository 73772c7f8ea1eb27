//! Integer compute from QDQ models, after specialisation. A float op whose quantized inputs
//! arrive through DequantizeLinear and whose only reader is QuantizeLinear becomes one op over
//! the 8-bit values, the rewrites ONNX Runtime makes of the same patterns (its QDQ selectors),
//! so results follow its integer kernels rather than the float graph:
//! - Conv -> QLinearConv (ops/qlinear.rs, shaders/conv_q8.comp): int8 products accumulated in
//!   int32 and requantized once. Between two such convolutions activations stay 8-bit.
//! - MatMul -> QLinearMatMul, Gemm -> com.microsoft QGemm (ops/qgemm.rs), through the same
//!   shader.
//! - Add of two quantized values -> com.microsoft QLinearAdd (ops/qlinear_add.rs), whose f32
//!   arithmetic is the three ops' own: the same bytes in a third of the dispatches.
//! - An elementwise op of one quantized value (activations, Clip, arithmetic with a one-value
//!   constant) -> Lookup8 (ops/lookup8.rs), a table of 256 entries computed by the three ops'
//!   CPU kernels: the float graph's results in one pass over bytes.
//! - GlobalAveragePool (and a ReduceMean over the spatial axes) -> com.microsoft
//!   QLinearGlobalAveragePool (ops/pool/qlinear.rs): integers summed, requantized once, as
//!   ONNX Runtime's MLAS kernel does; AveragePool -> com.microsoft QLinearAveragePool.
//! - An op that only moves or picks values (MaxPool, Reshape, Flatten, Transpose, Slice, ...)
//!   between a DequantizeLinear and a QuantizeLinear of one scale and zero point runs on the
//!   integers themselves: the same bytes.
//!
//! The rewrite is made only where it computes the same function:
//! - x's scale and zero point are one-value constants; the weights are a constant
//!   DequantizeLinear of int8 or uint8 values with one scale (and zero point) or one per output
//!   channel (Conv's axis 0, B's output column), no blocks; the bias, when present, is a
//!   constant DequantizeLinear of int32 with zero points 0 and scales exactly x_scale x
//!   w_scale (as quantizers write it), so its integers are the int32 bias the op adds; Gemm
//!   has alpha and beta 1 and A not transposed;
//! - the op is f32, its output is no graph output and QuantizeLinear (one-value constant
//!   scale and zero point, 8-bit output) is its one reader;
//! - the op built from them has a GPU kernel for these types.
//!
//! The fused node takes the QuantizeLinear's place (its inputs all come earlier). A
//! DequantizeLinear of an input left with no reader goes. Plans for the CPU alone stay unfused,
//! as with the other passes: the CPU's integer kernels are reference kernels, not fast ones.

use std::collections::{BTreeMap, BTreeSet};

use super::{Graph, Node, Specialized, ValueId};
use crate::ops::{Attrs, ValueType};
use crate::tensor::{DType, Tensor};

/// The pieces of one fusable Conv.
struct Parts {
    dq_x: usize,
    inputs: Vec<Option<ValueId>>,
    out: ValueId,
}

/// Ops that only move, copy or pick values of their first input: between a DequantizeLinear
/// and a QuantizeLinear of one scale and zero point they run on the integers themselves (ONNX
/// Runtime drops such Q/DQ pairs too).
const MOVES_VALUES: &[&str] = &[
    "MaxPool",
    "Reshape",
    "Flatten",
    "Transpose",
    "Squeeze",
    "Unsqueeze",
    "Slice",
    "Identity",
    "Expand",
    "Tile",
    "Gather",
    "DepthToSpace",
    "SpaceToDepth",
];

/// Elementwise ops of one tensor (further inputs, if any, one-value constants such as Clip's
/// bounds or a scalar operand): between a DequantizeLinear and a QuantizeLinear of 8-bit
/// values they become a table of 256 entries (ops/lookup8.rs).
const ELEMENTWISE: &[&str] = &[
    "Relu",
    "Clip",
    "Sigmoid",
    "Tanh",
    "LeakyRelu",
    "HardSigmoid",
    "HardSwish",
    "Elu",
    "Selu",
    "Celu",
    "Gelu",
    "Softplus",
    "Softsign",
    "Mish",
    "ThresholdedRelu",
    "Abs",
    "Neg",
    "Exp",
    "Log",
    "Sqrt",
    "Reciprocal",
    "Erf",
    "Sin",
    "Cos",
    "Floor",
    "Ceil",
    "Round",
    "Sign",
    "Add",
    "Sub",
    "Mul",
    "Div",
    "Pow",
];

fn one_value(t: Option<&Tensor>) -> bool {
    t.is_some_and(|t| t.numel() == 1)
}

/// What the rewrites read: the graph, its specialisation, and where each value and live node
/// come from.
struct Qdq<'a> {
    g: &'a Graph,
    spec: &'a Specialized,
    producers: BTreeMap<ValueId, usize>,
    /// Position in `spec.live` of each live node.
    live_of: BTreeMap<usize, usize>,
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

    /// Replaces the QDQ patterns of `spec.live` by integer ops
    /// (see the module comment).
    pub fn fuse_qdq(&self, spec: &mut Specialized) {
        let uses = self.readers(spec);
        let is_output = |v: ValueId| self.outputs.iter().any(|(o, _)| *o == v);
        let cx = Qdq {
            g: self,
            spec,
            producers: self.producers(),
            live_of: spec.live.iter().enumerate().map(|(p, &i)| (i, p)).collect(),
        };
        // Position of each QuantizeLinear replaced -> its fused node; Convs gone.
        let mut fused: BTreeMap<usize, (Node, Attrs)> = BTreeMap::new();
        let mut gone: BTreeSet<usize> = BTreeSet::new();
        let mut dq_x: BTreeSet<usize> = BTreeSet::new();
        for (pos, &i) in spec.live.iter().enumerate() {
            let node = spec.node(self, i);
            if !node.domain.is_empty() || node.outputs.len() != 1 {
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
            if let Some((made, dqs)) = cx.qdq_rewrite(node, q) {
                fused.insert(*u, made);
                gone.insert(pos);
                dq_x.extend(dqs);
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

impl Qdq<'_> {
    /// The constant DequantizeLinear that made `v`: its (integers, scale, zero point).
    fn dequantized_const(&self, v: ValueId) -> Option<(ValueId, ValueId, Option<ValueId>, i64)> {
        let n = &self.g.nodes[*self.producers.get(&v)?];
        if n.op_type != "DequantizeLinear" || !n.domain.is_empty() {
            return None;
        }
        if n.attrs.int("block_size", 0).ok()? != 0 {
            return None;
        }
        let q = (*n.inputs.first()?)?;
        let s = (*n.inputs.get(1)?)?;
        let z = n.inputs.get(2).copied().flatten();
        let known = |v: ValueId| self.spec.consts.get(v).is_some_and(Option::is_some);
        if !known(q) || !known(s) || z.is_some_and(|z| !known(z)) {
            return None;
        }
        Some((q, s, z, n.attrs.int("axis", 1).ok()?))
    }

    /// Whether the bias DequantizeLinear's integers are QLinearConv's bias: int32, zero
    /// points 0, scale[oc] == fl(x_scale x w_scale[oc]).
    fn bias_is_exact(
        &self,
        (q, s, z): (ValueId, ValueId, Option<ValueId>),
        x_scale: f32,
        w_scale: &[f32],
    ) -> bool {
        let c = |v: ValueId| self.spec.consts[v].as_ref();
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
    fn qdq_conv_parts(&self, conv: &Node, q: &Node) -> Option<Parts> {
        let c = |v: ValueId| self.spec.consts.get(v)?.as_ref();
        let f32_of = |v: ValueId| c(v).filter(|t| t.dtype() == DType::F32);
        // x: a live DequantizeLinear with one scale and zero point.
        let (dq_x, [xq, xs, xz]) = self.live_dequantize((*conv.inputs.first()?)?)?;
        let (xq, xs) = (xq?, xs?);
        let x_scale = f32_of(xs)?.view::<f32>().ok()?[0];
        // W: a constant DequantizeLinear, per tensor or per output channel.
        let (wq, ws, wz, axis) = self.dequantized_const((*conv.inputs.get(1)?)?)?;
        let w_scale: Vec<f32> = f32_of(ws)?.view::<f32>().ok()?.to_vec();
        if w_scale.len() != 1 && axis != 0 {
            return None;
        }
        // The bias: integers QLinearConv can add as they are.
        let bias = match conv.inputs.get(2).copied().flatten() {
            None => None,
            Some(b) => {
                let (bq, bs, bz, _) = self.dequantized_const(b)?;
                self.bias_is_exact((bq, bs, bz), x_scale, &w_scale)
                    .then_some(bq)?;
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
    fn live_dequantize(&self, v: ValueId) -> Option<(usize, [Option<ValueId>; 3])> {
        let c = |v: ValueId| self.spec.consts.get(v)?.as_ref();
        let i = *self.producers.get(&v)?;
        self.live_of.get(&i)?;
        let n = &self.g.nodes[i];
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
    fn qdq_add_parts(&self, add: &Node, q: &Node) -> Option<(Vec<Option<ValueId>>, [usize; 2])> {
        let c = |v: ValueId| self.spec.consts.get(v)?.as_ref();
        let (a, b) = ((*add.inputs.first()?)?, (*add.inputs.get(1)?)?);
        if self.spec.types[a] != self.spec.types[b] {
            return None;
        }
        let (da, ia) = self.live_dequantize(a)?;
        let (db, ib) = self.live_dequantize(b)?;
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

    /// The integer node replacing `node` and the QuantizeLinear `q` reading it, and the
    /// DequantizeLinear nodes it consumed.
    fn qdq_rewrite(&self, node: &Node, q: &Node) -> Option<((Node, Attrs), Vec<usize>)> {
        let name = format!("qlinear({})", node.name);
        let op = node.op_type.as_str();
        match op {
            "Conv" => {
                let parts = self.qdq_conv_parts(node, q)?;
                let made = self.g.product_node(
                    self.spec,
                    "QLinearConv",
                    node.attrs.clone(),
                    name,
                    parts.inputs,
                    vec![parts.out],
                )?;
                Some((made, vec![parts.dq_x]))
            }
            // A sum of two quantized values, else of one and a constant.
            "Add" => self
                .qdq_add_parts(node, q)
                .and_then(|(inputs, dqs)| {
                    let made = self.g.product_node_in(
                        self.spec,
                        crate::ops::MS_DOMAIN,
                        "QLinearAdd",
                        Attrs::default(),
                        name.clone(),
                        (inputs, q.outputs.clone()),
                    )?;
                    Some((made, dqs.to_vec()))
                })
                .or_else(|| self.lookup_node((node, q), name)),
            "MatMul" | "Gemm" => {
                let (inputs, dq) = self.qdq_product_parts(node, q)?;
                let (domain, op_type, attrs) = if op == "MatMul" {
                    ("", "QLinearMatMul", Attrs::default())
                } else {
                    let keep = node.attrs.0.iter().filter(|(k, _)| *k == "transB");
                    let keep = keep.map(|(k, v)| (k.clone(), v.clone())).collect();
                    (crate::ops::MS_DOMAIN, "QGemm", Attrs(keep))
                };
                let made = self.g.product_node_in(
                    self.spec,
                    domain,
                    op_type,
                    attrs,
                    name,
                    (inputs, q.outputs.clone()),
                )?;
                Some((made, vec![dq]))
            }
            // A ReduceMean whose output has GlobalAveragePool's shape averages the same
            // values: the shape check of product_node_in decides.
            "GlobalAveragePool" | "ReduceMean" => {
                let (inputs, dq) = self.qdq_average_parts(node, q)?;
                let made = self.g.product_node_in(
                    self.spec,
                    crate::ops::MS_DOMAIN,
                    "QLinearGlobalAveragePool",
                    Attrs::default(),
                    name,
                    (inputs, q.outputs.clone()),
                )?;
                Some((made, vec![dq]))
            }
            "AveragePool" => {
                let (inputs, dq) = self.qdq_average_parts(node, q)?;
                let made = self.g.product_node_in(
                    self.spec,
                    crate::ops::MS_DOMAIN,
                    "QLinearAveragePool",
                    node.attrs.clone(),
                    name,
                    (inputs, q.outputs.clone()),
                )?;
                Some((made, vec![dq]))
            }
            _ if ELEMENTWISE.contains(&op) => self.lookup_node((node, q), name),
            _ if MOVES_VALUES.contains(&op) => {
                let (inputs, dq) = self.qdq_same_scale_input(node, q)?;
                let made = self.g.product_node_in(
                    self.spec,
                    "",
                    op,
                    node.attrs.clone(),
                    name,
                    (inputs, q.outputs.clone()),
                )?;
                Some((made, vec![dq]))
            }
            _ => None,
        }
    }

    /// QLinearMatMul's or QGemm's inputs for the MatMul or Gemm `node` read only by the
    /// QuantizeLinear `q`: A a live one-value DequantizeLinear; B a constant one of 8-bit
    /// integers, per tensor or per output column; Gemm's C, if any, a constant int32 one in
    /// the product's scale (as for Conv's bias); Gemm with alpha and beta 1 and A not
    /// transposed.
    fn qdq_product_parts(&self, node: &Node, q: &Node) -> Option<(Vec<Option<ValueId>>, usize)> {
        let c = |v: ValueId| self.spec.consts.get(v)?.as_ref();
        let gemm = node.op_type == "Gemm";
        let a = &node.attrs;
        if gemm
            && (a.float("alpha", 1.0).ok()? != 1.0
                || a.float("beta", 1.0).ok()? != 1.0
                || a.int("transA", 0).ok()? != 0)
        {
            return None;
        }
        let trans_b = gemm && a.int("transB", 0).ok()? != 0;
        let (dq, [aq, asc, az]) = self.live_dequantize((*node.inputs.first()?)?)?;
        let (bq, bs, bz, axis) = self.dequantized_const((*node.inputs.get(1)?)?)?;
        let b_shape = c(bq)?.shape().to_vec();
        let [rows, cols] = b_shape[..] else {
            return None;
        };
        let n = if trans_b { rows } else { cols };
        let b_scale: Vec<f32> = c(bs)?.view::<f32>().ok()?.to_vec();
        // Per column: B's axis of N.
        let n_axis = if trans_b { 0 } else { 1 };
        if b_scale.len() != 1 && (b_scale.len() != n || axis.rem_euclid(2) != n_axis) {
            return None;
        }
        let bias = match node.inputs.get(2).copied().flatten() {
            None => None,
            Some(v) if gemm => {
                let (cq, cs, cz, _) = self.dequantized_const(v)?;
                let a_scale = c(asc?)?.view::<f32>().ok()?[0];
                let exact = self.bias_is_exact((cq, cs, cz), a_scale, &b_scale);
                (exact && c(cq)?.shape() == [n]).then_some(Some(cq))?
            }
            Some(_) => return None,
        };
        let (ys, yz) = self.one_value_qparams(q)?;
        let mut inputs = vec![aq, asc, az, Some(bq), Some(bs), bz];
        if gemm {
            inputs.push(bias);
        }
        inputs.extend([Some(ys), yz]);
        Some((inputs, dq))
    }

    /// QLinearGlobalAveragePool's inputs for the average `node` of a live DequantizeLinear's
    /// 8-bit values read only by the QuantizeLinear `q` giving that type, and the
    /// DequantizeLinear's index.
    fn qdq_average_parts(&self, node: &Node, q: &Node) -> Option<(Vec<Option<ValueId>>, usize)> {
        let (dq, [xq, xs, xz]) = self.live_dequantize((*node.inputs.first()?)?)?;
        let (ys, yz) = self.one_value_qparams(q)?;
        let dtype = |v: ValueId| self.spec.types.get(v)?.as_ref().map(|t| t.dtype);
        let t = dtype(xq?)?;
        if !matches!(t, DType::U8 | DType::I8) || dtype(*q.outputs.first()?)? != t {
            return None;
        }
        Some((vec![xq, xs, xz, Some(ys), yz], dq))
    }

    /// Q's scale and zero point when both are one-value constants (the scale f32).
    fn one_value_qparams(&self, q: &Node) -> Option<(ValueId, Option<ValueId>)> {
        let c = |v: ValueId| self.spec.consts.get(v)?.as_ref();
        let ys = (*q.inputs.get(1)?)?;
        let yz = q.inputs.get(2).copied().flatten();
        let ok = one_value(c(ys).filter(|t| t.dtype() == DType::F32))
            && yz.is_none_or(|z| one_value(c(z)));
        ok.then_some((ys, yz))
    }

    /// The Lookup8 node replacing the elementwise `node` and the QuantizeLinear `q` reading
    /// it (see [`Graph::qdq_table`]).
    fn lookup_node(
        &self,
        (node, q): (&Node, &Node),
        name: String,
    ) -> Option<((Node, Attrs), Vec<usize>)> {
        let (xq, table, dq) = self.qdq_table(node, q)?;
        let made = self.g.product_node_in(
            self.spec,
            "",
            crate::ops::lookup8::OP_TYPE,
            Attrs(crate::ops::lookup8::attrs(table).into_iter().collect()),
            name,
            (vec![Some(xq)], q.outputs.clone()),
        )?;
        Some((made, vec![dq]))
    }

    /// For an elementwise `node` of a live one-value DequantizeLinear's output (its other
    /// inputs one-value constants), read only by the QuantizeLinear `q` of a one-value scale:
    /// the DequantizeLinear's integers, the Lookup8 table of the three ops (their CPU kernels
    /// run on all 256 bytes, so the table holds what the float graph computes on the CPU),
    /// and the DequantizeLinear's index.
    fn qdq_table(&self, node: &Node, q: &Node) -> Option<(ValueId, Tensor, usize)> {
        let c = |v: ValueId| self.spec.consts.get(v)?.as_ref();
        let x = (*node.inputs.first()?)?;
        let (dq, [xq, xs, xz]) = self.live_dequantize(x)?;
        let (ys, yz) = self.one_value_qparams(q)?;
        let xq = xq?;
        let ty = |v: ValueId| self.spec.types.get(v)?.clone();
        let (x_ty, y_ty) = (ty(x)?, ty(node.outputs[0])?);
        let out = ty(*q.outputs.first()?)?.dtype;
        let byte = |d: DType| matches!(d, DType::U8 | DType::I8);
        if !byte(ty(xq)?.dtype) || !byte(out) || x_ty != y_ty {
            return None;
        }
        let mut rest = vec![];
        for v in &node.inputs[1..] {
            match v {
                None => rest.push(None),
                Some(v) => rest.push(Some(c(*v).filter(|t| t.numel() == 1)?)),
            }
        }
        let codes = Tensor::from_bytes(
            ty(xq)?.dtype,
            vec![256],
            (0..=255u8).collect::<Vec<_>>().into(),
        )
        .ok()?;
        let f32s = [ValueType::new(DType::F32, vec![256])];
        let dq_node = &self.g.nodes[dq];
        let xf = dq_node
            .op
            .run_cpu(&[Some(&codes), Some(c(xs?)?), xz.and_then(c)], &f32s)
            .ok()?;
        let mut args = vec![xf.first()];
        args.extend(rest);
        let yf = node.op.run_cpu(&args, &f32s).ok()?;
        let outs = [ValueType::new(out, vec![256])];
        let y =
            q.op.run_cpu(&[yf.first(), Some(c(ys)?), yz.and_then(c)], &outs)
                .ok()?;
        let table = y.into_iter().next()?;
        (table.numel() == 256 && table.dtype() == out).then_some((xq, table, dq))
    }

    /// `node`'s inputs with its first replaced by the integers of the live DequantizeLinear
    /// making it, when the QuantizeLinear `q` reading `node` has that DequantizeLinear's
    /// scale (positive) and zero point and gives its type: an op that only moves or picks
    /// values (MaxPool picks by order, which a positive scale keeps) then gives the same
    /// integers applied to them.
    fn qdq_same_scale_input(&self, node: &Node, q: &Node) -> Option<(Vec<Option<ValueId>>, usize)> {
        let c = |v: ValueId| self.spec.consts.get(v)?.as_ref();
        let (dq, [xq, xs, xz]) = self.live_dequantize((*node.inputs.first()?)?)?;
        let (ys, yz) = self.one_value_qparams(q)?;
        let xq = xq?;
        let dtype = |v: ValueId| self.spec.types.get(v)?.as_ref().map(|t| t.dtype);
        let t = dtype(xq)?;
        let integer = matches!(t, DType::U8 | DType::I8 | DType::U16 | DType::I16);
        if !integer || t != dtype(*q.outputs.first()?)? {
            return None;
        }
        let value = |v: Option<ValueId>| -> Option<f64> {
            match v {
                None => Some(0.0),
                Some(v) => c(v)?.to_f64_vec().ok()?.first().copied(),
            }
        };
        let scale = value(xs)?;
        if scale <= 0.0 || scale != value(Some(ys))? || value(xz)? != value(yz)? {
            return None;
        }
        let mut inputs = node.inputs.clone();
        inputs[0] = Some(xq);
        Some((inputs, dq))
    }
}
