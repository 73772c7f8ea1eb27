//! DeformConv (opsets 19, 22): a 2-D convolution whose every kernel tap reads the input at its
//! usual place moved by a learned offset (per output pixel, tap and offset group), bilinearly
//! interpolated with zeros outside the input, and optionally scaled by a mask. `group` splits
//! the channels as Conv's does; `offset_group` splits the input channels into sets sharing
//! one offset (and mask) per tap. Offsets are [N, offset_group x kH x kW x 2, oH, oW], the
//! pair (dy, dx) innermost; the mask is [N, offset_group x kH x kW, oH, oW].
//!
//! The CPU kernel samples once per (tap, pixel, channel) into an im2col matrix and multiplies
//! it with the weights; the shader (one invocation per output element) samples implicitly,
//! computing a tap's bilinear corners once per offset group it meets.

mod cpu;
#[cfg(test)]
mod tests;

use super::util::{groups_1d, opt, req};
use super::{BufRef, Dispatch, GpuKernel, InferInput, NodeSpec, Op, OpError, Registry, ValueType};
use crate::size::Size;
use crate::tensor::{DType, Tensor};
use crate::window::geometry::{Axis, WindowAttrs};
use vkml_shaders::deform_conv;

pub fn register(r: &mut Registry) {
    r.add("DeformConv", build);
}

#[derive(Debug)]
struct DeformConv {
    window: WindowAttrs,
    group: usize,
    offset_group: usize,
}

fn build(spec: &NodeSpec<'_>) -> Result<Box<dyn Op>, OpError> {
    let a = spec.attrs;
    let count = |name: &str| -> Result<usize, OpError> {
        let v = a.int(name, 1)?;
        if v < 1 {
            return Err(OpError::invalid(format!(
                "DeformConv: {name} is {v}; it must be at least 1"
            )));
        }
        Ok(Size::from_i64(v, format_args!("DeformConv: {name}"))?.get())
    };
    Ok(Box::new(DeformConv {
        window: WindowAttrs::parse("DeformConv", a)?,
        group: count("group")?,
        offset_group: count("offset_group")?,
    }))
}

/// A DeformConv resolved against concrete shapes (2-D only).
#[derive(Debug, Clone, PartialEq)]
struct Shape {
    n: usize,
    c: usize,
    oc: usize,
    group: usize,
    offset_group: usize,
    /// Height, then width.
    axes: [Axis; 2],
    mask: bool,
}

impl Shape {
    fn cg(&self) -> usize {
        self.c / self.group
    }
    fn ocg(&self) -> usize {
        self.oc / self.group
    }
    /// Input channels per offset group.
    fn cpog(&self) -> usize {
        self.c / self.offset_group
    }
    fn taps(&self) -> usize {
        self.axes[0].kernel * self.axes[1].kernel
    }
    fn in_plane(&self) -> usize {
        self.axes[0].input * self.axes[1].input
    }
    fn out_plane(&self) -> usize {
        self.axes[0].output * self.axes[1].output
    }
}

impl DeformConv {
    fn shape(&self, inputs: &[Option<&ValueType>]) -> Result<Shape, OpError> {
        let x = req(inputs, 0)?;
        let w = req(inputs, 1)?;
        let offset = req(inputs, 2)?;
        let &[n, c, ih, iw] = &x.shape[..] else {
            return Err(OpError::unsupported(format!(
                "DeformConv of an input of shape {:?}: only [N, C, H, W] (2-D) is implemented",
                x.shape
            )));
        };
        let &[oc, cg, kh, kw] = &w.shape[..] else {
            return Err(OpError::invalid(format!(
                "DeformConv: W has shape {:?}; it must be [OC, C / group, kH, kW]",
                w.shape
            )));
        };
        let (group, og) = (self.group, self.offset_group);
        if cg * group != c || oc % group != 0 || c % og != 0 {
            return Err(OpError::invalid(format!(
                "DeformConv: input channels {c}, W {:?}, group {group}, offset_group {og}: \
                 C must be group x W's second size and a multiple of offset_group, OC a \
                 multiple of group",
                w.shape
            )));
        }
        if let Some(k) = &self.window.kernel_shape
            && k[..] != [kh, kw]
        {
            return Err(OpError::invalid(format!(
                "DeformConv: kernel_shape {k:?} differs from W's spatial sizes [{kh}, {kw}]"
            )));
        }
        let axes = self
            .window
            .resolve("DeformConv", &[ih, iw], &[kh, kw], false)?;
        let (oh, ow) = (axes[0].output, axes[1].output);
        let expect = |name: &str, ty: &ValueType, per_tap: usize| {
            if ty.shape != [n, og * kh * kw * per_tap, oh, ow] {
                return Err(OpError::invalid(format!(
                    "DeformConv: {name} has shape {:?}; it must be [{n}, {}, {oh}, {ow}] \
                     (offset_group x kH x kW{} channels over the output's pixels)",
                    ty.shape,
                    og * kh * kw * per_tap,
                    if per_tap == 2 { " x 2" } else { "" }
                )));
            }
            Ok(())
        };
        expect("the offset", offset, 2)?;
        let mask = opt(inputs, 4);
        if let Some(m) = mask {
            expect("the mask", m, 1)?;
        }
        if let Some(b) = opt(inputs, 3)
            && b.shape != [oc]
        {
            return Err(OpError::invalid(format!(
                "DeformConv: B has shape {:?}; it must be [{oc}]",
                b.shape
            )));
        }
        let same = [Some(w), Some(offset), opt(inputs, 3), mask];
        if !x.dtype.is_float() || same.iter().flatten().any(|t| t.dtype != x.dtype) {
            return Err(OpError::unsupported(format!(
                "DeformConv of {} (every input must be one float type)",
                x.dtype
            )));
        }
        Ok(Shape {
            n,
            c,
            oc,
            group,
            offset_group: og,
            axes: [axes[0], axes[1]],
            mask: mask.is_some(),
        })
    }
}

impl Op for DeformConv {
    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<ValueType>, OpError> {
        let x = req(inputs, 0)?.ty;
        let s = self.shape(&super::util::types_of(inputs))?;
        let shape = vec![s.n, s.oc, s.axes[0].output, s.axes[1].output];
        Ok(vec![ValueType::new(x.dtype, shape)])
    }

    fn run_cpu(
        &self,
        inputs: &[Option<&Tensor>],
        outputs: &[ValueType],
    ) -> Result<Vec<Tensor>, OpError> {
        let types: Vec<Option<ValueType>> = inputs.iter().map(|t| t.map(ValueType::of)).collect();
        let refs: Vec<Option<&ValueType>> = types.iter().map(Option::as_ref).collect();
        let s = self.shape(&refs)?;
        Ok(vec![cpu::run(&s, inputs, &outputs[0])?])
    }

    fn gpu(&self, inputs: &[Option<&ValueType>], outputs: &[ValueType]) -> Option<GpuKernel> {
        let s = self.shape(inputs).ok()?;
        let y = &outputs[0];
        if y.dtype != DType::F32 || y.numel() == 0 || s.n * s.c * s.in_plane() == 0 {
            return None;
        }
        let w = |v: usize| u32::try_from(v).ok();
        let [ah, aw] = s.axes;
        let table = [
            s.c,
            ah.input,
            aw.input,
            s.oc,
            ah.output,
            aw.output,
            ah.kernel,
            aw.kernel,
            ah.stride,
            aw.stride,
            ah.dilation,
            aw.dilation,
            ah.pad_begin,
            aw.pad_begin,
            s.cg(),
            s.ocg(),
            s.cpog(),
            usize::from(s.mask),
        ]
        .iter()
        .map(|&v| w(v))
        .collect::<Option<Vec<u32>>>()?;
        // Without B the shader reads zeros; without a mask it reads none (the offsets stand
        // in for its address).
        let bias = match opt(inputs, 3) {
            Some(_) => BufRef::Input(3),
            None => BufRef::Table(vec![0; s.oc]),
        };
        let mask = BufRef::Input(if s.mask { 4 } else { 2 });
        Some(GpuKernel {
            scratch: vec![],
            dispatches: vec![Dispatch::new(
                deform_conv::Variant::Main,
                deform_conv::Buffers {
                    x: BufRef::Input(0),
                    w: BufRef::Input(1),
                    offset: BufRef::Input(2),
                    b: bias,
                    mask,
                    y: BufRef::Output(0),
                    t: BufRef::Table(table),
                },
                deform_conv::Params { n: w(y.numel())? },
                groups_1d(y.numel(), 128),
            )],
        })
    }

    fn flops(&self, inputs: &[Option<&ValueType>], outputs: &[ValueType]) -> u64 {
        // A multiply-add per weight and a 4-corner sample per (tap, channel, pixel).
        let Ok(s) = self.shape(inputs) else {
            return outputs[0].numel() as u64;
        };
        let pixels = (s.n * s.out_plane()) as u64;
        let taps = s.taps() as u64;
        pixels * taps * (2 * (s.oc * s.cg()) as u64 + 12 * s.c as u64)
    }
}
