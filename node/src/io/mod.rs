//! Tensor files: numpy's .npy and ONNX's TensorProto .pb (as in ONNX's test data,
//! `test_data_set_0/input_0.pb`), and the sequence, map and optional values ONNX's test data
//! also stores in .pb files.

mod npy;
mod npy_header;
mod outputs;
mod pb;
#[cfg(test)]
mod tests;
mod value;
#[cfg(test)]
mod value_tests;

use std::path::{Path, PathBuf};

pub use npy::{read_npy, write_npy};
pub use outputs::{file_stems, sanitize, write_outputs};
pub use pb::{read_pb, write_pb};
pub use value::{MapKeys, Value, decode_value, read_value_pb};

use crate::tensor::Tensor;

#[derive(Debug, thiserror::Error)]
pub enum TensorFileError {
    #[error("cannot read {}: {source}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot write {}: {source}", path.display())]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{} is not a .npy file: {reason}", path.display())]
    NotNpy { path: PathBuf, reason: String },
    #[error(
        "{}: truncated: header says {expected} bytes of data, file has {actual}",
        path.display()
    )]
    Truncated {
        path: PathBuf,
        expected: u64,
        actual: u64,
    },
    /// A recognised file that vkml cannot use (Fortran order, big-endian, an unknown dtype...)
    /// or whose contents contradict its header.
    #[error("{}: {reason}", path.display())]
    Invalid { path: PathBuf, reason: String },
    #[error("{} is not an ONNX TensorProto file: {source}", path.display())]
    NotPb {
        path: PathBuf,
        #[source]
        source: prost::DecodeError,
    },
    /// A TensorProto that decodes but does not convert (bad sizes, unsupported type...).
    #[error("{}: {source}", path.display())]
    Tensor {
        path: PathBuf,
        #[source]
        source: crate::onnx::LoadError,
    },
    #[error("{}: unknown tensor file type; expected a .npy or .pb file", path.display())]
    UnknownExtension { path: PathBuf },
}

/// Reads a .npy or .pb tensor file, by its extension. (Use [`read_pb`] for the name a .pb file
/// stores.)
pub fn read_tensor_file(path: &Path) -> Result<Tensor, TensorFileError> {
    let ext = path
        .extension()
        .and_then(|e| e.to_str())
        .map(str::to_ascii_lowercase);
    match ext.as_deref() {
        Some("npy") => read_npy(path),
        Some("pb") => read_pb(path).map(|(_, t)| t),
        _ => Err(TensorFileError::UnknownExtension {
            path: path.to_path_buf(),
        }),
    }
}

fn read_file(path: &Path) -> Result<bytes::Bytes, TensorFileError> {
    use std::io::Read;
    let read = || -> std::io::Result<Vec<u8>> {
        // Not `std::fs::read`: a FIFO would block it, and /dev/zero fill memory.
        let mut f = crate::files::open_regular(path)?;
        let mut data = Vec::with_capacity(f.metadata()?.len() as usize);
        f.read_to_end(&mut data)?;
        Ok(data)
    };
    read()
        .map(bytes::Bytes::from)
        .map_err(|source| TensorFileError::Read {
            path: path.to_path_buf(),
            source,
        })
}
