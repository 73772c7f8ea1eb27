//! Reading .onnx files into [`ModelDef`]: the file is memory-mapped and decoded with prost,
//! and every initializer's bytes stay in the mapping (or in the mapping of its external data
//! file), so loading a model copies no weights.
//!
//! The protobuf types are private to the crate; the rest of vkml sees only `model.rs` values.

mod convert;
mod encode;
mod error;
mod external;
// The one module outside the Vulkan crate allowed `unsafe`: memmap2 has no safe constructor
// (a mapping is sound only while nobody truncates the file), and handing mapped pages back
// after upload is an madvise. Each use carries its SAFETY comment.
#[allow(unsafe_code)]
mod mmap;
mod outline;
mod tensor;
#[cfg(test)]
pub(crate) mod tests;

/// Types generated from node/proto/onnx.proto (our subset of the ONNX schema).
#[allow(clippy::all, clippy::pedantic, missing_docs)]
pub(crate) mod proto {
    include!(concat!(env!("OUT_DIR"), "/onnx.rs"));
}

use std::path::{Path, PathBuf};

use bytes::Bytes;
use prost::Message;

pub use encode::{decode_node, encode_node};
pub use error::LoadError;
pub(crate) use mmap::{map_file, release_pages};
pub use outline::{DeclaredType, ModelOutline, outline};
pub use tensor::tensor_from_proto;

use crate::model::ModelDef;

/// Loads a model file. External data files are looked up in the model's folder.
///
/// The file (and its external data files) are memory-mapped for as long as any tensor of the
/// model is alive: they must not be modified or truncated meanwhile.
pub fn load(path: &Path) -> Result<ModelDef, LoadError> {
    let data = map_file(path).map_err(|source| LoadError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    decode(data, Some(&model_dir(path)), path)
}

/// Decodes a model already in memory. Initializers become slices of `data` (no copy).
/// `model_dir` is where external data files are looked up; without it they are an error.
pub fn load_from_bytes(data: Bytes, model_dir: Option<&Path>) -> Result<ModelDef, LoadError> {
    decode(data, model_dir, Path::new("<model in memory>"))
}

/// The folder a model's external data paths are relative to.
pub fn model_dir(path: &Path) -> PathBuf {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

fn decode(data: Bytes, dir: Option<&Path>, path: &Path) -> Result<ModelDef, LoadError> {
    // Decoding from `Bytes` makes every `bytes` field a slice of `data`.
    let proto = proto::ModelProto::decode(data).map_err(|source| LoadError::Decode {
        path: path.to_path_buf(),
        source,
    })?;
    let files = external::ExternalFiles::new(dir);
    convert::model(&proto, path, &files)
}
