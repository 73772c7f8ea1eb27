//! Resize's GPU kernel (shaders/resize.comp): f32, f16, u8 and i8 data, every mode and
//! transform, antialias included while the shrink keeps the kernel within the shader's taps;
//! the scales or sizes are read on the device (they are run-time buffers).

use super::taps::{Mode, Nearest, Transform};
use super::{Layout, Policy, Resize};
use crate::tensor::{DType, strides};
use crate::util::groups_1d;
use crate::{BufRef, Dispatch, GpuKernel, ValueType};
use vkml_shaders::resize;

/// The shader's largest rank (its per-axis arrays).
const MAX_RANK: usize = 8;
const NOT_RESIZED: u32 = u32::MAX;
/// Taps per axis the shader holds (its MAX_TAPS).
const MAX_TAPS: i64 = 16;

/// Whether an antialiased kernel fits the shader's taps on every axis. The scale itself is a
/// run-time value, but it is at least about out / in (scales give out = floor(scale * in), a
/// policy out = round(scale * in)), which bounds how wide the kernel gets.
fn antialias_fits(s: &super::taps::Sampling, input: &[usize], output: &[usize]) -> bool {
    let support = if s.mode == Mode::Linear { 1.0 } else { 2.0 };
    input.iter().zip(output).all(|(&i, &o)| {
        let lower = (o as f64 - 0.5).max(0.0) / i.max(1) as f64;
        if lower <= 0.0 {
            return o == 0;
        }
        let first = (-support / lower.min(1.0)).floor() as i64 + 1;
        2 - 2 * first <= MAX_TAPS
    })
}

pub(super) fn kernel(
    op: &Resize,
    inputs: &[Option<&ValueType>],
    outputs: &[ValueType],
) -> Option<GpuKernel> {
    let x = inputs.first().copied().flatten()?;
    let y = outputs.first()?;
    let variant = by_dtype!(x.dtype, resize::Variant, [F32, F16, U8, I8])?;
    let s = &op.sampling;
    let r = x.shape.len();
    if r > MAX_RANK || y.shape.len() != r {
        return None;
    }
    if s.antialias && !antialias_fits(s, &x.shape, &y.shape) {
        return None;
    }
    if y.numel() == 0 {
        return Some(GpuKernel {
            scratch: vec![],
            dispatches: vec![],
        });
    }
    if x.numel() == 0 {
        return None;
    }
    for v in [x.numel(), y.numel()] {
        i32::try_from(v).ok()?;
    }
    let axes: Vec<usize> = match &op.axes {
        Some(a) => a
            .iter()
            .map(|&a| crate::util::axis_of_tensor(a, r).ok())
            .collect::<Option<_>>()?,
        None => (0..r).collect(),
    };
    let present = |i: usize| inputs.get(i).copied().flatten().filter(|t| t.numel() > 0);
    // Where the scales or sizes are.
    let (scales, sizes) = match op.layout {
        Layout::ScalesAttr => {
            let bits = op.attr_scales.iter().map(|v| v.to_bits()).collect();
            (Some(BufRef::Table(bits)), None)
        }
        Layout::Scales1 => match present(1) {
            Some(t) if t.dtype == DType::F32 => (Some(BufRef::Input(1)), None),
            _ => return None,
        },
        Layout::Full => match (present(2), present(3)) {
            (Some(t), None) if t.dtype == DType::F32 => (Some(BufRef::Input(2)), None),
            (None, Some(t)) if t.dtype == DType::I64 => (None, Some(BufRef::Input(3))),
            _ => return None,
        },
    };
    let roi = if s.transform == Transform::TfCropAndResize {
        match present(1).filter(|_| op.layout == Layout::Full) {
            Some(t) if t.dtype == DType::F32 => BufRef::Input(1),
            Some(_) => return None,
            None => {
                let mut v = vec![0f32.to_bits(); axes.len()];
                v.extend(std::iter::repeat_n(1f32.to_bits(), axes.len()));
                BufRef::Table(v)
            }
        }
    } else {
        BufRef::Input(0)
    };
    let st = strides(&x.shape);
    let mut table = Vec::with_capacity(4 * r);
    for (a, (&stride, (&i, &o))) in st.iter().zip(x.shape.iter().zip(&y.shape)).enumerate() {
        let slot = axes
            .iter()
            .position(|&b| b == a)
            .map_or(NOT_RESIZED, |p| p as u32);
        table.extend([i as u32, o as u32, stride as u32, slot]);
    }
    let (mode, nearest) = match s.mode {
        Mode::Nearest(n) => (
            0,
            match n {
                Nearest::RoundPreferFloor => 0,
                Nearest::RoundPreferCeil => 1,
                Nearest::Floor => 2,
                Nearest::Ceil => 3,
                Nearest::Simple => 4,
            },
        ),
        Mode::Linear => (1, 0),
        Mode::Cubic(_) => (2, 0),
    };
    let cubic_a = match s.mode {
        Mode::Cubic(a) => a as f32,
        _ => -0.75,
    };
    let transform = match s.transform {
        Transform::HalfPixel => 0,
        Transform::HalfPixelSymmetric => 1,
        Transform::PytorchHalfPixel => 2,
        Transform::AlignCorners => 3,
        Transform::Asymmetric => 4,
        Transform::TfCropAndResize => 5,
    };
    let policy = match op.policy {
        Policy::Stretch => 0,
        Policy::NotLarger => 1,
        Policy::NotSmaller => 2,
    };
    let n = y.numel();
    Some(GpuKernel {
        scratch: vec![],
        dispatches: vec![Dispatch::new(
            variant,
            resize::Buffers {
                x: BufRef::Input(0),
                t: BufRef::Table(table),
                // Absent inputs are stood in for by input 0; the flags keep them unread.
                scales: scales.clone().unwrap_or(BufRef::Input(0)),
                sizes: sizes.clone().unwrap_or(BufRef::Input(0)),
                roi,
                y: BufRef::Output(0),
            },
            resize::Params {
                n: n as u32,
                rank: r as u32,
                mode,
                nearest,
                transform,
                source: sizes.is_some() as u32,
                policy,
                listed: axes.len() as u32,
                exclude: s.exclude_outside as u32,
                cubic_a,
                extrapolation: op.extrapolation as f32,
                antialias: s.antialias as u32,
            },
            groups_1d(n, 256),
        )],
    })
}
