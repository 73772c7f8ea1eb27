//! TensorProto -> Tensor: raw bytes (kept as a slice of the file, no copy), the typed fields
//! with ONNX's packing rules, and external data.

use std::path::Path;

use bytes::Bytes;

use super::LoadError;
use super::external::ExternalFiles;
use super::proto::TensorProto;
use super::proto::tensor_proto::DataLocation;
use crate::tensor::{DType, Element, Tensor};

/// Misaligned raw_data up to this many bytes is copied to aligned memory at load (see the
/// raw_data case below). Small, so that the copies of a large model placed on a GPU, which
/// stay in host memory, add little to its peak: the small tensors of ResNet-50 come to a few
/// MiB at most.
pub(crate) const ALIGN_COPY_MAX: usize = 128 << 10;

/// Converts one TensorProto. `model_dir` is the folder that external data paths are relative
/// to; without it a tensor stored externally is an error.
pub fn tensor_from_proto(t: &TensorProto, model_dir: Option<&Path>) -> Result<Tensor, LoadError> {
    let files = ExternalFiles::new(model_dir);
    convert_tensor(t, &t.name, &files)
}

/// ONNX's name for a `TensorProto.DataType` code, for messages about types vkml lacks.
pub(crate) fn onnx_type_name(code: i32) -> Option<&'static str> {
    Some(match code {
        0 => "undefined",
        1 => "float",
        2 => "uint8",
        3 => "int8",
        4 => "uint16",
        5 => "int16",
        6 => "int32",
        7 => "int64",
        8 => "string",
        9 => "bool",
        10 => "float16",
        11 => "double",
        12 => "uint32",
        13 => "uint64",
        14 => "complex64",
        15 => "complex128",
        16 => "bfloat16",
        17 => "float8e4m3fn",
        18 => "float8e4m3fnuz",
        19 => "float8e5m2",
        20 => "float8e5m2fnuz",
        21 => "uint4",
        22 => "int4",
        23 => "float4e2m1",
        24 => "float8e8m0",
        25 => "uint2",
        26 => "int2",
        _ => return None,
    })
}

/// The DType of a tensor's data_type code, or an error naming the tensor.
fn tensor_dtype(code: i32, label: &str) -> Result<DType, LoadError> {
    if let Some(d) = DType::from_onnx_code(code) {
        return Ok(d);
    }
    match onnx_type_name(code) {
        Some(name) => Err(LoadError::Unsupported(format!(
            "tensor '{label}' has element type {name}, which vkml does not support"
        ))),
        None => Err(LoadError::UnknownDType {
            tensor: label.to_string(),
            code,
        }),
    }
}

/// A tensor's element type, shape and size in bytes in memory, checked, without reading its
/// data (in the file the 4- and 2-bit types take less: [`file_bytes`]).
pub(crate) fn tensor_type(
    t: &TensorProto,
    label: &str,
) -> Result<(DType, Vec<usize>, usize), LoadError> {
    let bad = |message: String| LoadError::BadTensor {
        tensor: label.to_string(),
        message,
    };
    if t.segment.is_some() {
        return Err(LoadError::Unsupported(format!(
            "tensor '{label}' is split into segments, which vkml does not support"
        )));
    }
    let dtype = tensor_dtype(t.data_type, label)?;
    let mut shape = Vec::with_capacity(t.dims.len());
    for &d in &t.dims {
        let d = usize::try_from(d)
            .map_err(|_| bad(format!("negative dimension {d} in shape {:?}", t.dims)))?;
        shape.push(d);
    }
    let too_big = || bad(format!("shape {:?} is too large to address", t.dims));
    let numel = shape
        .iter()
        .try_fold(1usize, |acc, &d| acc.checked_mul(d))
        .ok_or_else(too_big)?;
    let nbytes = numel.checked_mul(dtype.size()).ok_or_else(too_big)?;
    Ok((dtype, shape, nbytes))
}

/// Bytes `numel` elements of `dtype` take in an ONNX file (the 4- and 2-bit types packed).
fn file_bytes(dtype: DType, numel: usize) -> usize {
    // tensor_type checked numel x size; bits are 8 x size at most, so saturating only
    // matters for a count no file can hold anyway.
    numel.saturating_mul(dtype.file_bits()).div_ceil(8)
}

/// A packed type's file bytes as one byte per element ([`crate::lowp`]).
fn unpacked(dtype: DType, data: Bytes, numel: usize) -> Result<Bytes, String> {
    if dtype.file_bits() >= 8 {
        return Ok(data);
    }
    crate::lowp::unpack(dtype, &data, numel)
        .map(Bytes::from)
        .ok_or_else(|| format!("{} bytes do not hold {numel} {dtype} values", data.len()))
}

/// `label` names the tensor in errors: its own name, or where it sits when it has none.
pub(crate) fn convert_tensor(
    t: &TensorProto,
    label: &str,
    files: &ExternalFiles,
) -> Result<Tensor, LoadError> {
    let bad = |message: String| LoadError::BadTensor {
        tensor: label.to_string(),
        message,
    };
    let (dtype, shape, _) = tensor_type(t, label)?;
    let numel = shape.iter().product::<usize>();
    if dtype == DType::String {
        // Strings live in string_data only (ONNX allows neither raw_data nor external data
        // for them).
        if t.string_data.len() != numel {
            return Err(bad(format!(
                "string {shape:?} needs {numel} values in string_data, found {}",
                t.string_data.len()
            )));
        }
        let text: Vec<&str> = t
            .string_data
            .iter()
            .map(|b| std::str::from_utf8(b))
            .collect::<Result<_, _>>()
            .map_err(|e| bad(format!("a string is not UTF-8: {e}")))?;
        return Ok(Tensor::from_strings(shape, &text));
    }
    let nbytes = file_bytes(dtype, numel);
    let what = || format!("{dtype} {shape:?} needs {nbytes} bytes");

    if t.data_location == DataLocation::External as i32 {
        let data = files.read(t, label, nbytes, &what())?;
        let data = unpacked(dtype, data, numel).map_err(bad)?;
        return Tensor::from_bytes(dtype, shape, data).map_err(|e| bad(e.to_string()));
    }
    if t.data_location != DataLocation::Default as i32 {
        return Err(bad(format!("unknown data_location {}", t.data_location)));
    }
    if !t.raw_data.is_empty() {
        if t.raw_data.len() != nbytes {
            return Err(bad(format!(
                "raw_data holds {} bytes, but {}",
                t.raw_data.len(),
                what()
            )));
        }
        // A slice of the decoded buffer: when that buffer is the file's mapping, no copy,
        // unless protobuf put a small tensor at an offset misaligned for its type (the MNIST
        // CNN's conv weights): then one aligned copy now, so that no reader needs one. Large
        // ones stay in the mapping, which the kernel can page out; the CPU kernels read those
        // through the tensor's own aligned copy (`Tensor::realign`, made when a plan is built).
        let mut data = t.raw_data.clone();
        if data.as_ptr().align_offset(dtype.size()) != 0 && data.len() <= ALIGN_COPY_MAX {
            data = crate::tensor::aligned_bytes(&data);
        }
        // vkml's booleans are exactly 0 or 1; other non-zero bytes mean true, as in numpy.
        if dtype == DType::Bool && data.iter().any(|&b| b > 1) {
            data = data.iter().map(|&b| u8::from(b != 0)).collect();
        }
        let data = unpacked(dtype, data, numel).map_err(bad)?;
        return Tensor::from_bytes(dtype, shape, data).map_err(|e| bad(e.to_string()));
    }

    let count = |field: &str, n: usize| -> Result<(), LoadError> {
        if n == numel {
            Ok(())
        } else {
            Err(bad(format!(
                "{dtype} {shape:?} needs {numel} values in {field}, found {n}"
            )))
        }
    };
    let ints = |field: &str| count(field, t.int32_data.len());
    let count_packed = |field: &str, n: usize, want: usize| -> Result<(), LoadError> {
        if n == want {
            Ok(())
        } else {
            Err(bad(format!(
                "{dtype} {shape:?} needs {want} entries in {field}, found {n}"
            )))
        }
    };
    let data: Bytes = match dtype {
        DType::F32 => {
            count("float_data", t.float_data.len())?;
            pod_bytes(&t.float_data)
        }
        DType::F64 => {
            count("double_data", t.double_data.len())?;
            pod_bytes(&t.double_data)
        }
        DType::I64 => {
            count("int64_data", t.int64_data.len())?;
            pod_bytes(&t.int64_data)
        }
        DType::U64 => {
            count("uint64_data", t.uint64_data.len())?;
            pod_bytes(&t.uint64_data)
        }
        // ONNX keeps uint32 in uint64_data, one value per entry.
        DType::U32 => {
            count("uint64_data", t.uint64_data.len())?;
            pod_bytes(&narrow::<u64, u32>(&t.uint64_data, "uint64_data", label)?)
        }
        DType::I32 => {
            ints("int32_data")?;
            pod_bytes(&t.int32_data)
        }
        DType::I16 => {
            ints("int32_data")?;
            pod_bytes(&narrow::<i32, i16>(&t.int32_data, "int32_data", label)?)
        }
        DType::I8 => {
            ints("int32_data")?;
            pod_bytes(&narrow::<i32, i8>(&t.int32_data, "int32_data", label)?)
        }
        DType::U16 => {
            ints("int32_data")?;
            pod_bytes(&narrow::<i32, u16>(&t.int32_data, "int32_data", label)?)
        }
        DType::U8 => {
            ints("int32_data")?;
            pod_bytes(&narrow::<i32, u8>(&t.int32_data, "int32_data", label)?)
        }
        // Booleans as 0/1 bytes; any non-zero entry is true, as numpy converts them.
        DType::Bool => {
            ints("int32_data")?;
            Bytes::from(
                t.int32_data
                    .iter()
                    .map(|&v| u8::from(v != 0))
                    .collect::<Vec<u8>>(),
            )
        }
        // float16 and bfloat16 keep their 16 bits in the low half of each int32 entry.
        DType::F16 | DType::BF16 => {
            ints("int32_data")?;
            let mut bits = Vec::with_capacity(numel);
            for (i, &v) in t.int32_data.iter().enumerate() {
                if !(-32768..=65535).contains(&v) {
                    return Err(bad(format!(
                        "int32_data[{i}] = {v} is not the bits of a 16-bit {dtype}"
                    )));
                }
                bits.push(v as u16);
            }
            pod_bytes(&bits)
        }
        // The low-precision types keep their bits in int32_data too, one byte of the file a
        // value: one element of the 8-bit ones, two or four of the packed ones.
        low => {
            let n = file_bytes(low, numel);
            count_packed("int32_data", t.int32_data.len(), n)?;
            let bytes = narrow::<i32, u8>(&t.int32_data, "int32_data", label)?;
            unpacked(low, Bytes::from(bytes), numel).map_err(bad)?
        }
    };
    Tensor::from_bytes(dtype, shape, data).map_err(|e| bad(e.to_string()))
}

fn pod_bytes<T: Element>(values: &[T]) -> Bytes {
    Bytes::copy_from_slice(bytemuck::cast_slice::<T, u8>(values))
}

/// Typed entries to the tensor's narrower element type, refusing values that do not fit.
fn narrow<S, D>(values: &[S], field: &str, label: &str) -> Result<Vec<D>, LoadError>
where
    S: Copy + std::fmt::Display,
    D: TryFrom<S> + Element,
{
    values
        .iter()
        .enumerate()
        .map(|(i, &v)| {
            D::try_from(v).map_err(|_| LoadError::BadTensor {
                tensor: label.to_string(),
                message: format!("{field}[{i}] = {v} does not fit in {}", D::DTYPE),
            })
        })
        .collect()
}
