//! HannWindow, HammingWindow and BlackmanWindow (opset 17): cosine sums
//! a0 - a1 cos(2 pi n / M) + a2 cos(4 pi n / M) for n in 0..size, M = size when `periodic`
//! (the default), size - 1 when symmetric. Computed in f64 and converted once to
//! `output_datatype` (float by default; integer types truncate, as Cast does). A symmetric
//! window of one sample, where the formula divides by zero, is [1] (torch's and scipy's
//! value). Folded while planning: see the module above.

use super::int_scalar;
use crate::size::Size;
use crate::tensor::{DType, Tensor};
use crate::util::{const_input, req};
use crate::{InferInput, NodeSpec, Op, OpError, Registry, ValueType};

pub fn register(r: &mut Registry) {
    r.add("HannWindow", build_hann);
    r.add("HammingWindow", build_hamming);
    r.add("BlackmanWindow", build_blackman);
}

#[derive(Debug)]
struct CosineWindow {
    name: &'static str,
    /// a0, a1, a2.
    coefficients: [f64; 3],
    periodic: bool,
    dtype: DType,
}

fn build_hann(spec: &NodeSpec<'_>) -> Result<Box<dyn Op>, OpError> {
    build(spec, "HannWindow", [0.5, 0.5, 0.0])
}

fn build_hamming(spec: &NodeSpec<'_>) -> Result<Box<dyn Op>, OpError> {
    // ONNX's alpha = 25/46 (the exact zero of the first side lobe), not the rounded 0.54.
    build(spec, "HammingWindow", [25.0 / 46.0, 21.0 / 46.0, 0.0])
}

fn build_blackman(spec: &NodeSpec<'_>) -> Result<Box<dyn Op>, OpError> {
    build(spec, "BlackmanWindow", [0.42, 0.5, 0.08])
}

fn build(
    spec: &NodeSpec<'_>,
    name: &'static str,
    coefficients: [f64; 3],
) -> Result<Box<dyn Op>, OpError> {
    let periodic = match spec.attrs.int("periodic", 1)? {
        0 => false,
        1 => true,
        v => {
            return Err(OpError::invalid(format!(
                "{name}: periodic is {v}; it must be 0 or 1"
            )));
        }
    };
    let dtype = output_dtype(name, spec.attrs.int("output_datatype", 1)?)?;
    Ok(Box::new(CosineWindow {
        name,
        coefficients,
        periodic,
        dtype,
    }))
}

/// The numeric type an `output_datatype` attribute names (the windows' and MelWeightMatrix's).
pub(super) fn output_dtype(op: &str, code: i64) -> Result<DType, OpError> {
    match i32::try_from(code).ok().and_then(DType::from_onnx_code) {
        Some(d) if d != DType::Bool && !d.is_low_precision() => Ok(d),
        Some(d) => Err(OpError::unsupported(format!(
            "{op} making {d} (numeric types of 8 bits or more only)"
        ))),
        None => Err(OpError::invalid(format!(
            "{op}: output_datatype {code} is not an ONNX data type"
        ))),
    }
}

impl CosineWindow {
    fn size(&self, t: &Tensor) -> Result<usize, OpError> {
        let what = format!("{}'s size", self.name);
        let n = int_scalar(t, &what)?;
        if n <= 0 {
            return Err(OpError::invalid(format!(
                "{}: size is {n}; it must be positive",
                self.name
            )));
        }
        Ok(Size::from_i64(n, what)?.get())
    }

    fn values(&self, size: usize) -> Vec<f64> {
        let m = if self.periodic { size } else { size - 1 };
        if m == 0 {
            return vec![1.0];
        }
        let [a0, a1, a2] = self.coefficients;
        (0..size)
            .map(|n| {
                let x = 2.0 * std::f64::consts::PI * n as f64 / m as f64;
                a0 - a1 * x.cos() + a2 * (2.0 * x).cos()
            })
            .collect()
    }
}

impl Op for CosineWindow {
    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<ValueType>, OpError> {
        let size = self.size(const_input(inputs, 0)?)?;
        Ok(vec![ValueType::new(self.dtype, vec![size])])
    }

    fn run_cpu(
        &self,
        inputs: &[Option<&Tensor>],
        _outputs: &[ValueType],
    ) -> Result<Vec<Tensor>, OpError> {
        let size = self.size(req(inputs, 0)?)?;
        let v = self.values(size);
        Ok(vec![crate::numeric::from_f64(self.dtype, vec![size], v)?])
    }

    fn flops(&self, _inputs: &[Option<&ValueType>], outputs: &[ValueType]) -> u64 {
        outputs[0].numel() as u64 * 8
    }
}
