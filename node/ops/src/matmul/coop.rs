//! The tensor-core kernels for f16 and bf16 products, offered as
//! [`Op::gpu_preferred`](crate::Op::gpu_preferred) kernels so each GPU takes the best it
//! has and every other device keeps gemm_simple (f16) or the CPU (bf16). All accumulate in
//! f32, like the CPU reference, and round once to the operands' type.
//!
//! - shaders/gemm_coop.comp (KHR cooperative matrix, portable): operands whose rows all start
//!   on 16-byte boundaries and M, N multiples of 16, one variant per layout pair, `exact` for
//!   whole tiles with no epilogue. The fastest everywhere it applies: 265 TFLOP/s on an H100
//!   (4096^3 f16).
//! - shaders/gemm_coop2.comp (NV cooperative matrix 2): any alignment, 70-184 TFLOP/s there.
//! - shaders/gemm_coop_any.comp (KHR): any alignment where NV2 is missing, about 30.
//!
//! `KernelTuning::gemm_coop` limits the choice, for benchmarks and A/B checks.

use super::gpu::GemmKernel;
use super::{GpuGemm, gemm_kernel};
use crate::GpuKernel;
use crate::tensor::DType;
use crate::tuning::{CoopKernels, KernelTuning};
use vkml_shaders::{gemm_coop, gemm_coop_any, gemm_coop2};

/// Output tile (rows, columns) of one workgroup of gemm_coop, and of gemm_coop2's two tile
/// shapes: 128x256 where the product has enough of them to fill a large GPU (an H100 has 132
/// multiprocessors), else 128x128.
const TILE_KHR: (usize, usize) = (128, 128);
/// gemm_coop's step along K: its `exact` variants need K a multiple of it.
const KHR_DEPTH: usize = 32;
const TILE_NV2: (usize, usize) = (128, 128);
const TILE_NV2_WIDE: (usize, usize) = (128, 256);

/// Below this many multiply-adds a product is too small to pay for 128x128 tiles; the
/// ordinary kernels take it.
const MIN_WORK: usize = 1 << 18;

/// The tensor-core kernels for `g` (best first), or none when the operands are not f16/bf16,
/// the product is small, or an operand is strided along both axes (the shaders read each
/// operand as a row-major or a transposed matrix).
pub(super) fn kernels((dtype, g): (DType, GpuGemm), tuning: &KernelTuning) -> Vec<GpuKernel> {
    // A few rows read B once through gemv.comp, faster than any tile (gemv.rs).
    if super::gemv::applies(dtype, &g, tuning.gemv) {
        return Vec::new();
    }
    kernels_in(&g, dtype, tuning.gemm_coop)
}

/// Whether every offset and stride of A and B is a multiple of 8 elements (16 bytes), as
/// gemm_coop2's `a8` and `exact` variants require: telling the driver so lets it move whole
/// 16-byte pieces (see the shader).
fn aligned8(g: &GpuGemm) -> bool {
    let m8 = |v: &usize| v.is_multiple_of(8);
    [g.a.off, g.b.off, g.a.rs.max(g.a.cs), g.b.rs.max(g.b.cs)]
        .iter()
        .chain(&g.a_batch)
        .chain(&g.b_batch)
        .all(m8)
}

/// gemm_coop2's variant for `g`: `exact` where every tile lies inside the output and K is a
/// multiple of the tile's depth and there is no epilogue (alpha 1, no C), `a8` where the
/// operands are 16-byte aligned, else the general one.
fn nv2_variant(g: &GpuGemm, dtype: DType, wide: bool) -> Option<gemm_coop2::Variant> {
    use gemm_coop2::Variant as V;
    let (tm, tn, depth) = if wide { (128, 256, 64) } else { (128, 128, 32) };
    let aligned = aligned8(g);
    let exact = aligned
        && g.m.is_multiple_of(tm)
        && g.n.is_multiple_of(tn)
        && g.k.is_multiple_of(depth)
        && g.alpha == 1.0
        && g.c.is_none();
    Some(match (dtype, wide, exact, aligned) {
        (DType::F16, false, true, _) => V::ExactF16,
        (DType::F16, false, false, true) => V::A8F16,
        (DType::F16, false, false, false) => V::F16,
        (DType::F16, true, true, _) => V::ExactWideF16,
        (DType::F16, true, false, true) => V::A8WideF16,
        (DType::F16, true, false, false) => V::WideF16,
        (DType::BF16, false, true, _) => V::ExactBf16,
        (DType::BF16, false, false, true) => V::A8Bf16,
        (DType::BF16, false, false, false) => V::Bf16,
        (DType::BF16, true, true, _) => V::ExactWideBf16,
        (DType::BF16, true, false, true) => V::A8WideBf16,
        (DType::BF16, true, false, false) => V::WideBf16,
        _ => return None,
    })
}

/// Whether gemm_coop takes `g`: it reads the operands 16 bytes at a time, so offsets and
/// strides must be aligned (as for gemm_coop2's `a8`) and each operand's contiguous extent a
/// multiple of 8 elements, so that no 16-byte unit straddles a row's end; and it writes whole
/// 16x16 fragments, so M and N must be multiples of 16.
fn aligned_units(g: &GpuGemm) -> bool {
    let a_extent = if g.a.cs == 1 { g.k } else { g.m };
    let b_extent = if g.b.cs == 1 { g.n } else { g.k };
    aligned8(g)
        && a_extent.is_multiple_of(8)
        && b_extent.is_multiple_of(8)
        && g.m.is_multiple_of(16)
        && g.n.is_multiple_of(16)
}

/// gemm_coop's variant for an aligned product: by layout (A, B each `n` when its last axis
/// is contiguous, else `t`), `exact` for whole 128x128x32 tiles and no epilogue.
fn khr_variant(g: &GpuGemm, dtype: DType) -> Option<gemm_coop::Variant> {
    use gemm_coop::Variant as V;
    const F16: [V; 8] = [
        V::NnF16,
        V::NtF16,
        V::TnF16,
        V::TtF16,
        V::NnExactF16,
        V::NtExactF16,
        V::TnExactF16,
        V::TtExactF16,
    ];
    const BF16: [V; 8] = [
        V::NnBf16,
        V::NtBf16,
        V::TnBf16,
        V::TtBf16,
        V::NnExactBf16,
        V::NtExactBf16,
        V::TnExactBf16,
        V::TtExactBf16,
    ];
    let variants = match dtype {
        DType::F16 => &F16,
        DType::BF16 => &BF16,
        _ => return None,
    };
    let (tm, tn) = TILE_KHR;
    let exact = g.m.is_multiple_of(tm)
        && g.n.is_multiple_of(tn)
        && g.k.is_multiple_of(KHR_DEPTH)
        && g.alpha == 1.0
        && g.c.is_none();
    let index = usize::from(g.a.cs != 1) * 2 + usize::from(g.b.cs != 1) + usize::from(exact) * 4;
    Some(variants[index])
}

pub(super) fn kernels_in(g: &GpuGemm, dtype: DType, mode: CoopKernels) -> Vec<GpuKernel> {
    let khr_any = GemmKernel::CoopAny(match dtype {
        DType::F16 => gemm_coop_any::Variant::F16,
        DType::BF16 => gemm_coop_any::Variant::Bf16,
        _ => return Vec::new(),
    });
    let unit = |rs: usize, cs: usize| rs == 1 || cs == 1;
    if !unit(g.a.rs, g.a.cs)
        || !unit(g.b.rs, g.b.cs)
        || g.m.saturating_mul(g.n).saturating_mul(g.k) < MIN_WORK
    {
        return Vec::new();
    }
    let wide_tiles = g.m.div_ceil(TILE_NV2_WIDE.0) * g.n.div_ceil(TILE_NV2_WIDE.1);
    let batch: usize = g.batch.iter().product();
    let wide = match mode {
        CoopKernels::Nv2Wide => true,
        CoopKernels::Nv2Narrow => false,
        _ => wide_tiles * batch >= 256,
    };
    let nv2_tile = if wide { TILE_NV2_WIDE } else { TILE_NV2 };
    let Some(nv2) = nv2_variant(g, dtype, wide).map(GemmKernel::Coop2) else {
        return Vec::new();
    };
    let want_nv2 = matches!(
        mode,
        CoopKernels::Any | CoopKernels::Nv2 | CoopKernels::Nv2Wide | CoopKernels::Nv2Narrow
    );
    let want_khr = matches!(mode, CoopKernels::Any | CoopKernels::Khr);
    // Aligned operands: gemm_coop first (faster than gemm_coop2 where both exist); otherwise
    // gemm_coop2, then gemm_coop_any.
    let khr = aligned_units(g).then(|| khr_variant(g, dtype)).flatten();
    let choices = match khr.map(GemmKernel::Coop) {
        Some(khr) => [(khr, TILE_KHR, want_khr), (nv2, nv2_tile, want_nv2)],
        None => [(nv2, nv2_tile, want_nv2), (khr_any, TILE_KHR, want_khr)],
    };
    let mut out = Vec::new();
    for (kernel, tile, wanted) in choices {
        if !wanted {
            continue;
        }
        let with = GpuGemm {
            coop: Some((kernel, tile.0, tile.1)),
            ..g.clone()
        };
        out.extend(gemm_kernel(&with, &KernelTuning::default()));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::Strided;
    use super::*;
    use crate::Kernel;

    fn product(m: usize, n: usize, k: usize, b: Strided) -> GpuGemm {
        GpuGemm {
            half: true,
            coop: None,
            m,
            n,
            k,
            a: Strided {
                off: 0,
                rs: k,
                cs: 1,
            },
            b,
            batch: vec![],
            a_batch: vec![],
            b_batch: vec![],
            c: None,
            alpha: 1.0,
            beta: 0.0,
            sizes: [m * k, k * n, m * n],
        }
    }

    fn row_major(k: usize, n: usize) -> Strided {
        let _ = k;
        Strided {
            off: 0,
            rs: n,
            cs: 1,
        }
    }

    #[test]
    fn picks_the_shaders_by_type_and_mode() {
        let g = product(256, 256, 256, row_major(256, 256));
        let names = |d, m| -> Vec<Kernel> {
            kernels_in(&g, d, m)
                .iter()
                .map(|k| k.dispatches[0].kernel())
                .collect()
        };
        assert_eq!(
            names(DType::F16, CoopKernels::Any),
            [
                vkml_shaders::gemm_coop::Variant::NnExactF16.kernel(),
                vkml_shaders::gemm_coop2::Variant::ExactF16.kernel()
            ]
        );
        assert_eq!(
            names(DType::BF16, CoopKernels::Any),
            [
                vkml_shaders::gemm_coop::Variant::NnExactBf16.kernel(),
                vkml_shaders::gemm_coop2::Variant::ExactBf16.kernel()
            ]
        );
        assert_eq!(
            names(DType::F16, CoopKernels::Khr),
            [vkml_shaders::gemm_coop::Variant::NnExactF16.kernel()]
        );
        assert_eq!(
            names(DType::BF16, CoopKernels::Nv2),
            [vkml_shaders::gemm_coop2::Variant::ExactBf16.kernel()]
        );
        assert!(names(DType::F16, CoopKernels::Off).is_empty());
        assert!(names(DType::F32, CoopKernels::Any).is_empty());
    }

    #[test]
    fn only_operands_aligned_to_16_bytes_get_the_aligned_shaders() {
        let first =
            |g: &GpuGemm| kernels_in(g, DType::F16, CoopKernels::Nv2)[0].dispatches[0].kernel();
        let mut g = product(256, 256, 256, row_major(256, 256));
        assert_eq!(
            first(&g),
            vkml_shaders::gemm_coop2::Variant::ExactF16.kernel()
        );
        // Whole tiles but an epilogue, or an edge tile: aligned, not exact.
        g.alpha = 2.0;
        assert_eq!(first(&g), vkml_shaders::gemm_coop2::Variant::A8F16.kernel());
        let g = product(256, 264, 256, row_major(256, 264));
        assert_eq!(first(&g), vkml_shaders::gemm_coop2::Variant::A8F16.kernel());
        let wide =
            |g: &GpuGemm| kernels_in(g, DType::F16, CoopKernels::Nv2Wide)[0].dispatches[0].kernel();
        // The wide exact tile is 128x256, 64 deep.
        let mut g = product(256, 512, 128, row_major(128, 512));
        assert_eq!(
            wide(&g),
            vkml_shaders::gemm_coop2::Variant::ExactWideF16.kernel()
        );
        g.k = 96;
        g.a.rs = 96;
        assert_eq!(
            wide(&g),
            vkml_shaders::gemm_coop2::Variant::A8WideF16.kernel()
        );
        let mut g = product(256, 256, 256, row_major(256, 256));
        // Rows of A 260 elements apart: 8 bytes off a 16-byte boundary every other row.
        g.k = 260;
        g.a.rs = 260;
        assert_eq!(first(&g), vkml_shaders::gemm_coop2::Variant::F16.kernel());
        // B starting 4 elements into its buffer.
        let mut g = product(256, 256, 256, row_major(256, 256));
        g.b.off = 4;
        assert_eq!(first(&g), vkml_shaders::gemm_coop2::Variant::F16.kernel());
        // A batch stride that is not a multiple of 8.
        let mut g = product(256, 256, 256, row_major(256, 256));
        g.batch = vec![3];
        g.a_batch = vec![256 * 256 + 4];
        g.b_batch = vec![0];
        assert_eq!(first(&g), vkml_shaders::gemm_coop2::Variant::F16.kernel());
    }

    #[test]
    fn aligned_products_take_gemm_coop_by_layout_and_the_rest_fall_back() {
        let names = |g: &GpuGemm| -> Vec<Kernel> {
            kernels_in(g, DType::F16, CoopKernels::Any)
                .iter()
                .map(|k| k.dispatches[0].kernel())
                .collect()
        };
        let transposed = |rows: usize| Strided {
            off: 0,
            rs: 1,
            cs: rows,
        };
        // B transposed (Gemm's transB): k contiguous.
        let g = product(256, 256, 256, transposed(256));
        assert_eq!(
            names(&g)[0],
            vkml_shaders::gemm_coop::Variant::NtExactF16.kernel()
        );
        // A transposed too, and an edge tile (M = 208): the variant with bounds.
        let mut g = product(208, 256, 256, transposed(256));
        g.a = transposed(208);
        assert_eq!(
            names(&g)[0],
            vkml_shaders::gemm_coop::Variant::TtF16.kernel()
        );
        // A transposed, B not, with an epilogue.
        let mut g = product(256, 256, 256, row_major(256, 256));
        g.a = transposed(256);
        g.alpha = 0.5;
        assert_eq!(
            names(&g)[0],
            vkml_shaders::gemm_coop::Variant::TnF16.kernel()
        );
        // Whole tiles but K off the 32-deep step: bounds.
        let mut g = product(256, 256, 200, row_major(200, 256));
        g.a.rs = 200;
        assert_eq!(
            names(&g),
            [
                vkml_shaders::gemm_coop::Variant::NnF16.kernel(),
                vkml_shaders::gemm_coop2::Variant::A8F16.kernel()
            ]
        );
        // A row-major with K = 260: rows off 16-byte boundaries, so NV2 then gemm_coop_any.
        let mut g = product(256, 256, 260, row_major(260, 256));
        g.a.rs = 260;
        assert_eq!(
            names(&g),
            [
                vkml_shaders::gemm_coop2::Variant::F16.kernel(),
                vkml_shaders::gemm_coop_any::Variant::F16.kernel()
            ]
        );
        // Aligned strides but a contiguous extent that is not a multiple of 8 (N = 252 with
        // B's rows 256 apart): a 16-byte unit would straddle the row's end.
        let mut g = product(256, 252, 256, row_major(256, 252));
        g.b.rs = 256;
        assert_eq!(
            names(&g),
            [
                vkml_shaders::gemm_coop2::Variant::A8F16.kernel(),
                vkml_shaders::gemm_coop_any::Variant::F16.kernel()
            ]
        );
        assert_eq!(
            kernels_in(&g, DType::F16, CoopKernels::Khr)[0].dispatches[0].kernel(),
            vkml_shaders::gemm_coop_any::Variant::F16.kernel()
        );
        // Aligned, but M = 200 would leave a partial 16x16 fragment.
        let g = product(200, 256, 256, row_major(256, 256));
        assert_eq!(
            names(&g),
            [
                vkml_shaders::gemm_coop2::Variant::A8F16.kernel(),
                vkml_shaders::gemm_coop_any::Variant::F16.kernel()
            ]
        );
    }

    #[test]
    fn tiles_cover_the_output_and_refuse_what_the_shaders_cannot_read() {
        let g = product(300, 129, 64, row_major(64, 129));
        let k = &kernels_in(&g, DType::F16, CoopKernels::Nv2)[0];
        // 129 columns and 300 rows of 128x128 tiles.
        assert_eq!(k.dispatches[0].groups, [2, 3, 1]);
        // A matrix strided along both axes (a column of a larger matrix, every other row).
        let odd = product(
            256,
            256,
            256,
            Strided {
                off: 0,
                rs: 512,
                cs: 2,
            },
        );
        assert!(kernels_in(&odd, DType::F16, CoopKernels::Any).is_empty());
        // Transposed B (Gemm's transB) is read through a view.
        let t = product(
            256,
            256,
            256,
            Strided {
                off: 0,
                rs: 1,
                cs: 256,
            },
        );
        assert_eq!(kernels_in(&t, DType::F16, CoopKernels::Any).len(), 2);
        // Too small to pay for the tiles.
        let small = product(32, 32, 32, row_major(32, 32));
        assert!(kernels_in(&small, DType::F16, CoopKernels::Any).is_empty());
    }
}
