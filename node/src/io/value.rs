//! Non-tensor values in .pb files: ONNX's test data stores a sequence, map or optional input
//! or output as a SequenceProto, MapProto or OptionalProto. The bytes do not say which message
//! they hold, so the graph's declared type ([`DeclaredType`]) decides how to parse them.
//!
//! Sessions run sequences and optionals of tensors (`Session::run_values`, lowered to
//! tensors when planned: node/src/lower/); maps are read so that a harness can tell "this
//! model takes a map" from "this file is broken".

use std::path::Path;

use bytes::Bytes;
use prost::Message;

use super::{TensorFileError, read_file};
use crate::onnx::proto::{MapProto, OptionalProto, SequenceProto, TensorProto, ValueKind};
use crate::onnx::{self, DeclaredType};
use crate::tensor::{DType, Tensor};

/// One value of ONNX test data.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Tensor(Tensor),
    Sequence(Vec<Value>),
    /// `None` is the empty optional.
    Optional(Option<Box<Value>>),
    Map {
        keys: MapKeys,
        values: Vec<Value>,
    },
}

/// A map's keys, in file order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MapKeys {
    Ints { dtype: DType, keys: Vec<i64> },
    Strings(Vec<String>),
}

impl Value {
    pub fn as_tensor(&self) -> Option<&Tensor> {
        match self {
            Value::Tensor(t) => Some(t),
            _ => None,
        }
    }

    /// "tensor", "sequence", "optional" or "map".
    pub fn kind(&self) -> &'static str {
        match self {
            Value::Tensor(_) => "tensor",
            Value::Sequence(_) => "sequence",
            Value::Optional(_) => "optional",
            Value::Map { .. } => "map",
        }
    }
}

/// Reads a .pb file holding a value of the `declared` type; returns the name stored with it.
pub fn read_value_pb(
    path: &Path,
    declared: &DeclaredType,
) -> Result<(String, Value), TensorFileError> {
    let data = read_file(path)?;
    decode_value(data, declared, Some(&onnx::model_dir(path))).map_err(|reason| {
        TensorFileError::Invalid {
            path: path.to_path_buf(),
            reason,
        }
    })
}

/// Decodes the serialized message for a value of the `declared` type. External tensor data is
/// looked up in `dir`.
pub fn decode_value(
    data: Bytes,
    declared: &DeclaredType,
    dir: Option<&Path>,
) -> Result<(String, Value), String> {
    let cx = Cx { dir };
    let not_a = |what: &str, e: prost::DecodeError| format!("not a {what}: {e}");
    match declared {
        DeclaredType::Tensor { .. } | DeclaredType::Unknown => {
            let p = TensorProto::decode(data).map_err(|e| not_a("TensorProto", e))?;
            Ok((p.name.clone(), Value::Tensor(cx.tensor(&p, declared)?)))
        }
        DeclaredType::Sequence(elem) => {
            let p = SequenceProto::decode(data).map_err(|e| not_a("SequenceProto", e))?;
            Ok((p.name.clone(), Value::Sequence(cx.sequence(&p, elem)?)))
        }
        DeclaredType::Optional(elem) => {
            let p = OptionalProto::decode(data).map_err(|e| not_a("OptionalProto", e))?;
            Ok((p.name.clone(), Value::Optional(cx.optional(&p, elem)?)))
        }
        DeclaredType::Map { key_type, value } => {
            let p = MapProto::decode(data).map_err(|e| not_a("MapProto", e))?;
            Ok((p.name.clone(), cx.map(&p, *key_type, value)?))
        }
        DeclaredType::SparseTensor { .. } | DeclaredType::Opaque => Err(format!(
            "values of type {declared} are not supported (only tensors, sequences, maps and \
             optionals)"
        )),
    }
}

struct Cx<'a> {
    dir: Option<&'a Path>,
}

/// What a SequenceProto or OptionalProto whose elem_type is `kind` holds, for messages.
fn kind_name(kind: i32) -> String {
    match ValueKind::try_from(kind) {
        Ok(ValueKind::Undefined) => "nothing".into(),
        Ok(ValueKind::Tensor) => "tensors".into(),
        Ok(ValueKind::SparseTensor) => "sparse tensors".into(),
        Ok(ValueKind::Sequence) => "sequences".into(),
        Ok(ValueKind::Map) => "maps".into(),
        Ok(ValueKind::Optional) => "optionals".into(),
        Err(_) => format!("unknown element kind {kind}"),
    }
}

/// The ValueKind a declared element type must be stored as.
fn expected_kind(declared: &DeclaredType) -> Option<ValueKind> {
    Some(match declared {
        DeclaredType::Tensor { .. } => ValueKind::Tensor,
        DeclaredType::Sequence(_) => ValueKind::Sequence,
        DeclaredType::Optional(_) => ValueKind::Optional,
        DeclaredType::Map { .. } => ValueKind::Map,
        DeclaredType::SparseTensor { .. } => ValueKind::SparseTensor,
        DeclaredType::Opaque | DeclaredType::Unknown => return None,
    })
}

fn check_kind(kind: i32, declared: &DeclaredType, what: &str) -> Result<(), String> {
    match expected_kind(declared) {
        Some(k) if kind != k as i32 => Err(format!(
            "the graph declares {what} of {declared}, the file holds {}",
            kind_name(kind)
        )),
        _ => Ok(()),
    }
}

impl Cx<'_> {
    fn tensor(&self, p: &TensorProto, declared: &DeclaredType) -> Result<Tensor, String> {
        if let DeclaredType::Tensor { elem_type } = declared
            && *elem_type != 0
            && p.data_type != *elem_type
        {
            return Err(format!(
                "the graph declares {declared}, the file holds a tensor of {}",
                DeclaredType::Tensor {
                    elem_type: p.data_type
                }
            ));
        }
        onnx::tensor_from_proto(p, self.dir).map_err(|e| e.to_string())
    }

    fn sequence(&self, p: &SequenceProto, elem: &DeclaredType) -> Result<Vec<Value>, String> {
        let counts = [
            p.tensor_values.len(),
            p.sparse_tensor_values.len(),
            p.sequence_values.len(),
            p.map_values.len(),
            p.optional_values.len(),
        ];
        // An empty sequence may leave its kind undefined.
        if counts.iter().all(|&n| n == 0) {
            return Ok(Vec::new());
        }
        check_kind(p.elem_type, elem, "a sequence")?;
        let filled = counts.iter().filter(|&&n| n > 0).count();
        if filled > 1 {
            return Err("a sequence holds elements of several kinds".into());
        }
        match ValueKind::try_from(p.elem_type) {
            Ok(ValueKind::Tensor) => p
                .tensor_values
                .iter()
                .map(|t| self.tensor(t, elem).map(Value::Tensor))
                .collect(),
            Ok(ValueKind::Sequence) => {
                let inner = match elem {
                    DeclaredType::Sequence(e) => e.as_ref(),
                    _ => &DeclaredType::Unknown,
                };
                p.sequence_values
                    .iter()
                    .map(|s| self.sequence(s, inner).map(Value::Sequence))
                    .collect()
            }
            Ok(ValueKind::Map) => {
                let (key_type, value) = match elem {
                    DeclaredType::Map { key_type, value } => (*key_type, value.as_ref()),
                    _ => (0, &DeclaredType::Unknown),
                };
                p.map_values
                    .iter()
                    .map(|m| self.map(m, key_type, value))
                    .collect()
            }
            Ok(ValueKind::Optional) => {
                let inner = match elem {
                    DeclaredType::Optional(e) => e.as_ref(),
                    _ => &DeclaredType::Unknown,
                };
                p.optional_values
                    .iter()
                    .map(|o| self.optional(o, inner).map(Value::Optional))
                    .collect()
            }
            _ => Err(format!(
                "sequences of {} are not supported",
                kind_name(p.elem_type)
            )),
        }
    }

    fn optional(
        &self,
        p: &OptionalProto,
        elem: &DeclaredType,
    ) -> Result<Option<Box<Value>>, String> {
        if p.elem_type == ValueKind::Undefined as i32 {
            let holds_something = p.tensor_value.is_some()
                || p.sparse_tensor_value.is_some()
                || p.sequence_value.is_some()
                || p.map_value.is_some()
                || p.optional_value.is_some();
            if holds_something {
                return Err("an optional with no element kind holds a value".into());
            }
            return Ok(None);
        }
        check_kind(p.elem_type, elem, "an optional")?;
        let missing = || format!("an optional of {} has no value", kind_name(p.elem_type));
        let value = match ValueKind::try_from(p.elem_type) {
            Ok(ValueKind::Tensor) => {
                Value::Tensor(self.tensor(p.tensor_value.as_ref().ok_or_else(missing)?, elem)?)
            }
            Ok(ValueKind::Sequence) => {
                let inner = match elem {
                    DeclaredType::Sequence(e) => e.as_ref(),
                    _ => &DeclaredType::Unknown,
                };
                let s = p.sequence_value.as_ref().ok_or_else(missing)?;
                Value::Sequence(self.sequence(s, inner)?)
            }
            Ok(ValueKind::Map) => {
                let (key_type, value) = match elem {
                    DeclaredType::Map { key_type, value } => (*key_type, value.as_ref()),
                    _ => (0, &DeclaredType::Unknown),
                };
                self.map(p.map_value.as_ref().ok_or_else(missing)?, key_type, value)?
            }
            Ok(ValueKind::Optional) => {
                let inner = match elem {
                    DeclaredType::Optional(e) => e.as_ref(),
                    _ => &DeclaredType::Unknown,
                };
                let o = p.optional_value.as_deref().ok_or_else(missing)?;
                Value::Optional(self.optional(o, inner)?)
            }
            _ => {
                return Err(format!(
                    "optionals of {} are not supported",
                    kind_name(p.elem_type)
                ));
            }
        };
        Ok(Some(Box::new(value)))
    }

    fn map(&self, p: &MapProto, key_type: i32, value: &DeclaredType) -> Result<Value, String> {
        if key_type != 0 && p.key_type != key_type {
            return Err(format!(
                "the graph declares map keys of {}, the file holds {}",
                DeclaredType::Tensor {
                    elem_type: key_type
                },
                DeclaredType::Tensor {
                    elem_type: p.key_type
                }
            ));
        }
        const STRING: i32 = 8;
        let keys = if p.key_type == STRING {
            if !p.keys.is_empty() {
                return Err("a map with string keys has integer keys".into());
            }
            MapKeys::Strings(
                p.string_keys
                    .iter()
                    .map(|k| {
                        String::from_utf8(k.to_vec())
                            .map_err(|_| "a map key is not UTF-8".to_string())
                    })
                    .collect::<Result<_, _>>()?,
            )
        } else {
            let dtype = DType::from_onnx_code(p.key_type)
                .filter(|d| !d.is_float() && *d != DType::Bool)
                .ok_or_else(|| {
                    format!(
                        "map key type {} is not an integer type or string",
                        DeclaredType::Tensor {
                            elem_type: p.key_type
                        }
                    )
                })?;
            if !p.string_keys.is_empty() {
                return Err("a map with integer keys has string keys".into());
            }
            MapKeys::Ints {
                dtype,
                keys: p.keys.clone(),
            }
        };
        let n_keys = match &keys {
            MapKeys::Ints { keys, .. } => keys.len(),
            MapKeys::Strings(k) => k.len(),
        };
        let values = match &p.values {
            Some(s) => self.sequence(s, value)?,
            None => Vec::new(),
        };
        if values.len() != n_keys {
            return Err(format!(
                "a map has {n_keys} keys and {} values",
                values.len()
            ));
        }
        Ok(Value::Map { keys, values })
    }
}
