//! The CPU convolution: for each (batch, group), im2col then one GEMM, or when each group
//! reads a single input channel (depthwise), where im2col would only copy, the whole-plane
//! kernel of depthwise.rs (a direct loop for 3-D), or the
//! direct vector kernel of direct.rs for small f32 ones. Small convolutions run inline on the
//! calling thread (see par.rs).

use super::ConvShape;
use crate::elementwise::activation::Activation;
use crate::numeric::float::Float;
use crate::simd::direct::PackCache;
use crate::window::geometry::Axis;
use rayon::prelude::*;

/// Caps the im2col buffer (elements) of one task; larger outputs are done in row blocks.
pub(super) const COL_CAP: usize = 1 << 20;

/// `x` is N x C x spatial, `w` is OC x C/group x kernel, `b` is OC; returns N x OC x out.
/// `cache` keeps the direct kernel's packed weights between runs (one group's: it serves
/// convolutions of one group, the usual case).
pub fn conv<T: Float>(
    s: &ConvShape,
    x: &[T],
    w: &[T],
    b: Option<&[T]>,
    post: Post<'_, T>,
    cache: &PackCache,
) -> Vec<T> {
    let (p, ocg) = (s.out_plane(), s.ocg());
    let mut y = crate::window::par::zeroed(s.n * s.oc * p);
    if y.is_empty() {
        return y;
    }
    let (cg, k) = (s.cg(), s.cg() * s.kernel_volume());
    let xg_len = cg * s.in_plane();
    let axes = s.axes3();
    let cache = (s.group == 1).then_some(cache);
    if cg == 1 && s.group > 1 && super::depthwise::applies(&axes) {
        super::depthwise::conv(&axes, s.group, ocg, x, w, b, &mut y);
        finish(&mut y, p, None, post.z, post.act.as_ref());
        return y;
    }
    // One task per (batch, group): its output channels are one contiguous block of y. A single
    // large group (the usual case) is parallel inside its GEMM instead.
    crate::window::par::for_each_chunk(&mut y, ocg * p, ocg * p * k, |task, yb| {
        let (ni, g) = (task / s.group, task % s.group);
        let xg = &x[(ni * s.group + g) * xg_len..][..xg_len];
        let wg = &w[g * ocg * k..][..ocg * k];
        let mut bg = b.map(|b| &b[g * ocg..][..ocg]);
        if cg == 1 && s.group > 1 {
            depthwise(&axes, xg, wg, yb);
        } else if !gemm_first(&axes, ocg * k * p)
            && T::direct_conv(&axes, cg, ocg, xg, wg, bg, yb, cache)
        {
            // The bias is in already.
            bg = None;
        } else {
            im2col_gemm(&axes, cg, ocg, xg, wg, yb);
        }
        let zb = post.z.map(|z| &z[task * ocg * p..][..ocg * p]);
        finish(yb, p, bg, zb, post.act.as_ref());
    });
    y
}

/// What FusedConv adds to a convolution, after the bias: its input Z (the output's shape),
/// then its activation.
#[derive(Clone, Copy)]
pub struct Post<'a, T> {
    pub z: Option<&'a [T]>,
    pub act: Option<Activation>,
}

impl<T> Default for Post<'_, T> {
    fn default() -> Self {
        Post { z: None, act: None }
    }
}

/// The bias, Z's block and the activation over output planes `yb` of `p` elements each (`bias`
/// and `z` for those planes), planes in parallel when there are enough of them: in the single
/// task of a one-image convolution this is all of the output.
fn finish<T: Float>(
    yb: &mut [T],
    p: usize,
    bias: Option<&[T]>,
    z: Option<&[T]>,
    act: Option<&Activation>,
) {
    if bias.is_none() && z.is_none() && act.is_none() {
        return;
    }
    crate::window::par::for_each_chunk(yb, p, p, |c, plane| {
        if let Some(b) = bias {
            let v = b[c];
            plane.iter_mut().for_each(|y| *y += v);
        }
        if let Some(z) = z {
            for (y, &zv) in plane.iter_mut().zip(&z[c * p..]) {
                *y += zv;
            }
        }
        if let Some(act) = act {
            T::activate(plane, act);
        }
    });
}

/// Whether a convolution of `work` multiply-adds per group should skip the direct kernel for
/// the GEMM: a pointwise one past [`POINTWISE_DIRECT_MAX`], which is a GEMM over the input
/// as it lies, with no im2col to save (SqueezeNet's 64 -> 256 channels over 13 x 13 took
/// 3.1x as long by the direct kernel, 16 -> 64 over 55 x 55 2.1x).
fn gemm_first(axes: &[Axis; 3], work: usize) -> bool {
    is_pointwise(axes) && work > POINTWISE_DIRECT_MAX
}

/// The most multiply-adds of a pointwise convolution the direct kernel still takes: below,
/// the GEMM's packing and set-up cost more than the kernel loses (tests/models' MobileNetV2,
/// whose 1x1 layers have 6K-66K, was 8% slower through the GEMM).
const POINTWISE_DIRECT_MAX: usize = 96 * 1024;

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
    if super::wide::applies(axes, k) {
        super::wide::conv(ah, aw, cg, ocg, xg, wg, yb);
        return;
    }
    let rows = ad.output * ah.output;
    let ow = aw.output;
    let rows_per_block = (COL_CAP / (k * ow).max(1)).clamp(1, rows);
    let tasks = row_tasks(ocg * k * p, rows, ow);
    if tasks >= 2 {
        // Blocks of output rows on rayon, each with its own im2col and GEMM into a buffer of
        // its own (C's columns of one block are strided in yb), copied in afterwards: a copy
        // K times smaller than the product.
        let per = rows.div_ceil(tasks).min(rows_per_block);
        let blocks: Vec<(usize, usize)> = (0..rows)
            .step_by(per)
            .map(|r0| (r0, (r0 + per).min(rows)))
            .collect();
        let outs: Vec<Vec<T>> = blocks
            .par_iter()
            .map(|&(r0, r1)| {
                let pc = (r1 - r0) * ow;
                let mut out = vec![T::default(); ocg * pc];
                T::with_scratch(|col| {
                    col.resize(k * pc, T::default());
                    fill_col(axes, xg, (r0, r1), col);
                    T::gemm(ocg, k, pc, wg, col, &mut out, pc);
                });
                out
            })
            .collect();
        // Copied in by output channel on rayon too: on one thread, this pass over the whole
        // output stood alone while 15 others waited (ResNet-50's first layer, 3 MB).
        crate::window::par::for_each_chunk(&mut yb[..ocg * p], p, p, |oc, plane| {
            for (&(r0, r1), out) in blocks.iter().zip(&outs) {
                let pc = (r1 - r0) * ow;
                plane[r0 * ow..][..pc].copy_from_slice(&out[oc * pc..][..pc]);
            }
        });
        return;
    }
    T::with_scratch(|col| {
        for r0 in (0..rows).step_by(rows_per_block) {
            let r1 = (r0 + rows_per_block).min(rows);
            let pc = (r1 - r0) * ow;
            col.resize(k * pc, T::default());
            fill_col(axes, xg, (r0, r1), &mut col[..k * pc]);
            T::gemm(ocg, k, pc, wg, col, &mut yb[r0 * ow..], p);
        }
    });
}

/// How many blocks of output rows one group's im2col + GEMM should be cut into for rayon: one
/// per thread, each at least 16 x TASK_MIN_WORK (2M) multiply-adds and [`TASK_MIN_COLS`]
/// output positions wide (a GEMM block narrower than that loses more to packing and the
/// hand-off than a thread gains), or 1: one im2col and one GEMM, which cuts itself into
/// blocks of output channels and positions (cpu_gemm.rs). ResNet-50's last 3x3 layers (7 x 7
/// outputs) ran 7 blocks of one row each, 512 x 4608 x 7 products, at a tenth of the speed of
/// the whole 512 x 4608 x 49 product cut by output channels.
fn row_tasks(work: usize, rows: usize, row_len: usize) -> usize {
    let threads = rayon::current_num_threads();
    let by_work = work / (16 * crate::window::par::TASK_MIN_WORK);
    let by_width = rows * row_len / TASK_MIN_COLS;
    threads.min(rows).min(by_work).min(by_width).max(1)
}

/// The fewest output positions (GEMM columns) in a block of [`row_tasks`].
const TASK_MIN_COLS: usize = 128;

/// The im2col rows of output rows `r0..r1` (K x (r1 - r0) * OW) into `col`, which holds
/// exactly that many elements; every element is written. The channels' blocks of rows go to
/// rayon when large enough, each row counted as [`ROW_COST`] elements more than it holds:
/// ResNet-50's last 3x3 at stride 2 fills 512 channels of 63 rows of 7 elements each, work
/// that counted by elements alone stayed on one thread, and took there about as long as its
/// product on 16.
fn fill_col<T: Float>(axes: &[Axis; 3], xg: &[T], (r0, r1): (usize, usize), col: &mut [T]) {
    let [ad, ah, aw] = axes;
    let rows = ad.kernel * ah.kernel * aw.kernel * (r1 - r0);
    let block = rows * aw.output;
    let in_plane = ad.input * ah.input * aw.input;
    let work = block + rows * ROW_COST;
    crate::window::par::for_each_chunk(col, block, work, |c, dst| {
        let job = FillChannel {
            axes,
            xc: &xg[c * in_plane..][..in_plane],
            rows: (r0, r1),
            dst,
        };
        // Compiled for AVX2 inside pulp's context, the stride-2 gathers of write_run become
        // shuffles (at the baseline's SSE2 they stayed scalar: a third of the time of a 7x7
        // stride-2 first layer).
        #[cfg(target_arch = "x86_64")]
        if let Some(simd) = pulp::x86::V3::try_new() {
            return simd.vectorize(job);
        }
        pulp::NullaryFnOnce::call(job);
    });
}

/// One channel's [`fill_channel`], for pulp's vectorize.
struct FillChannel<'a, T> {
    axes: &'a [Axis; 3],
    xc: &'a [T],
    rows: (usize, usize),
    dst: &'a mut [T],
}

impl<T: Float> pulp::NullaryFnOnce for FillChannel<'_, T> {
    type Output = ();

    #[inline(always)]
    fn call(self) {
        fill_channel(self.axes, self.xc, self.rows, self.dst);
    }
}

/// What one im2col row costs beyond its elements, in elements: the tap's and row's bounds
/// and offsets, and a copy call, for rows of a few elements (a 7-wide row: about as much as
/// its copy).
const ROW_COST: usize = 32;

/// [`fill_col`]'s rows of one input channel `xc`.
#[inline(always)]
fn fill_channel<T: Float>(axes: &[Axis; 3], xc: &[T], (r0, r1): (usize, usize), dst: &mut [T]) {
    let [ad, ah, aw] = axes;
    let ow = aw.output;
    let (ih_len, iw_len) = (ah.input, aw.input);
    let (od_r0, oh_r0) = (r0 / ah.output, r0 % ah.output);
    let mut rows = dst.chunks_exact_mut(ow);
    for kd in 0..ad.kernel {
        // Which outputs of a tap read the input rather than padding, per axis: worked out
        // once per tap so the row loop below has no bounds tests or divisions.
        let d_base = ad.start(0) + (kd * ad.dilation) as i64;
        let (d0, d1) = valid_outputs(d_base, ad.stride, ad.input, ad.output);
        for kh in 0..ah.kernel {
            let h_base = ah.start(0) + (kh * ah.dilation) as i64;
            let (h0, h1) = valid_outputs(h_base, ah.stride, ih_len, ah.output);
            for kw in 0..aw.kernel {
                let w_base = aw.start(0) + (kw * aw.dilation) as i64;
                let (w0, w1) = valid_outputs(w_base, aw.stride, iw_len, ow);
                let first = (w_base + (w0 * aw.stride) as i64).max(0) as usize;
                let (mut od, mut oh) = (od_r0, oh_r0);
                for _ in r0..r1 {
                    let row = rows.next().expect("fill_col: col is K x rows x OW");
                    if (d0..d1).contains(&od) && (h0..h1).contains(&oh) && w0 < w1 {
                        let id = (d_base + (od * ad.stride) as i64) as usize;
                        let ih = (h_base + (oh * ah.stride) as i64) as usize;
                        let src = &xc[(id * ih_len + ih) * iw_len..][..iw_len];
                        write_run(row, (w0, w1), &src[first..], aw.stride);
                    } else {
                        row.fill(T::default());
                    }
                    oh += 1;
                    if oh == ah.output {
                        (od, oh) = (od + 1, 0);
                    }
                }
            }
        }
    }
    debug_assert!(rows.next().is_none());
}

/// The outputs `o` of one im2col row whose input `base + o * stride` lies inside `0..len`,
/// as a half-open range (empty when `o0 == o1`).
fn valid_outputs(base: i64, stride: usize, len: usize, outputs: usize) -> (usize, usize) {
    let s = stride as i64;
    // First o with base + o*s >= 0, and first o with base + o*s >= len (no division at the
    // common stride 1).
    let first_at = |bound: i64| {
        let d = (bound - base).max(0);
        if s == 1 { d } else { (d + s - 1) / s }
    };
    let o1 = (first_at(len as i64) as usize).min(outputs);
    ((first_at(0) as usize).min(o1), o1)
}

/// One im2col row: `src[(o - o0) * stride]` for `o` in `o0..o1`, zero elsewhere (the
/// padding); a slice copy at stride 1, with no per-element bounds test.
#[inline(always)]
fn write_run<T: Float>(row: &mut [T], (o0, o1): (usize, usize), src: &[T], stride: usize) {
    let (pad, rest) = row.split_at_mut(o0);
    pad.fill(T::default());
    let (run, pad) = rest.split_at_mut(o1 - o0);
    if stride == 1 {
        run.copy_from_slice(&src[..o1 - o0]);
    } else if stride == 2 {
        // Eight outputs at a time from fixed-size blocks of sixteen inputs, which the
        // compiler turns into shuffles (an element a step stayed scalar). The last output
        // may have no input after it, so it is not part of a block.
        let n = run.len().saturating_sub(1);
        let (blocks, _) = src[..2 * n].as_chunks::<16>();
        let (out8, _) = run[..n].as_chunks_mut::<8>();
        for (d, b) in out8.iter_mut().zip(blocks) {
            *d = std::array::from_fn(|i| b[2 * i]);
        }
        let done = blocks.len().min(out8.len()) * 8;
        for (d, &s) in run[done..]
            .iter_mut()
            .zip(src[2 * done..].iter().step_by(2))
        {
            *d = s;
        }
    } else {
        for (d, &s) in run.iter_mut().zip(src.iter().step_by(stride)) {
            *d = s;
        }
    }
    pad.fill(T::default());
}

/// `dst[o] = src[base + o * stride]`, or zero where that falls outside `src`: one row of
/// im2col as the loop in [`im2col_gemm`] builds it, for the tests.
#[cfg(test)]
pub(super) fn fill_row<T: Float>(dst: &mut [T], src: &[T], base: i64, stride: usize) {
    let (o0, o1) = valid_outputs(base, stride, src.len(), dst.len());
    if o0 < o1 {
        let first = (base + (o0 * stride) as i64) as usize;
        write_run(dst, (o0, o1), &src[first..], stride);
    } else {
        dst.fill(T::default());
    }
}

/// One group of a 3-D depthwise convolution (one input channel, `ocg` output channels).
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
