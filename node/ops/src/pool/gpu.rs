//! The GPU side of the pools: shaders/pool.comp (one thread per output),
//! shaders/pool_max_indices.comp (MaxPool with Indices) and shaders/pool_global.comp (one
//! workgroup per plane).

use super::{PoolKind, PoolShape};
use crate::util::groups_1d;
use crate::{BufRef, Dispatch, GpuKernel};

const MAX_ELEMS: usize = i32::MAX as usize;

/// `mode` word of pool.comp and pool_global.comp.
const MODE_MAX: u32 = 0;
const MODE_AVG: u32 = 1;
const MODE_AVG_INCLUDE_PAD: u32 = 2;
const MODE_LP: u32 = 3;

/// `indices`: MaxPool's Indices output is wanted, numbered column-major when `Some(true)`.
/// `half`: f16 tensors (the shaders' `_f16` variants).
pub fn pool(s: &PoolShape, kind: PoolKind, indices: Option<bool>, half: bool) -> Option<GpuKernel> {
    let planes = s.n * s.c;
    let (x_len, y_len) = (planes * s.in_plane(), planes * s.out_plane());
    if x_len > MAX_ELEMS || y_len > MAX_ELEMS || y_len == 0 {
        return None;
    }
    let a = s.axes3();
    let mut params = vec![planes as u32];
    params.extend(a.iter().map(|a| a.input as u32));
    params.extend(a.iter().map(|a| a.output as u32));
    params.extend(a.iter().map(|a| a.kernel as u32));
    params.extend(a.iter().map(|a| a.stride as u32));
    params.extend(a.iter().map(|a| a.dilation as u32));
    params.extend(a.iter().map(|a| a.pad_begin as u32));
    let (shader, buffers) = if let Some(column_major) = indices {
        params.push(column_major as u32);
        let buffers = vec![BufRef::Input(0), BufRef::Output(0), BufRef::Output(1)];
        (
            if half {
                "pool_max_indices_f16"
            } else {
                "pool_max_indices_f32"
            },
            buffers,
        )
    } else {
        // End of the explicit padding: windows of count_include_pad count taps up to here.
        params.extend(a.iter().map(|a| (a.input + a.pad_end) as u32));
        params.push(match kind {
            PoolKind::Max => MODE_MAX,
            PoolKind::Avg {
                count_include_pad: false,
            } => MODE_AVG,
            PoolKind::Avg {
                count_include_pad: true,
            } => MODE_AVG_INCLUDE_PAD,
            PoolKind::Lp { .. } => MODE_LP,
        });
        params.push(match kind {
            PoolKind::Lp { p } => p,
            _ => 1,
        });
        (
            if half { "pool_f16" } else { "pool_f32" },
            vec![BufRef::Input(0), BufRef::Output(0)],
        )
    };
    debug_assert!(8 * buffers.len() + 4 * params.len() <= 128);
    Some(GpuKernel {
        scratch: vec![],
        dispatches: vec![Dispatch {
            shader,
            buffers,
            params,
            groups: groups_1d(y_len, 256),
        }],
    })
}

pub fn global_pool(planes: usize, plane: usize, max: bool, half: bool) -> Option<GpuKernel> {
    if planes == 0 || planes.checked_mul(plane)? > MAX_ELEMS {
        return None;
    }
    Some(GpuKernel {
        scratch: vec![],
        dispatches: vec![Dispatch {
            shader: if half {
                "pool_global_f16"
            } else {
                "pool_global_f32"
            },
            buffers: vec![BufRef::Input(0), BufRef::Output(0)],
            params: vec![
                planes as u32,
                plane as u32,
                if max { MODE_MAX } else { MODE_AVG },
            ],
            // One workgroup of 256 per plane.
            groups: groups_1d(planes * 256, 256),
        }],
    })
}
