//! Growing caches made into caches that stay where they are.
//!
//! Optimum's exports grow each layer's cache by concatenation: `present = Concat(past, rows,
//! axis=-2)`, one row longer every step. Fed as is, every length is a plan of its own and
//! the cache is a new value each step. [`rewrite`] (through [`super::prepare`]) rewrites such a model (its bytes, so
//! a cluster gets the same model) into the form GenAI's builder emits: each `past` input is a
//! buffer as long as the whole sequence, and the Concat becomes a TensorScatter that writes
//! the step's rows into it at a row the loop feeds ([`WRITE_INDEX`]). Past and present then
//! have one type, so a prompt and the single-token steps are two plans, and the cache is
//! bound in place (exec/bound.rs: TensorScatter writes just the new rows).
//!
//! The graph keeps computing its masks as exported. For the step's queries to see the rows
//! they should, the loop places them ([`super::Sequence`]): the prompt at the end of the
//! buffer, where the export's causal mask (built from the past's length) puts it, so each
//! prompt token sees the ones before it; then each generated token alone, in the free rows
//! from the start, where a single query's causal mask covers the whole buffer. The attention
//! mask has ones over the rows in use. Attention does not depend on the order of the rows it
//! reads, and positions come from `position_ids`, so the model computes what it would over
//! the rows in order. This needs a model that takes `position_ids` and `attention_mask` and
//! reads each past only in its Concat and through Shape; others are left as they are.

use bytes::Bytes;

use super::io::{PAST, PRESENT, cache_slot};
use crate::onnx::proto::{
    self, AttributeProto, GraphProto, NodeProto, TensorProto, ValueInfoProto,
    attribute_proto::AttributeType, tensor_shape_proto, type_proto,
};

/// The input the rewritten model takes: the cache row the step's first row goes to, one per
/// batch entry (int64; ONNX's TensorScatter `write_indices`).
pub const WRITE_INDEX: &str = "vkml_cache_write_index";

/// The past inputs' length in the rewritten model: the buffer's rows.
const CACHE_LENGTH: &str = "cache_length";

/// One cache: its past input, the Concat that makes its present, the Shape nodes reading it.
struct Growing {
    past: String,
    concat: usize,
    shapes: Vec<usize>,
}

/// Rewrites `g` as above, or says why it cannot; `g` may be half rewritten then (the caller
/// keeps a copy).
pub(super) fn rewrite(g: &mut GraphProto) -> Result<(), String> {
    let has_input = |n: &str| g.input.iter().any(|i| i.name == n);
    for needed in ["input_ids", "position_ids", "attention_mask"] {
        if !has_input(needed) {
            return Err(format!("no '{needed}' input"));
        }
    }
    if has_input(WRITE_INDEX) {
        return Err("already rewritten".into());
    }
    if g.node.iter().any(|n| {
        n.attribute
            .iter()
            .any(|a| a.g.is_some() || !a.graphs.is_empty())
    }) {
        return Err("it has subgraphs, whose reads of the caches are not followed".into());
    }
    let caches = growing_caches(g)?;
    if caches.is_empty() {
        return Err("no past/present cache pairs".into());
    }
    let batch = batch_dim(g, &caches[0].past)?;
    let mut inserts: Vec<(usize, Vec<NodeProto>)> = Vec::new();
    for (i, c) in caches.iter().enumerate() {
        let concat = &mut g.node[c.concat];
        concat.op_type = "TensorScatter".into();
        concat.domain = String::new();
        concat.input.push(WRITE_INDEX.into());
        concat.attribute = vec![int_attr("axis", -2), string_attr("mode", "linear")];
        for (j, &s) in c.shapes.iter().enumerate() {
            inserts.push((
                s,
                window_shape(&mut g.node[s], &c.past, &format!("{i}_{j}")),
            ));
        }
        set_length(g, &c.past)?;
    }
    // Later positions first, so the earlier ones stay valid.
    inserts.sort_by_key(|(at, _)| std::cmp::Reverse(*at));
    for (at, nodes) in inserts {
        g.node.splice(at..at, nodes);
    }
    g.initializer.push(i64_tensor(ZEROS_2, &[0, 0]));
    g.initializer.push(i64_tensor(ZERO_1, &[0]));
    g.initializer.push(i64_tensor(ONE_1, &[1]));
    g.initializer.push(i64_tensor(TWO_1, &[2]));
    g.input.push(ValueInfoProto {
        name: WRITE_INDEX.into(),
        r#type: Some(tensor_type(
            proto::tensor_proto::DataType::Int64 as i32,
            vec![batch],
        )),
        ..Default::default()
    });
    Ok(())
}

fn growing_caches(g: &GraphProto) -> Result<Vec<Growing>, String> {
    let mut out = Vec::new();
    for input in &g.input {
        let Some(slot) = cache_slot(&input.name, PAST) else {
            continue;
        };
        let Some(present) = g
            .output
            .iter()
            .find(|o| cache_slot(&o.name, PRESENT) == Some(slot))
        else {
            return Err(format!("'{}' has no present output", input.name));
        };
        let mut concat = None;
        let mut shapes = Vec::new();
        for (k, n) in g.node.iter().enumerate() {
            if !n.input.contains(&input.name) {
                continue;
            }
            let is_concat = n.op_type == "Concat"
                && is_onnx_domain(&n.domain)
                && n.input.len() == 2
                && n.input[0] == input.name
                && n.output.first() == Some(&present.name)
                && n.attribute
                    .iter()
                    .any(|a| a.name == "axis" && (a.i == 2 || a.i == -2));
            if is_concat && concat.is_none() {
                concat = Some(k);
            } else if n.op_type == "Shape" && is_onnx_domain(&n.domain) {
                shapes.push(k);
            } else {
                return Err(format!(
                    "'{}' is read by {} ({}), not only by the Concat that grows it",
                    input.name, n.name, n.op_type
                ));
            }
        }
        let concat = concat.ok_or_else(|| {
            format!(
                "'{}' does not become '{}' by a Concat along its rows",
                input.name, present.name
            )
        })?;
        out.push(Growing {
            past: input.name.clone(),
            concat,
            shapes,
        });
    }
    Ok(out)
}

fn is_onnx_domain(d: &str) -> bool {
    d.is_empty() || d == "ai.onnx"
}

const ZEROS_2: &str = "vkml_window/zeros_2";
const ZERO_1: &str = "vkml_window/zero_1";
const ONE_1: &str = "vkml_window/one_1";
const TWO_1: &str = "vkml_window/two_1";

/// Turns `Shape(past)` (node `shape`) into the shape the past would have had: the buffer's
/// less the step's new rows, `input_ids`' second dimension. Every node here folds while a
/// plan is made (shapes are known then), so none of them runs.
fn window_shape(shape: &mut NodeProto, past: &str, tag: &str) -> Vec<NodeProto> {
    let name = |s: &str| format!("vkml_window/{tag}/{s}");
    let (ids_shape, rows, drop, full) =
        (name("ids_shape"), name("rows"), name("drop"), name("full"));
    let mut nodes = vec![
        node("Shape", &["input_ids"], &ids_shape, vec![]),
        node("Slice", &[&ids_shape, ONE_1, TWO_1], &rows, vec![]),
        node(
            "Concat",
            &[ZEROS_2, &rows, ZERO_1],
            &drop,
            vec![int_attr("axis", 0)],
        ),
        node("Shape", &[past], &full, vec![]),
    ];
    // The original node keeps its output (and its start/end, applied to the window's shape
    // by a Slice in its place).
    let (start, end) = (attr_int(shape, "start"), attr_int(shape, "end"));
    let out = shape.output[0].clone();
    match (start, end) {
        (None, None) => {
            *shape = node("Sub", &[&full, &drop], &out, vec![]);
        }
        (start, end) => {
            let window = name("window");
            nodes.push(node("Sub", &[&full, &drop], &window, vec![]));
            let (starts, ends) = (name("start"), name("end"));
            nodes.push(constant(&starts, start.unwrap_or(0)));
            nodes.push(constant(&ends, end.unwrap_or(i64::MAX)));
            *shape = node("Slice", &[&window, &starts, &ends], &out, vec![]);
        }
    }
    nodes
}

fn attr_int(n: &NodeProto, name: &str) -> Option<i64> {
    n.attribute.iter().find(|a| a.name == name).map(|a| a.i)
}

pub(super) fn node(
    op: &str,
    inputs: &[&str],
    output: &str,
    attribute: Vec<AttributeProto>,
) -> NodeProto {
    NodeProto {
        input: inputs.iter().map(|s| s.to_string()).collect(),
        output: vec![output.into()],
        name: output.into(),
        op_type: op.into(),
        attribute,
        ..Default::default()
    }
}

fn constant(output: &str, v: i64) -> NodeProto {
    let a = AttributeProto {
        name: "value".into(),
        r#type: AttributeType::Tensor as i32,
        t: Some(i64_tensor("", &[v])),
        ..Default::default()
    };
    node("Constant", &[], output, vec![a])
}

fn int_attr(name: &str, i: i64) -> AttributeProto {
    AttributeProto {
        name: name.into(),
        r#type: AttributeType::Int as i32,
        i,
        ..Default::default()
    }
}

fn string_attr(name: &str, s: &str) -> AttributeProto {
    AttributeProto {
        name: name.into(),
        r#type: AttributeType::String as i32,
        s: Bytes::from(s.to_string()),
        ..Default::default()
    }
}

pub(super) fn i64_tensor(name: &str, v: &[i64]) -> TensorProto {
    TensorProto {
        name: name.into(),
        dims: vec![v.len() as i64],
        data_type: proto::tensor_proto::DataType::Int64 as i32,
        int64_data: v.to_vec(),
        ..Default::default()
    }
}

fn dims_of(v: &ValueInfoProto) -> Option<&Vec<tensor_shape_proto::Dimension>> {
    match v.r#type.as_ref()?.value.as_ref()? {
        type_proto::Value::TensorType(t) => t.shape.as_ref().map(|s| &s.dim),
        _ => None,
    }
}

pub(super) fn dims_of_mut(
    v: &mut ValueInfoProto,
) -> Option<&mut Vec<tensor_shape_proto::Dimension>> {
    match v.r#type.as_mut()?.value.as_mut()? {
        type_proto::Value::TensorType(t) => t.shape.as_mut().map(|s| &mut s.dim),
        _ => None,
    }
}

/// The past input's batch dimension, for the write index's declaration.
fn batch_dim(g: &GraphProto, past: &str) -> Result<tensor_shape_proto::Dimension, String> {
    let input = g.input.iter().find(|i| i.name == past).expect("an input");
    match dims_of(input).map(Vec::as_slice) {
        Some([b, _, _, _]) => Ok(b.clone()),
        _ => Err(format!(
            "'{past}' is not declared [batch, heads, length, head size]"
        )),
    }
}

/// Declares `past`'s length as the buffer's.
fn set_length(g: &mut GraphProto, past: &str) -> Result<(), String> {
    let input = g
        .input
        .iter_mut()
        .find(|i| i.name == past)
        .expect("an input");
    let dim = match input.r#type.as_mut().and_then(|t| t.value.as_mut()) {
        Some(type_proto::Value::TensorType(t)) => t.shape.as_mut().and_then(|s| s.dim.get_mut(2)),
        _ => None,
    };
    let dim = dim.ok_or_else(|| format!("'{past}' has no declared length"))?;
    dim.value = Some(tensor_shape_proto::dimension::Value::DimParam(
        CACHE_LENGTH.into(),
    ));
    Ok(())
}

fn tensor_type(elem_type: i32, dim: Vec<tensor_shape_proto::Dimension>) -> proto::TypeProto {
    proto::TypeProto {
        value: Some(type_proto::Value::TensorType(type_proto::Tensor {
            elem_type,
            shape: Some(proto::TensorShapeProto { dim }),
        })),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message;

    fn value(name: &str, elem: i32, dims: &[&str]) -> ValueInfoProto {
        let dim = dims
            .iter()
            .map(|d| tensor_shape_proto::Dimension {
                value: Some(match d.parse::<i64>() {
                    Ok(n) => tensor_shape_proto::dimension::Value::DimValue(n),
                    Err(_) => tensor_shape_proto::dimension::Value::DimParam(d.to_string()),
                }),
                ..Default::default()
            })
            .collect();
        ValueInfoProto {
            name: name.into(),
            r#type: Some(tensor_type(elem, dim)),
            ..Default::default()
        }
    }

    /// One layer's key cache the way Optimum's export grows it: `present = Concat(past,
    /// rows)`, the past's length read by a Shape; `reader` reads the past too when given.
    fn export(inputs: &[&str], reader: Option<&str>) -> Bytes {
        const F32: i32 = 1;
        const I64: i32 = 7;
        let mut input: Vec<ValueInfoProto> = inputs
            .iter()
            .map(|n| value(n, I64, &["batch", "seq"]))
            .collect();
        input.push(value(
            "past_key_values.0.key",
            F32,
            &["batch", "2", "past", "4"],
        ));
        input.push(value("rows", F32, &["batch", "2", "seq", "4"]));
        let mut node = vec![
            node("Shape", &["past_key_values.0.key"], "past_shape", vec![]),
            node(
                "Concat",
                &["past_key_values.0.key", "rows"],
                "present.0.key",
                vec![int_attr("axis", -2)],
            ),
        ];
        if let Some(op) = reader {
            node.push(node_of(op, "past_key_values.0.key", "other"));
        }
        let graph = GraphProto {
            node,
            input,
            output: vec![value("present.0.key", F32, &["batch", "2", "total", "4"])],
            ..Default::default()
        };
        let model = proto::ModelProto {
            ir_version: 8,
            graph: Some(graph),
            ..Default::default()
        };
        Bytes::from(model.encode_to_vec())
    }

    fn node_of(op: &str, input: &str, output: &str) -> NodeProto {
        node(op, &[input], output, vec![])
    }

    const ALL: [&str; 3] = ["input_ids", "attention_mask", "position_ids"];

    #[test]
    fn a_growing_cache_becomes_a_scatter_into_a_buffer_of_the_sequence_s_length() {
        let out = super::super::prepare(export(&ALL, None), true)
            .unwrap()
            .expect("rewritten");
        let g = proto::ModelProto::decode(out).unwrap().graph.unwrap();
        let scatter = g
            .node
            .iter()
            .find(|n| n.output == ["present.0.key"])
            .unwrap();
        assert_eq!(scatter.op_type, "TensorScatter");
        assert_eq!(
            scatter.input,
            ["past_key_values.0.key", "rows", WRITE_INDEX]
        );
        // The past's Shape is now the window's: the buffer less the step's rows.
        let shape = g.node.iter().find(|n| n.output == ["past_shape"]).unwrap();
        assert_eq!(shape.op_type, "Sub");
        let at = |name: &str| g.node.iter().position(|n| n.output[0] == name).unwrap();
        assert!(shape.input.iter().all(|i| at(i) < at("past_shape")));
        let past = g.input.iter().find(|i| i.name == "past_key_values.0.key");
        let dims = dims_of(past.unwrap()).unwrap();
        assert_eq!(
            dims[2].value,
            Some(tensor_shape_proto::dimension::Value::DimParam(
                CACHE_LENGTH.into()
            ))
        );
        assert!(g.input.iter().any(|i| i.name == WRITE_INDEX));
        // Rewritten once: a second pass leaves it.
        let again = proto::ModelProto {
            graph: Some(g),
            ..Default::default()
        };
        let again = Bytes::from(again.encode_to_vec());
        assert!(super::super::prepare(again, true).unwrap().is_none());
    }

    #[test]
    fn caches_are_left_growing_where_placing_rows_would_change_what_the_model_computes() {
        // Positions would come from the past's length, which the buffer no longer gives.
        let no_positions = export(&["input_ids", "attention_mask"], None);
        assert!(super::super::prepare(no_positions, true).unwrap().is_none());
        // Nothing would hide the buffer's unused rows.
        let no_mask = export(&["input_ids", "position_ids"], None);
        assert!(super::super::prepare(no_mask, true).unwrap().is_none());
        // Another op would read the whole buffer as the past.
        let read = export(&ALL, Some("Neg"));
        assert!(super::super::prepare(read, true).unwrap().is_none());
        // Not a model at all.
        assert!(super::super::prepare(Bytes::from_static(b"\xff\xff"), true).is_err());
    }
}
