//! The GPU side of Conv: which shader, over which buffers, with which parameters.
//!
//! Both shaders read the same parameter table (a `BufRef::Table`, since 3-D geometry does
//! not fit the 128-byte push-constant budget next to five buffer addresses). Its layout is
//! mirrored by the `P_*` constants in shaders/conv_gemm.comp and shaders/conv_direct.comp.
//!
//! Split-K: a convolution with few output tiles and a long K (late CNN layers at small batch:
//! 7 x 7 pixels, 512 channels, K = 4608) would run a handful of workgroups on a GPU with 100+
//! multiprocessors, each walking all of K. `ops::splitk::split_k` then cuts K into slices: one
//! workgroup per (slice, tile) writes float partial sums to a scratch buffer, and a second
//! dispatch (shaders/conv_splitk_reduce.comp) adds them in slice order plus the bias. The
//! choice is a pure function of the shapes (plans and recorded command lists depend on it),
//! overridable for benchmarks (`KernelTuning::conv_splitk`).

use super::ConvShape;
use crate::splitk::{SplitK, split_k};
use crate::util::groups_1d;
use crate::{BufRef, Dispatch, GpuKernel};
use vkml_shaders::{conv_direct, conv_gemm, conv_splitk_reduce};

/// Output pixels x output channels per workgroup of the implicit GEMM (shaders/conv_gemm.comp).
pub(crate) const TILE_M: usize = 64;
pub(crate) const TILE_N: usize = 64;
/// Below this many output channels per group, a 64-wide channel tile would be mostly idle:
/// the direct shader is used instead (depthwise, ResNeXt-style narrow groups).
const MIN_GEMM_OCG: usize = 16;

/// Largest element count the shaders index with 32-bit arithmetic.
pub(crate) const MAX_ELEMS: usize = i32::MAX as usize;

/// `half`: the tensors are f16 (the shaders' `_f16` variants; arithmetic stays in float);
/// `mode`: split-K by the shape rule, or as tuned.
pub fn kernel(s: &ConvShape, has_bias: bool, half: bool, mode: SplitK) -> Option<GpuKernel> {
    let x_len = s.n * s.c * s.in_plane();
    let w_len = s.oc * s.cg() * s.kernel_volume();
    let y_len = s.n * s.oc * s.out_plane();
    if [x_len, w_len, y_len].iter().any(|&l| l > MAX_ELEMS) || y_len == 0 {
        return None;
    }
    let m = s.n * s.out_plane();
    let tiles_m = m.div_ceil(TILE_M);
    let tiles_n = s.ocg().div_ceil(TILE_N);
    let tiles = tiles_m * tiles_n * s.group;
    let direct = s.ocg() < MIN_GEMM_OCG;
    let (splits, k_slice) = if direct {
        (1, 0)
    } else {
        split_k(tiles, s.cg() * s.kernel_volume(), y_len, mode)
    };
    let table = geometry_table(s, tiles_m, tiles_n, splits, k_slice);

    // Without B the shaders read zeros, so they need no branch on it.
    let bias = if has_bias {
        BufRef::Input(2)
    } else {
        BufRef::Table(vec![0; s.oc])
    };
    let table = BufRef::Table(table);
    if splits > 1 {
        let gemm = Dispatch::new(
            if half {
                conv_gemm::Variant::F16Splitk
            } else {
                conv_gemm::Variant::F32Splitk
            },
            conv_gemm::Buffers {
                x: BufRef::Input(0),
                w: BufRef::Input(1),
                b: bias.clone(),
                y: BufRef::Scratch(0),
                t: table,
            },
            conv_gemm::Params {},
            groups_1d(tiles * splits * 256, 256),
        );
        let reduce = Dispatch::new(
            if half {
                conv_splitk_reduce::Variant::F16
            } else {
                conv_splitk_reduce::Variant::F32
            },
            conv_splitk_reduce::Buffers {
                part: BufRef::Scratch(0),
                b: bias,
                y: BufRef::Output(0),
            },
            conv_splitk_reduce::Params {
                n: y_len as u32,
                splits: splits as u32,
                plane: s.out_plane() as u32,
                oc: s.oc as u32,
            },
            groups_1d(y_len, 256),
        );
        return Some(GpuKernel {
            scratch: vec![(splits * y_len * 4) as u64],
            dispatches: vec![gemm, reduce],
        });
    }
    let dispatch = if direct {
        Dispatch::new(
            if half {
                conv_direct::Variant::F16
            } else {
                conv_direct::Variant::F32
            },
            conv_direct::Buffers {
                x: BufRef::Input(0),
                w: BufRef::Input(1),
                b: bias,
                y: BufRef::Output(0),
                t: table,
            },
            conv_direct::Params {},
            groups_1d(y_len, 256),
        )
    } else {
        Dispatch::new(
            if half {
                conv_gemm::Variant::F16
            } else {
                conv_gemm::Variant::F32
            },
            conv_gemm::Buffers {
                x: BufRef::Input(0),
                w: BufRef::Input(1),
                b: bias,
                y: BufRef::Output(0),
                t: table,
            },
            conv_gemm::Params {},
            // One workgroup per tile; groups_1d folds the count into y past 65,535.
            groups_1d(tiles * 256, 256),
        )
    };
    Some(GpuKernel {
        scratch: vec![],
        dispatches: vec![dispatch],
    })
}

/// The 28 words of geometry the convolution shaders (conv_gemm, conv_direct, conv_q8) read.
pub(crate) fn geometry_table(
    s: &ConvShape,
    tiles_m: usize,
    tiles_n: usize,
    splits: usize,
    k_slice: usize,
) -> Vec<u32> {
    let a = s.axes3();
    let mut table: Vec<u32> = vec![s.n as u32, s.c as u32];
    table.extend(a.iter().map(|a| a.input as u32));
    table.push(s.oc as u32);
    table.extend(a.iter().map(|a| a.output as u32));
    table.extend(a.iter().map(|a| a.kernel as u32));
    table.extend(a.iter().map(|a| a.stride as u32));
    table.extend(a.iter().map(|a| a.dilation as u32));
    table.extend(a.iter().map(|a| a.pad_begin as u32));
    table.extend([s.group, s.cg(), s.ocg(), tiles_m, tiles_n, splits, k_slice].map(|v| v as u32));
    debug_assert_eq!(table.len(), 28);
    table
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::window::geometry::Axis;

    fn axis(input: usize, kernel: usize) -> Axis {
        Axis {
            input,
            output: input - kernel + 1,
            kernel,
            stride: 1,
            dilation: 1,
            pad_begin: 0,
            pad_end: 0,
        }
    }

    #[test]
    fn shader_choice_and_table() {
        let s = ConvShape {
            n: 1,
            c: 32,
            oc: 32,
            group: 32,
            axes: vec![axis(8, 3), axis(8, 3)],
        };
        let k = kernel(&s, false, false, SplitK::Auto).unwrap();
        assert_eq!(k.dispatches[0].kernel(), conv_direct::Variant::F32.kernel());
        let k = kernel(&s, false, true, SplitK::Auto).unwrap();
        assert_eq!(k.dispatches[0].kernel(), conv_direct::Variant::F16.kernel());
        let s = ConvShape {
            n: 2,
            c: 8,
            oc: 128,
            group: 1,
            axes: vec![axis(10, 3)],
        };
        let k = kernel(&s, true, false, SplitK::Auto).unwrap();
        let d = &k.dispatches[0];
        assert_eq!(d.kernel(), conv_gemm::Variant::F32.kernel());
        // 2 * 8 outputs -> 1 pixel tile, 2 channel tiles.
        assert_eq!(d.groups, [2, 1, 1]);
        let BufRef::Table(t) = &d.buffers()[4] else {
            panic!("no table")
        };
        assert_eq!(&t[..5], &[2, 8, 1, 1, 10]);
        // K = 24 is two steps: too short to split.
        assert_eq!(&t[26..], &[1, 24]);
        assert_eq!(k.scratch, Vec::<u64>::new());
        // Depthwise stays direct even when split-K is forced.
        let s = ConvShape {
            n: 1,
            c: 32,
            oc: 32,
            group: 32,
            axes: vec![axis(8, 3), axis(8, 3)],
        };
        let k = kernel(&s, false, false, SplitK::Forced(4)).unwrap();
        assert_eq!(k.dispatches.len(), 1);
        assert_eq!(k.dispatches[0].kernel(), conv_direct::Variant::F32.kernel());
    }
}
