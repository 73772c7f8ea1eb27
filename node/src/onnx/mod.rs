//! Reading .onnx files (to be written).

#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("{0}")]
    Other(String),
}
