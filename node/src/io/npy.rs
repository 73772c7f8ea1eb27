//! numpy .npy files: format versions 1, 2 and 3, little-endian, C order.

use std::io::Write;
use std::path::Path;

use bytes::Bytes;

use super::npy_header::{self, Header};
use super::{TensorFileError, read_file};
use crate::tensor::{DType, Tensor};

const MAGIC: &[u8] = b"\x93NUMPY";

pub fn read_npy(path: &Path) -> Result<Tensor, TensorFileError> {
    let file = read_file(path)?;
    let not_npy = |reason: String| TensorFileError::NotNpy {
        path: path.to_path_buf(),
        reason,
    };
    let invalid = |reason: String| TensorFileError::Invalid {
        path: path.to_path_buf(),
        reason,
    };
    if file.len() < 8 || &file[..6] != MAGIC {
        return Err(not_npy("bad magic".into()));
    }
    let (major, minor) = (file[6], file[7]);
    let (len_bytes, start) = match major {
        1 => (2, 10),
        2 | 3 => (4, 12),
        _ => {
            return Err(invalid(format!(
                "npy format version {major}.{minor} is not supported (only 1.0, 2.0 and 3.0)"
            )));
        }
    };
    if file.len() < start {
        return Err(not_npy("the file ends inside the header".into()));
    }
    let mut len = [0u8; 4];
    len[..len_bytes].copy_from_slice(&file[8..8 + len_bytes]);
    let header_end = start as u64 + u64::from(u32::from_le_bytes(len));
    if header_end > file.len() as u64 {
        return Err(not_npy(format!(
            "the header claims {} bytes but the file has {}",
            header_end,
            file.len()
        )));
    }
    let header_end = header_end as usize;
    let Header {
        descr,
        fortran_order,
        shape,
    } = npy_header::parse(&file[start..header_end]).map_err(not_npy)?;
    let dtype = npy_header::dtype_of(&descr).map_err(invalid)?;
    if fortran_order {
        return Err(invalid(
            "data in Fortran order is not supported; save a C-order array \
             (np.save(path, np.ascontiguousarray(a)))"
                .into(),
        ));
    }
    let expected = shape
        .iter()
        .try_fold(dtype.size() as u64, |acc, &d| acc.checked_mul(d as u64))
        .ok_or_else(|| invalid(format!("shape {shape:?} is too large")))?;
    let actual = (file.len() - header_end) as u64;
    if actual < expected {
        return Err(TensorFileError::Truncated {
            path: path.to_path_buf(),
            expected,
            actual,
        });
    }
    if actual > expected {
        return Err(invalid(format!(
            "header says {expected} bytes of data, but the file has {actual}"
        )));
    }
    let mut data = file.slice(header_end..);
    // numpy treats any non-zero byte as True; vkml's booleans are exactly 0 or 1.
    if dtype == DType::Bool && data.iter().any(|&b| b > 1) {
        data = Bytes::from(data.iter().map(|&b| u8::from(b != 0)).collect::<Vec<u8>>());
    }
    Tensor::from_bytes(dtype, shape, data).map_err(|e| invalid(e.to_string()))
}

/// Writes `tensor` to `path` atomically (a temporary file beside it, renamed over it once
/// complete): a failure leaves the file as it was.
pub fn write_npy(path: &Path, tensor: &Tensor) -> Result<(), TensorFileError> {
    crate::files::write_atomic(path, |w| write_npy_to(w, tensor)).map_err(|source| {
        TensorFileError::Write {
            path: path.to_path_buf(),
            source,
        }
    })
}

/// The .npy encoding of `tensor`, into `w`.
pub(crate) fn write_npy_to(w: &mut dyn Write, tensor: &Tensor) -> std::io::Result<()> {
    if tensor.dtype() == crate::tensor::DType::String {
        // numpy keeps strings as Python objects, which .npy holds only as pickles.
        return Err(std::io::Error::new(
            std::io::ErrorKind::Unsupported,
            "a string tensor has no .npy form vkml writes; write it with write_pb",
        ));
    }
    w.write_all(&npy_header::encode(tensor.dtype(), tensor.shape()))?;
    w.write_all(tensor.bytes())
}
