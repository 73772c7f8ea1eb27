//! NodeDef -> NodeProto bytes and back: how a cluster fragment ships the ops of a plan to the
//! nodes that run them (the op is rebuilt there from its type and attributes). Control flow's
//! bodies travel inside their node as GraphProtos, so a participant rebuilds an If, Loop or
//! Scan with its subgraphs and runs it on one of its devices.

use bytes::Bytes;
use prost::Message;

use super::LoadError;
use super::external::ExternalFiles;
use super::proto::attribute_proto::AttributeType;
use super::proto::tensor_shape_proto::{Dimension, dimension::Value as DimValue};
use super::proto::type_proto::{self, Value as TypeValue};
use super::proto::{
    AttributeProto, GraphProto, NodeProto, TensorProto, TensorShapeProto, TypeProto, ValueInfoProto,
};
use crate::model::{Dim, GraphDef, Kind, NodeDef, ValueDef};
use crate::ops::AttrValue;
use crate::tensor::Tensor;

/// Encodes a node: its type, domain, attributes (subgraphs included) and whatever input and
/// output names it has (a fragment's nodes have none: fragments refer to values by id).
pub fn encode_node(node: &NodeDef) -> Result<Vec<u8>, LoadError> {
    Ok(node_proto(node)?.encode_to_vec())
}

fn node_proto(node: &NodeDef) -> Result<NodeProto, LoadError> {
    let attribute = node
        .attrs
        .0
        .iter()
        .map(|(name, value)| attribute(name, value))
        .collect::<Result<_, _>>()?;
    Ok(NodeProto {
        name: node.name.clone(),
        op_type: node.op_type.clone(),
        domain: node.domain.clone(),
        input: node.inputs.clone(),
        output: node.outputs.clone(),
        attribute,
        ..Default::default()
    })
}

fn attribute(name: &str, value: &AttrValue) -> Result<AttributeProto, LoadError> {
    let mut a = AttributeProto {
        name: name.to_string(),
        ..Default::default()
    };
    let kind = match value {
        AttrValue::Int(i) => {
            a.i = *i;
            AttributeType::Int
        }
        AttrValue::Float(f) => {
            a.f = *f;
            AttributeType::Float
        }
        AttrValue::String(s) => {
            a.s = Bytes::from(s.clone().into_bytes());
            AttributeType::String
        }
        AttrValue::Tensor(t) => {
            a.t = Some(tensor_proto(t));
            AttributeType::Tensor
        }
        AttrValue::Ints(v) => {
            a.ints = v.clone();
            AttributeType::Ints
        }
        AttrValue::Floats(v) => {
            a.floats = v.clone();
            AttributeType::Floats
        }
        AttrValue::Strings(v) => {
            a.strings = v
                .iter()
                .map(|s| Bytes::from(s.clone().into_bytes()))
                .collect();
            AttributeType::Strings
        }
        AttrValue::Tensors(v) => {
            a.tensors = v.iter().map(tensor_proto).collect();
            AttributeType::Tensors
        }
        AttrValue::Graph(g) => {
            a.g = Some(graph_proto(g)?);
            AttributeType::Graph
        }
    };
    a.r#type = kind as i32;
    Ok(a)
}

/// A subgraph as ONNX wrote it: nodes, initializers and declared values. Only a model's main
/// graph defers weights, and a fragment never ships that one.
fn graph_proto(g: &GraphDef) -> Result<GraphProto, LoadError> {
    if let Some(d) = g.deferred.first() {
        return Err(LoadError::Unsupported(format!(
            "graph '{}' has external weight '{}' not loaded yet; only a model's main graph \
             may defer its weights",
            g.name, d.name
        )));
    }
    Ok(GraphProto {
        name: g.name.clone(),
        node: g.nodes.iter().map(node_proto).collect::<Result<_, _>>()?,
        initializer: g
            .initializers
            .iter()
            .map(|(name, t)| TensorProto {
                name: name.clone(),
                ..tensor_proto(t)
            })
            .collect(),
        input: g.inputs.iter().map(value_info).collect(),
        output: g.outputs.iter().map(value_info).collect(),
        value_info: g.value_info.iter().map(value_info).collect(),
        ..Default::default()
    })
}

fn value_info(v: &ValueDef) -> ValueInfoProto {
    let tensor = TypeValue::TensorType(type_proto::Tensor {
        elem_type: v.dtype.map_or(0, |d| d.onnx_code()),
        shape: v.dims.as_ref().map(|dims| TensorShapeProto {
            dim: dims
                .iter()
                .map(|d| Dimension {
                    value: Some(match d {
                        Dim::Fixed(n) => DimValue::DimValue(*n as i64),
                        Dim::Sym(s) => DimValue::DimParam(s.clone()),
                    }),
                    denotation: String::new(),
                })
                .collect(),
        }),
    });
    let untyped = v.dtype.is_none() && v.dims.is_none() && v.kind.is_tensor();
    ValueInfoProto {
        name: v.name.clone(),
        r#type: (!untyped).then(|| type_of(&v.kind, tensor)),
        ..Default::default()
    }
}

/// `kind` wrapped around the innermost tensor type.
fn type_of(kind: &Kind, tensor: TypeValue) -> TypeProto {
    let elem = |k: &Kind| Some(Box::new(type_of(k, tensor.clone())));
    let value = match kind {
        Kind::Tensor => tensor.clone(),
        Kind::Sequence(k) => {
            TypeValue::SequenceType(Box::new(type_proto::Sequence { elem_type: elem(k) }))
        }
        Kind::Optional(k) => {
            TypeValue::OptionalType(Box::new(type_proto::Optional { elem_type: elem(k) }))
        }
    };
    TypeProto {
        value: Some(value),
        denotation: String::new(),
    }
}

/// Decodes what [`encode_node`] wrote. Input and output names are left empty.
pub fn decode_node(data: Bytes) -> Result<NodeDef, LoadError> {
    let proto = NodeProto::decode(data).map_err(|source| LoadError::Decode {
        path: "<cluster fragment>".into(),
        source,
    })?;
    let name = proto.name.clone();
    super::convert::node_def(&proto, name, &ExternalFiles::new(None))
}

/// `t` as a TensorProto, its data in raw_data (strings in string_data).
pub(crate) fn tensor_proto(t: &Tensor) -> TensorProto {
    if let Ok(text) = t.strings() {
        return TensorProto {
            dims: t.shape().iter().map(|&d| d as i64).collect(),
            data_type: t.dtype().onnx_code(),
            string_data: text.iter().map(|s| s.as_bytes().to_vec().into()).collect(),
            ..Default::default()
        };
    }
    TensorProto {
        dims: t.shape().iter().map(|&d| d as i64).collect(),
        data_type: t.dtype().onnx_code(),
        // ONNX files pack the 4- and 2-bit types.
        raw_data: if t.dtype().file_bits() < 8 {
            crate::lowp::pack(t.dtype(), t.bytes()).into()
        } else {
            t.bytes().clone()
        },
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::ops::Attrs;

    #[test]
    fn nodes_survive_the_round_trip() {
        let attrs = Attrs(BTreeMap::from([
            ("axis".to_string(), AttrValue::Int(-1)),
            ("alpha".to_string(), AttrValue::Float(0.25)),
            ("mode".to_string(), AttrValue::String("nearest".into())),
            ("pads".to_string(), AttrValue::Ints(vec![1, 2, 3, 4])),
            ("scales".to_string(), AttrValue::Floats(vec![0.5, 2.0])),
            (
                "value".to_string(),
                AttrValue::Tensor(Tensor::from_vec(vec![2], vec![3i64, -4])),
            ),
        ]));
        let node = NodeDef {
            name: "n7".into(),
            op_type: "Resize".into(),
            domain: String::new(),
            inputs: vec!["x".into()],
            outputs: vec!["y".into()],
            attrs,
        };
        let back = decode_node(Bytes::from(encode_node(&node).unwrap())).unwrap();
        assert_eq!(back.name, "n7");
        assert_eq!(back.op_type, "Resize");
        assert_eq!(back.attrs.0.len(), 6);
        match back.attrs.get("value") {
            Some(AttrValue::Tensor(t)) => assert_eq!(t.to_i64_vec().unwrap(), vec![3, -4]),
            other => panic!("value came back as {other:?}"),
        }
        assert!(matches!(back.attrs.get("axis"), Some(AttrValue::Int(-1))));
        assert!(matches!(back.attrs.get("mode"), Some(AttrValue::String(s)) if s == "nearest"));
        assert!(matches!(back.attrs.get("pads"), Some(AttrValue::Ints(v)) if v == &[1, 2, 3, 4]));
    }

    /// A Loop's body survives the trip: nodes with their names, its own weights, and declared
    /// values of every kind (symbolic sizes, sequences, an untyped value).
    #[test]
    fn bodies_survive_the_round_trip() {
        use crate::model::{DeferredWeight, Dim, GraphDef, Kind, ValueDef};
        use crate::tensor::DType;
        let value = |name: &str, dtype, dims: Option<Vec<Dim>>, kind| ValueDef {
            name: name.into(),
            dtype,
            dims,
            kind,
        };
        let inputs = vec![
            value("i", Some(DType::I64), Some(vec![]), Kind::Tensor),
            value("cond", Some(DType::Bool), None, Kind::Tensor),
            value(
                "y",
                Some(DType::F32),
                Some(vec![Dim::Sym("batch".into()), Dim::Fixed(3)]),
                Kind::Tensor,
            ),
            value(
                "s",
                Some(DType::F16),
                None,
                Kind::Sequence(Box::new(Kind::Optional(Box::new(Kind::Tensor)))),
            ),
            value("free", None, None, Kind::Tensor),
        ];
        let mut body = GraphDef {
            name: "step".into(),
            nodes: vec![NodeDef {
                name: "add".into(),
                op_type: "Add".into(),
                domain: String::new(),
                inputs: vec!["y".into(), "w".into()],
                outputs: vec!["y_out".into()],
                attrs: Attrs::default(),
            }],
            initializers: vec![(
                "w".into(),
                Tensor::from_vec(vec![3], vec![1.0f32, 2.0, 3.0]),
            )],
            inputs: inputs.clone(),
            outputs: vec![value("y_out", Some(DType::F32), None, Kind::Tensor)],
            ..Default::default()
        };
        let node = NodeDef {
            name: "loop".into(),
            op_type: "Loop".into(),
            domain: String::new(),
            inputs: vec![],
            outputs: vec![],
            attrs: Attrs(BTreeMap::from([(
                "body".to_string(),
                AttrValue::Graph(Box::new(body.clone())),
            )])),
        };
        let back = decode_node(Bytes::from(encode_node(&node).unwrap())).unwrap();
        let Some(AttrValue::Graph(g)) = back.attrs.get("body") else {
            panic!("body came back as {:?}", back.attrs.get("body"));
        };
        assert_eq!(g.name, "step");
        assert_eq!(g.inputs, inputs);
        assert_eq!(g.outputs, body.outputs);
        assert_eq!(g.nodes[0].inputs, ["y", "w"]);
        assert_eq!(g.nodes[0].outputs, ["y_out"]);
        assert_eq!(g.initializers[0].0, "w");
        assert_eq!(g.initializers[0].1.to_f64_vec().unwrap(), [1.0, 2.0, 3.0]);

        // Weights not read yet cannot travel inside a node.
        body.deferred.push(DeferredWeight {
            name: "big".into(),
            dtype: DType::F32,
            shape: vec![4],
            location: "w.bin".into(),
            offset: 0,
        });
        let node = NodeDef {
            attrs: Attrs(BTreeMap::from([(
                "body".to_string(),
                AttrValue::Graph(Box::new(body)),
            )])),
            ..node
        };
        let e = encode_node(&node).unwrap_err().to_string();
        assert!(e.contains("'big'"), "{e}");
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        assert!(decode_node(Bytes::from_static(&[0xff, 0xff, 0xff])).is_err());
    }
}
