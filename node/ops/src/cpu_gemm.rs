//! The CPU backend's GEMM: faer's `matmul` on one thread per call (its packed kernels, AVX-512
//! where the CPU has it, behind a safe API, so no `unsafe` here), and a plain matrix-vector
//! loop for products with a single row or column.
//!
//! Threads are ours, not faer's. A large product is cut into a grid of blocks of C (stripes
//! of its rows and of its columns, [`grid`]) for rayon's pool only while fewer products are in
//! progress than the pool has threads, into as many blocks as each product's share of the
//! threads; once runs fill the pool each product runs whole on its calling thread, as blocks
//! would then only add the packing of the operands they share and hand-offs to a pool with no
//! idle thread. A library's own pool of
//! threads that every concurrent caller queues for (matrixmultiply's `threading`, a fixed tree
//! of four) cost a node pinned to 5 cores 2.6x its throughput with many runs in flight
//! (BENCHMARKS.md, session 26), and faer's (spindle's barriers on rayon's pool) would wait on
//! threads that the other runs' tasks hold.

use std::sync::atomic::{AtomicUsize, Ordering};

use faer::linalg::matmul::matmul;
use faer::{Accum, MatMut, MatRef, Par};
use rayon::prelude::*;

/// Products of at least [`BLOCK_MIN_WORK`] in progress in this process.
static IN_PROGRESS: AtomicUsize = AtomicUsize::new(0);

/// Counts a product in [`IN_PROGRESS`] while it lives.
struct InProgress;

impl InProgress {
    /// The guard, and the products in progress counting this one.
    fn enter() -> (InProgress, usize) {
        (InProgress, IN_PROGRESS.fetch_add(1, Ordering::Relaxed) + 1)
    }
}

impl Drop for InProgress {
    fn drop(&mut self) {
        IN_PROGRESS.fetch_sub(1, Ordering::Relaxed);
    }
}

/// The least multiply-adds worth a block of its own: a few hundred microseconds on one core,
/// so that handing a block to the pool (10-30 us, window/par.rs) and packing its operand
/// again (below) stay small beside it.
const BLOCK_MIN_WORK: usize = 1 << 21;

/// The fewest rows or columns of C in a block: faer's AVX-512 kernels work on 16 rows at a
/// time, and a narrower block would waste them.
const BLOCK_MIN_SIDE: usize = 16;

/// One operand of [`gemm`]: element (i, j) is at `slice[off + i * rs + j * cs]`.
type Mat<'a, T> = (&'a [T], usize, usize, usize);

/// `c[i * ldc + j] = alpha * sum_p A(i, p) * B(p, j) + beta * c[..]` for an M x K matrix A whose
/// element (i, p) is `a[off + i * rs + p * cs]`, likewise B (K x N), and a row-major C with
/// leading dimension `ldc`. With `beta == 0` the old contents of C are not read (NaN in them
/// does not leak). The callers have checked the bounds; a violation is a bug and panics.
/// `T::default()` must be zero (it is for the floats this serves).
#[allow(clippy::too_many_arguments)]
pub fn gemm<T: Dot>(
    (m, k, n): (usize, usize, usize),
    alpha: T,
    a: Mat<'_, T>,
    b: Mat<'_, T>,
    beta: T,
    c: &mut [T],
    ldc: usize,
) {
    if m == 0 || n == 0 {
        return;
    }
    if (m == 1 || n == 1) && k > 0 {
        // A matrix-vector product: a GEMM would first pack the whole matrix into its panel
        // layout, a copy that costs as much as the product (a 1x400 by 400x64 Gemm spent more
        // time packing than multiplying), and it is memory-bound either way.
        let acc = if m == 1 {
            // c^T = B^T a^T: the rows of B^T are B's columns, the vector is A's only row.
            let (bs, b_off, b_rs, b_cs) = b;
            let (as_, a_off, _, a_cs) = a;
            matvec((n, k), (bs, b_off, b_cs, b_rs), (as_, a_off, a_cs))
        } else {
            let (bs, b_off, b_rs, _) = b;
            matvec((m, k), a, (bs, b_off, b_rs))
        };
        for (i, s) in acc.into_iter().enumerate() {
            let at = if m == 1 { i } else { i * ldc };
            let prev = if beta == T::default() {
                T::default()
            } else {
                beta * c[at]
            };
            c[at] = alpha * s + prev;
        }
        return;
    }
    let (a_own, b_own);
    let a = match view(a, (m, k)) {
        Some(v) => v,
        None => {
            a_own = dense(a, (m, k));
            MatRef::from_row_major_slice(&a_own, m, k)
        }
    };
    let b = match view(b, (k, n)) {
        Some(v) => v,
        None => {
            b_own = dense(b, (k, n));
            MatRef::from_row_major_slice(&b_own, k, n)
        }
    };
    let rows = (m - 1) * ldc + n;
    let accum = if beta == T::default() {
        Accum::Replace
    } else {
        if beta != T::one() {
            for row in c[..rows].chunks_mut(ldc) {
                for v in &mut row[..n] {
                    *v = beta * *v;
                }
            }
        }
        Accum::Add
    };
    // C as the transpose of a column-major N x M matrix: faer 0.23.2's
    // `from_row_major_slice_with_stride_mut` builds a column-major view (row stride 1) after
    // checking the row-major bounds, so products through it wrote past C.
    let c =
        MatMut::from_column_major_slice_with_stride_mut(&mut c[..rows], n, m, ldc).transpose_mut();
    blocked(alpha, a, b, accum, c);
}

/// A faer view of `mat` (`shape` rows and columns) where one of its strides is 1, the layouts
/// faer's safe constructors take; `None` for any other.
fn view<T>((s, off, rs, cs): Mat<'_, T>, (rows, cols): (usize, usize)) -> Option<MatRef<'_, T>> {
    let s = &s[off..];
    if cs == 1 {
        Some(MatRef::from_row_major_slice_with_stride(s, rows, cols, rs))
    } else if rs == 1 {
        Some(MatRef::from_column_major_slice_with_stride(
            s, rows, cols, cs,
        ))
    } else {
        None
    }
}

/// `mat` copied into a row-major matrix: for the layouts [`view`] cannot show (no exporter's
/// graph gives them to a product; a strided einsum operand could).
fn dense<T: Copy>((s, off, rs, cs): Mat<'_, T>, (rows, cols): (usize, usize)) -> Vec<T> {
    (0..rows)
        .flat_map(|i| (0..cols).map(move |j| s[off + i * rs + j * cs]))
        .collect()
}

/// `c = alpha * a b (+ c)`, in blocks on rayon's pool when large enough (see the module's
/// comment), laid out by [`grid`].
fn blocked<T: Dot>(alpha: T, a: MatRef<'_, T>, b: MatRef<'_, T>, accum: Accum, c: MatMut<'_, T>) {
    let (m, k, n) = (a.nrows(), a.ncols(), b.ncols());
    let work = m * k * n;
    let (_counted, in_progress) = if work >= BLOCK_MIN_WORK {
        let (guard, n) = InProgress::enter();
        (Some(guard), n)
    } else {
        (None, 1)
    };
    let blocks = (work / BLOCK_MIN_WORK).min(rayon::current_num_threads() / in_progress);
    let (br, bc) = grid(m, n, blocks);
    if br * bc < 2 {
        product(alpha, a, b, accum, c);
        return;
    }
    let mut parts = Vec::with_capacity(br * bc);
    let mut rest = c;
    let mut r0 = 0;
    for i in 0..br {
        let rows = m * (i + 1) / br - r0;
        let (mut stripe, tail) = rest.split_at_row_mut(rows);
        rest = tail;
        let mut c0 = 0;
        for j in 0..bc {
            let cols = n * (j + 1) / bc - c0;
            let (part, right) = stripe.split_at_col_mut(cols);
            stripe = right;
            parts.push(((r0, rows), (c0, cols), part));
            c0 += cols;
        }
        r0 += rows;
    }
    parts
        .into_par_iter()
        .for_each(|((r0, rows), (c0, cols), part)| {
            product(alpha, a.subrows(r0, rows), b.subcols(c0, cols), accum, part);
        });
}

/// One faer product on this thread, the registers' upper halves cleared after it.
fn product<T: Dot>(alpha: T, a: MatRef<'_, T>, b: MatRef<'_, T>, accum: Accum, c: MatMut<'_, T>) {
    matmul(c, accum, a, b, alpha, Par::Seq);
    clear_upper();
}

/// How to cut an M x N product into at most `blocks` blocks: `(row stripes, column stripes)`,
/// each block at least [`BLOCK_MIN_SIDE`] on both sides. The most blocks win; among grids of
/// as many, the one that copies least, as each block packs its own copy of its rows of A
/// (M/br x K) and its columns of B (K x N/bc), K * (bc * M + br * N) in all; then the one
/// with fewer row stripes. A 512 x 4608 x 49 product (ResNet-50's last 3x3 convolutions) is
/// cut into 16 x 1, a 256 x 2304 x 196 one into 4 x 4.
fn grid(m: usize, n: usize, blocks: usize) -> (usize, usize) {
    let mut best = (1, 1);
    let mut best_key = (usize::MAX, 0);
    for br in 1..=blocks.min(m / BLOCK_MIN_SIDE).max(1) {
        let bc = (blocks / br).min(n / BLOCK_MIN_SIDE).max(1);
        if br * bc < 2 {
            continue;
        }
        // Fewer row stripes through the loop's order: ties keep the earlier.
        let key = (usize::MAX - br * bc, bc * m + br * n);
        if key < best_key {
            best_key = key;
            best = (br, bc);
        }
    }
    best
}

/// Clears the upper halves of the vector registers. faer's x86 kernels (private-gemm-x86's
/// assembly) return without `vzeroupper`, and every SSE instruction of the baseline-compiled
/// code after them then pays the AVX-to-SSE transition: BERT-tiny's Softmax and Div ran
/// 2-3x slower (one thread, 2-core VM) after its first MatMul. A tiny AVX function does it, as
/// LLVM ends every function that dirtied them with `vzeroupper`; no `unsafe` needed.
fn clear_upper() {
    #[cfg(target_arch = "x86_64")]
    if let Some(simd) = pulp::x86::V3::try_new() {
        simd.vectorize(ClearUpper { simd });
    }
}

#[cfg(target_arch = "x86_64")]
struct ClearUpper {
    simd: pulp::x86::V3,
}

#[cfg(target_arch = "x86_64")]
impl pulp::NullaryFnOnce for ClearUpper {
    type Output = ();

    #[inline(always)]
    fn call(self) {
        // Through black_box so that the 256-bit add is emitted (and the registers dirtied).
        let v = self.simd.splat_f32x8(std::hint::black_box(1.0));
        std::hint::black_box(self.simd.add_f32x8(v, v));
    }
}

/// Lanes of the dot product: independent partial sums the compiler keeps in vector registers
/// (one running sum would be a serial chain it may not reorder). 16 f32 make four 4-wide
/// chains, enough to cover the add latency; 16 f64 still fit the 16 vector registers.
const LANES: usize = 16;

/// Output rows per task of [`matvec`]'s split (enough to keep each task's A block long).
const MATVEC_ROWS: usize = 64;

/// `out[i] = sum_p A(i, p) * v[off + p * step]` for an `rows x k` matrix A; split across rayon
/// by blocks of rows when large enough (see ops/conv/par.rs), as a large product that would
/// have gone to a GEMM's threads is still memory-bound on one core.
fn matvec<T: Dot>(
    (rows, k): (usize, usize),
    (a, a_off, a_rs, a_cs): Mat<'_, T>,
    (v, v_off, v_step): (&[T], usize, usize),
) -> Vec<T> {
    let vk: Vec<T> = (0..k).map(|p| v[v_off + p * v_step]).collect();
    let zero = T::default();
    let mut out = vec![zero; rows];
    let block = |bi: usize, ob: &mut [T]| {
        let r0 = bi * MATVEC_ROWS;
        if a_cs == 1 {
            // Rows of A are contiguous: one dot product per row.
            for (i, o) in (r0..).zip(ob.iter_mut()) {
                *o = T::dot(&a[a_off + i * a_rs..][..k], &vk);
            }
        } else if a_rs == 1 {
            // Columns of A are contiguous: accumulate column by column (vectorises over rows).
            for (p, &vp) in vk.iter().enumerate() {
                let col = &a[a_off + p * a_cs + r0..][..ob.len()];
                for (o, &x) in ob.iter_mut().zip(col) {
                    *o = *o + x * vp;
                }
            }
        } else {
            for (i, o) in (r0..).zip(ob.iter_mut()) {
                *o = vk
                    .iter()
                    .enumerate()
                    .fold(zero, |s, (p, &vp)| s + a[a_off + i * a_rs + p * a_cs] * vp);
            }
        }
    };
    crate::window::par::for_each_chunk(&mut out, MATVEC_ROWS, MATVEC_ROWS * k, block);
    out
}

/// The dot product [`matvec`] takes per row: a generic loop the compiler vectorises for the
/// baseline target (SSE2, no FMA), and for f32 an AVX2 + FMA kernel chosen at run time.
pub trait Dot:
    faer::traits::ComplexField
    + Copy
    + Default
    + PartialEq
    + Send
    + Sync
    + std::ops::Add<Output = Self>
    + std::ops::Mul<Output = Self>
{
    /// The multiplicative identity (`beta == 1` needs no scaling pass).
    fn one() -> Self;

    fn dot(x: &[Self], y: &[Self]) -> Self {
        dot_lanes(x, y)
    }
}

impl Dot for f64 {
    fn one() -> f64 {
        1.0
    }
}

impl Dot for f32 {
    fn one() -> f32 {
        1.0
    }

    fn dot(x: &[f32], y: &[f32]) -> f32 {
        #[cfg(target_arch = "x86_64")]
        if let Some(simd) = pulp::x86::V3::try_new() {
            return simd.vectorize(DotF32 { simd, x, y });
        }
        dot_lanes(x, y)
    }
}

fn dot_lanes<T: Dot>(x: &[T], y: &[T]) -> T {
    let zero = T::default();
    let mut acc = [zero; LANES];
    let (xc, yc) = (x.chunks_exact(LANES), y.chunks_exact(LANES));
    let (xr, yr) = (xc.remainder(), yc.remainder());
    for (xs, ys) in xc.zip(yc) {
        for l in 0..LANES {
            acc[l] = acc[l] + xs[l] * ys[l];
        }
    }
    let mut s = xr.iter().zip(yr).fold(zero, |s, (&p, &q)| s + p * q);
    for v in acc {
        s = s + v;
    }
    s
}

/// An f32 dot product with four independent 8-wide FMA chains (enough to cover the FMA's
/// latency at two per cycle). The 400-long rows of the MNIST CNN's first Gemm took three times
/// as long through the SSE2 loop.
#[cfg(target_arch = "x86_64")]
struct DotF32<'a> {
    simd: pulp::x86::V3,
    x: &'a [f32],
    y: &'a [f32],
}

#[cfg(target_arch = "x86_64")]
impl pulp::NullaryFnOnce for DotF32<'_> {
    type Output = f32;

    #[inline(always)]
    fn call(self) -> f32 {
        use pulp::f32x8;
        let DotF32 { simd, x, y } = self;
        let n = x.len().min(y.len());
        let (x, y) = (&x[..n], &y[..n]);
        let (xc, xr) = x.as_chunks::<32>();
        let (yc, yr) = y.as_chunks::<32>();
        let mut acc = [simd.splat_f32x8(0.0); 4];
        for (xs, ys) in xc.iter().zip(yc) {
            let xv: [f32x8; 4] = pulp::cast(*xs);
            let yv: [f32x8; 4] = pulp::cast(*ys);
            for l in 0..4 {
                acc[l] = simd.mul_add_f32x8(xv[l], yv[l], acc[l]);
            }
        }
        let (xc, xr) = xr.as_chunks::<8>();
        let (yc, yr) = yr.as_chunks::<8>();
        for (xs, ys) in xc.iter().zip(yc) {
            acc[0] = simd.mul_add_f32x8(pulp::cast(*xs), pulp::cast(*ys), acc[0]);
        }
        let v = simd.add_f32x8(
            simd.add_f32x8(acc[0], acc[1]),
            simd.add_f32x8(acc[2], acc[3]),
        );
        let lanes: [f32; 8] = pulp::cast(v);
        let tail: f32 = xr.iter().zip(yr).map(|(&p, &q)| p * q).sum();
        lanes.iter().sum::<f32>() + tail
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `gemm` in f64 on `data` at `am`, `bm`, into a C of row stride `ldc` seeded with `seed`.
    #[allow(clippy::too_many_arguments)]
    fn gemm_f64(
        data: &[f64],
        (m, k, n): (usize, usize, usize),
        am: (usize, usize, usize),
        bm: (usize, usize, usize),
        alpha: f64,
        beta: f64,
        ldc: usize,
        seed: f64,
    ) -> Vec<f64> {
        let mut c = vec![seed; (m - 1) * ldc + n];
        gemm(
            (m, k, n),
            alpha,
            (data, am.0, am.1, am.2),
            (data, bm.0, bm.1, bm.2),
            beta,
            &mut c,
            ldc,
        );
        c
    }

    /// The product from its definition, in f64.
    fn naive(
        (m, k, n): (usize, usize, usize),
        a: &[f64],
        (a_off, a_rs, a_cs): (usize, usize, usize),
        b: &[f64],
        (b_off, b_rs, b_cs): (usize, usize, usize),
    ) -> Vec<f64> {
        let mut c = vec![0.0; m * n];
        for i in 0..m {
            for j in 0..n {
                for p in 0..k {
                    c[i * n + j] += a[a_off + i * a_rs + p * a_cs] * b[b_off + p * b_rs + j * b_cs];
                }
            }
        }
        c
    }

    #[test]
    fn single_row_and_single_column_products_match_the_definition() {
        let data: Vec<f64> = (0..310_000)
            .map(|i| ((i * 37 % 23) as f64 - 11.0) / 8.0)
            .collect();
        let f32_data: Vec<f32> = data.iter().map(|&v| v as f32).collect();
        for (m, n) in [(1, 1), (1, 5), (1, 64), (6, 1), (13, 1), (1, 1000)] {
            // k = 300 with n = 1000 is large enough for the split across rayon.
            for k in [1, 3, 8, 17, 300] {
                // Row-major and transposed layouts of both operands, at an offset.
                for (a_t, b_t) in [(false, false), (true, false), (false, true), (true, true)] {
                    let am = if a_t { (3, 1, m) } else { (3, k, 1) };
                    let bm = if b_t { (5, 1, k) } else { (5, n, 1) };
                    let want = naive((m, k, n), &data, am, &data, bm);
                    for (alpha, beta) in [(1.0, 0.0), (0.5, 2.0)] {
                        // C with row stride n + 2, seeded with NaN where beta == 0 so a read
                        // of it would show, and with 1.0 elsewhere.
                        let ldc = n + 2;
                        let seed = if beta == 0.0 { f64::NAN } else { 1.0 };
                        let c = gemm_f64(&data, (m, k, n), am, bm, alpha, beta, ldc, seed);
                        let mut c32 = vec![seed as f32; c.len()];
                        let (a32, b32) = (&f32_data[..], &f32_data[..]);
                        gemm(
                            (m, k, n),
                            alpha as f32,
                            (a32, am.0, am.1, am.2),
                            (b32, bm.0, bm.1, bm.2),
                            beta as f32,
                            &mut c32,
                            ldc,
                        );
                        for i in 0..m {
                            for j in 0..n {
                                let w =
                                    alpha * want[i * n + j] + if beta == 0.0 { 0.0 } else { beta };
                                let (g, g32) = (c[i * ldc + j], c32[i * ldc + j] as f64);
                                let what = format!("{m}x{k}x{n} t{a_t}{b_t} ({i},{j})");
                                assert!((g - w).abs() < 1e-12, "{what}: {g} vs {w}");
                                assert!((g32 - w).abs() < 1e-4, "{what}: {g32} vs {w}");
                            }
                        }
                        // The gaps between C's rows are not written.
                        for i in 0..m.saturating_sub(1) {
                            assert!(
                                c[i * ldc + n..(i + 1) * ldc]
                                    .iter()
                                    .all(|v| v.to_bits() == seed.to_bits())
                            );
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn the_grid_uses_the_blocks_and_copies_least() {
        assert_eq!(grid(512, 49, 16), (16, 1));
        assert_eq!(grid(256, 196, 16), (4, 4));
        assert_eq!(grid(64, 12544, 16), (1, 16));
        assert_eq!(grid(200, 200, 4), (2, 2));
        // Sides below BLOCK_MIN_SIDE are not cut; too little to cut at all gives one block.
        assert_eq!(grid(20, 5000, 8), (1, 8));
        assert_eq!(grid(20, 20, 8), (1, 1));
        assert_eq!(grid(1000, 1000, 1), (1, 1));
    }

    /// Products large enough to be cut into blocks on rayon (stripes of C's rows, of its
    /// columns, and both; sizes that do not divide evenly), in both layouts of A and B, with
    /// beta 0 (C's NaN never read) and not, against the definition. Run in pools of three and
    /// four threads so that the cuts happen on a machine of any size.
    #[test]
    fn products_cut_into_blocks_match_the_definition() {
        let data: Vec<f64> = (0..200_000)
            .map(|i| ((i * 53 % 29) as f64 - 14.0) / 16.0)
            .collect();
        let cases = [
            (3, (389, 97, 131)),
            (3, (130, 150, 257)),
            (3, (200, 60, 400)),
            // 2 x 2 blocks.
            (4, (201, 220, 199)),
        ];
        for (threads, (m, k, n)) in cases {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .unwrap();
            let blocks = (m * k * n / BLOCK_MIN_WORK).min(threads);
            let (br, bc) = grid(m, n, blocks);
            assert!(br * bc >= 2 && (threads < 4 || br == 2 && bc == 2));
            for (a_t, b_t) in [(false, false), (true, true)] {
                let am = if a_t { (7, 1, m) } else { (7, k, 1) };
                let bm = if b_t { (2, 1, k) } else { (2, n, 1) };
                let want = naive((m, k, n), &data, am, &data, bm);
                for (alpha, beta) in [(1.0, 0.0), (-0.5, 3.0)] {
                    let ldc = n + 3;
                    let seed = if beta == 0.0 { f64::NAN } else { 2.0 };
                    let c =
                        pool.install(|| gemm_f64(&data, (m, k, n), am, bm, alpha, beta, ldc, seed));
                    for i in 0..m {
                        for j in 0..n {
                            let w = alpha * want[i * n + j] + if beta == 0.0 { 0.0 } else { 6.0 };
                            let g = c[i * ldc + j];
                            assert!(
                                (g - w).abs() <= 1e-9 * w.abs().max(1.0),
                                "{m}x{k}x{n} t{a_t}{b_t} ({i},{j}): {g} vs {w}"
                            );
                        }
                    }
                    for i in 0..m - 1 {
                        let gap = &c[i * ldc + n..(i + 1) * ldc];
                        assert!(gap.iter().all(|v| v.to_bits() == seed.to_bits()));
                    }
                }
            }
        }
    }
}
