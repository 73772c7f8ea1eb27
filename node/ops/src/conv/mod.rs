//! Conv (opsets 1, 11, 22): N-D convolution with groups, strides, dilations and padding.
//!
//! CPU: im2col + GEMM per (batch, group), a direct loop for depthwise, and for small f32
//! convolutions a direct AVX2 kernel (simd/direct.rs). GPU: a tiled
//! implicit-GEMM shader (split along K into two passes when it has too few output tiles to
//! fill the GPU, see gpu.rs), or a one-thread-per-output shader when a group has few output
//! channels (depthwise and narrow grouped convolutions), both for 1-D to 3-D.
//!
//! The window geometry (window/) and the float element trait (numeric/float.rs) are shared
//! with ConvTranspose, the pools and BatchNormalization.

mod cpu;
mod depthwise;
#[cfg(test)]
mod depthwise_tests;
#[cfg(test)]
mod fast_tests;
#[cfg(test)]
mod fused_tests;
mod gpu;
#[cfg(test)]
pub(crate) mod gpu_tests;
pub(crate) mod q8;
#[cfg(test)]
pub(crate) mod q8_tests;
#[cfg(test)]
mod splitk_tests;
#[cfg(test)]
pub(crate) mod tests;
mod wide;

use super::util::{opt, req};
use super::{GpuKernel, InferInput, MS_DOMAIN, NodeSpec, Op, OpError, Registry, ValueType};
use crate::elementwise::activation::Activation;
use crate::simd::direct::PackCache;
use crate::size::{self, Size};
use crate::splitk::SplitK;
use crate::tensor::{DType, Tensor};

pub(super) use crate::numeric::float::{FLOAT_DTYPES, Float};
use crate::window::geometry::{Axis, WindowAttrs};

pub fn register(r: &mut Registry) {
    // f16 / bf16 run through f32 on the CPU.
    r.add("Conv", |s| Ok(super::via_f32::ViaF32::half(build(s)?)));
    r.add_in(MS_DOMAIN, FUSED, |s| {
        Ok(super::via_f32::ViaF32::half(Box::new(parse_fused(s)?)))
    });
}

/// com.microsoft's Conv with an activation and an optional fourth input Z added before it
/// (onnxruntime's CPU provider makes these of Conv + activation and Conv + Add + activation);
/// graph/fuse_conv.rs makes them for the CPU backend.
pub const FUSED: &str = "FusedConv";

fn build(spec: &NodeSpec<'_>) -> Result<Box<dyn Op>, OpError> {
    Ok(Box::new(parse(spec)?))
}

fn parse_fused(spec: &NodeSpec<'_>) -> Result<Conv, OpError> {
    if !(2..=4).contains(&spec.num_inputs) {
        return Err(OpError::invalid(format!(
            "{FUSED} takes 2 to 4 inputs (X, W, optional B, optional Z), got {}",
            spec.num_inputs
        )));
    }
    let mut conv = parse(&NodeSpec {
        num_inputs: spec.num_inputs.min(3),
        ..*spec
    })?;
    conv.fused = true;
    conv.act = match spec.attrs.string_opt("activation")? {
        None => None,
        Some(name) => {
            let params = spec.attrs.floats_opt("activation_params")?.unwrap_or(&[]);
            Some(Activation::parse(FUSED, name, params)?)
        }
    };
    Ok(conv)
}

/// The Conv a node describes (also QLinearConv's and ConvInteger's geometry).
pub(crate) fn parse(spec: &NodeSpec<'_>) -> Result<Conv, OpError> {
    if !(2..=3).contains(&spec.num_inputs) {
        return Err(OpError::invalid(format!(
            "Conv takes 2 or 3 inputs (X, W, optional B), got {}",
            spec.num_inputs
        )));
    }
    if spec.num_outputs != 1 {
        return Err(OpError::invalid(format!(
            "Conv has 1 output, got {}",
            spec.num_outputs
        )));
    }
    let group = spec.attrs.int("group", 1)?;
    if group < 1 {
        return Err(OpError::invalid(format!(
            "Conv: group must be at least 1, got {group}"
        )));
    }
    Ok(Conv {
        window: WindowAttrs::parse("Conv", spec.attrs)?,
        group: Size::from_i64(group, "Conv: group")?.get(),
        pack: PackCache::default(),
        fused: false,
        act: None,
    })
}

#[derive(Debug, Clone, PartialEq)]
pub struct Conv {
    window: WindowAttrs,
    group: usize,
    /// The CPU kernel's weights as it last packed them (see simd/direct.rs).
    pack: PackCache,
    /// FusedConv: a fourth input Z may follow B.
    fused: bool,
    /// FusedConv's activation, after the bias and Z.
    act: Option<Activation>,
}

/// A convolution resolved against concrete shapes.
#[derive(Debug, Clone, PartialEq)]
pub struct ConvShape {
    pub n: usize,
    /// Input channels.
    pub c: usize,
    /// Output channels.
    pub oc: usize,
    pub group: usize,
    /// One per spatial axis, 1 to 3 of them.
    pub axes: Vec<Axis>,
}

impl ConvShape {
    pub fn cg(&self) -> usize {
        self.c / self.group
    }
    pub fn ocg(&self) -> usize {
        self.oc / self.group
    }
    pub fn kernel_volume(&self) -> usize {
        self.axes.iter().map(|a| a.kernel).product()
    }
    pub fn in_plane(&self) -> usize {
        Axis::input_volume(&self.axes)
    }
    pub fn out_plane(&self) -> usize {
        Axis::output_volume(&self.axes)
    }
    pub fn output_shape(&self) -> Vec<usize> {
        let mut s = vec![self.n, self.oc];
        s.extend(self.axes.iter().map(|a| a.output));
        s
    }
    /// The axes padded in front to exactly three with axes that do nothing (size 1, kernel
    /// 1), so kernels can be written once for 1-D to 3-D.
    pub fn axes3(&self) -> [Axis; 3] {
        Axis::pad_to_3(&self.axes)
    }
}

impl Conv {
    pub(crate) fn shape(
        &self,
        x: &[usize],
        w: &[usize],
        b: Option<&[usize]>,
    ) -> Result<ConvShape, OpError> {
        if x.len() < 3 {
            return Err(OpError::invalid(format!(
                "Conv: X must be N x C x spatial..., got shape {x:?}"
            )));
        }
        if x.len() > 5 {
            return Err(OpError::unsupported(format!(
                "Conv with {} spatial axes (1 to 3 are implemented)",
                x.len() - 2
            )));
        }
        if w.len() != x.len() {
            return Err(OpError::invalid(format!(
                "Conv: W has shape {w:?} (rank {}) but X has rank {}",
                w.len(),
                x.len()
            )));
        }
        let (n, c, oc, cg, g) = (x[0], x[1], w[0], w[1], self.group);
        if cg.checked_mul(g) != Some(c) {
            return Err(OpError::invalid(format!(
                "Conv: input has {c} channels but W expects {} (group {g}, {cg} per group)",
                cg as u128 * g as u128
            )));
        }
        if oc % g != 0 {
            return Err(OpError::invalid(format!(
                "Conv: W has {oc} output channels, not a multiple of group {g}"
            )));
        }
        if let Some(b) = b
            && b != [oc]
        {
            return Err(OpError::invalid(format!(
                "Conv: B has shape {b:?} but W has {oc} output channels (expected [{oc}])"
            )));
        }
        let kernel = &w[2..];
        if let Some(k) = &self.window.kernel_shape
            && k.as_slice() != kernel
        {
            return Err(OpError::invalid(format!(
                "Conv: kernel_shape {k:?} does not match W's spatial shape {kernel:?}"
            )));
        }
        let axes = self.window.resolve("Conv", &x[2..], kernel, false)?;
        let s = ConvShape {
            n,
            c,
            oc,
            group: g,
            axes,
        };
        size::check_shape(&s.output_shape(), "Conv's output")?;
        Ok(s)
    }

    /// FusedConv's Z: the output's type; Conv has no fourth input.
    fn check_z(&self, z: Option<&ValueType>, y: &ValueType) -> Result<(), OpError> {
        match z {
            Some(_) if !self.fused => Err(OpError::invalid(
                "Conv takes 2 or 3 inputs (X, W, optional B), got a fourth",
            )),
            Some(z) if z != y => Err(OpError::invalid(format!(
                "{FUSED}: Z must be the output's type {y}, got {z}"
            ))),
            _ => Ok(()),
        }
    }

    fn check_dtypes(&self, x: DType, w: DType, b: Option<DType>) -> Result<(), OpError> {
        if !FLOAT_DTYPES.contains(&x) {
            return Err(OpError::unsupported(format!(
                "Conv on {x} (implemented: float, double)"
            )));
        }
        if w != x || b.is_some_and(|b| b != x) {
            return Err(OpError::invalid(format!(
                "Conv: X, W and B must share one type, got {x}, {w}{}",
                b.map(|b| format!(", {b}")).unwrap_or_default()
            )));
        }
        Ok(())
    }
}

fn run_typed<T: Float>(
    conv: &Conv,
    s: &ConvShape,
    x: &Tensor,
    w: &Tensor,
    b: Option<&Tensor>,
    z: Option<&Tensor>,
) -> Result<Tensor, OpError> {
    fn view<T: Float>(t: &Tensor) -> Result<std::borrow::Cow<'_, [T]>, OpError> {
        t.view::<T>()
            .map_err(|e| OpError::invalid(format!("Conv: {e}")))
    }
    let (xv, wv) = (view::<T>(x)?, view::<T>(w)?);
    let bv = b.map(view::<T>).transpose()?;
    let zv = z.map(view::<T>).transpose()?;
    let post = cpu::Post {
        z: zv.as_deref(),
        act: conv.act,
    };
    let y = cpu::conv(s, &xv, &wv, bv.as_deref(), post, &conv.pack);
    Ok(Tensor::from_vec(s.output_shape(), y))
}

impl Op for Conv {
    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<ValueType>, OpError> {
        let (x, w) = (req(inputs, 0)?.ty, req(inputs, 1)?.ty);
        let b = opt(inputs, 2).map(|b| b.ty);
        self.check_dtypes(x.dtype, w.dtype, b.map(|b| b.dtype))?;
        let s = self.shape(&x.shape, &w.shape, b.map(|b| b.shape.as_slice()))?;
        let y = ValueType::new(x.dtype, s.output_shape());
        self.check_z(opt(inputs, 3).map(|z| z.ty), &y)?;
        Ok(vec![y])
    }

    fn run_cpu(
        &self,
        inputs: &[Option<&Tensor>],
        _outputs: &[ValueType],
    ) -> Result<Vec<Tensor>, OpError> {
        let (x, w) = (req(inputs, 0)?, req(inputs, 1)?);
        let b = opt(inputs, 2);
        self.check_dtypes(x.dtype(), w.dtype(), b.map(|b| b.dtype()))?;
        let s = self.shape(x.shape(), w.shape(), b.map(|b| b.shape()))?;
        let z = opt(inputs, 3);
        let y = ValueType::new(x.dtype(), s.output_shape());
        self.check_z(z.map(ValueType::of).as_ref(), &y)?;
        let y = match x.dtype() {
            DType::F32 => run_typed::<f32>(self, &s, x, w, b, z)?,
            _ => run_typed::<f64>(self, &s, x, w, b, z)?,
        };
        Ok(vec![y])
    }

    fn gpu(&self, inputs: &[Option<&ValueType>], outputs: &[ValueType]) -> Option<GpuKernel> {
        self.gpu_tuned(inputs, outputs, SplitK::Auto)
    }

    fn gpu_planned(
        &self,
        inputs: &[Option<InferInput<'_>>],
        outputs: &[ValueType],
        tuning: &crate::KernelTuning,
    ) -> Option<GpuKernel> {
        self.gpu_tuned(&crate::util::types_of(inputs), outputs, tuning.conv_splitk)
    }

    fn flops(&self, inputs: &[Option<&ValueType>], outputs: &[ValueType]) -> u64 {
        let shape = match (opt(inputs, 0), opt(inputs, 1)) {
            (Some(x), Some(w)) => self.shape(&x.shape, &w.shape, None).ok(),
            _ => None,
        };
        match shape {
            Some(s) => {
                2 * (s.n * s.oc * s.out_plane()) as u64 * (s.cg() * s.kernel_volume()) as u64
            }
            None => outputs.iter().map(|o| o.numel() as u64).sum(),
        }
    }
}

impl Conv {
    fn gpu_tuned(
        &self,
        inputs: &[Option<&ValueType>],
        _outputs: &[ValueType],
        mode: SplitK,
    ) -> Option<GpuKernel> {
        let (x, w) = (opt(inputs, 0)?, opt(inputs, 1)?);
        let b = opt(inputs, 2);
        // FusedConv's additions are not in the shaders: such a node runs on the CPU.
        if self.act.is_some() || opt(inputs, 3).is_some() {
            return None;
        }
        // f32, or f16 (which the CPU side runs through f32, see via_f32.rs).
        if !matches!(x.dtype, DType::F32 | DType::F16)
            || w.dtype != x.dtype
            || b.is_some_and(|b| b.dtype != x.dtype)
        {
            return None;
        }
        let s = self
            .shape(&x.shape, &w.shape, b.map(|b| b.shape.as_slice()))
            .ok()?;
        gpu::kernel(&s, b.is_some(), x.dtype == DType::F16, mode)
    }
}
