//! 1-D and 2-D max pooling without dilation through a padded copy of each plane.
//!
//! The plane is copied once into a buffer whose padding holds -inf, split by stride phase as
//! depthwise convolution's is (window/phases.rs), where tap (ky, kx) of every output of the
//! plane is ONE contiguous run, whatever the window, stride or padding: the plane is a few
//! vector maxima over whole runs (plus `wq - ow` wasted columns a row, dropped when the
//! result is copied out).
//! The per-output loops this replaces walked each window tap by tap (3x3 windows at stride 2,
//! ResNet's and SqueezeNet's, took 17% of SqueezeNet's CPU time that way), and a loop per
//! output row still lost most of its time to setting up short rows on YOLO's 10x10 planes.
//!
//! The taps are folded in the general path's order (rows, then columns) as `t > best ? t :
//! best`, so ties (+0 and -0) and NaN resolve as there: the first tap inside the input starts
//! the maximum and only a strictly greater value replaces it. Padding before that first tap
//! holds -inf, which no value replaces wrongly; two cases differ and are patched afterwards: a
//! window whose first input tap is NaN behind padding (the general path keeps the NaN, the
//! fold skips it) and a window wholly in the padding (the general path gives the lowest finite
//! value).

use super::cpu::inside;
use crate::numeric::float::Float;
use crate::window::geometry::Axis;
use crate::window::phases::Phases;

/// The padded, phase-split layout of one plane, worked out once for all planes.
pub(super) struct Padded {
    ah: Axis,
    aw: Axis,
    ph: Phases,
    /// Where each tap of output (0, 0) lies in the buffer, in the fold's order.
    taps: Vec<usize>,
    /// The input range each output row's and column's window covers (empty when the window
    /// lies wholly in the padding).
    rows: Vec<(usize, usize)>,
    cols: Vec<(usize, usize)>,
    /// Output columns that need the patch of the module's comment in every row: those whose
    /// window starts in the left padding or covers no input column.
    patch_cols: Vec<usize>,
}

impl Padded {
    /// For `ah` (the unit axis for 1-D) and `aw`, both without dilation.
    pub(super) fn new(ah: &Axis, aw: &Axis) -> Padded {
        // Padded rows (columns) the input and every window reach.
        let span =
            |a: &Axis| (a.pad_begin + a.input).max((a.output.max(1) - 1) * a.stride + a.kernel);
        let ph = Phases::new((ah.stride, aw.stride), (span(ah), span(aw)));
        let taps = (0..ah.kernel)
            .flat_map(|ky| (0..aw.kernel).map(move |kx| (ky, kx)))
            .map(|(ky, kx)| ph.at(ky, kx))
            .collect();
        let cols: Vec<(usize, usize)> = (0..aw.output).map(|o| inside(aw, o)).collect();
        let patch_cols = (0..aw.output)
            .filter(|&o| aw.start(o) < 0 || cols[o].0 >= cols[o].1)
            .collect();
        Padded {
            ah: *ah,
            aw: *aw,
            ph,
            taps,
            rows: (0..ah.output).map(|o| inside(ah, o)).collect(),
            cols,
            patch_cols,
        }
    }

    /// Max pools the plane `xp` into `yp` (OH x OW), with `buf` as the padded copy.
    pub(super) fn plane<T: Float>(&self, xp: &[T], yp: &mut [T], buf: &mut Vec<T>) {
        let job = Job {
            padded: self,
            xp,
            yp,
            buf,
        };
        // Compiled for AVX2 inside pulp's context, the copies and maxima run eight f32 wide
        // and the stride-2 split vectorises (at the baseline's SSE2 it stayed scalar).
        #[cfg(target_arch = "x86_64")]
        if let Some(simd) = pulp::x86::V3::try_new() {
            return simd.vectorize(job);
        }
        pulp::NullaryFnOnce::call(job);
    }

    #[inline(always)]
    fn plane_inline<T: Float>(&self, xp: &[T], yp: &mut [T], buf: &mut Vec<T>) {
        let (ah, aw) = (&self.ah, &self.aw);
        let (oh, ow) = (ah.output, aw.output);
        if oh == 0 || ow == 0 {
            return;
        }
        // The wide output: rows of wq, the last one cut at ow (its runs then end inside their
        // phase).
        let wq = self.ph.wq;
        let len = (oh - 1) * wq + ow;
        let phases = self.ph.len();
        buf.clear();
        buf.resize(phases + len, T::NEG_INFINITY);
        let (planes, acc) = buf.split_at_mut(phases);
        self.ph.scatter(ah, aw, xp, planes);
        fold(acc, planes, &self.taps);
        for (oy, yr) in yp.chunks_exact_mut(ow).enumerate() {
            yr.copy_from_slice(&acc[oy * wq..][..ow]);
            self.patch_row(oy, xp, yr);
        }
    }

    /// The windows of output row `oy` the fold gets wrong (see the module's comment).
    #[inline(always)]
    fn patch_row<T: Float>(&self, oy: usize, xp: &[T], yr: &mut [T]) {
        let (r0, r1) = self.rows[oy];
        if r0 >= r1 {
            yr.fill(T::LOWEST);
            return;
        }
        let patch = |o: usize, y: &mut T| {
            let (c0, c1) = self.cols[o];
            if c0 >= c1 {
                *y = T::LOWEST;
            } else {
                let first = xp[r0 * self.aw.input + c0];
                if first.to_f64().is_nan() {
                    *y = first;
                }
            }
        };
        if self.ah.start(oy) < 0 {
            for (o, y) in yr.iter_mut().enumerate() {
                patch(o, y);
            }
        } else {
            for &o in &self.patch_cols {
                patch(o, &mut yr[o]);
            }
        }
    }
}

/// `acc[i]` = the maximum over taps of `planes[tap + i]`, folded in the order of `taps` (the
/// first starting it), up to three taps a pass: a third of the loads and stores of `acc`.
#[inline(always)]
fn fold<T: Float>(acc: &mut [T], planes: &[T], taps: &[usize]) {
    let n = acc.len();
    let tap = |i: usize| &planes[taps[i]..][..n];
    let max = |b: T, t: T| if t > b { t } else { b };
    acc.copy_from_slice(tap(0));
    let mut i = 1;
    while i < taps.len() {
        match taps.len() - i {
            1 => {
                for (y, &t0) in acc.iter_mut().zip(tap(i)) {
                    *y = max(*y, t0);
                }
                i += 1;
            }
            2 => {
                for ((y, &t0), &t1) in acc.iter_mut().zip(tap(i)).zip(tap(i + 1)) {
                    *y = max(max(*y, t0), t1);
                }
                i += 2;
            }
            _ => {
                let (a, b, c) = (tap(i), tap(i + 1), tap(i + 2));
                for (((y, &t0), &t1), &t2) in acc.iter_mut().zip(a).zip(b).zip(c) {
                    *y = max(max(max(*y, t0), t1), t2);
                }
                i += 3;
            }
        }
    }
}

/// One plane's work, for pulp's vectorize.
struct Job<'a, T> {
    padded: &'a Padded,
    xp: &'a [T],
    yp: &'a mut [T],
    buf: &'a mut Vec<T>,
}

impl<T: Float> pulp::NullaryFnOnce for Job<'_, T> {
    type Output = ();

    #[inline(always)]
    fn call(self) {
        self.padded.plane_inline(self.xp, self.yp, self.buf);
    }
}
