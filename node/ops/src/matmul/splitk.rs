//! MatMul/Gemm's split-K path (the rule is ops/splitk.rs): a single dispatch of gemm.comp's
//! 64 x 64 tiles that would launch too few workgroups for a long K becomes two.
//! gemm_splitk.comp (gemm.comp's body with SPLIT_K) computes each (slice, tile) into a float
//! scratch laid out [slices][batch][M][N]; gemm_splitk_reduce.comp adds the slices in order,
//! then applies alpha, C and beta as the one-pass kernel would.

use super::GpuGemm;
use super::gpu::GemmParams;
use crate::util::groups_1d;
use crate::{BufRef, Dispatch, GpuKernel};
use vkml_shaders::{gemm_splitk, gemm_splitk_reduce};

/// The two dispatches for `g` in `splits` slices of `k_slice`. `p`: gemm.comp's parameters
/// (offsets 0: a single dispatch); `groups`: its one-pass grid. The caller has checked that
/// every value fits 32 bits, the grid's z times `splits` fits a launch and the partials stay
/// indexable (`split_k` caps them).
pub(super) fn kernel(
    g: &GpuGemm,
    p: &GemmParams,
    groups: [usize; 3],
    splits: usize,
    k_slice: usize,
) -> GpuKernel {
    let total = groups[2] * g.m * g.n;
    let gemm = Dispatch::new(
        gemm_splitk::Variant::F32,
        // C is not read in this pass; A stands in for it.
        gemm_splitk::Buffers {
            a: BufRef::Input(0),
            b: BufRef::Input(1),
            c: BufRef::Input(0),
            y: BufRef::Scratch(0),
        },
        // C's strides' places carry the slicing.
        gemm_splitk::Params {
            M: p.M,
            N: p.N,
            K: p.K,
            nb1: p.nb1,
            nb2: p.nb2,
            rsA: p.rsA,
            csA: p.csA,
            bA0: p.bA0,
            bA1: p.bA1,
            bA2: p.bA2,
            rsB: p.rsB,
            csB: p.csB,
            bB0: p.bB0,
            bB1: p.bB1,
            bB2: p.bB2,
            SPLITS: splits as u32,
            KSLICE: k_slice as u32,
            alpha: p.alpha,
            beta: p.beta,
            has_c: p.has_c,
            offA: 0,
            offB: 0,
            offY: 0,
        },
        [groups[0], groups[1], groups[2] * splits].map(|v| v as u32),
    );
    let (rc, cc) = g.c.unwrap_or((0, 0));
    let reduce = Dispatch::new(
        gemm_splitk_reduce::Variant::Main,
        gemm_splitk_reduce::Buffers {
            part: BufRef::Scratch(0),
            c: BufRef::Input(if g.c.is_some() { 2 } else { 0 }),
            y: BufRef::Output(0),
        },
        gemm_splitk_reduce::Params {
            total: total as u32,
            splits: splits as u32,
            MN: (g.m * g.n) as u32,
            N: g.n as u32,
            rsC: rc as u32,
            csC: cc as u32,
            alpha: g.alpha,
            beta: g.beta,
            has_c: u32::from(g.c.is_some()),
        },
        groups_1d(total, 256),
    );
    GpuKernel {
        scratch: vec![(splits * total * 4) as u64],
        dispatches: vec![gemm, reduce],
    }
}
