//! Checked sizes: every dimension, element count, pad, stride and index that a shape rule or a
//! kernel's setup computes from a model or its inputs goes through [`Size`], which refuses to
//! overflow, instead of plain `usize` arithmetic, which wraps in release builds (a Tile whose
//! repeats wrap silently gives a wrong shape; a pad of `i64::MAX` makes a kernel ask for more
//! memory than exists).
//!
//! A size is at most [`Size::MAX`], 2^60 - 1: the bytes of any tensor of sizes that fit
//! (eight bytes an element at most) then fit an `i64` (ONNX's and numpy's dimension type) and
//! an `isize` (Rust's allocation limit), and the sum of two sizes cannot overflow a `usize`,
//! so a size that passed once stays safe to add to another. Whether a value that fits is also
//! small enough to be allocated is a separate question, asked by the graph layer of every
//! value's bytes against its per-value limit before anything is computed.

use std::fmt;

use crate::OpError;
use crate::tensor::DType;

/// A non-negative count no larger than [`Size::MAX`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Size(usize);

/// A size that does not fit, with the exact value it would have had.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SizeError {
    #[error("{what} is negative ({value})")]
    Negative { what: String, value: i128 },
    #[error(
        "{what} is {value}, more than the largest size vkml handles ({})",
        Size::MAX
    )]
    TooLarge { what: String, value: u128 },
    #[error("{what} is not a finite number ({value})")]
    NotFinite { what: String, value: f64 },
}

impl From<SizeError> for OpError {
    fn from(e: SizeError) -> OpError {
        OpError::Invalid(e.to_string())
    }
}

impl Size {
    /// The largest size: 2^60 - 1, so that eight bytes per element still fit an `i64`.
    pub const MAX: usize = (i64::MAX / 8) as usize;
    pub const ZERO: Size = Size(0);
    pub const ONE: Size = Size(1);

    /// `n` as a size, or an error naming `what` when it is too large.
    pub fn new(n: usize, what: impl fmt::Display) -> Result<Size, SizeError> {
        Size::wide(n as u128, what)
    }

    fn wide(n: u128, what: impl fmt::Display) -> Result<Size, SizeError> {
        if n <= Size::MAX as u128 {
            Ok(Size(n as usize))
        } else {
            Err(SizeError::TooLarge {
                what: what.to_string(),
                value: n,
            })
        }
    }

    /// A value from the model (an attribute, a shape tensor's element) as a size: negative and
    /// too-large values are errors naming `what`.
    pub fn from_i64(v: i64, what: impl fmt::Display) -> Result<Size, SizeError> {
        if v < 0 {
            return Err(SizeError::Negative {
                what: what.to_string(),
                value: v as i128,
            });
        }
        Size::wide(v as u128, what)
    }

    /// A float count (Range's, Resize's) rounded up as a size: NaN, infinities, negative and
    /// too-large values are errors naming `what`.
    pub fn from_f64_ceil(v: f64, what: impl fmt::Display) -> Result<Size, SizeError> {
        if !v.is_finite() {
            return Err(SizeError::NotFinite {
                what: what.to_string(),
                value: v,
            });
        }
        let c = v.ceil();
        if c < 0.0 {
            return Err(SizeError::Negative {
                what: what.to_string(),
                value: c as i128,
            });
        }
        // Exact for every value up to 2^60 (a multiple of the spacing of floats there), and
        // anything above is refused whatever the rounding.
        Size::wide(c as u128, what)
    }

    pub fn get(self) -> usize {
        self.0
    }

    pub fn add(self, other: impl Into<Size>, what: impl fmt::Display) -> Result<Size, SizeError> {
        Size::wide(self.0 as u128 + other.into().0 as u128, what)
    }

    /// `self * other`; the product of two sizes always fits a `u128`, so the error can say
    /// what it would have been.
    pub fn mul(self, other: impl Into<Size>, what: impl fmt::Display) -> Result<Size, SizeError> {
        Size::wide(self.0 as u128 * other.into().0 as u128, what)
    }

    /// `self - other`, an error when negative.
    pub fn sub(self, other: impl Into<Size>, what: impl fmt::Display) -> Result<Size, SizeError> {
        let other = other.into().0;
        self.0
            .checked_sub(other)
            .map(Size)
            .ok_or_else(|| SizeError::Negative {
                what: what.to_string(),
                value: self.0 as i128 - other as i128,
            })
    }

    /// The product of `dims` (1 for none), an error naming `what` when it does not fit.
    pub fn product(
        dims: impl IntoIterator<Item = usize>,
        what: impl fmt::Display,
    ) -> Result<Size, SizeError> {
        let mut p: u128 = 1;
        let mut zero = false;
        let mut over = false;
        for d in dims {
            zero |= d == 0;
            // Past the limit the exact value no longer matters, only that it is too large;
            // a later zero still makes the product 0, as numpy says.
            p = p.saturating_mul(d as u128);
            over |= p > Size::MAX as u128;
        }
        if zero {
            return Ok(Size(0));
        }
        if over {
            return Err(SizeError::TooLarge {
                what: what.to_string(),
                value: p,
            });
        }
        Ok(Size(p as usize))
    }
}

impl From<Size> for usize {
    fn from(s: Size) -> usize {
        s.0
    }
}

/// Small constants (element sizes, ranks) as sizes; they always fit.
impl From<u8> for Size {
    fn from(n: u8) -> Size {
        Size(n as usize)
    }
}

impl fmt::Display for Size {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// The element count of `shape`, an error naming it when it does not fit.
pub fn numel(shape: &[usize]) -> Result<usize, SizeError> {
    Size::product(
        shape.iter().copied(),
        format_args!("the element count of shape {shape:?}"),
    )
    .map(Size::get)
}

/// Bytes of a tensor of `dtype` and `shape`, an error naming them when they do not fit.
pub fn bytes(dtype: DType, shape: &[usize]) -> Result<u64, SizeError> {
    let n = Size::product(
        shape.iter().copied(),
        format_args!("the element count of {dtype}{shape:?}"),
    )?;
    // At most 8 * (2^60 - 1) < 2^63.
    Ok(n.get() as u64 * dtype.size() as u64)
}

/// A shape from a model's int64 values (a Reshape target, ConstantOfShape's shape, Expand's
/// shape): every entry a size, and the element count too.
pub fn shape_from_i64(values: &[i64], what: &str) -> Result<Vec<usize>, SizeError> {
    let shape = values
        .iter()
        .map(|&v| Size::from_i64(v, format_args!("an entry of {what} {values:?}")).map(Size::get))
        .collect::<Result<Vec<_>, _>>()?;
    numel(&shape)?;
    Ok(shape)
}

/// Checks that every dimension of `shape`, and its element count, are sizes.
pub fn check_shape(shape: &[usize], what: &str) -> Result<(), SizeError> {
    for &d in shape {
        Size::new(d, format_args!("a dimension of {what} {shape:?}"))?;
    }
    Size::product(
        shape.iter().copied(),
        format_args!("the element count of {what} {shape:?}"),
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_refuse_what_would_wrap() {
        let big = Size::from_i64((1 << 62) + 1, "d").unwrap_err();
        assert!(big.to_string().contains("4611686018427387905"), "{big}");
        let four = Size::new(4, "four").unwrap();
        let wide = Size::new(1 << 59, "w").unwrap();
        let e = wide.mul(four, "the product").unwrap_err();
        assert_eq!(
            e,
            SizeError::TooLarge {
                what: "the product".into(),
                value: 1 << 61
            }
        );
        assert!(Size::from_i64(-1, "pad").is_err());
        assert!(four.sub(Size::new(5, "x").unwrap(), "span").is_err());
        assert_eq!(four.add(Size::ONE, "sum").unwrap().get(), 5);
        assert!(
            Size::new(Size::MAX, "max")
                .unwrap()
                .add(Size::ONE, "one more")
                .is_err()
        );
    }

    #[test]
    fn products_saturate_into_errors_and_zero_wins() {
        assert_eq!(numel(&[]).unwrap(), 1);
        assert_eq!(numel(&[2, 3, 4]).unwrap(), 24);
        // 2^64 + 4 would wrap to 4 in usize arithmetic.
        assert!(numel(&[(1 << 62) + 1, 4]).is_err());
        assert!(numel(&[1 << 32, 1 << 32]).is_err());
        assert_eq!(numel(&[usize::MAX, usize::MAX, 0]).unwrap(), 0);
        assert!(bytes(DType::F64, &[Size::MAX]).unwrap() <= i64::MAX as u64);
    }

    #[test]
    fn float_counts_refuse_nan_and_infinity() {
        assert_eq!(Size::from_f64_ceil(2.5, "n").unwrap().get(), 3);
        assert!(Size::from_f64_ceil(f64::NAN, "n").is_err());
        assert!(Size::from_f64_ceil(f64::INFINITY, "n").is_err());
        assert!(Size::from_f64_ceil(1e30, "n").is_err());
        assert!(Size::from_f64_ceil(-0.5, "n").unwrap() == Size::ZERO);
        assert!(Size::from_f64_ceil(-1.5, "n").is_err());
    }

    #[test]
    fn shapes_from_models_are_checked() {
        assert_eq!(shape_from_i64(&[2, 3], "shape").unwrap(), vec![2, 3]);
        let e = shape_from_i64(&[(1 << 62) + 1, 4], "ConstantOfShape's shape").unwrap_err();
        assert!(e.to_string().contains("ConstantOfShape's shape"), "{e}");
        assert!(shape_from_i64(&[1 << 40, 1 << 40], "shape").is_err());
        assert!(shape_from_i64(&[-2], "shape").is_err());
    }
}
