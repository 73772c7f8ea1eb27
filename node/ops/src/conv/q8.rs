//! The GPU side of the integer convolutions, QLinearConv and ConvInteger: one dispatch of
//! shaders/conv_q8.comp, an implicit GEMM over the 8-bit values as they are (zero points
//! applied after the integer sums, see the shader), with QLinearConv's requantization in its
//! epilogue. The `dot` variants use the packed dot-product instructions; the others compute
//! the same integers unpacked, for devices without them. Split-K, as the float convolution's
//! (conv/gpu.rs), with int32 partials summed by conv_q8_reduce.comp.

use super::ConvShape;
use super::gpu::{MAX_ELEMS, TILE_M, TILE_N, geometry_table};
use crate::splitk::{SplitK, split_k};
use crate::util::groups_1d;
use crate::{BufRef, Dispatch, GpuKernel};
use vkml_shaders::{conv_q8, conv_q8_reduce};

/// What the shader reads and writes, as buffers of the op.
#[derive(Debug, Clone)]
pub struct Io {
    pub x_signed: bool,
    pub w_signed: bool,
    pub x: BufRef,
    pub w: BufRef,
    /// int32, one per output channel.
    pub bias: Option<BufRef>,
    /// One value.
    pub x_zero: Option<BufRef>,
    /// One value, or one per output channel (`true`).
    pub w_zero: Option<(BufRef, bool)>,
    /// QLinearConv's requantization; `None`: the int32 sums are the output (ConvInteger).
    pub requant: Option<Requant>,
}

/// A matrix product M x K by K x N as the shader's 1x1 convolution of one image of M pixels
/// (its MatMul layout reads A and B row major and writes Y as M x N).
pub fn matmul_shape(m: usize, k: usize, n: usize) -> ConvShape {
    use crate::window::geometry::Axis;
    ConvShape {
        n: 1,
        c: k,
        oc: n,
        group: 1,
        axes: vec![Axis {
            input: m,
            output: m,
            kernel: 1,
            stride: 1,
            dilation: 1,
            pad_begin: 0,
            pad_end: 0,
        }],
    }
}

/// How the shader reads its operands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// x N x C x spatial, w OC x C/group x taps: a convolution.
    Conv,
    /// [`matmul_shape`]'s: A M x K and B K x N, row major.
    MatMul,
    /// A M x K, B N x K (Gemm's transB): B's rows read as a 1x1 convolution's weights.
    MatMulBt,
}

#[derive(Debug, Clone)]
pub struct Requant {
    /// f32 scales: x's (one value), w's (one, or one per output channel: `true`), y's.
    pub x_scale: BufRef,
    pub w_scale: (BufRef, bool),
    pub y_scale: BufRef,
    pub y_zero: Option<BufRef>,
    pub y_signed: bool,
}

const F_REQUANT: u32 = 1;
const F_Y_SIGNED: u32 = 2;
const F_WZ_PER: u32 = 4;
const F_SB_PER: u32 = 8;
const F_TAP_MAJOR: u32 = 16;
const F_MATMUL: u32 = 32;
const F_B_NK: u32 = 64;

fn variant(x_signed: bool, w_signed: bool, dot: bool) -> conv_q8::Variant {
    use conv_q8::Variant as V;
    match (x_signed, w_signed, dot) {
        (false, false, false) => V::Uu,
        (false, true, false) => V::Us,
        (true, false, false) => V::Su,
        (true, true, false) => V::Ss,
        (false, false, true) => V::UuDot,
        (false, true, true) => V::UsDot,
        (true, false, true) => V::SuDot,
        (true, true, true) => V::SsDot,
    }
}

/// Split-K by the GEMMs' rule (ops/splitk.rs), in conv_q8.comp's steps of 32: the rule
/// counts steps of 16, so it is given half of K and its slice doubled.
fn slices(tiles: usize, k: usize, y_len: usize, mode: SplitK) -> (usize, usize) {
    match split_k(tiles, k.div_ceil(2), y_len, mode) {
        (1, _) => (1, k),
        (n, half) => (n, 2 * half),
    }
}

/// The kernel, or `None` past the shader's 32-bit indexing. For the MatMul layouts `s` is
/// [`matmul_shape`]'s.
pub fn kernel(
    s: &ConvShape,
    io: &Io,
    (dot, layout): (bool, Layout),
    mode: SplitK,
) -> Option<GpuKernel> {
    let matmul = layout != Layout::Conv;
    let x_len = s.n * s.c * s.in_plane();
    let w_len = s.oc * s.cg() * s.kernel_volume();
    let y_len = s.n * s.oc * s.out_plane();
    if [x_len, w_len, y_len].iter().any(|&l| l > MAX_ELEMS) || y_len == 0 {
        return None;
    }
    let tiles_m = (s.n * s.out_plane()).div_ceil(TILE_M);
    let tiles_n = s.ocg().div_ceil(TILE_N);
    let tiles = tiles_m * tiles_n * s.group;
    let (splits, k_slice) = slices(tiles, s.cg() * s.kernel_volume(), y_len, mode);
    let mut table = geometry_table(s, tiles_m, tiles_n, splits, k_slice);
    let zero = || BufRef::Table(vec![0]);
    let mut flags = 0;
    if io.w_zero.as_ref().is_some_and(|(_, per)| *per) {
        flags |= F_WZ_PER;
    }
    // Words of four channels under one tap (see the shader): one window decomposition per
    // word, 1x1 kernels included.
    if matmul {
        flags |= F_MATMUL;
        if layout == Layout::MatMulBt {
            flags |= F_B_NK;
        }
    } else if s.cg().is_multiple_of(4) {
        flags |= F_TAP_MAJOR;
    }
    let (sa, sb, sy, yz) = match &io.requant {
        Some(r) => {
            flags |= F_REQUANT;
            if r.y_signed {
                flags |= F_Y_SIGNED;
            }
            if r.w_scale.1 {
                flags |= F_SB_PER;
            }
            (
                r.x_scale.clone(),
                r.w_scale.0.clone(),
                r.y_scale.clone(),
                r.y_zero.clone().unwrap_or_else(zero),
            )
        }
        None => (zero(), zero(), zero(), zero()),
    };
    table.push(flags);
    let out = if splits > 1 {
        BufRef::Scratch(0)
    } else {
        BufRef::Output(0)
    };
    let gemm = Dispatch::new(
        variant(io.x_signed, io.w_signed, dot),
        conv_q8::Buffers {
            x: io.x.clone(),
            w: io.w.clone(),
            b: io
                .bias
                .clone()
                .unwrap_or_else(|| BufRef::Table(vec![0; s.oc])),
            xz: io.x_zero.clone().unwrap_or_else(zero),
            wz: io.w_zero.as_ref().map_or_else(zero, |(b, _)| b.clone()),
            yz: yz.clone(),
            sa: sa.clone(),
            sb: sb.clone(),
            sy: sy.clone(),
            y: out,
            t: BufRef::Table(table),
        },
        conv_q8::Params {},
        // One workgroup per (slice, tile); groups_1d folds the count into y past 65,535.
        groups_1d(tiles * splits * 256, 256),
    );
    if splits == 1 {
        return Some(GpuKernel {
            scratch: vec![],
            dispatches: vec![gemm],
        });
    }
    let reduce = Dispatch::new(
        conv_q8_reduce::Variant::Main,
        conv_q8_reduce::Buffers {
            part: BufRef::Scratch(0),
            sa,
            sb,
            sy,
            yz,
            y: BufRef::Output(0),
        },
        conv_q8_reduce::Params {
            n: y_len as u32,
            splits: splits as u32,
            // Y's channel of element i is (i / plane) % oc: columns are innermost in M x N.
            plane: if matmul { 1 } else { s.out_plane() as u32 },
            oc: s.oc as u32,
            flags,
        },
        groups_1d(y_len, 256),
    );
    Some(GpuKernel {
        scratch: vec![(splits * y_len * 4) as u64],
        dispatches: vec![gemm, reduce],
    })
}
