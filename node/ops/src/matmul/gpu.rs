//! MatMul and Gemm on the GPU: one product described once ([`GpuGemm`]) and turned into the
//! dispatches of gemm.comp / gemm_big.comp (f32), gemm_simple.comp (f16), a split-K pair
//! (splitk.rs) or a tensor-core kernel (coop.rs), all sharing gemm.comp's push constants.

use super::Strided;
use super::splitk;
use crate::elementwise::collapse;
use crate::splitk::split_k;
use crate::tensor::{DType, numel};
use crate::{BufRef, Dispatch, GpuKernel};

/// Output tile of one workgroup of `gemm.comp` (both M and N).
const TILE: usize = 64;
/// Batch axes `gemm.comp` walks.
const GPU_BATCH_RANK: usize = 3;

/// Everything `gemm.comp` needs to know about one product.
#[derive(Debug, Clone)]
pub(super) struct GpuGemm {
    /// f16 tensors: gemm_simple.comp's variant rather than gemm.comp.
    pub(super) half: bool,
    /// A tensor-core shader (coop.rs) in place of both, with its tile's rows and columns.
    pub(super) coop: Option<(&'static str, usize, usize)>,
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

/// The GEMM kernel for an M x N product repeated `batch` times, and its tile size. gemm_big's
/// 128x128 tiles do twice the arithmetic per shared-memory read of gemm's 64x64 ones, but a
/// product needs enough of them to fill a large GPU (an H100 has 132 multiprocessors), so
/// smaller products keep the smaller tiles. `VKML_GEMM_KERNEL=gemm|gemm_big` overrides the
/// choice, for benchmarks (read once).
fn gemm_shader(m: usize, n: usize, batch: usize) -> (&'static str, usize) {
    static FORCED: std::sync::OnceLock<Option<&'static str>> = std::sync::OnceLock::new();
    let forced = FORCED.get_or_init(|| match std::env::var("VKML_GEMM_KERNEL").as_deref() {
        Ok("gemm") => Some("gemm"),
        Ok("gemm_big") => Some("gemm_big"),
        _ => None,
    });
    let big_tiles = m.div_ceil(128) * n.div_ceil(128) * batch;
    match forced {
        Some("gemm_big") => ("gemm_big", 128),
        Some(_) => ("gemm_f32", TILE),
        None if big_tiles >= 256 => ("gemm_big", 128),
        None => ("gemm_f32", TILE),
    }
}

/// The kernel every GPU can run for a described product: gemm.comp's family for f32 and f16;
/// none for bf16, which has only the tensor-core kernels (coop.rs).
pub(super) fn plain_kernel((dtype, g): (DType, GpuGemm)) -> Option<GpuKernel> {
    (dtype != DType::BF16).then(|| gemm_kernel(&g)).flatten()
}

/// The dispatches of one product. Push-constant words of `gemm.comp` (and of the kernels
/// sharing its layout), after its four buffer addresses (A, B, C, Y): M, N, K, nb1, nb2, A's
/// rs, cs and three batch strides, the same for B, C's rs and cs, alpha, beta, has_c, then the
/// element offsets of this dispatch's first A, B and Y matrices. Batch index z (workgroup z)
/// splits as ((i0 * nb1) + i1) * nb2 + i2. Batch axes beyond the innermost three (after
/// collapsing) become separate dispatches, each with its own offsets.
pub(super) fn gemm_kernel(g: &GpuGemm) -> Option<GpuKernel> {
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
    let words = [
        g.m, g.n, g.k, dims[1], dims[2], g.a.rs, g.a.cs, sa[0], sa[1], sa[2], g.b.rs, g.b.cs,
        sb[0], sb[1], sb[2], rc, cc,
    ];
    let mut params = words
        .iter()
        .map(|&v| word(v))
        .collect::<Option<Vec<u32>>>()?;
    params.extend([
        g.alpha.to_bits(),
        g.beta.to_bits(),
        u32::from(g.c.is_some()),
    ]);
    let (shader, tile) = if let Some((shader, tm, tn)) = g.coop {
        (shader, (tm, tn))
    } else if g.half {
        ("gemm_simple_f16", (TILE, TILE))
    } else {
        let (shader, tile) = gemm_shader(g.m, g.n, numel(&dims) * numel(&lay.dims[..split]));
        (shader, (tile, tile))
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
    if count == 1 && shader == "gemm_f32" {
        let (splits, k_slice) = split_k(
            groups[0] * groups[1] * groups[2],
            g.k,
            groups[2] * g.m * g.n,
            splitk::gemm_mode(),
        );
        if splits > 1 && groups[2] * splits <= 65_535 {
            return Some(splitk::kernel(g, params, groups, splits, k_slice));
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
        let mut p = params.clone();
        p.extend([word(oa)?, word(ob)?, word(oy)?]);
        dispatches.push(Dispatch {
            shader,
            // Without a C term the shader never reads its C buffer; A stands in for it.
            buffers: vec![
                BufRef::Input(0),
                BufRef::Input(1),
                BufRef::Input(if g.c.is_some() { 2 } else { 0 }),
                BufRef::Output(0),
            ],
            params: p,
            groups: groups.map(|v| v as u32),
        });
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
    gemm_kernel(&GpuGemm {
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
    })
}
