//! The CPU backend's GEMM: ndarray's `general_mat_mul`, which runs matrixmultiply's packed,
//! multi-threaded kernels behind a safe, bounds-checked API (so no `unsafe` here).

use ndarray::linalg::general_mat_mul;
use ndarray::{ArrayView2, ArrayViewMut2, LinalgScalar, ShapeBuilder};

/// `c[i * ldc + j] = alpha * sum_p A(i, p) * B(p, j) + beta * c[..]` for an M x K matrix A whose
/// element (i, p) is `a[off + i * rs + p * cs]`, likewise B (K x N), and a row-major C with
/// leading dimension `ldc`. With `beta == 0` the old contents of C are not read (NaN in them
/// does not leak). The callers have checked the bounds; a violation is a bug and panics.
#[allow(clippy::too_many_arguments)]
pub fn gemm<T: LinalgScalar>(
    (m, k, n): (usize, usize, usize),
    alpha: T,
    (a, a_off, a_rs, a_cs): (&[T], usize, usize, usize),
    (b, b_off, b_rs, b_cs): (&[T], usize, usize, usize),
    beta: T,
    c: &mut [T],
    ldc: usize,
) {
    let a = ArrayView2::from_shape((m, k).strides((a_rs, a_cs)), &a[a_off..])
        .expect("gemm: A's strides reach past its data");
    let b = ArrayView2::from_shape((k, n).strides((b_rs, b_cs)), &b[b_off..])
        .expect("gemm: B's strides reach past its data");
    let rows = if m == 0 { 0 } else { (m - 1) * ldc + n };
    let mut c = ArrayViewMut2::from_shape((m, n).strides((ldc, 1)), &mut c[..rows])
        .expect("gemm: C is smaller than M x N");
    general_mat_mul(alpha, &a, &b, beta, &mut c);
}
