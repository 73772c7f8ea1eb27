//! The GPU side of Transpose: which shader, with which push constants.
//!
//! Two kernels. `transpose.comp` writes one output word per invocation and reads wherever the
//! walk says: right for any element size, and fast when the input's contiguous axis stays
//! last (then elements are whole rows). When it does not, consecutive output words come from
//! input words far apart, so `transpose_tiled.comp` stages 32 x 32 tiles through shared memory
//! to read and write contiguously (one-word elements only).

use super::{Walk, walk};
use crate::tensor::{numel, strides};
use vkml_shaders::{transpose, transpose_tiled};

/// The largest rank the kernels walk (after merging axes).
const GPU_RANK: usize = 6;
/// Tile edge of `transpose_tiled.comp`.
const TILE: usize = 32;
/// Below this extent on either tile axis most of a tile would idle: use the plain kernel.
const TILED_MIN: usize = 16;

#[derive(Debug, Clone, PartialEq)]
pub(super) enum Plan {
    /// Nothing to move (zero elements).
    Empty,
    /// `transpose.comp`: output words, element bytes, dims (the output's, padded at the front
    /// with unit axes) and input strides in elements.
    Words(transpose::Params),
    /// `transpose_tiled.comp`: workgroups, tiles along a and along b, the extents of a and b,
    /// the input stride of b, the output stride of a, then the batch axes' dims, input
    /// strides and output strides, where b is the last output axis and a the output axis that
    /// walks the input's contiguous axis; all in words.
    Tiled(transpose_tiled::Params),
}

#[cfg(test)]
impl Plan {
    /// The parameters as the shader reads them, for tests that emulate it.
    pub(super) fn words(&self) -> Vec<u32> {
        use vkml_shaders::Shader;
        match self {
            Plan::Empty => Vec::new(),
            Plan::Words(p) => transpose::Variant::param_words(p),
            Plan::Tiled(p) => transpose_tiled::Variant::param_words(p),
        }
    }
}

pub(super) fn plan(shape: &[usize], perm: &[usize], es: usize) -> Option<Plan> {
    let mut w = walk(shape, perm);
    let total_bytes = numel(shape) * es;
    if total_bytes == 0 {
        return Some(Plan::Empty);
    }
    let mut eb = es;
    // A last axis that stays last is one contiguous run in both tensors: make it the element,
    // so e.g. f16 channels-last moves as words. Outer strides are multiples of it, as every
    // other axis lies outside the input's innermost run.
    if w.strides.last() == Some(&1) && (w.dims.last().unwrap_or(&1) * es).is_multiple_of(4) {
        eb = w.dims.pop().unwrap_or(1) * es;
        w.strides.pop();
        for s in &mut w.strides {
            *s /= eb / es;
        }
    }
    // Packed 1- and 2-byte elements need both tensors to be whole words, so that no word the
    // kernel reads or writes is partly outside its buffer.
    let layout_ok = if eb < 4 {
        matches!(eb, 1 | 2) && total_bytes.is_multiple_of(4)
    } else {
        eb.is_multiple_of(4)
    };
    if !layout_ok || w.dims.len() > GPU_RANK {
        return None;
    }
    let words = u32::try_from(total_bytes / 4).ok()?;
    // Every element index and source offset must fit the shaders' 32-bit arithmetic.
    u32::try_from(total_bytes / eb).ok()?;
    if eb == 4
        && let Some(p) = tiled(&w)
    {
        return Some(Plan::Tiled(p));
    }
    let pad = GPU_RANK - w.dims.len();
    let mut params = transpose::Params {
        n: words,
        eb: eb as u32,
        dims: [1; GPU_RANK],
        strides: [0; GPU_RANK],
    };
    for (k, (&d, &s)) in w.dims.iter().zip(&w.strides).enumerate() {
        params.dims[pad + k] = d as u32;
        params.strides[pad + k] = s as u32;
    }
    Some(Plan::Words(params))
}

fn tiled(w: &Walk) -> Option<transpose_tiled::Params> {
    let r = w.dims.len();
    let b = r.checked_sub(1)?;
    if w.strides[b] == 1 {
        return None;
    }
    let a = w.strides.iter().position(|&s| s == 1)?;
    let (da, db) = (w.dims[a], w.dims[b]);
    if da < TILED_MIN || db < TILED_MIN {
        return None;
    }
    let out = strides(&w.dims);
    let batch: Vec<usize> = (0..r).filter(|&k| k != a && k != b).collect();
    let pad = 4 - batch.len();
    let (tiles_a, tiles_b) = (da.div_ceil(TILE), db.div_ceil(TILE));
    let groups = tiles_a * tiles_b * batch.iter().map(|&k| w.dims[k]).product::<usize>();
    let as_u32 = |v: usize| u32::try_from(v).ok();
    let mut params = transpose_tiled::Params {
        groups: as_u32(groups)?,
        tiles_a: as_u32(tiles_a)?,
        tiles_b: as_u32(tiles_b)?,
        da: as_u32(da)?,
        db: as_u32(db)?,
        sb: as_u32(w.strides[b])?,
        oa: as_u32(out[a])?,
        // Padding axes have extent 1 (and so never move the base).
        bdims: [1; 4],
        bin: [0; 4],
        bout: [0; 4],
    };
    for (j, &k) in batch.iter().enumerate() {
        params.bdims[pad + j] = as_u32(w.dims[k])?;
        params.bin[pad + j] = as_u32(w.strides[k])?;
        params.bout[pad + j] = as_u32(out[k])?;
    }
    Some(params)
}
