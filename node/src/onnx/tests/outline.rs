//! The outline of a model: op types and declared types, sequences, maps and optionals included,
//! read even from models vkml refuses to load.

use super::super::proto::{GraphProto, TypeProto, ValueInfoProto, type_proto};
use super::{TempDir, model_with, node, raw_tensor, tensor_value, write_model};
use crate::onnx::{DeclaredType, outline};

fn typed(name: &str, value: type_proto::Value) -> ValueInfoProto {
    ValueInfoProto {
        name: name.into(),
        r#type: Some(TypeProto {
            value: Some(value),
            denotation: String::new(),
        }),
        ..Default::default()
    }
}

fn tensor_type(elem_type: i32) -> Option<Box<TypeProto>> {
    Some(Box::new(TypeProto {
        value: Some(type_proto::Value::TensorType(type_proto::Tensor {
            elem_type,
            shape: None,
        })),
        denotation: String::new(),
    }))
}

#[test]
fn declared_types_nest_and_initializers_are_not_inputs() {
    let g = GraphProto {
        name: "g".into(),
        node: vec![
            node("SequenceAt", "at", &["seq", "pos"], &["t"]),
            node("Relu", "relu", &["t"], &["y"]),
        ],
        initializer: vec![raw_tensor("pos", 7, &[], &0i64.to_le_bytes())],
        input: vec![
            typed(
                "seq",
                type_proto::Value::SequenceType(Box::new(type_proto::Sequence {
                    elem_type: tensor_type(1),
                })),
            ),
            // Listed as an input too, as files before IR version 4 do.
            tensor_value("pos", 7, None),
            typed(
                "opt",
                type_proto::Value::OptionalType(Box::new(type_proto::Optional {
                    elem_type: tensor_type(6),
                })),
            ),
            typed(
                "m",
                type_proto::Value::MapType(Box::new(type_proto::Map {
                    key_type: 8,
                    value_type: tensor_type(1),
                })),
            ),
        ],
        output: vec![tensor_value("y", 1, None)],
        ..Default::default()
    };
    let dir = TempDir::new("outline");
    let path = write_model(&dir, "m.onnx", &model_with(g));
    let o = outline(&path).unwrap();
    assert_eq!(o.op_types, vec!["SequenceAt", "Relu"]);
    let float = || Box::new(DeclaredType::Tensor { elem_type: 1 });
    assert_eq!(
        o.inputs,
        vec![
            ("seq".to_string(), DeclaredType::Sequence(float())),
            (
                "opt".to_string(),
                DeclaredType::Optional(Box::new(DeclaredType::Tensor { elem_type: 6 }))
            ),
            (
                "m".to_string(),
                DeclaredType::Map {
                    key_type: 8,
                    value: float()
                }
            ),
        ]
    );
    assert_eq!(o.inputs[2].1.to_string(), "map(string, tensor(float))");
    assert_eq!(
        o.outputs,
        vec![("y".to_string(), DeclaredType::Tensor { elem_type: 1 })]
    );
    // The loader itself refuses the map input, by name (sequences and optionals load).
    let e = crate::onnx::load(&path).unwrap_err().to_string();
    assert!(e.contains("'m'") && e.contains("map"), "{e}");
}
