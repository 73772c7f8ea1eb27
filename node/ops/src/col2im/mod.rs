//! Col2Im (opset 18): the inverse layout of an im2col. Input [N, C x prod(block_shape), L]
//! holds, for each of the L sliding blocks over an image of `image_shape` (padded, strided and
//! dilated as a convolution's window), the C x block values of that block; each value is added
//! into the image element it came from, so elements that several blocks cover get the sum.
//! Any number of spatial axes.
//!
//! Both kernels gather: each image element adds its contributions in ascending kernel-offset
//! order, so the CPU and the GPU sum in the same order and need no atomics.

use super::util::{const_input, groups_1d, req};
use super::{BufRef, Dispatch, GpuKernel, InferInput, NodeSpec, Op, OpError, Registry, ValueType};
use crate::numeric::{Wide, narrow, widen};
use crate::tensor::{DType, Tensor};
use crate::window::geometry::{Axis, WindowAttrs};
use vkml_shaders::col2im;

pub fn register(r: &mut Registry) {
    r.add("Col2Im", build);
}

#[derive(Debug)]
struct Col2Im {
    window: WindowAttrs,
}

fn build(spec: &NodeSpec<'_>) -> Result<Box<dyn Op>, OpError> {
    let window = WindowAttrs::parse("Col2Im", spec.attrs)?;
    if window.kernel_shape.is_some() {
        return Err(OpError::invalid(
            "Col2Im has no kernel_shape attribute: the block shape is its third input",
        ));
    }
    Ok(Box::new(Col2Im { window }))
}

/// The geometry of one node: per spatial axis, the image size (`input`), the block size
/// (`kernel`) and the number of block positions (`output`).
struct Geometry {
    axes: Vec<Axis>,
    channels: usize,
}

impl Geometry {
    fn image_volume(&self) -> usize {
        Axis::input_volume(&self.axes)
    }
    fn kernel_volume(&self) -> usize {
        self.axes.iter().map(|a| a.kernel).product()
    }
    fn blocks(&self) -> usize {
        Axis::output_volume(&self.axes)
    }

    /// The block position whose kernel offset `k` (row major over the block) lands on image
    /// element `pixel` (row major), if any.
    fn block_of(&self, pixel: usize, k: usize) -> Option<usize> {
        let (mut pixel, mut k) = (pixel, k);
        let (mut block, mut stride) = (0, 1);
        for a in self.axes.iter().rev() {
            let coord = pixel % a.input;
            let offset = k % a.kernel;
            pixel /= a.input;
            k /= a.kernel;
            let t = (coord + a.pad_begin).checked_sub(offset * a.dilation)?;
            if t % a.stride != 0 || t / a.stride >= a.output {
                return None;
            }
            block += t / a.stride * stride;
            stride *= a.output;
        }
        Some(block)
    }
}

fn shape_values(inputs: &[Option<InferInput<'_>>], i: usize) -> Result<Vec<usize>, OpError> {
    let name = ["", "image_shape", "block_shape"][i];
    let v = const_input(inputs, i)?
        .to_i64_vec()
        .map_err(|e| OpError::invalid(format!("Col2Im: {name}: {e}")))?;
    v.iter()
        .map(|&d| {
            usize::try_from(d).ok().filter(|&d| d > 0).ok_or_else(|| {
                OpError::invalid(format!(
                    "Col2Im: {name} {v:?} has a value below 1; every size must be positive"
                ))
            })
        })
        .collect()
}

impl Col2Im {
    fn geometry(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Geometry, OpError> {
        let x = req(inputs, 0)?.ty;
        let image = shape_values(inputs, 1)?;
        let block = shape_values(inputs, 2)?;
        if image.len() != block.len() || image.is_empty() {
            return Err(OpError::invalid(format!(
                "Col2Im: image_shape {image:?} and block_shape {block:?} must have one value \
                 per spatial axis each"
            )));
        }
        let axes = self.window.resolve("Col2Im", &image, &block, false)?;
        let kvol: usize = block.iter().product();
        let blocks = Axis::output_volume(&axes);
        let [_, cols, l] = x.shape[..] else {
            return Err(OpError::invalid(format!(
                "Col2Im: the input has shape {:?}; it must be [N, C x prod(block_shape), L]",
                x.shape
            )));
        };
        if cols % kvol != 0 || l != blocks {
            return Err(OpError::invalid(format!(
                "Col2Im: input {:?} does not fit image {image:?} and block {block:?}: its \
                 second size must be a multiple of {kvol} and its third the {blocks} block \
                 positions",
                x.shape
            )));
        }
        Ok(Geometry {
            axes,
            channels: cols / kvol,
        })
    }
}

/// Image element `i` of [N, C, image...]: the sum of its contributions, `add` folding them.
fn gather<T: Copy>(g: &Geometry, x: &[T], i: usize, zero: T, add: fn(T, T) -> T) -> T {
    let plane = g.image_volume();
    let (nc, pixel) = (i / plane, i % plane);
    let (kvol, blocks) = (g.kernel_volume(), g.blocks());
    (0..kvol).fold(zero, |acc, k| match g.block_of(pixel, k) {
        Some(b) => add(acc, x[(nc * kvol + k) * blocks + b]),
        None => acc,
    })
}

impl Op for Col2Im {
    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<ValueType>, OpError> {
        let x = req(inputs, 0)?.ty;
        let g = self.geometry(inputs)?;
        let mut shape = vec![x.shape[0], g.channels];
        shape.extend(g.axes.iter().map(|a| a.input));
        Ok(vec![ValueType::new(x.dtype, shape)])
    }

    fn run_cpu(
        &self,
        inputs: &[Option<&Tensor>],
        outputs: &[ValueType],
    ) -> Result<Vec<Tensor>, OpError> {
        let x = req(inputs, 0)?;
        let types = types_of(inputs);
        let known: Vec<Option<InferInput<'_>>> = types
            .iter()
            .zip(inputs)
            .map(|(ty, t)| ty.as_ref().map(|ty| InferInput { ty, value: *t }))
            .collect();
        let g = self.geometry(&known)?;
        let n = outputs[0].numel();
        let y = match widen(x)? {
            Wide::F(v) => Wide::F(
                (0..n)
                    .map(|i| gather(&g, &v, i, 0.0, |a, b| a + b))
                    .collect(),
            ),
            Wide::I(v) => Wide::I(
                (0..n)
                    .map(|i| gather(&g, &v, i, 0, i64::wrapping_add))
                    .collect(),
            ),
        };
        Ok(vec![narrow(x.dtype(), outputs[0].shape.clone(), y)?])
    }

    fn gpu_planned(
        &self,
        inputs: &[Option<InferInput<'_>>],
        outputs: &[ValueType],
        _tuning: &crate::KernelTuning,
    ) -> Option<GpuKernel> {
        let x = req(inputs, 0).ok()?.ty;
        let n = outputs[0].numel();
        if x.dtype != DType::F32 || n == 0 || x.numel() > u32::MAX as usize {
            return None;
        }
        let g = self.geometry(inputs).ok()?;
        let w = |v: usize| u32::try_from(v).ok();
        let mut table = vec![w(g.axes.len())?];
        for a in &g.axes {
            for v in [
                a.input,
                a.kernel,
                a.output,
                a.stride,
                a.dilation,
                a.pad_begin,
            ] {
                table.push(w(v)?);
            }
        }
        Some(GpuKernel {
            scratch: vec![],
            dispatches: vec![Dispatch::new(
                col2im::Variant::Main,
                col2im::Buffers {
                    x: BufRef::Input(0),
                    y: BufRef::Output(0),
                    t: BufRef::Table(table),
                },
                col2im::Params {
                    n: w(n)?,
                    plane: w(g.image_volume())?,
                    kvol: w(g.kernel_volume())?,
                    blocks: w(g.blocks())?,
                },
                groups_1d(n, 256),
            )],
        })
    }

    fn flops(&self, inputs: &[Option<&ValueType>], _outputs: &[ValueType]) -> u64 {
        inputs
            .first()
            .copied()
            .flatten()
            .map_or(0, |x| x.numel() as u64)
    }
}

fn types_of(inputs: &[Option<&Tensor>]) -> Vec<Option<ValueType>> {
    inputs.iter().map(|t| t.map(ValueType::of)).collect()
}

#[cfg(test)]
mod tests;
