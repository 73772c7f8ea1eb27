//! Stride-1 2-D convolutions of narrow images: im2col over the padded input's full width.
//!
//! At stride 1 (any dilation), tap (kh, kw) of output (oh, ow) reads the padded input at
//! (oh + kh * dh, ow + kw * dw). Numbering the outputs j = oh * Wp + ow over the padded width Wp
//! rather than the output width, each tap's im2col row is ONE contiguous run of the padded
//! input, starting at kh * dh * Wp + kw * dw. So im2col is one copy per tap instead of one per
//! tap and output row (for the MNIST CNN's second layer, 8 channels of 5x5 taps over 10 output
//! rows: 200 copies instead of 2,000, which dominated its time), paid for with Wp - OW wasted
//! columns per output row in the GEMM, dropped when the result is copied out.

use std::borrow::Cow;

use super::cpu::COL_CAP;
use crate::numeric::float::Float;
use crate::window::geometry::Axis;
use crate::window::par;

/// Output rows at most this wide take this path: past that, one copy per row costs little
/// next to the row itself.
const MAX_WIDTH: usize = 64;

fn padded_width(aw: &Axis) -> usize {
    aw.input + aw.pad_begin + aw.pad_end
}

/// Whether this path serves a convolution with `k` = channels x taps per group: 1-D or 2-D,
/// stride 1, narrow outputs, and the wasted columns at most half the useful ones.
pub fn applies(axes: &[Axis; 3], k: usize) -> bool {
    let [ad, ah, aw] = axes;
    let wp = padded_width(aw);
    // Saturating: sizes this large fail the cap below rather than wrap under it.
    let wide_len = (ah.output - 1).saturating_mul(wp).saturating_add(aw.output);
    *ad == Axis::UNIT
        && ah.stride == 1
        && aw.stride == 1
        && aw.output <= MAX_WIDTH
        && 2 * wp <= 3 * aw.output
        && k.saturating_mul(wide_len) <= COL_CAP
}

/// One group: `yb` (ocg x OH x OW) = `wg` (ocg x K) * col, `xg` being cg x IH x IW.
pub fn conv<T: Float>(
    ah: &Axis,
    aw: &Axis,
    cg: usize,
    ocg: usize,
    xg: &[T],
    wg: &[T],
    yb: &mut [T],
) {
    let (hp, wp) = (ah.input + ah.pad_begin + ah.pad_end, padded_width(aw));
    let (ih, iw) = (ah.input, aw.input);
    let plane = hp * wp;
    let padded: Cow<'_, [T]> = if plane == ih * iw {
        Cow::Borrowed(&xg[..cg * plane])
    } else {
        let mut v = par::zeroed(cg * plane);
        for c in 0..cg {
            for r in 0..ih {
                let at = c * plane + (r + ah.pad_begin) * wp + aw.pad_begin;
                v[at..][..iw].copy_from_slice(&xg[(c * ih + r) * iw..][..iw]);
            }
        }
        Cow::Owned(v)
    };
    let (oh, ow) = (ah.output, aw.output);
    // The last output row needs only OW columns: the run then ends inside the padded plane.
    let len = (oh - 1) * wp + ow;
    let taps = ah.kernel * aw.kernel;
    let k = cg * taps;
    let row = |r: usize, dst: &mut [T]| {
        let (c, t) = (r / taps, r % taps);
        let at = c * plane + (t / aw.kernel) * ah.dilation * wp + (t % aw.kernel) * aw.dilation;
        dst.copy_from_slice(&padded[at..][..len]);
    };
    let geometry = (oh, ow, wp);
    if par::grain(k, len).is_some() {
        // Large (ResNet-50's 14 x 14 and 7 x 7 layers: 0.3-0.5 M elements): the rows are
        // copied on rayon, as one thread copying them took as long as the GEMM, into a
        // buffer of their own (the scratch keeps at most 1 MiB, so it would be allocated anew
        // anyway), zeroed by the pool's threads too.
        let mut col = par::zeroed(k * len);
        par::for_each_chunk(&mut col, len, len, row);
        let mut wide = par::zeroed(if wp == ow { 0 } else { ocg * len });
        product((ocg, k, len), geometry, wg, &col, &mut wide, yb);
        return;
    }
    T::with_scratch(|col| {
        let wide_len = if wp == ow { 0 } else { ocg * len };
        col.resize(k * len + wide_len, T::default());
        let (col, wide) = col.split_at_mut(k * len);
        for (r, dst) in col.chunks_mut(len).enumerate() {
            row(r, dst);
        }
        product((ocg, k, len), geometry, wg, col, wide, yb);
    });
}

/// `yb` = `wg` x `col` (ocg x K x len), through `wide` (ocg x len) where the padded width
/// `wp` exceeds the output width, whose extra columns are dropped in the copy out.
fn product<T: Float>(
    (ocg, k, len): (usize, usize, usize),
    (oh, ow, wp): (usize, usize, usize),
    wg: &[T],
    col: &[T],
    wide: &mut [T],
    yb: &mut [T],
) {
    if wp == ow {
        // No wasted columns (a 1-D convolution, or no width beyond the window): C is yb.
        T::gemm(ocg, k, len, wg, col, yb, len);
        return;
    }
    T::gemm(ocg, k, len, wg, col, wide, len);
    let wide = &*wide;
    par::for_each_chunk(yb, oh * ow, oh * ow, |o, yo| {
        let wo = &wide[o * len..][..len];
        for (r, yr) in yo.chunks_mut(ow).enumerate() {
            yr.copy_from_slice(&wo[r * wp..][..ow]);
        }
    });
}
