//! The row-normalisation shader's dispatch: one workgroup per row.

use super::Rows;
use crate::tensor::DType;
use crate::{BufRef, Dispatch, GpuKernel};

/// `stats`: how many of Mean and InvStdDev (in that order) are wanted, 0 to 2.
pub fn kernel(dtype: DType, r: Rows, eps: f32, has_bias: bool, stats: usize) -> Option<GpuKernel> {
    let shader = match dtype {
        DType::F32 => "norm_rows_f32",
        DType::F16 => "norm_rows_f16",
        _ => return None,
    };
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
        dispatches: vec![Dispatch {
            shader,
            buffers: vec![
                BufRef::Input(0),
                BufRef::Input(1),
                bias,
                BufRef::Output(0),
                mean,
                inv,
            ],
            params: vec![
                r.rows as u32,
                r.len as u32,
                r.p as u32,
                r.q as u32,
                r.d as u32,
                r.s as u32,
                eps.to_bits(),
                has_bias as u32 | u32::from(stats >= 1) << 1 | u32::from(stats >= 2) << 2,
            ],
            groups: [gx as u32, u32::try_from(gy).ok()?, 1],
        }],
    })
}
