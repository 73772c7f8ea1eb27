//! The reduction shader's dispatch: one invocation per output for short reductions, one
//! workgroup per output (a shared-memory tree) for long ones. Output and reduced index spaces
//! are described by (size, stride) lists in a table, so any set of axes works.

use super::{Kind, Plan};
use crate::tensor::{DType, strides};
use crate::util::groups_1d;
use crate::{BufRef, Dispatch, GpuKernel};
use vkml_shaders::{reduce, reduce_split};

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
    // Booleans are bytes of 0 and 1: their max (any) and min (all) are uint8's, but for the
    // empty set, whose uint8 minimum (255) is no boolean.
    let empty = plan.axes.iter().any(|&a| plan.shape[a] == 0);
    let dtype = match (dtype, kind) {
        (DType::Bool, Kind::Max | Kind::Min) if !empty => DType::U8,
        (DType::Bool, _) => return None,
        (d, _) => d,
    };
    let float = matches!(dtype, DType::F32 | DType::F16 | DType::F64);
    if !float && matches!(kind, Kind::L2 | Kind::LogSum | Kind::LogSumExp) {
        return None;
    }
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
    if nout <= SPLIT_MAX_OUT
        && nred >= SPLIT_MIN
        && !matches!(dtype, DType::I8 | DType::U8 | DType::F64)
    {
        return split(dtype, nout, nred, kind, table);
    }
    let row = nred >= ROW_MIN;
    let variant = if row {
        by_dtype!(dtype, reduce::Variant, [F32 => F32Row, F16 => F16Row, F64 => F64Row, I32 => I32Row, I64 => I64Row, I8 => I8Row, U8 => U8Row])
    } else {
        by_dtype!(dtype, reduce::Variant, [F32, F16, F64, I32, I64, I8, U8])
    }?;
    let groups = if row {
        let gy = nout.div_ceil(65_535);
        [nout.div_ceil(gy) as u32, u32::try_from(gy).ok()?, 1]
    } else {
        groups_1d(nout, 256)
    };
    Some(GpuKernel {
        scratch: vec![],
        dispatches: vec![Dispatch::new(
            variant,
            reduce::Buffers {
                x: BufRef::Input(0),
                y: BufRef::Output(0),
                t: BufRef::Table(table),
            },
            reduce::Params {
                nout: nout as u32,
                nred: nred as u32,
                op: kind.code(),
            },
            groups,
        )],
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

fn split(dtype: DType, nout: usize, nred: usize, kind: Kind, table: Vec<u32>) -> Option<GpuKernel> {
    use reduce_split::Variant as V;
    let chunk = SPLIT_CHUNK.max(nred.div_ceil(65_535));
    let chunks = nred.div_ceil(chunk);
    let (first, last) = match dtype {
        DType::F32 => (V::F32, V::F32Final),
        DType::F16 => (V::F16, V::F16Final),
        DType::I32 => (V::I32, V::I32Final),
        DType::I64 => (V::I64, V::I64Final),
        _ => return None,
    };
    let buffers = || reduce_split::Buffers {
        x: BufRef::Input(0),
        part: BufRef::Scratch(0),
        pmax: BufRef::Scratch(1),
        y: BufRef::Output(0),
        t: BufRef::Table(table.clone()),
    };
    let params = reduce_split::Params {
        nout: nout as u32,
        nred: nred as u32,
        op: kind.code(),
        chunks: chunks as u32,
        chunk: chunk as u32,
    };
    Some(GpuKernel {
        // Partial results (8 bytes covers float and int64) and LogSumExp's chunk maxima.
        scratch: vec![(nout * chunks * 8) as u64, (nout * chunks * 4) as u64],
        dispatches: vec![
            Dispatch::new(first, buffers(), params, [chunks as u32, nout as u32, 1]),
            Dispatch::new(last, buffers(), params, [nout as u32, 1, 1]),
        ],
    })
}
