//! Remap: the index map behind most data-movement ops, and the kernels (CPU and GPU) that
//! apply it. An op describes, for each output axis, which input axis it walks and how: the
//! source coordinate of output coordinate `o` is `start + o * step`, resolved by a border rule
//! when it falls outside the input (Pad's modes; Tile is a wrap). Slice, Split, Expand, Tile,
//! Pad, DepthToSpace and SpaceToDepth are all such maps, and so are the element-sized fallbacks
//! of Transpose, Concat and the view ops. Elements are moved by size, so every dtype works.

use super::util::groups_1d;
use super::{BufRef, Dispatch};
use crate::tensor::{numel, strides};
use vkml_shaders::remap;

/// What a source coordinate outside `[0, in_dim)` reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Border {
    /// The remap's constant.
    Constant = 0,
    /// The nearest edge element.
    Edge = 1,
    /// Mirrored about the edge elements (numpy's "reflect": the edge is not repeated).
    Reflect = 2,
    /// Periodic (Tile, Pad's "wrap").
    Wrap = 3,
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Axis {
    pub out_dim: usize,
    /// Destination stride in elements (row-major over the walked shape unless the remap
    /// writes into part of a larger output, as Concat does).
    pub out_stride: usize,
    pub in_dim: usize,
    pub in_stride: usize,
    pub start: i64,
    pub step: i64,
    pub border: Border,
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Remap {
    pub axes: Vec<Axis>,
    pub in_base: usize,
    pub out_base: usize,
    /// The constant's little-endian bytes (the low `element size` of them count).
    pub constant: u64,
}

impl Remap {
    /// Walks `out_shape` row-major, writing a contiguous output; every axis starts as a
    /// broadcast of a unit input axis (in_dim 1, step 0) for the op to fill in.
    pub fn new(out_shape: &[usize]) -> Remap {
        let st = strides(out_shape);
        Remap {
            axes: out_shape
                .iter()
                .zip(st)
                .map(|(&d, s)| Axis {
                    out_dim: d,
                    out_stride: s,
                    in_dim: 1,
                    in_stride: 0,
                    start: 0,
                    step: 0,
                    border: Border::Constant,
                })
                .collect(),
            in_base: 0,
            out_base: 0,
            constant: 0,
        }
    }

    /// A transpose: output axis `k` walks input axis `perm[k]` of `in_shape`.
    pub fn transpose(in_shape: &[usize], perm: &[usize]) -> Remap {
        let out: Vec<usize> = perm.iter().map(|&p| in_shape[p]).collect();
        let st = strides(in_shape);
        let mut r = Remap::new(&out);
        for (a, &p) in r.axes.iter_mut().zip(perm) {
            a.in_dim = in_shape[p];
            a.in_stride = st[p];
            a.step = 1;
        }
        r
    }

    /// Output elements walked.
    pub fn len(&self) -> usize {
        numel(&self.axes.iter().map(|a| a.out_dim).collect::<Vec<_>>())
    }

    /// Applies the map to `src` (elements of `es` bytes), writing into `dst`.
    pub fn apply(&self, src: &[u8], es: usize, dst: &mut [u8]) {
        let n = self.len();
        if n == 0 {
            return;
        }
        let konst = self.constant.to_le_bytes();
        let konst = &konst[..es.min(8)];
        // Per axis, the source offset of each output coordinate (None: the constant).
        let maps: Vec<Vec<Option<usize>>> = self
            .axes
            .iter()
            .map(|a| {
                (0..a.out_dim)
                    .map(|o| {
                        resolve(a.start + o as i64 * a.step, a.in_dim, a.border)
                            .map(|i| i * a.in_stride)
                    })
                    .collect()
            })
            .collect();
        let put = |dst: &mut [u8], d: usize, s: Option<usize>| {
            let out = &mut dst[d * es..(d + 1) * es];
            match s {
                Some(s) => out.copy_from_slice(&src[s * es..(s + 1) * es]),
                None => {
                    for (i, b) in out.iter_mut().enumerate() {
                        *b = konst.get(i).copied().unwrap_or(0);
                    }
                }
            }
        };
        let Some((last, outer_axes)) = self.axes.split_last() else {
            put(dst, self.out_base, Some(self.in_base));
            return;
        };
        let lm = &maps[outer_axes.len()];
        // Rows that read and write consecutive elements are copied whole (Slice, Split,
        // Concat, Pad's interior...).
        let contiguous = last.out_stride == 1
            && lm[0].is_some()
            && lm
                .iter()
                .enumerate()
                .all(|(o, m)| *m == lm[0].map(|b| b + o));
        let row = last.out_dim;
        let mut idx = vec![0usize; outer_axes.len()];
        for _ in 0..n / row {
            let mut s = Some(self.in_base);
            let mut d = self.out_base;
            for (k, &o) in idx.iter().enumerate() {
                d += o * self.axes[k].out_stride;
                s = s.zip(maps[k][o]).map(|(a, b)| a + b);
            }
            match (s, lm[0]) {
                (Some(s), Some(first)) if contiguous => {
                    let at = (s + first) * es;
                    dst[d * es..(d + row) * es].copy_from_slice(&src[at..at + row * es]);
                }
                _ => {
                    for (o, m) in lm.iter().enumerate() {
                        put(dst, d + o * last.out_stride, s.zip(*m).map(|(a, b)| a + b));
                    }
                }
            }
            for k in (0..idx.len()).rev() {
                idx[k] += 1;
                if idx[k] < self.axes[k].out_dim {
                    break;
                }
                idx[k] = 0;
            }
        }
    }

    /// The GPU table (see shaders/remap.comp), or `None` when a value does not fit its 32-bit
    /// words.
    pub fn table(&self) -> Option<Vec<u32>> {
        let mut t = vec![self.constant as u32, (self.constant >> 32) as u32];
        for a in &self.axes {
            let w = |v: i64| i32::try_from(v).ok().map(|v| v as u32);
            let u = |v: usize| i32::try_from(v).ok().map(|v| v as u32);
            t.extend([
                u(a.out_dim)?,
                u(a.out_stride)?,
                u(a.in_dim)?,
                u(a.in_stride)?,
                w(a.start)?,
                w(a.step)?,
                a.border as u32,
            ]);
        }
        Some(t)
    }

    /// One dispatch of remap.comp's variant for `es` from `input` to `output`, reading its table from `table`
    /// (normally `BufRef::Table(self.table())`; a buffer a pre-pass fills when the starts come
    /// from run-time values). `None` when sizes pass 32-bit indexing or `es` is not 1, 2, 4, 8.
    pub fn dispatch_with(
        &self,
        es: usize,
        input: BufRef,
        table: BufRef,
        output: BufRef,
        in_elems: usize,
        out_elems: usize,
    ) -> Option<Dispatch> {
        let n = self.len();
        for v in [n, in_elems, out_elems, self.in_base, self.out_base] {
            i32::try_from(v).ok()?;
        }
        Some(Dispatch::new(
            by_width!(es, remap::Variant)?,
            remap::Buffers {
                x: input,
                t: table,
                y: output,
            },
            remap::Params {
                n: n as u32,
                rank: self.axes.len() as u32,
                in_base: self.in_base as u32,
                out_base: self.out_base as u32,
            },
            groups_1d(n, 256),
        ))
    }

    /// [`Remap::dispatch_with`] with the table uploaded as it is.
    pub fn dispatch(
        &self,
        es: usize,
        input: BufRef,
        output: BufRef,
        in_elems: usize,
        out_elems: usize,
    ) -> Option<Dispatch> {
        let table = BufRef::Table(self.table()?);
        self.dispatch_with(es, input, table, output, in_elems, out_elems)
    }
}

/// The source coordinate of `i` on an axis of `d` elements, or `None` for the constant.
pub(crate) fn resolve(i: i64, d: usize, border: Border) -> Option<usize> {
    let d = d as i64;
    if (0..d).contains(&i) {
        return Some(i as usize);
    }
    if d == 0 {
        return None;
    }
    Some(match border {
        Border::Constant => return None,
        Border::Edge => i.clamp(0, d - 1),
        Border::Wrap => i.rem_euclid(d),
        Border::Reflect if d == 1 => 0,
        Border::Reflect => {
            let period = 2 * (d - 1);
            let r = i.abs() % period;
            if r >= d { period - r } else { r }
        }
    } as usize)
}

/// A contiguous copy of `n` elements through the remap kernel, for tensors whose bytes are not
/// a whole number of 32-bit words (the word copy cannot serve them).
pub(crate) fn copy_dispatch(n: usize, es: usize) -> Option<Dispatch> {
    let mut r = Remap::new(&[n]);
    r.axes[0].in_dim = n;
    r.axes[0].in_stride = 1;
    r.axes[0].step = 1;
    r.dispatch(es, BufRef::Input(0), BufRef::Output(0), n, n)
}

#[cfg(test)]
mod tests;
