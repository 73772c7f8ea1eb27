//! A model's outline without converting it: the op types of its nodes and the declared types
//! of its inputs and outputs, including the sequence, map and optional types that vkml cannot
//! run. Test harnesses use it to read ONNX test data (whose .pb files hold whatever the graph
//! declares) and to sort results by op type, even for models that do not load.

use std::path::Path;

use prost::Message;

use super::LoadError;
use super::proto::type_proto::Value as TypeValue;
use super::proto::{TypeProto, ValueInfoProto};

/// A declared type, as ONNX's TypeProto gives it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeclaredType {
    /// A dense tensor; `elem_type` is the `TensorProto.DataType` code (0 when not given).
    Tensor {
        elem_type: i32,
    },
    Sequence(Box<DeclaredType>),
    Optional(Box<DeclaredType>),
    Map {
        key_type: i32,
        value: Box<DeclaredType>,
    },
    SparseTensor {
        elem_type: i32,
    },
    Opaque,
    /// The file gives no type.
    Unknown,
}

impl DeclaredType {
    /// The declared type a TypeProto says.
    pub fn of_proto(t: Option<&TypeProto>) -> DeclaredType {
        DeclaredType::of(t)
    }

    fn of(t: Option<&TypeProto>) -> DeclaredType {
        let inner = |t: &Option<Box<TypeProto>>| Box::new(DeclaredType::of(t.as_deref()));
        match t.and_then(|t| t.value.as_ref()) {
            None => DeclaredType::Unknown,
            Some(TypeValue::TensorType(t)) => DeclaredType::Tensor {
                elem_type: t.elem_type,
            },
            Some(TypeValue::SequenceType(s)) => DeclaredType::Sequence(inner(&s.elem_type)),
            Some(TypeValue::OptionalType(o)) => DeclaredType::Optional(inner(&o.elem_type)),
            Some(TypeValue::MapType(m)) => DeclaredType::Map {
                key_type: m.key_type,
                value: inner(&m.value_type),
            },
            Some(TypeValue::SparseTensorType(t)) => DeclaredType::SparseTensor {
                elem_type: t.elem_type,
            },
            Some(TypeValue::OpaqueType(_)) => DeclaredType::Opaque,
        }
    }

    pub fn is_tensor(&self) -> bool {
        matches!(self, DeclaredType::Tensor { .. } | DeclaredType::Unknown)
    }
}

impl std::fmt::Display for DeclaredType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let elem = |code: i32| super::tensor::onnx_type_name(code).unwrap_or("?");
        match self {
            DeclaredType::Tensor { elem_type } => write!(f, "tensor({})", elem(*elem_type)),
            DeclaredType::Sequence(t) => write!(f, "seq({t})"),
            DeclaredType::Optional(t) => write!(f, "optional({t})"),
            DeclaredType::Map { key_type, value } => write!(f, "map({}, {value})", elem(*key_type)),
            DeclaredType::SparseTensor { elem_type } => {
                write!(f, "sparse_tensor({})", elem(*elem_type))
            }
            DeclaredType::Opaque => f.write_str("opaque"),
            DeclaredType::Unknown => f.write_str("(no type)"),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelOutline {
    /// Op types of the main graph's nodes, in file order (subgraphs not included).
    pub op_types: Vec<String>,
    /// Graph inputs the caller feeds (initializers left out), in order.
    pub inputs: Vec<(String, DeclaredType)>,
    pub outputs: Vec<(String, DeclaredType)>,
}

/// Reads the outline of a model file.
pub fn outline(path: &Path) -> Result<ModelOutline, LoadError> {
    let (data, _) = super::read_file(path, super::COPY_BELOW).map_err(|source| LoadError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    outline_from_bytes(&data, path)
}

pub(crate) fn outline_from_bytes(data: &[u8], path: &Path) -> Result<ModelOutline, LoadError> {
    let model = super::proto::ModelProto::decode(data).map_err(|source| LoadError::Decode {
        path: path.to_path_buf(),
        source,
    })?;
    let Some(g) = model.graph else {
        return Err(LoadError::NoGraph {
            path: path.to_path_buf(),
        });
    };
    let inits: std::collections::HashSet<&str> =
        g.initializer.iter().map(|t| t.name.as_str()).collect();
    let declared = |v: &ValueInfoProto| (v.name.clone(), DeclaredType::of(v.r#type.as_ref()));
    Ok(ModelOutline {
        op_types: g.node.iter().map(|n| n.op_type.clone()).collect(),
        inputs: g
            .input
            .iter()
            .filter(|v| !inits.contains(v.name.as_str()))
            .map(declared)
            .collect(),
        outputs: g.output.iter().map(declared).collect(),
    })
}
