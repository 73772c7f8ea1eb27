//! MatMul of a few rows of A on the GPU (a decode step's projections): gemv.comp reads each
//! element of B once, 16 bytes at a time, in one dispatch; where K is long against N, K is
//! split over workgroups and the last of each column group adds the slices up. The GEMM
//! kernels spend most of their tiles on rows that do not exist at this size and launch too few
//! workgroups to keep the memory busy (the f16 tiles reached about 185 GB/s of an H200's
//! 4.8 TB/s in a Llama-1B-shaped decode).

use super::GpuGemm;
use crate::tensor::{DType, numel};
use crate::tuning::Gemv;
use crate::{BufRef, Dispatch, GpuKernel};
use vkml_shaders::gemv;

/// Rows of A up to which the kernel is taken: B is read once per [`GROUP_ROWS`] of them, where
/// the tiled kernels read it once per 64 or 128.
pub(super) const MAX_ROWS: usize = 4;
/// Rows of A one workgroup of the four-row kernel covers (ROWS in the shader).
const GROUP_ROWS: usize = 4;
/// Invocations of a workgroup of the four-row kernel (and of the one-row one), and of the
/// wide one.
const NARROW_THREADS: usize = 256;
const WIDE_THREADS: usize = 1024;
/// Longest row of A the wide workgroups make once into shared memory (gemv.comp's flag 16:
/// the space of their sums, THREADS * CHUNK floats).
const STAGE_A: usize = 4096;

/// The shader's workgroup shapes: four rows of A in 256 invocations, one row in 256, one
/// row in 1,024.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Block {
    Four,
    Row,
    Wide,
}

impl Block {
    fn threads(self) -> usize {
        match self {
            Block::Four | Block::Row => NARROW_THREADS,
            Block::Wide => WIDE_THREADS,
        }
    }

    fn rows(self) -> usize {
        match self {
            Block::Four => GROUP_ROWS,
            Block::Row | Block::Wide => 1,
        }
    }

    fn variant(self, dtype: DType) -> gemv::Variant {
        match (dtype, self) {
            (DType::F16, Block::Four) => gemv::Variant::F16,
            (DType::F16, Block::Row) => gemv::Variant::RowF16,
            (DType::F16, Block::Wide) => gemv::Variant::WideF16,
            (_, Block::Four) => gemv::Variant::F32,
            (_, Block::Row) => gemv::Variant::RowF32,
            (_, Block::Wide) => gemv::Variant::WideF32,
        }
    }
}
/// Vectors a wide workgroup owns under the automatic choice, and the workgroups that makes
/// from which it is taken (about eight a multiprocessor of an H100 or H200).
const WIDE_LANES: usize = 8;
const WIDE_FROM_GROUPS: usize = 1024;
/// Workgroups the automatic choice of lanes keeps at least, where it can: about one per
/// multiprocessor of a large GPU (an H100 or H200 has 132).
const MIN_GROUPS: usize = 128;
/// Rows of B one invocation reads at most under the automatic choice, where it can: past
/// that, fewer lanes (more invocations per column) win.
const MAX_ROWS_PER_INVOCATION: usize = 128;
const MAX_GROUPS: usize = 65_535;
/// Loads an invocation issues a round (UNROLL in the shader).
const UNROLL: usize = 8;
/// The automatic split: vectors a workgroup owns (a 256-byte segment of a row of f16 per
/// load of a subgroup half, or 512 bytes of a whole subgroup where B has at least
/// [`SPLIT_WIDE_GROUPS`] groups of those), the workgroups it aims at (about two a
/// multiprocessor of an H100 or H200), and the most slices.
const SPLIT_LANES: usize = 16;
const SPLIT_LANES_WIDE: usize = 32;
const SPLIT_WIDE_GROUPS: usize = 16;
const SPLIT_TARGET: usize = 256;
const MAX_SPLITS: usize = 32;
/// K at least this many times N, and at least [`DEEP_ROUNDS`] rounds of loads an invocation
/// unsplit, splits under the automatic choice (a down projection, not a small k or v).
const DEEP: usize = 3;
const DEEP_ROUNDS: usize = 4;
/// One row against at least this many vectors of B takes the wide workgroups with
/// [`WIDE_LANES`] vectors (an MLP's gate and up projections), against at least
/// [`WIDE_FROM_VECS_NARROW`] with [`WIDE_LANES_NARROW`] (q and o).
const WIDE_FROM_VECS: usize = 1024;
const WIDE_FROM_VECS_NARROW: usize = 256;
const WIDE_LANES_NARROW: usize = 4;

/// Elements of one 16-byte vector of B.
fn vec_elems(dtype: DType) -> Option<usize> {
    match dtype {
        DType::F16 => Some(8),
        DType::F32 => Some(4),
        _ => None,
    }
}

/// Whether `g` is a product gemv.comp computes: f16 or f32, at most [`MAX_ROWS`] rows, one
/// matrix (no batch), no C term or scaling, and B's rows contiguous and made of whole 16-byte
/// vectors.
pub(super) fn applies(dtype: DType, g: &GpuGemm, mode: Gemv) -> bool {
    let Some(vec) = vec_elems(dtype) else {
        return false;
    };
    mode != Gemv::Off
        && g.m <= MAX_ROWS
        && g.m > 0
        && g.k > 0
        && numel(&g.batch) == 1
        && g.c.is_none()
        && g.alpha == 1.0
        && g.b.cs == 1
        && g.b.rs.is_multiple_of(vec)
        && g.b.off.is_multiple_of(vec)
        && g.n.is_multiple_of(vec)
        && g.sizes.iter().all(|&s| u32::try_from(s).is_ok())
}

/// Column vectors per workgroup: the most (up to 8, a 128-byte segment of a row per load)
/// that leave [`MIN_GROUPS`] workgroups and at most [`MAX_ROWS_PER_INVOCATION`] rows of B per
/// invocation, else 1. On an H200 this was within 15% of the best lane count of every
/// projection of a Llama 1B and 8B decode (benches decode_matmul), where the lane count alone
/// moves a product's time by up to 4x.
fn auto_lanes(k: usize, vecs: usize) -> usize {
    [8, 4, 2]
        .into_iter()
        .find(|&l| vecs / l >= MIN_GROUPS && k * l <= NARROW_THREADS * MAX_ROWS_PER_INVOCATION)
        .unwrap_or(1)
}

/// Whether the automatic choice takes the wide workgroups, and with how many vectors: one
/// row against a B so wide that even 8 vectors a workgroup leave [`WIDE_FROM_GROUPS`] of
/// them. On an H200 they took an LLM head (N = 128,256) in 0.6x the four-row kernel's time
/// and every narrower product of a Llama 1B and 8B decode in 1.0-2x (benches
/// decode_matmul): more invocations a workgroup only pay where there are many workgroups.
fn auto_wide(m: usize, vecs: usize) -> Option<usize> {
    (m == 1 && vecs / WIDE_LANES >= WIDE_FROM_GROUPS).then_some(WIDE_LANES)
}

/// The automatic choice, (workgroup shape, vectors, K's slices), on an H200's figures
/// (benches decode_matmul, BENCHMARKS.md sessions 22 and 23): the head in wide workgroups; a
/// deep product (K >= 3N and long enough for four rounds of loads unsplit: the down
/// projection) split as [`auto_split`] says, which took 1B's from 39 to 28 us; one row
/// against a wide B (gate, up) wide, 29 -> 17 us, and against 256 vectors or more (q, o)
/// wide with 4 vectors (1-4% more tokens/s end to end); the rest (k, v, and every product
/// of more rows) whole in the four-row kernel, where splitting a 2048 x 2048 or 2048 x 512
/// product gained nothing or lost a little.
fn auto_choice(
    m: usize,
    k: usize,
    vecs: usize,
    vec: usize,
    row_groups: usize,
) -> (Block, usize, usize) {
    let unsplit = unsplit_choice(m, k, vecs);
    let (block, lanes, _) = unsplit;
    if block == Block::Wide {
        return unsplit;
    }
    if k >= DEEP * vecs * vec && k * lanes >= DEEP_ROUNDS * NARROW_THREADS * UNROLL {
        let (l, s) = auto_split(k, vecs, row_groups);
        if s > 1 {
            return (Block::Four, l, s);
        }
    }
    if m == 1 && vecs >= WIDE_FROM_VECS {
        return (Block::Wide, WIDE_LANES, 1);
    }
    if m == 1 && vecs >= WIDE_FROM_VECS_NARROW {
        return (Block::Wide, WIDE_LANES_NARROW, 1);
    }
    unsplit
}

/// The choice before K was split (`Gemv::Unsplit`): the head in wide workgroups, the rest in
/// four-row ones with [`auto_lanes`].
fn unsplit_choice(m: usize, k: usize, vecs: usize) -> (Block, usize, usize) {
    match auto_wide(m, vecs) {
        Some(l) => (Block::Wide, l, 1),
        None => (Block::Four, auto_lanes(k, vecs), 1),
    }
}

/// Vectors and K's slices of the four-row kernel under the automatic choice: [`SPLIT_LANES`]
/// ([`SPLIT_LANES_WIDE`] where B is wide enough, fewer where B has fewer vectors), and as
/// many slices as make [`SPLIT_TARGET`] workgroups, up to [`MAX_SPLITS`] and at least a round
/// of loads an invocation. In a Llama-8B-shaped decode on an H200 the down projection
/// (14,336 x 4,096) took 51 us with 32 vectors in 16 slices against 65 with 16 in 8 (per-node
/// GPU times in the model, BENCHMARKS.md session 23); 1B's stays at 16 x 16.
fn auto_split(k: usize, vecs: usize, row_groups: usize) -> (usize, usize) {
    let lanes = if vecs / SPLIT_LANES_WIDE >= SPLIT_WIDE_GROUPS {
        SPLIT_LANES_WIDE
    } else {
        [SPLIT_LANES, 8, 4, 2, 1]
            .into_iter()
            .find(|&l| l <= vecs)
            .unwrap_or(1)
    };
    let groups = vecs.div_ceil(lanes) * row_groups;
    let wanted = SPLIT_TARGET.div_ceil(groups).min(MAX_SPLITS);
    (lanes, splits_for(k, lanes, wanted))
}

/// `wanted` slices of K for `lanes` vectors a workgroup, fewer where a slice would give an
/// invocation of the four-row kernel less than a round of loads.
fn splits_for(k: usize, lanes: usize, wanted: usize) -> usize {
    wanted.min(k / (NARROW_THREADS / lanes * UNROLL)).max(1)
}

/// A's rows normalised inside the kernel (NormMatMul, matmul/norm.rs): the inputs that hold
/// the skip added first (laid out as A), if any, and the scale, and epsilon.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct RowNorm {
    pub skip: Option<usize>,
    pub gamma: usize,
    pub eps: f32,
    /// The output that receives A + skip (laid out as A), if any.
    pub sum: Option<usize>,
}

/// Which inputs of the node A and B are, and whether A's rows are normalised first or A is
/// a SwiGLU's gate (read as silu(A) * the input `swiglu_up`, laid out as A).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct Operands {
    pub a: usize,
    pub b: usize,
    pub norm: Option<RowNorm>,
    pub swiglu_up: Option<usize>,
}

/// MatMul's operands.
const PLAIN: Operands = Operands {
    a: 0,
    b: 1,
    norm: None,
    swiglu_up: None,
};

/// The dispatch for a product [`applies`] accepted.
pub(super) fn kernel(dtype: DType, g: &GpuGemm, mode: Gemv) -> Option<GpuKernel> {
    kernel_for(dtype, g, mode, &PLAIN)
}

/// The dispatch of a fused node (NormMatMul, SwiGluMatMul) whose A is `rows` x `k` of
/// `dtype`, read as `operands` say, against B: gemv.comp where it takes the product, else
/// `None`. `Gemv::Off` counts as `Auto` here: such nodes exist only where the graph pass found
/// this kernel could run them (`VKML_FUSION=chains` keeps their ops apart instead).
pub(super) fn fused_kernel(
    (dtype, rows, k): (DType, usize, usize),
    b: &crate::ValueType,
    mode: Gemv,
    operands: &Operands,
) -> Option<GpuKernel> {
    let mode = if mode == Gemv::Off { Gemv::Auto } else { mode };
    let a = crate::ValueType::new(dtype, vec![rows, k]);
    let (dtype, g) = super::MatMul::describe(&[Some(&a), Some(b)])?;
    if !applies(dtype, &g, mode) {
        return None;
    }
    kernel_for(dtype, &g, mode, operands)
}

/// [`kernel`] for operands elsewhere among the node's inputs, or with A's rows normalised.
pub(super) fn kernel_for(
    dtype: DType,
    g: &GpuGemm,
    mode: Gemv,
    operands: &Operands,
) -> Option<GpuKernel> {
    let vec = vec_elems(dtype)?;
    let vecs = g.n / vec;
    let valid = |l: u8| (l.is_power_of_two() && l <= 32).then_some(usize::from(l));
    // Lanes and slices as asked, fewer slices where one would be less than a round of loads.
    let sliced = |l: u8, s: u8| -> Option<(usize, usize)> {
        let l = valid(l)?;
        Some((l, splits_for(g.k, l, usize::from(s))))
    };
    let one_row = |wide| if g.m == 1 { wide } else { Block::Four };
    let (block, lanes, splits) = match mode {
        Gemv::Wide(l) => (one_row(Block::Wide), valid(l)?, 1),
        Gemv::Lanes(l) => (Block::Four, valid(l)?, 1),
        Gemv::Split(l, s) => {
            let (l, s) = sliced(l, s)?;
            (Block::Four, l, s)
        }
        Gemv::Row(l, s) => {
            let (l, s) = sliced(l, s)?;
            (one_row(Block::Row), l, s)
        }
        Gemv::Unsplit => unsplit_choice(g.m, g.k, vecs),
        Gemv::Auto | Gemv::Off => auto_choice(g.m, g.k, vecs, vec, g.m.div_ceil(GROUP_ROWS)),
    };
    let row_groups = g.m.div_ceil(block.rows());
    let groups = vecs.div_ceil(lanes);
    let gy = groups.div_ceil(MAX_GROUPS);
    let gx = groups.div_ceil(gy);
    // Slices of equal length (a whole number of rows a strand), the last one shorter.
    let strands = block.threads() / lanes;
    let slice = g.k.div_ceil(splits).next_multiple_of(strands);
    let splits = g.k.div_ceil(slice);
    let gz = row_groups * splits;
    let word = |v: usize| u32::try_from(v).ok();
    let params = gemv::Params {
        M: word(g.m)?,
        N: word(g.n)?,
        K: word(g.k)?,
        rsA: word(g.a.rs)?,
        csA: word(g.a.cs)?,
        offA: word(g.a.off)?,
        rsB: word(g.b.rs / vec)?,
        offB: word(g.b.off / vec)?,
        lanes: lanes as u32,
        splits: word(splits)?,
        slice: word(slice)?,
        eps: operands.norm.map_or(0.0, |n| n.eps),
        flags: operands.norm.map_or(0, |n| {
            1 | if n.skip.is_some() { 2 } else { 0 } | if n.sum.is_some() { 4 } else { 0 }
        }) | if operands.swiglu_up.is_some() { 8 } else { 0 }
            | if block == Block::Wide && g.k <= STAGE_A {
                16
            } else {
                0
            },
    };
    let variant = block.variant(dtype);
    // Absent operands are stood in for by A, which the flags keep the shader from reading.
    let input = |i: Option<usize>| BufRef::Input(i.unwrap_or(operands.a));
    let buffers = gemv::Buffers {
        a: BufRef::Input(operands.a),
        b: BufRef::Input(operands.b),
        y: BufRef::Output(0),
        skip: input(operands.norm.and_then(|n| n.skip).or(operands.swiglu_up)),
        gamma: input(operands.norm.map(|n| n.gamma)),
        sum: BufRef::Output(operands.norm.and_then(|n| n.sum).unwrap_or(0)),
        part: if splits > 1 {
            BufRef::Scratch(0)
        } else {
            BufRef::Output(0)
        },
        count: BufRef::Counters(if splits > 1 { row_groups * groups } else { 0 }),
    };
    let scratch = if splits > 1 {
        vec![4 * (splits * g.m * g.n) as u64]
    } else {
        vec![]
    };
    Some(GpuKernel {
        scratch,
        dispatches: vec![Dispatch::new(
            variant,
            buffers,
            params,
            [word(gx)?, word(gy)?, word(gz)?],
        )],
    })
}

#[cfg(test)]
mod tests {
    use super::super::MatMul;
    use super::*;
    use crate::testkit::gpu::run_kernel_on;
    use crate::testkit::{Rng, assert_close, build, f64s};
    use crate::{KernelTuning, Tensor, ValueType};
    use vkml_testkit::test_gpu;

    #[test]
    fn lanes_keep_enough_workgroups() {
        // Llama 1B and 8B decodes (K, N / 8): the best lane count on an H200, or within 10%.
        assert_eq!(auto_lanes(2_048, 2_048 / 8), 2);
        assert_eq!(auto_lanes(2_048, 8_192 / 8), 8);
        assert_eq!(auto_lanes(8_192, 2_048 / 8), 2);
        assert_eq!(auto_lanes(2_048, 128_256 / 8), 8);
        assert_eq!(auto_lanes(4_096, 4_096 / 8), 4);
        assert_eq!(auto_lanes(4_096, 14_336 / 8), 8);
        assert_eq!(auto_lanes(14_336, 4_096 / 8), 2);
        assert_eq!(auto_lanes(4_096, 1_024 / 8), 1);
    }

    #[test]
    fn narrow_b_splits_k_into_enough_workgroups() {
        // Llama 1B decode (K, N / 8): q and o, k and v, gate and up, down.
        assert_eq!(auto_split(2_048, 2_048 / 8, 1), (16, 16));
        assert_eq!(auto_split(2_048, 512 / 8, 1), (16, 16));
        assert_eq!(auto_split(2_048, 8_192 / 8, 1), (32, 8));
        assert_eq!(auto_split(8_192, 2_048 / 8, 1), (16, 16));
        // Of which the automatic choice splits only the deep one (K >= 3N): Llama 1B and 8B's
        // down projections; gate and up take the wide workgroups, the head too.
        let choice = |m, k, n: usize| auto_choice(m, k, n / 8, 8, 1);
        assert_eq!(choice(1, 8_192, 2_048), (Block::Four, 16, 16));
        assert_eq!(choice(1, 14_336, 4_096), (Block::Four, 32, 16));
        assert_eq!(choice(1, 2_048, 2_048), (Block::Wide, 4, 1));
        assert_eq!(choice(2, 2_048, 2_048), (Block::Four, 2, 1));
        assert_eq!(choice(1, 2_048, 512), (Block::Four, 1, 1));
        assert_eq!(choice(1, 2_048, 8_192), (Block::Wide, 8, 1));
        assert_eq!(choice(2, 2_048, 8_192), (Block::Four, 8, 1));
        assert_eq!(choice(1, 2_048, 128_256), (Block::Wide, 8, 1));
        // Too short for a round of loads per slice, or already enough workgroups: no split.
        assert_eq!(auto_split(100, 2_048 / 8, 1), (16, 1));
        assert_eq!(auto_split(4_096, 65_536 / 8, 1), (32, 1));
        // Fewer vectors than the lanes: as many lanes as vectors.
        assert_eq!(auto_split(4_096, 4, 1).0, 4);
        // The kernel: slices of whole strands, a partial sum buffer, a counter per group.
        let (a, b) = (
            ValueType::new(DType::F16, vec![1, 2, 3_000]),
            ValueType::new(DType::F16, vec![3_000, 256]),
        );
        let k = kernel_for(&a, &b, Gemv::Split(16, 3)).unwrap();
        assert_eq!(k.dispatches[0].groups, [2, 1, 3]);
        assert_eq!(k.scratch, vec![4 * 3 * 2 * 256]);
        assert!(k.dispatches[0].buffers().contains(&BufRef::Counters(2)));
    }

    #[test]
    fn only_one_row_against_a_head_wide_b_takes_the_wide_workgroups() {
        assert_eq!(auto_wide(1, 128_256 / 8), Some(8));
        assert_eq!(auto_wide(2, 128_256 / 8), None);
        // An 8B's MLP (the widest product of a layer) stays in the four-row kernel.
        assert_eq!(auto_wide(1, 14_336 / 8), None);
    }

    fn random(rng: &mut Rng, shape: &[usize], dtype: DType) -> Tensor {
        let v: Vec<f64> = (0..numel(shape))
            .map(|_| (rng.next_u64() % 2_001) as f64 / 1_000.0 - 1.0)
            .collect();
        match dtype {
            DType::F16 => Tensor::from_vec(
                shape.to_vec(),
                v.iter().map(|&x| half::f16::from_f64(x)).collect(),
            ),
            _ => Tensor::from_vec(shape.to_vec(), v.iter().map(|&x| x as f32).collect()),
        }
    }

    /// A [m, k] x B [k, n] in f64 from the (rounded) inputs.
    fn product(a: &Tensor, b: &Tensor, (m, k, n): (usize, usize, usize)) -> Vec<f64> {
        let (a, b) = (f64s(a), f64s(b));
        let mut y = vec![0.0; m * n];
        for i in 0..m {
            for p in 0..k {
                for j in 0..n {
                    y[i * n + j] += a[i * k + p] * b[p * n + j];
                }
            }
        }
        y
    }

    fn kernel_for(a: &ValueType, b: &ValueType, mode: Gemv) -> Option<GpuKernel> {
        let (dtype, g) = MatMul::describe(&[Some(a), Some(b)])?;
        applies(dtype, &g, mode).then(|| kernel(dtype, &g, mode))?
    }

    #[test]
    fn few_rows_match_a_reference_for_every_lane_count() {
        let Some(gpu) = test_gpu() else {
            eprintln!("no GPU: the gemv kernel is not run");
            return;
        };
        let mut rng = Rng::new(71);
        // K: shorter than one step of the workgroup, not a multiple of the four-load
        // unrolling, and several rounds of it; N: one vector, and groups that fold in y.
        let shapes = [
            (1, 37, 64),
            (2, 300, 24),
            (3, 1100, 136),
            (4, 513, 8),
            (1, 64, 2056),
            (1, 9000, 72),
        ];
        for dtype in [DType::F16, DType::F32] {
            for (m, k, n) in shapes {
                let (a, b) = (
                    random(&mut rng, &[1, m, k], dtype),
                    random(&mut rng, &[k, n], dtype),
                );
                let want = product(&a, &b, (m, k, n));
                let out = ValueType::new(dtype, vec![1, m, n]);
                let modes = [1, 2, 4, 8, 16, 32].into_iter();
                let split = [(32, 5), (16, 3), (2, 2), (16, 64)].map(|(l, s)| Gemv::Split(l, s));
                let row = [(32, 5), (16, 3), (2, 2)].map(|(l, s)| Gemv::Row(l, s));
                let modes = modes
                    .flat_map(|l| [Gemv::Lanes(l), Gemv::Wide(l), Gemv::Row(l, 1)])
                    .chain(split)
                    .chain(row)
                    .chain([Gemv::Auto, Gemv::Unsplit]);
                for mode in modes {
                    let kernel = kernel_for(&ValueType::of(&a), &ValueType::of(&b), mode)
                        .unwrap_or_else(|| panic!("{dtype} {m}x{k}x{n}: no gemv"));
                    let got = run_kernel_on(
                        gpu,
                        &kernel,
                        &[Some(&a), Some(&b)],
                        std::slice::from_ref(&out),
                    )
                    .unwrap();
                    // f16 outputs round to 11 bits; f32 sums of thousands of terms drift
                    // by about their count's worth of rounding.
                    let tol = if dtype == DType::F16 {
                        2e-3
                    } else {
                        1e-5 * (k as f64 / 1_000.0).max(1.0)
                    };
                    assert_close(&f64s(&got[0]), &want, tol);
                }
            }
        }
    }

    #[test]
    fn only_few_row_products_with_contiguous_whole_vectors_take_it() {
        let op = build("MatMul", 13, &[]).unwrap();
        let t = |dtype, s: &[usize]| ValueType::new(dtype, s.to_vec());
        let (narrow, wide) = (gemv::Variant::F16.kernel(), gemv::Variant::WideF16.kernel());
        let first = |a: &ValueType, b: &ValueType| {
            let out = [t(a.dtype, &[1])];
            op.gpu(&[Some(a), Some(b)], &out)
                .map(|k| k.dispatches[0].kernel())
        };
        let f16 = DType::F16;
        // Up to four rows take it; one row against a head-wide B in the wide workgroups.
        assert_eq!(
            first(&t(f16, &[1, 1, 64]), &t(f16, &[64, 16])),
            Some(narrow)
        );
        assert_eq!(first(&t(f16, &[4, 64]), &t(f16, &[64, 16])), Some(narrow));
        assert_eq!(first(&t(f16, &[1, 64]), &t(f16, &[64, 65_536])), Some(wide));
        // Five rows, N not whole vectors, a batched B, integers: not taken.
        let not_gemv = |k: Option<_>| k != Some(narrow) && k != Some(wide);
        assert!(not_gemv(first(&t(f16, &[5, 64]), &t(f16, &[64, 16]))));
        assert!(not_gemv(first(&t(f16, &[1, 64]), &t(f16, &[64, 12]))));
        assert!(not_gemv(first(&t(f16, &[2, 1, 64]), &t(f16, &[2, 64, 16]))));
        let g = MatMul::describe(&[Some(&t(f16, &[1, 64])), Some(&t(f16, &[64, 16]))]).unwrap();
        assert!(applies(g.0, &g.1, Gemv::Auto));
        assert!(!applies(g.0, &g.1, Gemv::Off));
        assert!(!applies(DType::BF16, &g.1, Gemv::Auto));
        // And the tensor-core kernels step aside for it.
        assert!(super::super::coop::kernels(g, &KernelTuning::default()).is_empty());
    }
}
