//! The zero- or -inf-padded copy of a plane, split by stride phase, that depthwise
//! convolution (conv/depthwise.rs) and max pooling (pool/padded.rs) read their taps from:
//! element `[rp][cp][q][j]` is padded row `q * sh + rp`, column `j * sw + cp`. Numbering the
//! outputs `oy * wq + ox` over a phase's width `wq`, tap (ky, kx) of every output of the plane
//! is then one contiguous run of the buffer, at any stride, dilation or padding.

use crate::numeric::float::Float;
use crate::window::geometry::Axis;

/// The phase-split padded plane's sizes.
pub(crate) struct Phases {
    pub sh: usize,
    pub sw: usize,
    /// Rows and columns of one phase.
    pub rq: usize,
    pub wq: usize,
}

impl Phases {
    /// For strides `(sh, sw)` and a padded plane of `(rows, cols)`.
    pub(crate) fn new((sh, sw): (usize, usize), (rows, cols): (usize, usize)) -> Phases {
        Phases {
            sh,
            sw,
            rq: rows.div_ceil(sh),
            wq: cols.div_ceil(sw),
        }
    }

    /// Elements of the whole buffer.
    pub(crate) fn len(&self) -> usize {
        self.sh * self.sw * self.rq * self.wq
    }

    /// Where padded (row, column) lives in the buffer.
    pub(crate) fn at(&self, r: usize, c: usize) -> usize {
        self.row_at(r) + self.col_at(c)
    }

    /// The row's and the column's parts of [`Phases::at`], which add up.
    fn row_at(&self, r: usize) -> usize {
        ((r % self.sh) * self.sw * self.rq + r / self.sh) * self.wq
    }

    fn col_at(&self, c: usize) -> usize {
        (c % self.sw) * self.rq * self.wq + c / self.sw
    }

    /// Copies the plane `xc` (`ah.input` rows of `aw.input`) to its padded place in
    /// `planes`, leaving the padding as it is (a strided copy per row and phase, or a
    /// division per element, had cost more than a depthwise channel's multiply-adds on
    /// small planes).
    #[inline(always)]
    pub(crate) fn scatter<T: Float>(&self, ah: &Axis, aw: &Axis, xc: &[T], planes: &mut [T]) {
        for (r, xr) in xc.chunks_exact(aw.input).take(ah.input).enumerate() {
            let base = self.row_at(r + ah.pad_begin);
            scatter_row(
                &mut planes[base..],
                xr,
                aw.pad_begin,
                self.sw,
                self.rq * self.wq,
            );
        }
    }
}

/// Input row `xr` into its padded place: `row` starts at the row's column 0 in phase 0, each
/// of the `sw` column phases `phase` elements after the one before; input column `c` is
/// padded column `c + pad`.
#[inline(always)]
fn scatter_row<T: Float>(row: &mut [T], xr: &[T], pad: usize, sw: usize, phase: usize) {
    if sw == 1 {
        row[pad..][..xr.len()].copy_from_slice(xr);
        return;
    }
    if sw == 2 {
        // Pairs of columns whose first lands in phase 0, eight pairs at a time as fixed-size
        // arrays, which the compiler turns into shuffles (a strided loop per phase, as below,
        // ran a scalar load and bounds check a column and took 60% of a 3x3 stride-2 pool;
        // depthwise convolution's index table a column, 37% of its stride-2 layers).
        let c0 = pad % 2;
        let (p0, p1) = row.split_at_mut(phase);
        let at = (c0 + pad) / 2;
        if c0 == 1
            && let Some(&v) = xr.first()
        {
            p1[pad / 2] = v;
        }
        let (pairs, tail) = xr.get(c0..).unwrap_or_default().as_chunks::<2>();
        let (d0, d1) = (&mut p0[at..][..pairs.len()], &mut p1[at..][..pairs.len()]);
        let (blocks, rest) = pairs.as_chunks::<8>();
        let (e8, _) = d0.as_chunks_mut::<8>();
        let (o8, _) = d1.as_chunks_mut::<8>();
        for ((e, o), b) in e8.iter_mut().zip(o8.iter_mut()).zip(blocks) {
            *e = std::array::from_fn(|i| b[i][0]);
            *o = std::array::from_fn(|i| b[i][1]);
        }
        let done = blocks.len() * 8;
        for ((e, o), &[a, b]) in d0[done..].iter_mut().zip(&mut d1[done..]).zip(rest) {
            *e = a;
            *o = b;
        }
        if let Some(&v) = tail.first() {
            p0[at + pairs.len()] = v;
        }
        return;
    }
    for p in 0..sw {
        // The first input column landing in phase p, and where it goes.
        let c0 = (p + sw - pad % sw) % sw;
        let Some(src) = xr.get(c0..) else { continue };
        let dst = &mut row[p * phase + (c0 + pad) / sw..];
        for (d, &v) in dst.iter_mut().zip(src.iter().step_by(sw)) {
            *d = v;
        }
    }
}
