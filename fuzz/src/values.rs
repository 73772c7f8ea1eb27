//! Element bytes of any type, drawn toward edge values: what inputs and initializers are filled
//! with.

use arbitrary::{Result, Unstructured};
use vkml::DType;

use crate::edge;

/// Most elements a generated tensor has: cases stay fast, budgets are probed by shapes and
/// attributes, not by big data.
pub const MAX_ELEMENTS: usize = 4096;

/// The little-endian bytes of one element.
pub fn element(u: &mut Unstructured, dtype: DType) -> Result<Vec<u8>> {
    if dtype == DType::Bool {
        // Mostly 0 or 1; a byte that is neither is what a careless writer produces.
        let b: u8 = if u.ratio(1, 16)? {
            u.arbitrary()?
        } else {
            u.int_in_range(0..=1)?
        };
        return Ok(vec![b]);
    }
    if dtype.is_low_precision() {
        return Ok(vec![low_precision(dtype, u.arbitrary()?)]);
    }
    if dtype.is_float() {
        let x = edge::float(u)?;
        return Ok(match dtype {
            DType::F32 => (x as f32).to_le_bytes().to_vec(),
            DType::F64 => x.to_le_bytes().to_vec(),
            DType::F16 => half::f16::from_f64(x).to_le_bytes().to_vec(),
            _ => half::bf16::from_f64(x).to_le_bytes().to_vec(),
        });
    }
    let x = edge::int(u)?;
    Ok(x.to_le_bytes()[..dtype.size()].to_vec())
}

/// The bytes of `n` elements. Small values dominate so that data drives real arithmetic, not
/// only errors; every eighth element is drawn from the edges.
pub fn elements(u: &mut Unstructured, dtype: DType, n: usize) -> Result<Vec<u8>> {
    let mut out = Vec::with_capacity(n * dtype.size());
    for _ in 0..n {
        if u.ratio(1, 8)? {
            out.extend(element(u, dtype)?);
        } else {
            let small = f64::from(u.int_in_range(-3..=3i8)?);
            out.extend(match dtype {
                DType::F32 => (small as f32).to_le_bytes().to_vec(),
                DType::F64 => small.to_le_bytes().to_vec(),
                DType::F16 => half::f16::from_f64(small).to_le_bytes().to_vec(),
                DType::BF16 => half::bf16::from_f64(small).to_le_bytes().to_vec(),
                DType::Bool => vec![u8::from(small > 0.0)],
                d if d.is_low_precision() => vec![low_precision(d, small as i8 as u8)],
                _ => (small as i64).to_le_bytes()[..dtype.size()].to_vec(),
            });
        }
    }
    Ok(out)
}

/// Byte `b` made a value of low-precision `dtype` as memory holds it (a narrow integer
/// sign- or zero-extended, float4 in the low four bits); every byte is some float8.
fn low_precision(dtype: DType, b: u8) -> u8 {
    match dtype {
        DType::I4 | DType::U4 | DType::I2 | DType::U2 => vkml::lowp::wrap_int(dtype, i64::from(b)),
        DType::F4E2M1 => b & 0xf,
        _ => b,
    }
}

/// Any of the element types the runtime has, or (as a code) one it does not.
pub fn dtype(u: &mut Unstructured) -> Result<DType> {
    Ok(*u.choose(&DType::ALL)?)
}

/// An ONNX type code: mostly one we have, sometimes a valid one we lack (string, complex)
/// or one that is no type at all.
pub fn dtype_code(u: &mut Unstructured) -> Result<i32> {
    Ok(match u.int_in_range(0..=5u8)? {
        0 => *u.choose(&[0, 8, 14, 15, 99, -1])?,
        _ => dtype(u)?.onnx_code(),
    })
}

/// A small shape whose element count stays under [`MAX_ELEMENTS`].
pub fn shape(u: &mut Unstructured) -> Result<Vec<usize>> {
    let rank = u.int_in_range(0..=5)?;
    let mut shape = Vec::with_capacity(rank);
    let mut n = 1usize;
    for _ in 0..rank {
        let d = u.int_in_range(0..=7usize)?;
        if n * d.max(1) > MAX_ELEMENTS {
            shape.push(1);
        } else {
            n *= d.max(1);
            shape.push(d);
        }
    }
    Ok(shape)
}
