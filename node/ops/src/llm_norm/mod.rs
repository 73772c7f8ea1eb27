//! The row norms of LLM exports: ONNX's RMSNormalization (opset 23), onnxruntime's
//! SimplifiedLayerNormalization (an RMS norm with LayerNormalization's attributes and an
//! inv_std_var output; onnxruntime keeps it in the default domain, where exporters write it),
//! and com.microsoft's SkipLayerNormalization and SkipSimplifiedLayerNormalization, which add
//! a residual (`skip`) and a bias before normalising the last axis.
//!
//! All normalise rows of `len` contiguous elements: `v = x (+ skip + bias)`, then
//! `y = v / sqrt(mean(v^2) + eps) * scale` (RMS), or `(v - mean) / sqrt(var + eps) * gamma + beta`
//! (layer). The CPU kernel computes in f64, the shader (`shaders/rms_rows.comp`) in f32.

pub(crate) mod cpu;
mod gpu;
mod rms;
mod skip;
#[cfg(test)]
mod tests;

use crate::tensor::DType;
use crate::{MS_DOMAIN, Registry};

pub fn register(r: &mut Registry) {
    r.add("RMSNormalization", rms::Rms::build_onnx);
    r.add("SimplifiedLayerNormalization", rms::Rms::build_simplified);
    r.add_in(
        MS_DOMAIN,
        "SimplifiedLayerNormalization",
        rms::Rms::build_simplified,
    );
    r.add_in(MS_DOMAIN, "SkipLayerNormalization", |s| {
        skip::Skip::build(s, false)
    });
    r.add_in(MS_DOMAIN, "SkipSimplifiedLayerNormalization", |s| {
        skip::Skip::build(s, true)
    });
}

const FLOATS: &[DType] = &[DType::F32, DType::F16, DType::F64, DType::BF16];

/// The dtype a `stash_type` attribute names (1, float, by default).
fn stash_type(op: &str, code: i64) -> Result<DType, crate::OpError> {
    i32::try_from(code)
        .ok()
        .and_then(DType::from_onnx_code)
        .filter(|d| d.is_float())
        .ok_or_else(|| {
            crate::OpError::invalid(format!(
                "{op}: stash_type {code} is not a float type (1 is float)"
            ))
        })
}
