//! The library's error type: every failure a user can cause names what is wrong and, where
//! there is one, what to do about it.

use std::path::PathBuf;

use crate::tensor::TensorError;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Load(#[from] crate::onnx::LoadError),
    #[error(transparent)]
    TensorFile(#[from] crate::io::TensorFileError),
    #[error("node '{node}' ({op_type}): {message}")]
    Node {
        node: String,
        op_type: String,
        message: String,
    },
    #[error("unsupported model: {0}")]
    Unsupported(String),
    #[error("input: {0}")]
    Input(String),
    #[error("no device can run this model: {0}")]
    Placement(String),
    #[error("device error: {0}")]
    Device(String),
    #[error(transparent)]
    Tensor(#[from] TensorError),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
