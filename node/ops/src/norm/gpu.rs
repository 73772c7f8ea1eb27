//! The row-normalisation shader's dispatch: one workgroup per row.

use super::Rows;
use crate::tensor::DType;
use crate::{BufRef, Dispatch, GpuKernel};
use vkml_shaders::norm_rows;

/// `stats`: how many of Mean and InvStdDev (in that order) are wanted, 0 to 2.
pub fn kernel(dtype: DType, r: Rows, eps: f32, has_bias: bool, stats: usize) -> Option<GpuKernel> {
    let variant = by_dtype!(dtype, norm_rows::Variant, [F32, F16])?;
    u32::try_from(r.rows.checked_mul(r.len)?).ok()?;
    if r.rows == 0 || r.len == 0 {
        return Some(GpuKernel {
            scratch: vec![],
            dispatches: vec![],
        });
    }
    let gy = r.rows.div_ceil(65_535);
    let gx = r.rows.div_ceil(gy);
    // Absent buffers are stood in for by present ones the flags keep the shader off.
    let bias = if has_bias {
        BufRef::Input(2)
    } else {
        BufRef::Input(1)
    };
    let (mean, inv) = match stats {
        0 => (BufRef::Output(0), BufRef::Output(0)),
        1 => (BufRef::Output(1), BufRef::Output(1)),
        _ => (BufRef::Output(1), BufRef::Output(2)),
    };
    Some(GpuKernel {
        scratch: vec![],
        dispatches: vec![Dispatch::new(
            variant,
            norm_rows::Buffers {
                x: BufRef::Input(0),
                scale: BufRef::Input(1),
                bias,
                y: BufRef::Output(0),
                mean,
                inv,
            },
            norm_rows::Params {
                rows: r.rows as u32,
                len: r.len as u32,
                pp: r.p as u32,
                q: r.q as u32,
                d: r.d as u32,
                s: r.s as u32,
                eps,
                flags: has_bias as u32 | u32::from(stats >= 1) << 1 | u32::from(stats >= 2) << 2,
            },
            [gx as u32, u32::try_from(gy).ok()?, 1],
        )],
    })
}
