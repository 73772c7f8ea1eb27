//! Host tensors: a dtype, a shape and bytes that may live inside the model's memory mapping.

use std::borrow::Cow;
use std::fmt;
use std::sync::{Arc, OnceLock};

use bytemuck::Pod;
use bytes::Bytes;

/// Element types, numbered as ONNX's `TensorProto.DataType` so conversion is a lookup.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DType {
    F32,
    U8,
    I8,
    U16,
    I16,
    I32,
    I64,
    Bool,
    F16,
    F64,
    U32,
    U64,
    BF16,
    /// The low-precision types: one byte per element in memory, the value in its low bits
    /// (int4 and int2 sign-extended, so an int4 byte reads as the same int8); packed two or
    /// four to a byte only in ONNX files and on the way out of them ([`crate::lowp`]).
    F8E4M3FN,
    F8E4M3FNUZ,
    F8E5M2,
    F8E5M2FNUZ,
    U4,
    I4,
    F4E2M1,
    F8E8M0,
    U2,
    I2,
    /// UTF-8 text, one string per element: the bytes are the end offset of each string (u64,
    /// little-endian) followed by the text ([`Tensor::from_strings`]). Only the string ops
    /// take them ([`crate::Op::strings`]); they never reach a GPU.
    String,
}

impl DType {
    pub const ALL: [DType; 24] = [
        DType::F32,
        DType::U8,
        DType::I8,
        DType::U16,
        DType::I16,
        DType::I32,
        DType::I64,
        DType::Bool,
        DType::F16,
        DType::F64,
        DType::U32,
        DType::U64,
        DType::BF16,
        DType::F8E4M3FN,
        DType::F8E4M3FNUZ,
        DType::F8E5M2,
        DType::F8E5M2FNUZ,
        DType::U4,
        DType::I4,
        DType::F4E2M1,
        DType::F8E8M0,
        DType::U2,
        DType::I2,
        DType::String,
    ];

    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            DType::U8 | DType::I8 | DType::Bool => 1,
            DType::F8E4M3FN
            | DType::F8E4M3FNUZ
            | DType::F8E5M2
            | DType::F8E5M2FNUZ
            | DType::U4
            | DType::I4
            | DType::F4E2M1
            | DType::F8E8M0
            | DType::U2
            | DType::I2 => 1,
            DType::U16 | DType::I16 | DType::F16 | DType::BF16 => 2,
            DType::F32 | DType::I32 | DType::U32 => 4,
            DType::F64 | DType::I64 | DType::U64 => 8,
            // The offset of each string; its text comes after them all.
            DType::String => 8,
        }
    }

    /// ONNX `TensorProto.DataType` code.
    pub fn onnx_code(self) -> i32 {
        match self {
            DType::F32 => 1,
            DType::U8 => 2,
            DType::I8 => 3,
            DType::U16 => 4,
            DType::I16 => 5,
            DType::I32 => 6,
            DType::I64 => 7,
            DType::Bool => 9,
            DType::F16 => 10,
            DType::F64 => 11,
            DType::U32 => 12,
            DType::U64 => 13,
            DType::BF16 => 16,
            DType::F8E4M3FN => 17,
            DType::F8E4M3FNUZ => 18,
            DType::F8E5M2 => 19,
            DType::F8E5M2FNUZ => 20,
            DType::U4 => 21,
            DType::I4 => 22,
            DType::F4E2M1 => 23,
            DType::F8E8M0 => 24,
            DType::U2 => 25,
            DType::I2 => 26,
            DType::String => 8,
        }
    }

    pub fn from_onnx_code(code: i32) -> Option<DType> {
        DType::ALL.into_iter().find(|d| d.onnx_code() == code)
    }

    /// The name ONNX uses in its operator documentation (`tensor(float)` -> "float").
    pub fn onnx_name(self) -> &'static str {
        match self {
            DType::F32 => "float",
            DType::U8 => "uint8",
            DType::I8 => "int8",
            DType::U16 => "uint16",
            DType::I16 => "int16",
            DType::I32 => "int32",
            DType::I64 => "int64",
            DType::Bool => "bool",
            DType::F16 => "float16",
            DType::F64 => "double",
            DType::U32 => "uint32",
            DType::U64 => "uint64",
            DType::BF16 => "bfloat16",
            DType::F8E4M3FN => "float8e4m3fn",
            DType::F8E4M3FNUZ => "float8e4m3fnuz",
            DType::F8E5M2 => "float8e5m2",
            DType::F8E5M2FNUZ => "float8e5m2fnuz",
            DType::U4 => "uint4",
            DType::I4 => "int4",
            DType::F4E2M1 => "float4e2m1",
            DType::F8E8M0 => "float8e8m0",
            DType::U2 => "uint2",
            DType::I2 => "int2",
            DType::String => "string",
        }
    }

    /// numpy's dtype descriptor for .npy headers (little-endian).
    pub fn npy_descr(self) -> &'static str {
        match self {
            DType::F32 => "<f4",
            DType::U8 => "|u1",
            DType::I8 => "|i1",
            DType::U16 => "<u2",
            DType::I16 => "<i2",
            DType::I32 => "<i4",
            DType::I64 => "<i8",
            DType::Bool => "|b1",
            DType::F16 => "<f2",
            DType::F64 => "<f8",
            DType::U32 => "<u4",
            DType::U64 => "<u8",
            // numpy has no bfloat16; ml_dtypes writes it as raw 2-byte void.
            DType::BF16 => "<V2",
            // The narrow integers as the int8 / uint8 they are held in; the narrow floats as
            // ml_dtypes saves them, one raw byte.
            DType::I4 | DType::I2 => "|i1",
            DType::U4 | DType::U2 => "|u1",
            DType::F8E4M3FN
            | DType::F8E4M3FNUZ
            | DType::F8E5M2
            | DType::F8E5M2FNUZ
            | DType::F4E2M1
            | DType::F8E8M0 => "|V1",
            // numpy's strings are objects, which .npy files hold as pickles: not written.
            DType::String => "|O",
        }
    }

    /// Bits an element takes in an ONNX file: 4 and 2 for the packed types, else 8 x size.
    pub fn file_bits(self) -> usize {
        match self {
            DType::U4 | DType::I4 | DType::F4E2M1 => 4,
            DType::U2 | DType::I2 => 2,
            other => 8 * other.size(),
        }
    }

    /// The low-precision types ([`crate::lowp`]), which ops compute only after converting.
    pub fn is_low_precision(self) -> bool {
        matches!(
            self,
            DType::F8E4M3FN
                | DType::F8E4M3FNUZ
                | DType::F8E5M2
                | DType::F8E5M2FNUZ
                | DType::U4
                | DType::I4
                | DType::F4E2M1
                | DType::F8E8M0
                | DType::U2
                | DType::I2
        )
    }

    pub fn is_float(self) -> bool {
        matches!(self, DType::F32 | DType::F16 | DType::BF16 | DType::F64)
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.onnx_name())
    }
}

/// Rust element types that map onto a [`DType`].
pub trait Element: Pod + Send + Sync + 'static {
    const DTYPE: DType;
}

macro_rules! element {
    ($($t:ty => $d:ident),* $(,)?) => {
        $(impl Element for $t { const DTYPE: DType = DType::$d; })*
    };
}
element!(f32 => F32, f64 => F64, i8 => I8, u8 => U8, i16 => I16, u16 => U16, i32 => I32,
    i64 => I64, u32 => U32, u64 => U64, half::f16 => F16, half::bf16 => BF16);

/// Number of elements of a shape (1 for a scalar), saturating at `usize::MAX` rather than
/// wrapping, so that a shape too large for memory never passes for a small one: every value's
/// size is checked ([`crate::size`]) before anything is allocated for it.
pub fn numel(shape: &[usize]) -> usize {
    shape
        .iter()
        .try_fold(1usize, |p, &d| p.checked_mul(d))
        .unwrap_or(if shape.contains(&0) { 0 } else { usize::MAX })
}

/// Row-major strides, in elements (saturating, as [`numel`]).
pub fn strides(shape: &[usize]) -> Vec<usize> {
    let mut s = vec![1usize; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1].saturating_mul(shape[i + 1]);
    }
    s
}

/// A dense, row-major host tensor. The bytes are shared and immutable: cloning is cheap, and an
/// initializer's bytes point straight into the model file's memory mapping.
#[derive(Clone, PartialEq)]
pub struct Tensor {
    dtype: DType,
    shape: Vec<usize>,
    data: Bytes,
    aligned: Realigned,
}

/// For bytes misaligned for their type (an initializer at an odd offset of the model file,
/// which is mapped, or copied whole): an aligned copy, made by [`Tensor::realign`] when a plan
/// puts the tensor's readers on the CPU, or else by the first [`Tensor::view`], and shared by
/// every clone, so that a CPU kernel does not copy its weights on every run.
/// ResNet-50's misaligned weights, about three quarters of its 98 MB, were copied (and their
/// pages faulted in) on each run: 40% of one of its 3x3 convolutions' time on one core.
/// GPU sessions, which upload the bytes as they are, never make it.
#[derive(Clone, Default)]
struct Realigned(Option<Arc<OnceLock<Bytes>>>);

impl Realigned {
    fn for_bytes(dtype: DType, data: &Bytes) -> Realigned {
        let misaligned =
            dtype != DType::String && data.as_ptr().align_offset(dtype.size().max(1)) != 0;
        Realigned(misaligned.then(|| Arc::new(OnceLock::new())))
    }
}

impl PartialEq for Realigned {
    /// A cached copy is no part of a tensor's value.
    fn eq(&self, _: &Realigned) -> bool {
        true
    }
}

/// Keeps a typed vector alive as the owner of a [`Bytes`] view of it, so kernels can hand over
/// their output without a copy.
struct PodVec<T: Pod>(Vec<T>);

impl<T: Pod> AsRef<[u8]> for PodVec<T> {
    fn as_ref(&self) -> &[u8] {
        bytemuck::cast_slice(&self.0)
    }
}

/// `data` copied into storage aligned for every element type (8 bytes), for bytes that sit
/// at an arbitrary offset of a larger buffer, which [`Tensor::view`] would otherwise copy on
/// every call.
pub fn aligned_bytes(data: &[u8]) -> Bytes {
    let mut words = vec![0u64; data.len().div_ceil(8)];
    bytemuck::cast_slice_mut::<u64, u8>(&mut words)[..data.len()].copy_from_slice(data);
    Bytes::from_owner(PodVec(words)).slice(..data.len())
}

impl Tensor {
    /// Wraps raw little-endian bytes. Fails when the length does not match the shape.
    pub fn from_bytes(dtype: DType, shape: Vec<usize>, data: Bytes) -> Result<Tensor, TensorError> {
        if dtype == DType::String {
            let n = numel(&shape);
            return match Tensor::check_strings(n, &data) {
                Ok(()) => Ok(Tensor {
                    dtype,
                    shape,
                    data,
                    aligned: Realigned::default(),
                }),
                Err(reason) => Err(TensorError::BadStrings { shape, reason }),
            };
        }
        let Ok(want) = crate::size::bytes(dtype, &shape) else {
            return Err(TensorError::TooLarge { dtype, shape });
        };
        let want = want as usize;
        if data.len() != want {
            return Err(TensorError::SizeMismatch {
                dtype,
                shape,
                expected: want,
                actual: data.len(),
            });
        }
        let aligned = Realigned::for_bytes(dtype, &data);
        Ok(Tensor {
            dtype,
            shape,
            data,
            aligned,
        })
    }

    pub fn from_vec<T: Element>(shape: Vec<usize>, values: Vec<T>) -> Tensor {
        assert_eq!(
            numel(&shape),
            values.len(),
            "Tensor::from_vec: shape {shape:?} does not hold {} values",
            values.len()
        );
        Tensor {
            dtype: T::DTYPE,
            shape,
            data: Bytes::from_owner(PodVec(values)),
            aligned: Realigned::default(),
        }
    }

    /// Booleans are stored one byte each, 0 or 1, as ONNX does.
    pub fn from_bools(shape: Vec<usize>, values: Vec<bool>) -> Tensor {
        let bytes: Vec<u8> = values.into_iter().map(u8::from).collect();
        assert_eq!(numel(&shape), bytes.len());
        Tensor {
            dtype: DType::Bool,
            shape,
            data: Bytes::from(bytes),
            aligned: Realigned::default(),
        }
    }

    /// A tensor of strings, laid out as [`DType::String`] says.
    pub fn from_strings<S: AsRef<str>>(shape: Vec<usize>, values: &[S]) -> Tensor {
        assert_eq!(
            numel(&shape),
            values.len(),
            "Tensor::from_strings: shape {shape:?}"
        );
        let text: usize = values.iter().map(|v| v.as_ref().len()).sum();
        let mut data = Vec::with_capacity(8 * values.len() + text);
        let mut end = 0u64;
        for v in values {
            end += v.as_ref().len() as u64;
            data.extend_from_slice(&end.to_le_bytes());
        }
        for v in values {
            data.extend_from_slice(v.as_ref().as_bytes());
        }
        Tensor {
            dtype: DType::String,
            shape,
            data: Bytes::from(data),
            aligned: Realigned::default(),
        }
    }

    /// The strings of a string tensor, in row-major order.
    pub fn strings(&self) -> Result<Vec<&str>, TensorError> {
        if self.dtype != DType::String {
            return Err(TensorError::WrongDType {
                expected: DType::String,
                actual: self.dtype,
            });
        }
        let n = numel(&self.shape);
        let (table, text) = self.data.split_at(8 * n);
        let mut start = 0usize;
        let mut out = Vec::with_capacity(n);
        for e in table.chunks_exact(8) {
            let end = u64::from_le_bytes(e.try_into().expect("8 bytes")) as usize;
            // from_bytes checked the offsets and the text: a slice of valid UTF-8 at
            // character boundaries.
            out.push(std::str::from_utf8(&text[start..end]).expect("checked when made"));
            start = end;
        }
        Ok(out)
    }

    /// Checks bytes laid out as [`DType::String`] says, for `n` strings.
    fn check_strings(n: usize, data: &[u8]) -> Result<(), String> {
        let Some(table) = n.checked_mul(8).filter(|&t| t <= data.len()) else {
            return Err(format!(
                "{} bytes cannot hold {n} string offsets",
                data.len()
            ));
        };
        let text = &data[table..];
        let mut start = 0usize;
        for e in data[..table].chunks_exact(8) {
            let end = u64::from_le_bytes(e.try_into().expect("8 bytes")) as usize;
            if end < start || end > text.len() {
                return Err(format!(
                    "string offset {end} is out of order or past the text"
                ));
            }
            std::str::from_utf8(&text[start..end]).map_err(|e| format!("a string: {e}"))?;
            start = end;
        }
        if start != text.len() {
            return Err("text follows the last string".into());
        }
        Ok(())
    }

    pub fn scalar<T: Element>(value: T) -> Tensor {
        Tensor::from_vec(vec![], vec![value])
    }

    /// A tensor of zeros.
    pub fn zeros(dtype: DType, shape: Vec<usize>) -> Tensor {
        let n = numel(&shape).saturating_mul(dtype.size());
        let data = Bytes::from(vec![0u8; n]);
        Tensor {
            dtype,
            aligned: Realigned::for_bytes(dtype, &data),
            shape,
            data,
        }
    }

    pub fn dtype(&self) -> DType {
        self.dtype
    }

    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    pub fn rank(&self) -> usize {
        self.shape.len()
    }

    pub fn numel(&self) -> usize {
        numel(&self.shape)
    }

    pub fn bytes(&self) -> &Bytes {
        &self.data
    }

    /// The same values in bytes of its own, for a value kept past the call that gave it: a
    /// caller may lend bytes only for a call's duration (the Python package's large numpy
    /// inputs are the array's own memory, which Python code may write to afterwards).
    pub fn unshared(&self) -> Tensor {
        Tensor {
            dtype: self.dtype,
            shape: self.shape.clone(),
            data: aligned_bytes(&self.data),
            aligned: Realigned::default(),
        }
    }

    /// Same bytes, another shape with the same element count (Reshape and friends).
    pub fn reshaped(&self, shape: Vec<usize>) -> Result<Tensor, TensorError> {
        let mut t = Tensor::from_bytes(self.dtype, shape, self.data.clone())?;
        // The same bytes: the same aligned copy, so a reshaped weight is not copied per run.
        t.aligned = self.aligned.clone();
        Ok(t)
    }

    /// Makes now the aligned copy that [`Tensor::view`] would make on its first call (a
    /// session's CPU weights, before their first run). True when this tensor has such a
    /// copy: its views no longer read the original bytes.
    pub fn realign(&self) -> bool {
        match &self.aligned.0 {
            Some(copy) => {
                copy.get_or_init(|| aligned_bytes(&self.data));
                true
            }
            None => false,
        }
    }

    /// The elements as `T`, borrowed when the bytes are aligned for `T`, else from the
    /// tensor's aligned copy (an initializer inside the model file may sit at any offset; see
    /// `Realigned`), made on the first call.
    pub fn view<T: Element>(&self) -> Result<Cow<'_, [T]>, TensorError> {
        if T::DTYPE != self.dtype {
            return Err(TensorError::WrongDType {
                expected: T::DTYPE,
                actual: self.dtype,
            });
        }
        if let Ok(s) = bytemuck::try_cast_slice::<u8, T>(&self.data) {
            return Ok(Cow::Borrowed(s));
        }
        let copy = self
            .aligned
            .0
            .as_ref()
            .map(|c| c.get_or_init(|| aligned_bytes(&self.data)));
        Ok(match copy.map(|c| bytemuck::try_cast_slice::<u8, T>(c)) {
            Some(Ok(s)) => Cow::Borrowed(s),
            _ => Cow::Owned(bytemuck::pod_collect_to_vec(&self.data)),
        })
    }

    /// The elements as bools (any non-zero byte is true).
    pub fn view_bool(&self) -> Result<Vec<bool>, TensorError> {
        if self.dtype != DType::Bool {
            return Err(TensorError::WrongDType {
                expected: DType::Bool,
                actual: self.dtype,
            });
        }
        Ok(self.data.iter().map(|&b| b != 0).collect())
    }

    /// Integer elements widened to i64, for shape and index arithmetic.
    pub fn to_i64_vec(&self) -> Result<Vec<i64>, TensorError> {
        Ok(match self.dtype {
            DType::I64 => self.view::<i64>()?.into_owned(),
            DType::I32 => self.view::<i32>()?.iter().map(|&v| v as i64).collect(),
            DType::I16 => self.view::<i16>()?.iter().map(|&v| v as i64).collect(),
            DType::I8 => self.view::<i8>()?.iter().map(|&v| v as i64).collect(),
            DType::U8 | DType::Bool => self.data.iter().map(|&v| v as i64).collect(),
            DType::U16 => self.view::<u16>()?.iter().map(|&v| v as i64).collect(),
            DType::U32 => self.view::<u32>()?.iter().map(|&v| v as i64).collect(),
            DType::U64 => self.view::<u64>()?.iter().map(|&v| v as i64).collect(),
            DType::I4 | DType::I2 => self.data.iter().map(|&v| v as i8 as i64).collect(),
            DType::U4 | DType::U2 => self.data.iter().map(|&v| v as i64).collect(),
            other => {
                return Err(TensorError::WrongDType {
                    expected: DType::I64,
                    actual: other,
                });
            }
        })
    }

    /// Elements converted to f64, for comparisons in tests and tools.
    pub fn to_f64_vec(&self) -> Result<Vec<f64>, TensorError> {
        Ok(match self.dtype {
            DType::F32 => self.view::<f32>()?.iter().map(|&v| v as f64).collect(),
            DType::F64 => self.view::<f64>()?.into_owned(),
            DType::F16 => self
                .view::<half::f16>()?
                .iter()
                .map(|v| v.to_f64())
                .collect(),
            DType::BF16 => self
                .view::<half::bf16>()?
                .iter()
                .map(|v| v.to_f64())
                .collect(),
            d if crate::lowp::Float::of(d).is_some() => crate::lowp::to_f32_vec(self)
                .into_iter()
                .map(f64::from)
                .collect(),
            _ => self.to_i64_vec()?.into_iter().map(|v| v as f64).collect(),
        })
    }
}

impl fmt::Debug for Tensor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Tensor<{}>{:?}", self.dtype, self.shape)
    }
}

#[derive(Debug, thiserror::Error, Clone, PartialEq)]
pub enum TensorError {
    #[error("tensor of {dtype} {shape:?} needs {expected} bytes but has {actual}")]
    SizeMismatch {
        dtype: DType,
        shape: Vec<usize>,
        expected: usize,
        actual: usize,
    },
    #[error("expected a tensor of {expected}, got {actual}")]
    WrongDType { expected: DType, actual: DType },
    #[error(
        "a tensor of {dtype} {shape:?} has more elements than vkml handles (at most {})",
        crate::size::Size::MAX
    )]
    TooLarge { dtype: DType, shape: Vec<usize> },
    #[error("a string tensor {shape:?} is malformed: {reason}")]
    BadStrings { shape: Vec<usize>, reason: String },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unaligned_bytes_are_copied_not_misread() {
        let raw: Vec<u8> = (0..9).collect();
        let b = Bytes::from(raw).slice(1..9);
        let t = Tensor::from_bytes(DType::F32, vec![2], b.clone()).unwrap();
        let v = t.view::<f32>().unwrap();
        assert_eq!(bytemuck::cast_slice::<f32, u8>(&v), &b[..]);
    }

    #[test]
    fn unaligned_bytes_are_copied_once_for_the_tensor_its_clones_and_reshapes() {
        let raw: Vec<u8> = (0..17).collect();
        let b = Bytes::from(raw).slice(1..17);
        let t = Tensor::from_bytes(DType::F32, vec![4], b.clone()).unwrap();
        let ptr = |v: Cow<'_, [f32]>| match v {
            Cow::Borrowed(s) => s.as_ptr(),
            Cow::Owned(_) => panic!("viewed through a fresh copy"),
        };
        let first = ptr(t.view::<f32>().unwrap());
        assert_eq!(ptr(t.view::<f32>().unwrap()), first);
        assert_eq!(ptr(t.clone().view::<f32>().unwrap()), first);
        let r = t.reshaped(vec![2, 2]).unwrap();
        assert_eq!(ptr(r.view::<f32>().unwrap()), first);
        assert!(t.realign() && r.realign());
        assert_eq!(ptr(t.view::<f32>().unwrap()), first);
        assert!(!Tensor::from_vec(vec![2], vec![1.0f32, 2.0]).realign());
        assert_eq!(
            bytemuck::cast_slice::<f32, u8>(&r.view::<f32>().unwrap()),
            &b[..]
        );
        // The copy is no part of the value: a tensor equals one never viewed.
        assert_eq!(t, Tensor::from_bytes(DType::F32, vec![4], b).unwrap());
    }

    #[test]
    fn an_unshared_tensor_has_the_values_in_bytes_of_its_own() {
        let t = Tensor::from_vec(vec![2, 2], vec![1i64, -2, 3, i64::MAX]);
        let u = t.unshared();
        assert_eq!(u, t);
        assert_ne!(u.bytes().as_ptr(), t.bytes().as_ptr());
        assert!(matches!(u.view::<i64>().unwrap(), Cow::Borrowed(_)));
    }

    #[test]
    fn aligned_copies_keep_the_bytes_and_borrow_as_any_type() {
        for len in [0, 1, 7, 8, 13, 64] {
            let raw: Vec<u8> = (0..len as u8 + 3).collect();
            let odd = Bytes::from(raw).slice(3..);
            let b = aligned_bytes(&odd);
            assert_eq!(b, odd);
            assert_eq!(b.as_ptr().align_offset(8), 0);
            if len % 8 == 0 {
                let t = Tensor::from_bytes(DType::F64, vec![len / 8], b).unwrap();
                assert!(matches!(t.view::<f64>().unwrap(), Cow::Borrowed(_)));
            }
        }
    }

    #[test]
    fn wrong_length_is_an_error() {
        let e = Tensor::from_bytes(DType::F32, vec![3], Bytes::from(vec![0u8; 8])).unwrap_err();
        assert!(matches!(
            e,
            TensorError::SizeMismatch {
                expected: 12,
                actual: 8,
                ..
            }
        ));
    }

    #[test]
    fn strides_are_row_major() {
        assert_eq!(strides(&[2, 3, 4]), vec![12, 4, 1]);
        assert_eq!(strides(&[]), Vec::<usize>::new());
    }
}
