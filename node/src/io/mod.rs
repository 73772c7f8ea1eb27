//! Tensor files: .npy and ONNX TensorProto .pb (to be written).

#[derive(Debug, thiserror::Error)]
pub enum TensorFileError {
    #[error("{0}")]
    Other(String),
}
