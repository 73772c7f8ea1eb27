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
        let mut v = vec![T::default(); cg * plane];
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
    let k = cg * ah.kernel * aw.kernel;
    T::with_scratch(|col| {
        for c in 0..cg {
            for kh in 0..ah.kernel {
                for kw in 0..aw.kernel {
                    let at = c * plane + kh * ah.dilation * wp + kw * aw.dilation;
                    col.extend_from_slice(&padded[at..][..len]);
                }
            }
        }
        if wp == ow {
            // No wasted columns (a 1-D convolution, or no width beyond the window): C is yb.
            T::gemm(ocg, k, len, wg, col, yb, len);
            return;
        }
        // The wide result goes after col in the same scratch buffer.
        col.resize(k * len + ocg * len, T::default());
        let (col, wide) = col.split_at_mut(k * len);
        T::gemm(ocg, k, len, wg, col, wide, len);
        for (yo, wo) in yb.chunks_mut(oh * ow).zip(wide.chunks(len)) {
            for (r, yr) in yo.chunks_mut(ow).enumerate() {
                yr.copy_from_slice(&wo[r * wp..][..ow]);
            }
        }
    });
}
