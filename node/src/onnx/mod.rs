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
mod ranges;
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

pub(crate) use encode::tensor_proto;
pub use encode::{decode_node, encode_node};
pub use error::LoadError;
#[cfg(test)]
pub(crate) use mmap::map_file;
pub use mmap::{COPY_BELOW, FileStamp};
pub(crate) use mmap::{read_file, release_pages};
pub use outline::{DeclaredType, ModelOutline, outline};
pub use ranges::{ExternalTensor, external_tensors};
pub use tensor::tensor_from_proto;

use crate::model::ModelDef;

/// Loads a model file. External data files are looked up in the model's folder.
///
/// Files up to [`COPY_BELOW`] bytes are read into memory; larger ones (the model, or its
/// external data) are memory-mapped for as long as any tensor of the model is alive, so they
/// must not be modified or truncated meanwhile: [`load_files`] says which they are, to check
/// them before each use (a [`crate::Session`] does so before every run). A file truncated
/// *during* a run still crashes the process reading its mapping; that is the price of not
/// copying multi-gigabyte weights, and why small models are copied.
pub fn load(path: &Path) -> Result<ModelDef, LoadError> {
    load_files(path, COPY_BELOW).map(|(m, _)| m)
}

/// The files a loaded model keeps mapped, as they were when it was loaded.
#[derive(Debug, Clone, Default)]
pub struct ModelFiles(Vec<FileStamp>);

impl ModelFiles {
    /// An error naming the first file whose length or modification time changed since.
    pub fn check(&self) -> Result<(), LoadError> {
        self.0.iter().try_for_each(FileStamp::check)
    }

    /// Whether any file stays mapped (false when all were copied).
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// [`load`], copying files up to `copy_below` bytes and mapping larger ones, with the files
/// mapped.
pub fn load_files(path: &Path, copy_below: u64) -> Result<(ModelDef, ModelFiles), LoadError> {
    let (data, stamp) = read_file(path, copy_below).map_err(|source| LoadError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    let files = external::ExternalFiles::copying_below(Some(&model_dir(path)), copy_below);
    let model = decode(data, &files, path)?;
    let mut stamps: Vec<FileStamp> = stamp.into_iter().collect();
    stamps.extend(files.stamps());
    Ok((model, ModelFiles(stamps)))
}

/// [`load_files`] for a model whose bytes are given (one rewritten in memory): `path` names
/// it in errors, and its folder holds the model's external data.
pub fn load_files_from(
    path: &Path,
    data: Bytes,
    copy_below: u64,
) -> Result<(ModelDef, ModelFiles), LoadError> {
    let files = external::ExternalFiles::copying_below(Some(&model_dir(path)), copy_below);
    let model = decode(data, &files, path)?;
    Ok((model, ModelFiles(files.stamps())))
}

/// Decodes a model already in memory. Initializers become slices of `data` (no copy).
/// `model_dir` is where external data files are looked up; without it they are an error.
pub fn load_from_bytes(data: Bytes, model_dir: Option<&Path>) -> Result<ModelDef, LoadError> {
    let files = external::ExternalFiles::new(model_dir);
    decode(data, &files, Path::new("<model in memory>"))
}

/// Decodes a model whose external data was received apart from it: each external tensor
/// takes its bytes from `weights`, by (location as the model spells it, offset). Returns the
/// model and, per tensor that took one, its label (an initializer's name) and key.
///
/// With `defer`, an initializer of the main graph whose bytes are not in `weights` becomes a
/// [`crate::model::DeferredWeight`] (`graph.deferred`) instead of an error: a node plans a
/// model before its weights arrive. Other external tensors (in attributes, subgraphs) must
/// be in `weights` either way.
#[allow(clippy::type_complexity)]
pub fn load_resolved(
    data: Bytes,
    weights: std::collections::BTreeMap<(String, u64), Bytes>,
    defer: bool,
) -> Result<(ModelDef, Vec<(String, (String, u64))>), LoadError> {
    let files = external::ExternalFiles::resolved(weights, defer);
    let model = decode(data, &files, Path::new("<model in memory>"))?;
    Ok((model, files.used()))
}

/// Refuses an external-data location that could leave the model's folder (an absolute path,
/// or one with `..`), with the reason.
pub fn check_location(location: &str) -> Result<(), String> {
    external::check_relative(Path::new(location))
}

/// Where an external-data `location` lies under the model's folder `dir`, symbolic links
/// resolved; an error (the path concerned, when there is one, and why) for a location that
/// could leave the folder or cannot be opened.
pub fn resolve_location(dir: &Path, location: &str) -> Result<PathBuf, (Option<PathBuf>, String)> {
    external::resolve_inside(dir, Path::new(location)).map_err(|e| match e {
        external::Outside::Named(why) => (None, why),
        external::Outside::At(path, why) => (Some(path), why),
    })
}

/// The folder a model's external data paths are relative to.
pub fn model_dir(path: &Path) -> PathBuf {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

fn decode(
    data: Bytes,
    files: &external::ExternalFiles,
    path: &Path,
) -> Result<ModelDef, LoadError> {
    // Decoding from `Bytes` makes every `bytes` field a slice of `data`.
    let proto = proto::ModelProto::decode(data).map_err(|source| LoadError::Decode {
        path: path.to_path_buf(),
        source,
    })?;
    convert::model(&proto, path, files)
}
