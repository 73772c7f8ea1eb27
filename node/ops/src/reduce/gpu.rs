//! The reduction shader's dispatch: one invocation per output for short reductions, one
//! workgroup per output (a shared-memory tree) for long ones. Output and reduced index spaces
//! are described by (size, stride) lists in a table, so any set of axes works.

use super::{Kind, Plan};
use crate::tensor::{DType, strides};
use crate::util::groups_1d;
use crate::{BufRef, Dispatch, GpuKernel};

/// Reductions at least this long get a workgroup per output.
const ROW_MIN: usize = 128;

/// With keepdims, the reduced axes are those that are 1 in the output and not in the input.
pub fn plan_from_keepdims(shape: &[usize], out: &[usize]) -> Option<Plan> {
    if shape.len() != out.len() {
        return None;
    }
    let axes = (0..shape.len())
        .filter(|&a| out[a] != shape[a])
        .collect::<Vec<_>>();
    if axes.iter().any(|&a| out[a] != 1) {
        return None;
    }
    Some(Plan {
        shape: shape.to_vec(),
        axes,
        out_shape: out.to_vec(),
    })
}

pub fn kernel(kind: Kind, dtype: DType, plan: &Plan) -> Option<GpuKernel> {
    let float = matches!(dtype, DType::F32 | DType::F16);
    if !float && matches!(kind, Kind::L2 | Kind::LogSum | Kind::LogSumExp) {
        return None;
    }
    let suffix = match dtype {
        DType::F32 => "f32",
        DType::F16 => "f16",
        DType::I32 => "i32",
        DType::I64 => "i64",
        DType::I8 => "i8",
        DType::U8 => "u8",
        _ => return None,
    };
    let numel: usize = plan.shape.iter().product();
    u32::try_from(numel).ok()?;
    let plan = &collapsed(plan);
    let st = strides(&plan.shape);
    let kept = plan.kept();
    let nout: usize = kept.iter().map(|&a| plan.shape[a]).product();
    let nred: usize = plan.axes.iter().map(|&a| plan.shape[a]).product();
    let mut table = vec![kept.len() as u32];
    table.extend(kept.iter().map(|&a| plan.shape[a] as u32));
    table.extend(kept.iter().map(|&a| st[a] as u32));
    table.push(plan.axes.len() as u32);
    table.extend(plan.axes.iter().map(|&a| plan.shape[a] as u32));
    table.extend(plan.axes.iter().map(|&a| st[a] as u32));
    if nout == 0 {
        return Some(GpuKernel {
            scratch: vec![],
            dispatches: vec![],
        });
    }
    if nout <= SPLIT_MAX_OUT && nred >= SPLIT_MIN && !matches!(dtype, DType::I8 | DType::U8) {
        return split(suffix, nout, nred, kind, table);
    }
    let row = nred >= ROW_MIN;
    let (shader, groups) = if row {
        let gy = nout.div_ceil(65_535);
        (
            format!("reduce_{suffix}_row"),
            [nout.div_ceil(gy) as u32, u32::try_from(gy).ok()?, 1],
        )
    } else {
        (format!("reduce_{suffix}"), groups_1d(nout, 256))
    };
    Some(GpuKernel {
        scratch: vec![],
        dispatches: vec![Dispatch {
            shader: shader_name(&shader)?,
            buffers: vec![BufRef::Input(0), BufRef::Output(0), BufRef::Table(table)],
            params: vec![nout as u32, nred as u32, kind as u32],
            groups,
        }],
    })
}

/// The same reduction over as few axes as it can be: size-1 axes dropped and neighbours of one
/// kind (both kept or both reduced) merged. Row-major order is unchanged, so every position
/// keeps its place in its output's set and every output its place, while the shaders' index
/// arithmetic (a division and a modulo per axis, for every element read) shrinks: reducing a
/// whole [1, 64, 128, 128] tensor becomes one axis of 1M.
fn collapsed(plan: &Plan) -> Plan {
    let mut shape: Vec<usize> = Vec::new();
    let mut reduced: Vec<bool> = Vec::new();
    for (a, &n) in plan.shape.iter().enumerate() {
        if n == 1 {
            continue;
        }
        let r = plan.axes.contains(&a);
        match (shape.last_mut(), reduced.last()) {
            (Some(last), Some(&same)) if same == r => *last *= n,
            _ => {
                shape.push(n);
                reduced.push(r);
            }
        }
    }
    Plan {
        axes: (0..shape.len()).filter(|&i| reduced[i]).collect(),
        shape,
        out_shape: plan.out_shape.clone(),
    }
}

/// Few outputs over long sets: split each set over several workgroups (reduce_split.comp).
const SPLIT_MAX_OUT: usize = 64;
const SPLIT_MIN: usize = 1 << 16;
/// Positions per workgroup of the split's first pass (16 per invocation): a 1M-element sum is
/// 256 workgroups, enough to keep every SM of a large GPU reading.
const SPLIT_CHUNK: usize = 1 << 12;

fn split(suffix: &str, nout: usize, nred: usize, kind: Kind, table: Vec<u32>) -> Option<GpuKernel> {
    let chunk = SPLIT_CHUNK.max(nred.div_ceil(65_535));
    let chunks = nred.div_ceil(chunk);
    let (first, last) = match suffix {
        "f32" => ("reduce_split_f32", "reduce_split_f32_final"),
        "f16" => ("reduce_split_f16", "reduce_split_f16_final"),
        "i32" => ("reduce_split_i32", "reduce_split_i32_final"),
        "i64" => ("reduce_split_i64", "reduce_split_i64_final"),
        _ => return None,
    };
    let buffers = vec![
        BufRef::Input(0),
        BufRef::Scratch(0),
        BufRef::Scratch(1),
        BufRef::Output(0),
        BufRef::Table(table),
    ];
    let params = vec![
        nout as u32,
        nred as u32,
        kind as u32,
        chunks as u32,
        chunk as u32,
    ];
    Some(GpuKernel {
        // Partial results (8 bytes covers float and int64) and LogSumExp's chunk maxima.
        scratch: vec![(nout * chunks * 8) as u64, (nout * chunks * 4) as u64],
        dispatches: vec![
            Dispatch {
                shader: first,
                buffers: buffers.clone(),
                params: params.clone(),
                groups: [chunks as u32, nout as u32, 1],
            },
            Dispatch {
                shader: last,
                buffers,
                params,
                groups: [nout as u32, 1, 1],
            },
        ],
    })
}

/// `Dispatch::shader` is `&'static str`: map the computed name onto the known variants.
fn shader_name(name: &str) -> Option<&'static str> {
    const NAMES: &[&str] = &[
        "reduce_f32",
        "reduce_f16",
        "reduce_i32",
        "reduce_i64",
        "reduce_f32_row",
        "reduce_f16_row",
        "reduce_i32_row",
        "reduce_i64_row",
        "reduce_i8",
        "reduce_u8",
        "reduce_i8_row",
        "reduce_u8_row",
    ];
    NAMES.iter().copied().find(|n| *n == name)
}
