//! The numeric traits every CPU kernel is written against, in one place:
//! - [`num::Num`]: scalar arithmetic for every element type (elementwise ops), f16 and bf16
//!   computing in f32 and rounding once per operation;
//! - [`real::Real`]: the float math Softmax shares with the activations;
//! - [`float::Float`]: the element types of Conv, the pools and BatchNormalization (f32, f64),
//!   with their GEMM and the hooks to f32's SIMD kernels (`simd/`);
//! - and here: element values widened for reference kernels that serve many dtypes at once
//!   (floats of every width as f64, integers and bools as i64), computed once in the wide type
//!   and narrowed back to the op's output dtype (integers wrap, as ONNX's do).
//!
//! f16 and bf16 reach the f32 kernels of Conv, MatMul, Gemm, the pools and BatchNormalization
//! through `via_f32.rs` (widened once, computed in f32, rounded once).

pub mod float;
#[macro_use]
pub mod num;
pub mod real;

use super::OpError;
use crate::tensor::{DType, Tensor};

/// A tensor's elements in the wide type of their kind.
#[derive(Debug, Clone, PartialEq)]
pub enum Wide {
    F(Vec<f64>),
    I(Vec<i64>),
}

fn bad(e: impl std::fmt::Display) -> OpError {
    OpError::invalid(e.to_string())
}

/// The elements of `t` widened: floats to f64, integers and bools to i64.
pub fn widen(t: &Tensor) -> Result<Wide, OpError> {
    if t.dtype().is_float() {
        Ok(Wide::F(t.to_f64_vec().map_err(bad)?))
    } else {
        Ok(Wide::I(t.to_i64_vec().map_err(bad)?))
    }
}

/// f64 values narrowed to a float `dtype` (or cast to an integer one).
pub fn from_f64(dtype: DType, shape: Vec<usize>, v: Vec<f64>) -> Result<Tensor, OpError> {
    Ok(match dtype {
        DType::F32 => Tensor::from_vec(shape, v.into_iter().map(|x| x as f32).collect()),
        DType::F64 => Tensor::from_vec(shape, v),
        DType::F16 => Tensor::from_vec(shape, v.into_iter().map(half::f16::from_f64).collect()),
        DType::BF16 => Tensor::from_vec(shape, v.into_iter().map(half::bf16::from_f64).collect()),
        _ => from_i64(dtype, shape, v.into_iter().map(|x| x as i64).collect())?,
    })
}

/// i64 values narrowed (wrapping) to an integer `dtype` (or converted to a float one).
pub fn from_i64(dtype: DType, shape: Vec<usize>, v: Vec<i64>) -> Result<Tensor, OpError> {
    Ok(match dtype {
        DType::I64 => Tensor::from_vec(shape, v),
        DType::I32 => Tensor::from_vec(shape, v.into_iter().map(|x| x as i32).collect()),
        DType::I16 => Tensor::from_vec(shape, v.into_iter().map(|x| x as i16).collect()),
        DType::I8 => Tensor::from_vec(shape, v.into_iter().map(|x| x as i8).collect()),
        DType::U8 => Tensor::from_vec(shape, v.into_iter().map(|x| x as u8).collect()),
        DType::U16 => Tensor::from_vec(shape, v.into_iter().map(|x| x as u16).collect()),
        DType::U32 => Tensor::from_vec(shape, v.into_iter().map(|x| x as u32).collect()),
        DType::U64 => Tensor::from_vec(shape, v.into_iter().map(|x| x as u64).collect()),
        DType::Bool => Tensor::from_bools(shape, v.into_iter().map(|x| x != 0).collect()),
        d if d.is_float() => from_f64(dtype, shape, v.into_iter().map(|x| x as f64).collect())?,
        // Strings and the low-precision types are converted by their own code (Cast's,
        // lowp.rs), never through numbers here.
        d => {
            return Err(OpError::unsupported(format!(
                "a numeric result as {d}: convert it with Cast"
            )));
        }
    })
}

/// Narrows `w` to `dtype`.
pub fn narrow(dtype: DType, shape: Vec<usize>, w: Wide) -> Result<Tensor, OpError> {
    match w {
        Wide::F(v) => from_f64(dtype, shape, v),
        Wide::I(v) => from_i64(dtype, shape, v),
    }
}

/// The smallest and largest values of an integer dtype, as i64 (ONNX's identities for
/// ReduceMax and ReduceMin over an empty set).
pub fn int_range(dtype: DType) -> (i64, i64) {
    match dtype {
        DType::I8 => (i8::MIN as i64, i8::MAX as i64),
        DType::I16 => (i16::MIN as i64, i16::MAX as i64),
        DType::I32 => (i32::MIN as i64, i32::MAX as i64),
        DType::U8 | DType::Bool => (0, if dtype == DType::Bool { 1 } else { 255 }),
        DType::U16 => (0, u16::MAX as i64),
        DType::U32 => (0, u32::MAX as i64),
        _ => (i64::MIN, i64::MAX),
    }
}

/// For each index of the sub-space spanned by `axes` of `shape` (row-major over those axes),
/// its element offset in the full tensor.
pub fn offsets(shape: &[usize], axes: &[usize]) -> Vec<usize> {
    let st = crate::tensor::strides(shape);
    let mut out = vec![0usize];
    for &a in axes {
        let mut next = Vec::with_capacity(out.len() * shape[a]);
        for &o in &out {
            for i in 0..shape[a] {
                next.push(o + i * st[a]);
            }
        }
        out = next;
    }
    out
}

/// Resolves possibly negative axes against `rank`, rejecting repeats.
pub fn resolve_axes(axes: &[i64], rank: usize, what: &str) -> Result<Vec<usize>, OpError> {
    let mut out = Vec::with_capacity(axes.len());
    for &a in axes {
        let r = rank as i64;
        if a < -r || a >= r {
            return Err(OpError::invalid(format!(
                "{what}: axis {a} is out of range for rank {rank}"
            )));
        }
        let a = if a < 0 { a + r } else { a } as usize;
        if out.contains(&a) {
            return Err(OpError::invalid(format!("{what}: axis {a} is repeated")));
        }
        out.push(a);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_walk_the_chosen_axes_in_order() {
        // shape [2, 3, 4], strides [12, 4, 1].
        assert_eq!(
            offsets(&[2, 3, 4], &[0, 2]),
            vec![0, 1, 2, 3, 12, 13, 14, 15]
        );
        assert_eq!(offsets(&[2, 3, 4], &[]), vec![0]);
        assert_eq!(offsets(&[2, 0, 4], &[1]), Vec::<usize>::new());
    }

    #[test]
    fn narrowing_wraps_integers() {
        let t = from_i64(DType::I32, vec![2], vec![1 << 32 | 5, -1]).unwrap();
        assert_eq!(t.to_i64_vec().unwrap(), vec![5, -1]);
        let t = from_f64(DType::F16, vec![1], vec![1.5]).unwrap();
        assert_eq!(t.to_f64_vec().unwrap(), vec![1.5]);
        assert!(resolve_axes(&[0, -3], 3, "x").is_err());
        assert_eq!(resolve_axes(&[-1], 3, "x").unwrap(), vec![2]);
    }
}
