//! DeformConv's CPU reference kernel, in f64: per image, the deformed im2col matrix
//! [C x kH x kW, oH x oW], then each group's weights times its rows, plus the bias.

use super::Shape;
use crate::numeric::from_f64;
use crate::tensor::Tensor;
use crate::util::opt;
use crate::{OpError, ValueType};

/// Bilinear sample of an h x w plane at (y, x), taps outside the plane reading 0 (GridSample
/// with align_corners and zeros padding, which ONNX's reference calls).
pub fn bilinear(plane: &[f64], h: usize, w: usize, y: f64, x: f64) -> f64 {
    let (y0, x0) = (y.floor(), x.floor());
    let (ty, tx) = (y - y0, x - x0);
    let mut sum = 0.0;
    for (dy, wy) in [(0.0, 1.0 - ty), (1.0, ty)] {
        for (dx, wx) in [(0.0, 1.0 - tx), (1.0, tx)] {
            let (yy, xx) = (y0 + dy, x0 + dx);
            if yy >= 0.0 && yy < h as f64 && xx >= 0.0 && xx < w as f64 {
                sum += wy * wx * plane[yy as usize * w + xx as usize];
            }
        }
    }
    sum
}

fn values(t: &Tensor) -> Result<Vec<f64>, OpError> {
    t.to_f64_vec().map_err(|e| OpError::invalid(e.to_string()))
}

pub fn run(s: &Shape, inputs: &[Option<&Tensor>], out: &ValueType) -> Result<Tensor, OpError> {
    let [x, w, offset] = [0, 1, 2].map(|i| inputs[i].map(values));
    let (x, w, offset) = (x.unwrap()?, w.unwrap()?, offset.unwrap()?);
    let bias = opt(inputs, 3).map(values).transpose()?;
    let mask = opt(inputs, 4).map(values).transpose()?;
    let (plane, pixels, taps) = (s.in_plane(), s.out_plane(), s.taps());
    let rows = s.c * taps;
    let mut y = vec![0.0; out.numel()];
    let mut cols = vec![0.0; rows * pixels];
    for n in 0..s.n {
        let image = &x[n * s.c * plane..][..s.c * plane];
        let off = &offset[n * s.offset_group * taps * 2 * pixels..];
        let msk = mask
            .as_ref()
            .map(|m| &m[n * s.offset_group * taps * pixels..]);
        deformed_cols(s, image, off, msk, &mut cols);
        let y = &mut y[n * s.oc * pixels..][..s.oc * pixels];
        for oc in 0..s.oc {
            let g = oc / s.ocg();
            let b = bias.as_ref().map_or(0.0, |b| b[oc]);
            let wrow = &w[oc * s.cg() * taps..][..s.cg() * taps];
            let block = &cols[g * s.cg() * taps * pixels..][..s.cg() * taps * pixels];
            let yrow = &mut y[oc * pixels..][..pixels];
            yrow.fill(b);
            for (r, &wv) in wrow.iter().enumerate() {
                for (yv, &cv) in yrow.iter_mut().zip(&block[r * pixels..][..pixels]) {
                    *yv += wv * cv;
                }
            }
        }
    }
    from_f64(out.dtype, out.shape.clone(), y)
}

/// The deformed im2col matrix of one image: row (c, tap), column pixel, the input of channel
/// c sampled where the tap of that pixel lands after its offset, times its mask.
fn deformed_cols(s: &Shape, image: &[f64], offset: &[f64], mask: Option<&[f64]>, cols: &mut [f64]) {
    let [ah, aw] = s.axes;
    let (plane, pixels, taps) = (s.in_plane(), s.out_plane(), s.taps());
    for og in 0..s.offset_group {
        for t in 0..taps {
            let (kh, kw) = (t / aw.kernel, t % aw.kernel);
            let pair = (og * taps + t) * 2;
            for p in 0..pixels {
                let (oh, ow) = (p / aw.output, p % aw.output);
                let y = ah.start(oh) as f64 + (kh * ah.dilation) as f64 + offset[pair * pixels + p];
                let x = aw.start(ow) as f64
                    + (kw * aw.dilation) as f64
                    + offset[(pair + 1) * pixels + p];
                let m = mask.map_or(1.0, |m| m[(og * taps + t) * pixels + p]);
                for c in og * s.cpog()..(og + 1) * s.cpog() {
                    let src = &image[c * plane..][..plane];
                    cols[(c * taps + t) * pixels + p] = m * bilinear(src, ah.input, aw.input, y, x);
                }
            }
        }
    }
}
