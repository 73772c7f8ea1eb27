//! MatMul (numpy semantics: 1-D promotion, broadcast batch dimensions) and Gemm
//! (`alpha * A' * B' + beta * C`, C broadcast one way to (M, N)).
//!
//! Both run on the CPU through ops/cpu_gemm.rs (floats; f16 and bf16 widened to f32) and on the
//! GPU through kernels that read A and B through row/column strides (so transposes cost nothing)
//! and walk up to three broadcast batch axes: gemm.comp's family for f32 and f16 (gpu.rs, with
//! split-K in splitk.rs), and tensor-core kernels for f16 and bf16 on GPUs that have
//! cooperative matrices (coop.rs).

use rayon::prelude::*;

use super::util::{broadcast_shapes, broadcast_strides, expect_dtype, opt, req, types_of};
use super::{GpuKernel, InferInput, NodeSpec, Op, OpError, Registry, ValueType};
use crate::KernelTuning;
use crate::tensor::{DType, Element, Tensor, numel};
pub(super) use gpu::strided_gemm_kernel;
use gpu::{GpuGemm, gemm_kernel, plain_kernel};

pub fn register(r: &mut Registry) {
    // f16 / bf16 run through f32 on the CPU.
    r.add("MatMul", |_| {
        Ok(super::via_f32::ViaF32::half(Box::new(MatMul)))
    });
    r.add("Gemm", |s| {
        Ok(super::via_f32::ViaF32::half(Gemm::build(s)?))
    });
    r.add(norm::OP_TYPE, norm::NormMatMul::build);
    r.add(swiglu::OP_TYPE, swiglu::SwiGluMatMul::build);
}

/// Where a matrix sits in a slice: element (i, j) is at `off + i * rs + j * cs`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Strided {
    off: usize,
    rs: usize,
    cs: usize,
}

/// Element types with a CPU matrix product.
trait MatElem: Element + Copy + PartialEq + Send + Sync {
    /// `c = alpha * A * B + beta * c` for an m x k A, a k x n B, and c row-major m x n. With
    /// beta == 0, c is only written (a NaN in it does not leak through).
    #[allow(clippy::too_many_arguments)]
    fn gemm(
        m: usize,
        k: usize,
        n: usize,
        alpha: Self,
        a: &[Self],
        am: Strided,
        b: &[Self],
        bm: Strided,
        beta: Self,
        c: &mut [Self],
    );
}

/// Index of a matrix's last element (the matrix must not be empty).
fn last(rows: usize, cols: usize, s: Strided) -> usize {
    s.off + (rows - 1) * s.rs + (cols - 1) * s.cs
}

/// Panics (an internal bug, not bad input: shapes were checked by `infer`) unless every
/// element `gemm` touches lies inside its slice. The raw-pointer GEMM relies on this.
#[allow(clippy::too_many_arguments)]
fn check_bounds<T>(
    m: usize,
    k: usize,
    n: usize,
    a: &[T],
    am: Strided,
    b: &[T],
    bm: Strided,
    c: &[T],
) {
    assert!(last(m, k, am) < a.len(), "gemm: A out of bounds");
    assert!(last(k, n, bm) < b.len(), "gemm: B out of bounds");
    assert!(m * n <= c.len(), "gemm: C out of bounds");
    let fits = |s: Strided| isize::try_from(s.rs).is_ok() && isize::try_from(s.cs).is_ok();
    assert!(
        fits(am) && fits(bm) && isize::try_from(n).is_ok(),
        "gemm: strides overflow"
    );
}

macro_rules! float_gemm {
    ($t:ty) => {
        impl MatElem for $t {
            fn gemm(
                m: usize,
                k: usize,
                n: usize,
                alpha: $t,
                a: &[$t],
                am: Strided,
                b: &[$t],
                bm: Strided,
                beta: $t,
                c: &mut [$t],
            ) {
                if m == 0 || n == 0 {
                    return;
                }
                if k == 0 {
                    for v in &mut c[..m * n] {
                        *v = if beta == 0.0 { 0.0 } else { beta * *v };
                    }
                    return;
                }
                check_bounds(m, k, n, a, am, b, bm, c);
                crate::cpu_gemm::gemm(
                    (m, k, n),
                    alpha,
                    (a, am.off, am.rs, am.cs),
                    (b, bm.off, bm.rs, bm.cs),
                    beta,
                    c,
                    n,
                );
            }
        }
    };
}
float_gemm!(f32);
float_gemm!(f64);

macro_rules! int_gemm {
    ($($t:ty),*) => {$(
        impl MatElem for $t {
            // Integer MatMul wraps on overflow, as the C++ runtimes' loops do.
            fn gemm(m: usize, k: usize, n: usize, alpha: $t, a: &[$t], am: Strided, b: &[$t], bm: Strided, beta: $t, c: &mut [$t]) {
                for i in 0..m {
                    for j in 0..n {
                        let mut acc: $t = 0;
                        for p in 0..k {
                            let x = a[am.off + i * am.rs + p * am.cs];
                            let y = b[bm.off + p * bm.rs + j * bm.cs];
                            acc = acc.wrapping_add(x.wrapping_mul(y));
                        }
                        let prev = if beta == 0 { 0 } else { beta.wrapping_mul(c[i * n + j]) };
                        c[i * n + j] = alpha.wrapping_mul(acc).wrapping_add(prev);
                    }
                }
            }
        }
    )*};
}
int_gemm!(i32, i64, u32, u64);

fn view<T: Element>(t: &Tensor) -> Result<std::borrow::Cow<'_, [T]>, OpError> {
    t.view::<T>().map_err(|e| OpError::invalid(e.to_string()))
}

/// A MatMul's geometry after 1-D promotion and batch broadcasting.
#[derive(Debug, Clone, PartialEq, Eq)]
struct MatMulShape {
    m: usize,
    k: usize,
    n: usize,
    /// The broadcast batch dimensions.
    batch: Vec<usize>,
    /// Element strides of each operand over `batch` (0 where it is broadcast).
    a_batch: Vec<usize>,
    b_batch: Vec<usize>,
    out: Vec<usize>,
}

impl MatMulShape {
    fn new(a: &[usize], b: &[usize]) -> Result<MatMulShape, OpError> {
        if a.is_empty() || b.is_empty() {
            return Err(OpError::invalid(format!(
                "MatMul: inputs must have rank >= 1, got {a:?} x {b:?}"
            )));
        }
        // A 1-D A is a row [1, K], a 1-D B a column [K, 1]; the added axis is dropped after.
        let (ra, rb) = (a.len(), b.len());
        let (m, ka) = if ra == 1 {
            (1, a[0])
        } else {
            (a[ra - 2], a[ra - 1])
        };
        let (kb, n) = if rb == 1 {
            (b[0], 1)
        } else {
            (b[rb - 2], b[rb - 1])
        };
        if ka != kb {
            return Err(OpError::invalid(format!(
                "MatMul: inner dimensions differ: {a:?} x {b:?} ({ka} vs {kb})"
            )));
        }
        let (ab, bb) = (&a[..ra.saturating_sub(2)], &b[..rb.saturating_sub(2)]);
        let batch = broadcast_shapes(ab, bb).map_err(|_| {
            OpError::invalid(format!(
                "MatMul: batch dimensions {ab:?} and {bb:?} cannot be broadcast ({a:?} x {b:?})"
            ))
        })?;
        let scale = |v: Vec<usize>, s: usize| v.into_iter().map(|x| x * s).collect();
        let mut out = batch.clone();
        if ra > 1 {
            out.push(m);
        }
        if rb > 1 {
            out.push(n);
        }
        Ok(MatMulShape {
            m,
            k: ka,
            n,
            a_batch: scale(broadcast_strides(ab, &batch), m * ka),
            b_batch: scale(broadcast_strides(bb, &batch), ka * n),
            batch,
            out,
        })
    }

    /// Offsets of A's and B's matrix for every batch index, in row-major batch order.
    fn offsets(&self) -> Vec<(usize, usize)> {
        (0..numel(&self.batch))
            .map(|mut z| {
                let (mut oa, mut ob) = (0, 0);
                for ax in (0..self.batch.len()).rev() {
                    let i = z % self.batch[ax];
                    z /= self.batch[ax];
                    oa += i * self.a_batch[ax];
                    ob += i * self.b_batch[ax];
                }
                (oa, ob)
            })
            .collect()
    }
}

/// Batches whose matrices are at most this large (m*k + k*n elements) run side by side on
/// rayon; cpu_gemm.rs would run each of them whole on one thread anyway.
const SMALL_GEMM: usize = 1 << 14;

fn matmul_typed<T: MatElem>(
    s: &MatMulShape,
    a: &Tensor,
    b: &Tensor,
    one: T,
    zero: T,
) -> Result<Tensor, OpError> {
    let (x, y) = (view::<T>(a)?, view::<T>(b)?);
    let (m, k, n) = (s.m, s.k, s.n);
    let mut out = vec![zero; numel(&s.out)];
    if m * n > 0 {
        let offs = s.offsets();
        let one_batch = |(&(oa, ob), c): (&(usize, usize), &mut [T])| {
            let am = Strided {
                off: oa,
                rs: k,
                cs: 1,
            };
            let bm = Strided {
                off: ob,
                rs: n,
                cs: 1,
            };
            T::gemm(m, k, n, one, &x, am, &y, bm, zero, c);
        };
        // Side by side only when there is enough work to pay for the hand-off to rayon.
        let grain = crate::window::par::grain(offs.len(), m * k * n);
        if let (Some(min), true) = (grain, m * k + k * n <= SMALL_GEMM) {
            offs.par_iter()
                .zip(out.par_chunks_mut(m * n))
                .with_min_len(min)
                .for_each(one_batch);
        } else {
            offs.iter().zip(out.chunks_mut(m * n)).for_each(one_batch);
        }
    }
    Ok(Tensor::from_vec(s.out.clone(), out))
}

#[derive(Debug)]
struct MatMul;

const MATMUL_DTYPES: [DType; 6] = [
    DType::F32,
    DType::F64,
    DType::I32,
    DType::I64,
    DType::U32,
    DType::U64,
];

impl Op for MatMul {
    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<ValueType>, OpError> {
        let (a, b) = (req(inputs, 0)?.ty, req(inputs, 1)?.ty);
        if a.dtype != b.dtype {
            return Err(OpError::invalid(format!(
                "MatMul: input types differ: {} and {}",
                a.dtype, b.dtype
            )));
        }
        expect_dtype(a, &MATMUL_DTYPES, "MatMul: input")?;
        let s = MatMulShape::new(&a.shape, &b.shape)?;
        Ok(vec![ValueType::new(a.dtype, s.out)])
    }

    fn run_cpu(
        &self,
        inputs: &[Option<&Tensor>],
        _outputs: &[ValueType],
    ) -> Result<Vec<Tensor>, OpError> {
        let (a, b) = (req(inputs, 0)?, req(inputs, 1)?);
        let s = MatMulShape::new(a.shape(), b.shape())?;
        let y = match a.dtype() {
            DType::F32 => matmul_typed::<f32>(&s, a, b, 1.0, 0.0),
            DType::F64 => matmul_typed::<f64>(&s, a, b, 1.0, 0.0),
            DType::I32 => matmul_typed::<i32>(&s, a, b, 1, 0),
            DType::I64 => matmul_typed::<i64>(&s, a, b, 1, 0),
            DType::U32 => matmul_typed::<u32>(&s, a, b, 1, 0),
            DType::U64 => matmul_typed::<u64>(&s, a, b, 1, 0),
            other => Err(OpError::unsupported(format!(
                "MatMul: input of type {other}"
            ))),
        }?;
        Ok(vec![y])
    }

    fn gpu(&self, inputs: &[Option<&ValueType>], _outputs: &[ValueType]) -> Option<GpuKernel> {
        // f32 (gemm.comp) or f16 (gemm_simple.comp; the CPU side runs it through f32); bf16
        // has only the tensor-core kernels.
        plain_kernel(MatMul::describe(inputs)?, &KernelTuning::default())
    }

    fn gpu_planned(
        &self,
        inputs: &[Option<InferInput<'_>>],
        _outputs: &[ValueType],
        tuning: &KernelTuning,
    ) -> Option<GpuKernel> {
        plain_kernel(MatMul::describe(&types_of(inputs))?, tuning)
    }

    fn gpu_preferred(
        &self,
        inputs: &[Option<InferInput<'_>>],
        _outputs: &[ValueType],
        tuning: &KernelTuning,
    ) -> Vec<GpuKernel> {
        MatMul::describe(&types_of(inputs)).map_or_else(Vec::new, |g| coop::kernels(g, tuning))
    }

    fn flops(&self, inputs: &[Option<&ValueType>], _outputs: &[ValueType]) -> u64 {
        match (opt(inputs, 0), opt(inputs, 1)) {
            (Some(a), Some(b)) => MatMulShape::new(&a.shape, &b.shape)
                .map(|s| 2 * (s.m * s.n * s.k) as u64 * numel(&s.batch) as u64)
                .unwrap_or(0),
            _ => 0,
        }
    }
}

impl MatMul {
    /// The product on the GPU, for float operands of one type.
    fn describe(inputs: &[Option<&ValueType>]) -> Option<(DType, GpuGemm)> {
        let (a, b) = (req(inputs, 0).ok()?, req(inputs, 1).ok()?);
        if !matches!(a.dtype, DType::F32 | DType::F16 | DType::BF16) || b.dtype != a.dtype {
            return None;
        }
        let s = MatMulShape::new(&a.shape, &b.shape).ok()?;
        Some((
            a.dtype,
            GpuGemm {
                half: a.dtype == DType::F16,
                coop: None,
                m: s.m,
                n: s.n,
                k: s.k,
                a: Strided {
                    off: 0,
                    rs: s.k,
                    cs: 1,
                },
                b: Strided {
                    off: 0,
                    rs: s.n,
                    cs: 1,
                },
                batch: s.batch,
                a_batch: s.a_batch,
                b_batch: s.b_batch,
                c: None,
                alpha: 1.0,
                beta: 0.0,
                sizes: [a.numel(), b.numel(), numel(&s.out)],
            },
        ))
    }
}

/// Gemm-1..6 had a `broadcast` flag for C, and before opset 11 C was required; accepting any
/// C that broadcasts one way to (M, N), or none, covers every version.
#[derive(Debug)]
struct Gemm {
    alpha: f32,
    beta: f32,
    trans_a: bool,
    trans_b: bool,
}

/// Gemm's geometry: A' (M x K) and B' (K x N) as strided views of A and B, and C's strides
/// over (M, N) (0 on broadcast axes).
#[derive(Debug, Clone, PartialEq, Eq)]
struct GemmShape {
    m: usize,
    k: usize,
    n: usize,
    a: Strided,
    b: Strided,
    c: Option<(usize, usize)>,
}

impl Gemm {
    fn build(spec: &NodeSpec<'_>) -> Result<Box<dyn Op>, OpError> {
        Ok(Box::new(Gemm {
            alpha: spec.attrs.float("alpha", 1.0)?,
            beta: spec.attrs.float("beta", 1.0)?,
            trans_a: spec.attrs.int("transA", 0)? != 0,
            trans_b: spec.attrs.int("transB", 0)? != 0,
        }))
    }

    fn shape(&self, a: &[usize], b: &[usize], c: Option<&[usize]>) -> Result<GemmShape, OpError> {
        if a.len() != 2 || b.len() != 2 {
            return Err(OpError::invalid(format!(
                "Gemm: A and B must be 2-D, got {a:?} and {b:?}"
            )));
        }
        let (m, k) = if self.trans_a {
            (a[1], a[0])
        } else {
            (a[0], a[1])
        };
        let (kb, n) = if self.trans_b {
            (b[1], b[0])
        } else {
            (b[0], b[1])
        };
        if k != kb {
            return Err(OpError::invalid(format!(
                "Gemm: inner dimensions differ: A {a:?}{} x B {b:?}{} ({k} vs {kb})",
                if self.trans_a { " transposed" } else { "" },
                if self.trans_b { " transposed" } else { "" },
            )));
        }
        // (i, p) of A' and (p, j) of B', with the stored layouts swapped when transposed.
        let sa = if self.trans_a {
            Strided {
                off: 0,
                rs: 1,
                cs: m,
            }
        } else {
            Strided {
                off: 0,
                rs: k,
                cs: 1,
            }
        };
        let sb = if self.trans_b {
            Strided {
                off: 0,
                rs: 1,
                cs: k,
            }
        } else {
            Strided {
                off: 0,
                rs: n,
                cs: 1,
            }
        };
        let c = match c {
            None => None,
            Some(c) => {
                let fits = c.len() <= 2 && broadcast_shapes(c, &[m, n]).is_ok_and(|s| s == [m, n]);
                if !fits {
                    return Err(OpError::invalid(format!(
                        "Gemm: C {c:?} does not broadcast to the output [{m}, {n}]"
                    )));
                }
                let s = broadcast_strides(c, &[m, n]);
                Some((s[0], s[1]))
            }
        };
        Ok(GemmShape {
            m,
            k,
            n,
            a: sa,
            b: sb,
            c,
        })
    }

    #[allow(clippy::too_many_arguments)]
    fn run_typed<T: MatElem>(
        &self,
        s: &GemmShape,
        a: &Tensor,
        b: &Tensor,
        c: Option<&Tensor>,
        alpha: T,
        beta: T,
        zero: T,
    ) -> Result<Tensor, OpError> {
        let (x, y) = (view::<T>(a)?, view::<T>(b)?);
        let mut out = vec![zero; s.m * s.n];
        // beta == 0 drops C altogether (as onnxruntime does), so a NaN in C does not leak.
        let beta = match (c, s.c) {
            (Some(c), Some((rc, cc))) if beta != zero => {
                let cv = view::<T>(c)?;
                for (i, row) in out.chunks_mut(s.n.max(1)).enumerate() {
                    for (j, v) in row.iter_mut().enumerate() {
                        *v = cv[i * rc + j * cc];
                    }
                }
                beta
            }
            _ => zero,
        };
        T::gemm(s.m, s.k, s.n, alpha, &x, s.a, &y, s.b, beta, &mut out);
        Ok(Tensor::from_vec(vec![s.m, s.n], out))
    }
}

impl Op for Gemm {
    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<ValueType>, OpError> {
        let (a, b) = (req(inputs, 0)?.ty, req(inputs, 1)?.ty);
        let c = opt(inputs, 2).map(|c| c.ty);
        for t in [Some(b), c].into_iter().flatten() {
            if t.dtype != a.dtype {
                return Err(OpError::invalid(format!(
                    "Gemm: input types differ: {} and {}",
                    a.dtype, t.dtype
                )));
            }
        }
        expect_dtype(a, &[DType::F32, DType::F64], "Gemm: input")?;
        let s = self.shape(&a.shape, &b.shape, c.map(|c| &c.shape[..]))?;
        Ok(vec![ValueType::new(a.dtype, vec![s.m, s.n])])
    }

    fn run_cpu(
        &self,
        inputs: &[Option<&Tensor>],
        _outputs: &[ValueType],
    ) -> Result<Vec<Tensor>, OpError> {
        let (a, b, c) = (req(inputs, 0)?, req(inputs, 1)?, opt(inputs, 2));
        let s = self.shape(a.shape(), b.shape(), c.map(|c| c.shape()))?;
        let y = match a.dtype() {
            DType::F32 => self.run_typed::<f32>(&s, a, b, c, self.alpha, self.beta, 0.0),
            DType::F64 => {
                self.run_typed::<f64>(&s, a, b, c, self.alpha as f64, self.beta as f64, 0.0)
            }
            other => Err(OpError::unsupported(format!("Gemm: input of type {other}"))),
        }?;
        Ok(vec![y])
    }

    fn gpu(&self, inputs: &[Option<&ValueType>], outputs: &[ValueType]) -> Option<GpuKernel> {
        plain_kernel(self.describe(inputs, outputs)?, &KernelTuning::default())
    }

    fn gpu_planned(
        &self,
        inputs: &[Option<InferInput<'_>>],
        outputs: &[ValueType],
        tuning: &KernelTuning,
    ) -> Option<GpuKernel> {
        plain_kernel(self.describe(&types_of(inputs), outputs)?, tuning)
    }

    fn gpu_preferred(
        &self,
        inputs: &[Option<InferInput<'_>>],
        outputs: &[ValueType],
        tuning: &KernelTuning,
    ) -> Vec<GpuKernel> {
        self.describe(&types_of(inputs), outputs)
            .map_or_else(Vec::new, |g| coop::kernels(g, tuning))
    }

    fn flops(&self, inputs: &[Option<&ValueType>], _outputs: &[ValueType]) -> u64 {
        let (Some(a), Some(b)) = (opt(inputs, 0), opt(inputs, 1)) else {
            return 0;
        };
        let c = opt(inputs, 2).map(|c| &c.shape[..]);
        self.shape(&a.shape, &b.shape, c)
            .map(|s| (2 * s.m * s.n * s.k) as u64)
            .unwrap_or(0)
    }
}

impl Gemm {
    /// The product on the GPU, for float operands (and C) of one type.
    fn describe(
        &self,
        inputs: &[Option<&ValueType>],
        outputs: &[ValueType],
    ) -> Option<(DType, GpuGemm)> {
        let (a, b, c) = (req(inputs, 0).ok()?, req(inputs, 1).ok()?, opt(inputs, 2));
        if !matches!(a.dtype, DType::F32 | DType::F16 | DType::BF16)
            || b.dtype != a.dtype
            || c.is_some_and(|c| c.dtype != a.dtype)
        {
            return None;
        }
        let s = self
            .shape(&a.shape, &b.shape, c.map(|c| &c.shape[..]))
            .ok()?;
        Some((
            a.dtype,
            GpuGemm {
                half: a.dtype == DType::F16,
                coop: None,
                m: s.m,
                n: s.n,
                k: s.k,
                a: s.a,
                b: s.b,
                batch: vec![],
                a_batch: vec![],
                b_batch: vec![],
                c: if self.beta != 0.0 { s.c } else { None },
                alpha: self.alpha,
                beta: self.beta,
                sizes: [a.numel(), b.numel(), outputs.first()?.numel()],
            },
        ))
    }
}

mod coop;
#[cfg(test)]
mod coop_tests;
mod gemv;
mod gpu;
pub mod norm;
mod splitk;
pub mod swiglu;
#[cfg(test)]
mod tests;
