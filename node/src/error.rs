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
    /// A value larger than the run may allocate, found before anything is allocated for it
    /// (boxed: it is rare, and every `Result` carries the largest variant's size).
    #[error(transparent)]
    TooLarge(Box<TooLarge>),
    #[error("unsupported model: {0}")]
    Unsupported(String),
    /// A node whose op, or this form of it (a dtype, an attribute value), the runtime does
    /// not implement.
    #[error("node '{node}' ({op_type}): not supported: {message}")]
    UnsupportedNode {
        node: String,
        op_type: String,
        message: String,
    },
    #[error("input: {0}")]
    Input(String),
    #[error("no device can run this model: {0}")]
    Placement(String),
    #[error("device error: {0}")]
    Device(String),
    #[error(transparent)]
    Tensor(#[from] TensorError),
}

/// A node's output larger than the per-value limit.
#[derive(Debug, thiserror::Error)]
#[error(
    "node '{node}' ({op_type}): output '{value}' would be {ty}, {size}, more than the \
     limit of {limit} bytes per value (the largest device's memory budget unless \
     `Tuning::max_value_bytes` / VKML_MAX_VALUE_BYTES says otherwise); check the \
     shapes and sizes the model computes"
)]
pub struct TooLarge {
    pub node: String,
    pub op_type: String,
    pub value: String,
    pub ty: String,
    /// "N bytes", or why the size has no number.
    pub size: String,
    pub limit: u64,
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
