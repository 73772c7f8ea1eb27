//! MelWeightMatrix (opset 17): [dft_length/2 + 1, num_mel_bins] triangular filters, peak 1,
//! equally spaced on the mel scale mel(f) = 2595 log10(1 + f / 700) between the band edges.
//! As ONNX's reference computes them: num_mel_bins + 2 points from the lower edge's mel in
//! steps of (upper - lower) / (num_mel_bins + 2), each mapped back to hertz and to the
//! spectrogram bin floor((dft_length + 1) hz / sample_rate); filter i rises from point i to
//! point i + 1 and falls to point i + 2. Computed in f64, converted once to
//! `output_datatype`. Folded while planning when its inputs are known (see the module
//! above); a run-time sample rate or edge leaves it to the CPU backend.

use super::int_scalar;
use super::window::output_dtype;
use crate::size::Size;
use crate::tensor::{DType, Tensor};
use crate::util::{const_input, req};
use crate::{InferInput, NodeSpec, Op, OpError, Registry, ValueType};

pub fn register(r: &mut Registry) {
    r.add("MelWeightMatrix", build);
}

#[derive(Debug)]
struct MelWeightMatrix {
    dtype: DType,
}

fn build(spec: &NodeSpec<'_>) -> Result<Box<dyn Op>, OpError> {
    let code = spec.attrs.int("output_datatype", 1)?;
    Ok(Box::new(MelWeightMatrix {
        dtype: output_dtype("MelWeightMatrix", code)?,
    }))
}

/// A positive integer scalar input.
fn positive(t: &Tensor, what: &str) -> Result<usize, OpError> {
    let v = int_scalar(t, what)?;
    if v <= 0 {
        return Err(OpError::invalid(format!(
            "MelWeightMatrix: {what} is {v}; it must be positive"
        )));
    }
    Ok(Size::from_i64(v, what)?.get())
}

fn float_scalar(t: &Tensor, what: &str) -> Result<f64, OpError> {
    let v = t
        .to_f64_vec()
        .map_err(|e| OpError::invalid(format!("MelWeightMatrix's {what}: {e}")))?;
    match v.as_slice() {
        [x] if t.dtype().is_float() => Ok(*x),
        _ => Err(OpError::invalid(format!(
            "MelWeightMatrix: {what} must be a float scalar, found {}{:?}",
            t.dtype(),
            t.shape()
        ))),
    }
}

/// The output's shape: [dft_length / 2 + 1, num_mel_bins].
fn shape(mel_bins: &Tensor, dft_length: &Tensor) -> Result<[usize; 2], OpError> {
    let bins = positive(mel_bins, "num_mel_bins")?;
    let dft = positive(dft_length, "dft_length")?;
    Ok([dft / 2 + 1, bins])
}

/// The filters, row-major [spectrogram bins, mel bins].
fn weights(
    [rows, bands]: [usize; 2],
    dft_length: usize,
    sample_rate: f64,
    lower: f64,
    upper: f64,
) -> Result<Vec<f64>, OpError> {
    let mel = |hz: f64| 2595.0 * (1.0 + hz / 700.0).log10();
    let (low, high) = (mel(lower), mel(upper));
    let step = (high - low) / (bands + 2) as f64;
    let points: Vec<f64> = (0..bands + 2)
        .map(|i| {
            let hz = 700.0 * (10f64.powf((i as f64 * step + low) / 2595.0) - 1.0);
            ((dft_length + 1) as f64 * hz / sample_rate).floor()
        })
        .collect();
    let mut out = vec![0.0; rows * bands];
    let mut set = |bin: f64, band: usize, v: f64| -> Result<(), OpError> {
        if !(0.0..rows as f64).contains(&bin) {
            return Err(OpError::invalid(format!(
                "MelWeightMatrix: band {band} reaches spectrogram bin {bin}, outside 0..{rows}: \
                 the edges {lower} and {upper} Hz must lie within 0 and half the sample rate \
                 ({sample_rate} / 2)"
            )));
        }
        out[bin as usize * bands + band] = v;
        Ok(())
    };
    for band in 0..bands {
        let [left, center, right] = [points[band], points[band + 1], points[band + 2]];
        if center == left {
            set(center, band, 1.0)?;
        } else {
            let mut j = left;
            while j <= center {
                set(j, band, (j - left) / (center - left))?;
                j += 1.0;
            }
        }
        let mut j = center;
        while j < right {
            set(j, band, (right - j) / (right - center))?;
            j += 1.0;
        }
    }
    Ok(out)
}

impl Op for MelWeightMatrix {
    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<ValueType>, OpError> {
        let s = shape(const_input(inputs, 0)?, const_input(inputs, 1)?)?;
        for (i, what) in [
            (2, "sample_rate"),
            (3, "lower_edge_hertz"),
            (4, "upper_edge_hertz"),
        ] {
            let ty = req(inputs, i)?.ty;
            if ty.dtype.is_float() != (i > 2) || ty.numel() != 1 {
                return Err(OpError::invalid(format!(
                    "MelWeightMatrix: {what} is {ty}; it must be a scalar {}",
                    if i > 2 { "float" } else { "integer" }
                )));
            }
        }
        Ok(vec![ValueType::new(self.dtype, s.to_vec())])
    }

    fn run_cpu(
        &self,
        inputs: &[Option<&Tensor>],
        _outputs: &[ValueType],
    ) -> Result<Vec<Tensor>, OpError> {
        let s = shape(req(inputs, 0)?, req(inputs, 1)?)?;
        let dft_length = positive(req(inputs, 1)?, "dft_length")?;
        let sample_rate = positive(req(inputs, 2)?, "sample_rate")? as f64;
        let lower = float_scalar(req(inputs, 3)?, "lower_edge_hertz")?;
        let upper = float_scalar(req(inputs, 4)?, "upper_edge_hertz")?;
        let w = weights(s, dft_length, sample_rate, lower, upper)?;
        Ok(vec![crate::numeric::from_f64(self.dtype, s.to_vec(), w)?])
    }
}
