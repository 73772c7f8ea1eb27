//! CPU pooling kernels, parallel over (batch, channel) planes when there is enough work (see
//! conv/par.rs), with a direct path for 2-D max pooling without dilation.

use rayon::prelude::*;

use super::PoolShape;
use super::padded::Padded;
use crate::numeric::float::Float;
use crate::window::geometry::Axis;
use crate::window::par::{for_each_chunk, grain};

/// Calls `f(tap offset in the plane, column-major spatial offset)` for every tap of output
/// (od, oh, ow)'s window that reads the input rather than padding.
fn for_each_tap(a: &[Axis; 3], o: [usize; 3], mut f: impl FnMut(usize, usize)) {
    let [ad, ah, aw] = a;
    let (kd0, kd1) = ad.taps_inside(o[0]);
    let (kh0, kh1) = ah.taps_inside(o[1]);
    let (kw0, kw1) = aw.taps_inside(o[2]);
    for kd in kd0..kd1 {
        let id = (ad.start(o[0]) + (kd * ad.dilation) as i64) as usize;
        for kh in kh0..kh1 {
            let ih = (ah.start(o[1]) + (kh * ah.dilation) as i64) as usize;
            for kw in kw0..kw1 {
                let iw = (aw.start(o[2]) + (kw * aw.dilation) as i64) as usize;
                let row_major = (id * ah.input + ih) * aw.input + iw;
                let col_major = id + ih * ad.input + iw * ad.input * ah.input;
                f(row_major, col_major);
            }
        }
    }
}

/// Calls `f(output offset in the plane, [od, oh, ow])` for every output position.
fn for_each_output(a: &[Axis; 3], mut f: impl FnMut(usize, [usize; 3])) {
    let mut i = 0;
    for od in 0..a[0].output {
        for oh in 0..a[1].output {
            for ow in 0..a[2].output {
                f(i, [od, oh, ow]);
                i += 1;
            }
        }
    }
}

/// Max over each window; with `want_indices`, also the flat input index of the maximum (the
/// first one on ties), counting the spatial axes column-major when `column_major` (MaxPool's
/// storage_order = 1).
pub fn max_pool<T: Float>(
    s: &PoolShape,
    x: &[T],
    want_indices: bool,
    column_major: bool,
) -> (Vec<T>, Option<Vec<i64>>) {
    let (ip, op) = (s.in_plane(), s.out_plane());
    let a = s.axes3();
    let planes = s.n * s.c;
    let mut y = crate::window::par::zeroed(planes * op);
    let mut idx = vec![0i64; if want_indices { planes * op } else { 0 }];
    let work = |plane: usize, yp: &mut [T], mut ip_out: Option<&mut [i64]>| {
        let xp = &x[plane * ip..][..ip];
        for_each_output(&a, |i, o| {
            let mut best: Option<(T, usize)> = None;
            for_each_tap(&a, o, |r, c| {
                let v = xp[r];
                // Strict `>` keeps the first maximum, and a NaN only when it comes first.
                if best.is_none_or(|(b, _)| v > b) {
                    best = Some((v, if column_major { c } else { r }));
                }
            });
            yp[i] = best.map_or(T::LOWEST, |(v, _)| v);
            if let Some(ix) = ip_out.as_deref_mut() {
                ix[i] = best.map_or(-1, |(_, at)| (plane * ip + at) as i64);
            }
        });
    };
    let work_per_plane = op * a.iter().map(|x| x.kernel).product::<usize>();
    if want_indices {
        match grain(planes, work_per_plane) {
            Some(min) => y
                .par_chunks_mut(op.max(1))
                .zip(idx.par_chunks_mut(op.max(1)))
                .with_min_len(min)
                .enumerate()
                .for_each(|(plane, (yp, ix))| work(plane, yp, Some(ix))),
            None => y
                .chunks_mut(op.max(1))
                .zip(idx.chunks_mut(op.max(1)))
                .enumerate()
                .for_each(|(plane, (yp, ix))| work(plane, yp, Some(ix))),
        }
        (y, Some(idx))
    } else if a[0] == Axis::UNIT && a[1].dilation == 1 && a[2].dilation == 1 {
        if (a[2].kernel, a[2].stride) == (2, 2) {
            // The 2x2 windows at stride 2 have a vector kernel of their own (pairs.rs).
            let win = Window2d::new(&a[1], &a[2]);
            for_each_chunk(&mut y, op, work_per_plane, |plane, yp| {
                max_plane_pairs(&win, &x[plane * ip..][..ip], yp)
            });
        } else {
            let padded = Padded::new(&a[1], &a[2]);
            for_each_chunk(&mut y, op, work_per_plane, |plane, yp| {
                T::with_scratch(|buf| padded.plane(&x[plane * ip..][..ip], yp, buf))
            });
        }
        (y, None)
    } else {
        for_each_chunk(&mut y, op, work_per_plane, |plane, yp| {
            work(plane, yp, None)
        });
        (y, None)
    }
}

/// The input positions output `o`'s window covers inside the input on one axis (dilation 1),
/// as a half-open range, empty when the window lies wholly in the padding.
pub(super) fn inside(a: &Axis, o: usize) -> (usize, usize) {
    let start = a.start(o);
    let (c0, c1) = (start.max(0), (start + a.kernel as i64).min(a.input as i64));
    if c0 < c1 {
        (c0 as usize, c1 as usize)
    } else {
        (0, 0)
    }
}

/// The clipped windows of a 1-D or 2-D pool without dilation, worked out once for all planes.
struct Window2d {
    /// Input row length.
    iw: usize,
    /// Per output row, and per output column, the input range its windows cover.
    rows: Vec<(usize, usize)>,
    cols: Vec<(usize, usize)>,
    /// The output columns whose window lies wholly inside the input (one range).
    interior: (usize, usize),
}

impl Window2d {
    fn new(ah: &Axis, aw: &Axis) -> Window2d {
        let cols: Vec<(usize, usize)> = (0..aw.output).map(|o| inside(aw, o)).collect();
        let full = |&(c0, c1): &(usize, usize)| c1 - c0 == aw.kernel;
        let lo = cols.iter().position(full).unwrap_or(aw.output);
        let hi = cols.iter().rposition(full).map_or(lo, |i| i + 1);
        Window2d {
            iw: aw.input,
            rows: (0..ah.output).map(|o| inside(ah, o)).collect(),
            cols,
            interior: (lo, hi),
        }
    }
}

/// One plane of a 1-D or 2-D max pool of windows two columns wide at column stride 2, without
/// dilation (for 1-D the row axis is the unit axis). Each window is a rectangle of the input,
/// and its taps are visited in the general path's order (rows, then columns) so that ties and
/// NaN resolve the same way: the first tap starts the maximum and only a strictly greater
/// value replaces it.
fn max_plane_pairs<T: Float>(win: &Window2d, xp: &[T], yp: &mut [T]) {
    let (iw, cols) = (win.iw, &win.cols);
    let (lo, hi) = win.interior;
    let width = cols.len().max(1);
    let interior_done = lo < hi && T::max_pairs(&win.rows, xp, iw, yp, width, lo..hi, cols[lo].0);
    for (yrow, &(r0, r1)) in yp.chunks_mut(width).zip(&win.rows) {
        if r0 >= r1 {
            yrow.fill(T::LOWEST);
            continue;
        }
        // The border outputs, whose windows the padding clips along the row.
        for o in (0..lo).chain(hi..cols.len()) {
            let (c0, c1) = cols[o];
            yrow[o] = if c0 < c1 {
                let mut best = xp[r0 * iw + c0];
                for ih in r0..r1 {
                    for &t in &xp[ih * iw..][c0..c1] {
                        best = if t > best { t } else { best };
                    }
                }
                best
            } else {
                T::LOWEST
            };
        }
        if lo < hi && !interior_done {
            // The interior without the vector kernel (f64, or no AVX2), one tap at a time
            // across all its outputs: independent maxima the CPU overlaps rather than one
            // short chain of dependent comparisons per output.
            let rows = (r0..r1).map(|ih| &xp[ih * iw..][..iw]);
            rows_side_by_side::<T, 2>(&mut yrow[lo..hi], rows, cols[lo].0);
        }
    }
}

/// The interior maxima of one output row when each window's columns are the `K` inputs
/// after the previous window's (kernel width == stride == K), starting at column `c0` of each
/// of the window's input `rows`.
fn rows_side_by_side<'a, T: Float, const K: usize>(
    mid: &mut [T],
    rows: impl Iterator<Item = &'a [T]>,
    c0: usize,
) {
    for (i, row) in rows.enumerate() {
        let (windows, _) = row[c0..][..mid.len() * K].as_chunks::<K>();
        for (v, w) in mid.iter_mut().zip(windows) {
            // The window's first tap starts the maximum.
            let mut best = if i == 0 { w[0] } else { *v };
            for &t in w {
                best = if t > best { t } else { best };
            }
            *v = best;
        }
    }
}

/// Mean over each window, dividing by the taps inside the input, or with `count_include_pad`
/// by the taps inside the input and its explicit padding.
pub fn avg_pool<T: Float>(s: &PoolShape, x: &[T], count_include_pad: bool) -> Vec<T> {
    let (ip, op) = (s.in_plane(), s.out_plane());
    let a = s.axes3();
    let mut y = crate::window::par::zeroed(s.n * s.c * op);
    let work = op * a.iter().map(|x| x.kernel).product::<usize>();
    for_each_chunk(&mut y, op, work, |plane, yp| {
        let xp = &x[plane * ip..][..ip];
        for_each_output(&a, |i, o| {
            let mut sum = T::default();
            let mut count = 0usize;
            for_each_tap(&a, o, |r, _| {
                sum += xp[r];
                count += 1;
            });
            if count_include_pad {
                count = (0..3)
                    .map(|d| {
                        let ax = &a[d];
                        let (k0, k1) = ax.taps_within(
                            o[d],
                            -(ax.pad_begin as i64),
                            (ax.input + ax.pad_end) as i64,
                        );
                        k1.saturating_sub(k0)
                    })
                    .product();
            }
            yp[i] = if count == 0 {
                T::default()
            } else {
                sum / T::from_f64(count as f64)
            };
        });
    });
    y
}

/// `(sum |x|^p)^(1/p)` over each window's taps inside the input (padding adds nothing).
pub fn lp_pool<T: Float>(s: &PoolShape, x: &[T], p: u32) -> Vec<T> {
    let (ip, op) = (s.in_plane(), s.out_plane());
    let a = s.axes3();
    let mut y = crate::window::par::zeroed(s.n * s.c * op);
    let work = op * a.iter().map(|x| x.kernel).product::<usize>();
    for_each_chunk(&mut y, op, work, |plane, yp| {
        let xp = &x[plane * ip..][..ip];
        for_each_output(&a, |i, o| {
            let mut sum = 0f64;
            for_each_tap(&a, o, |r, _| sum += xp[r].to_f64().abs().powi(p as i32));
            yp[i] = T::from_f64(sum.powf(1.0 / p as f64));
        });
    });
    y
}

/// Max or mean of each plane of `plane` elements (accumulated in f64 for the mean).
pub fn global_pool<T: Float>(x: &[T], plane: usize, max: bool) -> Vec<T> {
    let one = |p: &[T]| {
        if max {
            let mut best = p[0];
            for &v in &p[1..] {
                if v > best {
                    best = v;
                }
            }
            best
        } else {
            T::from_f64(p.iter().map(|v| v.to_f64()).sum::<f64>() / plane as f64)
        }
    };
    match grain(x.len() / plane.max(1), plane) {
        Some(min) => x.par_chunks(plane).with_min_len(min).map(one).collect(),
        None => x.chunks(plane).map(one).collect(),
    }
}
