//! The 1-D sampling of Resize: for each output coordinate of one axis, which input elements
//! it reads and with what weights. Resize is separable, so an N-D resize applies these axis by
//! axis. The arithmetic is in f64 and follows ONNX's reference definitions.

/// How an output coordinate maps back to the input (coordinate_transformation_mode).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Transform {
    HalfPixel,
    HalfPixelSymmetric,
    PytorchHalfPixel,
    AlignCorners,
    Asymmetric,
    TfCropAndResize,
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Nearest {
    RoundPreferFloor,
    RoundPreferCeil,
    Floor,
    Ceil,
    /// Resize-10 and Upsample (as onnxruntime does): floor when enlarging, ceil when shrinking.
    Simple,
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Mode {
    Nearest(Nearest),
    Linear,
    Cubic(f64),
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Sampling {
    pub mode: Mode,
    pub transform: Transform,
    pub antialias: bool,
    pub exclude_outside: bool,
}

/// The taps of one axis: `n` per output coordinate, flattened; `None` for a coordinate that
/// reads the extrapolation value (tf_crop_and_resize outside the input).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct AxisTaps {
    pub n: usize,
    pub taps: Vec<Option<Vec<(usize, f64)>>>,
}

fn source_coordinate(
    t: Transform,
    y: f64,
    scale: f64,
    in_w: usize,
    out_w: usize,
    roi: (f64, f64),
) -> f64 {
    let in_f = in_w as f64;
    let out_f = scale * in_f;
    match t {
        Transform::AlignCorners => {
            if out_f == 1.0 {
                0.0
            } else {
                y * (in_f - 1.0) / (out_f - 1.0)
            }
        }
        Transform::Asymmetric => y / scale,
        Transform::TfCropAndResize => {
            let x = if out_f == 1.0 {
                (roi.1 - roi.0) * (in_f - 1.0) / 2.0
            } else {
                y * (roi.1 - roi.0) * (in_f - 1.0) / (out_f - 1.0)
            };
            x + roi.0 * (in_f - 1.0)
        }
        Transform::PytorchHalfPixel => {
            if out_f == 1.0 {
                -0.5
            } else {
                (y + 0.5) / scale - 0.5
            }
        }
        Transform::HalfPixel => (y + 0.5) / scale - 0.5,
        Transform::HalfPixelSymmetric => {
            let adjustment = out_w as f64 / out_f;
            let offset = in_f / 2.0 * (1.0 - adjustment);
            offset + (y + 0.5) / scale - 0.5
        }
    }
}

fn cubic(x: f64, a: f64) -> f64 {
    let x = x.abs();
    if x <= 1.0 {
        ((a + 2.0) * x - (a + 3.0)) * x * x + 1.0
    } else if x < 2.0 {
        ((a * x - 5.0 * a) * x + 8.0 * a) * x - 4.0 * a
    } else {
        0.0
    }
}

/// Weights for taps at offsets `first..first + len` from the base element, where the source
/// coordinate is `base + ratio` with `ratio` in (0, 1].
fn weights(s: &Sampling, ratio: f64, scale: f64) -> (i64, Vec<f64>) {
    match s.mode {
        Mode::Nearest(m) => {
            let right = if ratio == 1.0 {
                true
            } else {
                match m {
                    Nearest::RoundPreferFloor => ratio > 0.5,
                    Nearest::RoundPreferCeil => ratio >= 0.5,
                    Nearest::Floor => false,
                    Nearest::Ceil => true,
                    Nearest::Simple => scale < 1.0,
                }
            };
            (
                0,
                if right {
                    vec![0.0, 1.0]
                } else {
                    vec![1.0, 0.0]
                },
            )
        }
        Mode::Linear if s.antialias => {
            let sc = scale.min(1.0);
            let start = (-1.0 / sc).floor() as i64 + 1;
            let len = 2 - 2 * start;
            let w: Vec<f64> = (start..start + len)
                .map(|i| (1.0 - ((i as f64 - ratio) * sc).abs()).clamp(0.0, 1.0))
                .collect();
            (start, normalised(w))
        }
        Mode::Linear => (0, vec![1.0 - ratio, ratio]),
        Mode::Cubic(a) if s.antialias => {
            let sc = scale.min(1.0);
            let start = (-2.0 / sc).floor() as i64 + 1;
            let end = 2 - start;
            let w: Vec<f64> = (start..end)
                .map(|i| cubic(sc * (i as f64 - ratio), a))
                .collect();
            (start, normalised(w))
        }
        Mode::Cubic(a) => (
            -1,
            vec![
                cubic(ratio + 1.0, a),
                cubic(ratio, a),
                cubic(1.0 - ratio, a),
                cubic(2.0 - ratio, a),
            ],
        ),
    }
}

fn normalised(w: Vec<f64>) -> Vec<f64> {
    let sum: f64 = w.iter().sum();
    if sum == 0.0 {
        w
    } else {
        w.into_iter().map(|v| v / sum).collect()
    }
}

/// The taps of an axis of `in_w` elements resized to `out_w` with `scale`.
pub(crate) fn axis_taps(
    s: &Sampling,
    in_w: usize,
    out_w: usize,
    scale: f64,
    roi: (f64, f64),
) -> AxisTaps {
    let mut n = 0;
    let taps = (0..out_w)
        .map(|y| {
            let x = source_coordinate(s.transform, y as f64, scale, in_w, out_w, roi);
            if s.transform == Transform::TfCropAndResize && (x < 0.0 || x > in_w as f64 - 1.0) {
                return None;
            }
            // The element left of x (strictly, so that an integer x has ratio 1).
            let base = x.ceil() as i64 - 1;
            let ratio = x - base as f64;
            let (first, mut w) = weights(s, ratio, scale);
            let idx: Vec<i64> = (0..w.len() as i64).map(|i| base + first + i).collect();
            if s.exclude_outside {
                for (wi, &i) in w.iter_mut().zip(&idx) {
                    if i < 0 || i >= in_w as i64 {
                        *wi = 0.0;
                    }
                }
                w = normalised(w);
            }
            n = n.max(w.len());
            let last = in_w.saturating_sub(1) as i64;
            Some(
                idx.iter()
                    .zip(w)
                    .map(|(&i, w)| (i.clamp(0, last) as usize, w))
                    .collect(),
            )
        })
        .collect();
    AxisTaps { n, taps }
}
