//! Split-K for the tiled GEMM kernels (Conv's implicit GEMM, MatMul/Gemm's gemm): when a
//! product has too few output tiles to fill a large GPU (an H100 has 132 multiprocessors) and
//! a long reduction, K is cut into slices, one workgroup per (slice, tile) writes float
//! partial sums to scratch, and a second dispatch adds them in slice order (so results do not
//! depend on scheduling) and applies the epilogue. This is the one rule both use.

/// K elements per step of the kernels' main loops (`BK` in the shaders).
pub const TILE_K: usize = 16;
/// Largest element count the shaders index with 32-bit arithmetic.
const MAX_ELEMS: usize = i32::MAX as usize;

/// Products with fewer output tiles than this are split along K...
const SPLIT_BELOW_TILES: usize = 256;
/// ...into enough slices to launch about this many workgroups (an H100's 132 multiprocessors
/// hold about 4 of these 256-thread workgroups each: one full wave)...
const SPLIT_TARGET_GROUPS: usize = 512;
/// ...each slice at least this many K steps, so the partial sums' extra traffic (one float per
/// output per slice, written and read back) stays small next to the slice's own loads.
const MIN_SLICE_STEPS: usize = 4;
const MAX_SPLITS: usize = 64;

/// How to choose split-K: by the shape rule, never, or with a given slice count.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum SplitK {
    #[default]
    Auto,
    Off,
    /// At most this many slices (fewer when K has fewer steps).
    Forced(usize),
}

/// Slices of K for a product with `tiles` output tiles (all groups or batches), a reduction
/// of length `k` and `y_len` outputs: (slice count, K elements per slice, a multiple of the
/// shader's step). One slice means no split. Every slice is non-empty; the last may be short.
pub fn split_k(tiles: usize, k: usize, y_len: usize, mode: SplitK) -> (usize, usize) {
    let steps = k.div_ceil(TILE_K);
    let want = match mode {
        SplitK::Off => 1,
        SplitK::Forced(n) => n,
        SplitK::Auto if tiles >= SPLIT_BELOW_TILES => 1,
        SplitK::Auto => SPLIT_TARGET_GROUPS
            .div_ceil(tiles.max(1))
            .min(steps / MIN_SLICE_STEPS)
            .min(MAX_SPLITS),
    };
    // The partials are indexed with 32-bit arithmetic too.
    let want = want.min(steps).min(MAX_ELEMS / y_len.max(1));
    if want < 2 {
        return (1, k);
    }
    let slice_steps = steps.div_ceil(want);
    (steps.div_ceil(slice_steps), slice_steps * TILE_K)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_rule_on_resnet50_shapes() {
        let y = 1000;
        // Batch 1, 7 x 7 stage, 3 x 3 over 512 channels: 8 tiles, K = 4608 (288 steps):
        // 512 / 8 = 64 slices wanted, 288 / 64 -> 5 steps each, 58 slices.
        assert_eq!(split_k(8, 4608, y, SplitK::Auto), (58, 80));
        // Batch 8, same layer: 7 x 8 = 56 tiles, 10 slices of 29 steps (the last 27).
        assert_eq!(split_k(56, 4608, y, SplitK::Auto), (10, 464));
        // 1 x 1, 2048 -> 512 channels: 128 steps, 32 slices of the minimum 4 steps.
        assert_eq!(split_k(8, 2048, y, SplitK::Auto), (32, 64));
        // Batch 1, 56 x 56 stage, 1 x 1 over 64 channels: 196 tiles but K is 4 steps.
        assert_eq!(split_k(196, 64, y, SplitK::Auto), (1, 64));
        // Enough tiles to fill the GPU: never split.
        assert_eq!(split_k(256, 4608, y, SplitK::Auto), (1, 4608));
        // Overrides: off, and forced counts capped by the number of steps.
        assert_eq!(split_k(8, 4608, y, SplitK::Off), (1, 4608));
        assert_eq!(split_k(1000, 45, y, SplitK::Forced(3)), (3, 16));
        assert_eq!(split_k(1000, 45, y, SplitK::Forced(9)), (3, 16));
        assert_eq!(split_k(1000, 45, y, SplitK::Forced(1)), (1, 45));
        // 6 steps asked for 4 slices: 2 steps each, so 3 slices.
        assert_eq!(split_k(1, 96, y, SplitK::Forced(4)), (3, 32));
        // The partials must stay indexable with 32 bits.
        assert_eq!(split_k(1, 4608, MAX_ELEMS / 3, SplitK::Auto), (3, 1536));
    }
}
