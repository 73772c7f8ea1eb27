//! ONNX TensorProto files (.pb), as ONNX's test data sets keep their inputs and outputs.

use std::io::Write;
use std::path::Path;

use prost::Message;

use super::{TensorFileError, read_file};
use crate::onnx::{self, proto::TensorProto};
use crate::tensor::Tensor;

/// The tensor and the name stored with it (often the model input it is meant for).
pub fn read_pb(path: &Path) -> Result<(String, Tensor), TensorFileError> {
    let file = read_file(path)?;
    let proto = TensorProto::decode(file).map_err(|source| TensorFileError::NotPb {
        path: path.to_path_buf(),
        source,
    })?;
    // A .pb may keep its data externally, relative to its own folder, as models do.
    let tensor =
        onnx::tensor_from_proto(&proto, Some(&onnx::model_dir(path))).map_err(|source| {
            TensorFileError::Tensor {
                path: path.to_path_buf(),
                source,
            }
        })?;
    Ok((proto.name, tensor))
}

/// Writes `tensor` as a TensorProto named `name`, its data in raw_data (strings in
/// string_data).
pub fn write_pb(path: &Path, name: &str, tensor: &Tensor) -> Result<(), TensorFileError> {
    crate::files::write_atomic(path, |w| write_pb_to(w, name, tensor)).map_err(|source| {
        TensorFileError::Write {
            path: path.to_path_buf(),
            source,
        }
    })
}

/// The TensorProto encoding of `tensor`, named `name`, into `w`.
pub(crate) fn write_pb_to(w: &mut dyn Write, name: &str, tensor: &Tensor) -> std::io::Result<()> {
    let proto = TensorProto {
        name: name.to_string(),
        ..onnx::tensor_proto(tensor)
    };
    w.write_all(&proto.encode_to_vec())
}
