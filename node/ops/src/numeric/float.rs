//! The element types the CPU kernels of Conv, the pools and BatchNormalization accept (f32,
//! f64), with the one GEMM they share and the hooks to f32's AVX2 kernels (the direct
//! convolution of direct.rs, the 2x2 max pool of pool/pairs.rs), which the other types
//! decline.

use std::cell::RefCell;
use std::ops::{Add, AddAssign, Div, Mul, Sub};

use crate::elementwise::activation::Activation;
use crate::simd::direct::PackCache;
use crate::tensor::{DType, Element};
use crate::window::geometry::Axis;

pub trait Float:
    Element
    + Copy
    + Default
    + PartialOrd
    + Add<Output = Self>
    + AddAssign
    + Sub<Output = Self>
    + Mul<Output = Self>
    + Div<Output = Self>
{
    const LOWEST: Self;
    const NEG_INFINITY: Self;
    fn from_f64(v: f64) -> Self;
    fn to_f64(self) -> f64;

    /// `c[i * ldc + j] = sum_p a[i * k + p] * b[p * n + j]` for an `m x k` row-major `a` and a
    /// `k x n` row-major `b`; `c` is overwritten, never read.
    fn gemm(m: usize, k: usize, n: usize, a: &[Self], b: &[Self], c: &mut [Self], ldc: usize);

    /// `f` on this thread's scratch vector, empty but keeping its capacity from earlier calls:
    /// the im2col buffers of small convolutions, which would otherwise be a large allocation
    /// and free per call (glibc consolidates its free lists on every free that large).
    fn with_scratch<R>(f: impl FnOnce(&mut Vec<Self>) -> R) -> R;

    /// One group of a small 1-D or 2-D convolution, bias included, by the direct kernel of
    /// direct.rs; false, with `yb` untouched, where that kernel does not serve it (always, for
    /// the types it does not cover). `cache` keeps the op's packed weights between runs.
    #[allow(clippy::too_many_arguments)]
    fn direct_conv(
        _axes: &[Axis; 3],
        _cg: usize,
        _ocg: usize,
        _xg: &[Self],
        _wg: &[Self],
        _b: Option<&[Self]>,
        _yb: &mut [Self],
        _cache: Option<&PackCache>,
    ) -> bool {
        false
    }

    /// `y[i] = act(y[i])`: for f32 the unary ops' vector loops, else their f64 formula.
    fn activate(y: &mut [Self], act: &Activation) {
        act.apply_f64(y, Self::to_f64, Self::from_f64);
    }

    /// The interior columns `cols` of every output row of one plane of a 2-D max pool whose
    /// windows are two columns wide at column stride 2, by the vector kernel of pool/pairs.rs
    /// (which documents the arguments). False, with `yp` untouched, where that kernel does not
    /// serve it.
    fn max_pairs(
        _rows: &[(usize, usize)],
        _xp: &[Self],
        _iw: usize,
        _yp: &mut [Self],
        _width: usize,
        _cols: std::ops::Range<usize>,
        _c0: usize,
    ) -> bool {
        false
    }
}

/// Scratch capacity (elements) kept between calls; a larger buffer is freed after use, so a
/// big model's threads do not each hold megabytes after its large convolutions.
const SCRATCH_KEEP: usize = 1 << 18;

/// The dtypes [`Float`] covers, for shape rules' error messages.
pub const FLOAT_DTYPES: [DType; 2] = [DType::F32, DType::F64];

/// The sizes the GEMM below relies on (faer checks them too; this names the culprit).
fn check_gemm(m: usize, k: usize, n: usize, a: usize, b: usize, c: usize, ldc: usize) {
    assert!(ldc >= n, "gemm: ldc {ldc} < n {n}");
    assert!(a >= m * k, "gemm: a holds {a} < {m}x{k}");
    assert!(b >= k * n, "gemm: b holds {b} < {k}x{n}");
    assert!(
        m == 0 || n == 0 || c >= (m - 1) * ldc + n,
        "gemm: c too small"
    );
}

macro_rules! float {
    ($t:ty $(, $direct:path, $pairs:path, $activate:path)?) => {
        impl Float for $t {
            const LOWEST: Self = <$t>::MIN;
            const NEG_INFINITY: Self = <$t>::NEG_INFINITY;
            fn from_f64(v: f64) -> Self {
                v as $t
            }
            fn to_f64(self) -> f64 {
                self as f64
            }
            fn gemm(
                m: usize,
                k: usize,
                n: usize,
                a: &[Self],
                b: &[Self],
                c: &mut [Self],
                ldc: usize,
            ) {
                check_gemm(m, k, n, a.len(), b.len(), c.len(), ldc);
                if m == 0 || n == 0 {
                    return;
                }
                if k == 0 {
                    for row in c.chunks_mut(ldc).take(m) {
                        row[..n].fill(0.0);
                    }
                    return;
                }
                crate::cpu_gemm::gemm((m, k, n), 1.0, (a, 0, k, 1), (b, 0, n, 1), 0.0, c, ldc);
            }
            fn with_scratch<R>(f: impl FnOnce(&mut Vec<Self>) -> R) -> R {
                thread_local! {
                    static SCRATCH: RefCell<Vec<$t>> = const { RefCell::new(Vec::new()) };
                }
                SCRATCH.with(|cell| match cell.try_borrow_mut() {
                    Ok(mut v) => {
                        v.clear();
                        let r = f(&mut v);
                        if v.capacity() > SCRATCH_KEEP {
                            *v = Vec::new();
                        }
                        r
                    }
                    // Only if a caller nested two uses: a buffer of its own.
                    Err(_) => f(&mut Vec::new()),
                })
            }
            $(
                fn direct_conv(
                    axes: &[Axis; 3],
                    cg: usize,
                    ocg: usize,
                    xg: &[Self],
                    wg: &[Self],
                    b: Option<&[Self]>,
                    yb: &mut [Self],
                    cache: Option<&PackCache>,
                ) -> bool {
                    $direct(axes, cg, ocg, xg, wg, b, yb, cache)
                }
                fn max_pairs(
                    rows: &[(usize, usize)],
                    xp: &[Self],
                    iw: usize,
                    yp: &mut [Self],
                    width: usize,
                    cols: std::ops::Range<usize>,
                    c0: usize,
                ) -> bool {
                    $pairs(rows, xp, iw, yp, width, cols, c0)
                }
                fn activate(y: &mut [Self], act: &Activation) {
                    $activate(act, y)
                }
            )?
        }
    };
}

float!(
    f32,
    crate::simd::direct::conv,
    crate::simd::pairs::max_pairs,
    Activation::apply_f32
);
float!(f64);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scratch_is_empty_on_entry_and_nested_use_gets_its_own() {
        f32::with_scratch(|v| {
            assert!(v.is_empty());
            v.extend([1.0, 2.0]);
            f32::with_scratch(|inner| {
                assert!(inner.is_empty());
                inner.push(3.0);
            });
            assert_eq!(v, &[1.0, 2.0]);
        });
        assert!(f32::with_scratch(|v| v.is_empty()));
        // A buffer past the kept size is released, not held by the thread.
        f64::with_scratch(|v| v.resize(SCRATCH_KEEP + 1, 0.0));
        assert_eq!(f64::with_scratch(|v| v.capacity()), 0);
    }

    #[test]
    fn gemm_multiplies_into_a_strided_block() {
        // [1 2 3; 4 5 6] x [1 0; 0 1; 1 1] = [4 5; 10 11], written with row stride 3.
        let a = [1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0];
        let b = [1.0f32, 0.0, 0.0, 1.0, 1.0, 1.0];
        let mut c = [-1.0f32; 5];
        f32::gemm(2, 3, 2, &a, &b, &mut c, 3);
        assert_eq!(c, [4.0, 5.0, -1.0, 10.0, 11.0]);
        let mut c = [7.0f64; 4];
        f64::gemm(2, 0, 2, &[], &[], &mut c, 2);
        assert_eq!(c, [0.0; 4]);
    }
}
