//! MatMul (numpy semantics: 1-D promotion, broadcast batch dimensions) and Gemm
//! (`alpha * A' * B' + beta * C`, C broadcast one way to (M, N)).
//!
//! Both run on the CPU through `matrixmultiply` (floats) and on the GPU through one tiled
//! shader, `shaders/gemm.comp`, which reads A and B through row/column strides (so transposes
//! cost nothing) and walks up to three broadcast batch axes.

use rayon::prelude::*;

use super::elementwise::collapse;
use super::util::{broadcast_shapes, broadcast_strides, expect_dtype, opt, req};
use super::{BufRef, Dispatch, GpuKernel, InferInput, NodeSpec, Op, OpError, Registry, ValueType};
use crate::tensor::{DType, Element, Tensor, numel};

pub fn register(r: &mut Registry) {
    r.add("MatMul", |_| Ok(Box::new(MatMul)));
    r.add("Gemm", Gemm::build);
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
    ($t:ty, $f:path) => {
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
                // SAFETY: check_bounds proved that every index matrixmultiply forms,
                // off + i * rs + j * cs for i < rows and j < cols, lies inside `a` and `b`,
                // and i * n + j inside `c`; the strides are non-negative and fit isize; `c` is
                // borrowed mutably, so nothing else reads or writes it meanwhile.
                unsafe {
                    $f(
                        m,
                        k,
                        n,
                        alpha,
                        a.as_ptr().add(am.off),
                        am.rs as isize,
                        am.cs as isize,
                        b.as_ptr().add(bm.off),
                        bm.rs as isize,
                        bm.cs as isize,
                        beta,
                        c.as_mut_ptr(),
                        n as isize,
                        1,
                    );
                }
            }
        }
    };
}
float_gemm!(f32, matrixmultiply::sgemm);
float_gemm!(f64, matrixmultiply::dgemm);

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
/// rayon; matrixmultiply would run each of them on one thread anyway.
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
        if offs.len() > 1 && m * k + k * n <= SMALL_GEMM {
            offs.par_iter()
                .zip(out.par_chunks_mut(m * n))
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
        let (a, b) = (req(inputs, 0).ok()?, req(inputs, 1).ok()?);
        if a.dtype != DType::F32 || b.dtype != DType::F32 {
            return None;
        }
        let s = MatMulShape::new(&a.shape, &b.shape).ok()?;
        gemm_kernel(&GpuGemm {
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
        })
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
        let (a, b, c) = (req(inputs, 0).ok()?, req(inputs, 1).ok()?, opt(inputs, 2));
        if a.dtype != DType::F32 {
            return None;
        }
        let s = self
            .shape(&a.shape, &b.shape, c.map(|c| &c.shape[..]))
            .ok()?;
        gemm_kernel(&GpuGemm {
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
        })
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

/// Output tile of one workgroup of `gemm.comp` (both M and N).
const TILE: usize = 64;
/// Batch axes `gemm.comp` walks.
const GPU_BATCH_RANK: usize = 3;

/// Everything `gemm.comp` needs to know about one product.
#[derive(Debug, Clone)]
struct GpuGemm {
    m: usize,
    n: usize,
    k: usize,
    a: Strided,
    b: Strided,
    batch: Vec<usize>,
    a_batch: Vec<usize>,
    b_batch: Vec<usize>,
    /// C's row and column strides over (M, N), when there is a C term.
    c: Option<(usize, usize)>,
    alpha: f32,
    beta: f32,
    /// Elements of A, B and Y, so that every index the shader forms is known to fit 32 bits.
    sizes: [usize; 3],
}

/// Push-constant words of `gemm.comp`, after its four buffer addresses (A, B, C, Y):
/// M, N, K, nb1, nb2, A's rs, cs and three batch strides, the same for B, C's rs and cs,
/// alpha, beta, has_c. Batch index z (workgroup z) splits as ((i0 * nb1) + i1) * nb2 + i2.
fn gemm_kernel(g: &GpuGemm) -> Option<GpuKernel> {
    let word = |v: usize| u32::try_from(v).ok();
    if g.sizes.iter().any(|&s| word(s).is_none()) {
        return None;
    }
    let lay = collapse(&g.batch, &[g.a_batch.clone(), g.b_batch.clone()]);
    if lay.dims.len() > GPU_BATCH_RANK {
        return None;
    }
    let pad = GPU_BATCH_RANK - lay.dims.len();
    let padded = |v: &[usize], fill: usize| -> Vec<usize> {
        let mut p = vec![fill; pad];
        p.extend_from_slice(v);
        p
    };
    let (dims, sa, sb) = (
        padded(&lay.dims, 1),
        padded(&lay.strides[0], 0),
        padded(&lay.strides[1], 0),
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
    let groups = [g.n.div_ceil(TILE), g.m.div_ceil(TILE), numel(&g.batch)];
    if groups.iter().any(|&v| v > 65_535) {
        return None;
    }
    if groups.contains(&0) {
        // An empty output: nothing to compute.
        return Some(GpuKernel {
            scratch: vec![],
            dispatches: vec![],
        });
    }
    Some(GpuKernel {
        scratch: vec![],
        dispatches: vec![Dispatch {
            shader: "gemm",
            // Without a C term the shader never reads its C buffer; A stands in for it.
            buffers: vec![
                BufRef::Input(0),
                BufRef::Input(1),
                BufRef::Input(if g.c.is_some() { 2 } else { 0 }),
                BufRef::Output(0),
            ],
            params,
            groups: groups.map(|v| v as u32),
        }],
    })
}

#[cfg(test)]
mod tests {
    use super::super::elementwise::testutil::{Rng, assert_close, build, f64s, run, run1};
    use super::*;
    use crate::ops::AttrValue;

    /// numpy.matmul the slow way, accumulating in f64.
    fn naive_matmul(a: &[f64], ash: &[usize], b: &[f64], bsh: &[usize]) -> Vec<f64> {
        let mut a_sh = ash.to_vec();
        let mut b_sh = bsh.to_vec();
        if a_sh.len() == 1 {
            a_sh.insert(0, 1);
        }
        if b_sh.len() == 1 {
            b_sh.push(1);
        }
        let (m, k, n) = (
            a_sh[a_sh.len() - 2],
            a_sh[a_sh.len() - 1],
            b_sh[b_sh.len() - 1],
        );
        let rank = a_sh.len().max(b_sh.len());
        let pad = |s: &[usize]| [vec![1; rank - s.len()], s[..s.len() - 2].to_vec()].concat();
        let (pa, pb) = (pad(&a_sh), pad(&b_sh));
        let batch: Vec<usize> = pa
            .iter()
            .zip(&pb)
            .map(|(&x, &y)| if x == 1 { y } else { x })
            .collect();
        let flat = |shape: &[usize], idx: &[usize]| {
            shape
                .iter()
                .zip(idx)
                .fold(0, |k, (&d, &i)| k * d + if d == 1 { 0 } else { i })
        };
        let mut y = Vec::new();
        for z in 0..numel(&batch) {
            let mut idx = vec![0; batch.len()];
            let mut r = z;
            for ax in (0..batch.len()).rev() {
                idx[ax] = r % batch[ax];
                r /= batch[ax];
            }
            let (za, zb) = (flat(&pa, &idx), flat(&pb, &idx));
            for i in 0..m {
                for j in 0..n {
                    let s: f64 = (0..k)
                        .map(|p| a[za * m * k + i * k + p] * b[zb * k * n + p * n + j])
                        .sum();
                    y.push(s);
                }
            }
        }
        y
    }

    fn check_matmul(ash: &[usize], bsh: &[usize], out: &[usize], seed: u64) {
        let mut rng = Rng::new(seed);
        let (a, b) = (rng.tensor_f32(ash), rng.tensor_f32(bsh));
        let y = run1(&*build("MatMul", 13, &[]).unwrap(), &[&a, &b]).unwrap();
        assert_eq!(y.shape(), out, "{ash:?} x {bsh:?}");
        let want = naive_matmul(&f64s(&a), ash, &f64s(&b), bsh);
        // f32 accumulation over k terms of size <= 1.
        let k = if ash.len() == 1 {
            ash[0]
        } else {
            ash[ash.len() - 1]
        };
        assert_close(&f64s(&y), &want, 1e-6 * (k as f64).max(1.0));
    }

    #[test]
    fn matmul_by_hand() {
        let a = Tensor::from_vec(vec![2, 3], vec![1f32, 2., 3., 4., 5., 6.]);
        let b = Tensor::from_vec(vec![3, 2], vec![7f32, 8., 9., 10., 11., 12.]);
        let y = run1(&*build("MatMul", 13, &[]).unwrap(), &[&a, &b]).unwrap();
        assert_eq!(&*y.view::<f32>().unwrap(), &[58., 64., 139., 154.]);
        let ai = Tensor::from_vec(vec![2, 3], vec![1i64, 2, 3, 4, 5, 6]);
        let bi = Tensor::from_vec(vec![3], vec![1i64, 0, -1]);
        let y = run1(&*build("MatMul", 13, &[]).unwrap(), &[&ai, &bi]).unwrap();
        assert_eq!(y.shape(), &[2]);
        assert_eq!(&*y.view::<i64>().unwrap(), &[-2, -2]);
    }

    #[test]
    fn matmul_shapes_follow_numpy() {
        let cases: &[(&[usize], &[usize], &[usize])] = &[
            (&[3], &[3], &[]),
            (&[3], &[3, 4], &[4]),
            (&[2, 3], &[3], &[2]),
            (&[5, 2, 3], &[3], &[5, 2]),
            (&[3], &[5, 3, 4], &[5, 4]),
            (&[2, 1, 4, 3], &[3, 3, 5], &[2, 3, 4, 5]),
            (&[1, 3, 2, 3], &[2, 1, 3, 2], &[2, 3, 2, 2]),
            (&[37, 61], &[61, 19], &[37, 19]),
            (&[4, 1], &[1, 5], &[4, 5]),
            (&[3, 128, 256], &[3, 256, 64], &[3, 128, 64]),
            // Large enough for matrixmultiply's threads.
            (&[200, 300], &[300, 150], &[200, 150]),
            // Batch axes that alternate broadcasting.
            (
                &[2, 1, 3, 1, 4, 5],
                &[1, 2, 1, 3, 5, 2],
                &[2, 2, 3, 3, 4, 2],
            ),
        ];
        for (i, (a, b, out)) in cases.iter().enumerate() {
            check_matmul(a, b, out, i as u64);
        }
    }

    #[test]
    fn matmul_empty_dims() {
        let op = build("MatMul", 13, &[]).unwrap();
        let y = run1(
            &*op,
            &[
                &Tensor::zeros(DType::F32, vec![2, 0]),
                &Tensor::zeros(DType::F32, vec![0, 3]),
            ],
        )
        .unwrap();
        assert_eq!(y.shape(), &[2, 3]);
        assert!(y.view::<f32>().unwrap().iter().all(|&v| v == 0.0));
        let y = run1(
            &*op,
            &[
                &Tensor::zeros(DType::F32, vec![0, 4]),
                &Tensor::zeros(DType::F32, vec![4, 3]),
            ],
        )
        .unwrap();
        assert_eq!(y.shape(), &[0, 3]);
    }

    #[test]
    fn matmul_f64_and_int_match_references() {
        let mut rng = Rng::new(11);
        let (a, b) = (rng.f64s(3 * 5 * 4), rng.f64s(4 * 6));
        let y = run1(
            &*build("MatMul", 13, &[]).unwrap(),
            &[
                &Tensor::from_vec(vec![3, 5, 4], a.clone()),
                &Tensor::from_vec(vec![4, 6], b.clone()),
            ],
        )
        .unwrap();
        assert_close(&f64s(&y), &naive_matmul(&a, &[3, 5, 4], &b, &[4, 6]), 1e-13);

        let a: Vec<i32> = (0..12).map(|v| v - 6).collect();
        let b: Vec<i32> = (0..12).map(|v| 3 * v - 20).collect();
        let y = run1(
            &*build("MatMul", 13, &[]).unwrap(),
            &[
                &Tensor::from_vec(vec![3, 4], a.clone()),
                &Tensor::from_vec(vec![4, 3], b.clone()),
            ],
        )
        .unwrap();
        let to64 = |v: &[i32]| v.iter().map(|&x| x as f64).collect::<Vec<_>>();
        let want = naive_matmul(&to64(&a), &[3, 4], &to64(&b), &[4, 3]);
        assert_eq!(f64s(&y), want);
    }

    #[test]
    fn matmul_errors_name_the_shapes() {
        let op = build("MatMul", 13, &[]).unwrap();
        let z = |s: &[usize]| Tensor::zeros(DType::F32, s.to_vec());
        let e = run1(&*op, &[&z(&[2, 3]), &z(&[4, 5])])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("MatMul: inner dimensions differ: [2, 3] x [4, 5]"),
            "{e}"
        );
        let e = run1(&*op, &[&z(&[2, 2, 3]), &z(&[3, 3, 4])])
            .unwrap_err()
            .to_string();
        assert!(e.contains("batch"), "{e}");
        assert!(run1(&*op, &[&z(&[]), &z(&[3])]).is_err());
        let i = Tensor::zeros(DType::I32, vec![3, 2]);
        assert!(run1(&*op, &[&z(&[2, 3]), &i]).is_err());
        let h = Tensor::zeros(DType::F16, vec![2, 2]);
        assert!(run1(&*op, &[&h, &h]).is_err());
    }

    /// alpha * A' * B' + beta * C, the slow way.
    #[allow(clippy::too_many_arguments)]
    fn naive_gemm(
        a: &[f64],
        b: &[f64],
        c: Option<(&[f64], &[usize])>,
        m: usize,
        k: usize,
        n: usize,
        ta: bool,
        tb: bool,
        alpha: f64,
        beta: f64,
    ) -> Vec<f64> {
        let mut y = Vec::new();
        for i in 0..m {
            for j in 0..n {
                let s: f64 = (0..k)
                    .map(|p| {
                        let x = if ta { a[p * m + i] } else { a[i * k + p] };
                        let w = if tb { b[j * k + p] } else { b[p * n + j] };
                        x * w
                    })
                    .sum();
                let cv = match c {
                    None => 0.0,
                    Some((c, shape)) => {
                        let sh = [vec![1; 2 - shape.len()], shape.to_vec()].concat();
                        c[(if sh[0] == 1 { 0 } else { i }) * sh[1] + if sh[1] == 1 { 0 } else { j }]
                    }
                };
                y.push(alpha * s + beta * cv);
            }
        }
        y
    }

    #[test]
    fn gemm_every_transpose_scale_and_c_shape() {
        let (m, k, n) = (5, 7, 3);
        let mut rng = Rng::new(5);
        let c_shapes: &[Option<&[usize]>] = &[
            None,
            Some(&[]),
            Some(&[1]),
            Some(&[n]),
            Some(&[1, n]),
            Some(&[m, 1]),
            Some(&[m, n]),
            Some(&[1, 1]),
        ];
        let mut seen = 0;
        for ta in [false, true] {
            for tb in [false, true] {
                for (alpha, beta) in [(1.0f32, 1.0f32), (0.5, -2.0), (-1.5, 0.0)] {
                    for cs in c_shapes {
                        let a = rng.tensor_f32(&if ta { [k, m] } else { [m, k] });
                        let b = rng.tensor_f32(&if tb { [n, k] } else { [k, n] });
                        let c = cs.map(|s| rng.tensor_f32(s));
                        let attrs = [
                            ("alpha", AttrValue::Float(alpha)),
                            ("beta", AttrValue::Float(beta)),
                            ("transA", AttrValue::Int(ta as i64)),
                            ("transB", AttrValue::Int(tb as i64)),
                        ];
                        let op = build("Gemm", 13, &attrs).unwrap();
                        let y = run(&*op, &[Some(&a), Some(&b), c.as_ref()])
                            .unwrap()
                            .remove(0);
                        assert_eq!(y.shape(), &[m, n]);
                        let cv = c.as_ref().map(f64s);
                        let want = naive_gemm(
                            &f64s(&a),
                            &f64s(&b),
                            cv.as_deref().zip(*cs),
                            m,
                            k,
                            n,
                            ta,
                            tb,
                            alpha as f64,
                            beta as f64,
                        );
                        assert_close(&f64s(&y), &want, 1e-5);
                        seen += 1;
                    }
                }
            }
        }
        assert_eq!(seen, 96);
    }

    #[test]
    fn gemm_defaults_and_zero_beta() {
        // alpha = beta = 1 by default; with beta = 0 a NaN in C must not leak into Y.
        let a = Tensor::from_vec(vec![1, 2], vec![1f32, 2.]);
        let b = Tensor::from_vec(vec![2, 1], vec![3f32, 4.]);
        let c = Tensor::from_vec(vec![1], vec![0.5f32]);
        let y = run1(&*build("Gemm", 11, &[]).unwrap(), &[&a, &b, &c]).unwrap();
        assert_eq!(&*y.view::<f32>().unwrap(), &[11.5]);
        let nan = Tensor::from_vec(vec![1], vec![f32::NAN]);
        let op = build("Gemm", 11, &[("beta", AttrValue::Float(0.0))]).unwrap();
        assert_eq!(
            &*run1(&*op, &[&a, &b, &nan]).unwrap().view::<f32>().unwrap(),
            &[11.0]
        );
        let a64 = Tensor::from_vec(vec![2, 1], vec![1f64, 2.]);
        let b64 = Tensor::from_vec(vec![1, 2], vec![3f64, 4.]);
        let y = run1(&*build("Gemm", 13, &[]).unwrap(), &[&a64, &b64]).unwrap();
        assert_eq!(&*y.view::<f64>().unwrap(), &[3., 4., 6., 8.]);
    }

    #[test]
    fn gemm_errors() {
        let z = |s: &[usize]| Tensor::zeros(DType::F32, s.to_vec());
        let op = build("Gemm", 13, &[]).unwrap();
        let e = run1(&*op, &[&z(&[2, 3]), &z(&[2, 4])])
            .unwrap_err()
            .to_string();
        assert!(e.contains("inner dimensions differ"), "{e}");
        assert!(run1(&*op, &[&z(&[2, 3, 1]), &z(&[3, 4])]).is_err());
        let e = run1(&*op, &[&z(&[2, 3]), &z(&[3, 4]), &z(&[2])])
            .unwrap_err()
            .to_string();
        assert!(e.contains("C [2]"), "{e}");
        assert!(run1(&*op, &[&z(&[2, 3]), &z(&[3, 4]), &z(&[1, 2, 4])]).is_err());
        assert!(run1(&*op, &[&z(&[2, 3]), &z(&[3, 4]), &z(&[4, 4])]).is_err());
    }

    #[test]
    fn flops_count_multiply_adds() {
        let op = build("MatMul", 13, &[]).unwrap();
        let (a, b) = (
            ValueType::new(DType::F32, vec![3, 1, 4, 5]),
            ValueType::new(DType::F32, vec![2, 5, 6]),
        );
        assert_eq!(op.flops(&[Some(&a), Some(&b)], &[]), 2 * 4 * 6 * 5 * 6);
        let op = build("Gemm", 13, &[("transB", AttrValue::Int(1))]).unwrap();
        let (a, b) = (
            ValueType::new(DType::F32, vec![4, 5]),
            ValueType::new(DType::F32, vec![6, 5]),
        );
        assert_eq!(op.flops(&[Some(&a), Some(&b)], &[]), 2 * 4 * 6 * 5);
    }

    #[test]
    fn gpu_params_carry_strides_and_batches() {
        let op = build(
            "Gemm",
            13,
            &[
                ("transA", AttrValue::Int(1)),
                ("beta", AttrValue::Float(2.0)),
            ],
        )
        .unwrap();
        let (a, b, c) = (
            ValueType::new(DType::F32, vec![7, 130]),
            ValueType::new(DType::F32, vec![7, 65]),
            ValueType::new(DType::F32, vec![130, 1]),
        );
        let k = op
            .gpu(
                &[Some(&a), Some(&b), Some(&c)],
                &[ValueType::new(DType::F32, vec![130, 65])],
            )
            .unwrap();
        let d = &k.dispatches[0];
        assert_eq!((d.shader, d.groups), ("gemm", [2, 3, 1]));
        assert_eq!(d.buffers[2], BufRef::Input(2));
        assert_eq!(&d.params[..7], &[130, 65, 7, 1, 1, 1, 130]);
        assert_eq!(&d.params[10..12], &[65, 1]);
        assert_eq!(&d.params[15..], &[1, 0, 1f32.to_bits(), 2f32.to_bits(), 1]);
        assert!(8 * d.buffers.len() + 4 * d.params.len() <= 128);

        let op = build("MatMul", 13, &[]).unwrap();
        let (a, b) = (
            ValueType::new(DType::F32, vec![2, 1, 4, 3]),
            ValueType::new(DType::F32, vec![5, 3, 6]),
        );
        let out = ValueType::new(DType::F32, vec![2, 5, 4, 6]);
        let k = op.gpu(&[Some(&a), Some(&b)], &[out]).unwrap();
        let d = &k.dispatches[0];
        assert_eq!(d.groups, [1, 1, 10]);
        // Batch [2, 5]: nb1 = 2, nb2 = 5; A strides (0, 12, 0), B strides (0, 0, 18).
        assert_eq!(&d.params[3..5], &[2, 5]);
        assert_eq!(&d.params[7..10], &[0, 12, 0]);
        assert_eq!(&d.params[12..15], &[0, 0, 18]);
        let i = ValueType::new(DType::I32, vec![2, 2]);
        assert!(
            op.gpu(&[Some(&i), Some(&i)], std::slice::from_ref(&i))
                .is_none()
        );
    }
}
