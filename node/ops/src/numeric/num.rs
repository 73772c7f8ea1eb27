//! Scalar arithmetic for every numeric element type, written once so each kernel is one generic
//! function instantiated per dtype by the `dispatch_*` macros.
//!
//! Integer semantics follow onnxruntime/numpy where ONNX leaves them open:
//! - add/sub/mul wrap (two's complement);
//! - division truncates toward zero; dividing by zero gives 0 instead of trapping (numpy also
//!   gives 0, with a warning; onnxruntime's behaviour is undefined: it traps);
//! - Mod with fmod=0 takes the divisor's sign (Python's `%`, numpy.mod), with fmod=1 the
//!   dividend's (C's fmod); a zero divisor again gives 0;
//! - Min/Max on floats propagate NaN (numpy.minimum/maximum, onnxruntime).
//!
//! f16 and bf16 compute in f32 and round once per operation.

use half::{bf16, f16};

use crate::tensor::{DType, Element};

pub trait Num: Element + Copy + PartialOrd + Default + Send + Sync {
    const IS_FLOAT: bool;
    fn to_f64(self) -> f64;
    /// Floats round to nearest; integers truncate toward zero and saturate (NaN -> 0).
    fn from_f64(v: f64) -> Self;
    fn add(self, o: Self) -> Self;
    fn sub(self, o: Self) -> Self;
    fn mul(self, o: Self) -> Self;
    fn div(self, o: Self) -> Self;
    /// ONNX Mod; see the module comment.
    fn modulo(self, o: Self, fmod: bool) -> Self;
    fn min_nan(self, o: Self) -> Self;
    fn max_nan(self, o: Self) -> Self;
}

/// Integer-only operations (bitwise ops, BitShift).
pub trait Int: Num {
    fn and(self, o: Self) -> Self;
    fn or(self, o: Self) -> Self;
    fn xor(self, o: Self) -> Self;
    /// Shifts by `o` bits; a shift of the type's width or more gives 0 (numpy's result for
    /// unsigned types, where C leaves it undefined).
    fn shl(self, o: Self) -> Self;
    fn shr(self, o: Self) -> Self;
    /// Exact widening, for the table-driven unary integer ops; `from_i128` wraps.
    fn to_i128(self) -> i128;
    fn from_i128(v: i128) -> Self;
}

macro_rules! num_float {
    ($($t:ty),*) => {$(
        impl Num for $t {
            const IS_FLOAT: bool = true;
            fn to_f64(self) -> f64 { self as f64 }
            fn from_f64(v: f64) -> Self { v as $t }
            fn add(self, o: Self) -> Self { self + o }
            fn sub(self, o: Self) -> Self { self - o }
            fn mul(self, o: Self) -> Self { self * o }
            fn div(self, o: Self) -> Self { self / o }
            fn modulo(self, o: Self, fmod: bool) -> Self {
                // Rust's `%` on floats is C's fmod. ONNX requires fmod=1 for floats; the
                // numpy.mod form is kept for fmod=0 anyway, as onnxruntime does.
                let r = self % o;
                if fmod || r == 0.0 || (r < 0.0) == (o < 0.0) { r } else { r + o }
            }
            fn min_nan(self, o: Self) -> Self {
                if self.is_nan() || o.is_nan() { <$t>::NAN } else if o < self { o } else { self }
            }
            fn max_nan(self, o: Self) -> Self {
                if self.is_nan() || o.is_nan() { <$t>::NAN } else if o > self { o } else { self }
            }
        }
    )*};
}
num_float!(f32, f64);

macro_rules! num_half {
    ($($t:ty),*) => {$(
        impl Num for $t {
            const IS_FLOAT: bool = true;
            fn to_f64(self) -> f64 { <$t>::to_f64(self) }
            fn from_f64(v: f64) -> Self { <$t>::from_f64(v) }
            fn add(self, o: Self) -> Self { <$t>::from_f32(self.to_f32() + o.to_f32()) }
            fn sub(self, o: Self) -> Self { <$t>::from_f32(self.to_f32() - o.to_f32()) }
            fn mul(self, o: Self) -> Self { <$t>::from_f32(self.to_f32() * o.to_f32()) }
            fn div(self, o: Self) -> Self { <$t>::from_f32(self.to_f32() / o.to_f32()) }
            fn modulo(self, o: Self, fmod: bool) -> Self {
                <$t>::from_f32(self.to_f32().modulo(o.to_f32(), fmod))
            }
            fn min_nan(self, o: Self) -> Self {
                <$t>::from_f32(self.to_f32().min_nan(o.to_f32()))
            }
            fn max_nan(self, o: Self) -> Self {
                <$t>::from_f32(self.to_f32().max_nan(o.to_f32()))
            }
        }
    )*};
}
num_half!(f16, bf16);

macro_rules! num_int {
    ($($t:ty),*) => {$(
        impl Num for $t {
            const IS_FLOAT: bool = false;
            fn to_f64(self) -> f64 { self as f64 }
            fn from_f64(v: f64) -> Self { v as $t }
            fn add(self, o: Self) -> Self { self.wrapping_add(o) }
            fn sub(self, o: Self) -> Self { self.wrapping_sub(o) }
            fn mul(self, o: Self) -> Self { self.wrapping_mul(o) }
            fn div(self, o: Self) -> Self {
                // wrapping_div only overflows for MIN / -1, which it wraps to MIN.
                if o == 0 { 0 } else { self.wrapping_div(o) }
            }
            #[allow(unused_comparisons)]
            fn modulo(self, o: Self, fmod: bool) -> Self {
                if o == 0 {
                    return 0;
                }
                let r = self.wrapping_rem(o);
                if fmod || r == 0 || (r < 0) == (o < 0) { r } else { r.wrapping_add(o) }
            }
            fn min_nan(self, o: Self) -> Self { Ord::min(self, o) }
            fn max_nan(self, o: Self) -> Self { Ord::max(self, o) }
        }
        impl Int for $t {
            fn and(self, o: Self) -> Self { self & o }
            fn or(self, o: Self) -> Self { self | o }
            fn xor(self, o: Self) -> Self { self ^ o }
            #[allow(unused_comparisons)]
            fn shl(self, o: Self) -> Self {
                if o < 0 || o as u64 >= <$t>::BITS as u64 { 0 } else { self << o }
            }
            #[allow(unused_comparisons)]
            fn shr(self, o: Self) -> Self {
                if o < 0 || o as u64 >= <$t>::BITS as u64 { 0 } else { self >> o }
            }
            fn to_i128(self) -> i128 { self as i128 }
            fn from_i128(v: i128) -> Self { v as $t }
        }
    )*};
}
num_int!(i8, i16, i32, i64, u8, u16, u32, u64);

/// Every numeric dtype (all but bool), in the order error messages list them.
pub const NUMERIC: [DType; 12] = [
    DType::F32,
    DType::F64,
    DType::F16,
    DType::BF16,
    DType::I8,
    DType::I16,
    DType::I32,
    DType::I64,
    DType::U8,
    DType::U16,
    DType::U32,
    DType::U64,
];
pub const FLOATS: [DType; 4] = [DType::F32, DType::F64, DType::F16, DType::BF16];
pub const INTS: [DType; 8] = [
    DType::I8,
    DType::I16,
    DType::I32,
    DType::I64,
    DType::U8,
    DType::U16,
    DType::U32,
    DType::U64,
];

/// Calls `$f::<T>($args)` with `T` the Rust type of numeric dtype `$d`; `$other` for the rest.
macro_rules! dispatch_num {
    ($d:expr, $f:ident ( $($a:expr),* ), $other:expr) => {
        match $d {
            DType::F32 => $f::<f32>($($a),*),
            DType::F64 => $f::<f64>($($a),*),
            DType::F16 => $f::<half::f16>($($a),*),
            DType::BF16 => $f::<half::bf16>($($a),*),
            DType::I8 => $f::<i8>($($a),*),
            DType::I16 => $f::<i16>($($a),*),
            DType::I32 => $f::<i32>($($a),*),
            DType::I64 => $f::<i64>($($a),*),
            DType::U8 => $f::<u8>($($a),*),
            DType::U16 => $f::<u16>($($a),*),
            DType::U32 => $f::<u32>($($a),*),
            DType::U64 => $f::<u64>($($a),*),
            _ => $other,
        }
    };
}

/// `dispatch_num` for the integer dtypes only.
macro_rules! dispatch_int {
    ($d:expr, $f:ident ( $($a:expr),* ), $other:expr) => {
        match $d {
            DType::I8 => $f::<i8>($($a),*),
            DType::I16 => $f::<i16>($($a),*),
            DType::I32 => $f::<i32>($($a),*),
            DType::I64 => $f::<i64>($($a),*),
            DType::U8 => $f::<u8>($($a),*),
            DType::U16 => $f::<u16>($($a),*),
            DType::U32 => $f::<u32>($($a),*),
            DType::U64 => $f::<u64>($($a),*),
            _ => $other,
        }
    };
}

pub(crate) use {dispatch_int, dispatch_num};

/// The error function, to f64 precision: its Maclaurin series near 0 (every term of which is
/// exact enough below |x| = 3, where the largest term is ~8e3 times the result), and the
/// continued fraction of erfc beyond, where it converges in a few dozen terms.
pub fn erf(x: f64) -> f64 {
    if x.is_nan() {
        return x;
    }
    let a = x.abs();
    let v = if a < 3.0 {
        let x2 = a * a;
        let (mut term, mut sum) = (a, a);
        // 120 terms reach 3^241 / 120!, far below f64's resolution.
        for k in 1..120 {
            let k = k as f64;
            term *= -x2 / k;
            let add = term / (2.0 * k + 1.0);
            sum += add;
            if add.abs() <= 1e-17 * sum.abs() {
                break;
            }
        }
        sum * std::f64::consts::FRAC_2_SQRT_PI
    } else if a < 6.5 {
        // erfc(a) = e^-a^2 / sqrt(pi) * 1 / (a + (1/2) / (a + 1 / (a + (3/2) / (a + ...)))).
        let mut f = a;
        for k in (1..=60).rev() {
            f = a + (k as f64 / 2.0) / f;
        }
        1.0 - (-a * a).exp() / (f * std::f64::consts::PI.sqrt())
    } else {
        1.0
    };
    v.copysign(x)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn erf_matches_tabulated_values() {
        // Values from Abramowitz & Stegun table 7.1 / scipy.special.erf.
        for (x, want) in [
            (0.0, 0.0),
            (0.1, 0.1124629160182849),
            (0.5, 0.5204998778130465),
            (1.0, 0.8427007929497149),
            (2.0, 0.9953222650189527),
            (2.9, 0.9999589021219005),
            (3.0, 0.9999779095030014),
            (4.0, 0.9999999845827421),
            (-1.5, -0.9661051464753108),
        ] {
            assert!((erf(x) - want).abs() < 1e-12, "erf({x}) = {}", erf(x));
        }
        assert!(erf(f64::NAN).is_nan());
        assert_eq!(erf(f64::INFINITY), 1.0);
    }

    #[test]
    fn integer_rules() {
        assert_eq!(7i32.div(0), 0);
        assert_eq!(i32::MIN.div(-1), i32::MIN);
        // numpy.mod / np.fmod
        assert_eq!((-7i32).modulo(3, false), 2);
        assert_eq!(7i32.modulo(-3, false), -2);
        assert_eq!((-7i32).modulo(3, true), -1);
        assert_eq!(7i64.modulo(0, false), 0);
        assert_eq!(5u8.modulo(3, false), 2);
        assert_eq!((-4.5f32).modulo(2.0, false), 1.5);
        assert_eq!((-4.5f32).modulo(2.0, true), -0.5);
        assert_eq!(1u8.shl(8), 0);
        assert_eq!(0x80u8.shr(7), 1);
        assert_eq!(16u32.shr(2), 4);
        assert!(f32::NAN.max_nan(1.0).is_nan());
        assert!(2.0f32.min_nan(f32::NAN).is_nan());
    }
}
