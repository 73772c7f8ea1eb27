//! The GPU side of the pools: shaders/pool.comp (one thread per output),
//! shaders/pool_max_indices.comp (MaxPool with Indices) and shaders/pool_global.comp (one
//! workgroup per plane).

use super::{Axis, PoolKind, PoolShape};
use crate::tensor::DType;
use crate::util::groups_1d;
use crate::{BufRef, Dispatch, GpuKernel};
use vkml_shaders::{op, pool, pool_global, pool_max_indices};

const MAX_ELEMS: usize = i32::MAX as usize;

/// `indices`: MaxPool's Indices output is wanted, numbered column-major when `Some(true)`.
/// `dtype`: the tensors' element type: f32, f16, or u8 / i8 for MaxPool without Indices.
pub fn pool(
    s: &PoolShape,
    kind: PoolKind,
    indices: Option<bool>,
    dtype: DType,
) -> Option<GpuKernel> {
    let half = dtype == DType::F16;
    let bytes = matches!(dtype, DType::U8 | DType::I8);
    if bytes && (indices.is_some() || kind != PoolKind::Max) {
        return None;
    }
    let planes = s.n * s.c;
    let (x_len, y_len) = (planes * s.in_plane(), planes * s.out_plane());
    if x_len > MAX_ELEMS || y_len > MAX_ELEMS || y_len == 0 {
        return None;
    }
    let a = s.axes3();
    let each = |f: fn(&Axis) -> usize| -> [u32; 3] { std::array::from_fn(|i| f(&a[i]) as u32) };
    let (in_size, out_size, kernel, stride, dilation, pad) = (
        each(|a| a.input),
        each(|a| a.output),
        each(|a| a.kernel),
        each(|a| a.stride),
        each(|a| a.dilation),
        each(|a| a.pad_begin),
    );
    let planes = planes as u32;
    let dispatch = if let Some(column_major) = indices {
        Dispatch::new(
            if half {
                pool_max_indices::Variant::F16
            } else {
                pool_max_indices::Variant::F32
            },
            pool_max_indices::Buffers {
                x: BufRef::Input(0),
                y: BufRef::Output(0),
                idx: BufRef::Output(1),
            },
            pool_max_indices::Params {
                planes,
                in_size,
                out_size,
                kernel,
                stride,
                dilation,
                pad,
                column_major: column_major as u32,
            },
            groups_1d(y_len, 256),
        )
    } else {
        let mode = match kind {
            PoolKind::Max => op::Pool::Max,
            PoolKind::Avg {
                count_include_pad: false,
            } => op::Pool::Avg,
            PoolKind::Avg {
                count_include_pad: true,
            } => op::Pool::AvgIncludePad,
            PoolKind::Lp { .. } => op::Pool::Lp,
        };
        Dispatch::new(
            match dtype {
                DType::F16 => pool::Variant::F16,
                DType::U8 => pool::Variant::U8,
                DType::I8 => pool::Variant::I8,
                _ => pool::Variant::F32,
            },
            pool::Buffers {
                x: BufRef::Input(0),
                y: BufRef::Output(0),
            },
            pool::Params {
                planes,
                in_size,
                out_size,
                kernel,
                stride,
                dilation,
                pad,
                // End of the explicit padding: windows of count_include_pad count taps up to
                // here.
                lim: each(|a| a.input + a.pad_end),
                mode: mode.code(),
                lp: match kind {
                    PoolKind::Lp { p } => p,
                    _ => 1,
                },
            },
            groups_1d(y_len, 256),
        )
    };
    Some(GpuKernel {
        scratch: vec![],
        dispatches: vec![dispatch],
    })
}

pub fn global_pool(planes: usize, plane: usize, max: bool, half: bool) -> Option<GpuKernel> {
    if planes == 0 || planes.checked_mul(plane)? > MAX_ELEMS {
        return None;
    }
    Some(GpuKernel {
        scratch: vec![],
        dispatches: vec![Dispatch::new(
            if half {
                pool_global::Variant::F16
            } else {
                pool_global::Variant::F32
            },
            pool_global::Buffers {
                x: BufRef::Input(0),
                y: BufRef::Output(0),
            },
            pool_global::Params {
                planes: planes as u32,
                plane_size: plane as u32,
                mode: if max { op::Pool::Max } else { op::Pool::Avg }.code(),
            },
            // One workgroup of 256 per plane.
            groups_1d(planes * 256, 256),
        )],
    })
}
