//! numpy arrays in and out: an input array becomes a [`Tensor`] and an output tensor a new
//! array of its dtype. An input's values are copied once (read as one slice where the array
//! is C-contiguous, element by element in C order otherwise), except that a C-contiguous,
//! aligned array of a local run's feeds is lent to the runtime for the call ([`Lend::Share`]).

use numpy::{
    PyArray1, PyArrayDescrMethods, PyArrayDyn, PyArrayMethods, PyUntypedArray,
    PyUntypedArrayMethods,
};
use pyo3::prelude::*;
use pyo3::types::PyDict;
use vkml::{DType, Tensor};

use crate::errors::InvalidInput;

/// How an input array's values reach the runtime.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Lend {
    /// Copied into memory of the runtime's own: for values kept past the call (an io
    /// binding's inputs, a cluster connection's send buffers, which QUIC holds until the
    /// peer acknowledges them).
    Copy,
    /// A C-contiguous array aligned for its type is read in place: the tensor's bytes are
    /// the array's memory, holding a reference to it (crate::lent), for a local run, which lets
    /// go of its clones before it returns. The array must not be written while the run reads
    /// it (onnxruntime asks the same of its inputs).
    Share,
}

/// A run's inputs, converted from (name, array) pairs while the GIL is held.
pub struct Feeds(Vec<(String, Tensor)>);

impl Feeds {
    /// From a dict of name -> value or a sequence of (name, value) pairs; a value that is not
    /// a numpy array goes through `numpy.asarray` first (a list, a scalar).
    pub fn new(feeds: &Bound<'_, PyAny>, lend: Lend) -> PyResult<Feeds> {
        let pairs: Vec<(String, Bound<'_, PyAny>)> = match feeds.cast::<PyDict>() {
            Ok(dict) => dict
                .iter()
                .map(|(k, v)| Ok((k.extract()?, v)))
                .collect::<PyResult<_>>()?,
            Err(_) => feeds.extract().map_err(|_| {
                InvalidInput::new_err("the inputs are given as a dict of input name -> numpy array")
            })?,
        };
        pairs
            .into_iter()
            .map(|(name, value)| {
                let value = if value.cast::<PyUntypedArray>().is_ok() {
                    value
                } else {
                    asarray(&value)?
                };
                let t = to_tensor(&value, lend, || format!("input '{name}'"))?;
                Ok((name, t))
            })
            .collect::<PyResult<_>>()
            .map(Feeds)
    }

    /// As the runtime takes them (a Tensor's clones share its bytes).
    pub fn inputs(&self) -> Vec<(&str, Tensor)> {
        self.0
            .iter()
            .map(|(n, t)| (n.as_str(), t.clone()))
            .collect()
    }
}

/// `numpy.asarray(value)`.
fn asarray<'py>(value: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
    value
        .py()
        .import("numpy")?
        .getattr("asarray")?
        .call1((value,))
}

/// The tensor holding `array`'s values, lent or copied as `lend` allows; `what` names it in a
/// message ("input 'x'").
pub fn to_tensor(
    array: &Bound<'_, PyAny>,
    lend: Lend,
    what: impl Fn() -> String,
) -> PyResult<Tensor> {
    let py = array.py();
    let untyped = array.cast::<PyUntypedArray>().map_err(|_| {
        InvalidInput::new_err(format!(
            "{} is a {}, not a numpy array",
            what(),
            array
                .get_type()
                .name()
                .map_or("?".into(), |n| n.to_string())
        ))
    })?;
    if !untyped.is_aligned() {
        // Elements off their alignment cannot be read in place by Rust: numpy's copy aligns
        // them (its ALIGNED flag; our own lending checks its type's alignment too).
        let copy = array.call_method0("copy")?;
        return to_tensor(&copy, Lend::Copy, what);
    }
    let descr = untyped.dtype();
    macro_rules! typed {
        ($($t:ty),*) => {
            $(if descr.is_equiv_to(&numpy::dtype::<$t>(py)) {
                let a = array.cast::<PyArrayDyn<$t>>()?.readonly();
                let shape = a.shape().to_vec();
                if lend == Lend::Share {
                    if let Some(bytes) = crate::lent::lend(&a) {
                        let dtype = <$t as vkml::tensor::Element>::DTYPE;
                        return Tensor::from_bytes(dtype, shape, bytes)
                            .map_err(|e| InvalidInput::new_err(format!("{}: {e}", what())));
                    }
                }
                // as_slice also takes Fortran order, which is not the tensor's.
                let values: Vec<$t> = match a.as_slice() {
                    Ok(s) if a.is_c_contiguous() => s.to_vec(),
                    _ => a.as_array().iter().copied().collect(),
                };
                return Ok(Tensor::from_vec(shape, values));
            })*
        };
    }
    typed!(f32, f64, half::f16, i8, i16, i32, i64, u8, u16, u32, u64);
    if descr.is_equiv_to(&numpy::dtype::<bool>(py)) {
        let a = array.cast::<PyArrayDyn<bool>>()?.readonly();
        let shape = a.shape().to_vec();
        return Ok(Tensor::from_bools(
            shape,
            a.as_array().iter().copied().collect(),
        ));
    }
    Err(InvalidInput::new_err(format!(
        "{} has dtype {descr}, which VKML does not take (float16/32/64, int8-64, uint8-64 \
         or bool)",
        what()
    )))
}

/// A new numpy array with `t`'s values; bfloat16, which numpy lacks, comes back as float32.
pub fn to_numpy<'py>(py: Python<'py>, t: &Tensor) -> PyResult<Bound<'py, PyAny>> {
    fn out<'py, T>(py: Python<'py>, t: &Tensor) -> PyResult<Bound<'py, PyAny>>
    where
        T: vkml::tensor::Element + numpy::Element,
    {
        let values = t
            .view::<T>()
            .map_err(|e| InvalidInput::new_err(e.to_string()))?;
        let flat = PyArray1::<T>::from_slice(py, &values);
        Ok(flat.reshape(t.shape().to_vec())?.into_any())
    }
    match t.dtype() {
        DType::F32 => out::<f32>(py, t),
        DType::F64 => out::<f64>(py, t),
        DType::F16 => out::<half::f16>(py, t),
        DType::I8 => out::<i8>(py, t),
        DType::I16 => out::<i16>(py, t),
        DType::I32 => out::<i32>(py, t),
        DType::I64 => out::<i64>(py, t),
        DType::U8 => out::<u8>(py, t),
        DType::U16 => out::<u16>(py, t),
        DType::U32 => out::<u32>(py, t),
        DType::U64 => out::<u64>(py, t),
        DType::Bool => {
            let values = t
                .view_bool()
                .map_err(|e| InvalidInput::new_err(e.to_string()))?;
            let flat = PyArray1::<bool>::from_vec(py, values);
            Ok(flat.reshape(t.shape().to_vec())?.into_any())
        }
        DType::BF16 => {
            let values = t
                .view::<half::bf16>()
                .map_err(|e| InvalidInput::new_err(e.to_string()))?;
            let wide: Vec<f32> = values.iter().map(|v| v.to_f32()).collect();
            let flat = PyArray1::<f32>::from_vec(py, wide);
            Ok(flat.reshape(t.shape().to_vec())?.into_any())
        }
        // numpy lacks the low-precision types too: the narrow integers come back as the int8
        // or uint8 they are held in, the narrow floats as float32 (exact).
        DType::I4 | DType::I2 => {
            let values: Vec<i8> = t.bytes().iter().map(|&b| b as i8).collect();
            let flat = PyArray1::<i8>::from_vec(py, values);
            Ok(flat.reshape(t.shape().to_vec())?.into_any())
        }
        DType::U4 | DType::U2 => {
            let flat = PyArray1::<u8>::from_slice(py, t.bytes());
            Ok(flat.reshape(t.shape().to_vec())?.into_any())
        }
        _ => {
            let flat = PyArray1::<f32>::from_vec(py, vkml::lowp::to_f32_vec(t));
            Ok(flat.reshape(t.shape().to_vec())?.into_any())
        }
    }
}

/// onnxruntime's name of a tensor type: "tensor(float)", "tensor(int64)", ...
pub fn type_name(dtype: Option<DType>) -> String {
    let element = match dtype {
        None => "undefined",
        Some(DType::F32) => "float",
        Some(DType::F64) => "double",
        Some(DType::F16) => "float16",
        Some(DType::BF16) => "bfloat16",
        Some(DType::I8) => "int8",
        Some(DType::I16) => "int16",
        Some(DType::I32) => "int32",
        Some(DType::I64) => "int64",
        Some(DType::U8) => "uint8",
        Some(DType::U16) => "uint16",
        Some(DType::U32) => "uint32",
        Some(DType::U64) => "uint64",
        Some(DType::Bool) => "bool",
        Some(low) => low.onnx_name(),
    };
    format!("tensor({element})")
}
