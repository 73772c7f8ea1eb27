//! What can go wrong while reading a model: every variant names the file, tensor, node or
//! attribute at fault.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The file is missing, unreadable or not a regular file.
    #[error("cannot read {}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// Not a protobuf ModelProto: truncated, corrupt, or some other kind of file.
    #[error("{} is not a valid ONNX model: {source}", path.display())]
    Decode {
        path: PathBuf,
        #[source]
        source: prost::DecodeError,
    },
    #[error("{} is not a valid ONNX model: it contains no graph", path.display())]
    NoGraph { path: PathBuf },
    /// A well-formed model that uses something vkml does not handle.
    #[error("unsupported model: {0}")]
    Unsupported(String),
    /// A model that breaks the ONNX specification.
    #[error("invalid model: {0}")]
    Invalid(String),
    /// A tensor whose data does not match its declared type and shape.
    #[error("tensor '{tensor}': {message}")]
    BadTensor { tensor: String, message: String },
    #[error(
        "tensor '{tensor}': external data in {} at offset {offset}, length {}: {problem}",
        file.display(),
        length_text(*.length)
    )]
    ExternalData {
        tensor: String,
        file: PathBuf,
        offset: u64,
        /// None when the tensor reads to the end of the file.
        length: Option<u64>,
        problem: String,
    },
    /// A mapped model or external-data file changed after it was loaded.
    #[error(
        "{} changed after the model was loaded ({changed}); vkml reads a large model from its \
         file while it runs and cannot use one modified underneath it: load the model again",
        path.display()
    )]
    Changed { path: PathBuf, changed: String },
    #[error("tensor '{tensor}' has data type code {code}, which is not an ONNX data type")]
    UnknownDType { tensor: String, code: i32 },
}

fn length_text(length: Option<u64>) -> String {
    match length {
        Some(n) => n.to_string(),
        None => "to the end of the file".to_string(),
    }
}
