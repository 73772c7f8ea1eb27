//! QuantizeLinear's and DequantizeLinear's dispatches (shaders/quantize.comp,
//! shaders/dequantize.comp): x and the scale of one float type, f32 or f16; bf16, and a
//! scale of another type than x's (or the output's), stay on the CPU.

use super::{Dequantize, Kind, Layout, Quantize};
use crate::lowp::{self, Float};
use crate::tensor::DType;
use crate::util::{groups_1d, opt, req};
use crate::{BufRef, Dispatch, GpuKernel, ValueType};
use vkml_shaders::{dequantize, quantize as quantize_kernel};

/// The kernels' code for an element type: lowp.glsl's, or the wide integers'.
fn code(d: DType) -> Option<u32> {
    lowp::gpu_code(d).or(match d {
        DType::U8 => Some(10),
        DType::I8 => Some(11),
        DType::U16 => Some(12),
        DType::I16 => Some(13),
        DType::I32 => Some(14),
        _ => None,
    })
}

/// kind, inner, dim, block, blocks as the kernels take them.
fn placement(l: &Layout) -> Option<[u32; 5]> {
    let kind = match l.kind {
        Kind::Tensor => 0,
        Kind::Axis => 1,
        Kind::Blocked => 2,
    };
    let w = |v: usize| u32::try_from(v).ok();
    Some([kind, w(l.inner)?, w(l.dim)?, w(l.block)?, w(l.blocks)?])
}

/// A kernel of dispatch `d`, or of none for an empty x.
fn one_dispatch(n: usize, d: Dispatch) -> GpuKernel {
    GpuKernel {
        scratch: vec![],
        dispatches: if n == 0 { vec![] } else { vec![d] },
    }
}

pub(super) fn quantize(
    op: &Quantize,
    inputs: &[Option<&ValueType>],
    outputs: &[ValueType],
) -> Option<GpuKernel> {
    let x = req(inputs, 0).ok()?;
    let scale = req(inputs, 1).ok()?;
    let zp = opt(inputs, 2);
    let out = outputs.first()?.dtype;
    if scale.dtype != x.dtype || Float::of(out) == Some(Float::E8M0) {
        return None;
    }
    use quantize_kernel::Variant as V;
    let variant = match (x.dtype, out.size()) {
        (DType::F32, 1) => V::F32B8,
        (DType::F32, 2) => V::F32B16,
        (DType::F16, 1) => V::F16B8,
        (DType::F16, 2) => V::F16B16,
        _ => return None,
    };
    let l = op.common.layout(&x.shape, &scale.shape).ok()?;
    let [kind, inner, dim, block, blocks] = placement(&l)?;
    let n = x.numel();
    let flags = u32::from(zp.is_some())
        | (u32::from(op.saturate) << 1)
        | (u32::from(x.dtype == DType::F16) << 2);
    let d = Dispatch::new(
        variant,
        quantize_kernel::Buffers {
            x: BufRef::Input(0),
            scale: BufRef::Input(1),
            // Not read without a zero point; any buffer of the op serves.
            zp: if zp.is_some() {
                BufRef::Input(2)
            } else {
                BufRef::Input(1)
            },
            y: BufRef::Output(0),
        },
        quantize_kernel::Params {
            n: u32::try_from(n).ok()?,
            kind,
            inner,
            dim,
            block,
            blocks,
            fmt: code(out)?,
            flags,
        },
        groups_1d(n, 256),
    );
    Some(one_dispatch(n, d))
}

pub(super) fn dequantize(
    op: &Dequantize,
    inputs: &[Option<&ValueType>],
    outputs: &[ValueType],
) -> Option<GpuKernel> {
    let x = req(inputs, 0).ok()?;
    let scale = req(inputs, 1).ok()?;
    let zp = opt(inputs, 2);
    let out = outputs.first()?.dtype;
    // A float8 zero point must be zero, which only the CPU checks (it is a value).
    let float8 = Float::of(x.dtype).is_some_and(|f| f != Float::E2M1);
    if scale.dtype != out || (float8 && zp.is_some()) {
        return None;
    }
    use dequantize::Variant as V;
    let variant = match (x.dtype.size(), out) {
        (1, DType::F32) => V::B8F32,
        (1, DType::F16) => V::B8F16,
        (2, DType::F32) => V::B16F32,
        (2, DType::F16) => V::B16F16,
        (4, DType::F32) => V::B32F32,
        (4, DType::F16) => V::B32F16,
        _ => return None,
    };
    let l = op.common.layout(&x.shape, &scale.shape).ok()?;
    let [kind, inner, dim, block, blocks] = placement(&l)?;
    let n = x.numel();
    // float4's zero point is ignored, as ONNX's reference does.
    let reads_zp = zp.is_some() && Float::of(x.dtype).is_none();
    let d = Dispatch::new(
        variant,
        dequantize::Buffers {
            x: BufRef::Input(0),
            scale: BufRef::Input(1),
            zp: if reads_zp {
                BufRef::Input(2)
            } else {
                BufRef::Input(0)
            },
            y: BufRef::Output(0),
        },
        dequantize::Params {
            n: u32::try_from(n).ok()?,
            kind,
            inner,
            dim,
            block,
            blocks,
            fmt: code(x.dtype)?,
            flags: u32::from(reads_zp),
        },
        groups_1d(n, 256),
    );
    Some(one_dispatch(n, d))
}
