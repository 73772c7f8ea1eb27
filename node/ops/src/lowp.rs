//! ONNX's low-precision element types: the float8 formats (e4m3fn, e4m3fnuz, e5m2, e5m2fnuz,
//! e8m0), float4 e2m1, and the 4- and 2-bit integers.
//!
//! In memory each element takes one byte, its value in the low bits, so that every kernel can
//! address elements as bytes; the narrow integers are sign- or zero-extended, so an int4 byte
//! is the int8 of the same value. ONNX files pack the 4-bit types two to a byte and the 2-bit
//! ones four, first element in the low bits ([`pack`], [`unpack`]).
//!
//! Conversions follow ONNX's reference (its Cast, which defers to ml_dtypes): to a float
//! format by rounding to nearest, ties to even; out of range, with `saturate` (ONNX's default)
//! to the largest finite value, without it to infinity where the format has one and NaN where
//! not; float4 always saturates. e8m0 (a bare power of two) rounds by ONNX's `round_mode`.

use crate::tensor::{DType, Tensor};

/// A low-precision float format.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Float {
    E4M3FN,
    E4M3FNUZ,
    E5M2,
    E5M2FNUZ,
    E2M1,
    E8M0,
}

/// How a value between two powers of two becomes e8m0 (Cast's `round_mode`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Round {
    Up,
    Down,
    Nearest,
}

impl Round {
    /// Cast's `round_mode` attribute ("up", the default, "down" or "nearest").
    pub fn by_name(name: &str) -> Option<Round> {
        match name {
            "up" => Some(Round::Up),
            "down" => Some(Round::Down),
            "nearest" => Some(Round::Nearest),
            _ => None,
        }
    }
}

impl Float {
    pub fn of(d: DType) -> Option<Float> {
        Some(match d {
            DType::F8E4M3FN => Float::E4M3FN,
            DType::F8E4M3FNUZ => Float::E4M3FNUZ,
            DType::F8E5M2 => Float::E5M2,
            DType::F8E5M2FNUZ => Float::E5M2FNUZ,
            DType::F4E2M1 => Float::E2M1,
            DType::F8E8M0 => Float::E8M0,
            _ => return None,
        })
    }

    /// (exponent bits, mantissa bits, bias) of the sign-exponent-mantissa formats.
    fn layout(self) -> (u32, u32, i32) {
        match self {
            Float::E4M3FN => (4, 3, 7),
            Float::E4M3FNUZ => (4, 3, 8),
            Float::E5M2 => (5, 2, 15),
            Float::E5M2FNUZ => (5, 2, 16),
            Float::E2M1 => (2, 1, 1),
            Float::E8M0 => (8, 0, 127),
        }
    }

    /// The largest finite value's bits (positive).
    fn max_bits(self) -> u8 {
        match self {
            Float::E4M3FN => 0x7e,
            Float::E4M3FNUZ | Float::E5M2FNUZ => 0x7f,
            Float::E5M2 => 0x7b,
            Float::E2M1 => 0x7,
            Float::E8M0 => 0xfe,
        }
    }

    /// The NaN a NaN of this sign becomes. float4 has none: ml_dtypes, ONNX's reference,
    /// gives the zero of the opposite sign, and so do we.
    fn nan_bits(self, negative: bool) -> u8 {
        match (self, negative) {
            (Float::E4M3FN, n) => 0x7f | (u8::from(n) << 7),
            (Float::E5M2, n) => 0x7e | (u8::from(n) << 7),
            (Float::E4M3FNUZ | Float::E5M2FNUZ, _) => 0x80,
            (Float::E2M1, n) => u8::from(!n) << 3,
            (Float::E8M0, _) => 0xff,
        }
    }

    fn is_nan(self, b: u8) -> bool {
        match self {
            Float::E4M3FN => b & 0x7f == 0x7f,
            Float::E5M2 => b & 0x7f > 0x7c,
            Float::E4M3FNUZ | Float::E5M2FNUZ => b == 0x80,
            Float::E2M1 => false,
            Float::E8M0 => b == 0xff,
        }
    }

    /// The value of bits `b`.
    pub fn decode(self, b: u8) -> f32 {
        if self.is_nan(b) {
            return f32::NAN;
        }
        if self == Float::E8M0 {
            return (2f64).powi(i32::from(b) - 127) as f32;
        }
        let (e_bits, m_bits, bias) = self.layout();
        let sign_at = e_bits + m_bits;
        let negative = (b >> sign_at) & 1 == 1;
        let e = i32::from((b >> m_bits) & ((1 << e_bits) - 1));
        let m = f64::from(b & ((1 << m_bits) - 1));
        if self == Float::E5M2 && e == 31 {
            return if negative {
                f32::NEG_INFINITY
            } else {
                f32::INFINITY
            };
        }
        let scale = |p: i32| (2f64).powi(p);
        let v = if e == 0 {
            m * scale(1 - bias - m_bits as i32)
        } else {
            (1.0 + m / scale(m_bits as i32)) * scale(e - bias)
        };
        (if negative { -v } else { v }) as f32
    }

    /// `x` in this format (not e8m0: [`encode_e8m0`]), rounded once from f64 (every f32,
    /// f16 and bf16 is exact in it).
    pub fn encode(self, x: f64, saturate: bool) -> u8 {
        debug_assert!(self != Float::E8M0, "e8m0 rounds by its own rules");
        let negative = x.is_sign_negative();
        if x.is_nan() {
            return self.nan_bits(negative);
        }
        let (e_bits, m_bits, bias) = self.layout();
        let sign = u8::from(negative) << (e_bits + m_bits);
        let a = x.abs();
        let max = f64::from(self.decode(self.max_bits()));
        let rounded = if a.is_infinite() {
            f64::INFINITY
        } else {
            round_to(a, m_bits, 1 - bias)
        };
        if rounded > max {
            return match (saturate || self == Float::E2M1, self) {
                (true, _) => sign | self.max_bits(),
                (false, Float::E5M2) => sign | 0x7c,
                (false, _) => self.nan_bits(negative),
            };
        }
        if rounded == 0.0 {
            // The fnuz formats have no negative zero (its bits are their NaN).
            return match self {
                Float::E4M3FNUZ | Float::E5M2FNUZ => 0,
                _ => sign,
            };
        }
        let (e, _) = frexp(rounded);
        let e = (e - 1).max(1 - bias);
        let units = rounded / (2f64).powi(e - m_bits as i32);
        let units = units as u32;
        let bits = if units < 1 << m_bits {
            units
        } else {
            (((e + bias) as u32) << m_bits) | (units - (1 << m_bits))
        };
        sign | bits as u8
    }
}

/// `a` (finite, >= 0) rounded to nearest-even with `m_bits` of mantissa and smallest normal
/// exponent `emin`, in f64, where every step is exact.
fn round_to(a: f64, m_bits: u32, emin: i32) -> f64 {
    if a == 0.0 {
        return 0.0;
    }
    let (e, _) = frexp(a);
    let e = (e - 1).max(emin);
    let quantum = (2f64).powi(e - m_bits as i32);
    (a / quantum).round_ties_even() * quantum
}

/// (exponent, mantissa) with `a = mantissa * 2^exponent`, mantissa in [0.5, 1), for finite
/// a > 0 (f64's subnormals are far below every format here, which is all f32 can reach).
fn frexp(a: f64) -> (i32, f64) {
    let bits = a.to_bits();
    let e = ((bits >> 52) & 0x7ff) as i32 - 1022;
    let m = f64::from_bits((bits & !(0x7ff << 52)) | (1022 << 52));
    (e, m)
}

/// `x` as e8m0 the way ONNX's `to_float8e8m0` makes it: from the float32 exponent, rounded
/// by `round`; the sign is dropped (e8m0 has none); NaN and infinity become the NaN.
pub fn encode_e8m0(x: f32, saturate: bool, round: Round) -> u8 {
    let bits = x.to_bits();
    let exponent = (bits >> 23) & 0xff;
    if exponent == 0xff {
        return 0xff;
    }
    let up = match round {
        Round::Down => false,
        Round::Up => bits & 0x7f_ffff != 0,
        Round::Nearest => {
            let guard = bits & 0x40_0000 != 0;
            let round_bit = bits & 0x20_0000 != 0;
            let sticky = bits & 0x1f_ffff != 0;
            guard && (round_bit || sticky || exponent > 0)
        }
    };
    let up = up && !(saturate && exponent == 0xfe);
    (exponent + u32::from(up)) as u8
}

/// The code shaders/cast_lowp.comp takes for a low-precision type.
pub fn gpu_code(d: DType) -> Option<u32> {
    Some(match d {
        DType::F8E4M3FN => 0,
        DType::F8E4M3FNUZ => 1,
        DType::F8E5M2 => 2,
        DType::F8E5M2FNUZ => 3,
        DType::F4E2M1 => 4,
        DType::F8E8M0 => 5,
        DType::I4 => 6,
        DType::U4 => 7,
        DType::I2 => 8,
        DType::U2 => 9,
        _ => return None,
    })
}

/// Integer `v` wrapped into the narrow integer type `d` (int4, uint4, int2, uint2), as one
/// byte of memory (sign-extended for the signed ones).
pub fn wrap_int(d: DType, v: i64) -> u8 {
    let bits = match d {
        DType::I4 | DType::U4 => 4,
        _ => 2,
    };
    let low = (v as u64 & ((1 << bits) - 1)) as u8;
    match d {
        DType::I4 | DType::I2 => ((low << (8 - bits)) as i8 >> (8 - bits)) as u8,
        _ => low,
    }
}

/// The bytes of an ONNX file's packed `d` (a 4- or 2-bit type) of `n` elements, one byte
/// each. `None` when `packed` is too short.
pub fn unpack(d: DType, packed: &[u8], n: usize) -> Option<Vec<u8>> {
    let bits = d.file_bits();
    let per_byte = 8 / bits;
    if packed.len() < n.div_ceil(per_byte) {
        return None;
    }
    let mask = (1u8 << bits) - 1;
    let signed = matches!(d, DType::I4 | DType::I2);
    Some(
        (0..n)
            .map(|i| {
                let v = (packed[i / per_byte] >> (bits * (i % per_byte))) & mask;
                if signed {
                    ((v << (8 - bits)) as i8 >> (8 - bits)) as u8
                } else {
                    v
                }
            })
            .collect(),
    )
}

/// One byte per element packed as ONNX files keep `d` (a 4- or 2-bit type); bytes of other
/// types are returned as they are.
pub fn pack(d: DType, bytes: &[u8]) -> Vec<u8> {
    let bits = d.file_bits();
    if bits >= 8 {
        return bytes.to_vec();
    }
    let per_byte = 8 / bits;
    let mask = (1u8 << bits) - 1;
    bytes
        .chunks(per_byte)
        .map(|c| {
            c.iter()
                .enumerate()
                .fold(0u8, |acc, (i, &v)| acc | ((v & mask) << (bits * i)))
        })
        .collect()
}

/// The values of a low-precision float tensor as f32 (of a narrow integer one, their
/// integers).
pub fn to_f32_vec(t: &Tensor) -> Vec<f32> {
    match Float::of(t.dtype()) {
        Some(f) => t.bytes().iter().map(|&b| f.decode(b)).collect(),
        None => t
            .bytes()
            .iter()
            .map(|&b| match t.dtype() {
                DType::I4 | DType::I2 => f32::from(b as i8),
                _ => f32::from(b),
            })
            .collect(),
    }
}

#[cfg(test)]
mod tests;
