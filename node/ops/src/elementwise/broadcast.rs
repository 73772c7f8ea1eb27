//! Numpy (multidirectional) broadcasting for binary kernels on the CPU, and the axis collapsing
//! that both the CPU loops and the GPU parameters use to keep the iteration rank small.

use rayon::prelude::*;

/// Below this many output elements a kernel runs on the calling thread: splitting smaller jobs
/// costs more in hand-offs than it wins.
pub const PARALLEL_MIN: usize = 64 * 1024;

/// Output elements per rayon task.
const TASK_ELEMS: usize = 16 * 1024;

/// An iteration space with size-1 axes dropped and neighbouring axes merged wherever every
/// operand walks them as one (its stride on the outer axis equals stride x size of the inner
/// one, which also holds for two broadcast axes, both stride 0). The output is row-major over
/// `dims`, so it never blocks a merge.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Collapsed {
    pub dims: Vec<usize>,
    /// One stride list per operand, each as long as `dims`.
    pub strides: Vec<Vec<usize>>,
}

/// Collapses `dims` walked by operands with the given element strides (0 on broadcast axes).
pub fn collapse(dims: &[usize], strides: &[Vec<usize>]) -> Collapsed {
    let mut out = Collapsed {
        dims: Vec::new(),
        strides: vec![Vec::new(); strides.len()],
    };
    for (ax, &d) in dims.iter().enumerate() {
        if d == 1 {
            continue;
        }
        let merged = match out.dims.last_mut() {
            Some(last)
                if strides
                    .iter()
                    .zip(&out.strides)
                    .all(|(s, o)| o.last() == Some(&(s[ax] * d))) =>
            {
                *last *= d;
                true
            }
            _ => false,
        };
        for (s, o) in strides.iter().zip(out.strides.iter_mut()) {
            match o.last_mut() {
                Some(last) if merged => *last = s[ax],
                _ => o.push(s[ax]),
            }
        }
        if !merged {
            out.dims.push(d);
        }
    }
    out
}

/// `f(a, b)` over the broadcast of `a` (shape `a_shape`) and `b` (shape `b_shape`) to `out`.
/// The shapes must already be known to broadcast to `out` (the op's shape rule checked them).
pub fn binary<TA, TB, U, F>(
    a: &[TA],
    a_shape: &[usize],
    b: &[TB],
    b_shape: &[usize],
    out: &[usize],
    f: F,
) -> Vec<U>
where
    TA: Copy + Send + Sync,
    TB: Copy + Send + Sync,
    U: Copy + Default + Send + Sync,
    F: Fn(TA, TB) -> U + Sync + Send,
{
    let n: usize = out.iter().product();
    let par = n >= PARALLEL_MIN;
    if n == 0 {
        return Vec::new();
    }
    // Broadcasting only repeats elements, so an operand as large as the output is the output's
    // own row-major order.
    if a.len() == n && b.len() == n {
        return map_into(n, par, &|start, ys| {
            let (xa, xb) = (&a[start..start + ys.len()], &b[start..start + ys.len()]);
            for ((o, &x), &y) in ys.iter_mut().zip(xa).zip(xb) {
                *o = f(x, y);
            }
        });
    }
    if a.len() == n && b.len() == 1 {
        let y = b[0];
        return map_into(n, par, &|start, ys| {
            for (o, &x) in ys.iter_mut().zip(&a[start..]) {
                *o = f(x, y);
            }
        });
    }
    if a.len() == 1 && b.len() == n {
        let x = a[0];
        return map_into(n, par, &|start, ys| {
            for (o, &y) in ys.iter_mut().zip(&b[start..]) {
                *o = f(x, y);
            }
        });
    }

    let sa = super::super::util::broadcast_strides(a_shape, out);
    let sb = super::super::util::broadcast_strides(b_shape, out);
    let lay = collapse(out, &[sa, sb]);
    // n > 1 here (n == 1 took a fast path), so at least one axis survived.
    let inner = *lay.dims.last().unwrap_or(&1);
    let walk = Walk {
        lay: &lay,
        a,
        b,
        f: &f,
    };
    // Whole rows per task, so each task starts its odometer once.
    let rows_per_task = (TASK_ELEMS / inner).max(1);
    let mut y = vec![U::default(); n];
    chunks(&mut y, rows_per_task * inner, par, &|t, ys| {
        walk.fill(ys, t * rows_per_task)
    });
    y
}

/// A fresh output of `n` elements, `fill(start, part)` writing each part (on rayon, in
/// [`TASK_ELEMS`]-sized parts, when `par`).
fn map_into<U: Copy + Default + Send>(
    n: usize,
    par: bool,
    fill: &(dyn Fn(usize, &mut [U]) + Sync),
) -> Vec<U> {
    let mut y = vec![U::default(); n];
    chunks(&mut y, TASK_ELEMS, par, &|t, ys| fill(t * TASK_ELEMS, ys));
    y
}

/// `f(i, part)` for the `chunk`-sized parts of `y`, on rayon when `par`, else as one part.
///
/// The closure is a trait object on purpose: rayon's splitting and joining is then compiled
/// once per element type rather than once per kernel (every op and type pair's closure), which
/// had made rayon's generic code most of this crate's compile time.
fn chunks<U: Send>(y: &mut [U], chunk: usize, par: bool, f: &(dyn Fn(usize, &mut [U]) + Sync)) {
    if par {
        y.par_chunks_mut(chunk.max(1))
            .enumerate()
            .for_each(|(i, c)| f(i, c));
    } else if !y.is_empty() {
        let chunk = chunk.max(1);
        y.chunks_mut(chunk).enumerate().for_each(|(i, c)| f(i, c));
    }
}

/// The general strided loop: rows along the innermost collapsed axis, an odometer over the rest.
struct Walk<'a, TA, TB, F> {
    lay: &'a Collapsed,
    a: &'a [TA],
    b: &'a [TB],
    f: &'a F,
}

impl<TA: Copy, TB: Copy, F> Walk<'_, TA, TB, F> {
    /// Fills `out`, a whole number of rows starting at row `row0`.
    fn fill<U>(&self, out: &mut [U], row0: usize)
    where
        F: Fn(TA, TB) -> U,
    {
        let r = self.lay.dims.len();
        if r == 0 {
            // Every axis collapsed away: a scalar, one element (the odometer needs an axis).
            if let (Some(o), Some(&x), Some(&y)) = (out.first_mut(), self.a.first(), self.b.first())
            {
                *o = (self.f)(x, y);
            }
            return;
        }
        let dims = &self.lay.dims[..r - 1];
        let (sa, sb) = (&self.lay.strides[0], &self.lay.strides[1]);
        let (inner, ia, ib) = (self.lay.dims[r - 1], sa[r - 1], sb[r - 1]);
        let mut idx = vec![0usize; r - 1];
        let (mut oa, mut ob) = (0usize, 0usize);
        let mut rem = row0;
        for ax in (0..r - 1).rev() {
            idx[ax] = rem % dims[ax];
            rem /= dims[ax];
            oa += idx[ax] * sa[ax];
            ob += idx[ax] * sb[ax];
        }
        let f = self.f;
        for row in out.chunks_mut(inner) {
            // The common stride pairs get loops the compiler can vectorise.
            match (ia, ib) {
                (1, 1) => {
                    let (xa, xb) = (&self.a[oa..oa + inner], &self.b[ob..ob + inner]);
                    for ((o, &x), &y) in row.iter_mut().zip(xa).zip(xb) {
                        *o = f(x, y);
                    }
                }
                (1, 0) => {
                    let y = self.b[ob];
                    for (o, &x) in row.iter_mut().zip(&self.a[oa..oa + inner]) {
                        *o = f(x, y);
                    }
                }
                (0, 1) => {
                    let x = self.a[oa];
                    for (o, &y) in row.iter_mut().zip(&self.b[ob..ob + inner]) {
                        *o = f(x, y);
                    }
                }
                _ => {
                    for (j, o) in row.iter_mut().enumerate() {
                        *o = f(self.a[oa + j * ia], self.b[ob + j * ib]);
                    }
                }
            }
            for ax in (0..r - 1).rev() {
                idx[ax] += 1;
                oa += sa[ax];
                ob += sb[ax];
                if idx[ax] < dims[ax] {
                    break;
                }
                oa -= sa[ax] * dims[ax];
                ob -= sb[ax] * dims[ax];
                idx[ax] = 0;
            }
        }
    }
}

/// `f(x)` over every element, in parallel for large inputs.
pub fn unary<T, U, F>(x: &[T], f: F) -> Vec<U>
where
    T: Copy + Send + Sync,
    U: Copy + Default + Send,
    F: Fn(T) -> U + Sync + Send,
{
    map_into(x.len(), x.len() >= PARALLEL_MIN, &|start, ys| {
        for (o, &v) in ys.iter_mut().zip(&x[start..]) {
            *o = f(v);
        }
    })
}

/// Where's three-way broadcast: `f(c, x, y)` over the broadcast of the three shapes to `out`.
/// A plain odometer over the collapsed axes: Where is rare enough in models not to need the
/// binary walk's fast paths beyond the all-same-shape one.
pub fn ternary<TC, T, F>(
    c: (&[TC], &[usize]),
    x: (&[T], &[usize]),
    y: (&[T], &[usize]),
    out: &[usize],
    f: F,
) -> Vec<T>
where
    TC: Copy,
    T: Copy,
    F: Fn(TC, T, T) -> T,
{
    let n: usize = out.iter().product();
    if c.0.len() == n && x.0.len() == n && y.0.len() == n {
        return (0..n).map(|i| f(c.0[i], x.0[i], y.0[i])).collect();
    }
    let bs = super::super::util::broadcast_strides;
    let lay = collapse(out, &[bs(c.1, out), bs(x.1, out), bs(y.1, out)]);
    let r = lay.dims.len();
    let mut idx = vec![0usize; r];
    let mut off = [0usize; 3];
    let mut v = Vec::with_capacity(n);
    for _ in 0..n {
        v.push(f(c.0[off[0]], x.0[off[1]], y.0[off[2]]));
        for ax in (0..r).rev() {
            idx[ax] += 1;
            for (k, o) in off.iter_mut().enumerate() {
                *o += lay.strides[k][ax];
            }
            if idx[ax] < lay.dims[ax] {
                break;
            }
            for (k, o) in off.iter_mut().enumerate() {
                *o -= lay.strides[k][ax] * lay.dims[ax];
            }
            idx[ax] = 0;
        }
    }
    v
}
