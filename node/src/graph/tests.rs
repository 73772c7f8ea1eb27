//! Specialisation on run-time values: a rule that needs a value fed as a graph input names
//! that input (through any chain of nodes), and with the value known the graph plans.

use super::{Graph, SpecializeError};
use crate::onnx::proto::GraphProto;
use crate::onnx::tests::{D, TempDir, model_with, node, raw_tensor, tensor_value, write_model};
use crate::ops::ValueType;
use crate::tensor::{DType, Tensor};

const FLOAT: i32 = 1;
const INT64: i32 = 7;

fn i64_bytes(v: &[i64]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// y = Reshape(x, s + c): the shape comes from graph input `s` through an Add.
fn reshape_by_input() -> Graph {
    let g = GraphProto {
        name: "g".into(),
        node: vec![
            node("Add", "shift", &["s", "c"], &["s2"]),
            node("Reshape", "reshape", &["x", "s2"], &["y"]),
        ],
        initializer: vec![raw_tensor("c", INT64, &[2], &i64_bytes(&[1, 0]))],
        input: vec![
            tensor_value("x", FLOAT, Some(&[D::V(6)])),
            tensor_value("s", INT64, Some(&[D::V(2)])),
        ],
        output: vec![tensor_value("y", FLOAT, None)],
        ..Default::default()
    };
    let dir = TempDir::new("graph-spec");
    let path = write_model(&dir, "m.onnx", &model_with(g));
    Graph::from_model(&crate::onnx::load(&path).unwrap()).unwrap()
}

fn types() -> Vec<ValueType> {
    vec![
        ValueType::new(DType::F32, vec![6]),
        ValueType::new(DType::I64, vec![2]),
    ]
}

#[test]
fn a_shape_fed_through_a_node_names_the_graph_input_it_comes_from() {
    let g = reshape_by_input();
    match g.specialize(&types(), &[]) {
        Err(SpecializeError::NeedsValues(inputs)) => assert_eq!(inputs, vec![1]),
        Err(e) => panic!("wrong error: {:?}", crate::Error::from(e)),
        Ok(_) => panic!("planned without the shape"),
    }
    let y = g.outputs[0].0;
    assert_eq!(g.graph_inputs_feeding(y), vec![0, 1]);
}

#[test]
fn with_the_input_known_the_shape_follows_its_value() {
    let g = reshape_by_input();
    // [2, 2] + [1, 0] = [3, 2], which fits x's 6 elements.
    let s = Tensor::from_vec(vec![2], vec![2i64, 2]);
    let spec = g.specialize(&types(), &[None, Some(&s)]).unwrap();
    let y = g.outputs[0].0;
    assert_eq!(spec.types[y], Some(ValueType::new(DType::F32, vec![3, 2])));
    // The shape arithmetic folded; only the Reshape of the unknown x is left to run.
    assert_eq!(spec.live.len(), 1);
    assert_eq!(g.nodes[spec.live[0]].op_type, "Reshape");
}

#[test]
fn a_value_still_unknown_with_its_inputs_known_is_an_error_naming_node_and_producer() {
    // Specialisation folds everything whose inputs are known, so this state only arises if a
    // producer cannot be computed while planning; the message must still say where.
    let g = reshape_by_input();
    let s = Tensor::from_vec(vec![2], vec![2i64, 2]);
    let reshape = g.nodes.iter().position(|n| n.op_type == "Reshape").unwrap();
    let e = match g.needs_value(reshape, 1, &[None, Some(&s)]) {
        SpecializeError::Failed(e) => e.to_string(),
        other => panic!("wrong error: {other:?}"),
    };
    assert!(
        e.contains("'reshape'") && e.contains("Reshape") && e.contains("'shift' (Add)"),
        "{e}"
    );
}

/// Omitted optional outputs ("") get values of their own: Attention's outputs Y, '', '', qk
/// are not one value produced twice, and the named ones keep their positions.
#[test]
fn omitted_outputs_are_values_of_their_own() {
    let four = [D::V(1), D::V(1), D::V(2), D::V(4)];
    let g = GraphProto {
        name: "g".into(),
        node: vec![node(
            "Attention",
            "attn",
            &["q", "k", "v"],
            &["y", "", "", "qk"],
        )],
        input: ["q", "k", "v"]
            .iter()
            .map(|n| tensor_value(n, FLOAT, Some(&four)))
            .collect(),
        output: vec![
            tensor_value("y", FLOAT, None),
            tensor_value("qk", FLOAT, None),
        ],
        ..Default::default()
    };
    let mut m = model_with(g);
    m.opset_import[0].version = 23;
    let dir = TempDir::new("graph-omitted");
    let path = write_model(&dir, "m.onnx", &m);
    let g = Graph::from_model(&crate::onnx::load(&path).unwrap()).unwrap();
    let outs = &g.nodes[0].outputs;
    assert_eq!(outs.len(), 4);
    assert!(outs[1] != outs[2]);
    assert_eq!(g.value_names[outs[3]], "qk");
}
