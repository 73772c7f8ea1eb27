//! The logits of the last position only.
//!
//! An export computes the logits of every position it is fed: for a prompt of 2,048 tokens
//! and a 128,256-word vocabulary that is a [2048, 128256] product and 525 MB (in f16) read back
//! to the host, of which the loop takes one row. [`rewrite`] feeds the model's head only the
//! last position's hidden state: a Slice before the product that makes the logits, so the
//! logits are [batch, 1, vocab] for any number of tokens fed (as a generation loop's own
//! model code computes them). What the head reads is found by walking up from the `logits`
//! output through ops that work position by position (a Cast, a bias, a scale, a softcap's
//! Tanh) to the MatMul or MatMulNBits that makes them; a model whose logits come otherwise is
//! left as it is.

use super::window::{i64_tensor, node};
use crate::onnx::proto::{GraphProto, NodeProto, tensor_shape_proto};

const HIDDEN: &str = "vkml_last/hidden";
const STARTS: &str = "vkml_last/starts";
const ENDS: &str = "vkml_last/ends";
const AXES: &str = "vkml_last/axes";

/// Rewrites `g` as above, or says why it cannot (then `g` is unchanged).
pub(super) fn rewrite(g: &mut GraphProto) -> Result<(), String> {
    let logits = g
        .output
        .iter()
        .position(|o| o.name == "logits")
        .ok_or("no 'logits' output")?;
    let initializers: std::collections::BTreeSet<&str> =
        g.initializer.iter().map(|t| t.name.as_str()).collect();
    let producer = |v: &str| g.node.iter().position(|n| n.output.iter().any(|o| o == v));
    let mut at = producer("logits").ok_or("'logits' is not made by a node")?;
    let head = loop {
        let n: &NodeProto = &g.node[at];
        match n.op_type.as_str() {
            "MatMul" | "MatMulNBits" => break at,
            "Cast" | "Tanh" | "Identity" => {}
            // A bias or a scale: the other input a constant.
            "Add" | "Mul" | "Div"
                if n.input.len() == 2 && initializers.contains(n.input[1].as_str()) => {}
            op => return Err(format!("the logits come from {op} ({})", n.name)),
        }
        let up = n.input.first().ok_or("an op without inputs")?;
        at = producer(up).ok_or_else(|| format!("'{up}' is not made by a node"))?;
    };
    if g.node.iter().any(|n| n.output.iter().any(|o| o == HIDDEN)) {
        return Err("already rewritten".into());
    }
    let hidden = g.node[head].input[0].clone();
    g.node[head].input[0] = HIDDEN.into();
    let slice = node("Slice", &[&hidden, STARTS, ENDS, AXES], HIDDEN, vec![]);
    g.node.insert(head, slice);
    g.initializer.push(i64_tensor(STARTS, &[-1]));
    g.initializer.push(i64_tensor(ENDS, &[i64::MAX]));
    g.initializer.push(i64_tensor(AXES, &[1]));
    // The logits' positions are one now, whatever `sequence_length` is.
    if let Some(dims) = super::window::dims_of_mut(&mut g.output[logits])
        && let Some(d) = dims.get_mut(1)
    {
        d.value = Some(tensor_shape_proto::dimension::Value::DimValue(1));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::generate::window::i64_tensor;

    /// hidden -> MatMul(head) -> Add(bias) -> Cast -> logits, the head's input made by `op`.
    fn graph(path: &[(&str, &[&str])]) -> GraphProto {
        let mut nodes = vec![node("Neg", &["x"], "hidden", vec![])];
        let mut last = "hidden".to_string();
        for (i, (op, extra)) in path.iter().enumerate() {
            let out = if i + 1 == path.len() {
                "logits".to_string()
            } else {
                format!("v{i}")
            };
            let mut inputs = vec![last.as_str()];
            inputs.extend_from_slice(extra);
            nodes.push(node(op, &inputs, &out, vec![]));
            last = out;
        }
        GraphProto {
            node: nodes,
            initializer: vec![i64_tensor("w", &[1]), i64_tensor("bias", &[1])],
            output: vec![crate::onnx::proto::ValueInfoProto {
                name: "logits".into(),
                ..Default::default()
            }],
            ..Default::default()
        }
    }

    #[test]
    fn the_head_reads_the_last_position_only() {
        let mut g = graph(&[("MatMul", &["w"]), ("Add", &["bias"]), ("Cast", &[])]);
        rewrite(&mut g).unwrap();
        let head = g.node.iter().position(|n| n.op_type == "MatMul").unwrap();
        assert_eq!(g.node[head].input, [HIDDEN, "w"]);
        let slice = &g.node[head - 1];
        assert_eq!(slice.op_type, "Slice");
        assert_eq!(slice.input, ["hidden", STARTS, ENDS, AXES]);
        assert_eq!(slice.output, [HIDDEN]);
        // Once only.
        assert!(rewrite(&mut g).is_err());
    }

    #[test]
    fn logits_made_otherwise_are_left_as_they_are() {
        // A bias that is computed, not a constant: it may differ by position.
        let mut g = graph(&[("MatMul", &["w"]), ("Add", &["x"])]);
        assert!(rewrite(&mut g).is_err());
        // No product at all.
        let mut g = graph(&[("Softmax", &[])]);
        assert!(rewrite(&mut g).is_err());
    }
}
