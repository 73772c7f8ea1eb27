//! The dispatch of `shaders/rms_rows.comp`: one workgroup per row.

use crate::tensor::DType;
use crate::{BufRef, Dispatch, GpuKernel};
use vkml_shaders::rms_rows;

/// One row norm on the GPU: where its operands are and what it writes. Absent operands are
/// `None`; the outputs are output indices.
#[derive(Debug, Clone)]
pub struct RowNorm {
    pub rows: usize,
    pub len: usize,
    /// Subtract the mean (LayerNormalization) rather than normalise around 0 (RMS).
    pub layer: bool,
    pub eps: f32,
    /// The scale element of column j is `(j / gd) % gs` (see [`scale_block`]).
    pub gd: usize,
    pub gs: usize,
    pub x: usize,
    /// The skip input and its element count (read at `i % count`).
    pub skip: Option<(usize, usize)>,
    pub gamma: usize,
    pub beta: Option<usize>,
    pub bias: Option<usize>,
    pub mean: Option<usize>,
    pub inv: Option<usize>,
    pub sum: Option<usize>,
}

/// A scale of shape `scale` broadcast over a row of shape `norm` (the normalised axes), as
/// `(gd, gs)`: column j reads element `(j / gd) % gs`. `None` when the scale does not fit the
/// row (it varies across rows) or its varying axes are not one contiguous block.
pub fn scale_block(scale: &[usize], norm: &[usize]) -> Option<(usize, usize)> {
    if scale.len() > norm.len() {
        // Axes of the scale before the row's must be 1: the same scale for every row.
        let extra = scale.len() - norm.len();
        if scale[..extra].iter().any(|&d| d != 1) {
            return None;
        }
        return scale_block(&scale[extra..], norm);
    }
    let lead = norm.len() - scale.len();
    let dim = |a: usize| if a < lead { 1 } else { scale[a - lead] };
    if (0..norm.len()).any(|a| dim(a) != 1 && dim(a) != norm[a]) {
        return None;
    }
    // Axes of size 1 in the row fit either way; the others are covered or broadcast.
    let covered: Vec<usize> = (0..norm.len())
        .filter(|&a| norm[a] != 1 && dim(a) == norm[a])
        .collect();
    let (Some(&lo), Some(&hi)) = (covered.first(), covered.last()) else {
        return Some((1, 1));
    };
    if (lo..=hi).any(|a| norm[a] != 1 && dim(a) != norm[a]) {
        return None;
    }
    let gs = norm[lo..=hi].iter().product();
    let gd = norm[hi + 1..].iter().product();
    Some((gd, gs))
}

/// The kernel for `dtype` (f32 or f16), or `None` for another dtype or sizes past u32.
pub fn kernel(dtype: DType, k: &RowNorm) -> Option<GpuKernel> {
    let variant = by_dtype!(dtype, rms_rows::Variant, [F32, F16])?;
    u32::try_from(k.rows.checked_mul(k.len)?).ok()?;
    if k.rows == 0 || k.len == 0 {
        return Some(GpuKernel {
            scratch: vec![],
            dispatches: vec![],
        });
    }
    let gy = k.rows.div_ceil(65_535);
    let gx = k.rows.div_ceil(gy);
    // Absent buffers are stood in for by present ones the flags keep the shader off.
    let input = |i: Option<usize>| BufRef::Input(i.unwrap_or(k.x));
    let output = |i: Option<usize>| BufRef::Output(i.unwrap_or(0));
    let flag = |on: bool, bit: u32| if on { bit } else { 0 };
    let flags = flag(k.skip.is_some(), 1)
        | flag(k.bias.is_some(), 2)
        | flag(k.beta.is_some(), 4)
        | flag(k.layer, 8)
        | flag(k.mean.is_some(), 16)
        | flag(k.inv.is_some(), 32)
        | flag(k.sum.is_some(), 64);
    Some(GpuKernel {
        scratch: vec![],
        dispatches: vec![Dispatch::new(
            variant,
            rms_rows::Buffers {
                x: BufRef::Input(k.x),
                skip: input(k.skip.map(|s| s.0)),
                gamma: BufRef::Input(k.gamma),
                beta: input(k.beta),
                bias: input(k.bias),
                y: BufRef::Output(0),
                mean: output(k.mean),
                inv: output(k.inv),
                sum: output(k.sum),
            },
            rms_rows::Params {
                rows: k.rows as u32,
                len: k.len as u32,
                skip_n: k.skip.map_or(1, |s| s.1.max(1)) as u32,
                gd: k.gd as u32,
                gs: k.gs as u32,
                eps: k.eps,
                flags,
            },
            [gx as u32, u32::try_from(gy).ok()?, 1],
        )],
    })
}
