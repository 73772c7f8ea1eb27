//! NodeDef -> NodeProto bytes and back: how a cluster fragment ships the ops of a plan to the
//! nodes that run them (the op is rebuilt there from its type and attributes).

use bytes::Bytes;
use prost::Message;

use super::LoadError;
use super::external::ExternalFiles;
use super::proto::attribute_proto::AttributeType;
use super::proto::{AttributeProto, NodeProto, TensorProto};
use crate::model::NodeDef;
use crate::ops::AttrValue;
use crate::tensor::Tensor;

/// Encodes a node (without its input and output names: fragments refer to values by id).
/// Graph-valued attributes (control flow bodies) are refused: no op that has them runs on a
/// cluster today.
pub fn encode_node(node: &NodeDef) -> Result<Vec<u8>, LoadError> {
    let mut attribute = Vec::with_capacity(node.attrs.0.len());
    for (name, value) in &node.attrs.0 {
        let mut a = AttributeProto {
            name: name.clone(),
            ..Default::default()
        };
        match value {
            AttrValue::Int(i) => {
                a.r#type = AttributeType::Int as i32;
                a.i = *i;
            }
            AttrValue::Float(f) => {
                a.r#type = AttributeType::Float as i32;
                a.f = *f;
            }
            AttrValue::String(s) => {
                a.r#type = AttributeType::String as i32;
                a.s = Bytes::from(s.clone().into_bytes());
            }
            AttrValue::Tensor(t) => {
                a.r#type = AttributeType::Tensor as i32;
                a.t = Some(tensor_proto(t));
            }
            AttrValue::Ints(v) => {
                a.r#type = AttributeType::Ints as i32;
                a.ints = v.clone();
            }
            AttrValue::Floats(v) => {
                a.r#type = AttributeType::Floats as i32;
                a.floats = v.clone();
            }
            AttrValue::Strings(v) => {
                a.r#type = AttributeType::Strings as i32;
                a.strings = v
                    .iter()
                    .map(|s| Bytes::from(s.clone().into_bytes()))
                    .collect();
            }
            AttrValue::Tensors(v) => {
                a.r#type = AttributeType::Tensors as i32;
                a.tensors = v.iter().map(tensor_proto).collect();
            }
            AttrValue::Graph(_) => {
                return Err(LoadError::Unsupported(format!(
                    "node '{}' ({}) has a graph attribute '{name}': ops with subgraphs do not \
                     run on a cluster",
                    node.name, node.op_type
                )));
            }
        }
        attribute.push(a);
    }
    Ok(NodeProto {
        name: node.name.clone(),
        op_type: node.op_type.clone(),
        domain: node.domain.clone(),
        attribute,
        ..Default::default()
    }
    .encode_to_vec())
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

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        assert!(decode_node(Bytes::from_static(&[0xff, 0xff, 0xff])).is_err());
    }
}
