//! MatMul and Gemm on the GPU: one product described once ([`GpuGemm`]) and turned into the
//! dispatches of gemm.comp / gemm_big.comp (f32), gemm_simple.comp (f16), a split-K pair
//! (splitk.rs) or a tensor-core kernel (coop.rs), all sharing gemm.comp's push constants.

use super::Strided;
use super::gemv;
use super::splitk;
use crate::elementwise::collapse;
use crate::splitk::split_k;
use crate::tensor::{DType, numel};
use crate::tuning::{GemmTiles, KernelTuning};
use crate::{BufRef, Dispatch, GpuKernel};
use vkml_shaders::{gemm, gemm_big, gemm_coop, gemm_coop_any, gemm_coop2, gemm_simple};

/// Output tile of one workgroup of `gemm.comp` (both M and N).
const TILE: usize = 64;
/// Batch axes `gemm.comp` walks.
const GPU_BATCH_RANK: usize = 3;

/// Everything `gemm.comp` needs to know about one product.
#[derive(Debug, Clone)]
pub(super) struct GpuGemm {
    /// f16 tensors: gemm_simple.comp's variant rather than gemm.comp.
    pub(super) half: bool,
    /// A tensor-core kernel (coop.rs) in place of both, with its tile's rows and columns.
    pub(super) coop: Option<(GemmKernel, usize, usize)>,
    pub(super) m: usize,
    pub(super) n: usize,
    pub(super) k: usize,
    pub(super) a: Strided,
    pub(super) b: Strided,
    pub(super) batch: Vec<usize>,
    pub(super) a_batch: Vec<usize>,
    pub(super) b_batch: Vec<usize>,
    /// C's row and column strides over (M, N), when there is a C term.
    pub(super) c: Option<(usize, usize)>,
    pub(super) alpha: f32,
    pub(super) beta: f32,
    /// Elements of A, B and Y, so that every index the shader forms is known to fit 32 bits.
    pub(super) sizes: [usize; 3],
}

/// Most dispatches one product may take (one per index of the batch axes beyond three).
const MAX_DISPATCHES: usize = 4096;

/// A kernel of the GEMM family. Their shaders share gemm.comp's push constants (buffers a, b,
/// c, y, then [`GemmParams`]), so one description of a product fits every one of them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum GemmKernel {
    /// gemm.comp: 64 x 64 tiles, f32.
    Tiled,
    /// gemm_big.comp: 128 x 128 tiles, f32.
    Big,
    /// gemm_simple.comp: f16 in float arithmetic.
    Simple,
    /// Tensor cores (coop.rs).
    Coop(gemm_coop::Variant),
    Coop2(gemm_coop2::Variant),
    CoopAny(gemm_coop_any::Variant),
}

/// gemm.comp's parameters after its four buffers, shared by the whole family. Batch index z
/// (workgroup z) splits as ((i0 * nb1) + i1) * nb2 + i2.
#[allow(non_snake_case)] // the shaders' names
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct GemmParams {
    pub M: u32,
    pub N: u32,
    pub K: u32,
    pub nb1: u32,
    pub nb2: u32,
    pub rsA: u32,
    pub csA: u32,
    pub bA0: u32,
    pub bA1: u32,
    pub bA2: u32,
    pub rsB: u32,
    pub csB: u32,
    pub bB0: u32,
    pub bB1: u32,
    pub bB2: u32,
    pub rsC: u32,
    pub csC: u32,
    pub alpha: f32,
    pub beta: f32,
    pub has_c: u32,
    pub offA: u32,
    pub offB: u32,
    pub offY: u32,
}

/// `GemmParams` as the `Params` of one shader module, field by field (so a shader whose
/// parameters drift from gemm.comp's stops compiling here).
macro_rules! family_params {
    ($module:ident, $p:expr) => {{
        let p = $p;
        $module::Params {
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
            rsC: p.rsC,
            csC: p.csC,
            alpha: p.alpha,
            beta: p.beta,
            has_c: p.has_c,
            offA: p.offA,
            offB: p.offB,
            offY: p.offY,
        }
    }};
}

/// The family's buffers in one shader module's type.
macro_rules! family_buffers {
    ($module:ident, [$a:expr, $b:expr, $c:expr, $y:expr]) => {
        $module::Buffers {
            a: $a,
            b: $b,
            c: $c,
            y: $y,
        }
    };
}

impl GemmKernel {
    /// One dispatch over A, B, C and Y.
    fn dispatch(self, b: [BufRef; 4], p: &GemmParams, groups: [u32; 3]) -> Dispatch {
        let [a, bb, c, y] = b;
        match self {
            GemmKernel::Tiled => Dispatch::new(
                gemm::Variant::F32,
                family_buffers!(gemm, [a, bb, c, y]),
                family_params!(gemm, p),
                groups,
            ),
            GemmKernel::Big => Dispatch::new(
                gemm_big::Variant::Main,
                family_buffers!(gemm_big, [a, bb, c, y]),
                family_params!(gemm_big, p),
                groups,
            ),
            GemmKernel::Simple => Dispatch::new(
                gemm_simple::Variant::F16,
                family_buffers!(gemm_simple, [a, bb, c, y]),
                family_params!(gemm_simple, p),
                groups,
            ),
            GemmKernel::Coop(v) => Dispatch::new(
                v,
                family_buffers!(gemm_coop, [a, bb, c, y]),
                family_params!(gemm_coop, p),
                groups,
            ),
            GemmKernel::Coop2(v) => Dispatch::new(
                v,
                family_buffers!(gemm_coop2, [a, bb, c, y]),
                family_params!(gemm_coop2, p),
                groups,
            ),
            GemmKernel::CoopAny(v) => Dispatch::new(
                v,
                family_buffers!(gemm_coop_any, [a, bb, c, y]),
                family_params!(gemm_coop_any, p),
                groups,
            ),
        }
    }
}

/// The GEMM kernel for an M x N product repeated `batch` times, and its tile size. gemm_big's
/// 128x128 tiles do twice the arithmetic per shared-memory read of gemm's 64x64 ones, but a
/// product needs enough of them to fill a large GPU (an H100 has 132 multiprocessors), so
/// smaller products keep the smaller tiles, unless `tiles` says otherwise.
fn tiled_kernel(m: usize, n: usize, batch: usize, tiles: GemmTiles) -> (GemmKernel, usize) {
    let big_tiles = m.div_ceil(128) * n.div_ceil(128) * batch;
    match tiles {
        GemmTiles::Big => (GemmKernel::Big, 128),
        GemmTiles::Small => (GemmKernel::Tiled, TILE),
        GemmTiles::Auto if big_tiles >= 256 => (GemmKernel::Big, 128),
        GemmTiles::Auto => (GemmKernel::Tiled, TILE),
    }
}

/// The kernel every GPU can run for a described product: gemv.comp for a few rows of f32 or
/// f16 (gemv.rs), else gemm.comp's family for f32 and f16; none for bf16, which has only the
/// tensor-core kernels (coop.rs).
pub(super) fn plain_kernel((dtype, g): (DType, GpuGemm), t: &KernelTuning) -> Option<GpuKernel> {
    if gemv::applies(dtype, &g, t.gemv) {
        return gemv::kernel(dtype, &g, t.gemv);
    }
    (dtype != DType::BF16).then(|| gemm_kernel(&g, t)).flatten()
}

/// The dispatches of one product ([`GemmParams`]). Batch axes beyond the innermost three
/// (after collapsing) become separate dispatches, each with its own offsets of its first A,
/// B and Y matrices.
pub(super) fn gemm_kernel(g: &GpuGemm, t: &KernelTuning) -> Option<GpuKernel> {
    let word = |v: usize| u32::try_from(v).ok();
    if g.sizes.iter().any(|&s| word(s).is_none()) {
        return None;
    }
    let lay = collapse(&g.batch, &[g.a_batch.clone(), g.b_batch.clone()]);
    let r = lay.dims.len();
    let split = r.saturating_sub(GPU_BATCH_RANK);
    let pad = GPU_BATCH_RANK.saturating_sub(r);
    let inner = |v: &[usize], fill: usize| -> Vec<usize> {
        let mut p = vec![fill; pad];
        p.extend_from_slice(&v[split..]);
        p
    };
    let (dims, sa, sb) = (
        inner(&lay.dims, 1),
        inner(&lay.strides[0], 0),
        inner(&lay.strides[1], 0),
    );
    let (rc, cc) = g.c.unwrap_or((0, 0));
    let params = GemmParams {
        M: word(g.m)?,
        N: word(g.n)?,
        K: word(g.k)?,
        nb1: word(dims[1])?,
        nb2: word(dims[2])?,
        rsA: word(g.a.rs)?,
        csA: word(g.a.cs)?,
        bA0: word(sa[0])?,
        bA1: word(sa[1])?,
        bA2: word(sa[2])?,
        rsB: word(g.b.rs)?,
        csB: word(g.b.cs)?,
        bB0: word(sb[0])?,
        bB1: word(sb[1])?,
        bB2: word(sb[2])?,
        rsC: word(rc)?,
        csC: word(cc)?,
        alpha: g.alpha,
        beta: g.beta,
        has_c: u32::from(g.c.is_some()),
        offA: 0,
        offB: 0,
        offY: 0,
    };
    let (kernel, tile) = if let Some((kernel, tm, tn)) = g.coop {
        (kernel, (tm, tn))
    } else if g.half {
        (GemmKernel::Simple, (TILE, TILE))
    } else {
        let batch = numel(&dims) * numel(&lay.dims[..split]);
        let (kernel, tile) = tiled_kernel(g.m, g.n, batch, t.gemm_tiles);
        (kernel, (tile, tile))
    };
    let groups = [g.n.div_ceil(tile.1), g.m.div_ceil(tile.0), numel(&dims)];
    if groups.iter().any(|&v| v > 65_535) {
        return None;
    }
    let lead = &lay.dims[..split];
    let count = numel(lead);
    if groups.contains(&0) || count == 0 {
        // An empty output: nothing to compute.
        return Some(GpuKernel {
            scratch: vec![],
            dispatches: vec![],
        });
    }
    if count > MAX_DISPATCHES {
        return None;
    }
    // One dispatch of small tiles that cannot fill the GPU: split K (splitk.rs).
    if count == 1 && kernel == GemmKernel::Tiled {
        let (splits, k_slice) = split_k(
            groups[0] * groups[1] * groups[2],
            g.k,
            groups[2] * g.m * g.n,
            t.gemm_splitk,
        );
        if splits > 1 && groups[2] * splits <= 65_535 {
            return Some(splitk::kernel(g, &params, groups, splits, k_slice));
        }
    }
    let mut dispatches = Vec::with_capacity(count);
    for z in 0..count {
        let (mut oa, mut ob, mut rem) = (0, 0, z);
        for ax in (0..split).rev() {
            let i = rem % lead[ax];
            rem /= lead[ax];
            oa += i * lay.strides[0][ax];
            ob += i * lay.strides[1][ax];
        }
        let oy = z * groups[2] * g.m * g.n;
        let p = GemmParams {
            offA: word(oa)?,
            offB: word(ob)?,
            offY: word(oy)?,
            ..params
        };
        // Without a C term the shader never reads its C buffer; A stands in for it.
        let buffers = [
            BufRef::Input(0),
            BufRef::Input(1),
            BufRef::Input(if g.c.is_some() { 2 } else { 0 }),
            BufRef::Output(0),
        ];
        dispatches.push(kernel.dispatch(buffers, &p, groups.map(|v| v as u32)));
    }
    Some(GpuKernel {
        scratch: vec![],
        dispatches,
    })
}

/// One batched product on the GPU for other ops (Einsum): `Y[batch..., M, N]` (dense) is
/// `A x B`, A's element (i, p) of batch index `z` at `z . a_batch + i * a.0 + p * a.1`, B's
/// (p, j) at `z . b_batch + p * b.0 + j * b.1` (0 strides broadcast). `sizes`: the elements of
/// A, B and Y. `half`: f16 tensors.
#[allow(clippy::too_many_arguments)]
pub(crate) fn strided_gemm_kernel(
    half: bool,
    (m, n, k): (usize, usize, usize),
    a: (usize, usize),
    b: (usize, usize),
    batch: Vec<usize>,
    a_batch: Vec<usize>,
    b_batch: Vec<usize>,
    sizes: [usize; 3],
) -> Option<GpuKernel> {
    gemm_kernel(
        &GpuGemm {
            half,
            coop: None,
            m,
            n,
            k,
            a: Strided {
                off: 0,
                rs: a.0,
                cs: a.1,
            },
            b: Strided {
                off: 0,
                rs: b.0,
                cs: b.1,
            },
            batch,
            a_batch,
            b_batch,
            c: None,
            alpha: 1.0,
            beta: 0.0,
            sizes,
        },
        // Einsum follows the shape rules: the tuning knobs are MatMul's, Gemm's and Conv's.
        &KernelTuning::default(),
    )
}
