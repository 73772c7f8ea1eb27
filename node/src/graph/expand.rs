//! Ops ONNX defines by a function body, expanded into the ops of that body before the graph
//! is built, so every part runs on kernels vkml has (on the GPU: products, softmax and
//! whatever the op's subgraphs do).
//!
//! FlexAttention (ai.onnx.preview, version 1): `softmax(prob_mod(score_mod(Q K^T * scale)))
//! V`, with K and V repeated over head groups when Q has more heads (grouped-query
//! attention). The scale is split as sqrt(scale) on each of Q and K, and the softmax runs in
//! float (double for double inputs), as the function body does.

use std::borrow::Cow;
use std::collections::{BTreeMap, HashSet};

use crate::error::{Error, Result};
use crate::model::{GraphDef, ModelDef, NodeDef};
use crate::ops::{AttrValue, Attrs};
use crate::tensor::{DType, Tensor};

const PREVIEW: &str = "ai.onnx.preview";

/// `model` with its function ops expanded (borrowed as it is when it has none).
pub fn functions(model: &ModelDef) -> Result<Cow<'_, ModelDef>> {
    let g = &model.graph;
    if !g.nodes.iter().any(is_flex) {
        return Ok(Cow::Borrowed(model));
    }
    let mut used: HashSet<String> = g.nodes.iter().flat_map(|n| n.outputs.clone()).collect();
    used.extend(g.initializers.iter().map(|(n, _)| n.clone()));
    used.extend(g.inputs.iter().map(|v| v.name.clone()));
    let mut out = model.clone();
    out.graph.nodes.clear();
    for n in &g.nodes {
        if !is_flex(n) {
            out.graph.nodes.push(n.clone());
            continue;
        }
        let mut e = Emit {
            prefix: format!("{}/", n.name),
            used: &mut used,
            nodes: Vec::new(),
            inits: Vec::new(),
        };
        let q_dtype = n.inputs.first().and_then(|q| declared_dtype(g, q));
        flex_attention(&mut e, n, model.opset, q_dtype)?;
        out.graph.nodes.append(&mut e.nodes);
        out.graph.initializers.append(&mut e.inits);
    }
    Ok(Cow::Owned(out))
}

/// The element type the graph declares for `name` (an input or a value_info entry): the
/// expansion's softmax type depends on it; undeclared, float is assumed.
fn declared_dtype(g: &GraphDef, name: &str) -> Option<DType> {
    g.inputs
        .iter()
        .chain(&g.value_info)
        .find(|v| v.name == name)
        .and_then(|v| v.dtype)
}

fn is_flex(n: &NodeDef) -> bool {
    n.domain == PREVIEW && n.op_type == "FlexAttention"
}

/// Nodes and constants made for one expanded node.
struct Emit<'a> {
    prefix: String,
    used: &'a mut HashSet<String>,
    nodes: Vec<NodeDef>,
    inits: Vec<(String, Tensor)>,
}

impl Emit<'_> {
    fn fresh(&mut self, base: &str) -> String {
        let base = format!("{}{base}", self.prefix);
        let mut name = base.clone();
        let mut k = 1;
        while !self.used.insert(name.clone()) {
            name = format!("{base}_{k}");
            k += 1;
        }
        name
    }

    fn node(&mut self, op: &str, inputs: &[&str], attrs: Vec<(&str, AttrValue)>) -> String {
        let out = self.fresh(op);
        self.nodes.push(NodeDef {
            name: out.clone(),
            op_type: op.into(),
            domain: String::new(),
            inputs: inputs.iter().map(|s| s.to_string()).collect(),
            outputs: vec![out.clone()],
            attrs: Attrs(attrs.into_iter().map(|(k, v)| (k.into(), v)).collect()),
        });
        out
    }

    fn konst(&mut self, base: &str, t: Tensor) -> String {
        let name = self.fresh(base);
        self.inits.push((name.clone(), t));
        name
    }

    /// `Shape(x)[start..end]`.
    fn dims(&mut self, x: &str, start: i64, end: i64) -> String {
        let attrs = vec![
            ("start", AttrValue::Int(start)),
            ("end", AttrValue::Int(end)),
        ];
        self.node("Shape", &[x], attrs)
    }

    /// A one-input, one-output body applied to `x`: its nodes copied under fresh names.
    fn apply(&mut self, g: &GraphDef, x: &str, what: &str) -> Result<String> {
        if g.inputs.len() != 1 || g.outputs.len() != 1 {
            return Err(Error::Unsupported(format!(
                "FlexAttention's {what} must take one tensor and give one"
            )));
        }
        let mut names: BTreeMap<String, String> = BTreeMap::new();
        names.insert(g.inputs[0].name.clone(), x.to_string());
        for (n, t) in &g.initializers {
            let k = self.konst(n, t.clone());
            names.insert(n.clone(), k);
        }
        for node in &g.nodes {
            let mut copy = node.clone();
            for i in copy.inputs.iter_mut() {
                if let Some(m) = names.get(i.as_str()) {
                    *i = m.clone();
                }
            }
            for o in copy.outputs.iter_mut().filter(|o| !o.is_empty()) {
                let m = self.fresh(&format!("{what}/{o}"));
                names.insert(o.clone(), m.clone());
                *o = m;
            }
            copy.name = self.fresh(&format!("{what}/{}", node.name));
            self.nodes.push(copy);
        }
        let y = &g.outputs[0].name;
        Ok(names.get(y).cloned().unwrap_or_else(|| y.clone()))
    }
}

fn graph_attr<'n>(n: &'n NodeDef, name: &str) -> Option<&'n GraphDef> {
    match n.attrs.get(name) {
        Some(AttrValue::Graph(g)) => Some(g),
        _ => None,
    }
}

/// K or V `[B, Hkv, S, D]` repeated to `[B, Hq, S, D]`, each head Hq / Hkv times in a row.
fn repeat_heads(e: &mut Emit<'_>, x: &str, q: &str) -> String {
    let b = e.dims(q, 0, 1);
    let hq = e.dims(q, 1, 2);
    let hkv = e.dims(x, 1, 2);
    let s = e.dims(x, 2, 3);
    let d = e.dims(x, 3, 4);
    let r = e.node("Div", &[&hq, &hkv], vec![]);
    let axis = e.konst("axis2", Tensor::from_vec(vec![1], vec![2i64]));
    let u = e.node("Unsqueeze", &[x, &axis], vec![]);
    let cat = |v| ("axis", AttrValue::Int(v));
    let expand_to = e.node("Concat", &[&b, &hkv, &r, &s, &d], vec![cat(0)]);
    let x5 = e.node("Expand", &[&u, &expand_to], vec![]);
    let shape = e.node("Concat", &[&b, &hq, &s, &d], vec![cat(0)]);
    e.node("Reshape", &[&x5, &shape], vec![])
}

fn flex_attention(e: &mut Emit<'_>, n: &NodeDef, opset: i64, q_dtype: Option<DType>) -> Result<()> {
    let bad = |m: String| Error::Node {
        node: n.name.clone(),
        op_type: n.op_type.clone(),
        message: m,
    };
    if opset < 15 || n.inputs.len() != 3 || n.outputs.len() != 1 {
        return Err(bad(
            "FlexAttention takes Q, K and V, gives Y, and needs default-domain opset 15 or later"
                .into(),
        ));
    }
    let (q, k, v) = (&n.inputs[0], &n.inputs[1], &n.inputs[2]);
    let kr = repeat_heads(e, k, q);
    let vr = repeat_heads(e, v, q);
    let scale = match n.attrs.float_opt("scale").map_err(|x| bad(x.to_string()))? {
        Some(s) => e.konst("scale", Tensor::from_vec(vec![], vec![s])),
        None => {
            let d = e.dims(q, 3, 4);
            let d = e.node("Cast", &[&d], vec![("to", AttrValue::Int(1))]);
            let root = e.node("Sqrt", &[&d], vec![]);
            let one = e.konst("one", Tensor::from_vec(vec![1], vec![1.0f32]));
            e.node("Div", &[&one, &root], vec![])
        }
    };
    let half = e.node("Sqrt", &[&scale], vec![]);
    let half = e.node("CastLike", &[&half, q], vec![]);
    let qs = e.node("Mul", &[q, &half], vec![]);
    let ks = e.node("Mul", &[&kr, &half], vec![]);
    let perm = ("perm", AttrValue::Ints(vec![0, 1, 3, 2]));
    let kt = e.node("Transpose", &[&ks], vec![perm]);
    let score = e.node("MatMul", &[&qs, &kt], vec![]);
    // The softmax runs in float, or in double for double inputs.
    let wide = match q_dtype {
        Some(DType::F64) => DType::F64,
        _ => DType::F32,
    };
    let to = ("to", AttrValue::Int(i64::from(wide.onnx_code())));
    let score = e.node("Cast", &[&score], vec![to]);
    let score = match graph_attr(n, "score_mod") {
        Some(g) => e.apply(g, &score, "score_mod")?,
        None => score,
    };
    let prob = e.node("Softmax", &[&score], vec![("axis", AttrValue::Int(3))]);
    let prob = match graph_attr(n, "prob_mod") {
        Some(g) => e.apply(g, &prob, "prob_mod")?,
        None => prob,
    };
    let vw = e.node("CastLike", &[&vr, &prob], vec![]);
    let y = e.node("MatMul", &[&prob, &vw], vec![]);
    let out = &n.outputs[0];
    e.used.insert(out.clone());
    e.nodes.push(NodeDef {
        name: n.name.clone(),
        op_type: "CastLike".into(),
        domain: String::new(),
        inputs: vec![y, q.clone()],
        outputs: vec![out.clone()],
        attrs: Attrs::default(),
    });
    Ok(())
}
