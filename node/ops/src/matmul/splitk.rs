//! MatMul/Gemm's split-K path (the rule is ops/splitk.rs): a single dispatch of gemm.comp's
//! 64 x 64 tiles that would launch too few workgroups for a long K becomes two. The
//! `gemm_f32_splitk` variant computes each (slice, tile) into a float scratch laid out
//! [slices][batch][M][N]; `gemm_splitk_reduce` adds the slices in order, then applies alpha,
//! C and beta as the one-pass kernel would.

use super::GpuGemm;
use crate::splitk::SplitK;
use crate::util::groups_1d;
use crate::{BufRef, Dispatch, GpuKernel};

/// `VKML_GEMM_SPLITK` (read once): unset is the shape rule, `0` never splits, `N` forces up to
/// N slices on every single-dispatch f32 product of small tiles.
pub(super) fn gemm_mode() -> SplitK {
    static MODE: std::sync::OnceLock<SplitK> = std::sync::OnceLock::new();
    *MODE.get_or_init(|| SplitK::from_var("VKML_GEMM_SPLITK"))
}

/// The two dispatches for `g` in `splits` slices of `k_slice`. `params`: gemm.comp's words
/// before the three offsets (which are 0: a single dispatch); `groups`: its one-pass grid.
/// The caller has checked that every word fits 32 bits, the grid's z times `splits` fits a
/// launch and the partials stay indexable (`split_k` caps them).
pub(super) fn kernel(
    g: &GpuGemm,
    mut params: Vec<u32>,
    groups: [usize; 3],
    splits: usize,
    k_slice: usize,
) -> GpuKernel {
    let total = groups[2] * g.m * g.n;
    // In the SPLIT_K variant the words of C's strides carry the slicing.
    params[15] = splits as u32;
    params[16] = k_slice as u32;
    params.extend([0, 0, 0]);
    let gemm = Dispatch {
        shader: "gemm_f32_splitk",
        // C is not read in this pass; A stands in for it.
        buffers: vec![
            BufRef::Input(0),
            BufRef::Input(1),
            BufRef::Input(0),
            BufRef::Scratch(0),
        ],
        params,
        groups: [groups[0], groups[1], groups[2] * splits].map(|v| v as u32),
    };
    let (rc, cc) = g.c.unwrap_or((0, 0));
    let reduce = Dispatch {
        shader: "gemm_splitk_reduce",
        buffers: vec![
            BufRef::Scratch(0),
            BufRef::Input(if g.c.is_some() { 2 } else { 0 }),
            BufRef::Output(0),
        ],
        params: [total, splits, g.m * g.n, g.n, rc, cc]
            .map(|v| v as u32)
            .into_iter()
            .chain([
                g.alpha.to_bits(),
                g.beta.to_bits(),
                u32::from(g.c.is_some()),
            ])
            .collect(),
        groups: groups_1d(total, 256),
    };
    GpuKernel {
        scratch: vec![(splits * total * 4) as u64],
        dispatches: vec![gemm, reduce],
    }
}
