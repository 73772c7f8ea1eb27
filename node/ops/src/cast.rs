//! Cast between every element type of [`DType`].
//!
//! Semantics follow C casts where those are defined and saturate where C leaves them undefined:
//! integer to integer wraps (two's complement); float to integer truncates toward zero, with
//! NaN giving 0 and out-of-range values the nearest limit; anything to bool is `!= 0` (so NaN is
//! true); bool to anything is 0 or 1; floats round to nearest-even when narrowing. The
//! `saturate` attribute (opset 19) concerns the float8 types and `round_mode` (opset 24)
//! float8e8m0: the low-precision types convert as [`crate::lowp`] says, through f64 for the
//! float ones (f32 for e8m0, as ONNX's reference does) and through integers for the narrow
//! integers (floats truncated toward zero, then wrapped: ONNX's tests cast 9.0 to int4 -7).

use bytes::Bytes;
use half::{bf16, f16};

use super::util::{groups_1d, req};
use super::{BufRef, Dispatch, GpuKernel, InferInput, NodeSpec, Op, OpError, Registry, ValueType};
use crate::lowp::{self, Float, Round};
use crate::tensor::{DType, Element, Tensor};
use vkml_shaders::{cast, cast_bf16, cast_copy32, cast_lowp};

pub fn register(r: &mut Registry) {
    r.add("Cast", Cast::build);
    r.add("CastLike", Cast::build_like);
}

/// Cast, or CastLike (opset 15) when `to` is `None`: the target type is input 1's.
#[derive(Debug)]
struct Cast {
    to: Option<DType>,
    /// Out-of-range values to a float8 type become its largest finite value (or else
    /// infinity or NaN).
    saturate: bool,
    /// How a value becomes float8e8m0.
    round: Round,
}

/// Cast's and CastLike's `saturate` and `round_mode` attributes.
fn low_precision_attrs(spec: &NodeSpec<'_>) -> Result<(bool, Round), OpError> {
    let saturate = spec.attrs.int("saturate", 1)? != 0;
    let round = match spec.attrs.get("round_mode") {
        None => Round::Up,
        Some(super::AttrValue::String(name)) => Round::by_name(name).ok_or_else(|| {
            OpError::invalid(format!(
                "{}: round_mode '{name}' is not one of up, down, nearest",
                spec.op_type
            ))
        })?,
        Some(_) => {
            return Err(OpError::invalid(format!(
                "{}: round_mode must be a string",
                spec.op_type
            )));
        }
    };
    Ok((saturate, round))
}

/// Opset 1 names the target type as a string of `TensorProto.DataType`'s enum.
fn dtype_by_name(name: &str) -> Option<DType> {
    DType::ALL.into_iter().find(|d| {
        let proto = match d {
            DType::F32 => "FLOAT",
            DType::F64 => "DOUBLE",
            DType::F16 => "FLOAT16",
            DType::BF16 => "BFLOAT16",
            other => return other.onnx_name().eq_ignore_ascii_case(name),
        };
        proto.eq_ignore_ascii_case(name)
    })
}

impl Cast {
    fn build(spec: &NodeSpec<'_>) -> Result<Box<dyn Op>, OpError> {
        let to = match spec.attrs.get("to") {
            None => return Err(OpError::invalid("Cast: attribute 'to' is required")),
            Some(super::AttrValue::String(name)) => dtype_by_name(name)
                .ok_or_else(|| OpError::unsupported(format!("Cast: target type '{name}'")))?,
            Some(_) => {
                let code = spec.attrs.int("to", 0)?;
                let code32 = i32::try_from(code).unwrap_or(-1);
                DType::from_onnx_code(code32)
                    .ok_or_else(|| OpError::unsupported(format!("Cast: target type code {code}")))?
            }
        };
        if to == DType::String {
            return Err(OpError::unsupported(
                "Cast: to string (vkml converts no numbers to strings)",
            ));
        }
        let (saturate, round) = low_precision_attrs(spec)?;
        Ok(Box::new(Cast {
            to: Some(to),
            saturate,
            round,
        }))
    }

    fn build_like(spec: &NodeSpec<'_>) -> Result<Box<dyn Op>, OpError> {
        let (saturate, round) = low_precision_attrs(spec)?;
        Ok(Box::new(Cast {
            to: None,
            saturate,
            round,
        }))
    }

    /// shaders/cast_lowp.comp between a low-precision type and f32 or f16, if that is the
    /// pair.
    fn low_precision_dispatch(&self, from: DType, to: DType, n: u32) -> Option<Dispatch> {
        use cast_lowp::Variant as V;
        let (variant, low) = match (from, to) {
            (low, DType::F32) => (V::DecodeF32, low),
            (low, DType::F16) => (V::DecodeF16, low),
            (DType::F32, low) => (V::EncodeF32, low),
            (DType::F16, low) => (V::EncodeF16, low),
            _ => return None,
        };
        let round = match self.round {
            Round::Up => 0,
            Round::Down => 1,
            Round::Nearest => 2,
        };
        Some(Dispatch::new(
            variant,
            cast_lowp::Buffers {
                x: BufRef::Input(0),
                y: BufRef::Output(0),
            },
            cast_lowp::Params {
                n,
                fmt: lowp::gpu_code(low)?,
                saturate: u32::from(self.saturate),
                round,
            },
            groups_1d(n as usize, 256),
        ))
    }

    fn target(&self, like: Option<&ValueType>) -> Result<DType, OpError> {
        match (self.to, like) {
            (Some(d), _) => Ok(d),
            (None, Some(t)) => Ok(t.dtype),
            (None, None) => Err(OpError::invalid(
                "CastLike: input 1 (target_type) is required",
            )),
        }
    }
}

/// `x` converted to `to` under Cast's rules (the module comment), saturating as Cast does
/// by default.
pub(crate) fn cast_tensor(x: &Tensor, to: DType) -> Result<Tensor, OpError> {
    cast_tensor_with(x, to, true, Round::Up)
}

/// [`cast_tensor`] with Cast's `saturate` and `round_mode`.
pub(crate) fn cast_tensor_with(
    x: &Tensor,
    to: DType,
    saturate: bool,
    round: Round,
) -> Result<Tensor, OpError> {
    if x.dtype() == to {
        return Ok(x.clone());
    }
    if x.dtype().is_low_precision() || to.is_low_precision() {
        return cast_low_precision(x, to, saturate, round);
    }
    Ok(match to {
        DType::F32 => vec_tensor::<f32>(x)?,
        DType::F64 => vec_tensor::<f64>(x)?,
        DType::F16 => vec_tensor::<f16>(x)?,
        DType::BF16 => vec_tensor::<bf16>(x)?,
        DType::I8 => vec_tensor::<i8>(x)?,
        DType::I16 => vec_tensor::<i16>(x)?,
        DType::I32 => vec_tensor::<i32>(x)?,
        DType::I64 => vec_tensor::<i64>(x)?,
        DType::U8 => vec_tensor::<u8>(x)?,
        DType::U16 => vec_tensor::<u16>(x)?,
        DType::U32 => vec_tensor::<u32>(x)?,
        DType::U64 => vec_tensor::<u64>(x)?,
        DType::Bool => {
            let bytes: Vec<u8> = cast_to::<BoolByte>(x)?.into_iter().map(|b| b.0).collect();
            byte_tensor(DType::Bool, x.shape(), bytes)?
        }
        low => return cast_low_precision(x, low, saturate, round),
    })
}

fn byte_tensor(dtype: DType, shape: &[usize], bytes: Vec<u8>) -> Result<Tensor, OpError> {
    Tensor::from_bytes(dtype, shape.to_vec(), Bytes::from(bytes))
        .map_err(|e| OpError::invalid(e.to_string()))
}

/// A cast from or to a low-precision type: the source as a type the other rules know (a
/// low-precision float's exact f32, a narrow integer's int8 or uint8), then to `to`.
fn cast_low_precision(
    x: &Tensor,
    to: DType,
    saturate: bool,
    round: Round,
) -> Result<Tensor, OpError> {
    let src = match x.dtype() {
        d if Float::of(d).is_some() => Tensor::from_vec(x.shape().to_vec(), lowp::to_f32_vec(x)),
        DType::I4 | DType::I2 => byte_tensor(DType::I8, x.shape(), x.bytes().to_vec())?,
        DType::U4 | DType::U2 => byte_tensor(DType::U8, x.shape(), x.bytes().to_vec())?,
        _ => x.clone(),
    };
    if !to.is_low_precision() {
        return cast_tensor(&src, to);
    }
    let bad = |e: crate::tensor::TensorError| OpError::invalid(e.to_string());
    let bytes: Vec<u8> = match Float::of(to) {
        Some(Float::E8M0) => {
            let f32s = cast_tensor(&src, DType::F32)?;
            let v = f32s.view::<f32>().map_err(bad)?;
            v.iter()
                .map(|&v| lowp::encode_e8m0(v, saturate, round))
                .collect()
        }
        Some(f) => {
            let v = src.to_f64_vec().map_err(bad)?;
            v.into_iter().map(|v| f.encode(v, saturate)).collect()
        }
        None if src.dtype().is_float() => {
            let v = src.to_f64_vec().map_err(bad)?;
            // `as` truncates toward zero and saturates (NaN to 0) before the wrap.
            v.into_iter()
                .map(|v| lowp::wrap_int(to, v as i64))
                .collect()
        }
        None => {
            let v = src.to_i64_vec().map_err(bad)?;
            v.into_iter().map(|v| lowp::wrap_int(to, v)).collect()
        }
    };
    byte_tensor(to, x.shape(), bytes)
}

/// cast.comp's variant for a pair of types (`cast_<from>_<to>`): f32, f16, f64, i64, i32, i8,
/// u8 and bool, each way.
fn cast_variant(from: DType, to: DType) -> Option<cast::Variant> {
    use DType::{Bool, F16, F32, F64, I8, I32, I64, U8};
    use cast::Variant as V;
    Some(match (from, to) {
        (F32, F16) => V::F32F16,
        (F32, I64) => V::F32I64,
        (F32, I32) => V::F32I32,
        (F32, I8) => V::F32I8,
        (F32, U8) => V::F32U8,
        (F32, Bool) => V::F32Bool,
        (F16, F32) => V::F16F32,
        (F16, I64) => V::F16I64,
        (F16, I32) => V::F16I32,
        (F16, I8) => V::F16I8,
        (F16, U8) => V::F16U8,
        (F16, Bool) => V::F16Bool,
        (I64, F32) => V::I64F32,
        (I64, F16) => V::I64F16,
        (I64, I32) => V::I64I32,
        (I64, I8) => V::I64I8,
        (I64, U8) => V::I64U8,
        (I64, Bool) => V::I64Bool,
        (I32, F32) => V::I32F32,
        (I32, F16) => V::I32F16,
        (I32, I64) => V::I32I64,
        (I32, I8) => V::I32I8,
        (I32, U8) => V::I32U8,
        (I32, Bool) => V::I32Bool,
        (I8, F32) => V::I8F32,
        (I8, F16) => V::I8F16,
        (I8, I64) => V::I8I64,
        (I8, I32) => V::I8I32,
        (I8, U8) => V::I8U8,
        (I8, Bool) => V::I8Bool,
        (U8, F32) => V::U8F32,
        (U8, F16) => V::U8F16,
        (U8, I64) => V::U8I64,
        (U8, I32) => V::U8I32,
        (U8, I8) => V::U8I8,
        (U8, Bool) => V::U8Bool,
        (Bool, F32) => V::BoolF32,
        (Bool, F16) => V::BoolF16,
        (Bool, I64) => V::BoolI64,
        (Bool, I32) => V::BoolI32,
        (Bool, I8) => V::BoolI8,
        (Bool, U8) => V::BoolU8,
        (F16, F16) => V::F16F16,
        (I8, I8) => V::I8I8,
        (U8, U8) => V::U8U8,
        (Bool, Bool) => V::BoolBool,
        (F64, F32) => V::F64F32,
        (F64, F16) => V::F64F16,
        (F64, I64) => V::F64I64,
        (F64, I32) => V::F64I32,
        (F64, I8) => V::F64I8,
        (F64, U8) => V::F64U8,
        (F64, Bool) => V::F64Bool,
        (F32, F64) => V::F32F64,
        (F16, F64) => V::F16F64,
        (I64, F64) => V::I64F64,
        (I32, F64) => V::I32F64,
        (I8, F64) => V::I8F64,
        (U8, F64) => V::U8F64,
        (Bool, F64) => V::BoolF64,
        _ => return None,
    })
}

/// A value on its way between two types: integers exactly (i128 holds every i64 and u64),
/// floats as f64 (which holds every f16, bf16 and f32 exactly).
#[derive(Clone, Copy, Debug)]
enum Wide {
    Int(i128),
    Float(f64),
}

trait Src: Copy + Send + Sync {
    fn wide(self) -> Wide;
}

trait Dst: Copy + Send + Default {
    fn from_wide(w: Wide) -> Self;
}

/// A bool as ONNX stores it: one byte, non-zero meaning true.
#[derive(Clone, Copy, Default, bytemuck::Pod, bytemuck::Zeroable)]
#[repr(transparent)]
struct BoolByte(u8);

macro_rules! int_types {
    ($($t:ty),*) => {$(
        impl Src for $t {
            fn wide(self) -> Wide { Wide::Int(self as i128) }
        }
        impl Dst for $t {
            fn from_wide(w: Wide) -> Self {
                match w {
                    // `as` wraps between integers and saturates from floats (NaN -> 0).
                    Wide::Int(i) => i as $t,
                    Wide::Float(f) => f as $t,
                }
            }
        }
    )*};
}
int_types!(i8, i16, i32, i64, u8, u16, u32, u64);

macro_rules! float_types {
    ($($t:ty),*) => {$(
        impl Src for $t {
            fn wide(self) -> Wide { Wide::Float(self as f64) }
        }
        impl Dst for $t {
            fn from_wide(w: Wide) -> Self {
                match w {
                    // Straight from i128, so rounding happens once.
                    Wide::Int(i) => i as $t,
                    Wide::Float(f) => f as $t,
                }
            }
        }
    )*};
}
float_types!(f32, f64);

macro_rules! half_types {
    ($($t:ty),*) => {$(
        impl Src for $t {
            fn wide(self) -> Wide { Wide::Float(self.to_f64()) }
        }
        impl Dst for $t {
            fn from_wide(w: Wide) -> Self {
                match w {
                    // Integers up to 2^53 are exact in f64, and larger ones overflow f16 (its
                    // maximum is 65504) or sit far beyond bf16's 8-bit precision.
                    Wide::Int(i) => <$t>::from_f64(i as f64),
                    Wide::Float(f) => <$t>::from_f64(f),
                }
            }
        }
    )*};
}
half_types!(f16, bf16);

impl Src for BoolByte {
    fn wide(self) -> Wide {
        Wide::Int(i128::from(self.0 != 0))
    }
}

impl Dst for BoolByte {
    fn from_wide(w: Wide) -> Self {
        BoolByte(u8::from(match w {
            Wide::Int(i) => i != 0,
            // NaN != 0, so NaN is true, as in C.
            Wide::Float(f) => f != 0.0,
        }))
    }
}

fn convert<S: Src, D: Dst>(src: &[S]) -> Vec<D> {
    crate::elementwise::broadcast::unary(src, |s| D::from_wide(s.wide()))
}

fn typed<T: Element>(t: &Tensor) -> Result<std::borrow::Cow<'_, [T]>, OpError> {
    t.view::<T>().map_err(|e| OpError::invalid(e.to_string()))
}

/// Every element of `t`, converted to `D`.
fn cast_to<D: Dst>(t: &Tensor) -> Result<Vec<D>, OpError> {
    Ok(match t.dtype() {
        DType::F32 => convert::<f32, D>(&typed(t)?),
        DType::F64 => convert::<f64, D>(&typed(t)?),
        DType::F16 => convert::<f16, D>(&typed(t)?),
        DType::BF16 => convert::<bf16, D>(&typed(t)?),
        DType::I8 => convert::<i8, D>(&typed(t)?),
        DType::I16 => convert::<i16, D>(&typed(t)?),
        DType::I32 => convert::<i32, D>(&typed(t)?),
        DType::I64 => convert::<i64, D>(&typed(t)?),
        DType::U8 => convert::<u8, D>(&typed(t)?),
        DType::U16 => convert::<u16, D>(&typed(t)?),
        DType::U32 => convert::<u32, D>(&typed(t)?),
        DType::U64 => convert::<u64, D>(&typed(t)?),
        DType::Bool => convert::<BoolByte, D>(bytemuck::cast_slice::<u8, BoolByte>(t.bytes())),
        low => {
            return Err(OpError::unsupported(format!(
                "Cast: {low} reached the rules for the other types"
            )));
        }
    })
}

fn vec_tensor<D: Dst + Element>(t: &Tensor) -> Result<Tensor, OpError> {
    Ok(Tensor::from_vec(t.shape().to_vec(), cast_to::<D>(t)?))
}

impl Op for Cast {
    fn low_precision(&self) -> bool {
        true
    }

    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<ValueType>, OpError> {
        let x = req(inputs, 0)?.ty;
        let to = self.target(super::util::opt(inputs, 1).map(|i| i.ty))?;
        if x.dtype == DType::String || to == DType::String {
            return Err(OpError::unsupported(format!(
                "Cast from {} to {to}: vkml converts no strings to or from numbers",
                x.dtype
            )));
        }
        Ok(vec![ValueType::new(to, x.shape.clone())])
    }

    fn run_cpu(
        &self,
        inputs: &[Option<&Tensor>],
        _outputs: &[ValueType],
    ) -> Result<Vec<Tensor>, OpError> {
        let x = req(inputs, 0)?;
        let like = super::util::opt(inputs, 1).map(ValueType::of);
        let to = self.target(like.as_ref())?;
        Ok(vec![cast_tensor_with(x, to, self.saturate, self.round)?])
    }

    fn gpu(&self, inputs: &[Option<&ValueType>], outputs: &[ValueType]) -> Option<GpuKernel> {
        let x = req(inputs, 0).ok()?;
        let to = outputs.first()?.dtype;
        let n = x.numel();
        let words = |count: usize| u32::try_from(count).ok();
        let buffers = || (BufRef::Input(0), BufRef::Output(0));
        let (dispatch, count) = match (x.dtype, to) {
            // A cast to the same type is a copy; 4- and 8-byte types copy as 32-bit words.
            (a, b) if a == b && a.size() % 4 == 0 => {
                let count = n * a.size() / 4;
                let (x, y) = buffers();
                let d = Dispatch::new(
                    cast_copy32::Variant::Main,
                    cast_copy32::Buffers { x, y },
                    cast_copy32::Params { n: words(count)? },
                    groups_1d(count, 256),
                );
                (d, count)
            }
            // bf16 only to and from f32 (on bits: no bfloat16 type needed).
            (DType::F32, DType::BF16) | (DType::BF16, DType::F32) => {
                let (x, y) = buffers();
                let variant = if to == DType::BF16 {
                    cast_bf16::Variant::FromF32
                } else {
                    cast_bf16::Variant::ToF32
                };
                let d = Dispatch::new(
                    variant,
                    cast_bf16::Buffers { x, y },
                    cast_bf16::Params { n: words(n)? },
                    groups_1d(n, 256),
                );
                (d, n)
            }
            // A narrow integer is held as the int8 or uint8 of its value, which either takes
            // by wrapping: a copy.
            (DType::I4 | DType::U4 | DType::I2 | DType::U2, DType::I8 | DType::U8) => {
                let (x, y) = buffers();
                let d = Dispatch::new(
                    cast::Variant::U8U8,
                    cast::Buffers { x, y },
                    cast::Params { n: words(n)? },
                    groups_1d(n, 256),
                );
                (d, n)
            }
            (a, b) if a.is_low_precision() || b.is_low_precision() => {
                (self.low_precision_dispatch(a, b, words(n)?)?, n)
            }
            (a, b) => {
                let (x, y) = buffers();
                let d = Dispatch::new(
                    cast_variant(a, b)?,
                    cast::Buffers { x, y },
                    cast::Params { n: words(n)? },
                    groups_1d(n, 256),
                );
                (d, n)
            }
        };
        Some(GpuKernel {
            scratch: vec![],
            dispatches: if count == 0 { vec![] } else { vec![dispatch] },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::AttrValue;
    use crate::testkit::{build, gpu_matches_cpu, run1};

    fn cast(x: &Tensor, to: DType) -> Tensor {
        let op = build("Cast", 19, &[("to", AttrValue::Int(to.onnx_code() as i64))]).unwrap();
        run1(&*op, &[x]).unwrap()
    }

    #[test]
    fn float_to_int_truncates_and_saturates() {
        let x = Tensor::from_vec(
            vec![8],
            vec![
                3.9f32,
                -3.9,
                f32::NAN,
                f32::INFINITY,
                f32::NEG_INFINITY,
                1e10,
                -1e10,
                -0.5,
            ],
        );
        let y = cast(&x, DType::I32);
        let want = [3, -3, 0, i32::MAX, i32::MIN, i32::MAX, i32::MIN, 0];
        assert_eq!(&*y.view::<i32>().unwrap(), &want);
        let y = cast(&x, DType::I64);
        assert_eq!(
            &*y.view::<i64>().unwrap(),
            &[
                3,
                -3,
                0,
                i64::MAX,
                i64::MIN,
                10_000_000_000,
                -10_000_000_000,
                0
            ]
        );
        let y = cast(&x, DType::U8);
        assert_eq!(&*y.view::<u8>().unwrap(), &[3, 0, 0, 255, 0, 255, 0, 0]);
        let y = cast(&x, DType::I8);
        assert_eq!(
            &*y.view::<i8>().unwrap(),
            &[3, -3, 0, 127, -128, 127, -128, 0]
        );
    }

    #[test]
    fn int_to_int_wraps() {
        let x = Tensor::from_vec(vec![4], vec![-1i32, 256, 300, i32::MIN]);
        assert_eq!(
            &*cast(&x, DType::U8).view::<u8>().unwrap(),
            &[255, 0, 44, 0]
        );
        assert_eq!(
            &*cast(&x, DType::I64).view::<i64>().unwrap(),
            &[-1, 256, 300, -2147483648]
        );
        let x = Tensor::from_vec(vec![2], vec![u64::MAX, 1u64 << 63]);
        assert_eq!(
            &*cast(&x, DType::I64).view::<i64>().unwrap(),
            &[-1, i64::MIN]
        );
        let x = Tensor::from_vec(vec![1], vec![-1i64]);
        assert_eq!(&*cast(&x, DType::U64).view::<u64>().unwrap(), &[u64::MAX]);
    }

    #[test]
    fn bools() {
        let x = Tensor::from_vec(vec![5], vec![0f32, -0.0, f32::NAN, 2.0, -1e-30]);
        assert_eq!(
            cast(&x, DType::Bool).view_bool().unwrap(),
            vec![false, false, true, true, true]
        );
        let x = Tensor::from_vec(vec![3], vec![0i64, 5, -1]);
        assert_eq!(
            cast(&x, DType::Bool).view_bool().unwrap(),
            vec![false, true, true]
        );
        let b = Tensor::from_bools(vec![3], vec![true, false, true]);
        assert_eq!(
            &*cast(&b, DType::F32).view::<f32>().unwrap(),
            &[1.0, 0.0, 1.0]
        );
        assert_eq!(&*cast(&b, DType::I64).view::<i64>().unwrap(), &[1, 0, 1]);
        // A bool byte other than 1 still reads as true and comes out as 1.
        let odd = Tensor::from_bytes(DType::Bool, vec![2], Bytes::from(vec![0u8, 7])).unwrap();
        assert_eq!(&*cast(&odd, DType::U8).view::<u8>().unwrap(), &[0, 1]);
    }

    #[test]
    fn float_widths_round_to_nearest() {
        let x = Tensor::from_vec(vec![4], vec![0.1f64, 1e40, -1e-50, 16_777_217.0]);
        let y = cast(&x, DType::F32);
        assert_eq!(
            &*y.view::<f32>().unwrap(),
            &[0.1f32, f32::INFINITY, -0.0, 16_777_216.0]
        );
        let x = Tensor::from_vec(vec![4], vec![65504f32, 1e5, 0.1, -2.5]);
        let y = cast(&x, DType::F16);
        let h: Vec<f32> = y
            .view::<f16>()
            .unwrap()
            .iter()
            .map(|v| v.to_f32())
            .collect();
        assert_eq!(h, vec![65504.0, f32::INFINITY, 0.099975586, -2.5]);
        let y = cast(&cast(&x, DType::BF16), DType::F64);
        assert_eq!(
            &*y.view::<f64>().unwrap(),
            &[65536.0, 99840.0, 0.10009765625, -2.5]
        );
        // i64 -> f32 rounds once: 2^24 + 1 is a tie that goes to even.
        let x = Tensor::from_vec(vec![2], vec![(1i64 << 24) + 1, (1i64 << 24) + 3]);
        assert_eq!(
            &*cast(&x, DType::F32).view::<f32>().unwrap(),
            &[16_777_216.0, 16_777_220.0]
        );
        // f16 -> i32 goes through the exact value.
        let x = Tensor::from_vec(vec![2], vec![f16::from_f32(-7.75), f16::NAN]);
        assert_eq!(&*cast(&x, DType::I32).view::<i32>().unwrap(), &[-7, 0]);
    }

    #[test]
    fn attribute_forms_and_errors() {
        let x = Tensor::from_vec(vec![2], vec![1.5f32, 2.5]);
        let op = build("Cast", 1, &[("to", AttrValue::String("INT32".into()))]).unwrap();
        assert_eq!(&*run1(&*op, &[&x]).unwrap().view::<i32>().unwrap(), &[1, 2]);
        let op = build("Cast", 1, &[("to", AttrValue::String("float16".into()))]).unwrap();
        assert_eq!(run1(&*op, &[&x]).unwrap().dtype(), DType::F16);
        assert!(build("Cast", 13, &[]).is_err());
        let e = build("Cast", 13, &[("to", AttrValue::Int(8))])
            .unwrap_err()
            .to_string();
        assert!(e.contains("string"), "{e}");
        assert!(build("Cast", 13, &[("to", AttrValue::Int(27))]).is_err());
        assert!(build("Cast", 1, &[("to", AttrValue::String("COMPLEX64".into()))]).is_err());
        // Same type: the tensor itself.
        assert_eq!(cast(&x, DType::F32), x);
    }

    #[test]
    fn every_pair_converts_a_small_integer_exactly() {
        // The low-precision types cannot hold 100 (ONNX's own tests check them: conformance).
        let x = Tensor::from_vec(vec![3], vec![0i64, 1, 100]);
        // Strings have no Cast kernel (target refuses them).
        let wide = || {
            DType::ALL
                .into_iter()
                .filter(|d| !d.is_low_precision() && *d != DType::String)
        };
        for from in wide() {
            for to in wide() {
                let y = cast(&cast(&x, from), to);
                let want: Vec<f64> = if from == DType::Bool || to == DType::Bool {
                    vec![0.0, 1.0, 1.0]
                } else {
                    vec![0.0, 1.0, 100.0]
                };
                assert_eq!(y.to_f64_vec().unwrap(), want, "{from} -> {to}");
                assert_eq!(y.dtype(), to);
            }
        }
    }

    #[test]
    fn gpu_kernels_for_simple_pairs() {
        let op = build("Cast", 13, &[("to", AttrValue::Int(7))]).unwrap();
        let x = ValueType::new(DType::F32, vec![3, 5]);
        let k = op
            .gpu(&[Some(&x)], &[ValueType::new(DType::I64, vec![3, 5])])
            .unwrap();
        assert_eq!(
            (k.dispatches[0].kernel(), k.dispatches[0].params()),
            (cast::Variant::F32I64.kernel(), &[15u32][..])
        );
        let same = ValueType::new(DType::I64, vec![3, 5]);
        let k = op.gpu(&[Some(&same)], std::slice::from_ref(&same)).unwrap();
        assert_eq!(
            (k.dispatches[0].kernel(), k.dispatches[0].params()),
            (cast_copy32::Variant::Main.kernel(), &[30u32][..])
        );
        // bf16 has GPU kernels to and from f32 only.
        let h = ValueType::new(DType::BF16, vec![3]);
        assert!(op.gpu(&[Some(&h)], &[same]).is_none());
    }

    #[test]
    fn gpu_cast_matches_cpu() {
        let f = Tensor::from_vec(
            vec![12],
            vec![
                3.9f32,
                -3.9,
                f32::NAN,
                f32::INFINITY,
                f32::NEG_INFINITY,
                1e10,
                -1e10,
                -0.5,
                16_777_216.0,
                2147483520.0,
                -2147483648.0,
                9.3e18,
            ],
        );
        let i32s = Tensor::from_vec(vec![5], vec![0i32, -1, i32::MAX, i32::MIN, 16_777_217]);
        let i64s = Tensor::from_vec(
            vec![6],
            vec![0i64, -1, i64::MAX, i64::MIN, (1 << 40) + 3, 0x1_2345_6789],
        );
        let to =
            |d: DType| build("Cast", 13, &[("to", AttrValue::Int(d.onnx_code() as i64))]).unwrap();
        for (x, d) in [
            (&f, DType::I32),
            (&f, DType::I64),
            (&i32s, DType::F32),
            (&i64s, DType::F32),
            (&i32s, DType::I64),
            (&i64s, DType::I32),
            (&i64s, DType::I64),
            (&f, DType::F32),
        ] {
            // Integer -> float must round exactly as the CPU does.
            gpu_matches_cpu(&*to(d), &[Some(x)], 0.0);
        }
    }

    #[test]
    fn gpu_bf16_casts_round_to_nearest_even_and_keep_nan() {
        // 1 + 2^-8 is halfway between two bf16 values: ties go to the even one (1.0); just
        // above the tie rounds up; the largest finite f32 rounds to infinity; NaN stays NaN.
        let f = Tensor::from_vec(
            vec![9],
            vec![
                1.0f32 + 1.0 / 256.0,
                1.0 + 1.0 / 256.0 + 1.0 / 65536.0,
                1.0 + 3.0 / 256.0,
                -2.5e-3,
                f32::MAX,
                f32::NAN,
                f32::NEG_INFINITY,
                0.0,
                -0.0,
            ],
        );
        let to =
            |d: DType| build("Cast", 13, &[("to", AttrValue::Int(d.onnx_code() as i64))]).unwrap();
        let b = run1(&*to(DType::BF16), &[&f]).unwrap();
        let bits: Vec<u16> = b.to_f64_vec().unwrap()[..4]
            .iter()
            .map(|&v| half::bf16::from_f64(v).to_bits())
            .collect();
        // By hand: 1.0 = 0x3f80; 1 + 2^-7 = 0x3f81; 1 + 2^-6 = 0x3f82.
        assert_eq!(&bits[..3], &[0x3f80, 0x3f81, 0x3f82]);
        gpu_matches_cpu(&*to(DType::BF16), &[Some(&f)], 0.0);
        gpu_matches_cpu(&*to(DType::F32), &[Some(&b)], 0.0);
    }

    /// Every low-precision type from f32 and f16 (edges, ties, both signs, every magnitude
    /// the formats reach and beyond), with and without saturation and in each e8m0 rounding,
    /// and every byte of each back to f32 and f16: the GPU gives the CPU's bits.
    #[test]
    fn gpu_low_precision_casts_match_the_cpu_bit_for_bit() {
        let mut x = vec![
            0.0f32,
            -0.0,
            f32::NAN,
            -f32::NAN,
            f32::INFINITY,
            f32::NEG_INFINITY,
            464.0,
            465.0,
            -240.0,
            57344.0,
            61440.0,
            6.0,
            5.0,
            -0.25,
            1e-7,
            f32::MAX,
            9.0,
            -9.7,
        ];
        let mut v = 3e-12f32;
        while v < 1e6 {
            x.extend([v, -v * 1.37, v * 1.0625]);
            v *= 1.9;
        }
        let f = Tensor::from_vec(vec![x.len()], x);
        let h = cast(&f, DType::F16);
        let low = DType::ALL.iter().copied().filter(|d| d.is_low_precision());
        for d in low {
            for (saturate, round) in [(1, "up"), (0, "down"), (1, "nearest"), (0, "nearest")] {
                let op = build(
                    "Cast",
                    24,
                    &[
                        ("to", AttrValue::Int(d.onnx_code() as i64)),
                        ("saturate", AttrValue::Int(saturate)),
                        ("round_mode", AttrValue::String(round.into())),
                    ],
                )
                .unwrap();
                assert!(
                    op.gpu(&[Some(&ValueType::of(&f))], &[ValueType::new(d, vec![1])])
                        .is_some()
                );
                gpu_matches_cpu(&*op, &[Some(&f)], 0.0);
                gpu_matches_cpu(&*op, &[Some(&h)], 0.0);
            }
            let bytes: Vec<u8> = (0..=255u8)
                .map(|b| match d.file_bits() {
                    8 => b,
                    bits => crate::lowp::wrap_int(DType::I8, i64::from(b)) & ((1 << bits) - 1),
                })
                .map(|b| match d {
                    DType::I4 | DType::U4 | DType::I2 | DType::U2 => {
                        crate::lowp::wrap_int(d, i64::from(b))
                    }
                    _ => b,
                })
                .collect();
            let t = Tensor::from_bytes(d, vec![256], Bytes::from(bytes)).unwrap();
            for to in [DType::F32, DType::F16] {
                gpu_matches_cpu(
                    &*build("Cast", 24, &[("to", AttrValue::Int(to.onnx_code() as i64))]).unwrap(),
                    &[Some(&t)],
                    0.0,
                );
            }
        }
    }
}
