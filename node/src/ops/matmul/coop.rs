//! The tensor-core kernels for f16 and bf16 products: shaders/gemm_coop2.comp (NV cooperative
//! matrix 2) and shaders/gemm_coop.comp (KHR cooperative matrix), offered as
//! [`Op::gpu_preferred`](crate::ops::Op::gpu_preferred) kernels so each GPU takes the best it
//! has and every other device keeps gemm_simple (f16) or the CPU (bf16). Both accumulate in
//! f32, like the CPU reference, and round once to the operands' type.
//!
//! `VKML_GEMM_COOP=off|khr|nv2|nv2wide|nv2narrow` limits the choice, for benchmarks and A/B
//! checks (read once).

use std::sync::OnceLock;

use super::{GpuGemm, gemm_kernel};
use crate::ops::GpuKernel;
use crate::tensor::DType;

/// Output tile (rows, columns) of one workgroup of gemm_coop, and of gemm_coop2's two tile
/// shapes: 128x256 where the product has enough of them to fill a large GPU (an H100 has 132
/// multiprocessors), else 128x128.
const TILE_KHR: (usize, usize) = (128, 128);
const TILE_NV2: (usize, usize) = (128, 128);
const TILE_NV2_WIDE: (usize, usize) = (128, 256);

/// Below this many multiply-adds a product is too small to pay for 128x128 tiles; the
/// ordinary kernels take it.
const MIN_WORK: usize = 1 << 18;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum Mode {
    Both,
    Khr,
    Nv2,
    /// NV2 with the wide or the narrow tiles whatever the size (benchmarks).
    Nv2Wide,
    Nv2Narrow,
    Off,
}

fn mode() -> Mode {
    static MODE: OnceLock<Mode> = OnceLock::new();
    *MODE.get_or_init(|| match std::env::var("VKML_GEMM_COOP").as_deref() {
        Ok("off") => Mode::Off,
        Ok("khr") => Mode::Khr,
        Ok("nv2") => Mode::Nv2,
        Ok("nv2wide") => Mode::Nv2Wide,
        Ok("nv2narrow") => Mode::Nv2Narrow,
        _ => Mode::Both,
    })
}

/// The tensor-core kernels for `g` (best first), or none when the operands are not f16/bf16,
/// the product is small, or an operand is strided along both axes (the shaders read each
/// operand as a row-major or a transposed matrix).
pub(super) fn kernels((dtype, g): (DType, GpuGemm)) -> Vec<GpuKernel> {
    kernels_in(&g, dtype, mode())
}

pub(super) fn kernels_in(g: &GpuGemm, dtype: DType, mode: Mode) -> Vec<GpuKernel> {
    let (nv2, nv2_wide, khr) = match dtype {
        DType::F16 => ("gemm_coop2_f16", "gemm_coop2_wide_f16", "gemm_coop_f16"),
        DType::BF16 => ("gemm_coop2_bf16", "gemm_coop2_wide_bf16", "gemm_coop_bf16"),
        _ => return Vec::new(),
    };
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
        Mode::Nv2Wide => true,
        Mode::Nv2Narrow => false,
        _ => wide_tiles * batch >= 256,
    };
    let (nv2, nv2_tile) = if wide {
        (nv2_wide, TILE_NV2_WIDE)
    } else {
        (nv2, TILE_NV2)
    };
    let mut out = Vec::new();
    for (shader, tile, wanted) in [
        (
            nv2,
            nv2_tile,
            matches!(
                mode,
                Mode::Both | Mode::Nv2 | Mode::Nv2Wide | Mode::Nv2Narrow
            ),
        ),
        (khr, TILE_KHR, matches!(mode, Mode::Both | Mode::Khr)),
    ] {
        if !wanted {
            continue;
        }
        let with = GpuGemm {
            coop: Some((shader, tile.0, tile.1)),
            ..g.clone()
        };
        out.extend(gemm_kernel(&with));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::Strided;
    use super::*;

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
        let names = |d, m| -> Vec<&str> {
            kernels_in(&g, d, m)
                .iter()
                .map(|k| k.dispatches[0].shader)
                .collect()
        };
        assert_eq!(
            names(DType::F16, Mode::Both),
            ["gemm_coop2_f16", "gemm_coop_f16"]
        );
        assert_eq!(
            names(DType::BF16, Mode::Both),
            ["gemm_coop2_bf16", "gemm_coop_bf16"]
        );
        assert_eq!(names(DType::F16, Mode::Khr), ["gemm_coop_f16"]);
        assert_eq!(names(DType::BF16, Mode::Nv2), ["gemm_coop2_bf16"]);
        assert!(names(DType::F16, Mode::Off).is_empty());
        assert!(names(DType::F32, Mode::Both).is_empty());
    }

    #[test]
    fn tiles_cover_the_output_and_refuse_what_the_shaders_cannot_read() {
        let g = product(300, 129, 64, row_major(64, 129));
        let k = &kernels_in(&g, DType::F16, Mode::Nv2)[0];
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
        assert!(kernels_in(&odd, DType::F16, Mode::Both).is_empty());
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
        assert_eq!(kernels_in(&t, DType::F16, Mode::Both).len(), 2);
        // Too small to pay for the tiles.
        let small = product(32, 32, 32, row_major(32, 32));
        assert!(kernels_in(&small, DType::F16, Mode::Both).is_empty());
    }
}
