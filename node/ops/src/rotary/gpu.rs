//! The dispatch of `shaders/rotary.comp`: one invocation per element.

use super::Slots;
use super::geometry::{Geometry, Rows};
use crate::tensor::DType;
use crate::util::groups_1d;
use crate::{BufRef, Dispatch, GpuKernel};
use vkml_shaders::rotary;

pub fn kernel(dtype: DType, g: &Geometry, s: &Slots) -> Option<GpuKernel> {
    let variant = by_dtype!(dtype, rotary::Variant, [F32, F16])?;
    let n = g
        .batch
        .checked_mul(g.seq)?
        .checked_mul(g.heads)?
        .checked_mul(g.head)?;
    let n = u32::try_from(n).ok()?;
    // The shader computes cache offsets in 32 bits.
    u32::try_from(g.cache_rows.checked_mul(g.rot)?).ok()?;
    if g.rows != Rows::Token && g.cache_rows == 0 && n > 0 {
        // Every token is out of range: the CPU kernel says so.
        return None;
    }
    let u = |v: usize| u32::try_from(v).ok();
    let (mode, pos) = match g.rows {
        // Stood in for by x: mode 0 never reads it.
        Rows::Token => (0, BufRef::Input(s.x)),
        Rows::Ids => (1, BufRef::Input(s.pos)),
        Rows::Offset => (2, BufRef::Input(s.pos)),
    };
    let dispatch = Dispatch::new(
        variant,
        rotary::Buffers {
            x: BufRef::Input(s.x),
            cos_c: BufRef::Input(s.cos),
            sin_c: BufRef::Input(s.sin),
            pos,
            y: BufRef::Output(0),
            fault: BufRef::Fault,
        },
        rotary::Params {
            n,
            d: u(g.head)?,
            rot: u(g.rot)?,
            seq: u(g.seq)?,
            heads: u(g.heads)?,
            transposed: g.transposed as u32,
            mode,
            max_pos: u(g.cache_rows)?,
            interleaved: g.interleaved as u32,
        },
        groups_1d(n as usize, 256),
    );
    Some(GpuKernel {
        scratch: vec![],
        dispatches: if n == 0 { vec![] } else { vec![dispatch] },
    })
}
