//! The gather form on the GPU: one invocation per output element, up to 3 spatial axes.

use super::Geometry;
use crate::tensor::DType;
use crate::util::groups_1d;
use crate::{BufRef, Dispatch, GpuKernel};
use vkml_shaders::conv_transpose;

pub fn kernel(dtype: DType, g: &Geometry, has_bias: bool) -> Option<GpuKernel> {
    let variant = by_dtype!(dtype, conv_transpose::Variant, [F32, F16])?;
    let sp = g.input.len();
    if sp > 3 {
        return None;
    }
    let total = g.n * g.m * g.output.iter().product::<usize>();
    u32::try_from(total).ok()?;
    // Spatial axes padded in front to three: size 1, kernel 1, stride 1.
    let pad3 = |v: &[usize], fill: usize| -> Vec<u32> {
        let mut out = vec![fill as u32; 3 - sp];
        out.extend(v.iter().map(|&e| e as u32));
        out
    };
    let mut table = Vec::new();
    table.extend(pad3(&g.input, 1));
    table.extend(pad3(&g.output, 1));
    table.extend(pad3(&g.kernel, 1));
    table.extend(pad3(&g.stride, 1));
    table.extend(pad3(&g.dilation, 1));
    table.extend(std::iter::repeat_n(0u32, 3 - sp));
    table.extend(g.pad_begin.iter().map(|&p| p as i32 as u32));
    let bias = if has_bias {
        BufRef::Input(2)
    } else {
        BufRef::Input(1)
    };
    Some(GpuKernel {
        scratch: vec![],
        dispatches: vec![Dispatch::new(
            variant,
            conv_transpose::Buffers {
                x: BufRef::Input(0),
                w: BufRef::Input(1),
                b: bias,
                y: BufRef::Output(0),
                t: BufRef::Table(table),
            },
            conv_transpose::Params {
                total: total as u32,
                c: g.c as u32,
                m: g.m as u32,
                group: g.group as u32,
                has_bias: has_bias as u32,
            },
            groups_1d(total, 256),
        )],
    })
}
