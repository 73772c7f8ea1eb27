//! The reference kernel, in f64 for every float type.

use crate::OpError;
use crate::tensor::{Tensor, numel};
use crate::util::broadcast_strides;

pub fn f64s(t: &Tensor) -> Result<Vec<f64>, OpError> {
    t.to_f64_vec().map_err(|e| OpError::invalid(e.to_string()))
}

/// `v` (of shape `shape`) broadcast to the larger shape `to`.
pub fn expand(v: &[f64], shape: &[usize], to: &[usize]) -> Vec<f64> {
    if shape == to {
        return v.to_vec();
    }
    let st = broadcast_strides(shape, to);
    (0..numel(to))
        .map(|i| {
            let (mut rem, mut off) = (i, 0);
            for a in (0..to.len()).rev() {
                off += (rem % to[a]) * st[a];
                rem /= to[a];
            }
            v[off]
        })
        .collect()
}

/// Per row of `len` values: the output, the mean (0 for RMS) and 1 / sqrt(var + eps), where
/// var is the mean square around the mean (layer) or around 0 (RMS).
pub struct Normalized {
    pub y: Vec<f64>,
    pub mean: Vec<f64>,
    pub inv: Vec<f64>,
}

/// Normalises `rows` rows of `len` values. `gamma` and `beta` are read at
/// `(row * len + j) % their length`: one value per column (length `len`) or per element.
pub fn normalize(
    v: &[f64],
    rows: usize,
    len: usize,
    layer: bool,
    eps: f64,
    gamma: &[f64],
    beta: Option<&[f64]>,
) -> Normalized {
    let mut out = Normalized {
        y: vec![0.0; v.len()],
        mean: Vec::with_capacity(rows),
        inv: Vec::with_capacity(rows),
    };
    let n = len.max(1) as f64;
    for r in 0..rows {
        let row = &v[r * len..(r + 1) * len];
        let mean = if layer {
            row.iter().sum::<f64>() / n
        } else {
            0.0
        };
        let var = row.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / n;
        let inv = 1.0 / (var + eps).sqrt();
        for (j, x) in row.iter().enumerate() {
            let i = r * len + j;
            let b = beta.map_or(0.0, |b| b[i % b.len()]);
            out.y[i] = (x - mean) * inv * gamma[i % gamma.len()] + b;
        }
        out.mean.push(mean);
        out.inv.push(inv);
    }
    out
}
