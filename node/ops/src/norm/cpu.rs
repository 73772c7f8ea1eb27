//! The reference kernel, in f64 for every float type.

use super::Rows;
use crate::OpError;
use crate::numeric::from_f64;
use crate::tensor::{Tensor, numel};
use crate::util::broadcast_strides;

fn f64s(t: &Tensor) -> Result<Vec<f64>, OpError> {
    t.to_f64_vec().map_err(|e| OpError::invalid(e.to_string()))
}

/// A scale or bias broadcast to the full normalised shape, when it is smaller.
fn expand(v: Vec<f64>, shape: &[usize], to: &[usize]) -> Vec<f64> {
    if shape == to {
        return v;
    }
    let st = broadcast_strides(shape, to);
    let n = numel(to);
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        let mut rem = i;
        let mut off = 0;
        for a in (0..to.len()).rev() {
            off += (rem % to[a]) * st[a];
            rem /= to[a];
        }
        out.push(v[off]);
    }
    out
}

/// (y, mean per row, 1 / sqrt(var + eps) per row).
pub fn normalize(
    x: &Tensor,
    scale: &Tensor,
    bias: Option<&Tensor>,
    rows: Rows,
    norm_shape: &[usize],
    eps: f64,
    layer: bool,
) -> Result<(Tensor, Vec<f64>, Vec<f64>), OpError> {
    let xs = f64s(x)?;
    let mut sc = f64s(scale)?;
    let mut bs = match bias {
        Some(b) => f64s(b)?,
        None => vec![0.0; sc.len()],
    };
    if layer {
        sc = expand(sc, scale.shape(), norm_shape);
        let bshape = bias.map_or(scale.shape(), Tensor::shape);
        bs = expand(bs, bshape, norm_shape);
    }
    let mut y = vec![0.0; xs.len()];
    let mut means = Vec::with_capacity(rows.rows);
    let mut invs = Vec::with_capacity(rows.rows);
    for r in 0..rows.rows {
        let row = &xs[r * rows.len..(r + 1) * rows.len];
        let n = rows.len.max(1) as f64;
        let mean = row.iter().sum::<f64>() / n;
        let var = row.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / n;
        let inv = 1.0 / (var + eps).sqrt();
        for (j, v) in row.iter().enumerate() {
            let k = rows.param(r, j);
            y[r * rows.len + j] = (v - mean) * inv * sc[k] + bs[k];
        }
        means.push(mean);
        invs.push(inv);
    }
    Ok((from_f64(x.dtype(), x.shape().to_vec(), y)?, means, invs))
}
