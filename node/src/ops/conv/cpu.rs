//! The CPU convolution: for each (batch, group), im2col then one GEMM, or a direct loop when
//! each group reads a single input channel (depthwise), where im2col would only copy.

use rayon::prelude::*;

use super::ConvShape;
use super::float::Float;
use super::geometry::Axis;

/// Caps the im2col buffer (elements) of one task; larger outputs are done in row blocks.
const COL_CAP: usize = 1 << 20;

/// `x` is N x C x spatial, `w` is OC x C/group x kernel, `b` is OC; returns N x OC x out.
pub fn conv<T: Float>(s: &ConvShape, x: &[T], w: &[T], b: Option<&[T]>) -> Vec<T> {
    let (p, ocg) = (s.out_plane(), s.ocg());
    let mut y = vec![T::default(); s.n * s.oc * p];
    if y.is_empty() {
        return y;
    }
    let (cg, k) = (s.cg(), s.cg() * s.kernel_volume());
    let xg_len = cg * s.in_plane();
    let axes = s.axes3();
    // One task per (batch, group): its output channels are one contiguous block of y.
    y.par_chunks_mut(ocg * p)
        .enumerate()
        .for_each(|(task, yb)| {
            let (ni, g) = (task / s.group, task % s.group);
            let xg = &x[(ni * s.group + g) * xg_len..][..xg_len];
            let wg = &w[g * ocg * k..][..ocg * k];
            if cg == 1 && s.group > 1 {
                depthwise(&axes, xg, wg, yb);
            } else {
                im2col_gemm(&axes, cg, ocg, xg, wg, yb);
            }
            if let Some(b) = b {
                for (plane, &bias) in yb.chunks_mut(p).zip(&b[g * ocg..]) {
                    plane.iter_mut().for_each(|v| *v += bias);
                }
            }
        });
    y
}

fn is_pointwise(axes: &[Axis; 3]) -> bool {
    axes.iter()
        .all(|a| a.kernel == 1 && a.stride == 1 && a.pad_begin == 0 && a.pad_end == 0)
}

/// One group: `yb` (ocg x P) = `wg` (ocg x K) * col (K x P), K = cg * kernel volume.
fn im2col_gemm<T: Float>(
    axes: &[Axis; 3],
    cg: usize,
    ocg: usize,
    xg: &[T],
    wg: &[T],
    yb: &mut [T],
) {
    let [ad, ah, aw] = axes;
    let kvol = ad.kernel * ah.kernel * aw.kernel;
    let k = cg * kvol;
    let p = ad.output * ah.output * aw.output;
    if is_pointwise(axes) {
        // A 1x1 convolution with no stride or padding is already a GEMM over the input.
        T::gemm(ocg, k, p, wg, xg, yb, p);
        return;
    }
    let rows = ad.output * ah.output;
    let ow = aw.output;
    let rows_per_block = (COL_CAP / (k * ow).max(1)).clamp(1, rows);
    let mut col = vec![T::default(); k * rows_per_block * ow];
    let (ih_len, iw_len) = (ah.input, aw.input);
    let in_plane = ad.input * ih_len * iw_len;
    for r0 in (0..rows).step_by(rows_per_block) {
        let r1 = (r0 + rows_per_block).min(rows);
        let pc = (r1 - r0) * ow;
        for (kk, col_row) in col.chunks_mut(pc).take(k).enumerate() {
            let (c, tap) = (kk / kvol, kk % kvol);
            let (kd, kh, kw) = (
                tap / (ah.kernel * aw.kernel),
                (tap / aw.kernel) % ah.kernel,
                tap % aw.kernel,
            );
            let xc = &xg[c * in_plane..][..in_plane];
            for (r, dst) in (r0..r1).zip(col_row.chunks_mut(ow)) {
                let (od, oh) = (r / ah.output, r % ah.output);
                let id = ad.start(od) + (kd * ad.dilation) as i64;
                let ih = ah.start(oh) + (kh * ah.dilation) as i64;
                if id < 0 || id >= ad.input as i64 || ih < 0 || ih >= ih_len as i64 {
                    dst.fill(T::default());
                    continue;
                }
                let src = &xc[(id as usize * ih_len + ih as usize) * iw_len..][..iw_len];
                let base = aw.start(0) + (kw * aw.dilation) as i64;
                for (o, v) in dst.iter_mut().enumerate() {
                    let iw = base + (o * aw.stride) as i64;
                    *v = if iw >= 0 && iw < iw_len as i64 {
                        src[iw as usize]
                    } else {
                        T::default()
                    };
                }
            }
        }
        T::gemm(ocg, k, pc, wg, &col[..k * pc], &mut yb[r0 * ow..], p);
    }
}

/// One group of a depthwise convolution (one input channel, `ocg` output channels).
fn depthwise<T: Float>(axes: &[Axis; 3], xc: &[T], wg: &[T], yb: &mut [T]) {
    let [ad, ah, aw] = axes;
    let kvol = ad.kernel * ah.kernel * aw.kernel;
    let p = ad.output * ah.output * aw.output;
    let (ih_len, iw_len) = (ah.input, aw.input);
    for (wk, plane) in wg.chunks(kvol).zip(yb.chunks_mut(p)) {
        let mut out = plane.iter_mut();
        for od in 0..ad.output {
            let (kd0, kd1) = ad.taps_inside(od);
            for oh in 0..ah.output {
                let (kh0, kh1) = ah.taps_inside(oh);
                for ow in 0..aw.output {
                    let (kw0, kw1) = aw.taps_inside(ow);
                    let mut acc = T::default();
                    for kd in kd0..kd1 {
                        let id = (ad.start(od) + (kd * ad.dilation) as i64) as usize;
                        for kh in kh0..kh1 {
                            let ih = (ah.start(oh) + (kh * ah.dilation) as i64) as usize;
                            let row = &xc[(id * ih_len + ih) * iw_len..][..iw_len];
                            let wrow = &wk[(kd * ah.kernel + kh) * aw.kernel..];
                            for (kw, &wv) in wrow.iter().enumerate().take(kw1).skip(kw0) {
                                let iw = (aw.start(ow) + (kw * aw.dilation) as i64) as usize;
                                acc += row[iw] * wv;
                            }
                        }
                    }
                    if let Some(v) = out.next() {
                        *v = acc;
                    }
                }
            }
        }
    }
}
