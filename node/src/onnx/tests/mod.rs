//! Tests of the ONNX loader. Models and tensors are built with the prost types and encoded,
//! or (for cross-checks of the schema itself) are bytes written by Python's `onnx` package.

mod external;
mod model;
mod onnx_python;
mod outline;
mod tensors;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

use prost::Message;

use super::proto::{
    GraphProto, ModelProto, NodeProto, OperatorSetIdProto, StringStringEntryProto, TensorProto,
    TypeProto, ValueInfoProto, tensor_shape_proto, type_proto,
};
use super::proto::{TensorShapeProto, tensor_shape_proto::Dimension};

/// A fresh folder under the system temp dir, removed when dropped.
pub(crate) struct TempDir(PathBuf);

impl TempDir {
    pub(crate) fn new(tag: &str) -> TempDir {
        static COUNTER: AtomicUsize = AtomicUsize::new(0);
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("vkml-test-{}-{tag}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }

    pub(crate) fn path(&self) -> &Path {
        &self.0
    }

    pub(crate) fn join(&self, p: &str) -> PathBuf {
        self.0.join(p)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

pub(crate) fn raw_tensor(name: &str, dtype: i32, dims: &[i64], raw: &[u8]) -> TensorProto {
    TensorProto {
        name: name.into(),
        data_type: dtype,
        dims: dims.to_vec(),
        raw_data: bytes::Bytes::copy_from_slice(raw),
        ..Default::default()
    }
}

pub(crate) fn external_tensor(
    name: &str,
    dtype: i32,
    dims: &[i64],
    entries: &[(&str, &str)],
) -> TensorProto {
    TensorProto {
        name: name.into(),
        data_type: dtype,
        dims: dims.to_vec(),
        data_location: 1,
        external_data: entries
            .iter()
            .map(|(k, v)| StringStringEntryProto {
                key: k.to_string(),
                value: v.to_string(),
            })
            .collect(),
        ..Default::default()
    }
}

pub(crate) enum D {
    V(i64),
    P(&'static str),
    Unset,
}

pub(crate) fn tensor_value(name: &str, elem: i32, dims: Option<&[D]>) -> ValueInfoProto {
    let shape = dims.map(|dims| TensorShapeProto {
        dim: dims
            .iter()
            .map(|d| Dimension {
                value: match d {
                    D::V(n) => Some(tensor_shape_proto::dimension::Value::DimValue(*n)),
                    D::P(p) => Some(tensor_shape_proto::dimension::Value::DimParam(
                        p.to_string(),
                    )),
                    D::Unset => None,
                },
                denotation: String::new(),
            })
            .collect(),
    });
    ValueInfoProto {
        name: name.into(),
        r#type: Some(TypeProto {
            value: Some(type_proto::Value::TensorType(type_proto::Tensor {
                elem_type: elem,
                shape,
            })),
            denotation: String::new(),
        }),
        ..Default::default()
    }
}

pub(crate) fn node(op: &str, name: &str, inputs: &[&str], outputs: &[&str]) -> NodeProto {
    NodeProto {
        op_type: op.into(),
        name: name.into(),
        input: inputs.iter().map(|s| s.to_string()).collect(),
        output: outputs.iter().map(|s| s.to_string()).collect(),
        ..Default::default()
    }
}

pub(crate) fn model_with(graph: GraphProto) -> ModelProto {
    ModelProto {
        ir_version: 8,
        opset_import: vec![OperatorSetIdProto {
            domain: String::new(),
            version: 17,
        }],
        producer_name: "vkml-test".into(),
        graph: Some(graph),
        ..Default::default()
    }
}

/// Writes an encoded model into `dir` and returns its path.
pub(crate) fn write_model(dir: &TempDir, name: &str, m: &ModelProto) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, m.encode_to_vec()).unwrap();
    path
}

pub(crate) fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}
