//! RoiAlign (opsets 10, 16, 22): each region of interest of an [N, C, H, W] input, given in input
//! coordinates times `spatial_scale`, is cut into output_height x output_width bins; a bin is
//! the average (or the maximum) of a regular grid of bilinear samples, `sampling_ratio` per bin
//! side or, at 0, ceil(bin size) of them.
//!
//! The kernels follow ONNX's reference step by step, because its details are what the test
//! data (and the models exported against onnxruntime) expect:
//! - opset 16's `half_pixel` shifts the region by -0.5 and lets it be smaller than a pixel;
//!   `output_half_pixel` (opset 10's only behaviour) does not shift it and makes it at least
//!   1 x 1;
//! - a sample further than one pixel outside the input counts as 0; one nearer is clamped;
//! - max mode takes the largest of the four *weighted* corner values of each sample, not the
//!   maximum of the interpolated values (onnxruntime's behaviour, kept by the reference).

use super::util::{groups_1d, req};
use super::{BufRef, Dispatch, GpuKernel, InferInput, NodeSpec, Op, OpError, Registry, ValueType};
use crate::IndexFault;
use crate::numeric::from_f64;
use crate::tensor::{DType, Tensor};
use vkml_shaders::roi_align;

pub fn register(r: &mut Registry) {
    r.add("RoiAlign", build);
}

#[derive(Debug)]
struct RoiAlign {
    half_pixel: bool,
    max: bool,
    out_h: usize,
    out_w: usize,
    sampling_ratio: usize,
    spatial_scale: f32,
}

fn build(spec: &NodeSpec<'_>) -> Result<Box<dyn Op>, OpError> {
    let a = spec.attrs;
    // Opset 10 has no such attribute; its behaviour is output_half_pixel's.
    let default_mode = if spec.opset >= 16 {
        "half_pixel"
    } else {
        "output_half_pixel"
    };
    let half_pixel = match a.string("coordinate_transformation_mode", default_mode)? {
        "half_pixel" => true,
        "output_half_pixel" => false,
        m => {
            return Err(OpError::invalid(format!(
                "RoiAlign: coordinate_transformation_mode '{m}' is not half_pixel or \
                 output_half_pixel"
            )));
        }
    };
    let max = match a.string("mode", "avg")? {
        "avg" => false,
        "max" => true,
        m => {
            return Err(OpError::invalid(format!(
                "RoiAlign: mode '{m}' is not avg or max"
            )));
        }
    };
    let positive = |name: &str| -> Result<usize, OpError> {
        match a.int(name, 1)? {
            v if v >= 1 => Ok(v as usize),
            v => Err(OpError::invalid(format!(
                "RoiAlign: {name} is {v}; it must be at least 1"
            ))),
        }
    };
    let sampling_ratio = match a.int("sampling_ratio", 0)? {
        v if v >= 0 => v as usize,
        v => {
            return Err(OpError::invalid(format!(
                "RoiAlign: sampling_ratio is {v}; it must be 0 (adaptive) or more"
            )));
        }
    };
    Ok(Box::new(RoiAlign {
        half_pixel,
        max,
        out_h: positive("output_height")?,
        out_w: positive("output_width")?,
        sampling_ratio,
        spatial_scale: a.float("spatial_scale", 1.0)?,
    }))
}

/// One region's sampling pattern: where its first bin starts, the size of a bin, and how many
/// samples a bin takes along each axis.
struct Region {
    start_h: f64,
    start_w: f64,
    bin_h: f64,
    bin_w: f64,
    grid_h: usize,
    grid_w: usize,
}

impl RoiAlign {
    fn region(&self, roi: &[f64]) -> Region {
        let scale = f64::from(self.spatial_scale);
        let shift = if self.half_pixel { 0.5 } else { 0.0 };
        let [x1, y1, x2, y2] = [0, 1, 2, 3].map(|i| roi[i] * scale - shift);
        let (mut roi_w, mut roi_h) = (x2 - x1, y2 - y1);
        if !self.half_pixel {
            roi_w = roi_w.max(1.0);
            roi_h = roi_h.max(1.0);
        }
        let (bin_h, bin_w) = (roi_h / self.out_h as f64, roi_w / self.out_w as f64);
        // A negative region (half_pixel, x2 < x1) takes no samples: its bins are 0.
        let grid = |bin: f64| match self.sampling_ratio {
            0 => bin.ceil().max(0.0) as usize,
            s => s,
        };
        Region {
            start_h: y1,
            start_w: x1,
            bin_h,
            bin_w,
            grid_h: grid(bin_h),
            grid_w: grid(bin_w),
        }
    }
}

/// The four (flat index, weight) corners of a bilinear sample at (y, x) of an h x w plane, or
/// `None` for a sample too far outside, which counts as 0.
fn corners(mut y: f64, mut x: f64, h: usize, w: usize) -> Option<[(usize, f64); 4]> {
    if h == 0 || w == 0 || y < -1.0 || y > h as f64 || x < -1.0 || x > w as f64 {
        return None;
    }
    y = y.max(0.0);
    x = x.max(0.0);
    let axis = |v: f64, len: usize| {
        let low = v as usize;
        if low >= len - 1 {
            (len - 1, len - 1, 0.0)
        } else {
            (low, low + 1, v - low as f64)
        }
    };
    let (y0, y1, ly) = axis(y, h);
    let (x0, x1, lx) = axis(x, w);
    let (hy, hx) = (1.0 - ly, 1.0 - lx);
    Some([
        (y0 * w + x0, hy * hx),
        (y0 * w + x1, hy * lx),
        (y1 * w + x0, ly * hx),
        (y1 * w + x1, ly * lx),
    ])
}

impl Op for RoiAlign {
    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<ValueType>, OpError> {
        let x = req(inputs, 0)?.ty;
        let rois = req(inputs, 1)?.ty;
        let batch = req(inputs, 2)?.ty;
        if !x.dtype.is_float() || rois.dtype != x.dtype {
            return Err(OpError::unsupported(format!(
                "RoiAlign of {} with {} regions (both must be one float type)",
                x.dtype, rois.dtype
            )));
        }
        if !matches!(batch.dtype, DType::I64 | DType::I32) {
            return Err(OpError::invalid(format!(
                "RoiAlign: batch_indices are {}; they must be int64",
                batch.dtype
            )));
        }
        let r = batch.shape.first().copied().unwrap_or(0);
        if x.shape.len() != 4 || rois.shape != [r, 4] || batch.shape.len() != 1 {
            return Err(OpError::invalid(format!(
                "RoiAlign: input {:?}, rois {:?}, batch_indices {:?}; they must be \
                 [N, C, H, W], [R, 4] and [R]",
                x.shape, rois.shape, batch.shape
            )));
        }
        Ok(vec![ValueType::new(
            x.dtype,
            vec![r, x.shape[1], self.out_h, self.out_w],
        )])
    }

    fn run_cpu(
        &self,
        inputs: &[Option<&Tensor>],
        outputs: &[ValueType],
    ) -> Result<Vec<Tensor>, OpError> {
        let bad = |e: crate::tensor::TensorError| OpError::invalid(e.to_string());
        let x = req(inputs, 0)?;
        let xv = x.to_f64_vec().map_err(bad)?;
        let rois = req(inputs, 1)?.to_f64_vec().map_err(bad)?;
        let batch = req(inputs, 2)?.to_i64_vec().map_err(bad)?;
        let &[n, c, h, w] = x.shape() else {
            unreachable!("the shape rule checked the rank")
        };
        let bins = self.out_h * self.out_w;
        let mut y = vec![0.0; outputs[0].numel()];
        for (r, &b) in batch.iter().enumerate() {
            let b = usize::try_from(b)
                .ok()
                .filter(|&b| b < n)
                .ok_or_else(|| batch_error(b, r, n))?;
            let reg = self.region(&rois[r * 4..][..4]);
            for bin in 0..bins {
                let samples = self.samples(&reg, bin, h, w);
                for ch in 0..c {
                    let plane = &xv[(b * c + ch) * h * w..][..h * w];
                    y[(r * c + ch) * bins + bin] = self.pool(&samples, plane);
                }
            }
        }
        Ok(vec![from_f64(x.dtype(), outputs[0].shape.clone(), y)?])
    }

    fn gpu(&self, inputs: &[Option<&ValueType>], outputs: &[ValueType]) -> Option<GpuKernel> {
        let x = req(inputs, 0).ok()?;
        let batch = req(inputs, 2).ok()?;
        if x.dtype != DType::F32 || outputs[0].numel() == 0 || x.numel() == 0 {
            return None;
        }
        let w = |v: usize| u32::try_from(v).ok();
        Some(GpuKernel {
            scratch: vec![],
            dispatches: vec![Dispatch::new(
                roi_align::Variant::Main,
                roi_align::Buffers {
                    x: BufRef::Input(0),
                    rois: BufRef::Input(1),
                    batch: BufRef::Input(2),
                    y: BufRef::Output(0),
                    fault: BufRef::Fault,
                },
                roi_align::Params {
                    n: w(outputs[0].numel())?,
                    images: w(x.shape[0])?,
                    channels: w(x.shape[1])?,
                    height: w(x.shape[2])?,
                    width: w(x.shape[3])?,
                    out_h: w(self.out_h)?,
                    out_w: w(self.out_w)?,
                    sampling_ratio: w(self.sampling_ratio)?,
                    index_words: if batch.dtype == DType::I64 { 2 } else { 1 },
                    flags: u32::from(self.half_pixel) | u32::from(self.max) << 1,
                    spatial_scale: self.spatial_scale,
                },
                groups_1d(outputs[0].numel(), 128),
            )],
        })
    }

    fn index_fault(&self, _inputs: &[Option<&ValueType>], f: &IndexFault) -> OpError {
        batch_error(f.index, f.element as usize, f.dim as usize)
    }

    fn flops(&self, _inputs: &[Option<&ValueType>], outputs: &[ValueType]) -> u64 {
        // About 12 operations a sample; adaptive grids are unknown here, so count 4 a bin.
        let per_bin = 12 * self.sampling_ratio.max(2).pow(2);
        (outputs[0].numel() * per_bin) as u64
    }
}

fn batch_error(b: i64, roi: usize, images: usize) -> OpError {
    OpError::invalid(format!(
        "RoiAlign: batch index {b} of region {roi} is out of range for a batch of {images} \
         images"
    ))
}

impl RoiAlign {
    /// The samples of bin `bin` (row major over the output bins) of a region.
    fn samples(
        &self,
        reg: &Region,
        bin: usize,
        h: usize,
        w: usize,
    ) -> Vec<Option<[(usize, f64); 4]>> {
        let (ph, pw) = ((bin / self.out_w) as f64, (bin % self.out_w) as f64);
        let mut out = Vec::with_capacity(reg.grid_h * reg.grid_w);
        for iy in 0..reg.grid_h {
            let y =
                reg.start_h + ph * reg.bin_h + (iy as f64 + 0.5) * reg.bin_h / reg.grid_h as f64;
            for ix in 0..reg.grid_w {
                let x = reg.start_w
                    + pw * reg.bin_w
                    + (ix as f64 + 0.5) * reg.bin_w / reg.grid_w as f64;
                out.push(corners(y, x, h, w));
            }
        }
        out
    }

    /// A bin's value over one channel's plane.
    fn pool(&self, samples: &[Option<[(usize, f64); 4]>], plane: &[f64]) -> f64 {
        if self.max {
            samples
                .iter()
                .map(|s| match s {
                    Some(cs) => cs
                        .iter()
                        .map(|&(i, wt)| wt * plane[i])
                        .fold(f64::NEG_INFINITY, f64::max),
                    None => 0.0,
                })
                .reduce(f64::max)
                .unwrap_or(0.0)
        } else {
            let sum: f64 = samples
                .iter()
                .flatten()
                .map(|cs| cs.iter().map(|&(i, wt)| wt * plane[i]).sum::<f64>())
                .sum();
            sum / samples.len().max(1) as f64
        }
    }
}

#[cfg(test)]
mod tests;
