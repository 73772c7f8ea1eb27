//! Taking a tensor apart along an axis and putting slices back together, as Loop and Scan do
//! with their scanned values.

use bytes::{Bytes, BytesMut};

use crate::ops::OpError;
use crate::tensor::{DType, Tensor};

fn bad(e: impl std::fmt::Display) -> OpError {
    OpError::invalid(e.to_string())
}

/// Slice `i` of `t` along `axis`, that axis removed.
pub fn slice(t: &Tensor, axis: usize, i: usize) -> Result<Tensor, OpError> {
    let shape = t.shape();
    let es = t.dtype().size();
    let outer: usize = shape[..axis].iter().product();
    let inner: usize = shape[axis + 1..].iter().product::<usize>() * es;
    let n = shape[axis];
    let src = t.bytes();
    let mut out = BytesMut::with_capacity(outer * inner);
    for o in 0..outer {
        let at = (o * n + i) * inner;
        out.extend_from_slice(&src[at..at + inner]);
    }
    let mut s = shape.to_vec();
    s.remove(axis);
    Tensor::from_bytes(t.dtype(), s, out.freeze()).map_err(bad)
}

/// `parts` (one type) stacked along a new `axis`; `empty` is the type of a part when there
/// are none.
pub fn stack(parts: &[Tensor], axis: usize, empty: (DType, &[usize])) -> Result<Tensor, OpError> {
    let (dtype, part_shape) = match parts.first() {
        Some(p) => (p.dtype(), p.shape()),
        None => empty,
    };
    if let Some(p) = parts
        .iter()
        .find(|p| p.dtype() != dtype || p.shape() != part_shape)
    {
        return Err(OpError::invalid(format!(
            "iterations produced {} {:?} and {} {:?}: scanned outputs must keep one type",
            dtype,
            part_shape,
            p.dtype(),
            p.shape()
        )));
    }
    let es = dtype.size();
    let outer: usize = part_shape[..axis].iter().product();
    let inner: usize = part_shape[axis..].iter().product::<usize>() * es;
    let mut out = BytesMut::with_capacity(outer * inner * parts.len());
    for o in 0..outer {
        for p in parts {
            out.extend_from_slice(&p.bytes()[o * inner..(o + 1) * inner]);
        }
    }
    let mut shape = part_shape.to_vec();
    shape.insert(axis, parts.len());
    Tensor::from_bytes(dtype, shape, Bytes::from(out)).map_err(bad)
}
