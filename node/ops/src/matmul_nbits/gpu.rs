//! MatMulNBits on the GPU: for up to [`GEMV_ROWS`] rows of A (decode) matmul_nbits_gemv4.comp
//! where the weights have the usual int4 layout (16-byte loads of whole 32-value pieces of a
//! block) and matmul_nbits_gemv.comp otherwise (a 32-bit word at a time), and
//! matmul_nbits_gemm.comp's 64 x 64 tiles past that (prefill). All read B as the packed words
//! it is stored in and share one push-constant block (shaders/matmul_nbits.glsl).

use super::{B, BIAS, Geometry, SCALES, ZERO_POINTS, ZeroPoints};
use crate::tensor::DType;
use crate::{BufRef, Dispatch, GpuKernel};
use vkml_shaders::{matmul_nbits_gemm, matmul_nbits_gemv, matmul_nbits_gemv4};

/// Rows of A up to which the GEMV kernel runs: it reads B once per 4 rows (a workgroup's z),
/// where the tiled kernel reads it once per 64 but with 64 times fewer workgroups at this
/// size, too few to keep a large GPU's memory busy.
const GEMV_ROWS: usize = 4;
/// Rows of A one GEMV workgroup covers (ROWS in the shader).
const GEMV_GROUP_ROWS: usize = 4;
/// Columns of Y one GEMV workgroup computes (COLS in the shader).
const GEMV_COLS: usize = 8;
/// The tiled kernel's output tile (both ways).
const TILE: usize = 64;
const MAX_GROUPS: usize = 65_535;

/// The kernel for a checked product, or `None` when an index it forms would not fit 32 bits
/// or A is not f32 or f16 (bf16 stays on the CPU).
pub fn kernel(g: &Geometry) -> Option<GpuKernel> {
    let half = match g.dtype {
        DType::F32 => false,
        DType::F16 => true,
        _ => return None,
    };
    // Every index the shaders form: A's, Y's, B's bytes (more than its words), the scales'
    // (more than the packed zero points' bytes).
    for size in [
        g.m.checked_mul(g.k)?,
        g.m.checked_mul(g.n)?,
        g.n.checked_mul(g.row_bytes())?,
        g.n.checked_mul(g.k_blocks)?,
    ] {
        u32::try_from(size).ok()?;
    }
    if g.m == 0 || g.n == 0 {
        return Some(GpuKernel {
            scratch: vec![],
            dispatches: vec![],
        });
    }
    let (zp_mode, zpq, zpf, zp_row_bytes) = match g.zp {
        // Stand-ins: present buffers the flags keep the shaders from reading.
        ZeroPoints::Default => (0, BufRef::Input(B), BufRef::Input(SCALES), 0),
        ZeroPoints::Packed { row_bytes } => (
            1,
            BufRef::Input(ZERO_POINTS),
            BufRef::Input(SCALES),
            row_bytes,
        ),
        ZeroPoints::Float => (2, BufRef::Input(B), BufRef::Input(ZERO_POINTS), 0),
    };
    let bias = if g.bias {
        BufRef::Input(BIAS)
    } else {
        BufRef::Input(SCALES)
    };
    let params = Words {
        m: g.m as u32,
        n: g.n as u32,
        k: g.k as u32,
        k_blocks: g.k_blocks as u32,
        row_words: (g.row_bytes() / 4) as u32,
        bits: g.bits as u32,
        block: g.block as u32,
        zp_row_bytes: zp_row_bytes as u32,
        flags: zp_mode | u32::from(g.bias) << 2,
    };
    let buffers = [
        BufRef::Input(super::A),
        BufRef::Input(B),
        BufRef::Input(SCALES),
        zpq,
        zpf,
        bias,
        BufRef::Output(0),
    ];
    let dispatch = if g.m <= GEMV_ROWS && gemv4_fits(g) {
        gemv4(half, buffers, params, g)?
    } else if g.m <= GEMV_ROWS {
        gemv(half, buffers, &params, g)?
    } else {
        gemm(half, buffers, &params, g)?
    };
    Some(GpuKernel {
        scratch: vec![],
        dispatches: vec![dispatch],
    })
}

/// The shared push constants after the buffers.
struct Words {
    m: u32,
    n: u32,
    k: u32,
    k_blocks: u32,
    row_words: u32,
    bits: u32,
    block: u32,
    zp_row_bytes: u32,
    flags: u32,
}

/// One module's `Params` and `Buffers` from the shared ones (the two shaders' blocks are the
/// same include, so the fields match by construction).
macro_rules! module_dispatch {
    ($module:ident, $variant:expr, $b:expr, $w:expr, $groups:expr) => {{
        let [a, b, scales, zpq, zpf, bias, y] = $b;
        let w = $w;
        Dispatch::new(
            $variant,
            $module::Buffers {
                a,
                b,
                scales,
                zpq,
                zpf,
                bias,
                y,
            },
            $module::Params {
                M: w.m,
                N: w.n,
                K: w.k,
                kBlocks: w.k_blocks,
                rowWords: w.row_words,
                bits: w.bits,
                blockSize: w.block,
                zpRowBytes: w.zp_row_bytes,
                flags: w.flags,
            },
            $groups,
        )
    }};
}

/// A GEMV kernel's grid: `cols` columns a workgroup, the column groups folded into y past
/// [`MAX_GROUPS`], [`GEMV_GROUP_ROWS`] rows of A a workgroup along z.
fn gemv_grid(g: &Geometry, cols: usize) -> Option<[u32; 3]> {
    let groups = g.n.div_ceil(cols);
    let gy = groups.div_ceil(MAX_GROUPS);
    let gx = groups.div_ceil(gy);
    let gz = g.m.div_ceil(GEMV_GROUP_ROWS);
    Some([gx as u32, u32::try_from(gy).ok()?, u32::try_from(gz).ok()?])
}

fn gemv(half: bool, b: [BufRef; 7], w: &Words, g: &Geometry) -> Option<Dispatch> {
    let grid = gemv_grid(g, GEMV_COLS)?;
    let variant = if half {
        matmul_nbits_gemv::Variant::F16
    } else {
        matmul_nbits_gemv::Variant::F32
    };
    Some(module_dispatch!(matmul_nbits_gemv, variant, b, w, grid))
}

/// Whether matmul_nbits_gemv4.comp takes `g`: 4-bit values, blocks of a multiple of 32 (so a
/// 16-byte piece lies in one block, and rows of B start 16-byte aligned) and K a multiple of
/// 32 (no partial piece; A's rows 16-byte aligned).
fn gemv4_fits(g: &Geometry) -> bool {
    g.bits == 4 && g.block.is_multiple_of(32) && g.k.is_multiple_of(32)
}

/// Invocations per column of matmul_nbits_gemv4.comp for K: enough that each reads about
/// four 16-byte pieces of its row, between 8 and 32.
fn gemv4_lanes(k: usize) -> usize {
    match k / 32 / 4 {
        l if l >= 32 => 32,
        l if l >= 16 => 16,
        _ => 8,
    }
}

fn gemv4(half: bool, b: [BufRef; 7], mut w: Words, g: &Geometry) -> Option<Dispatch> {
    let lanes = gemv4_lanes(g.k);
    w.flags |= (lanes as u32) << 3;
    let grid = gemv_grid(g, 256 / lanes)?;
    let variant = if half {
        matmul_nbits_gemv4::Variant::F16
    } else {
        matmul_nbits_gemv4::Variant::F32
    };
    Some(module_dispatch!(matmul_nbits_gemv4, variant, b, &w, grid))
}

fn gemm(half: bool, b: [BufRef; 7], w: &Words, g: &Geometry) -> Option<Dispatch> {
    let (gx, gy) = (g.n.div_ceil(TILE), g.m.div_ceil(TILE));
    if gx > MAX_GROUPS || gy > MAX_GROUPS {
        return None;
    }
    let variant = if half {
        matmul_nbits_gemm::Variant::F16
    } else {
        matmul_nbits_gemm::Variant::F32
    };
    Some(module_dispatch!(
        matmul_nbits_gemm,
        variant,
        b,
        w,
        [gx as u32, gy as u32, 1]
    ))
}
