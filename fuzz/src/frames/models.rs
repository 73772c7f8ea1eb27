//! The small models the frames target loads: built here, so the target needs no files.

use prost::Message;

use crate::proto::tensor_shape_proto::{Dimension, dimension};
use crate::proto::type_proto::{self, Value};
use crate::proto::{
    GraphProto, ModelProto, NodeProto, OperatorSetIdProto, TensorProto, TensorShapeProto,
    TypeProto, ValueInfoProto,
};

fn value(name: &str, elem_type: i32, dims: &[i64]) -> ValueInfoProto {
    ValueInfoProto {
        name: name.into(),
        r#type: Some(TypeProto {
            value: Some(Value::TensorType(type_proto::Tensor {
                elem_type,
                shape: Some(TensorShapeProto {
                    dim: dims
                        .iter()
                        .map(|&d| Dimension {
                            value: Some(dimension::Value::DimValue(d)),
                            ..Default::default()
                        })
                        .collect(),
                }),
            })),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn node(op: &str, inputs: &[&str], output: &str) -> NodeProto {
    NodeProto {
        op_type: op.into(),
        name: format!("{op}_0"),
        input: inputs.iter().map(|s| s.to_string()).collect(),
        output: vec![output.into()],
        ..Default::default()
    }
}

fn model(graph: GraphProto) -> Vec<u8> {
    ModelProto {
        ir_version: 8,
        opset_import: vec![OperatorSetIdProto {
            domain: String::new(),
            version: 17,
        }],
        graph: Some(graph),
        ..Default::default()
    }
    .encode_to_vec()
}

fn floats(name: &str, dims: &[i64], values: Vec<f32>) -> TensorProto {
    TensorProto {
        name: name.into(),
        dims: dims.to_vec(),
        data_type: 1,
        float_data: values,
        ..Default::default()
    }
}

/// `y = x + c`, `y = Gather(table, idx)`, `y = Relu(x @ w)`: a weight each, inputs of two
/// types, an index a run can push out of range.
pub fn all() -> Vec<Vec<u8>> {
    let add = GraphProto {
        node: vec![node("Add", &["x", "c"], "y")],
        initializer: vec![floats("c", &[4], vec![1.0, 2.0, 3.0, 4.0])],
        input: vec![value("x", 1, &[1, 4])],
        output: vec![value("y", 1, &[1, 4])],
        ..Default::default()
    };
    let gather = GraphProto {
        node: vec![node("Gather", &["table", "idx"], "y")],
        initializer: vec![floats(
            "table",
            &[5, 2],
            (0..10).map(|i| i as f32).collect(),
        )],
        input: vec![value("idx", 7, &[3])],
        output: vec![value("y", 1, &[3, 2])],
        ..Default::default()
    };
    let mlp = GraphProto {
        node: vec![node("MatMul", &["x", "w"], "h"), node("Relu", &["h"], "y")],
        initializer: vec![floats("w", &[3, 2], vec![1.0, -1.0, 0.5, 2.0, -0.5, 1.0])],
        input: vec![value("x", 1, &[2, 3])],
        output: vec![value("y", 1, &[2, 2])],
        ..Default::default()
    };
    vec![model(add), model(gather), model(mlp)]
}
