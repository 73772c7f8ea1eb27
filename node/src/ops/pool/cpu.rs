//! CPU pooling kernels, parallel over (batch, channel) planes.

use rayon::prelude::*;

use super::PoolShape;
use crate::ops::conv::Float;
use crate::ops::conv::geometry::Axis;

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
    let mut y = vec![T::default(); planes * op];
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
    if want_indices {
        y.par_chunks_mut(op)
            .zip(idx.par_chunks_mut(op))
            .enumerate()
            .for_each(|(plane, (yp, ix))| work(plane, yp, Some(ix)));
        (y, Some(idx))
    } else {
        y.par_chunks_mut(op)
            .enumerate()
            .for_each(|(plane, yp)| work(plane, yp, None));
        (y, None)
    }
}

/// Mean over each window, dividing by the taps inside the input, or with `count_include_pad`
/// by the taps inside the input and its explicit padding.
pub fn avg_pool<T: Float>(s: &PoolShape, x: &[T], count_include_pad: bool) -> Vec<T> {
    let (ip, op) = (s.in_plane(), s.out_plane());
    let a = s.axes3();
    let mut y = vec![T::default(); s.n * s.c * op];
    y.par_chunks_mut(op).enumerate().for_each(|(plane, yp)| {
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
    let mut y = vec![T::default(); s.n * s.c * op];
    y.par_chunks_mut(op).enumerate().for_each(|(plane, yp)| {
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
    x.par_chunks(plane)
        .map(|p| {
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
        })
        .collect()
}
